// The automatic kernel choice's tests of a launch (jit::choose_kernel, generator/kernel_choice.cpp),
// shared with the backends' own tiles (BackendPolicy::launch_bm).
#pragma once
#include <algorithm>
#include <climits>

#include "fa4jit/advanced.hpp"

namespace jit::detail {

// Decode and speculative rows: max_seqlen_q queries of `group` heads within one 128-row packed
// tile (a group above 128: one query).
inline bool short_rows(const LaunchFacts& f) { return 1LL * f.max_seqlen_q * f.group <= std::max(128, f.group); }

// A varlen batch whose query lengths are uneven: its longest at least 1.2x the mean.
inline bool uneven(const LaunchFacts& f) {
  return f.varlen_batch > 0 && 5LL * f.max_seqlen_q * f.varlen_batch >= 6 * f.total_q;
}

// A continuous-batching step (decode rows beside prefill chunks in one varlen call): uneven, with a
// mean of at most 512 queries a sequence. Its decode rows stream whole KV caches, which sm_90a's
// decode tiles (BM 64) do faster than its prefill tiles (BackendPolicy::launch_bm); a varlen
// prefill batch (a mean above 512) is the prefill tiles' work.
constexpr long long kStepMeanQueries = 512;
inline bool prefill_batch(const LaunchFacts& f) {  // a varlen batch of a mean above kStepMeanQueries
  return f.varlen_batch > 0 && f.total_q > kStepMeanQueries * f.varlen_batch;
}
inline bool serving_step(const LaunchFacts& f) { return uneven(f) && !prefill_batch(f); }

// LaunchFacts::window_keys of a sliding window's extents (-1: unbounded) and key prefix: the keys
// one query sees at most, or 0 where a side is unbounded (clamped to INT_MAX).
inline int window_keys(long long left, long long right, long long prefix) {
  if (left < 0 || right < 0) return 0;
  return static_cast<int>(std::min<long long>(INT_MAX, left + right + 1 + std::max(0LL, prefix)));
}

// Whether every backend packs this group (pack_heads): up to 64, or equal slices of 2..64 heads.
bool packable(int group);

}  // namespace jit::detail
