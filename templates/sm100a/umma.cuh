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

// Instruction descriptor, kind::f16 and kind::f8f6f4 with fp32 accumulate:
//   [4,6) D format 1 = F32 | [7,10) A format | [10,13) B format (kind::f16: 0 = F16, 1 = BF16;
//   kind::f8f6f4: 0 = E4M3, 1 = E5M2) | [15] A major | [16] B major (0 = K-major, 1 = MN-major; MN-major
//   is valid for F16, BF16, TF32, E4M3, E5M2 and INT8, not the 6- and 4-bit types) | [17,23) N >> 3
//   | [24,29) M >> 4.
template <class Element>
__host__ __device__ constexpr u32 instr_desc(int M, int N, bool a_mn_major, bool b_mn_major) {
  constexpr u32 fmt = DTypeTraits<Element>::kIsBf16 ? 1u : 0u;  // F16 and E4M3 are both 0
  return (1u << 4) | (fmt << 7) | (fmt << 10) | (static_cast<u32>(a_mn_major) << 15) |
         (static_cast<u32>(b_mn_major) << 16) | (static_cast<u32>(N >> 3) << 17) | (static_cast<u32>(M >> 4) << 24);
}

// D(tmem) (+)= A(smem) * B(smem); accumulate = 0 overwrites D. kind::f16 for 16-bit Element,
// kind::f8f6f4 for e4m3 (the A/B formats are in the instruction descriptor).
#define FA4_UMMA_SS(kind)                                                                                   \
  asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %4, 0;\n tcgen05.mma.cta_group::1.kind::" kind        \
               " [%0], %1, %2, %3, p;\n}" ::"r"(d_tmem),                                                     \
               "l"(a_desc), "l"(b_desc), "r"(idesc), "r"(accumulate)                                          \
               : "memory")
#define FA4_UMMA_TS(kind)                                                                                   \
  asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %4, 0;\n tcgen05.mma.cta_group::1.kind::" kind        \
               " [%0], [%1], %2, %3, p;\n}" ::"r"(d_tmem),                                                   \
               "r"(a_tmem), "l"(b_desc), "r"(idesc), "r"(accumulate)                                          \
               : "memory")
template <class Element>
__device__ __forceinline__ void mma_ss(u32 d_tmem, u64 a_desc, u64 b_desc, u32 idesc, u32 accumulate) {
  if constexpr (DTypeTraits<Element>::kIsFp8)
    FA4_UMMA_SS("f8f6f4");
  else
    FA4_UMMA_SS("f16");
}
// D(tmem) (+)= A(tmem, K-major, 32 bits per column: 2 x 16-bit or 4 x e4m3) * B(smem).
template <class Element>
__device__ __forceinline__ void mma_ts(u32 d_tmem, u32 a_tmem, u64 b_desc, u32 idesc, u32 accumulate) {
  if constexpr (DTypeTraits<Element>::kIsFp8)
    FA4_UMMA_TS("f8f6f4");
  else
    FA4_UMMA_TS("f16");
}
#undef FA4_UMMA_SS
#undef FA4_UMMA_TS
// The mbarrier gets one arrival once all earlier tcgen05.mma of this thread have completed
// (their smem reads and TMEM writes are done).
__device__ __forceinline__ void commit(u64* bar) {
  asm volatile("tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%0];" ::"r"(smem_u32(bar))
               : "memory");
}

}  // namespace umma
}  // namespace sm100a
}  // namespace fa4
