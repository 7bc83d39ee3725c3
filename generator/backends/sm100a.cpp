// sm100a (templates/sm100a): FA4's tcgen05 kernel with S and O in TMEM, TMA loads (sm_100a,
// sm_100f, sm_103a).
#include <algorithm>

#include <fmt/format.h>

#include "fa4jit/errors.hpp"
#include "generator/backends/backend.hpp"
#include "sm100a/abi.h"  // templates/sm100a/abi.h: the kernel's TMEM columns, legal kBN, shared memory

namespace jit::detail {

namespace {

namespace abi = fa4::sm100a::abi;

class Sm100a final : public BackendPolicy {
 public:
  Backend backend() const override { return Backend::blackwell; }
  // Depth 96 (Phi-3) runs padded to 128 (TMA zero-fills columns 96..127, the epilogue clips them).
  // Depth 192 runs with V 192 (BN 64: O0 and O1 take 384 of the 512 TMEM columns) and with V 128.
  std::vector<int> depths() const override { return {64, 96, 128, 192}; }
  // DeepSeek-V3 / Kimi-K2 prefill (MLA without absorption): Q/K 128 + 64 rope columns, V 128, the
  // shape FA4 runs on Blackwell: BN 128 (S0, S1, O0, O1: 4 x 128 = 512 TMEM columns).
  std::vector<int> depths_v(int depth) const override {
    return depth == 192 ? std::vector<int>{128} : std::vector<int>{};
  }

