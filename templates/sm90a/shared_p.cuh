// O split over warpgroups (Shape::kOSplit > 1: V 512 wide, MLA's latent): the row group's first
// warpgroup (the S warpgroup) computes S = Q K^T and the softmax, P V's its columns of O, and
// hands its partner, through shared memory (SmemLayout kShared*), each KV tile's P and O
// correction and at the end each row's 1 / sum; the partner P V's its own columns with P from
// shared memory (consumer.cuh follow_p). S is computed once per CTA (FlashMLA's split of the
// 512-wide accumulator; it alternates S between its warpgroups, this does not).
// Named barriers (SharedPBarrier, 256 threads): P full (the S warpgroup arrives once per KV tile
// and once for the 1 / sums, the partner syncs as often) and P empty (the partner arrives after
// each P V but the last; the S warpgroup syncs before writing each P but the first).
#pragma once
#include "common/mbarrier.cuh"
#include "common/smem.cuh"
#include "sm90a/smem_layout.cuh"

namespace fa4 {
namespace sm90a {

template <class Config>
struct SharedP {
  using Sh = Shape<Config>;
  using L = SmemLayout<Config>;
  using Bar = SharedPBarrier<Sh::kNumConsumerWGs>;
  static constexpr bool kOn = Sh::kOSplit > 1;
  u32 base;    // the dynamic shared memory's address
  bool first;  // no P published yet (the S warpgroup)

  __device__ __forceinline__ static SharedP make(u32 smem_base) { return SharedP{smem_base, true}; }
  // This thread's rows of the fragments (warp w: rows 16w + lane / 4, + 8).
  __device__ __forceinline__ static int row0() { return (threadIdx.x & 127) / 32 * 16 + (threadIdx.x & 31) / 4; }

  // The S warpgroup, once P(n) is packed (pr: the k16 A fragments, pr[2j + h] = row r0 + 8h, keys
  // 8j + 2 (lane % 4) + {0, 1}) and corr holds n's O correction of its rows.
  __device__ __forceinline__ void publish(const u32 (&pr)[Sh::kPRegs], const float (&corr)[2]) {
    if constexpr (kOn) {
      if (!first) named_barrier_sync(Bar::kEmpty, 256);  // the partner's P V of the previous tile is done
      first = false;
      const int r0 = row0(), quad = threadIdx.x & 3;
#pragma unroll
      for (int j = 0; j < Sh::kBN / 8; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = r0 + 8 * h;  // SW128: 16-byte unit (j % 8) ^ (r % 8) of row r in key block j / 8
          st_shared_u32(base + L::kSharedPOffset + (j / 8) * (64 * 128) + r * 128 + (((j % 8) ^ (r % 8)) << 4) + 4 * quad,
                        pr[2 * j + h]);
        }
      put_rows(L::kSharedCorrOffset, corr);
      fence_proxy_async();  // P's generic writes before the partner's wgmma reads them
      named_barrier_arrive(Bar::kFull, 256);
    }
  }
  // The S warpgroup's epilogue: its rows' 1 / sum (with every factor the O fragment takes).
  __device__ __forceinline__ void publish_inv(const float (&inv)[2]) const {
    if constexpr (kOn) {
      put_rows(L::kSharedInvOffset, inv);
      named_barrier_arrive(Bar::kFull, 256);
    }
  }
  // The partner: wait for the next publication, read it, release P.
  __device__ __forceinline__ static void wait() { named_barrier_sync(Bar::kFull, 256); }
  __device__ __forceinline__ void corr(float (&c)[2]) const { get_rows(L::kSharedCorrOffset, c); }
  __device__ __forceinline__ void inv(float (&c)[2]) const { get_rows(L::kSharedInvOffset, c); }
  __device__ __forceinline__ u32 p_addr() const { return base + L::kSharedPOffset; }
  __device__ __forceinline__ static void release() { named_barrier_arrive(Bar::kEmpty, 256); }

 private:
  __device__ __forceinline__ void put_rows(u32 offset, const float (&v)[2]) const {
    if ((threadIdx.x & 3) == 0) {
      st_shared_u32(base + offset + 4 * row0(), __float_as_uint(v[0]));
      st_shared_u32(base + offset + 4 * (row0() + 8), __float_as_uint(v[1]));
    }
  }
  __device__ __forceinline__ void get_rows(u32 offset, float (&v)[2]) const {
    v[0] = __uint_as_float(ld_shared_u32(base + offset + 4 * row0()));
    v[1] = __uint_as_float(ld_shared_u32(base + offset + 4 * (row0() + 8)));
  }
};

}  // namespace sm90a
}  // namespace fa4
