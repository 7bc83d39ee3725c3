// Raw PTX data movement for sm_80+ (cp.async and ldmatrix: common/smem.cuh): vector shared/global
// accesses for the epilogue.
// Inline PTX only: NVRTC gets no headers.
#pragma once
#include "common/prelude.cuh"
#include "common/smem.cuh"

namespace fa4 {
namespace sm80 {

__device__ __forceinline__ void st_shared_b32(u32 addr, u32 v) {
  asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ void st_global_v4(void* p, const u32 (&v)[4]) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v[0]), "r"(v[1]), "r"(v[2]), "r"(v[3])
               : "memory");
}

// Split-KV partial O: two adjacent float32 columns of one row (8-byte aligned: kDepth % 8 == 0).
__device__ __forceinline__ void st_global_v2_f32(float* p, float a, float b) {
  asm volatile("st.global.v2.f32 [%0], {%1, %2};" ::"l"(p), "f"(a), "f"(b) : "memory");
}

// Special registers read with volatile asm: each call is a fresh S2R the compiler can neither
// merge with an earlier read nor hoist, so values needed only late (epilogue) or per tile
// are re-read instead of occupying a register across the KV loop.
__device__ __forceinline__ int fresh_ctaid_x() { int v; asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(v)); return v; }
__device__ __forceinline__ int fresh_ctaid_y() { int v; asm volatile("mov.u32 %0, %%ctaid.y;" : "=r"(v)); return v; }
__device__ __forceinline__ int fresh_ctaid_z() { int v; asm volatile("mov.u32 %0, %%ctaid.z;" : "=r"(v)); return v; }
__device__ __forceinline__ int fresh_nctaid_x() { int v; asm volatile("mov.u32 %0, %%nctaid.x;" : "=r"(v)); return v; }
__device__ __forceinline__ int fresh_tid_x() { int v; asm volatile("mov.u32 %0, %%tid.x;" : "=r"(v)); return v; }

}  // namespace sm80
}  // namespace fa4
