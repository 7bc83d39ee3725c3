// sm100a (templates/sm100a): FA4's tcgen05 kernel with S and O in TMEM, TMA loads (sm_100a,
// sm_100f, sm_103a).
#include <algorithm>

#include <fmt/format.h>

#include "fa4jit/errors.hpp"
#include "generator/backends/backend.hpp"

namespace jit::detail {

namespace {

class Sm100a final : public BackendPolicy {
 public:
  Backend backend() const override { return Backend::blackwell; }
  std::vector<int> depths() const override { return {64, 128}; }

  // The seeds' FA4Config: TMEM holds S0, S1 (BN columns each) and O0, O1 (Dp each) in 512
  // columns; shared memory holds Q (BM x Dp), the K and V rings, correction scalars, barriers.
  Budget derive(FA4Config& c, int dp, const ArchInfo& a) const override {
    // FP8 (dtype e4m3: Q, K, V in e4m3, both MMAs tcgen05 kind::f8f6f4, P as e4m3 in TMEM, V read
    // MN-major as in the 16-bit kernel): resolve pads the depth to 128 (one 128-byte e4m3 row;
    // depths 64 and 128), K lands in one chunk (BK0 = Dp), the K and V rings hold 1-byte elements and
    // the Q regions stay sized for the 16-bit O staged in them. Compiled, never run (docs/BLACKWELL.md).
    const bool fp8 = c.dtype == DType::e4m3;
    if (fp8 && dp != 128)
      refuse("depth", fmt::format("{} (padded {}) with dtype e4m3 on {}", c.depth, dp, c.arch),
             "64 or 128 (padded to one 128-byte e4m3 row) for FP8 on the sm100a backend");
    // FP8 KV cache (kv_dtype e4m3 under a bf16/fp16 dtype; resolve allows nothing else and pads
    // the depth to 128, whole 128-byte e4m3 rows): TMA lands each K and V tile as e4m3 in a ring of
    // its own, one slot per tile (BN x Dp bytes), and warps 14-15 widen it into the 16-bit K/V
    // rings the MMAs read (templates/sm100a/convert.cuh). The kernel takes the slot count from
    // kSmemBytes, so the budget below is exact.
    const bool f8_kv = c.kv_dtype.has_value();
    if (f8_kv && (*c.kv_dtype != DType::e4m3 || dp != 128))
      refuse("kv_dtype", fmt::format("{} at padded depth {} on {}", to_string(*c.kv_dtype), dp, c.arch),
             "e4m3 with a bf16/fp16 dtype at padded depth 128 on the sm100a backend");
    constexpr int kTmemColumns = 512;
    c.BM = pick("BM", c.BM, 256, {256});
    const int bn_max = std::min(256, (kTmemColumns / 2 - dp) / 16 * 16);
    if (c.BN != 0 && (c.BN % 16 != 0 || c.BN < 64 || 2 * c.BN + 2 * dp > kTmemColumns))
      refuse(
          "BN", std::to_string(c.BN),
          fmt::format("need a multiple of 16, >= 64, with 2*BN + 2*padded_depth <= 512 TMEM columns (max {})", bn_max));
    c.BN = c.BN ? c.BN : bn_max;
    c.num_qk_stages = fp8 ? pick("num_qk_stages", c.num_qk_stages, 1, {1})
                          : pick("num_qk_stages", c.num_qk_stages, dp >= 128 ? 2 : 1, {1, 2});
    c.BK0 = pick("BK0", c.BK0, dp / c.num_qk_stages, {dp / c.num_qk_stages});
    // Q regions (sized for the 16-bit O staged there), correction factors, barriers; per stage one K
    // and one V tile of dtype elements.
    const int fixed = 2 * c.BM * dp + c.BM * 4 + 1024;
    const int per_stage = 2 * dtype_size(c.dtype) * c.BN * dp;
    // e4m3 ring: at least 2 slots (K(n) and V(n) in flight together), at most 4.
    const int f8_slot = f8_kv ? c.BN * dp : 0, f8_min = f8_kv ? 2 : 0;
    const int fit = (a.max_smem - fixed - f8_min * f8_slot) / per_stage;
    if (c.num_kv_stages == 0) c.num_kv_stages = std::min(fit, 8);
    if (c.num_kv_stages < 2 || c.num_kv_stages > fit)
      throw ConfigError(fmt::format(
          "num_kv_stages: {} does not fit; BN={} at depth {} allows 2..{} stages in {} bytes of shared memory{}",
          c.num_kv_stages, c.BN, c.depth, fit, a.max_smem,
          f8_kv ? fmt::format(" (with {} bytes for 2 e4m3 K/V slots)", 2 * f8_slot) : std::string()));
    const int f8_slots = f8_kv ? std::min((a.max_smem - fixed - c.num_kv_stages * per_stage) / f8_slot, 4) : 0;
    return {512, fixed + c.num_kv_stages * per_stage + f8_slots * f8_slot};
  }

  // One 128-row MMA tile of the CTA's two.
  int q_box_rows(const FA4Config& c) const override { return c.BM / 2; }

  Tuning default_tuning(const FA4Config&, int) const override {
    Tuning t;
    // FA4: MUFU did not scale with the tensor cores, so one exp2 pair in 4 goes to the FMA pipe.
    t.exp2_emulate_every = 4;
    return t;
  }

  // The tile walks are sm90a's schedulers; sm100a runs the grid.
  void settle(Tuning& t, Budget&, const FA4Config&, int, const ArchInfo&) const override { t.persistent = 0; }

  bool uses_tma() const override { return true; }
  bool lpt_order() const override { return true; }

  // sm_100f runs on every sm_10x; the 'a' targets on their own sm only.
  bool runs_on(const ResolvedConfig& rc, int sm) const override {
    return rc.config.arch == "sm_100f" ? sm / 10 == 10 : sm == rc.sm;
  }

  int paged_kv_box_rows(const ResolvedConfig& rc, long long page_size) const override {
    return tma_paged_kv_box_rows(rc, page_size);
  }
};

}  // namespace

const BackendPolicy& sm100a_policy() {
  static const Sm100a p;
  return p;
}

}  // namespace jit::detail
