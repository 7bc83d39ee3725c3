// The Q tile: [kBM][D] in shared memory, loaded once per CTA with cp.async and read back as
// MMA A fragments by ldmatrix for every KV tile (keeping Q in registers would cost 64 more
// registers at d128, which the O accumulator needs). Warp w only ever reads its own rows
// [r*kWarpRows, (r+1)*kWarpRows), r = Traits::row_warp(w) (an O split's warps share them); the
// epilogue reuses the tile as O staging (after a CTA barrier, so a narrower V's staging rows, at
// V's row pitch, may cross into another warp's Q rows).
#pragma once
#include "common/sequence.cuh"
#include "sm80/smem_tile.cuh"

namespace fa4 {
namespace sm80 {

template <class T>
struct QTile {
  using Tile = SmemTile<T, T::kBM>;
  u32 smem;       // the tile
  u32 smem_warp;  // this warp's first row

  __device__ __forceinline__ void init(u32 smem_q, int row_warp) {
    smem = smem_q;
    smem_warp = smem_q + row_warp * T::kWarpRows * T::kRowBytes;
  }

  // Tile rows [q_lo, q_lo + kBM); packed GQA: tile row r is SeqInfo::q_row<kPack>(r), and the
  // seqlen_q * kPack packed rows are the valid ones. Rows past them are zero-filled.
  __device__ __forceinline__ void load_from_dram(const FwdParams& p, const SeqInfo& seq, int q_lo, int tid) const {
    if constexpr (T::kPack == 1) {
      const auto* q = static_cast<const typename T::Element*>(p.q) + seq.q_offset;
      Tile::load_async(smem, q, p.q_row_stride, q_lo, seq.seqlen_q, tid);
    } else {
      const auto* q = static_cast<const typename T::Element*>(p.q);
      Tile::load_async_rows(smem, [&](int r) { return q + seq.template q_row<T::kPack>(p, r); }, q, q_lo,
                            seq.seqlen_q * T::kPack, tid);
    }
  }

  // A fragment of this warp's m-block mt for depth k-step kk. ldmatrix x4 with lane l
  // addressing row l % 16, chunk 2kk + l / 16 (lane_qv in kernel.cuh):
  // matrices {rows 0-7, k 0-7}, {rows 8-15, k 0-7}, {rows 0-7, k 8-15}, {rows 8-15, k 8-15}
  // = a0..a3 of the m16k16 A fragment.
  __device__ __forceinline__ void load_from_shared(u32 (&a)[4], const QKLane<T>& lane, int mt, int kk) const {
    ldmatrix_x4(a, smem_warp + mt * 16 * T::kRowBytes + lane.at(2 * kk));
  }
};

}  // namespace sm80
}  // namespace fa4
