// Host-side 16-bit and 8-bit float conversions (round to nearest even), for inputs and reference checks.
#pragma once
#include <algorithm>
#include <cstdint>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "fa4jit/config.hpp"

namespace jit::host {

inline std::uint16_t float_to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

inline float bf16_to_float(std::uint16_t h) {
  const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline std::uint16_t float_to_fp16(float f) {
  return static_cast<std::uint16_t>(std::bit_cast<std::uint16_t>(static_cast<_Float16>(f)));
}
inline float fp16_to_float(std::uint16_t h) { return static_cast<float>(std::bit_cast<_Float16>(h)); }

// float8 e4m3 ("e4m3fn", torch.float8_e4m3fn): sign, 4 exponent bits (bias 7), 3 mantissa bits;
// no infinities, NaN = S.1111.111 (0x7f / 0xff), largest finite 448 (0x7e), smallest normal 2^-6
// (0x08), smallest subnormal 2^-9 (0x01).
inline float e4m3_to_float(std::uint8_t b) {
  const int exp = (b >> 3) & 0xf, man = b & 7;
  if (exp == 0xf && man == 7) return std::numeric_limits<float>::quiet_NaN();
  // Normal (1 + m/8) * 2^(e-7) = (8 + m) * 2^(e-10); subnormal m/8 * 2^-6 = m * 2^-9. Exact in float.
  const float v =
      exp == 0 ? std::ldexp(static_cast<float>(man), -9) : std::ldexp(static_cast<float>(8 + man), exp - 10);
  return b & 0x80 ? -v : v;
}

// Round to nearest, ties to even, saturating to +-448 as CUDA's cvt.rn.satfinite.e4m3x2.f32 does
// (infinities and finite values beyond 448 give +-448); NaN gives 0x7f.
inline std::uint8_t float_to_e4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  const std::uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  const double a = std::fabs(static_cast<double>(f));
  if (a >= 448.0) return sign | 0x7e;
  if (a == 0.0) return sign;
  // Quantum of a's binade (the subnormals share the lowest normal binade's, 2^-9): a / q is the
  // value in units of the last mantissa bit, 8..16 in a normal binade.
  int e2 = 0;
  std::frexp(a, &e2);  // a = m * 2^e2, m in [0.5, 1): floor(log2 a) = e2 - 1
  const int exp = std::max(e2 - 1, -6);
  const double n = std::nearbyint(std::ldexp(a, 3 - exp));  // exact scaling; nearbyint: ties to even
  // ((exp + 7) << 3) + (n - 8) also covers n = 16 (the carry into the next binade) and the
  // subnormals (exp -6: the code is n itself, 8 being the smallest normal 0x08).
  const int code = ((exp + 7) << 3) + static_cast<int>(n) - 8;
  return sign | static_cast<std::uint8_t>(std::min(code, 0x7e));
}

// A value of type t as bits: 16-bit types use all 16, e4m3 the low 8.
inline std::uint16_t to_bits(DType t, float f) {
  switch (t) {
    case DType::bf16: return float_to_bf16(f);
    case DType::fp16: return float_to_fp16(f);
    case DType::e4m3: return float_to_e4m3(f);
  }
  return 0;
}
inline float from_bits(DType t, std::uint16_t h) {
  switch (t) {
    case DType::bf16: return bf16_to_float(h);
    case DType::fp16: return fp16_to_float(h);
    case DType::e4m3: return e4m3_to_float(static_cast<std::uint8_t>(h));
  }
  return 0;
}

}  // namespace jit::host
