// Tensor memory (TMEM) wrappers: allocation, tcgen05 fences, and register <-> TMEM moves.
// Raw PTX (NVRTC needs no headers); forms compiled under NVRTC 13.0 for sm_100a in
// shared/reference/nvrtc_ptx_verified.md section 3.1.
//
// A TMEM address is (lane << 16) | column. Lanes are rows of the MMA tile (M = 128); a warp may
// only touch lanes 32 * (warp % 4) .. + 31, so a warpgroup covers all 128 rows, one row per thread.
#pragma once
#include "common/prelude.cuh"
#include "sm100a/abi.h"

namespace fa4 {
namespace sm100a {
namespace tmem {

constexpr int kColumns = abi::kTmemColumns;  // the whole TMEM of one SM; one CTA per SM owns all of it

// Whole warp. Writes the allocated base address to shared memory.
__device__ __forceinline__ void alloc(u32* smem_dst, u32 ncols) {
  asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], %1;" ::"r"(smem_u32(smem_dst)),
               "r"(ncols)
               : "memory");
}
// Lets other CTAs on this SM allocate (there are none with 512 columns taken, but the
// allocator expects the permit back before exit).
__device__ __forceinline__ void relinquish_alloc_permit() {
  asm volatile("tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void dealloc(u32 taddr, u32 ncols) {
  asm volatile("tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, %1;" ::"r"(taddr), "r"(ncols) : "memory");
}

// Order tcgen05 operations around thread synchronisation (mbarrier / bar.sync):
// before_thread_sync on the signalling side, after_thread_sync on the waiting side.
__device__ __forceinline__ void fence_before() { asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory"); }
__device__ __forceinline__ void fence_after() { asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory"); }

__device__ __forceinline__ void wait_ld() { asm volatile("tcgen05.wait::ld.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wait_st() { asm volatile("tcgen05.wait::st.sync.aligned;" ::: "memory"); }

// Lane base of the calling warp's 32-row slice.
__device__ __forceinline__ u32 warp_lane_base() { return static_cast<u32>((threadIdx.x / 32) % 4 * 32) << 16; }

// Keeps the compiler from using loaded registers before tcgen05.wait::ld (the values are
// only defined after it; ptxas scoreboards LDTM, this pins the PTX order as well).
template <int N>
__device__ __forceinline__ void pin(u32 (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i]));
}

#define FA4_R8(o) "=r"(r[o + 0]), "=r"(r[o + 1]), "=r"(r[o + 2]), "=r"(r[o + 3]), "=r"(r[o + 4]), "=r"(r[o + 5]), \
                  "=r"(r[o + 6]), "=r"(r[o + 7])
#define FA4_W8(o) "r"(r[o + 0]), "r"(r[o + 1]), "r"(r[o + 2]), "r"(r[o + 3]), "r"(r[o + 4]), "r"(r[o + 5]), \
                  "r"(r[o + 6]), "r"(r[o + 7])

// 32 lanes x 32 bits, repeated over 8 / 16 / 32 consecutive columns: thread t of the warp gets
// lane (base + t), columns [col, col + N).
__device__ __forceinline__ void ld_32x32b_x16(u32 taddr, u32 (&r)[16]) {
  asm volatile(
      "tcgen05.ld.sync.aligned.32x32b.x16.b32 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, "
      "%15}, [%16];"
      : FA4_R8(0), FA4_R8(8)
      : "r"(taddr)
      : "memory");
}
__device__ __forceinline__ void ld_32x32b_x32(u32 taddr, u32 (&r)[32]) {
  asm volatile(
      "tcgen05.ld.sync.aligned.32x32b.x32.b32 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, "
      "%15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, [%32];"
      : FA4_R8(0), FA4_R8(8), FA4_R8(16), FA4_R8(24)
      : "r"(taddr)
      : "memory");
}
__device__ __forceinline__ void st_32x32b_x8(u32 taddr, const u32 (&r)[8]) {
  asm volatile("tcgen05.st.sync.aligned.32x32b.x8.b32 [%0], {%1, %2, %3, %4, %5, %6, %7, %8};" ::"r"(taddr), FA4_W8(0)
               : "memory");
}
__device__ __forceinline__ void st_32x32b_x16(u32 taddr, const u32 (&r)[16]) {
  asm volatile(
      "tcgen05.st.sync.aligned.32x32b.x16.b32 [%0], {%1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, "
      "%15, %16};" ::"r"(taddr),
      FA4_W8(0), FA4_W8(8)
      : "memory");
}
__device__ __forceinline__ void st_32x32b_x32(u32 taddr, const u32 (&r)[32]) {
  asm volatile(
      "tcgen05.st.sync.aligned.32x32b.x32.b32 [%0], {%1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, "
      "%15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32};" ::"r"(taddr),
      FA4_W8(0), FA4_W8(8), FA4_W8(16), FA4_W8(24)
      : "memory");
}
#undef FA4_R8
#undef FA4_W8

}  // namespace tmem
}  // namespace sm100a
}  // namespace fa4
