// O split over warpgroups (Shape::kOSplit > 1: V 512 wide, MLA's latent): the row group's first
// warpgroup (the S warpgroup) computes S = Q K^T and the softmax, P V's its columns of O, and
// hands its partner, through shared memory (SmemLayout kShared*), each KV tile's P and O
// correction and at the end each row's 1 / sum; the partner P V's its own columns with P from
// shared memory (consumer.cuh follow_p). S is computed once per CTA (FlashMLA's split of the
// 512-wide accumulator; it alternates S between its warpgroups, this does not).
// The hand-off is a one-slot ring on mbarriers (Barriers::p, pipe::Producer / pipe::Consumer):
// every publication (a tile's P and correction, then the 1 / sums) waits until the partner
// released the previous one. mbarrier arrivals release and waits acquire; every thread that read
// the slot arrives itself (ArriveEachThread), so the reuse is ordered for compute-sanitizer too
// (racecheck reported the correction's reuse after named-barrier arrivals and after one arrival
// per warp; two-sided bar.sync failed synccheck).
// Alternating S (Shape::kAlternateS, the 16-bit kernels): the warpgroups take turns instead, KV
// tile i of the walk the turn of o_slice i % 2 (Baton below): its owner computes S(i) and the
// softmax from the rows' state the previous owner left, publishes P(i), O's correction and the
// state after i, and P V's its columns with P in registers; the other P V's its columns with P
// from shared memory, while its own S(i + 1) runs on the tensor cores.
#pragma once
#include "common/mbarrier.cuh"
#include "common/pipeline.cuh"
#include "common/smem.cuh"
#include "common/softmax.cuh"
#include "sm90a/smem_layout.cuh"

namespace fa4 {
namespace sm90a {

// The shared slot's rows: this thread's rows of the fragments (warp w: 16w + lane / 4, and + 8).
template <class Config>
struct SharedRows {
  using L = SmemLayout<Config>;
  u32 base;  // the dynamic shared memory's address
  __device__ __forceinline__ static int row0() { return (threadIdx.x & 127) / 32 * 16 + (threadIdx.x & 31) / 4; }
  __device__ __forceinline__ void put(u32 offset, const float (&v)[2]) const {
    if ((threadIdx.x & 3) == 0) {
      st_shared_u32(base + offset + 4 * row0(), __float_as_uint(v[0]));
      st_shared_u32(base + offset + 4 * (row0() + 8), __float_as_uint(v[1]));
    }
  }
  __device__ __forceinline__ void get(u32 offset, float (&v)[2]) const {
    v[0] = __uint_as_float(ld_shared_u32(base + offset + 4 * row0()));
    v[1] = __uint_as_float(ld_shared_u32(base + offset + 4 * (row0() + 8)));
  }
  // P (pr: the k16 A fragments, pr[2j + h] = row r0 + 8h, keys 8j + 2 (lane % 4) + {0, 1}) into
  // the slot, SW128 blocks of 64 keys: 16-byte unit (j % 8) ^ (r % 8) of row r in key block j / 8.
  template <int kBN, int kPRegs>
  __device__ __forceinline__ void put_p(const u32 (&pr)[kPRegs]) const {
    const int r0 = row0(), quad = threadIdx.x & 3;
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = r0 + 8 * h;
        st_shared_u32(base + L::kSharedPOffset + (j / 8) * (64 * 128) + r * 128 + (((j % 8) ^ (r % 8)) << 4) + 4 * quad,
                      pr[2 * j + h]);
      }
  }
};

// The S warpgroup's side.
template <class Config>
struct SharedP {
  using Sh = Shape<Config>;
  using L = SmemLayout<Config>;
  static constexpr bool kOn = Sh::kOSplit > 1 && !Sh::kAlternateS;
  SharedRows<Config> rows;
  pipe::Producer<1> ring;

