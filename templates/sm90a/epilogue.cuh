// Epilogue of one consumer warpgroup: normalise O, stage it in the warpgroup's Q region
// (128B-swizzled like the TMA box, so fragment writes are bank-conflict free), then copy rows
// < seqlen_q to global memory with 16-byte stores, and write LSE. Packed GQA: rows < q_hi, each to
// its (query, head) (SeqInfo::o_row / lse_row). Split-KV: float32 partials instead (no staging).
// O is always stored manually (never by TMA): varlen tiles end inside the next sequence, and a
// TMA store would overwrite its rows. Coalescing is the same (16 lanes per 256-byte row at d128).
// O is V's width (kDepthV, padded kDpV). Padded depth (kDepthV < kDpV): only columns < kDepthV are
// staged and stored; the rest of the O fragment (P times V's zero-filled padding) is never written.
#pragma once
#include "common/combine.cuh"
#include "common/mbarrier.cuh"
#include "common/smem.cuh"
#include "sm90a/smem_layout.cuh"
#include "sm90a/walk.cuh"
#include "sm90a/softmax.cuh"
#include "sm90a/shared_p.cuh"

namespace fa4 {
namespace sm90a {

__device__ __forceinline__ void st_global_v4(void* ptr, const u32 (&v)[4]) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(ptr), "r"(v[0]), "r"(v[1]), "r"(v[2]), "r"(v[3])
               : "memory");
}
__device__ __forceinline__ void st_global_u32(void* ptr, u32 v) {
  asm volatile("st.global.b32 [%0], %1;" ::"l"(ptr), "r"(v) : "memory");
}
__device__ __forceinline__ void st_global_v2f(float* ptr, float x, float y) {
  asm volatile("st.global.v2.f32 [%0], {%1, %2};" ::"l"(ptr), "f"(x), "f"(y) : "memory");
}

// Split-KV (writes_partials): this split's O, normalised by its own row sums, as float32 straight
// from the accumulator fragment (a quad writes 8 consecutive floats = one full 32-byte sector per
// row and column block, so no staging), and its LSE (-inf for a row that saw no key; O is 0 then).
// fa4_combine writes O and p.lse. Tile rows >= q_hi are not written (tested as Rows::real(r, seqlen_q),
// the same for r < q_lo + kBM, and it keeps q_hi from living across the KV loop; padded spans: nor
// their padding rows), nor rows < 0 (Shape::kBottomTiles: the padding above row 0). Dense rows spell
// real() out as r < seqlen_q * kPack here and below: through the call, NVVM swapped the comparison's
// operands and the PTX of the kernels before padded spans changed.
// O split over warpgroups: each stores its slice of the columns; the S warpgroup (sm non-null)
// also the LSE.
template <class Config, class Softmax, class Work>
__device__ __forceinline__ void store_split_partials(const FwdParams& p, const Work& w, int row_base,
                                                     const float (&o)[Shape<Config>::kOWg / 2], const Softmax* sm,
                                                     const float (&inv)[2], int slice) {
  using Sh = Shape<Config>;
  const int t = threadIdx.x & 127, warp = t >> 5, lane = t & 31;
  const int split = split_of<Config>(p, w);
  // Long-pole splits (FwdParams::split_qmax): rows go to the sequence's slots, not to their LSE rows.
  const bool slots = !Sh::kPersistent && p.split_qmax > 0;
  const long long slot0 = slots ? static_cast<long long>(w.seq.batch) * p.split_seq_rows +
                                      (w.seq.q_head / Sh::kPack) * p.split_head_rows
                                : 0;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = row_base + warp * 16 + (lane >> 2) + 8 * h;  // tile row
    if ((Sh::Rows::kDense ? r < w.seq.seqlen_q * Sh::kPack : Sh::Rows::real(r, w.seq.seqlen_q)) &&
        (!Sh::kBottomTiles || r >= 0)) {
      const long long lse_row = w.seq.template lse_row<Sh::kPack, Sh::kWgRows>(p, r);
      const long long row = slots ? slot0 + r : lse_row;
      // The partial rows are kDepthV wide (combine reads them so); this warpgroup's slice of them.
      float* dst = split::partial_o(p, split, row, Sh::kDepthV) + slice * Sh::kDpVWg + 2 * (lane & 3);
#pragma unroll
      for (int j = 0; j < Sh::kDepthVWg / 8; ++j)
        st_global_v2f(dst + 8 * j, o[4 * j + 2 * h] * inv[h], o[4 * j + 2 * h + 1] * inv[h]);
      if ((lane & 3) == 0 && sm != nullptr) {
        split::store_partial_lse(p, split, row, sm->row[h].lse(sm->scale));
        if constexpr (Sh::kStreamK)
          if (split == 0) p.split_count[split::slice_row(p, 0, row)] = w.splits;  // the combine merges this many slots
        if (slots && split == 0) {  // the combine merges this many slots into this LSE row
          p.split_count[row] = w.splits;
          p.split_row[row] = static_cast<int>(lse_row);
        }
      }
    } else if (slots && split == 0 && r >= 0 && r < p.split_head_rows && (lane & 3) == 0 && sm != nullptr) {
      p.split_count[slot0 + r] = 0;  // a slot without a row this launch: the combine skips it
    }
  }
}

