// Dev harness: exactly the generated layer of docs/DEVICE_ABI.md, with -D switches so
// dev/compile_matrix.sh can build the config matrix with nvcc.
//   FA4_DTYPE  = bf16_t | half_t      (default bf16_t)
//   FA4_DEPTH  = 64 | 96 | 128 | 256  (default 128); FA4_PADDED_DEPTH (default FA4_DEPTH)
//   FA4_BM, FA4_BN                    (default 128 and the host rule: 128 for depth <= 64, else 64)
//   FA4_STAGES                        (kNumKVStages, default 2)
//   FA4_MASK   = None | Causal | SlidingWindow | Chunked | CausalOrChunked | DevCustom |
//                CausalAndDevCustom                        (default Causal; DevCustom: a user mask
//                with a block snippet, so classify() also reads the run-time block mask)
//   FA4_SCORE_MOD = Identity | Softcap | Alibi             (default Identity)
//   FA4_PACK   = 1 | group                                 (kPack: GQA packing, default 1)
// Paged KV and split-KV are run-time paths (p.page_table, p.num_splits): every config compiles them.
#ifndef FA4_DTYPE
#define FA4_DTYPE bf16_t
#endif
#ifndef FA4_DEPTH
#define FA4_DEPTH 128
#endif
#ifndef FA4_PADDED_DEPTH
#define FA4_PADDED_DEPTH FA4_DEPTH
#endif
#ifndef FA4_BM
#define FA4_BM 128
#endif
#ifndef FA4_BN
#define FA4_BN (FA4_DEPTH <= 64 ? 128 : 64)
#endif
#ifndef FA4_STAGES
#define FA4_STAGES 2
#endif
#ifndef FA4_MASK
#define FA4_MASK Causal
#endif
#ifndef FA4_SCORE_MOD
#define FA4_SCORE_MOD Identity
#endif
#ifndef FA4_PACK
#define FA4_PACK 1
#endif

#include "common/prelude.cuh"      // types, pack2/to_float, exp2_approx, FwdParams, TmaDescs
#include "common/sequence.cuh"     // SeqInfo: per (batch, head) lengths and offsets (varlen-aware)
#include "common/mask.cuh"         // fa4::mask::{None, Causal, SlidingWindow, Chunked, And, Or}
#include "common/score_mod.cuh"    // fa4::score_mod::{Identity, Softcap, Alibi}
#include "common/softmax.cuh"      // fa4::softmax::{RowState, exp2_poly3, kRescaleThresholdLog2}
#include "common/combine.cuh"      // fa4::split: partial O / LSE, fa4_combine
namespace fa4 { namespace gen {
// What generator/source.cpp emits for Mask::custom(body, block_body): a strided block-sparse
// pattern per head, with a block snippet that knows which 128 x 128 blocks are empty or full.
struct UserMask0 {
  __device__ __forceinline__ static bool eval(int b, int h, int q_idx, int kv_idx, const fa4::FwdParams& params) {
    const void* const* aux = params.aux_ptr; const float* scalars = params.aux_scalar;
    (void)b; (void)h; (void)q_idx; (void)kv_idx; (void)aux; (void)scalars;
    return ((q_idx >> 7) + (kv_idx >> 7) + h) % 3 != 0 && kv_idx % 7 != 3;
  }
  __device__ __forceinline__ static int block(int b, int h, int q_lo, int q_hi, int kv_lo, int kv_hi,
                                             const fa4::FwdParams& params) {
    const void* const* aux = params.aux_ptr; const float* scalars = params.aux_scalar;
    constexpr int SKIP = fa4::mask::kSkip, FULL = fa4::mask::kFull, PARTIAL = fa4::mask::kPartial;
    (void)b; (void)h; (void)q_lo; (void)q_hi; (void)kv_lo; (void)kv_hi; (void)aux; (void)scalars;
    (void)SKIP; (void)FULL;
    if ((q_lo >> 7) != ((q_hi - 1) >> 7) || (kv_lo >> 7) != ((kv_hi - 1) >> 7)) return PARTIAL;
    return ((q_lo >> 7) + (kv_lo >> 7) + h) % 3 == 0 ? SKIP : PARTIAL;
  }
};
}}
namespace fa4 { namespace mask {  // dev-only aliases: nvcc splits -D values at commas
using CausalOrChunked = Or<Causal, Chunked>;
using DevCustom = Custom<gen::UserMask0>;
using CausalAndDevCustom = And<Causal, Custom<gen::UserMask0>>;
}}
namespace fa4 { namespace gen {
struct Config {
  using Element = fa4::FA4_DTYPE;
  using OutElement = fa4::FA4_DTYPE;
  static constexpr int kDepth = FA4_DEPTH, kPaddedDepth = FA4_PADDED_DEPTH;
  static constexpr int kBM = FA4_BM, kBN = FA4_BN, kBK0 = FA4_PADDED_DEPTH, kBK1 = FA4_BN;
  static constexpr int kNumQHeads = 0, kGroup = 0;   // 0 = decided at run time (params)
  static constexpr int kNumKVStages = FA4_STAGES, kNumQKStages = 1, kNumMMAStages = 1;
  static constexpr int kSwizzleBytes = 128;
  static constexpr int kNumThreads = 128;
  static constexpr int kSmemBytes = 2 * (kBM * kPaddedDepth + 2 * kNumKVStages * kBN * kPaddedDepth);
  static constexpr int kArch = 80;
  static constexpr int kExp2EmulateEvery = 0, kIntraWGOverlap = 0, kPingPong = 0, kPersistent = 0;
  static constexpr int kPack = FA4_PACK;
};
using Mask = fa4::mask::FA4_MASK;
using ScoreMod = fa4::score_mod::FA4_SCORE_MOD;
}}
#include "sm80/kernel.cuh"
extern "C" __global__ void __launch_bounds__(fa4::gen::Config::kNumThreads, 1)
fa4_fwd(const __grid_constant__ fa4::FwdParams params) {
  fa4::sm80::attention_fwd<fa4::gen::Config, fa4::gen::Mask, fa4::gen::ScoreMod>(params);
}
extern "C" __global__ void __launch_bounds__(fa4::kCombineThreads)
fa4_combine(const __grid_constant__ fa4::FwdParams params) {
  fa4::split::combine<fa4::gen::Config>(params);
}
