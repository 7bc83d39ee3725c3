// SM100MHA2Q.correction: the correction warpgroup (warps 8-11), thread t owns TMEM lane t of
// both O tiles. For every KV tile after the first of the Work walk, per Q tile i: take row t's
// factor from smem (softmax_i wrote it), wait for O_i += P_i V of the previous tile, and rescale
// O_i in TMEM, but only if some row of the warp needs it (factor < 1; lazy rescaling makes that
// rare), then hand O_i back to the MMA warp. O is never touched when no row max grew by more than 2^8.
#pragma once
#include "sm100a/traits.cuh"
#include "sm100a/pipelines.cuh"

namespace fa4 {
namespace sm100a {

template <class Config>
__device__ __forceinline__ void rescale_o(u32 t_o, float f) {
  using T = Traits<Config>;
#pragma unroll 1
  for (int c = 0; c < T::kDpV; c += 32) {  // O is V's width
    u32 v[32];
    tmem::ld_32x32b_x32(t_o + c, v);
    tmem::wait_ld();
    tmem::pin(v);
#pragma unroll
    for (int j = 0; j < 32; ++j) v[j] = __float_as_uint(__uint_as_float(v[j]) * f);
    tmem::st_32x32b_x32(t_o + c, v);
  }
}

template <class Config, class Mask>
__device__ __forceinline__ void correction(const FwdParams& p, u32 tmem_base, unsigned char* smem,
                                           BarriersOf<Config>& bars) {
  using T = Traits<Config>;
  const Work<Config, Mask> w = make_work<Config, Mask>(p);  // the same tiles as every other role
  const int r = threadIdx.x % 128;
  const u32 lane = tmem::warp_lane_base();
  const float* corr_smem = reinterpret_cast<const float*>(smem + T::kCorrOff);
  CorrConsumer c_cons[2] = {CorrConsumer(&bars.c[0]), CorrConsumer(&bars.c[1])};
  OConsumer o_cons[2] = {OConsumer(&bars.o[0]), OConsumer(&bars.o[1])};

  int n = w.first_tile();
  if (!w.has(n)) return;
  for (n = w.next_tile(n); w.has(n); n = w.next_tile(n)) {  // every visited tile after the first
#pragma unroll
    for (int tile = 0; tile < 2; ++tile) {
      float f;
      {
        auto st = c_cons[tile].acquire();
        f = corr_smem[tile * T::kTileM + r];
      }  // factor read: softmax may write the next one
      const bool any = __any_sync(0xffffffffu, f < 1.0f);
      {
        auto st = o_cons[tile].acquire();  // O_i += P_i V(previous tile) has completed
        tmem::fence_after();
        if (any) rescale_o<Config>(tmem_base + lane + T::tmem_o(tile), f);
      }  // scope exit: stores done, O_i back to the MMA warp
    }
  }
}

}  // namespace sm100a
}  // namespace fa4
