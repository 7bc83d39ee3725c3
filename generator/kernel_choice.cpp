// jit::choose_kernel: whether a launch packs GQA, and the backend's own tile for it.
#include "generator/kernel_choice.hpp"

#include <fmt/format.h>

#include "fa4jit/errors.hpp"
#include "generator/arch.hpp"
#include "generator/backends/backend.hpp"

namespace jit {
namespace detail {

bool packable(int group) {
  FA4Config sliced;
  sliced.pack_gqa = true;
  sliced.group = group;
  return group > 1 && pack_heads(sliced, 64) > 1;
}

namespace {

// Packed GQA, automatic: short queries (decode and speculative rows) always; a varlen batch also
// when uneven (the packed grid walk lists each sequence's own tiles where the unpacked persistent
// walk models every sequence at the longest) or short (a mean of at most 64 queries: K/V read once
// per KV head). H200, bf16 d128 causal, back to back (docs/PERF.md run 81): uneven prefill batches
// packed 1.03-1.65x as fast as unpacked, 32 chunks of 64 queries over 4k keys 1.4-2.0x, a
// continuous-batching step 2-4x (run 62); even batches of 128-4096 queries unpacked 1.03-1.22x
// faster than packed.
bool auto_pack(const LaunchFacts& f) {
  if (short_rows(f)) return true;
  return f.varlen_batch > 0 && (uneven(f) || f.total_q <= 64LL * f.varlen_batch);
}

}  // namespace
}  // namespace detail

FA4Config choose_kernel(FA4Config c, const LaunchFacts& facts) {
  if (facts.group < 1 || facts.max_seqlen_q < 0 || facts.varlen_batch < 0 || facts.total_q < 0 || facts.window_keys < 0)
    throw ConfigError(
        fmt::format("choose_kernel: group {}, max_seqlen_q {}, varlen_batch {}, total_q {}, window_keys {}: the "
                    "group is at least 1 and the lengths at least 0",
                    facts.group, facts.max_seqlen_q, facts.varlen_batch, facts.total_q, facts.window_keys));
  // A varlen max_seqlen_q is the caller's hint; no sequence holds more than q's rows (the launch
  // clamps it the same way: pack_params).
  LaunchFacts f = facts;
  if (f.varlen_batch > 0 && f.total_q > 0 && f.max_seqlen_q > f.total_q) f.max_seqlen_q = static_cast<int>(f.total_q);
  const bool packable = detail::packable(f.group);
  const detail::BackendPolicy* arch = c.arch.empty() ? nullptr : &detail::policy(parse_arch(c.arch).backend);
  const std::optional<bool> own = arch && c.BM == 0 ? arch->packs(c, f) : std::nullopt;
  c.pack_gqa = f.pack_gqa ? *f.pack_gqa && f.group > 1 : packable && own.value_or(detail::auto_pack(f));
  if (c.pack_gqa) c.group = f.group;
  if (c.BM == 0 && arch) c.BM = arch->launch_bm(c, f, /*never_packs=*/!packable);
  return c;
}

}  // namespace jit
