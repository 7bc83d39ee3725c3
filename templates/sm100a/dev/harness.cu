// The generated layer of docs/DEVICE_ABI.md for sm100a, as the generator would write it,
// switchable with -D for the compile matrix (dev/compile_matrix.sh):
//   -DFA4_FP16          half instead of bf16
//   -DFA4_DEPTH=64|128  (d64: BN 192, 4 KV stages, 1 qk stage; d128: BN 128, 2, 2)
//   -DFA4_MASK=0|1|2|3  None | Causal | SlidingWindow | And<Causal, Chunked>
//   -DFA4_SCORE_MOD=0|1|2|3  Identity | Softcap | Alibi | a generated struct (user snippet)
//   -DFA4_EXP2_POLY=N   optional Config::kExp2EmulateEvery (0: every exp2 on MUFU; default 4)
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
#else
using Mask = fa4::mask::And<fa4::mask::Causal, fa4::mask::Chunked>;
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
