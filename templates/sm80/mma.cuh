// mma.sync m16n8k16 with f32 accumulate, bf16 or fp16 inputs (sm_80+, also valid on sm_90/100/120).
// Fragment layout per lane (g = lane / 4, t = lane % 4), PTX ISA "mma.m16n8k16":
//   A (16x16, row): a0 = (g, 2t..2t+1), a1 = (g+8, 2t..), a2 = (g, 2t+8..), a3 = (g+8, 2t+8..)
//   B (16x8, col):  b0 = (k 2t..2t+1, n g), b1 = (k 2t+8.., n g)
//   C (16x8, f32):  c0,c1 = (g, 2t..2t+1), c2,c3 = (g+8, 2t..2t+1)
#pragma once
#include "common/prelude.cuh"

namespace fa4 {
namespace sm80 {

// d += a * b
template <class Element>
__device__ __forceinline__ void mma_16816(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
  if constexpr (DTypeTraits<Element>::kIsBf16) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// The FA2 trick: the C fragments of two adjacent n8 blocks of S (keys 16kk..16kk+15) are,
// element for element, the A fragment of P for k-step kk of P*V. No shuffle, no smem.
template <class Element>
__device__ __forceinline__ void s_to_a_fragment(u32 (&a)[4], const float (&s0)[4], const float (&s1)[4]) {
  a[0] = pack2<Element>(s0[0], s0[1]);  // row g,   keys 2t..      (block 2kk, c0 c1)
  a[1] = pack2<Element>(s0[2], s0[3]);  // row g+8, keys 2t..      (block 2kk, c2 c3)
  a[2] = pack2<Element>(s1[0], s1[1]);  // row g,   keys 8+2t..    (block 2kk+1)
  a[3] = pack2<Element>(s1[2], s1[3]);  // row g+8, keys 8+2t..
}

}  // namespace sm80
}  // namespace fa4
