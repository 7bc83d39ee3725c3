// Output of one softmax warpgroup (MAX: scale_write_output): O_i from TMEM times 1/sum, to
// OutElement, staged in the WG's own Q tile region (free once the last MMA reading Q_i has
// completed, which o_final[i] implies), then TMA stores of [128][64] 128B-swizzled boxes;
// the TMA unit clips rows past seqlen_q and columns past the depth. Packed GQA stores through
// the 5-D O map (box rows r = query * kPack + head, like the Q load). Varlen packs sequences
// back to back, so there a clipped store would overwrite the next sequence: rows are
// written directly, each thread its own row (SeqInfo::o_row), only if the row is valid.
// Split-KV writes float32 partials and the split's LSE instead (common/combine.cuh), per thread.
// LSE in natural log.
#pragma once
#include "common/combine.cuh"
#include "common/mbarrier.cuh"
#include "common/smem.cuh"
#include "sm100a/traits.cuh"
#include "sm100a/pipelines.cuh"

namespace fa4 {
namespace sm100a {

constexpr int kBarrierEpilogue0 = 1;  // named barriers 1, 2: one per softmax WG (128 threads)
constexpr int kBarrierTmemFree = 3;   // both softmax WGs (256 threads) before TMEM dealloc

__device__ __forceinline__ void st_global_v4(void* ptr, u32 a, u32 b, u32 c, u32 d) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(ptr), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}

__device__ __forceinline__ void st_global_v4_f32(float* ptr, float a, float b, float c, float d) {
  st_global_v4(ptr, __float_as_uint(a), __float_as_uint(b), __float_as_uint(c), __float_as_uint(d));
}

// has_o: the CTA visited a KV tile (else O_i was never written: it is 0 and TMEM is not read).
template <class Config, class Mask>
__device__ __forceinline__ void epilogue(const Work<Config, Mask>& w, const FwdParams& p, const TmaDescs& tma,
                                         u32 tmem_base, unsigned char* smem,
                                         BarriersOf<Config>& bars,
                                         int tile, bool has_o, float inv_sum, float lse) {
  using T = Traits<Config>;
  using Out = typename T::OutElement;
  constexpr int kPack = T::kPack;
  const int r = threadIdx.x % 128;
  const int r0 = w.q_lo + tile * T::kTileM;  // first tile row of this Q tile (packed rows when kPack > 1)
  const int row = r0 + r;
  // Packed: also every (query, head) pair inside the sequence; padded spans: not a padding row.
  const bool row_valid = T::Rows::kDense ? row < w.q_hi : T::Rows::real(row, w.seq.seqlen_q);
  const u32 t_o = tmem_base + tmem::warp_lane_base() + T::tmem_o(tile);

  if (has_o) {
    mbar_wait(&bars.o_final[tile], 0);
    tmem::fence_after();
  }
  // Loads 32 O columns from col and scales them by 1/sum (zeros when O was never written).
  auto load_o = [&](int col, float (&o)[32]) {
    u32 v[32];
    if (has_o) {
      tmem::ld_32x32b_x32(t_o + col, v);
      tmem::wait_ld();
      tmem::pin(v);
    } else {
#pragma unroll
      for (int j = 0; j < 32; ++j) v[j] = 0u;
    }
#pragma unroll
    for (int j = 0; j < 32; ++j) o[j] = __uint_as_float(v[j]) * inv_sum;
  };

  if (p.num_splits > 1) {
    // Split-KV (uniform): this split's O, normalised by its own sum, as float32 partials and its
    // LSE (-inf when it saw no key); fa4_combine writes O and p.lse. Per-thread row stores.
    const long long lse_row = w.seq.template lse_row<kPack, T::kTileM>(p, row);
    float* dst = split::partial_o(p, w.split, lse_row, T::kDepthV);  // rows of O's head dim
#pragma unroll 1
    for (int col = 0; col < T::kDpV; col += 32) {
      float o[32];
      load_o(col, o);
      if (row_valid) {
#pragma unroll
        for (int c = 0; c < 8; ++c)
          if (col + 4 * c < T::kDepthV)  // padded depth columns are not in the tensor
            st_global_v4_f32(dst + col + 4 * c, o[4 * c], o[4 * c + 1], o[4 * c + 2], o[4 * c + 3]);
      }
    }
    if (row_valid) split::store_partial_lse(p, w.split, lse_row, lse);
    return;
  }

  const bool varlen = p.cu_seqlens_q != nullptr;
  unsigned char* stage = smem + T::kQOff + tile * T::kQTileBytes;
  const u32 stage_row = smem_u32(stage) + r * 128;
  Out* o_row = reinterpret_cast<Out*>(p.o) + w.seq.template o_row<kPack, T::kTileM>(p, row);
  // O boxes: unrolled up to 2 (V 64, 128); rolled at 3 (V 192), where the unrolled copies made ptxas
  // spill the batch index the TMA store needs (20 bytes over the softmax warpgroup's KV loop).
  constexpr int kOBoxes = T::kDpV / T::kOBox;
#pragma unroll(kOBoxes <= 2 ? kOBoxes : 1)
  for (int b = 0; b < kOBoxes; ++b) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int col = b * T::kOBox + half * 32;
      float o[32];
      load_o(col, o);
      u32 pk[16];
#pragma unroll
      for (int j = 0; j < 16; ++j) pk[j] = pack2<Out>(o[2 * j], o[2 * j + 1]);
      if (!varlen) {
        // Row r of box b: 8 16-byte chunks, chunk k stored at k ^ (r % 8) (SWIZZLE_128B).
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const u32 chunk = static_cast<u32>(half * 4 + c) ^ static_cast<u32>(r & 7);
          st_shared_v4(stage_row + b * T::kTileM * 128 + chunk * 16, pk[4 * c], pk[4 * c + 1], pk[4 * c + 2],
                       pk[4 * c + 3]);
        }
      } else if (row_valid) {
#pragma unroll
        for (int c = 0; c < 4; ++c)
          if (col + 8 * c < T::kDepthV)  // padded depth columns are not in the tensor
            st_global_v4(o_row + col + 8 * c, pk[4 * c], pk[4 * c + 1], pk[4 * c + 2], pk[4 * c + 3]);
      }
    }
  }
  if (!varlen) {
    fence_proxy_async();  // generic-proxy smem writes -> visible to the TMA unit
    named_barrier_sync(kBarrierEpilogue0 + tile, 128);
    if (r == 0) {
      const TmaCoords c = TmaCoords::make(p, w.seq);
#pragma unroll
      for (int b = 0; b < T::kDpV / T::kOBox; ++b) {
        if constexpr (kPack == 1) {
          tma_store_4d(&tma.o, stage + b * T::kTileM * 128, b * T::kOBox, c.q_row0 + r0, c.q_head, c.q_batch);
        } else {  // 5-D map: the span's real rows (T::Rows), its padding is not stored; queries past seqlen_q are clipped
          tma_store_5d(&tma.o, stage + b * T::kTileM * 128, b * T::kOBox, 0, c.q_row0 + T::Rows::span_query(r0),
                       T::kPackSlices > 1 ? c.q_head / kPack : c.kv_head,
                       c.q_batch);
        }
      }
      tma_store_commit();
      tma_store_wait_read<0>();  // smem must outlive the reads; the CTA may exit next
    }
  }
  if (p.lse && row_valid) p.lse[w.seq.template lse_row<kPack, T::kTileM>(p, row)] = lse;
}

}  // namespace sm100a
}  // namespace fa4
