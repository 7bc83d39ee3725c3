// The generated layer of docs/DEVICE_ABI.md for sm100a, as the generator would write it,
// switchable with -D for the compile matrix (dev/compile_matrix.sh):
//   -DFA4_FP16          half instead of bf16
//   -DFA4_DEPTH=64|128  (d64: BN 192, 4 KV stages, 1 qk stage; d128: BN 128, 2, 2)
//   -DFA4_MASK=0..5     None | Causal | SlidingWindow | And<Causal, Chunked> |
//                       custom with a block snippet (generated Custom<UserMask0>) | custom without one
//   -DFA4_SCORE_MOD=0|1|2|3  Identity | Softcap | Alibi | a generated struct (user snippet)
//   -DFA4_EXP2_POLY=N   optional Config::kExp2EmulateEvery (0: every exp2 on MUFU; default 4)
//   -DFA4_PACK=G        Config::kPack (GQA packing, FA4Config::pack_gqa with group G; default 1)
// Paged KV and split-KV are run-time paths (FwdParams::page_table, num_splits): every variant has them.
#include "common/prelude.cuh"
#include "common/sequence.cuh"
#include "common/mask.cuh"
#include "common/score_mod.cuh"
#include "common/softmax.cuh"

#ifndef FA4_DEPTH
#define FA4_DEPTH 128
#endif
#ifndef FA4_MASK
#define FA4_MASK 0
#endif
#ifndef FA4_SCORE_MOD
#define FA4_SCORE_MOD 0
#endif
#ifndef FA4_PACK
#define FA4_PACK 1
#endif

namespace fa4 {
namespace gen {
struct Config {
#ifdef FA4_FP16
  using Element = fa4::half_t;
  using OutElement = fa4::half_t;
#else
  using Element = fa4::bf16_t;
  using OutElement = fa4::bf16_t;
#endif
  static constexpr int kDepth = FA4_DEPTH, kPaddedDepth = FA4_DEPTH;
#if FA4_DEPTH == 64
  static constexpr int kBM = 256, kBN = 192, kBK0 = 64, kBK1 = 192;
  static constexpr int kNumKVStages = 4, kNumQKStages = 1, kNumMMAStages = 1;
#else
  static constexpr int kBM = 256, kBN = 128, kBK0 = 64, kBK1 = 128;
  static constexpr int kNumKVStages = 2, kNumQKStages = 2, kNumMMAStages = 1;
#endif
  static constexpr int kNumQHeads = 0, kGroup = 0;
  static constexpr int kSwizzleBytes = 128;
  static constexpr int kNumThreads = 512;
  static constexpr int kSmemBytes =
      2 * (kBM * kPaddedDepth + 2 * kNumKVStages * kBN * kPaddedDepth) + kBM * 4 + 1024;
  static constexpr int kArch = 100;
  static constexpr int kPack = FA4_PACK;
#ifdef FA4_EXP2_POLY
  static constexpr int kExp2EmulateEvery = FA4_EXP2_POLY;
#endif
};
#if FA4_MASK == 0
using Mask = fa4::mask::None;
#elif FA4_MASK == 1
using Mask = fa4::mask::Causal;
#elif FA4_MASK == 2
using Mask = fa4::mask::SlidingWindow;
#elif FA4_MASK == 3
using Mask = fa4::mask::And<fa4::mask::Causal, fa4::mask::Chunked>;
#else
// What the generator emits for Mask::custom(body, block_body): eval is the element snippet,
// block the block snippet (PARTIAL when none was given); fa4::mask::Custom adds the run-time
// block mask (FwdParams::block_mask) and the per-head combination. (The generator also declares
// aux / scalars for the snippets; left out here, nvcc warns #550 when a snippet does not use them.)
struct UserMask0 {
  __device__ __forceinline__ static bool eval(int b, int h, int q_idx, int kv_idx,
                                              const fa4::FwdParams& params) {
    (void)b; (void)h; (void)q_idx; (void)kv_idx; (void)params;
#line 1 "user_mask"
    return (q_idx / 64) == (kv_idx / 64) || kv_idx < 4 + h;
  }
  __device__ __forceinline__ static int block(int b, int h, int q_lo, int q_hi, int kv_lo, int kv_hi,
                                             const fa4::FwdParams& params) {
    constexpr int SKIP = fa4::mask::kSkip, FULL = fa4::mask::kFull, PARTIAL = fa4::mask::kPartial;
    (void)b; (void)h; (void)q_lo; (void)q_hi; (void)kv_lo; (void)kv_hi; (void)params;
    (void)SKIP; (void)FULL;
#if FA4_MASK == 4
#line 1 "user_block_mask"
    if (kv_lo >= 4 + h && (kv_hi - 1) / 64 < q_lo / 64) return SKIP;
    if (kv_lo >= 4 + h && kv_lo / 64 > (q_hi - 1) / 64) return SKIP;
    return PARTIAL;
#else
    return PARTIAL;
#endif
  }
};
using Mask = fa4::mask::Custom<UserMask0>;
#endif
#if FA4_SCORE_MOD == 0
using ScoreMod = fa4::score_mod::Identity;
#elif FA4_SCORE_MOD == 1
using ScoreMod = fa4::score_mod::Softcap;
#elif FA4_SCORE_MOD == 2
using ScoreMod = fa4::score_mod::Alibi;
#else
// What the generator emits for a user score-mod snippet: the body under #line.
struct ScoreMod {
  static constexpr bool kIsIdentity = false;
  __device__ __forceinline__ float operator()(float score, int b, int h, int q_idx, int kv_idx,
                                              const fa4::FwdParams& params) const {
#line 1 "user_score_mod"
    const float bias = params.aux_ptr[0] ? static_cast<const float*>(params.aux_ptr[0])[h] : 0.0f;
    return score + bias * static_cast<float>(kv_idx - q_idx) + params.aux_scalar[0] * (b & 1);
  }
};
#endif
}  // namespace gen
}  // namespace fa4
#include "sm100a/kernel.cuh"
extern "C" __global__ void __launch_bounds__(fa4::gen::Config::kNumThreads, 1)
fa4_fwd(const __grid_constant__ fa4::FwdParams params, const __grid_constant__ fa4::TmaDescs tma) {
  fa4::sm100a::attention_fwd<fa4::gen::Config, fa4::gen::Mask, fa4::gen::ScoreMod>(params, tma);
}
