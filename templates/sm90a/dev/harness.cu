// Dev harness: exactly the generated layer of docs/DEVICE_ABI.md for sm90a.
// -DFA4_FP16 (half_t instead of bf16_t), -DFA4_DEPTH=64|96|128|192|256 (96: padded to 128), -DFA4_CAUSAL, -DFA4_SOFTCAP,
// -DFA4_STAGES=2..4, -DFA4_BN=64|80|112|176 (176: d128, 112: d192, 80: d256; 2 stages), -DFA4_BM=192 (3 consumer warpgroups, 512 threads, depth 64), -DFA4_CFG_SIMPLE (Config members select the simple schedule),
// -DFA4_PERSISTENT=0|1 (Config::kPersistent; absent = 0), -DFA4_PACK=g (Config::kPack, GQA packing; absent = 1),
// -DFA4_CUSTOM_MASK (a generated-style user mask with a block snippet: fa4::mask::Custom),
// -DFA4_SCORE_MOD_USER (a generated-style user score-mod reading (b, h, q, kv)).
// Like the generator it includes common/combine.cuh and emits the fa4_combine entry (split-KV).
// Build: templates/sm90a/dev/compile_matrix.sh
#ifndef FA4_DEPTH
#define FA4_DEPTH 128
#endif
#ifndef FA4_STAGES
#define FA4_STAGES 2
#endif
#ifndef FA4_BN
#define FA4_BN 128
#endif
#ifndef FA4_BM
#define FA4_BM 128
#endif
#include "common/prelude.cuh"
#include "common/sequence.cuh"
#include "common/mask.cuh"
#include "common/score_mod.cuh"
#include "common/softmax.cuh"
#include "common/combine.cuh"
namespace fa4 { namespace gen {
struct Config {
#ifdef FA4_FP16
  using Element = fa4::half_t;
  using OutElement = fa4::half_t;
#else
  using Element = fa4::bf16_t;
  using OutElement = fa4::bf16_t;
#endif
  static constexpr int kDepth = FA4_DEPTH, kPaddedDepth = (FA4_DEPTH + 63) / 64 * 64;
  static constexpr int kBM = FA4_BM, kBN = FA4_BN, kBK0 = 64, kBK1 = 64;
  static constexpr int kNumQHeads = 0, kGroup = 0;
  static constexpr int kNumKVStages = FA4_STAGES, kNumQKStages = 1, kNumMMAStages = 1;
  static constexpr int kSwizzleBytes = 128;
  static constexpr int kNumThreads = 128 * (1 + kBM / 64);
  static constexpr int kGridSmemBytes = 2 * (kBM * kPaddedDepth + 2 * kNumKVStages * kBN * kPaddedDepth) + 1024;
  static constexpr int kArch = 90;
#ifdef FA4_PERSISTENT  // persistent tile scheduler (grid = min(#SMs, tiles)); absent = classic grid
  static constexpr int kPersistent = FA4_PERSISTENT;
  // Persistent CTAs add an O staging region where it fits (SmemLayout::kOwnO; the generator's rule).
  static constexpr int kOwnOBytes = 2 * kBM * kPaddedDepth;
  static constexpr int kSmemBytes =
      kGridSmemBytes + (FA4_PERSISTENT != 0 && kGridSmemBytes + kOwnOBytes <= 232448 ? kOwnOBytes : 0);
#else
  static constexpr int kSmemBytes = kGridSmemBytes;
#endif
#ifdef FA4_PACK  // GQA packing (the generator always emits kPack: group when pack_gqa, else 1)
  static constexpr int kPack = FA4_PACK;
#endif
#ifdef FA4_CFG_SIMPLE  // optional members the kernel detects (override the FA4_SM90A_* switches)
  static constexpr bool kIntraWGOverlap = false, kPingPong = false;
#endif
};
#ifdef FA4_CUSTOM_MASK
// What the generator emits for Mask::custom with a block snippet: a per-head prefix LM (keys below
// 128 * (h + 1) * aux_scalar[1] visible to every query, causal after that).
struct UserMask0 {
  __device__ __forceinline__ static bool eval(int b, int h, int q_idx, int kv_idx, const fa4::FwdParams& params) {
    (void)b;
    return kv_idx <= q_idx || kv_idx < static_cast<int>(128.0f * (h + 1) * params.aux_scalar[1]);
  }
  __device__ __forceinline__ static int block(int b, int h, int q_lo, int q_hi, int kv_lo, int kv_hi,
                                              const fa4::FwdParams& params) {
    (void)b;
    const int prefix = static_cast<int>(128.0f * (h + 1) * params.aux_scalar[1]);
    if (kv_hi - 1 <= q_lo || kv_hi <= prefix) return fa4::mask::kFull;
    if (kv_lo > q_hi - 1 && kv_lo >= prefix) return fa4::mask::kSkip;
    return fa4::mask::kPartial;
  }
};
#ifdef FA4_CAUSAL
using Mask = fa4::mask::And<fa4::mask::Causal, fa4::mask::Custom<UserMask0>>;
#else
using Mask = fa4::mask::Custom<UserMask0>;
#endif
#elif defined(FA4_CAUSAL)
using Mask = fa4::mask::Causal;
#else
using Mask = fa4::mask::None;
#endif
#ifdef FA4_SCORE_MOD_USER
struct ScoreMod {  // what the generator emits for a user score-mod: per-head bias by distance
  static constexpr bool kIsIdentity = false;
  __device__ __forceinline__ float operator()(float score, int b, int h, int q_idx, int kv_idx,
                                              const fa4::FwdParams& params) const {
    const float slope = static_cast<const float*>(params.aux_ptr[2])[h];
    return score - slope * static_cast<float>(q_idx - kv_idx) + params.aux_scalar[0] * (b & 1);
  }
};
#elif defined(FA4_SOFTCAP)
using ScoreMod = fa4::score_mod::Softcap;
#else
using ScoreMod = fa4::score_mod::Identity;
#endif
}}
#include "sm90a/kernel.cuh"
extern "C" __global__ void __launch_bounds__(fa4::gen::Config::kNumThreads, 1)
fa4_fwd(const __grid_constant__ fa4::FwdParams params, const __grid_constant__ fa4::TmaDescs tma) {
  fa4::sm90a::attention_fwd<fa4::gen::Config, fa4::gen::Mask, fa4::gen::ScoreMod>(params, tma);
}
extern "C" __global__ void __launch_bounds__(fa4::kCombineThreads)
fa4_combine(const __grid_constant__ fa4::FwdParams params) {
  fa4::split::combine<fa4::gen::Config>(params);
}
