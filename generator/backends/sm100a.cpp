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
    // FP8 (tcgen05 kind::f8f6f4) is not written for this backend yet: refused before anything compiles.
    if (c.dtype == DType::e4m3)
      refuse("dtype", fmt::format("e4m3 on {}", c.arch),
             "bf16 or fp16 on the sm100a backend for now (FP8 attention runs on sm_90a)");
    constexpr int kTmemColumns = 512;
    c.BM = pick("BM", c.BM, 256, {256});
    const int bn_max = std::min(256, (kTmemColumns / 2 - dp) / 16 * 16);
    if (c.BN != 0 && (c.BN % 16 != 0 || c.BN < 64 || 2 * c.BN + 2 * dp > kTmemColumns))
      refuse(
          "BN", std::to_string(c.BN),
          fmt::format("need a multiple of 16, >= 64, with 2*BN + 2*padded_depth <= 512 TMEM columns (max {})", bn_max));
    c.BN = c.BN ? c.BN : bn_max;
    c.num_qk_stages = pick("num_qk_stages", c.num_qk_stages, dp >= 128 ? 2 : 1, {1, 2});
    c.BK0 = pick("BK0", c.BK0, dp / c.num_qk_stages, {dp / c.num_qk_stages});
    const int fixed = 2 * c.BM * dp + c.BM * 4 + 1024;
    const int per_stage = 2 * 2 * c.BN * dp;
    const int fit = (a.max_smem - fixed) / per_stage;
    if (c.num_kv_stages == 0) c.num_kv_stages = std::min(fit, 8);
    if (c.num_kv_stages < 2 || c.num_kv_stages > fit)
      throw ConfigError(fmt::format(
          "num_kv_stages: {} does not fit; BN={} at depth {} allows 2..{} stages in {} bytes of shared memory",
          c.num_kv_stages, c.BN, c.depth, fit, a.max_smem));
    return {512, fixed + c.num_kv_stages * per_stage};
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
