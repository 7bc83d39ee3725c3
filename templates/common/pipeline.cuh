// Producer/consumer tile pipelines over mbarriers, in the shape of the seeds' tile_pipeline:
//
//   { auto stage = producer.acquire();      // waits until the slot is free
//     stage.expect_bytes(bytes);            // TMA completes the `full` barrier
//     tma_load_4d(stage_buffer(stage.index()), ..., stage.full_barrier(), ...); }
//                                           // scope exit: move to the next slot
//   { auto stage = consumer.acquire();      // waits until the slot is filled
//     ... MMA on stage.index() ... }        // scope exit: release the slot (Release policy)
//
// Phases: a barrier starts in phase 0; waiting on parity 1 returns at once, so producers
// start at phase 1 and their first pass over the ring does not block (MAX, CUTLASS).
#pragma once
#include "common/mbarrier.cuh"

namespace fa4 {
namespace pipe {

struct PipelineState {
  u32 index;
  u32 phase;
  template <int kStages>
  __device__ __forceinline__ void advance() {
    if (++index == kStages) {
      index = 0;
      phase ^= 1;
    }
  }
};

// The barriers of one ring, placed in shared memory.
template <int kStages>
struct Barriers {
  u64 full[kStages];   // producer -> consumer: data landed
  u64 empty[kStages];  // consumer -> producer: slot free
  // One thread initialises; the caller fences (fence_barrier_init) and syncs the CTA.
  __device__ __forceinline__ void init(u32 producer_arrivals, u32 consumer_arrivals) {
    for (int i = 0; i < kStages; ++i) {
      mbar_init(&full[i], producer_arrivals);
      mbar_init(&empty[i], consumer_arrivals);
    }
  }
};

// Release policies for consumers: who signals `empty` when a stage's scope ends.
struct ArriveEachThread {  // every consumer thread arrives (empty count = consumer threads)
  __device__ __forceinline__ void operator()(u64* empty) const { mbar_arrive(empty); }
};
struct ArriveOnePerWarp {  // lane 0 of each consumer warp arrives (empty count = consumer warps)
  __device__ __forceinline__ void operator()(u64* empty) const {
    __syncwarp();
    if ((threadIdx.x & 31) == 0) mbar_arrive(empty);
  }
};

template <int kStages>
class Producer {
 public:
  class Stage {
   public:
    __device__ __forceinline__ Stage(Producer& p, u32 index) : p_(p), index_(index) {}
    Stage(const Stage&) = delete;
    Stage& operator=(const Stage&) = delete;
    __device__ __forceinline__ ~Stage() { p_.state_.template advance<kStages>(); }
    __device__ __forceinline__ u32 index() const { return index_; }
    __device__ __forceinline__ u64* full_barrier() const { return &p_.bars_->full[index_]; }
    __device__ __forceinline__ void expect_bytes(u32 bytes) const { mbar_expect_tx(full_barrier(), bytes); }
    __device__ __forceinline__ void arrive() const { mbar_arrive(full_barrier()); }  // non-TMA producers

   private:
    Producer& p_;
    u32 index_;
  };

  __device__ __forceinline__ explicit Producer(Barriers<kStages>* bars) : bars_(bars), state_{0, 1} {}
  __device__ __forceinline__ Stage acquire() {
    mbar_wait(&bars_->empty[state_.index], state_.phase);
    return Stage(*this, state_.index);
  }

 private:
  Barriers<kStages>* bars_;
  PipelineState state_;
};

template <int kStages, class Release = ArriveEachThread>
class Consumer {
 public:
  class Stage {
   public:
    __device__ __forceinline__ Stage(Consumer& c, u32 index) : c_(c), index_(index) {}
    Stage(const Stage&) = delete;
    Stage& operator=(const Stage&) = delete;
    __device__ __forceinline__ ~Stage() {
      Release()(&c_.bars_->empty[index_]);
      c_.state_.template advance<kStages>();
    }
    __device__ __forceinline__ u32 index() const { return index_; }

   private:
    Consumer& c_;
    u32 index_;
  };

  __device__ __forceinline__ explicit Consumer(Barriers<kStages>* bars) : bars_(bars), state_{0, 0} {}
  // Resuming a ring (persistent kernels that carry the state between tiles in packed form).
  __device__ __forceinline__ Consumer(Barriers<kStages>* bars, PipelineState state) : bars_(bars), state_(state) {}
  __device__ __forceinline__ PipelineState state() const { return state_; }
  __device__ __forceinline__ Stage acquire() {
    mbar_wait(&bars_->full[state_.index], state_.phase);
    return Stage(*this, state_.index);
  }

 private:
  Barriers<kStages>* bars_;
  PipelineState state_;
};

}  // namespace pipe
}  // namespace fa4
