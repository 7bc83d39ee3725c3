// Epilogue: finish the row sums (quad reduction, optional sink), O = acc / sum converted to
// OutElement, staged through this warp's own rows of the Q tile so that global stores are
// 16-byte and row-contiguous, clipped to seqlen_q. LSE (natural log) when p.lse is set.
#pragma once
#include "common/sequence.cuh"
#include "common/softmax.cuh"
#include "sm80/smem_tile.cuh"
#include "sm80/softmax.cuh"

namespace fa4 {
namespace sm80 {

// Precondition: all cp.async into the Q tile have completed CTA-wide (the caller waits and
// syncs), and this warp no longer reads its Q rows.
template <class T>
__device__ __forceinline__ void epilogue(float (&o)[T::kMTiles][T::kDTiles][4], softmax::RowState (&rs)[T::kMTiles][2],
                                         float scale, const FwdParams& p, const SeqInfo& seq, int q_lo, u32 smem_q,
                                         int warp, int lane) {
  using Tile = SmemTile<T, T::kBM>;
  using Out = typename T::OutElement;
  const int g = lane >> 2, t = lane & 3;
  const int warp_row0 = warp * T::kWarpRows;

#pragma unroll
  for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      softmax::RowState& r = rs[mt][h];
      r.sum = quad_sum(r.sum);
      if (p.sinks != nullptr) r.add_sink(p.sinks[seq.q_head] * kLog2e, scale);
      const float inv = r.inv_sum();
      const int row = warp_row0 + mt * 16 + h * 8 + g;  // row inside the tile
#pragma unroll
      for (int d = 0; d < T::kDTiles; ++d)  // C fragment (row, 8d + 2t..2t+1): one 32-bit word
        st_shared_b32(smem_q + Tile::offset(row, d) + t * 4, pack2<Out>(o[mt][d][2 * h] * inv, o[mt][d][2 * h + 1] * inv));
      const int q = q_lo + row;
      if (p.lse != nullptr && t == 0 && q < seq.seqlen_q) p.lse[seq.lse_offset + q] = r.lse(scale);
    }
  __syncwarp();

  // Each lane copies 16-byte chunks of the warp's rows: consecutive lanes take consecutive
  // chunks of a row, so a warp stores whole rows.
  Out* out = static_cast<Out*>(p.o) + seq.o_offset;
  constexpr int kTotal = T::kWarpRows * T::kChunks;
  static_assert(kTotal % 32 == 0, "epilogue: warp rows * chunks must be a multiple of 32");
#pragma unroll
  for (int i = 0; i < kTotal / 32; ++i) {
    const int idx = lane + i * 32;
    const int row = warp_row0 + idx / T::kChunks, chunk = idx % T::kChunks;
    const int q = q_lo + row;
    if (q < seq.seqlen_q && (T::kDepth == T::D || chunk * 8 < T::kDepth)) {
      u32 v[4];
      ld_shared_v4(v, smem_q + Tile::offset(row, chunk));
      st_global_v4(out + (long long)q * p.o_row_stride + chunk * 8, v);
    }
  }
}

}  // namespace sm80
}  // namespace fa4
