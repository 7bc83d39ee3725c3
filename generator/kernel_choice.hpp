// The automatic kernel choice's tests of a launch (jit::choose_kernel, generator/kernel_choice.cpp),
// shared with the backends' own tiles (BackendPolicy::launch_bm).
#pragma once
#include <algorithm>

#include "fa4jit/advanced.hpp"

namespace jit::detail {

// Decode and speculative rows: max_seqlen_q queries of `group` heads within one 128-row packed
// tile (a group above 128: one query).
inline bool short_rows(const LaunchFacts& f) { return 1LL * f.max_seqlen_q * f.group <= std::max(128, f.group); }

// A varlen batch whose query lengths are uneven: its longest at least 1.2x the mean.
inline bool uneven(const LaunchFacts& f) {
  return f.varlen_batch > 0 && 5LL * f.max_seqlen_q * f.varlen_batch >= 6 * f.total_q;
}

// Whether every backend packs this group (pack_heads): up to 64, or equal slices of 2..64 heads.
bool packable(int group);

}  // namespace jit::detail
