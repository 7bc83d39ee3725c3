// Shared-memory accesses by address (PTX ld/st.shared, ldmatrix, stmatrix), for code that addresses
// shared memory as the 32-bit values smem_u32 gives (swizzled staging, per-warp state words, MMA
// fragments, the FP8 V transposer).
#pragma once
#include "common/prelude.cuh"

namespace fa4 {

// 16-byte async copy global -> shared (sm_80+, bypassing registers and L1); `valid == false` copies
// 0 source bytes and zero-fills the 16 bytes (rows past seqlen read as zero, so their S is 0 and
// P*V adds 0, never NaN). The portable kernel's loads and sm90a's gathered paged K / V rows; kHint:
// the lines' L2 priority (kNone: the plain instruction).
template <L2Hint kHint = L2Hint::kNone>
__device__ __forceinline__ void cp_async_16(u32 dst, const void* src, bool valid) {
  if constexpr (kHint == L2Hint::kNone)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0) : "memory");
  else
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;" ::"r"(dst), "l"(src),
                 "r"(valid ? 16 : 0), "l"(static_cast<u64>(kHint))
                 : "memory");
}
// 4-byte async copy global -> shared (through L1: .ca, the only cache op below 16 bytes): sm90a's
// gathering warps fetch page numbers with it (sm90a/gather.cuh GatherState).
__device__ __forceinline__ void cp_async_4(u32 dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
// The mbarrier at bar (shared address) receives one arrival once every cp.async this thread issued
// before it has landed (noinc: the arrival is one of those the barrier was initialised to expect).
// The thread itself does not wait: sm90a's gathering warps keep every free stage in flight, as TMA does.
__device__ __forceinline__ void cp_async_arrive_noinc(u32 bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

__device__ __forceinline__ void st_shared_u32(u32 addr, u32 v) {
  asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ u32 ld_shared_u32(u32 addr) {
  u32 v;
  asm volatile("ld.shared.b32 %0, [%1];" : "=r"(v) : "r"(addr) : "memory");
  return v;
}

__device__ __forceinline__ void ld_shared_v4(u32 addr, u32 (&v)[4]) {
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];" : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3]) : "r"(addr)
               : "memory");
}

__device__ __forceinline__ void st_shared_v4(u32 addr, const u32 (&v)[4]) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(v[0]), "r"(v[1]), "r"(v[2]), "r"(v[3])
               : "memory");
}
__device__ __forceinline__ void st_shared_v4(u32 addr, u32 a, u32 b, u32 c, u32 d) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}

// Four 8x8 b16 matrices, lanes 8i..8i+7 addressing the rows of matrix i (sm_75+). volatile: the
// same address is read again for a later tile of a ring, so the compiler must not merge or hoist
// these across the barriers that order them.
__device__ __forceinline__ void ldmatrix_x4(u32 (&r)[4], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(u32 (&r)[4], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
// The store counterpart (sm_90+): register i of lane l is row l / 4, b16 columns 2(l % 4) and
// 2(l % 4) + 1, of matrix i; lanes 8i..8i+7 address the rows of matrix i.
__device__ __forceinline__ void stmatrix_x4(u32 addr, const u32 (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(r[0]), "r"(r[1]),
               "r"(r[2]), "r"(r[3])
               : "memory");
}

}  // namespace fa4
