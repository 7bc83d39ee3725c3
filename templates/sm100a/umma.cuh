// UMMA (tcgen05.mma) descriptors and issue wrappers. One thread issues; the MMA runs
// asynchronously and in issue order; tcgen05.commit makes an mbarrier arrive when every
// earlier MMA of the issuing thread has completed.
//
// Bit layouts follow CUTLASS cute/arch/mma_sm100_desc.hpp (SmemDescriptor, InstrDescriptor),
// as in shared/reference/nvrtc_ptx_verified.md 3.1. They are compile-checked only: no
// Blackwell GPU has run them. Re-check these first if a B200 gives wrong numbers.
#pragma once
#include "common/prelude.cuh"

namespace fa4 {
namespace sm100a {
namespace umma {

constexpr int kMmaK = 16;  // K per tcgen05.mma.kind::f16

// Shared-memory matrix descriptor, SWIZZLE_128B:
//   [0,14) start >> 4 | [16,30) LBO >> 4 | [32,46) SBO >> 4 | [46,48) version = 1
//   | [49,52) base offset = 0 (atoms are 1024-byte aligned) | [61,64) layout: 2 = SWIZZLE_128B.
// Canonical SW128 layouts (CUTLASS, in 16-bit elements; an atom row is 128 bytes = 64 elements):
//   K-major : rows of 64 K-elements; 8-row groups (1024 B) step by SBO; LBO unused (K per MMA <= 64).
//   MN-major: rows of 64 MN-elements; 64-wide MN blocks step by LBO; 8-row K groups step by SBO.
__device__ __forceinline__ u64 smem_desc_sw128(u32 smem_addr, u32 lbo_bytes, u32 sbo_bytes) {
  return static_cast<u64>((smem_addr & 0x3FFFF) >> 4) | (static_cast<u64>((lbo_bytes >> 4) & 0x3FFF) << 16) |
         (static_cast<u64>((sbo_bytes >> 4) & 0x3FFF) << 32) | (1ull << 46) | (2ull << 61);
}
// Moving a descriptor by `bytes` adds to the start-address field (no carry: smem < 256 KiB).
__device__ __forceinline__ u64 desc_advance(u64 desc, u32 bytes) { return desc + (bytes >> 4); }

// Instruction descriptor, kind::f16 with fp32 accumulate:
//   [4,6) D format 1 = F32 | [7,10) A format | [10,13) B format (0 = F16, 1 = BF16)
//   | [15] A major | [16] B major (0 = K-major, 1 = MN-major) | [17,23) N >> 3 | [24,29) M >> 4.
template <class Element>
__host__ __device__ constexpr u32 instr_desc_f16(int M, int N, bool a_mn_major, bool b_mn_major) {
  constexpr u32 fmt = DTypeTraits<Element>::kIsBf16 ? 1u : 0u;
  return (1u << 4) | (fmt << 7) | (fmt << 10) | (static_cast<u32>(a_mn_major) << 15) |
         (static_cast<u32>(b_mn_major) << 16) | (static_cast<u32>(N >> 3) << 17) | (static_cast<u32>(M >> 4) << 24);
}

// D(tmem) (+)= A(smem) * B(smem); accumulate = 0 overwrites D.
__device__ __forceinline__ void mma_ss(u32 d_tmem, u64 a_desc, u64 b_desc, u32 idesc, u32 accumulate) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %4, 0;\n tcgen05.mma.cta_group::1.kind::f16 [%0], %1, %2, %3, p;\n}" ::"r"(
          d_tmem),
      "l"(a_desc), "l"(b_desc), "r"(idesc), "r"(accumulate)
      : "memory");
}
// D(tmem) (+)= A(tmem, K-major, 2 x 16-bit per column) * B(smem).
__device__ __forceinline__ void mma_ts(u32 d_tmem, u32 a_tmem, u64 b_desc, u32 idesc, u32 accumulate) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %4, 0;\n tcgen05.mma.cta_group::1.kind::f16 [%0], [%1], %2, %3, p;\n}" ::"r"(
          d_tmem),
      "r"(a_tmem), "l"(b_desc), "r"(idesc), "r"(accumulate)
      : "memory");
}
// The mbarrier gets one arrival once all earlier tcgen05.mma of this thread have completed
// (their smem reads and TMEM writes are done).
__device__ __forceinline__ void commit(u64* bar) {
  asm volatile("tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%0];" ::"r"(smem_u32(bar))
               : "memory");
}

}  // namespace umma
}  // namespace sm100a
}  // namespace fa4
