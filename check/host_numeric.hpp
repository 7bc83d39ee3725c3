// Host-side 16-bit float conversions (round to nearest even), for inputs and reference checks.
#pragma once
#include <cstdint>
#include <bit>
#include <cstring>

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

inline std::uint16_t to_bits(DType t, float f) { return t == DType::bf16 ? float_to_bf16(f) : float_to_fp16(f); }
inline float from_bits(DType t, std::uint16_t h) { return t == DType::bf16 ? bf16_to_float(h) : fp16_to_float(h); }

}  // namespace jit::host
