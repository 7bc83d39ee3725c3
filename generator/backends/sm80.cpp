// sm80 (templates/sm80): the portable mma.sync kernel every arch without its own backend runs
// (sm_80 ... sm_120, plain sm_90 and sm_100). Plain loads (no TMA), one CTA per tile, grid order.
#include <string>
#include <vector>

#include <fmt/format.h>

#include "fa4jit/errors.hpp"
#include "generator/backends/backend.hpp"

namespace jit::detail {

namespace {

class Sm80 final : public BackendPolicy {
 public:
  Backend backend() const override { return Backend::portable; }
  std::vector<int> depths() const override { return {64, 128}; }

  Budget derive(FA4Config& c, int dp, const ArchInfo& a) const override {
    // FP8 needs e4m3 tensor-core MMA (sm_89+ mma.sync, sm_90a wgmma); this backend's kernels are
    // 16-bit only (an sm_89 FP8 path could come later).
    if (c.dtype == DType::e4m3)
      refuse("dtype", fmt::format("e4m3 on {}", c.arch),
             "bf16 or fp16 on the portable backend; FP8 attention runs on sm_90a (and compiles for sm_100a)");
    // FP8 KV cache (kv_dtype e4m3 under a 16-bit dtype; resolve() refuses other pairs): cp.async
    // fills num_kv_stages e4m3 K/V stages, each converted into the one 16-bit K/V stage the MMAs
    // read (templates/sm80: KVBuffer::convert), so the MMA code is the 16-bit kernel's.
    const bool fp8_kv = c.kv_dtype.has_value();
    if (fp8_kv && *c.kv_dtype != DType::e4m3)
      refuse("kv_dtype", fmt::format("{} on {}", to_string(*c.kv_dtype), c.arch),
             "e4m3 (an FP8 KV cache) or unset on the portable backend");
    c.BM = pick("BM", c.BM, 128, {64, 128});
    c.BN = pick("BN", c.BN, dp <= 64 ? 128 : 64, {32, 64, 128});
    c.BK0 = pick("BK0", c.BK0, dp, {dp});
    c.num_qk_stages = pick("num_qk_stages", c.num_qk_stages, 1, {1});
    c.num_kv_stages =
        pick("num_kv_stages", c.num_kv_stages, 2, fp8_kv ? std::vector<int>{2, 3, 4} : std::vector<int>{1, 2});
    // Q tile, K and V rings (16-bit); FP8 KV cache: Q, one 16-bit K and V stage, and the e4m3 rings.
    const int smem = fp8_kv ? 2 * (c.BM * dp + 2 * c.BN * dp) + 2 * c.num_kv_stages * c.BN * dp
                            : 2 * (c.BM * dp + 2 * c.num_kv_stages * c.BN * dp);
    if (smem > a.max_smem)
      throw ConfigError(fmt::format(
          "BN/BM/num_kv_stages: BM={} BN={} num_kv_stages={} at depth {} need {} bytes of shared memory; {} allows {}",
          c.BM, c.BN, c.num_kv_stages, fp8_kv ? fmt::format("{} (kv_dtype e4m3)", c.depth) : std::to_string(c.depth),
          smem, c.arch, a.max_smem));
    return {128, smem};
  }

  int q_box_rows(const FA4Config&) const override { return 0; }  // Q comes through plain loads

  Tuning default_tuning(const FA4Config&, int) const override { return Tuning{}; }

  // The tile walks are sm90a's schedulers; sm80 runs the grid.
  void settle(Tuning& t, Budget&, const FA4Config&, int, const ArchInfo&) const override { t.persistent = 0; }

  bool uses_tma() const override { return false; }
  // sm80 decodes its tile from fresh special-register reads to stay within 255 registers
  // (templates/sm80/kernel.cuh cta_tile), so it keeps grid order.
  bool lpt_order() const override { return false; }

  // SASS runs on the same major with an equal or newer minor.
  bool runs_on(const ResolvedConfig& rc, int sm) const override {
    return sm / 10 == rc.sm / 10 && sm % 10 >= rc.sm % 10;
  }

  // Plain loads read each key row through the page table: any page size.
  int paged_kv_box_rows(const ResolvedConfig& rc, long long) const override { return rc.config.BN; }
};

}  // namespace

const BackendPolicy& sm80_policy() {
  static const Sm80 p;
  return p;
}

}  // namespace jit::detail
