// Output of one softmax warpgroup (MAX: scale_write_output): O_i from TMEM times 1/sum, to
// OutElement, staged in the WG's own Q tile region (free once the last MMA reading Q_i has
// completed, which o_final[i] implies), then TMA stores of [128][64] 128B-swizzled boxes;
// the TMA unit clips rows past seqlen_q and columns past the depth. Varlen packs sequences
// back to back, so there a clipped store would overwrite the next sequence: rows are
// written directly, each thread its own row, only if q < seqlen_q. LSE in natural log.
#pragma once
#include "common/mbarrier.cuh"
#include "sm100a/traits.cuh"
#include "sm100a/pipelines.cuh"

namespace fa4 {
namespace sm100a {

constexpr int kBarrierEpilogue0 = 1;  // named barriers 1, 2: one per softmax WG (128 threads)
constexpr int kBarrierTmemFree = 3;   // both softmax WGs (256 threads) before TMEM dealloc

__device__ __forceinline__ void st_shared_v4(u32 addr, u32 a, u32 b, u32 c, u32 d) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}
__device__ __forceinline__ void st_global_v4(void* ptr, u32 a, u32 b, u32 c, u32 d) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(ptr), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}

template <class Config>
__device__ __forceinline__ void epilogue(const Work& w, const FwdParams& p, const TmaDescs& tma, u32 tmem_base,
                                         unsigned char* smem,
                                         SharedBarriers<Traits<Config>::kKSlots, Traits<Config>::kStages>& bars,
                                         int tile, float inv_sum, float lse) {
  using T = Traits<Config>;
  using Out = typename T::OutElement;
  const int r = threadIdx.x % 128;
  const int q = w.m0 + tile * T::kTileM + r;
  const bool has_o = w.num_tiles > 0;  // no KV tile: O was never written, it is 0
  const bool varlen = p.cu_seqlens_q != nullptr;
  const u32 t_o = tmem_base + tmem::warp_lane_base() + T::tmem_o(tile);
  unsigned char* stage = smem + T::kQOff + tile * T::kQTileBytes;
  const u32 stage_row = smem_u32(stage) + r * 128;
  Out* o_row = reinterpret_cast<Out*>(p.o) + w.seq.o_offset + static_cast<long long>(q) * p.o_row_stride;

  if (has_o) {
    mbar_wait(&bars.o_final[tile], 0);
    tmem::fence_after();
  }
#pragma unroll
  for (int b = 0; b < T::kDp / T::kBox; ++b) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int col = b * T::kBox + half * 32;
      u32 v[32];
      if (has_o) {
        tmem::ld_32x32b_x32(t_o + col, v);
        tmem::wait_ld();
        tmem::pin(v);
      } else {
#pragma unroll
        for (int j = 0; j < 32; ++j) v[j] = 0u;
      }
      u32 pk[16];
#pragma unroll
      for (int j = 0; j < 16; ++j)
        pk[j] = pack2<Out>(__uint_as_float(v[2 * j]) * inv_sum, __uint_as_float(v[2 * j + 1]) * inv_sum);
      if (!varlen) {
        // Row r of box b: 8 16-byte chunks, chunk k stored at k ^ (r % 8) (SWIZZLE_128B).
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const u32 chunk = static_cast<u32>(half * 4 + c) ^ static_cast<u32>(r & 7);
          st_shared_v4(stage_row + b * T::kTileM * 128 + chunk * 16, pk[4 * c], pk[4 * c + 1], pk[4 * c + 2],
                       pk[4 * c + 3]);
        }
      } else if (q < w.seq.seqlen_q) {
#pragma unroll
        for (int c = 0; c < 4; ++c)
          if (col + 8 * c < T::kDepth)  // padded depth columns are not in the tensor
            st_global_v4(o_row + col + 8 * c, pk[4 * c], pk[4 * c + 1], pk[4 * c + 2], pk[4 * c + 3]);
      }
    }
  }
  if (!varlen) {
    fence_proxy_async();  // generic-proxy smem writes -> visible to the TMA unit
    named_barrier_sync(kBarrierEpilogue0 + tile, 128);
    if (r == 0) {
#pragma unroll
      for (int b = 0; b < T::kDp / T::kBox; ++b)
        tma_store_4d(&tma.o, stage + b * T::kTileM * 128, b * T::kBox, w.q_row0 + w.m0 + tile * T::kTileM,
                     w.seq.q_head, w.q_batch);
      tma_store_commit();
      tma_store_wait_read<0>();  // smem must outlive the reads; the CTA may exit next
    }
  }
  if (p.lse && q < w.seq.seqlen_q) p.lse[w.seq.lse_offset + q] = lse;
}

}  // namespace sm100a
}  // namespace fa4
