// The CTA's pipelines, all on common/pipeline.cuh (pipe::Barriers, PipelineState, Producer,
// Consumer). Who waits and who arrives:
//
//   ring        full (arrivals)                    empty (arrivals)                    slots
//   q[i]        TMA bytes (1, expect_tx)           -                                   1 use
//   k           TMA bytes (1)                      MMA tcgen05.commit (1)              S * qk_stages chunks
//               gathered pages: load lanes (32)                                        (or fewer: Traits::kKSlots)
//   v           TMA bytes (1), or load lanes (32)  MMA tcgen05.commit (1)              S
//   s[i]        MMA commit: S_i ready (1)          softmax_i: P_i in TMEM (128)        1
//   c[i]        softmax_i: factor in smem (128)    correction: factor read (128)       1
//   o[i]        MMA commit: O_i += P_i V done (1)  correction: O_i rescaled (128)      1
//   o_final[i]  MMA commit after the last P_i V (1): the epilogue may read O_i        1 use
//
// FP8 KV cache (Traits::kFp8KV): TMA fills the e4m3 ring instead, and the converter warps fill k and v:
//   f8          TMA bytes (1), or load lanes (32)  converter warps (2, one per warp)   2..4, K V K V ..
//   k, v        converter threads (64)             MMA tcgen05.commit (1)              as above
// Gathered pages (gather.cuh): each load lane's cp.async.mbarrier.arrive.noinc is one arrival.
#pragma once
#include "common/pipeline.cuh"
#include "sm100a/tmem.cuh"
#include "sm100a/umma.cuh"
#include "sm100a/traits.cuh"

namespace fa4 {
namespace sm100a {

// FP8 KV cache: warps 14-15 (idle in the 16-bit kernel) widen the e4m3 K/V tiles (convert.cuh).
constexpr int kConvertWarp0 = 14;
constexpr int kConvertWarps = 2;
constexpr int kConvertThreads = 32 * kConvertWarps;

template <int kKSlots, int kVSlots, int kF8Slots = 0>
struct SharedBarriers {
  u64 q_full[2];
  pipe::Barriers<kKSlots> k;
  pipe::Barriers<kVSlots> v;
  pipe::Barriers<1> s[2];
  pipe::Barriers<1> c[2];
  pipe::Barriers<1> o[2];
  u64 o_final[2];
  u32 tmem_base;  // written by tcgen05.alloc
  pipe::Barriers<(kF8Slots > 0 ? kF8Slots : 1)> f8;  // FP8 KV cache only (kF8Slots > 0): the e4m3 ring

  // One thread; the caller fences (fence_barrier_init) and syncs the CTA. gathered: gathers_kv_rows.
  __device__ __forceinline__ void init(bool gathered) {
    constexpr u32 kWG = 128;
    for (int i = 0; i < 2; ++i) {
      mbar_init(&q_full[i], 1);
      s[i].init(1, kWG);
      c[i].init(kWG, kWG);
      o[i].init(1, kWG);
      mbar_init(&o_final[i], 1);
    }
    // 16-bit K/V stages: filled by TMA (one expect_tx arrival) or the 32 gathering lanes, or, under
    // an FP8 KV cache, by every converter thread after its fence.proxy.async.
    const u32 loaded = gathered ? 32 : 1;
    const u32 kv_full = kF8Slots > 0 ? kConvertThreads : loaded;
    k.init(kv_full, 1);
    v.init(kv_full, 1);
    if constexpr (kF8Slots > 0) f8.init(loaded, kConvertWarps);
  }
};

template <class Config>
using BarriersOf = SharedBarriers<Traits<Config>::kKSlots, Traits<Config>::kStages, Traits<Config>::kF8Slots>;

// Release policy for a thread that wrote TMEM (tcgen05.st) and hands it to the MMA warp:
// the stores must be complete and ordered before the arrival.
struct TmemStoreRelease {
  __device__ __forceinline__ void operator()(u64* empty) const {
    tmem::wait_st();
    tmem::fence_before();
    mbar_arrive(empty);
  }
};

// MMA-side consumer of a TMA ring (the seed's TMAConsumerPipeline): wait() and release()
// keep separate positions because a stage is released later than it is waited for
// (V(n) is read by O0 += P0 V(n) in iteration n and O1 += P1 V(n) in iteration n + 1).
// release() is a tcgen05.commit: the slot frees itself once the MMAs reading it are done.
// generic: the slots were written through the generic proxy without a fence (gathered pages'
// cp.async, gather.cuh), so the wait fences the async proxy the MMAs read through.
template <int kSlots>
class TMAConsumerPipeline {
 public:
  __device__ __forceinline__ TMAConsumerPipeline(pipe::Barriers<kSlots>* bars, bool generic)
      : bars_(bars), wait_{0, 0}, release_{0, 0}, generic_(generic) {}
  // Blocks until the next slot is filled; returns its index.
  __device__ __forceinline__ u32 wait() {
    const u32 index = wait_.index;
    mbar_wait(&bars_->full[index], wait_.phase);
    if (generic_) fence_proxy_async();
    tmem::fence_after();
    wait_.template advance<kSlots>();
    return index;
  }
  // Frees the oldest slot that was waited for, when the MMAs issued so far complete.
  __device__ __forceinline__ void release() {
    umma::commit(&bars_->empty[release_.index]);
    release_.template advance<kSlots>();
  }

 private:
  pipe::Barriers<kSlots>* bars_;
  pipe::PipelineState wait_;
  pipe::PipelineState release_;
  bool generic_;
};

// MMA side of the S/P slot of one Q tile (TMEM columns shared by S_i and P_i):
// commit_s() signals S_i; wait_p() blocks until softmax_i has written P_i.
class SPProducer {
 public:
  __device__ __forceinline__ explicit SPProducer(pipe::Barriers<1>* bars) : bars_(bars), p_phase_(0) {}
  __device__ __forceinline__ void commit_s() const { umma::commit(&bars_->full[0]); }
  __device__ __forceinline__ void wait_p() {
    mbar_wait(&bars_->empty[0], p_phase_);
    p_phase_ ^= 1;
    tmem::fence_after();
  }

 private:
  pipe::Barriers<1>* bars_;
  u32 p_phase_;
};

// Softmax side of the S/P slot: acquire() waits for S_i; the scope exit publishes P_i.
using SPConsumer = pipe::Consumer<1, TmemStoreRelease>;
// Softmax -> correction: the per-row rescale factor (through smem).
using CorrProducer = pipe::Producer<1>;
using CorrConsumer = pipe::Consumer<1, pipe::ArriveEachThread>;
// MMA -> correction -> MMA: O_i accumulator stage (the seed's OutputTilePipeline over TMEM).
using OProducer = pipe::Producer<1>;
using OConsumer = pipe::Consumer<1, TmemStoreRelease>;

}  // namespace sm100a
}  // namespace fa4
