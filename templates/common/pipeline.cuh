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

struct NoRelease {  // a watcher: waits for a stage's data and releases nothing (another consumer does)
  __device__ __forceinline__ void operator()(u64*) const {}
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

// What a consumer does once a stage's full barrier completed, before it reads the stage (the
// stage's index and phase: a stage may land in parts, each on a barrier of its own).
struct Landed {  // nothing: TMA (async proxy) or threads that fenced before arriving filled it
  __device__ __forceinline__ void operator()(PipelineState) const {}
};

template <int kStages, class Release = ArriveEachThread, class OnLanded = Landed>
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

  __device__ __forceinline__ explicit Consumer(Barriers<kStages>* bars, OnLanded landed = {})
      : bars_(bars), state_{0, 0}, landed_(landed) {}
  // Resuming a ring (persistent kernels that carry the state between tiles in packed form).
  __device__ __forceinline__ Consumer(Barriers<kStages>* bars, PipelineState state, OnLanded landed = {})
      : bars_(bars), state_(state), landed_(landed) {}
  __device__ __forceinline__ PipelineState state() const { return state_; }
  __device__ __forceinline__ const OnLanded& landed() const { return landed_; }
  __device__ __forceinline__ Stage acquire() {
    mbar_wait(&bars_->full[state_.index], state_.phase);
    landed_(state_);
    return Stage(*this, state_.index);
  }
  // A stage another consumer acquires and releases: wait until it landed and step past it without
  // releasing (watch: this consumer reads it too, before the other's release lets it be refilled),
  // or only step past it (skip).
  __device__ __forceinline__ void watch() {
    mbar_wait(&bars_->full[state_.index], state_.phase);
    landed_(state_);
    state_.template advance<kStages>();
  }
  __device__ __forceinline__ void skip() { state_.template advance<kStages>(); }

 private:
  Barriers<kStages>* bars_;
  PipelineState state_;
  OnLanded landed_;
};

// A relay between two rings of the same depth that move in lockstep: each stage consumes slot i
// of `in` (waits full) and produces slot i of `out` (waits empty), e.g. the FP8 V transposers
// (V -> Vt) and an FP8 KV cache's converters (e4m3 K, V -> 16-bit K, V). One state serves both
// sides (out's phase is in's flipped, as a Producer's starts at 1 where a Consumer's starts at 0),
// which keeps the relay warps' registers down.
//
//   { auto st = relay.acquire();              // in slot filled, out slot free
//     ... read in[st.index()], write out[st.index()] ...
//     st.publish(); }                         // out full (every relay thread); scope exit: in released
template <int kStages, class Release = ArriveOnePerWarp>
class Relay {
 public:
  class Stage {
   public:
    __device__ __forceinline__ Stage(Relay& r, u32 index) : r_(r), index_(index) {}
    Stage(const Stage&) = delete;
    Stage& operator=(const Stage&) = delete;
    __device__ __forceinline__ ~Stage() {
      Release()(&r_.in_->empty[index_]);
      r_.state_.template advance<kStages>();
    }
    __device__ __forceinline__ u32 index() const { return index_; }
    __device__ __forceinline__ void publish() const { mbar_arrive(&r_.out_->full[index_]); }

   private:
    Relay& r_;
    u32 index_;
  };

  __device__ __forceinline__ Relay(Barriers<kStages>* in, Barriers<kStages>* out) : in_(in), out_(out), state_{0, 0} {}
  __device__ __forceinline__ Stage acquire() {
    mbar_wait(&in_->full[state_.index], state_.phase);
    mbar_wait(&out_->empty[state_.index], state_.phase ^ 1u);
    return Stage(*this, state_.index);
  }

 private:
  Barriers<kStages>* in_;
  Barriers<kStages>* out_;
  PipelineState state_;
};

}  // namespace pipe
}  // namespace fa4
