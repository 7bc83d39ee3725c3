// LaunchArgs -> FwdParams, after checking every argument against the kernel's config; and the
// lengths the schedule assumes for a launch (schedule_model).
#pragma once
#include "common/params.h"
#include "fa4jit/kernel.hpp"

namespace jit::detail {

struct LaunchShape {
  int batch = 0, max_seqlen_q = 0, num_q_heads = 0;
  int max_seqlen_k = 0;  // 0: unknown (varlen keys)
  int grid_heads = 0;    // q heads, or packed CTAs (KV heads, or a sliced group's slices) when GQA heads are packed
};

// Throws LaunchError naming the argument, the value and what the kernel expects.
fa4::FwdParams pack_params(const ResolvedConfig& rc, const LaunchArgs& a, LaunchShape* shape);

// The schedule's model of a launch: every sequence at the longest lengths. `shape.max_seqlen_k` is
// the keys it assumes: the launch's own where the host knows them; for a varlen or paged launch
// the caller's max_seqlen_k (packed keys: unknown without it, 0; paged: at most the page table's
// row, which is the model without it).
// causal_known_lengths: a causal launch whose model is complete (varlen: with max_seqlen_k), so its
// longest-first sections are chosen by simulating the walk. Only the CTA order and count follow
// the model, never a length the kernel reads, so a wrong hint costs speed only.
struct ScheduleModel {
  LaunchShape shape;
  bool causal_known_lengths = false;
  // Whether the static walk's order has the tiles' real weights: a mask without a snippet (whose
  // weights come from its tile map) over sequences of one length (no cu_seqlens_q / cu_seqlens_k /
  // seqused_k). Where not, a dynamic-walk kernel claims its units at run time
  // (FwdParams::tile_counter); where so, it strides as the persistent walk does.
  bool static_order = false;
  // A sliding window bounded on both sides: the widest run of keys one Q tile's band shows (its
  // queries' span, at most BM, plus both extents) and the keys a prefix adds (mask_prefix); 0: no
  // band narrower than the sequence. Split counts are sized by the KV tiles a Q tile walks
  // (kv_tiles), not the sequence's: a 128-key window over 32k keys is 2-3 tiles, and splitting
  // those cost a combine launch per call (gpt-oss's window layers at 0.64x FA4, docs/PERF.md run 87).
  long long band_keys = 0, prefix_keys = 0;
  // KV tiles of bn keys one Q tile walks at most: the longest sequence's, or fewer under a band.
  int kv_tiles(int bn) const;
};
ScheduleModel schedule_model(const LaunchShape& shape, const LaunchArgs& args, const FA4Config& c);

}  // namespace jit::detail