  __device__ __forceinline__ static SharedP make(u32 smem_base, typename L::Barriers* bars) {
    return SharedP{{smem_base}, pipe::Producer<1>(&bars->p)};
  }
  // Once P(n) is packed (pr: the k16 A fragments, pr[2j + h] = row r0 + 8h, keys 8j + 2 (lane % 4)
  // + {0, 1}) and corr holds n's O correction of the thread's rows.
  __device__ __forceinline__ void publish(const u32 (&pr)[Sh::kPRegs], const float (&corr)[2]) {
    if constexpr (kOn) {
      auto slot = ring.acquire();  // the partner's P V of the previous tile is done
      rows.template put_p<Sh::kBN>(pr);
      rows.put(L::kSharedCorrOffset, corr);
      fence_proxy_async();  // P's generic writes before the partner's wgmma reads them
      slot.arrive();
    }
  }
  // The epilogue: the rows' 1 / sum (with every factor the O fragment takes).
  __device__ __forceinline__ void publish_inv(const float (&inv)[2]) {
    if constexpr (kOn) {
      auto slot = ring.acquire();  // the partner's last P V is done
      rows.put(L::kSharedInvOffset, inv);
      slot.arrive();
    }
  }
};

// The partner's side: take() waits for the next publication; its scope's end hands the slot back.
template <class Config>
struct SharedPReader {
  using L = SmemLayout<Config>;
  SharedRows<Config> rows;
  pipe::Consumer<1, pipe::ArriveEachThread> ring;

  __device__ __forceinline__ static SharedPReader make(u32 smem_base, typename L::Barriers* bars) {
    return SharedPReader{{smem_base}, pipe::Consumer<1, pipe::ArriveEachThread>(&bars->p)};
  }
  __device__ __forceinline__ auto take() { return ring.acquire(); }
  __device__ __forceinline__ void corr(float (&c)[2]) const { rows.get(L::kSharedCorrOffset, c); }
  __device__ __forceinline__ void inv(float (&c)[2]) const { rows.get(L::kSharedInvOffset, c); }
  __device__ __forceinline__ u32 p_addr() const { return rows.base + L::kSharedPOffset; }
};

// Alternating S (Shape::kAlternateS): the one slot both warpgroups publish in, each on its own
// tiles, and read the other's from. Publication i (the CTA's KV tile i, over every unit of a
// persistent walk) completes phase i of the slot's full barrier (every thread of the publisher
// arrives). No empty barrier: publication i + 1 comes from the warpgroup that read publication i,
// after its P V(i) from the slot was waited for, and publication i + 2 from i's publisher after it
// waited for i + 1; so every reuse of the slot is ordered after the last read of it, through the
// full barrier (each reading thread's own wait).
template <class Config>
struct Baton {
  using Sh = Shape<Config>;
  using L = SmemLayout<Config>;
  SharedRows<Config> rows;
  u64* full;

  __device__ __forceinline__ static Baton make(u32 smem_base, typename L::Barriers* bars) {
    return Baton{{smem_base}, &bars->p.full[0]};
  }
  // Tile i's publication: P(i), O's correction for i and the rows' softmax state after i (the
  // maximum, and the sum over the row's quad: the reader resumes with it in the quad's first lane).
  __device__ __forceinline__ void publish(const u32 (&pr)[Sh::kPRegs], const float (&corr)[2],
                                          const softmax::RowState (&row)[2]) const {
    float max[2], sum[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      max[h] = row[h].max;
      sum[h] = row[h].sum;
      sum[h] += __shfl_xor_sync(0xffffffffu, sum[h], 1);
      sum[h] += __shfl_xor_sync(0xffffffffu, sum[h], 2);
    }
    rows.template put_p<Sh::kBN>(pr);
    rows.put(L::kSharedCorrOffset, corr);
    rows.put(L::kSharedMaxOffset, max);
    rows.put(L::kSharedSumOffset, sum);
    fence_proxy_async();  // P's generic writes before the reader's wgmma reads them
    mbar_arrive(full);
  }
  // A publication as its reader takes it: O's correction, the rows' maximum, and this thread's
  // share of their sums (the quad's first lane holds the whole).
  struct Taken {
    float corr[2], max[2], sum[2];
  };
  // Waits for the publication of phase parity `parity` (tile i's: i % 2) and reads it.
  __device__ __forceinline__ Taken take(u32 parity) const {
    mbar_wait(full, parity);
    Taken t;
    rows.get(L::kSharedCorrOffset, t.corr);
    rows.get(L::kSharedMaxOffset, t.max);
    rows.get(L::kSharedSumOffset, t.sum);
    if ((threadIdx.x & 3) != 0) t.sum[0] = t.sum[1] = 0.0f;
    return t;
  }
  __device__ __forceinline__ u32 p_addr() const { return rows.base + L::kSharedPOffset; }
};

}  // namespace sm90a
}  // namespace fa4
