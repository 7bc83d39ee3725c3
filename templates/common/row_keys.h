// A query row's visible keys as one interval (masks with kRowInterval, common/mask.cuh), as the
// kernels mask a partial tile by it: sm100a's visibility words take the interval's bits of each
// 32-key span. Plain C++, so the unit tests compile it on the host as the kernels do.
#pragma once
#include "common/segments.h"  // FA4_HOST_DEVICE

namespace fa4 {
namespace mask {

// Bits [lo, hi) of a 32-bit word, each bound clamped to [0, 32]: bit j is key k0 + j of a span
// when the row sees keys [k0 + lo, k0 + hi). Shifts stay below 32 (1u << 32 is undefined).
FA4_HOST_DEVICE constexpr unsigned span_bits(int lo, int hi) {
  const int l = lo < 0 ? 0 : lo > 32 ? 32 : lo;
  const int h = hi < 0 ? 0 : hi > 32 ? 32 : hi;
  const unsigned below_h = h == 32 ? ~0u : (1u << h) - 1u;
  const unsigned below_l = l == 32 ? ~0u : (1u << l) - 1u;
  return h > l ? below_h & ~below_l : 0u;
}

}  // namespace mask
}  // namespace fa4
