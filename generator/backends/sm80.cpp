// sm80 (templates/sm80): the portable mma.sync kernel every arch without its own backend runs
// (sm_80 ... sm_120, plain sm_90 and sm_100). Plain loads (no TMA), one CTA per tile, grid order.
#include <string>
#include <vector>

#include <fmt/format.h>

#include "fa4jit/errors.hpp"
#include "generator/backends/backend.hpp"
#include "sm80/abi.h"  // templates/sm80/abi.h: the kernel's warps, accumulator budget, shared memory

namespace jit::detail {

namespace {

namespace abi = fa4::sm80::abi;

class Sm80 final : public BackendPolicy {
 public:
  Backend backend() const override { return Backend::portable; }
  // 96 (Phi-3) runs padded to 128: the loads zero-fill columns 96..127, the epilogue clips them
  // (smem_tile.cuh, epilogue.cuh). 512: O split over two warps per 16 rows (abi.h o_split).
  std::vector<int> depths() const override { return {64, 96, 128, 192, 256, 512}; }
  // DeepSeek-V3 / Kimi-K2 prefill (MLA without absorption): Q/K 128 + 64 rope columns, V 128.
  std::vector<int> depths_v(int depth) const override {
    return depth == 192 ? std::vector<int>{128} : std::vector<int>{};
  }

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
    // The FP8 KV cache stays at the depths it was built and measured for (64, 128; 96 padded to 128); at 192 the e4m3
    // staging rows (12 chunks of 16 bytes) do not split evenly over 128 threads (E4m3Tile).
    if (fp8_kv && dp > 128)
      refuse("depth", fmt::format("{} with kv_dtype e4m3", c.depth),
             fmt::format("64, 96 or 128 for an FP8 KV cache on {}", c.arch));
    const int dpv = padded_depth_v(c, dp);       // V and O (FA4Config::depth_v)
    const bool o_split = abi::o_split(dpv) > 1;  // V 512: two warps per 16 rows, each half of O
    // Q tile, K and V rings (16-bit; V's stages DpV wide); FP8 KV cache: Q, one 16-bit K and V
    // stage, and the e4m3 rings.
    auto smem_for = [&](int bm, int bn, int stages) { return abi::smem_bytes(bm, bn, dp, dpv, stages, fp8_kv); };
    // O and S live in registers through the KV loop, at most 192 floats per thread (abi.h
    // accumulators). A V of 192 or 256 fits with 64 rows (16 per warp, as FA2's d256), a 128-wide
    // one with 128, a 512-wide one with 64 and its O split. V 512 takes BM 32 where two stages of
    // its smallest BN (16) beside a 64-row Q (64 KiB) do not fit: 99 KiB parts (sm_86, sm_89, sm_120).
    int bm_default = abi::accumulators(128, 32, dpv) <= abi::kMaxAccumulators ? 128 : 64;
    if (o_split && smem_for(64, 16, 2) > a.max_smem) bm_default = 32;
    c.BM = pick("BM", c.BM, bm_default, o_split ? std::vector<int>{32, 64} : std::vector<int>{64, 128});
    // BN: 128 at depth 64, else 64; 32 for a V narrower than Q and K (192 / 128), whose BN 64 fills
    // the 192 accumulator floats as depth 128's does while its deeper Q K^T takes more of the loop's
    // registers (ptxas spilled 24 to 56 bytes on sm_80 and sm_90 without a mask or with a sliding
    // window); halved down to 32 where 2 stages would not fit shared memory (99 KiB parts: 32 at
    // depths 192 and 256), to 16 at depth 512 (sm_90: 32; sm_80: 16; 99 KiB parts: 16 at BM 32).
    int bn_default = dp <= 64 ? 128 : dpv < dp ? 32 : 64;
    const int bn_min = o_split ? 16 : 32;
    while (bn_default > bn_min && smem_for(c.BM, bn_default, 2) > a.max_smem) bn_default /= 2;
    c.BN = pick("BN", c.BN, bn_default, o_split ? std::vector<int>{16, 32, 64, 128} : std::vector<int>{32, 64, 128});
    c.BK0 = pick("BK0", c.BK0, dp, {dp});
    c.num_qk_stages = pick("num_qk_stages", c.num_qk_stages, 1, {1});
    // The 16-bit cp.async ring fills one stage while the MMAs read another: two stages (templates/sm80
    // Traits asserts at least two; a refusal here names the field before anything compiles).
    c.num_kv_stages =
        pick("num_kv_stages", c.num_kv_stages, 2, fp8_kv ? std::vector<int>{2, 3, 4} : std::vector<int>{2});
    const int smem = smem_for(c.BM, c.BN, c.num_kv_stages);
    const std::string at_depth = c.depth_v != 0
                                     ? fmt::format("{} (depth_v {})", c.depth, c.depth_v)
                                     : (fp8_kv ? fmt::format("{} (kv_dtype e4m3)", c.depth) : std::to_string(c.depth));
    if (smem > a.max_smem)
      throw ConfigError(fmt::format(
          "BN/BM/num_kv_stages: BM={} BN={} num_kv_stages={} at depth {} need {} bytes of shared memory; {} allows {}",
          c.BM, c.BN, c.num_kv_stages, at_depth, smem, c.arch, a.max_smem));
    if (const int acc = abi::accumulators(c.BM, c.BN, dpv); acc > abi::kMaxAccumulators)
      throw ConfigError(
          fmt::format("BM/BN: BM={} BN={} at depth {} hold {} accumulator floats per thread (O and S); "
                      "the portable kernel allows {} (use BM 64 or a smaller BN)",
                      c.BM, c.BN, at_depth, acc, abi::kMaxAccumulators));
    return {abi::num_threads(c.BM, dpv), smem};
  }

  int q_box_rows(const FA4Config&) const override { return 0; }  // Q comes through plain loads

  Tuning default_tuning(const FA4Config&, int, const Budget&) const override { return Tuning{}; }

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
