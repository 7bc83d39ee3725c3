// What every tile walk shares: the host plan's input and output (WalkInput, WalkPlan) and walk_min.
// The walks, one header each holding its host plan, its decode rules and its device iterator (as
// CUTLASS's FMHA tile schedulers hold their grid shape and their tile iteration):
//   common/grid_walk.h        GridWalk + GridTiles: one CTA per unit, grid (m blocks * KV splits,
//                             heads, batch); masked grids run longest-first over sections of
//                             p.lpt_heads (batch, head) pairs.
//   common/persistent_walk.h  PersistentWalk + PersistentTiles: grid (min(#SMs, units), 1, 1); CTA x
//                             takes units x, 2G-1-x, 2G+x, ...; whole tiles, KV splits of every tile,
//                             or whole tiles then a split tail. Its host half also holds the
//                             longest-first order's section size (the L2 rule and the simulated
//                             balance of causal launches).
//   common/stream_k_walk.h    StreamKWalk + SegmentTiles: grid (G, 1, 1); CTA x takes its contiguous
//                             range of KV units (UnitSplit, common/segments.h).
// Each walk header is compiled by the host compiler and by NVRTC, as common/segments.h is: the host
// plan() (guarded by !__CUDACC_RTC__) fills the launch grid and the FwdParams fields the walk reads;
// the decode rules are __host__ __device__, used by the kernels and by the host's simulations and
// tests; the device iterator (guarded by __CUDACC_RTC__ / __CUDACC__) is what every warp role of a
// kernel walks. The per-tile work of a unit (rows, KV tile range, masking) is TileWork
// (common/tile_work.cuh).
#pragma once
#include "common/params.h"
#include "common/segments.h"

#if !defined(__CUDACC_RTC__)
#include <functional>
#endif

namespace fa4 {

FA4_HOST_DEVICE int walk_min(int a, int b) {
#if defined(__CUDA_ARCH__)
  return min(a, b);
#else
  return a < b ? a : b;
#endif
}

#if !defined(__CUDACC_RTC__)
// The persistent walk's longest-first sections (PersistentWalk::plan_sections): `heads` (batch,
// head) pairs per section; one_unit_per_cta: no section size within the L2 budget balances the
// static walk, so the launch runs one CTA per unit in that order and the hardware's CTA dispatch
// balances it, as it does the grid walk's.
struct LptSections {
  int heads = 1;
  bool one_unit_per_cta = false;
};

// What a walk's host plan needs from a launch (runtime/compiled_kernel.cpp fills it).
struct WalkInput {
  int m_blocks = 0;          // Q tiles per (batch, grid head): FwdParams::num_m_blocks
  int heads = 0;             // grid heads: q heads, or KV heads when GQA heads are packed
  int batch = 0;
  int kv_blocks = 0;         // KV tiles of the longest sequence (max_seqlen_k / BN, rounded up)
  bool keys_known = true;    // false: max_seqlen_k is 0 (no automatic split)
  int requested_splits = 0;  // LaunchArgs::num_splits (0: automatic), already range-checked
  int sms = 0;               // multiprocessors of the device
  // Longest-first order: the most (batch, head) pairs per section whose K/V fit the L2 budget
  // (PersistentWalk::l2_section_heads), 0 when the kernel keeps grid order (unmasked, or a backend
  // without LPT order).
  int lpt_heads = 0;
  // Unmasked, unpacked, not varlen: every tile weighs the same and tiles map to LSE rows in order,
  // so a persistent walk may split its last round (split tail).
  bool equal_tiles = false;
  int max_seqlen_q = 0, bm = 0;  // rows of a (batch, head) and of a Q tile: the split tail's first row
  // Causal with lengths the host knows: equal lengths, or a packed varlen batch with max_seqlen_k
  // (modelled as every sequence at the longest lengths). The persistent sections are chosen by
  // simulating the walk; balance(ctas, max_heads) gives them (LptSections: their size, and whether
  // the launch runs one CTA per unit), memoized by the caller. Unset: L2 bound only.
  bool causal_known_lengths = false;
  std::function<LptSections(int ctas, int max_heads)> balance;
  // Varlen grid walk (FwdParams::varlen_tiles): the most Q tiles the batch's sequences can hold
  // together (GridWalk::varlen_tile_bound), per grid head; 0: m_blocks per (batch, head).
  int varlen_tiles = 0;
  // Long-pole splits of a listed walk (GridWalk::long_pole_split, FwdParams::split_qmax): the most
  // queries of a sequence whose one Q tile may split (0: the kernel cannot: no listed walk, or
  // bottom-aligned Q tiles), the tile rows they fill (packed_row_count), and what sizes the pieces
  // and their scratch: KV tile width, the longest key run (varlen: the caller's max_seqlen_k hint;
  // 0: unknown), V's width.
  int pole_qmax = 0, pole_head_rows = 0;
  int bn = 0, max_seqlen_k = 0, value_depth = 0;
  long long tiles() const { return varlen_tiles > 0 ? 1LL * varlen_tiles * heads : 1LL * m_blocks * heads * batch; }
};

// What a walk's plan decided besides the FwdParams fields: the grid and the partial slots per
// LSE row that fa4_combine merges (1: no split).
struct WalkPlan {
  unsigned grid[3] = {1, 1, 1};
  int splits = 1;
  bool slots = false;  // long-pole splits: partial rows are per-sequence slots (FwdParams::split_row)
};
#endif

}  // namespace fa4
