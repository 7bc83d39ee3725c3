// Epilogue: finish the row sums (quad reduction, optional sink), O = acc / sum converted to
// OutElement, staged through the Q tile (this warp's rows at V's row pitch) so that global stores
// are 16-byte and row-contiguous, clipped to seqlen_q. LSE (natural log) when p.lse is set. O is
// V's width: kDepthV columns (of DV) are stored, and the split partials are kDepthV wide. Each warp
// stores its O slice (columns o_slice * kOCols ..; all of them unless O is split); the LSE, which
// both warps of a split O hold, goes out from slice 0.
// Packed GQA (kPack > 1): tile row r is query r / kPack of head q_head + r % kPack
// (SeqInfo::o_row / lse_row), rows valid below seqlen_q * kPack.
#pragma once
#include "common/combine.cuh"
#include "common/sequence.cuh"
#include "common/softmax.cuh"
#include "sm80/smem_tile.cuh"
#include "sm80/softmax.cuh"

namespace fa4 {
namespace sm80 {

// Precondition: all cp.async into the Q tile have completed CTA-wide and no warp reads Q any
// more (the caller waits and syncs: a narrower V's staging rows overlap other warps' Q rows).
//
// Split-KV (p.num_splits > 1, uniform): instead of O and LSE, this split's O normalised by its
// own sum, in float32, and its LSE go to the partial buffers (common/combine.cuh) for
// fa4_combine. They are stored straight from the C fragments (a quad writes a row's 32
// contiguous bytes per n8 block: whole sectors). Only split 0 adds the sink, so the combine
// counts it once; a split that saw no key writes O = 0 and LSE = -inf (or the sink).
// FP8 KV cache: O (and the partial O) times descale_v of (batch, KV head); `scale` already holds
// descale_k (kernel.cuh), so the LSE and the sink are those of the dequantised scores.
template <class T>
__device__ __forceinline__ void epilogue(float (&o)[T::kMTiles][T::kDTiles][4], softmax::RowState (&rs)[T::kMTiles][2],
                                         float scale, const FwdParams& p, const SeqInfo& seq, int q_lo, int split,
                                         u32 smem_q, int warp, int lane) {
  using V = typename T::VRows;
  using Tile = SmemTile<T, T::kBM, V>;  // O staging, V's rows
  using Out = typename T::OutElement;
  const int g = lane >> 2, t = lane & 3;
  const int warp_row0 = T::row_warp(warp) * T::kWarpRows;
  const int slice = T::o_slice(warp);
  const int d0 = slice * T::kDTiles;  // the slice's first n8 block (16-byte chunk) of O's row
  const bool to_partial = p.num_splits > 1;
  const float o_mul = kv_descaled<T>(1.0f, p.descale_v, p, seq.batch, seq.kv_head);  // 16-bit K/V: 1 (folded away)

#pragma unroll
  for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      softmax::RowState& r = rs[mt][h];
      r.sum = quad_sum(r.sum);
      const int row = warp_row0 + mt * 16 + h * 8 + g;  // row inside the tile
      const int q = q_lo + row;                          // tile row in the sequence (packed row if kPack > 1)
      if (p.sinks != nullptr && split == 0)
        r.add_sink(p.sinks[seq.q_head + PackedRow<T::kPack>::of(q).head] * kLog2e, scale);
      const float inv = T::kFp8KV ? r.inv_sum() * o_mul : r.inv_sum();
      if (to_partial) {
        if (q < seq.seqlen_q * T::kPack) {
          const long long lse_row = seq.lse_row<T::kPack>(p, q);
          float* dst = split::partial_o(p, split, lse_row, V::kDepth) + 2 * t;  // combine reads kDepthV-wide rows
#pragma unroll
          for (int d = 0; d < T::kDTiles; ++d)  // C fragment (row, 8(d0 + d) + 2t..2t+1)
            if (V::kDepth == V::D || (d0 + d) * 8 < V::kDepth)
              st_global_v2_f32(dst + 8 * (d0 + d), o[mt][d][2 * h] * inv, o[mt][d][2 * h + 1] * inv);
          if (t == 0 && slice == 0) split::store_partial_lse(p, split, lse_row, r.lse(scale));
        }
        continue;
      }
#pragma unroll
      for (int d = 0; d < T::kDTiles; ++d)  // C fragment (row, 8(d0 + d) + 2t..2t+1): one 32-bit word
        st_shared_b32(smem_q + Tile::offset(row, d0 + d) + t * 4,
                      pack2<Out>(o[mt][d][2 * h] * inv, o[mt][d][2 * h + 1] * inv));
      if constexpr (T::kPack == 1) {
        if (p.lse != nullptr && t == 0 && slice == 0 && q < seq.seqlen_q) p.lse[seq.lse_offset + q] = r.lse(scale);
      } else {
        if (p.lse != nullptr && t == 0 && slice == 0 && q < seq.seqlen_q * T::kPack)
          p.lse[seq.lse_row<T::kPack>(p, q)] = r.lse(scale);
      }
    }
  if (to_partial) return;
  __syncwarp();

  // Each lane copies 16-byte chunks of the warp's rows and O slice (kDTiles chunks a row):
  // consecutive lanes take consecutive chunks of a row, so a warp stores whole row slices.
  Out* out = static_cast<Out*>(p.o) + (T::kPack == 1 ? seq.o_offset : 0);
  constexpr int kTotal = T::kWarpRows * T::kDTiles;
  static_assert(kTotal % 32 == 0, "epilogue: warp rows * chunks must be a multiple of 32");
#pragma unroll
  for (int i = 0; i < kTotal / 32; ++i) {
    const int idx = lane + i * 32;
    const int row = warp_row0 + idx / T::kDTiles, chunk = d0 + idx % T::kDTiles;
    const int q = q_lo + row;
    if (q < seq.seqlen_q * T::kPack && (V::kDepth == V::D || chunk * 8 < V::kDepth)) {
      u32 v[4];
      ld_shared_v4(smem_q + Tile::offset(row, chunk), v);
      if constexpr (T::kPack == 1) st_global_v4(out + (long long)q * p.o_row_stride + chunk * 8, v);
      else st_global_v4(out + seq.o_row<T::kPack>(p, q) + chunk * 8, v);
    }
  }
}

}  // namespace sm80
}  // namespace fa4