  // The seeds' FA4Config: TMEM holds S0, S1 (BN columns each) and O0, O1 (V's padded depth each) in
  // 512 columns; shared memory holds Q (BM x Dp), the K and V rings, correction scalars, barriers
  // (templates/sm100a/abi.h, which the kernel's Traits lay out and assert with).
  Budget derive(FA4Config& c, int dp, const ArchInfo& a) const override {
    // FP8 (dtype e4m3: Q, K, V in e4m3, both MMAs tcgen05 kind::f8f6f4, P as e4m3 in TMEM, V read
    // MN-major as in the 16-bit kernel): resolve pads the depth to 128 (one 128-byte e4m3 row;
    // depths 64, 96 and 128), K lands in one chunk (BK0 = Dp), the K and V rings hold 1-byte elements and
    // the Q regions stay sized for the 16-bit O staged in them. Compiled, never run (docs/BLACKWELL.md).
    const bool fp8 = c.dtype == DType::e4m3;
    if (fp8 && dp != 128)
      refuse("depth", fmt::format("{} (padded {}) with dtype e4m3 on {}", c.depth, dp, c.arch),
             "64, 96 or 128 (padded to one 128-byte e4m3 row) for FP8 on the sm100a backend");
    // FP8 KV cache (kv_dtype e4m3 under a bf16/fp16 dtype; resolve allows nothing else and pads
    // the depth to 128, whole 128-byte e4m3 rows): TMA lands each K and V tile as e4m3 in a ring of
    // its own, one slot per tile (BN x Dp bytes), and warps 14-15 widen it into the 16-bit K/V
    // rings the MMAs read (templates/sm100a/convert.cuh). The kernel takes the slot count from
    // kSmemBytes, so the budget below is exact.
    const bool f8_kv = c.kv_dtype.has_value();
    if (f8_kv && (*c.kv_dtype != DType::e4m3 || dp != 128))
      refuse("kv_dtype", fmt::format("{} at padded depth {} on {}", to_string(*c.kv_dtype), dp, c.arch),
             "e4m3 with a bf16/fp16 dtype at padded depth 128 on the sm100a backend");
    const int dpv = padded_depth_v(c, dp);  // V and O (FA4Config::depth_v)
    c.BM = pick("BM", c.BM, 256, {256});
    const int bn_max = abi::bn_max(dpv);
    if (c.BN != 0 && !abi::bn_legal(c.BN, dpv))
      refuse("BN", std::to_string(c.BN),
             fmt::format("need a multiple of 32 from 64 to 256 with 2*BN + 2*{} <= {} TMEM columns (S0, S1, "
                         "O0, O1; max {})",
                         dpv == dp ? fmt::format("padded_depth ({})", dp) : fmt::format("padded depth_v ({})", dpv),
                         abi::kTmemColumns, bn_max));
    c.BN = c.BN ? c.BN : bn_max;
    // K lands in chunks of whole 64-column boxes along the depth, one barrier each, so S = Q K^T
    // starts on the first while the rest arrive: by default one box a chunk (d128: 2, d192: 3).
    const int boxes = dp / 64;
    std::vector<int> qk_allowed;
    for (int q = 1; q <= boxes; ++q)
      if (boxes % q == 0) qk_allowed.push_back(q);
    c.num_qk_stages = fp8 ? pick("num_qk_stages", c.num_qk_stages, 1, {1})
                          : pick("num_qk_stages", c.num_qk_stages, boxes, qk_allowed);
    c.BK0 = pick("BK0", c.BK0, dp / c.num_qk_stages, {dp / c.num_qk_stages});
    // K/V stages, whole. A V narrower than Q and K keeps the V stages and may hold fewer K chunks
    // (at least one K tile's; abi.h k_slots): at Q/K 192, V 128 and BN 128 two whole stages need
    // 160 KiB beside Q's 96. e4m3 ring of an FP8 KV cache: at least 2 slots (K(n) and V(n) in flight
    // together), at most 4.
    const int e = dtype_size(c.dtype);
    const int f8_slot = f8_kv ? abi::f8_slot_bytes(c.BN, dp) : 0, f8_min = f8_kv ? 2 : 0;
    auto k_slots = [&](int stages) {
      return abi::k_slots(e, c.BM, c.BN, dp, dpv, stages, c.num_qk_stages, a.max_smem - f8_min * f8_slot);
    };
    auto fits = [&](int stages) {
      return dpv < dp ? k_slots(stages) > 0 : k_slots(stages) == stages * c.num_qk_stages;
    };
    // Default: the most whole stages (at most 8), or 2, V(n)'s two slots, beside a smaller K ring.
    int whole = 0, most = 0;
    for (int s = 2; fits(s); ++s) {
      most = s;
      if (k_slots(s) == s * c.num_qk_stages && s <= 8) whole = s;
    }
    if (c.num_kv_stages == 0) c.num_kv_stages = std::max(whole, 2);
    if (c.num_kv_stages < 2 || !fits(c.num_kv_stages))
      throw ConfigError(fmt::format(
          "num_kv_stages: {} does not fit; BN={} at depth {} allows 2..{} stages in {} bytes of shared memory{}",
          c.num_kv_stages, c.BN, c.depth, most, a.max_smem,
          f8_kv ? fmt::format(" (with {} bytes for 2 e4m3 K/V slots)", 2 * f8_slot) : std::string()));
    const int smem16 =
        abi::smem_bytes(e, c.BM, c.BN, dp, dpv, c.num_kv_stages, c.num_qk_stages, k_slots(c.num_kv_stages));
    const int f8_slots = f8_kv ? abi::f8_slots(smem16, c.BN, dp, a.max_smem) : 0;
    return {512, smem16 + f8_slots * f8_slot};  // 16 warps: softmax x 2, correction, MMA / load / convert
  }

  // One 128-row MMA tile of the CTA's two.
  int q_box_rows(const FA4Config& c) const override { return c.BM / 2; }

  Tuning default_tuning(const FA4Config&, int, const Budget&) const override {
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

  // Pages no TMA box takes (page sizes 1, 2, 4, 12, ...): the load warp gathers their rows
  // (templates/sm100a/gather.cuh).
  int paged_kv_box_rows(const ResolvedConfig& rc, long long page_size) const override {
    return tma_paged_kv_box_rows(rc, page_size, nullptr);
  }
};

}  // namespace

const BackendPolicy& sm100a_policy() {
  static const Sm100a p;
  return p;
}

}  // namespace jit::detail
