// Section size of the persistent walker's longest-first order (PersistentTiles, masked launches).
// Tiles run in sections of `heads` (batch, head) pairs, heaviest Q tile first within a section,
// and CTA x takes unit x of every round (odd rounds reversed). That static striding only balances
// when each round's tiles weigh about the same; a section's heavy-to-light sawtooth whose period
// beats against the round leaves some CTAs mostly heavy tiles. Measured on an H200 (causal, d128):
// S 2048 with 25 pairs per section ran at 509 TFLOP/s against 550 with 12; S 16384 with 2 pairs at
// 477 against 616 with 3 (docs/PERF.md run 16). So the section size is chosen by simulating the walk.
#pragma once
#include <vector>

#include "common/tile_walk.h"

namespace jit::detail {

// Balance of the static walk: weights[x] is the cost of a pair's x-th heaviest Q tile; `pairs`
// (batch, head) pairs in sections of `heads`, walked by `ctas` CTAs through the persistent walk's own
// unit and decode rules (fa4::PersistentWalk, templates/common/tile_walk.h; no KV splits). Mean
// CTA load over the largest (1: perfect).
double strided_balance(const std::vector<double>& weights, int pairs, int ctas, int heads);

// The section size in [1, max_heads] (max_heads: the most pairs whose K/V fit the L2 budget) with
// the best strided_balance, over every size up to 64 and max_heads itself; sizes within 0.5% of the
// best count as equal, and the largest of those wins (the order the L2 budget alone would give).
int balanced_section_heads(const std::vector<double>& weights, int pairs, int ctas, int max_heads);

// The persistent walk's sections: balanced_section_heads where its static walk balances to at least
// kMinSectionBalance; else sections of max_heads with one CTA per unit (the grid walk's order,
// balanced by the hardware's CTA dispatch). Measured on an H100, causal d256: S 16384, 16 pairs, an
// L2 budget of one pair balances 0.65 and ran 0.72x the grid walk; all 16 pairs per section
// balance 0.998 but, their K/V no longer in the L2, still ran 0.93x (docs/PERF.md run 40).
inline constexpr double kMinSectionBalance = 0.9;
fa4::LptSections plan_lpt_sections(const std::vector<double>& weights, int pairs, int ctas, int max_heads);

// Causal Q tile costs, heaviest first: visible KV tiles of each BM-row tile (bottom-right
// alignment unless top_left), plus half a tile for its prologue and epilogue. bottom_tiles: the
// tiles end at the last query row (BackendPolicy::bottom_q_tiles), so a partial tile is the lightest.
std::vector<double> causal_tile_weights(int seqlen_q, int seqlen_k, int bm, int bn, bool top_left,
                                        bool bottom_tiles = false);

}  // namespace jit::detail
