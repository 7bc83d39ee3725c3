// Types and numeric primitives shared by every backend. No headers: NVRTC compiles this
// without the toolkit's include directory, which keeps a cold compile short and the
// installed library free of toolkit paths.
#pragma once
#include "common/params.h"

namespace fa4 {

typedef unsigned int u32;
typedef unsigned long long u64;
typedef unsigned short u16;

// L2 eviction priority of a load's lines (the .L2::cache_hint operand: createpolicy.fractional's
// 64-bit encodings at fraction 1.0, as CUTLASS's CacheHintSm90 writes them). kEvictFirst: lines a
// launch reads once go first, so they do not push out what the kernel (or the next one) reads again.
enum class L2Hint : u64 { kNone = 0, kEvictFirst = 0x12F0000000000000ull };

// Storage types: bits only; all arithmetic happens in float32. e4m3_t: float8 e4m3 (e4m3fn).
struct bf16_t { u16 bits; };
struct half_t { u16 bits; };
struct e4m3_t { unsigned char bits; };

template <class T> struct DTypeTraits;
template <> struct DTypeTraits<bf16_t> { static constexpr bool kIsBf16 = true, kIsFp8 = false; };
template <> struct DTypeTraits<half_t> { static constexpr bool kIsBf16 = false, kIsFp8 = false; };
template <> struct DTypeTraits<e4m3_t> { static constexpr bool kIsBf16 = false, kIsFp8 = true; };

// A compile-time bool passed as a value: a C++17 generic lambda takes it as `auto side` and reads
// decltype(side)::value in `if constexpr` and template arguments.
template <bool kB> struct BoolConst { static constexpr bool value = kB; };

// Packs two floats into one 32-bit register of 16-bit values (lo in the low half).
template <class T>
__device__ __forceinline__ u32 pack2(float lo, float hi) {
  u32 r;
  if constexpr (DTypeTraits<T>::kIsBf16)
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  else
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// Two bf16 -> two fp16 in one register, rounded to nearest and saturated to +-65504 (exact for
// magnitudes 2^-14 .. 65504; NaN stays NaN).
__device__ __forceinline__ u32 bf16x2_to_f16x2(u32 x) {
  u32 r;
  asm("cvt.rn.satfinite.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(__uint_as_float(x & 0xffff0000u)), "f"(__uint_as_float(x << 16)));
  return r;
}

// Four floats -> four e4m3 in one register (a in the low byte), rounded to nearest, saturated to
// +-448 (satfinite: e4m3 has no infinity).
__device__ __forceinline__ u32 pack4_e4m3(float a, float b, float c, float d) {
  u32 r;
  asm("{ .reg .b16 lo, hi;\n"
      " cvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\n"
      " cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n"
      " mov.b32 %0, {lo, hi}; }"
      : "=r"(r)
      : "f"(a), "f"(b), "f"(c), "f"(d));
  return r;
}

// One e4m3 code -> float, without the sm_89 cvt (the portable backend's sm_80): sign and the 7 low
// bits into float32's fields, times 2^120 (the exponent biases differ by 127 - 7). mul.rn without
// .ftz keeps e4m3's subnormals (float32 subnormals here) under --use_fast_math.
__device__ __forceinline__ float e4m3_to_float(u32 b) {
  const float f = __uint_as_float(((b & 0x80u) << 24) | ((b & 0x7fu) << 20));
  float y;
  asm("mul.rn.f32 %0, %1, 0f7B800000;" : "=f"(y) : "f"(f));  // 0x7B800000 = 2^120
  return y;
}

// Two e4m3 (x's low byte -> the low half) -> two T in one register. Exact: every e4m3 value is a
// normal f16 and bf16 number (or zero).
template <class T>
__device__ __forceinline__ u32 e4m3x2_to(u16 x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 890
  return pack2<T>(e4m3_to_float(x & 0xffu), e4m3_to_float(static_cast<u32>(x) >> 8));
#else
  u32 h;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h) : "h"(x));
  if constexpr (DTypeTraits<T>::kIsBf16) {
    float lo, hi;
    asm("{ .reg .f16 a, b; mov.b32 {a, b}, %2; cvt.f32.f16 %0, a; cvt.f32.f16 %1, b; }"
        : "=f"(lo), "=f"(hi)
        : "r"(h));
    return pack2<T>(lo, hi);
  } else {
    return h;
  }
#endif
}

template <class T>
__device__ __forceinline__ float to_float(u16 bits) {
  if constexpr (DTypeTraits<T>::kIsBf16) {
    return __uint_as_float(static_cast<u32>(bits) << 16);
  } else {
    float f;
    asm("{ .reg .f16 h; mov.b16 h, %1; cvt.f32.f16 %0, h; }" : "=f"(f) : "h"(bits));
    return f;
  }
}

template <class T>
__device__ __forceinline__ T from_float(float x) {
  T t;
  t.bits = static_cast<u16>(pack2<T>(x, 0.0f) & 0xffffu);
  return t;
}

__device__ __forceinline__ float exp2_approx(float x) {  // MUFU.EX2; exp2(-inf) = 0
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float fast_rcp(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Hides a value from loop-invariant code motion and CSE: a value derived from it is computed where
// it is used, not hoisted out of the KV loop and held (at 160 registers, kBM 192, ptxas otherwise
// hoists the four Q descriptors and spills them; ALiBi's slopes, score_mod.cuh).
__device__ __forceinline__ u32 opaque_u32(u32 x) {
  asm volatile("" : "+r"(x));
  return x;
}

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
// __builtin_bit_cast: NVRTC has no __builtin_huge_valf (nor __builtin_inff / __FLT_MAX__).
constexpr float kNegInf = -__builtin_bit_cast(float, 0x7f800000u);

__device__ __forceinline__ constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }

// Shared-memory address as the 32-bit value PTX wants.
__device__ __forceinline__ u32 smem_u32(const void* p) {
  return static_cast<u32>(__cvta_generic_to_shared(p));
}

// Programmatic dependent launch (sm_90+): the split-KV combine is launched as a dependent of the
// attention kernel (CompiledKernel::enqueue). Every attention CTA lets it start at once, so its
// CTAs are resident before the last attention CTA ends (0.5-0.8 us less per split call in a CUDA
// graph on an H200, docs/PERF.md run 66); the combine waits in griddepcontrol.wait until the
// attention grid has completed and its writes are visible. Without a dependent launch both are
// no-ops.
__device__ __forceinline__ void launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
// sm_90+ only: the host launches a combine as a dependent exactly when it compiled it to wait
// (combine_waits_for_kernel, generator/combine.hpp).
__device__ __forceinline__ void wait_for_primary_grid() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

}  // namespace fa4
