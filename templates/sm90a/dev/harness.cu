// Dev harness: exactly the generated layer of docs/DEVICE_ABI.md for sm90a.
// -DFA4_FP16 (half_t instead of bf16_t), -DFA4_DEPTH=64|128, -DFA4_CAUSAL, -DFA4_SOFTCAP,
// -DFA4_STAGES=2..4, -DFA4_BN=64|176 (176: d128, 2 stages), -DFA4_BM=192 (3 consumer warpgroups, 512 threads, depth 64), -DFA4_CFG_SIMPLE (Config members select the simple schedule),
// -DFA4_PERSISTENT=0|1 (Config::kPersistent; absent = 0). Build: templates/sm90a/dev/compile_matrix.sh
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
namespace fa4 { namespace gen {
struct Config {
#ifdef FA4_FP16
  using Element = fa4::half_t;
  using OutElement = fa4::half_t;
#else
  using Element = fa4::bf16_t;
  using OutElement = fa4::bf16_t;
#endif
  static constexpr int kDepth = FA4_DEPTH, kPaddedDepth = FA4_DEPTH;
  static constexpr int kBM = FA4_BM, kBN = FA4_BN, kBK0 = 64, kBK1 = 64;
  static constexpr int kNumQHeads = 0, kGroup = 0;
  static constexpr int kNumKVStages = FA4_STAGES, kNumQKStages = 1, kNumMMAStages = 1;
  static constexpr int kSwizzleBytes = 128;
  static constexpr int kNumThreads = 128 * (1 + kBM / 64);
  static constexpr int kSmemBytes = 2 * (kBM * kPaddedDepth + 2 * kNumKVStages * kBN * kPaddedDepth) + 1024;
  static constexpr int kArch = 90;
#ifdef FA4_PERSISTENT  // persistent tile scheduler (grid = min(#SMs, tiles)); absent = classic grid
  static constexpr int kPersistent = FA4_PERSISTENT;
#endif
#ifdef FA4_CFG_SIMPLE  // optional members the kernel detects (override the FA4_SM90A_* switches)
  static constexpr bool kIntraWGOverlap = false, kPingPong = false;
#endif
};
#ifdef FA4_CAUSAL
using Mask = fa4::mask::Causal;
#else
using Mask = fa4::mask::None;
#endif
#ifdef FA4_SOFTCAP
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