// The rows' LSE (natural log), by one lane of each quad.
template <class Config, class Work, class Softmax>
__device__ __forceinline__ void store_lse(const FwdParams& p, const Work& w, int row_base, const Softmax& sm) {
  using Sh = Shape<Config>;
  const int t = threadIdx.x & 127, warp = t >> 5, lane = t & 31;
  const int r0 = warp * 16 + (lane >> 2);
  if (p.lse != nullptr && (lane & 3) == 0) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if constexpr (Sh::kPack == 1) {
        const int q = row_base + r0 + 8 * h;
        if (q < w.seq.seqlen_q && (!Sh::kBottomTiles || q >= 0)) p.lse[w.seq.lse_offset + q] = sm.row[h].lse(sm.scale);
      } else {
        const int tr = row_base + r0 + 8 * h;
        if (Sh::Rows::kDense ? tr < w.seq.seqlen_q * Sh::kPack : Sh::Rows::real(tr, w.seq.seqlen_q))
          p.lse[w.seq.template lse_row<Sh::kPack, Sh::kWgRows>(p, tr)] = sm.row[h].lse(sm.scale);
      }
    }
  }
}

// O split across warpgroups (Shape::kOSplit > 1, V 512 wide): each warpgroup stores its columns
// straight from the fragment, a quad's 16 consecutive bytes per row and 8-column block. Staging
// would need the Q region its partner warpgroup may still be reading (and its 256 columns are
// half of a 512-wide row's bytes anyway); decode writes few rows.
template <class Config, class Work>
__device__ __forceinline__ void store_o_slice(const FwdParams& p, const Work& w, int row_base, int slice,
                                              const float (&o)[Shape<Config>::kOWg / 2], const float (&inv)[2]) {
  using Sh = Shape<Config>;
  using Out = typename Sh::OutElement;
  const int t = threadIdx.x & 127, warp = t >> 5, lane = t & 31;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int tr = row_base + warp * 16 + (lane >> 2) + 8 * h;  // tile row
    Out* row = nullptr;
    if constexpr (Sh::kPack == 1) {
      if (tr < w.seq.seqlen_q && (!Sh::kBottomTiles || tr >= 0))
        row = static_cast<Out*>(p.o) + w.seq.o_offset + static_cast<long long>(tr) * p.o_row_stride;
    } else if (Sh::Rows::kDense ? tr < w.seq.seqlen_q * Sh::kPack : Sh::Rows::real(tr, w.seq.seqlen_q)) {
      row = static_cast<Out*>(p.o) + w.seq.template o_row<Sh::kPack, Sh::kWgRows>(p, tr);
    }
    if (row == nullptr) continue;
    Out* dst = row + slice * Sh::kDpVWg + 2 * (lane & 3);
#pragma unroll
    for (int j = 0; j < Sh::kDepthVWg / 8; ++j)
      st_global_u32(dst + 8 * j, pack2<Out>(o[4 * j + 2 * h] * inv[h], o[4 * j + 2 * h + 1] * inv[h]));
  }
}

// The softmax type of a warpgroup that writes no LSE (store_split_partials' null sm).
struct NoLse {
  softmax::RowState row[2];
  float scale;
};

