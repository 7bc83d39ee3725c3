// Online softmax on the S accumulator fragments of one KV tile. A row of S lives in the four
// lanes of a quad (lanes 4g..4g+3 hold rows g and g+8 of each m16 block), so row reductions
// are two xor-shuffles. The running state and the lazy-rescale rule are fa4::softmax::RowState.
//
// Row sums stay per-lane partial sums through the KV loop (each lane sums its own columns,
// all four lanes apply the same correction because the max is quad-uniform); the epilogue
// reduces them once.
#pragma once
#include "common/mask.cuh"
#include "common/sequence.cuh"
#include "common/softmax.cuh"
#include "sm80/traits.cuh"

namespace fa4 {
namespace sm80 {

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// FP8 KV cache: x times the dequantisation factor (descale_k or descale_v, float32
// [batch][num_kv_heads], null = 1) of (batch, kv_head), indexed as sm90a's WgSoftmax::descale and
// FP8 epilogue do (packed GQA: the CTA's one KV head). 16-bit K/V: x.
template <class T>
__device__ __forceinline__ float kv_descaled(float x, const float* descale, const FwdParams& p, int batch, int kv_head) {
  if constexpr (T::kFp8KV) return descale != nullptr ? x * descale[batch * p.num_kv_heads + kv_head] : x;
  else return x;
}

// The mask context of one packed row: the mask sees the row's own head.
__device__ __forceinline__ mask::Ctx row_ctx(const mask::Ctx& ctx, int head_offset) {
  mask::Ctx c = ctx;
  c.q_head += head_offset;
  return c;
}

// Score-mod and mask on the raw S = Q K^T of one tile. Element e of n-block j of m-block mt is
// tile row r = q_row0 + mt*16 + (e/2)*8, key k_col0 + j*8 + (e%2), with q_row0 = this lane's
// first tile row and k_col0 = tile start + 2t. Tile rows are packed rows (PackedRow<kPack>):
// query r / kPack of head ctx.q_head + r % kPack (kPack == 1: query r of ctx.q_head). Identity
// score-mods keep S raw (the scale is folded into the exp2 FMA); others leave log2-domain
// logits. `partial`: apply Mask::visible and k < seqlen_k. FP8 KV cache: score-mods see
// S * qk_mul (softmax_scale * descale_k, kv_descaled) instead of S * softmax_scale; unused otherwise.
template <class T, class Mask, class ScoreMod>
__device__ __forceinline__ void score_mod_and_mask(float (&s)[T::kMTiles][T::kNTiles][4], bool partial, int q_row0,
                                                   int k_col0, const mask::Ctx& ctx, const FwdParams& p,
                                                   float qk_mul) {
  using Row = PackedRow<T::kPack>;
  // Packed rows: the per-row (query, head) pairs are loop-invariant, and hoisted they would hold
  // registers across the KV loop; opaque, they are recomputed per tile (shifts and adds).
  if constexpr (T::kPack > 1) asm volatile("" : "+r"(q_row0));
  if constexpr (!ScoreMod::kIsIdentity) {
    // Indices clamped into the sequence (those elements are masked (k) or never stored (q)).
    const ScoreMod mod_in_seq = score_mod::for_sequence<ScoreMod>(ctx, p);
    ScoreMod row_mod[T::kMTiles][2];  // per row: packed rows of other heads (score_mod::for_head)
#pragma unroll
    for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r)
        row_mod[mt][r] = T::kPack > 1 ? score_mod::for_head(mod_in_seq, ctx.q_head + Row::of(q_row0 + mt * 16 + r * 8).head, p)
                                      : mod_in_seq;
#pragma unroll
    for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const Row row = Row::of(q_row0 + mt * 16 + r * 8);
        const score_mod::RowMod<ScoreMod> along = score_mod::along_row(
            row_mod[mt][r], ctx.batch, ctx.q_head + row.head, min(row.q, ctx.seqlen_q - 1), k_col0, ctx.seqlen_k - 1, p);
#pragma unroll
        for (int j = 0; j < T::kNTiles; ++j)
#pragma unroll
          for (int e = r * 2; e < r * 2 + 2; ++e)
            s[mt][j][e] = along(s[mt][j][e] * (T::kFp8KV ? qk_mul : p.softmax_scale), j * 8 + (e & 1), p) * kLog2e;
      }
  }
  if (partial) {
#pragma unroll
    for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
      for (int j = 0; j < T::kNTiles; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const Row row = Row::of(q_row0 + mt * 16 + (e >> 1) * 8);
          const int k = k_col0 + j * 8 + (e & 1);
          bool vis = k < ctx.seqlen_k;
          if constexpr (!Mask::kIsNone) {
            if constexpr (T::kPack == 1) vis = Mask::visible(row.q, k, ctx) && vis;
            else vis = Mask::visible(row.q, k, row_ctx(ctx, row.head)) && vis;
          }
          if (!vis) s[mt][j][e] = kNegInf;
        }
  }
}

// Folds the tile into the running state: new max, O correction (only when a row's max moved
// beyond the lazy threshold somewhere in the warp), S overwritten by P = exp2(s*scale - bias),
// partial row sums updated. `scale` is p.scale_log2 (identity) or 1 (log2-domain logits).
template <class T>
__device__ __forceinline__ void online_softmax(float (&s)[T::kMTiles][T::kNTiles][4],
                                               float (&o)[T::kMTiles][T::kDTiles][4],
                                               softmax::RowState (&rs)[T::kMTiles][2], float scale) {
  float corr[T::kMTiles][2];
  bool rescale = false;
#pragma unroll
  for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = kNegInf;
#pragma unroll
      for (int j = 0; j < T::kNTiles; ++j) mx = fmaxf(mx, fmaxf(s[mt][j][2 * h], s[mt][j][2 * h + 1]));
      corr[mt][h] = rs[mt][h].update_max(quad_max(mx), scale);
      rescale |= corr[mt][h] != 1.0f;
    }
  if (__any_sync(0xffffffffu, rescale)) {  // warp-uniform branch; rows that kept their max multiply by 1
#pragma unroll
    for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
      for (int d = 0; d < T::kDTiles; ++d) {
        o[mt][d][0] *= corr[mt][0];
        o[mt][d][1] *= corr[mt][0];
        o[mt][d][2] *= corr[mt][1];
        o[mt][d][3] *= corr[mt][1];
      }
  }
#pragma unroll
  for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float bias = rs[mt][h].exp_bias(scale);  // 0 for a row with no visible key yet: exp2(-inf) = 0
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < T::kNTiles; ++j)
#pragma unroll
        for (int e = 2 * h; e < 2 * h + 2; ++e) {
          const float pr = exp2_approx(fmaf(s[mt][j][e], scale, -bias));
          s[mt][j][e] = pr;
          sum += pr;
        }
      rs[mt][h].sum = fmaf(rs[mt][h].sum, corr[mt][h], sum);
    }
}

}  // namespace sm80
}  // namespace fa4
