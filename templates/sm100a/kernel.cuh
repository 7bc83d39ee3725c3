// fa4::sm100a::attention_fwd: FlashAttention-4 forward for Blackwell (sm_100a), after
// Modular MAX's SM100MHA2Q and FA4's flash_fwd_sm100. One CTA = 512 threads, two Q tiles of
// 128 rows (BM = 256) sharing every K/V tile:
//
//   warp 13   load        TMA: Q0 K0 Q1 V0 | K1 V1 | K2 V2 ...       -> smem rings (k, v)
//                         (pages no TMA box takes: every lane gathers K, V by cp.async)
//   warp 12   mma         S0=Q0K' | O1+=P1V | S1=Q1K' | O0+=P0V      -> TMEM S0 S1 O0 O1
//   warps 0-3 softmax WG0 S0 -> P0 (TMEM), factor -> smem; epilogue of O0, LSE
//   warps 4-7 softmax WG1 S1 -> P1 (TMEM), factor -> smem; epilogue of O1, LSE
//   warps 8-11 correction O_i *= factor in TMEM, only when some row needs it
//   warps 14-15 idle; FP8 KV cache (kv_dtype e4m3): convert e4m3 K/V tiles -> the 16-bit rings
//
// The pipelines between them are listed in pipelines.cuh. Each role derives the same Work
// (rows, KV tiles) from the same functions and never asks another role about it.
#pragma once
#include "common/prelude.cuh"
#include "common/sequence.cuh"
#include "common/mask.cuh"
#include "common/score_mod.cuh"
#include "common/softmax.cuh"
#include "common/mbarrier.cuh"
#include "common/pipeline.cuh"
#include "sm100a/traits.cuh"
#include "sm100a/tmem.cuh"
#include "sm100a/umma.cuh"
#include "sm100a/pipelines.cuh"
#include "sm100a/load.cuh"
#include "sm100a/convert.cuh"
#include "sm100a/mma.cuh"
#include "sm100a/softmax.cuh"
#include "sm100a/correction.cuh"
#include "sm100a/epilogue.cuh"

namespace fa4 {
namespace sm100a {

// Register split (setmaxnreg; the same value for all 4 warps of a warpgroup). The kernel
// starts at 65536 / 512 = 128 per thread; the sum must stay within the 64K register file.
constexpr int kRegsSoftmax = 192;
constexpr int kRegsCorrection = 80;
constexpr int kRegsOther = 48;  // MMA, load, idle (FP8 KV cache: the e4m3 converters)
static_assert(128 * (2 * kRegsSoftmax + kRegsCorrection + kRegsOther) <= 65536, "register file");

template <class Config, class Mask, class ScoreMod>
__device__ __forceinline__ void attention_fwd(const FwdParams& p, const TmaDescs& tma) {
  using T = Traits<Config>;
  using Bars = BarriersOf<Config>;
  static_assert(sizeof(Bars) <= 1024, "barriers and TMEM address fit the reserved kilobyte");
  extern __shared__ __align__(1024) unsigned char smem[];

  if (!make_work<Config, Mask>(p).valid) return;  // the same for every thread, before any barrier

  Bars& bars = *reinterpret_cast<Bars*>(smem + T::kBarOff);
  const int warp = threadIdx.x / 32;
  if (threadIdx.x == 0) {
    if (smem_u32(smem) % 1024 != 0) __trap();  // 128B-swizzle atoms and UMMA descriptors assume it
    bars.init(gathers_kv_rows(p));
    fence_barrier_init();
  }
  if (warp == 1) {  // TMEM: all 512 columns, once; the address goes through smem
    tmem::alloc(&bars.tmem_base, tmem::kColumns);
    tmem::relinquish_alloc_permit();
  }
  if (warp == 2 && threadIdx.x % 32 == 0) {
    tma_prefetch(&tma.q);
    tma_prefetch(&tma.k);
    tma_prefetch(&tma.v);
    tma_prefetch(&tma.o);
  }
  tmem::fence_before();
  __syncthreads();
  tmem::fence_after();
  const u32 tmem_base = bars.tmem_base;  // read once, kept in a register

  if (warp < 8) {
    setmaxnreg_inc<kRegsSoftmax>();
    softmax_wg<Config, Mask, ScoreMod>(p, tma, tmem_base, smem, bars, warp / 4);
    // Both O tiles are read out, and the correction WG finished before the last P V was
    // issued: TMEM can go.
    tmem::fence_before();
    named_barrier_sync(kBarrierTmemFree, 256);
    if (warp == 1) {
      tmem::fence_after();
      tmem::dealloc(tmem_base, tmem::kColumns);
    }
  } else if (warp < 12) {
    setmaxnreg_dec<kRegsCorrection>();
    correction<Config, Mask>(p, tmem_base, smem, bars);
  } else {
    setmaxnreg_dec<kRegsOther>();
    if (warp == 12) {
      mma<Config, Mask>(p, tmem_base, smem, bars);
    } else if (warp == 13) {
      load<Config, Mask>(p, tma, smem, bars);
    } else {
      if constexpr (T::kFp8KV) convert<Config, Mask>(p, smem, bars);  // warps 14-15
    }
  }
}

}  // namespace sm100a
}  // namespace fa4