// o_smem: shared address of this warpgroup's O staging (its Q region, or its own O region with
// SmemLayout::kOwnO; DpV/64 blocks of [64 rows][128 B]); all wgmma reads of Q by this warpgroup
// have completed (waited) before this is called.
// Where O is split over warpgroups this is the S warpgroup's (the first of its row group), which
// hands its partner the rows' 1 / sums (share); the partner's is epilogue_partner. Alternating S
// (Shape::kAlternateS): every warpgroup of the split, each with the rows' final state.
template <class Config, class Mask, class ScoreMod, class Work>
__device__ __forceinline__ void epilogue(const FwdParams& p, const Work& w, int wg,
                                         float (&o)[Shape<Config>::kOWg / 2],
                                         WgSoftmax<Config, Mask, ScoreMod>& sm, u32 o_smem,
                                         SharedP<Config>& share) {
  using Sh = Shape<Config>;
  using Out = typename Sh::OutElement;
  const int t = threadIdx.x & 127, warp = t >> 5, lane = t & 31;

  sm.finalize(p, w);
  float inv[2] = {sm.row[0].inv_sum(), sm.row[1].inv_sum()};
  if constexpr (Sh::kDescaled) {  // O = P V with P shifted by 2^kPShiftLog2 (FP8, softmax.cuh), V times descale_v
    const int i = w.seq.batch * p.num_kv_heads + w.seq.kv_head;
    const float f = (p.descale_v ? p.descale_v[i] : 1.0f) * (1.0f / static_cast<float>(1 << WgSoftmax<Config, Mask, ScoreMod>::kPShiftLog2));
    inv[0] *= f;
    inv[1] *= f;
  }
  const int row_base = w.q_lo + Sh::row_wg(wg) * Sh::kWgRows;  // tile row of local row 0
  share.publish_inv(inv);

  // Alternating S: both warpgroups of the split hold the rows' final state; the first writes the LSE.
  const int slice = Sh::kAlternateS ? Sh::o_slice(wg) : 0;
  if constexpr (Sh::kRuntimeVariants) {
    if (writes_partials<Config>(p, w)) {  // uniform over the CTA; no staging, so no epilogue barrier either
      // (Two calls, not one with a pointer chosen at run time: that would put the softmax state in
      // local memory to give it an address.)
      if (slice == 0)
        store_split_partials<Config>(p, w, row_base, o, &sm, inv, 0);
      else
        store_split_partials<Config, NoLse>(p, w, row_base, o, nullptr, inv, slice);
      return;
    }
  }
  if constexpr (Sh::kOSplit > 1) {
    store_o_slice<Config>(p, w, row_base, slice, o, inv);
    if (slice == 0) store_lse<Config>(p, w, row_base, sm);
    return;
  }

  // Own O region (persistent, SmemLayout::kOwnO): Q was handed back before this epilogue, so no
  // mbarrier round trip orders this tile's staging writes after the previous tile's reads: a
  // warpgroup barrier does.
  if constexpr (SmemLayout<Config>::kOwnO) named_barrier_sync(EpilogueBarrier<Sh::kNumConsumerWGs>::value + wg, 128);
  // Fragment -> smem. Element pair (row r, cols 8j + 2(l%4) + {0,1}) lives in block j/8, row r,
  // 16-byte chunk (j%8) ^ (r%8) (the SW128 pattern), byte 4*(l%4) inside the chunk.
  const int r0 = warp * 16 + (lane >> 2);
#pragma unroll
  for (int j = 0; j < Sh::kDepthV / 8; ++j) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = r0 + 8 * h;
      const u32 addr = o_smem + (j / 8) * (64 * 128) + r * 128 + ((((j % 8) ^ (r % 8))) << 4) + 4 * (lane & 3);
      st_shared_u32(addr, pack2<Out>(o[4 * j + 2 * h] * inv[h], o[4 * j + 2 * h + 1] * inv[h]));
    }
  }
  named_barrier_sync(EpilogueBarrier<Sh::kNumConsumerWGs>::value + wg, 128);

  // smem -> global, 16 bytes (8 elements) per access; consecutive threads walk one row's kDepth columns.
  constexpr int kChunksPerRow = Sh::kDepthV / 8;
  static_assert(Sh::kWgRows * kChunksPerRow % 128 == 0, "epilogue: rows x 16-byte chunks must split over 128 threads");
  Out* o_base = static_cast<Out*>(p.o) + w.seq.o_offset;
#pragma unroll
  for (int it = 0; it < Sh::kWgRows * kChunksPerRow / 128; ++it) {
    const int idx = it * 128 + t;
    const int r = idx / kChunksPerRow, cc = idx % kChunksPerRow;
    if constexpr (Sh::kPack == 1) {
      const int q = row_base + r;
      if (q < w.seq.seqlen_q && (!Sh::kBottomTiles || q >= 0)) {
        u32 v[4];
        ld_shared_v4(o_smem + (cc / 8) * (64 * 128) + r * 128 + (((cc % 8) ^ (r % 8)) << 4), v);
        st_global_v4(o_base + static_cast<long long>(q) * p.o_row_stride + cc * 8, v);
      }
    } else {  // packed GQA: tile row -> (query, head) (Shape::Rows); rows past the sequence's and a span's padding are not written
      const int tr = row_base + r;
      if (Sh::Rows::kDense ? tr < w.seq.seqlen_q * Sh::kPack : Sh::Rows::real(tr, w.seq.seqlen_q)) {
        u32 v[4];
        ld_shared_v4(o_smem + (cc / 8) * (64 * 128) + r * 128 + (((cc % 8) ^ (r % 8)) << 4), v);
        st_global_v4(static_cast<Out*>(p.o) + w.seq.template o_row<Sh::kPack, Sh::kWgRows>(p, tr) + cc * 8, v);
      }
    }
  }

  store_lse<Config>(p, w, row_base, sm);
}

// The partner warpgroup of an O split (Shape::kOSplit > 1): its columns of O, with the rows'
// 1 / sums of the S warpgroup (the P full barrier's last publication).
template <class Config, class Work>
__device__ __forceinline__ void epilogue_partner(const FwdParams& p, const Work& w, int wg,
                                                 const float (&o)[Shape<Config>::kOWg / 2],
                                                 SharedPReader<Config>& share) {
  using Sh = Shape<Config>;
  float inv[2];
  {
    auto slot = share.take();
    share.inv(inv);
  }
  const int row_base = w.q_lo + Sh::row_wg(wg) * Sh::kWgRows;
  if constexpr (Sh::kRuntimeVariants) {
    if (writes_partials<Config>(p, w)) {
      store_split_partials<Config, NoLse>(p, w, row_base, o, nullptr, inv, Sh::o_slice(wg));
      return;
    }
  }
  store_o_slice<Config>(p, w, row_base, Sh::o_slice(wg), o, inv);
}

}  // namespace sm90a
}  // namespace fa4
