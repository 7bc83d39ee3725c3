// The tile walks' host plans and decode rules (templates/common/grid_walk.h, persistent_walk.h,
// stream_k_walk.h).
// The automatic split count (GridWalk::choose_splits), on the shapes it was tuned on: an
// H200's 132 SMs (one CTA slot per SM, see choose_num_splits).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "fa4jit/errors.hpp"
#include "generator/backends/backend.hpp"
#include "runtime/compiled_kernel.hpp"
#include "runtime/launch_args.hpp"

using fa4::GridWalk;
using fa4::PersistentWalk;
using fa4::StreamKWalk;
constexpr auto choose_num_splits = &GridWalk::choose_splits;

TEST(SplitHeuristic, FillsTheSlotsForDecode) {
  // B 8 x 8 KV heads, 32768 keys in 64-key tiles: 2 splits = 128 CTAs on 132 SMs.
  EXPECT_EQ(choose_num_splits(64, 512, 132), 2);
  // One sequence of 131072 keys: 16 splits = 128 CTAs (15 would fill 91%).
  EXPECT_EQ(choose_num_splits(8, 2048, 132), 16);
  // Twice the slots: twice the splits for the same fill.
  EXPECT_EQ(choose_num_splits(64, 512, 264), 4);
  // Paged launches count both slots of an SM (CompiledKernel::slots_per_sm): Qwen2.5-7B's 32 x
  // 4 KV heads over 32768 keys, 128 CTAs, split in two on 264 slots (one split on 132), and Llama-3-8B's
  // 256 CTAs fill 80% of them unsplit.
  EXPECT_EQ(choose_num_splits(128, 512, 132), 1);
  EXPECT_EQ(choose_num_splits(128, 512, 264), 2);
  EXPECT_EQ(choose_num_splits(256, 512, 264), 1);
}

TEST(SplitHeuristic, LeavesFullGridsAndShortKeysAlone) {
  EXPECT_EQ(choose_num_splits(512, 64, 132), 1);   // B 64 x 8 heads already fills the GPU
  EXPECT_EQ(choose_num_splits(106, 512, 132), 1);  // >= 80% of the slots
  EXPECT_EQ(choose_num_splits(8, 3, 132), 1);      // fewer than 4 KV tiles
  EXPECT_EQ(choose_num_splits(8, 10, 132), 5);     // at least two KV tiles per split
  // A split must shorten the longest run by kMinSavedKvTiles (8): 32 x 2 KV heads over 4 tiles
  // (gpt-oss's speculative rows under its window) or 8 (512 keys) stay whole; 16 tiles split in two.
  EXPECT_EQ(choose_num_splits(64, 4, 132), 1);
  EXPECT_EQ(choose_num_splits(64, 8, 132), 1);
  EXPECT_EQ(choose_num_splits(64, 16, 132), 2);
  EXPECT_EQ(choose_num_splits(8, 9, 132), 1);   // runs of 3 save 6 (their combine costs more)
  EXPECT_EQ(choose_num_splits(8, 12, 132), 6);  // 12 -> 2: saves 10
  EXPECT_EQ(choose_num_splits(2, 9, 132), 9);   // runs of 1 (a small grid, below) save 8
}

// Grids within half the slots at the most splits: the fewest splits with the shortest runs.
TEST(SplitHeuristic, SmallGridsEvenTheirRunsOfKvTiles) {
  EXPECT_EQ(choose_num_splits(2, 64, 132), 32);  // batch 1, 4096 keys, 2 KV heads: 32 runs of 2 (the fill rule: 31)
  EXPECT_EQ(choose_num_splits(2, 65, 132), 22);  // 32 at most; runs of 3 need only 22
  // One tile a split where that grid stays within half the slots: one KV head at 4096 keys, 64 CTAs
  // (32 runs of 2 before, run 114); at 2 KV heads 128 CTAs of one tile pass half the slots (above).
  EXPECT_EQ(choose_num_splits(1, 64, 132), 64);
  EXPECT_EQ(choose_num_splits(1, 66, 132), 66);
  EXPECT_EQ(choose_num_splits(1, 67, 132), 23);    // 134 CTAs: 33 splits at most, runs of 3
  EXPECT_EQ(choose_num_splits(1, 130, 264), 65);   // over 128 tiles: runs of 2
  EXPECT_EQ(choose_num_splits(4, 64, 132), 31);    // 128 CTAs: past half the slots, the fill rule
  EXPECT_EQ(choose_num_splits(1, 512, 132), 122);  // 32768 keys: 128 splits pass half the slots
}

// Stream-K (common/segments.h, StreamKWalk::geometry): walking every CTA's segments with
// StreamKWalk::segment, as SegmentTiles does, covers each unit exactly once, gives each CTA q or q + 1 units, numbers a
// tile's segments 0 .. segments(t) - 1 in CTA order, and never needs more than the planned slots.
namespace {

void expect_partition(long long tiles, int kv_blocks, int m_blocks, int requested, int sms) {
  SCOPED_TRACE(testing::Message() << "tiles " << tiles << " kv_blocks " << kv_blocks << " m_blocks " << m_blocks
                                  << " requested " << requested << " sms " << sms);
  const StreamKWalk::Geometry sk = StreamKWalk::geometry(tiles, kv_blocks, m_blocks, requested, sms);
  const fa4::UnitSplit& u = sk.units;
  const int total = static_cast<int>(tiles) * u.units_per_tile;
  ASSERT_LE(sk.ctas, sms);
  ASSERT_LE(sk.slots, fa4::kMaxSplits);
  std::vector<int> owner(total, -1), seen_slots(tiles, 0);
  for (int x = 0; x < sk.ctas; ++x) {
    const int end = u.begin(x + 1);
    EXPECT_TRUE(end - u.begin(x) == u.per_cta || end - u.begin(x) == u.per_cta + 1);
    for (int k = 0; u.segment_start(x, k) < end; ++k) {
      const StreamKWalk::Segment g = StreamKWalk::segment(u, x, k);
      const int t = g.tile, s = t * u.units_per_tile + g.u0, stop = t * u.units_per_tile + g.u1;
      EXPECT_EQ(s, u.segment_start(x, k));
      EXPECT_LT(g.u0, g.u1);
      const int slot = StreamKWalk::slot(u, x, t);
      EXPECT_EQ(slot, seen_slots[t]) << "tile " << t;  // slots in CTA order, none skipped
      ++seen_slots[t];
      EXPECT_LT(slot, u.segments(t));
      if (u.segments(t) > 1) EXPECT_LT(slot, sk.slots);
      for (int i = s; i < stop; ++i) {
        EXPECT_EQ(owner[i], -1) << "unit " << i << " walked twice";
        EXPECT_EQ(u.cta_of(i), x);
        owner[i] = x;
      }
    }
  }
  for (int i = 0; i < total; ++i) EXPECT_EQ(owner[i], u.cta_of(i)) << "unit " << i;
  for (int t = 0; t < tiles; ++t) EXPECT_EQ(seen_slots[t], u.segments(t)) << "tile " << t;
  if (sk.slots == 1)
    for (int t = 0; t < tiles; ++t) EXPECT_EQ(u.segments(t), 1);  // no partials: every tile whole in one CTA
}

}  // namespace

TEST(StreamK, SegmentsPartitionTheUnits) {
  expect_partition(512, 64, 1, 0, 132);  // B 64 x 8 KV heads, 4096 keys: q = 248, tiles cut in 2
  expect_partition(64, 512, 1, 0, 132);  // B 8, 32768 keys: each tile over 2-3 CTAs
  expect_partition(8, 2048, 1, 0, 132);  // B 1, 131072 keys: each tile over ~17 CTAs
  expect_partition(3, 5, 1, 0, 132);     // fewer units than SMs: one unit per CTA
  expect_partition(37, 13, 1, 0, 100);   // runs that straddle tile boundaries unevenly
  expect_partition(10, 700, 2, 0, 132);  // several Q tiles per head: whole tiles
  expect_partition(10, 700, 2, 3, 132);  // explicit: 3 units per tile
  expect_partition(1000, 1, 1, 0, 132);  // one KV tile: whole tiles
  for (int tiles : {1, 2, 7, 131, 133, 264})
    for (int kv : {2, 3, 64, 65})
      for (int sms : {1, 16, 132}) expect_partition(tiles, kv, 1, 0, sms);
}

TEST(StreamK, PlanBalancesDecodeAndKeepsWholeTilesForPrefill) {
  const auto sk = StreamKWalk::geometry(512, 64, 1, 0, 132);
  EXPECT_EQ(sk.ctas, 132);
  EXPECT_EQ(sk.units.units_per_tile, 64);
  EXPECT_EQ(sk.units.per_cta, 248);  // 32768 units / 132 CTAs
  EXPECT_EQ(sk.units.extra, 32768 - 248 * 132);
  EXPECT_EQ(sk.slots, 2);
  const auto prefill = StreamKWalk::geometry(512, 64, 16, 0, 132);  // 16 Q tiles per head
  EXPECT_EQ(prefill.units.units_per_tile, 1);
  EXPECT_EQ(prefill.slots, 1);
  const auto explicit_splits = StreamKWalk::geometry(4, 64, 1, 5, 132);
  EXPECT_EQ(explicit_splits.units.units_per_tile, 5);
  EXPECT_EQ(explicit_splits.ctas, 20);  // one unit (= one split) per CTA, like a split grid
  EXPECT_EQ(explicit_splits.slots, 5);
  EXPECT_THROW(StreamKWalk::geometry(1LL << 31, 2, 1, 0, 132), jit::LaunchError);
}

// The split workspace: o_partial, lse_partial and (stream-K) split_count back to back, inside the
// bytes the plan asks for, and the same description sizes and places them.
TEST(LaunchWorkspace, LayoutPlacesEveryArrayInsideItsBytes) {
  for (bool counts : {false, true}) {
    const jit::detail::WorkspaceLayout layout{37, 5, 96, counts};
    fa4::FwdParams p{};
    const CUdeviceptr base = 4096;
    layout.place(base, p);
    const auto at = [&](const void* ptr) { return reinterpret_cast<std::uintptr_t>(ptr) - base; };
    EXPECT_EQ(at(p.o_partial), 0u);
    EXPECT_EQ(at(p.lse_partial), 37u * 5 * 96 * sizeof(float));
    const std::uintptr_t end =
        counts ? at(p.split_count) + 37 * sizeof(int) : at(p.lse_partial) + 37 * 5 * sizeof(float);
    EXPECT_EQ(end, layout.bytes()) << counts;
    if (counts) {
      EXPECT_EQ(at(p.split_count), at(p.lse_partial) + 37u * 5 * sizeof(float));
    } else {
      EXPECT_EQ(p.split_count, nullptr);
    }
  }
}

// Long-pole splits: split_count then split_row after the LSE partials, the last bytes asked for.
TEST(LaunchWorkspace, LongPoleSlotsPlaceCountsThenRows) {
  jit::detail::WorkspaceLayout layout{37, 5, 96};
  layout.slots = true;
  fa4::FwdParams p{};
  const CUdeviceptr base = 4096;
  layout.place(base, p);
  const auto at = [&](const void* ptr) { return reinterpret_cast<std::uintptr_t>(ptr) - base; };
  EXPECT_EQ(at(p.split_count), at(p.lse_partial) + 37u * 5 * sizeof(float));
  EXPECT_EQ(at(p.split_row), at(p.split_count) + 37u * sizeof(int));
  EXPECT_EQ(at(p.split_row) + 37 * sizeof(int), layout.bytes());
}

// The dynamic walk's tile counter: after the split arrays (or alone), 16-byte aligned, inside the
// bytes asked for; a launch without it points nowhere and asks for no more than its partials.
TEST(LaunchWorkspace, TileCounterFollowsThePartialsAligned) {
  for (long long rows : {0LL, 37LL}) {
    jit::detail::WorkspaceLayout layout{rows, rows ? 5 : 1, 96, false};
    const std::size_t partials = layout.bytes();
    layout.tile_counter = true;
    fa4::FwdParams p{};
    const CUdeviceptr base = 4096;
    layout.place(base, p);
    const std::uintptr_t at = reinterpret_cast<std::uintptr_t>(p.tile_counter) - base;
    EXPECT_EQ(at % 16, 0u);
    EXPECT_GE(at, partials);
    EXPECT_LT(at, partials + 16);
    EXPECT_LE(at + sizeof(int), layout.bytes());
    if (rows == 0) {
      EXPECT_EQ(at, 0u);
      EXPECT_EQ(p.o_partial, nullptr);  // unsplit: only the counter
    }
    layout.tile_counter = false;
    layout.place(base, p);
    EXPECT_EQ(p.tile_counter, nullptr);
    EXPECT_EQ(layout.bytes(), partials);
  }
}

// The combine's geometry (common/params.h): a row's warps each walk at most 8 splits while the CTA's
// 8 warps allow; a CTA holds whole rows, and every warp belongs to one.
TEST(SplitCombine, WarpsPerRowGrowWithTheSplitsUpToTheCta) {
  const std::pair<int, int> expected[] = {{1, 1},  {2, 1},  {8, 1},  {9, 2},   {16, 2},
                                          {17, 4}, {32, 4}, {33, 8}, {122, 8}, {256, 8}};
  for (const auto& [splits, warps] : expected) {
    EXPECT_EQ(fa4::combine_warps_per_row(splits), warps) << splits;
    EXPECT_EQ(fa4::combine_rows_per_cta(splits) * warps, fa4::kCombineWarps) << splits;
    EXPECT_TRUE(splits <= 8 * warps || warps == fa4::kCombineWarps) << splits;
  }
}

// Split tail (PersistentWalk::split_tail): the last, partial round of equal tiles
// is cut into KV splits that fit in one round, none empty; full rounds and nearly full last
// rounds stay whole.
TEST(SplitTail, SplitsOnlyAPartialLastRound) {
  constexpr auto plan_split_tail = &PersistentWalk::split_tail;
  // The D128 rows: 4096 tiles on 132 SMs = 31 rounds + 4 tiles. 64 KV tiles: 33 splits
  // would leave one empty (2 KV tiles each), so 32; 16 KV tiles: one each.
  EXPECT_EQ(plan_split_tail(4096, 64, 132).from, 4092);
  EXPECT_EQ(plan_split_tail(4096, 64, 132).splits, 32);
  EXPECT_EQ(plan_split_tail(4096, 16, 132).splits, 16);
  EXPECT_EQ(plan_split_tail(4096, 132, 132).splits, 33);  // 33 x 4 = 132: the round is full
  EXPECT_EQ(plan_split_tail(4096, 128, 132).splits, 32);  // 33 would leave the last split empty
  EXPECT_EQ(plan_split_tail(140, 16, 132).from, 132);
  EXPECT_EQ(plan_split_tail(140, 16, 132).splits, 16);      // 8 tiles x 16 splits = 128 CTAs
  EXPECT_EQ(plan_split_tail(264, 64, 132).splits, 1);       // whole rounds
  EXPECT_EQ(plan_split_tail(131, 64, 132).splits, 1);       // one partial round: choose_num_splits' case
  EXPECT_EQ(plan_split_tail(132 + 70, 64, 132).splits, 1);  // 70 of 132: two splits would not fit
  EXPECT_EQ(plan_split_tail(4096, 1, 132).splits, 1);       // one KV tile: nothing to split
  for (long long tiles : {133LL, 200LL, 1000LL, 4097LL})
    for (int kv : {2, 3, 5, 64, 1000})
      for (int sms : {78, 114, 132}) {
        const PersistentWalk::SplitTail t = plan_split_tail(tiles, kv, sms);
        if (t.splits == 1) continue;
        SCOPED_TRACE(testing::Message() << "tiles " << tiles << " kv " << kv << " sms " << sms);
        EXPECT_EQ(t.from % sms, 0);                   // whole rounds first
        EXPECT_LE((tiles - t.from) * t.splits, sms);  // the tail is one round
        EXPECT_LE(t.splits, std::min(kv, fa4::kMaxSplits));
        const int per = (kv + t.splits - 1) / t.splits;
        EXPECT_LT(per * (t.splits - 1), kv);  // the last split has a KV tile
      }
}

// Persistent causal launches choose the LPT section size by simulating the static walk
// (PersistentWalk::plan_sections). The shapes are the rows on 132 SMs, where the section sizes
// that the L2 budget alone gives (H100: 25 pairs at S 2048; 2 pairs at S 16384 with a smaller L2)
// measured 8% and 23% slower than balanced ones on an H200 (docs/PERF.md run 16).
TEST(LptSections, CausalWeightsCountVisibleKvTiles) {
  // 3 tiles of 128 rows over 384 keys, bottom-right = top-left when Sq == Sk: 3, 2, 1 KV tiles.
  EXPECT_EQ(PersistentWalk::causal_tile_weights(384, 384, 128, 128, false), (std::vector<double>{3.5, 2.5, 1.5}));
  // Sq 300 > Sk 100, bottom-right: rows < 200 see no key; the last tile (rows 256..299) sees 100.
  EXPECT_EQ(PersistentWalk::causal_tile_weights(300, 100, 128, 128, false), (std::vector<double>{1.5, 1.5, 0.5}));
  // Top-left: row r sees keys <= r, clipped at Sk.
  EXPECT_EQ(PersistentWalk::causal_tile_weights(300, 100, 128, 64, true), (std::vector<double>{2.5, 2.5, 2.5}));
  // Keys from a hint at the int limit (varlen max_seqlen_k): every tile sees all of its rows' keys
  // below the bottom-right diagonal, counted without overflow.
  const int kMax = std::numeric_limits<int>::max();
  const std::vector<double> w = PersistentWalk::causal_tile_weights(256, kMax, 128, 128, false);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0], static_cast<double>((static_cast<long long>(kMax) + 127) / 128) + 0.5);
  EXPECT_EQ(w[1], static_cast<double>((static_cast<long long>(kMax) - 128 + 127) / 128) + 0.5);
}

// sm90a's causal Q tiles at kBM 192 end at the last row (BackendPolicy::bottom_q_tiles, emitted
// as Config::kBottomTiles): at S 4096 (21 x 192 + 64) the partial tile is the first, lightest one, so the model charges
// it one KV tile instead of two, and the second heaviest tile ends 128 rows earlier.
TEST(LptSections, BottomAlignedTilesPutThePartialTileFirst) {
  const std::vector<double> top = PersistentWalk::causal_tile_weights(4096, 4096, 192, 128, false);
  const std::vector<double> bottom = PersistentWalk::causal_tile_weights(4096, 4096, 192, 128, false, true);
  ASSERT_EQ(top.size(), 22u);
  ASSERT_EQ(bottom.size(), 22u);
  EXPECT_EQ(top[0], 32.5);        // rows 4032..4095: every key
  EXPECT_EQ(top[1], 32.5);        // rows 3840..4031: keys < 4032, 32 tiles
  EXPECT_EQ(top.back(), 2.5);     // rows 0..191: keys < 192
  EXPECT_EQ(bottom[0], 32.5);     // rows 3904..4095
  EXPECT_EQ(bottom[1], 31.5);     // rows 3712..3903: keys < 3904
  EXPECT_EQ(bottom.back(), 1.5);  // rows 0..63 (the tile starts 128 rows above row 0)
  // S a multiple of the tile: the same tiles either way.
  EXPECT_EQ(PersistentWalk::causal_tile_weights(3840, 3840, 192, 128, false),
            PersistentWalk::causal_tile_weights(3840, 3840, 192, 128, false, true));
  // The policy behind it: sm90a's built-in causal mask, unpacked, at BM 192; no other backend,
  // mask or tile height.
  jit::FA4Config c;
  c.mask = jit::Mask::causal();
  c.BM = 192;
  EXPECT_TRUE(jit::detail::policy(jit::Backend::hopper).bottom_q_tiles(c));
  c.BM = 128;
  EXPECT_FALSE(jit::detail::policy(jit::Backend::hopper).bottom_q_tiles(c));
  c.BM = 192;
  EXPECT_FALSE(jit::detail::policy(jit::Backend::blackwell).bottom_q_tiles(c));
  EXPECT_FALSE(jit::detail::policy(jit::Backend::portable).bottom_q_tiles(c));
  c.pack_gqa = true;
  c.group = 4;
  EXPECT_FALSE(jit::detail::policy(jit::Backend::hopper).bottom_q_tiles(c));
  c.pack_gqa = false;
  c.mask = jit::Mask::sliding_window();
  EXPECT_FALSE(jit::detail::policy(jit::Backend::hopper).bottom_q_tiles(c));
}

// The L2 rule (PersistentWalk::l2_section_heads): as many (batch, head) pairs as keep their K/V in
// half the L2; pairs that share a KV head (GQA) count its bytes once between them.
TEST(LptSections, L2RuleKeepsASectionsKvInHalfTheL2) {
  const long long l2 = 50LL << 20;                                           // an H100's 50 MiB: a 25 MiB budget
  const long long bf16_d128 = 128 * 2 * 2;                                   // K and V bytes per key
  EXPECT_EQ(PersistentWalk::l2_section_heads(l2, 16384, bf16_d128, 1), 3);   // 8 MiB per head
  EXPECT_EQ(PersistentWalk::l2_section_heads(l2, 16384, bf16_d128, 8), 25);  // 1 MiB per pair (group 8)
  EXPECT_EQ(PersistentWalk::l2_section_heads(l2, 2048, bf16_d128, 1), 25);
  EXPECT_EQ(PersistentWalk::l2_section_heads(1 << 20, 1 << 20, bf16_d128, 1), 1);  // at least one pair
  EXPECT_EQ(PersistentWalk::l2_section_heads(l2, 1, 2, 1 << 20), 1 << 20);         // at most 2^20
  EXPECT_EQ(PersistentWalk::l2_section_heads(l2, 16384, bf16_d128, 0),             // no sharing
            PersistentWalk::l2_section_heads(l2, 16384, bf16_d128, 1));
}

TEST(LptSections, AvoidsSectionSizesThatUnbalanceTheStaticWalk) {
  struct Row {
    int seqlen, batch, l2_heads;
  };
  for (const Row& r : {Row{2048, 16, 25}, Row{8192, 4, 5}, Row{16384, 2, 2}}) {
    SCOPED_TRACE(testing::Message() << "S " << r.seqlen << " L2 bound " << r.l2_heads);
    const std::vector<double> w = PersistentWalk::causal_tile_weights(r.seqlen, r.seqlen, 128, 128, false);
    const int pairs = r.batch * 16;
    EXPECT_LT(PersistentWalk::strided_balance(w, pairs, 132, r.l2_heads), 0.94);  // the bound alone: unbalanced
    const int h = PersistentWalk::balanced_section_heads(w, pairs, 132, r.l2_heads);
    EXPECT_LE(h, r.l2_heads);  // never more pairs than the L2 budget
    EXPECT_GT(PersistentWalk::strided_balance(w, pairs, 132, h), 0.965);
  }
  // Equal weights balance at any size: the L2 bound stays.
  EXPECT_EQ(PersistentWalk::balanced_section_heads(std::vector<double>(4, 2.5), 64, 132, 7), 7);
  // Balanced within the budget: the static walk (S 16384 d128, 32 pairs, 3 per section: 0.989).
  const fa4::LptSections d128 =
      PersistentWalk::plan_sections(PersistentWalk::causal_tile_weights(16384, 16384, 128, 128, false), 32, 132, 3);
  EXPECT_FALSE(d128.one_unit_per_cta);
  EXPECT_LE(d128.heads, 3);
  // d256 (BN 80), S 16384, 16 pairs, an L2 budget of one pair: every size within it balances 0.65
  // (an H100 ran it at 0.72x the grid walk), so one CTA per unit in one-pair sections.
  const std::vector<double> deep = PersistentWalk::causal_tile_weights(16384, 16384, 128, 80, false);
  EXPECT_LT(PersistentWalk::strided_balance(deep, 16, 132, 1), PersistentWalk::kMinSectionBalance);
  const fa4::LptSections d256 = PersistentWalk::plan_sections(deep, 16, 132, 1);
  EXPECT_TRUE(d256.one_unit_per_cta);
  EXPECT_EQ(d256.heads, 1);
  // The model: 264 equal tiles on 132 CTAs are two per CTA; one heavy tile in each pair's section
  // lands on the CTAs of the first round.
  EXPECT_DOUBLE_EQ(PersistentWalk::strided_balance({1.0}, 264, 132, 1), 1.0);
  EXPECT_DOUBLE_EQ(PersistentWalk::strided_balance({3.0, 1.0}, 132, 132, 132),
                   1.0);  // round 0 heavy, round 1 light, reversed
}

// ---- The walks' plan() and decode rules ----------------------------------------------------------
namespace {

fa4::WalkInput walk_input(int m_blocks, int heads, int batch, int kv_blocks, int sms) {
  fa4::WalkInput in;
  in.m_blocks = m_blocks;
  in.heads = heads;
  in.batch = batch;
  in.kv_blocks = kv_blocks;
  in.sms = sms;
  in.max_seqlen_q = m_blocks * 128;
  in.bm = 128;
  return in;
}

fa4::FwdParams fresh_params(const fa4::WalkInput& in, int rows) {
  fa4::FwdParams p{};
  p.num_m_blocks = in.m_blocks;
  p.num_q_heads = in.heads;
  p.batch = in.batch;
  p.num_splits = 1;
  p.partial_rows = rows;
  return p;
}

}  // namespace

TEST(GridWalkPlan, GridIsTilesTimesSplitsAndLptOnlyUnsplit) {
  fa4::WalkInput in = walk_input(16, 8, 2, 64, 132);  // 256 tiles: fills the GPU, no split
  in.lpt_heads = 5;
  fa4::FwdParams p = fresh_params(in, 0);
  fa4::WalkPlan w = GridWalk::plan(in, p);
  EXPECT_EQ(w.grid[0], 16u);
  EXPECT_EQ(w.grid[1], 8u);
  EXPECT_EQ(w.grid[2], 2u);
  EXPECT_EQ(w.splits, 1);
  EXPECT_EQ(p.num_splits, 1);
  EXPECT_EQ(p.lpt_heads, 5);
  // Decode: B 8 x 8 KV heads over 512 KV tiles, one Q tile each: 2 automatic splits, x = m * 2 + s.
  in = walk_input(1, 8, 8, 512, 132);
  in.lpt_heads = 5;
  p = fresh_params(in, 0);
  w = GridWalk::plan(in, p);
  EXPECT_EQ(w.splits, 2);
  EXPECT_EQ(w.grid[0], 2u);
  EXPECT_EQ(p.num_splits, 2);
  EXPECT_EQ(p.lpt_heads, 0);  // lpt_cta assumes gridDim.x = the m blocks
  in.requested_splits = 3;
  in.keys_known = false;
  p = fresh_params(in, 0);
  EXPECT_EQ(GridWalk::plan(in, p).grid[0], 3u);  // an explicit count wins
  in.requested_splits = 0;
  p = fresh_params(in, 0);
  EXPECT_EQ(GridWalk::plan(in, p).splits, 1);  // unknown keys (varlen): no automatic split
}

// Varlen grid walk: the listed tile count bounds every sequence's own tiles (dense and padded packs,
// unpacked), never exceeds the batch grid, and the plan lists them in x with z = 1 and no
// longest-first remap (a continuous-batching step: 48 decode rows and 2 chunks of 2048).
TEST(GridWalkPlan, VarlenTilesBoundEverySequencesOwnTiles) {
  struct Pack {
    int pack, span, bm;
  };
  unsigned seed = 7;
  auto next = [&seed](int n) {
    seed = seed * 1103515245u + 12345u;
    return static_cast<int>((seed >> 8) % static_cast<unsigned>(n));
  };
  for (const Pack k : {Pack{1, 0, 128}, Pack{4, 64, 64}, Pack{7, 64, 64}, Pack{12, 64, 128}, Pack{48, 64, 64}})
    for (int trial = 0; trial < 50; ++trial) {
      const int batch = 1 + next(80);
      long long total = 0, exact = 0;
      int longest = 0;
      for (int b = 0; b < batch; ++b) {
        const int len = next(4) == 0 ? next(3000) : 1 + next(6);  // decode rows, some chunks, empty ones
        total += len;
        longest = std::max(longest, len);
        exact += (fa4::packed_row_count(len, k.pack, k.span) + k.bm - 1) / k.bm;
      }
      const int m_blocks = static_cast<int>((fa4::packed_row_count(longest, k.pack, k.span) + k.bm - 1) / k.bm);
      const int bound = GridWalk::varlen_tile_bound(total + next(5), batch, k.pack, k.span, k.bm, m_blocks);
      SCOPED_TRACE(testing::Message() << "pack " << k.pack << " batch " << batch << " total " << total);
      EXPECT_GE(bound, exact);
      EXPECT_LE(bound, 1LL * batch * m_blocks);
      EXPECT_LE(bound, exact + batch + 2 + 5 * k.pack);  // tight: at most a tile per sequence above
    }
  const int tiles = GridWalk::varlen_tile_bound(48 + 2 * 2048, 50, 4, 64, 64, 128);
  EXPECT_EQ(tiles, (4144 * 4 + 63) / 64 + 50);  // against 50 * 128 in the batch grid
  fa4::WalkInput in = walk_input(128, 8, 50, 137, 132);
  in.lpt_heads = 5;
  in.varlen_tiles = tiles;
  in.keys_known = false;
  EXPECT_EQ(in.tiles(), 8LL * tiles);
  fa4::FwdParams p = fresh_params(in, 0);
  fa4::WalkPlan w = GridWalk::plan(in, p);
  EXPECT_EQ(w.grid[0], static_cast<unsigned>(tiles));
  EXPECT_EQ(w.grid[1], 8u);
  EXPECT_EQ(w.grid[2], 1u);
  EXPECT_EQ(p.varlen_tiles, tiles);
  EXPECT_EQ(p.lpt_heads, 0);  // lpt_cta decodes gridDim.z as the batch
  in.requested_splits = 3;
  p = fresh_params(in, 0);
  EXPECT_EQ(GridWalk::plan(in, p).grid[0], 3u * static_cast<unsigned>(tiles));
}

// Long-pole splits on the zoo's continuous-batching step (48 decode rows of up to 8700 keys and 2
// chunks of 2048 queries, 8 query heads packed on 1 KV head, BM and BN 128): pieces of 2048 keys
// (a chunk tile's causal walk) for the short sequences only, slots of 8 queries x 8 heads per
// sequence. Only for automatic splits of a listed batch that also holds longer sequences.
TEST(GridWalkPlan, LongPoleSplitsOnlyTheShortSequencesOfAMixedBatch) {
  const int tiles = GridWalk::varlen_tile_bound(48 + 2 * 2048, 50, 8, 64, 128, 128);
  auto mixed = [&] {
    fa4::WalkInput in = walk_input(128, 1, 50, 68, 132);
    in.varlen_tiles = tiles;
    in.max_seqlen_q = 2048;
    in.max_seqlen_k = 8700;
    in.bn = 128;
    in.value_depth = 128;
    in.pole_qmax = 8;
    in.pole_head_rows = 64;
    return in;
  };
  fa4::WalkInput in = mixed();
  fa4::FwdParams p = fresh_params(in, 4144 * 8);
  fa4::WalkPlan w = GridWalk::plan(in, p);
  EXPECT_TRUE(w.slots);
  EXPECT_EQ(w.splits, 3);  // ceil(8700 / (2 x 2048))
  EXPECT_EQ(p.num_splits, 3);
  EXPECT_EQ(p.split_keys, 4096);
  EXPECT_EQ(p.split_qmax, 8);
  EXPECT_EQ(p.split_head_rows, 64);
  EXPECT_EQ(p.split_seq_rows, 64);
  EXPECT_EQ(p.partial_row0, 0);
  EXPECT_EQ(p.partial_rows, 50 * 64);                            // not 8 heads x 4144 query rows
  EXPECT_EQ(w.grid[0], static_cast<unsigned>(tiles) + 50u * 2);  // a short sequence lists up to 3 pieces
  EXPECT_EQ(w.grid[1], 1u);
  // Short chunks still make pieces of 16 KV tiles at least.
  in.max_seqlen_q = 100;
  p = fresh_params(in, 0);
  GridWalk::plan(in, p);
  EXPECT_EQ(p.split_keys, 16 * 128);
  // Both lengths may be the caller's hints, any int: no overflow, at most kMaxSplits pieces.
  in.max_seqlen_q = 2048;
  in.max_seqlen_k = std::numeric_limits<int>::max();
  p = fresh_params(in, 0);
  w = GridWalk::plan(in, p);
  EXPECT_EQ(p.split_keys, 4096);
  EXPECT_GE(w.splits, 2);
  EXPECT_LE(w.splits, fa4::kMaxSplits);

  struct Case {
    const char* what;
    void (*edit)(fa4::WalkInput&);
  };
  for (const Case c :
       {Case{"requested splits", [](fa4::WalkInput& i) { i.requested_splits = 2; }},
        Case{"a decode batch (the fill rule's)", [](fa4::WalkInput& i) { i.max_seqlen_q = 8; }},
        Case{"keys unknown", [](fa4::WalkInput& i) { i.max_seqlen_k = 0; }},
        Case{"no listed tiles", [](fa4::WalkInput& i) { i.varlen_tiles = 0; }},
        Case{"a kernel that cannot (bottom-aligned tiles)", [](fa4::WalkInput& i) { i.pole_qmax = 0; }},
        Case{"keys within one piece", [](fa4::WalkInput& i) { i.max_seqlen_k = 2048; }},
        Case{"a window's band within one piece", [](fa4::WalkInput& i) { i.kv_blocks = 3; }},
        Case{"hints at the int limit, keys within one piece",
             [](fa4::WalkInput& i) { i.max_seqlen_q = i.max_seqlen_k = std::numeric_limits<int>::max(); }},
        Case{"scratch past 256 MiB", [](fa4::WalkInput& i) {
               i.batch = 4096;
               i.heads = 64;
             }}}) {
    fa4::WalkInput o = mixed();
    c.edit(o);
    fa4::FwdParams q = fresh_params(o, 77);
    const fa4::WalkPlan v = GridWalk::plan(o, q);
    EXPECT_FALSE(v.slots) << c.what;
    EXPECT_EQ(q.split_qmax, 0) << c.what;
    EXPECT_EQ(q.partial_rows, 77) << c.what;
    if (std::string(c.what) == "requested splits") EXPECT_EQ(v.splits, 2);
  }
}

// The short sequences a long-pole split takes: the most queries (up to 8) whose packed rows fit one
// Q tile. Group 16 at BM 64: 4 queries; group 7 (padded spans of 9 queries): 8 queries, 56 rows;
// group 16 at BM 128: 8; unpacked: 8 rows; group 64: one query; a tile smaller than one query's rows: none.
TEST(GridWalkPlan, PoleRowsAreTheMostShortQueriesOneTileHolds) {
  auto rows = [](int pack, int span, int bm) {
    const GridWalk::PoleRows r = GridWalk::pole_rows(pack, span, bm);
    return std::make_pair(r.qmax, r.head_rows);
  };
  EXPECT_EQ(rows(16, 64, 64), std::make_pair(4, 64));
  EXPECT_EQ(rows(7, 64, 64), std::make_pair(8, 56));
  EXPECT_EQ(rows(16, 64, 128), std::make_pair(8, 128));
  EXPECT_EQ(rows(1, 64, 128), std::make_pair(8, 8));
  EXPECT_EQ(rows(64, 64, 64), std::make_pair(1, 64));
  EXPECT_EQ(rows(48, 64, 32), std::make_pair(0, 0));
}

// The longest-first order is a permutation of the grid and puts every pair's heaviest position of a
// section before any of its pairs' next one.
TEST(GridWalkPlan, LongestFirstIsASectionedPermutation) {
  for (int xs : {1, 3, 16})
    for (int pairs : {1, 7, 32})
      for (int heads : {1, 2, 5, 32, 64}) {
        SCOPED_TRACE(testing::Message() << "xs " << xs << " pairs " << pairs << " heads " << heads);
        std::vector<int> seen(static_cast<std::size_t>(xs * pairs), 0);
        int last_section = 0, last_x = 0;
        for (int i = 0; i < xs * pairs; ++i) {
          int x, pair;
          GridWalk::longest_first(i, xs, pairs, heads, x, pair);
          ASSERT_GE(x, 0);
          ASSERT_LT(x, xs);
          ASSERT_GE(pair, 0);
          ASSERT_LT(pair, pairs);
          ++seen[static_cast<std::size_t>(pair * xs + x)];
          const int section = pair / heads;
          if (section == last_section) EXPECT_GE(x, last_x);  // heaviest first within a section
          EXPECT_GE(section, last_section);                   // sections in order
          last_section = section;
          last_x = x;
        }
        for (int c : seen) EXPECT_EQ(c, 1);
      }
}

TEST(PersistentWalkPlan, GridUnitsAndSplitTail) {
  // 4096 equal tiles (B 16 x 16 heads x 16 Q tiles) of 64 KV tiles on 132 SMs: 31 rounds + 4 tiles,
  // the 4 split 32 ways (SplitTail above).
  fa4::WalkInput in = walk_input(16, 16, 16, 64, 132);
  in.equal_tiles = true;
  const int rows = 16 * 16 * 16 * 128;
  fa4::FwdParams p = fresh_params(in, rows);
  fa4::WalkPlan w = PersistentWalk::plan(in, p);
  EXPECT_EQ(w.grid[0], 132u);
  EXPECT_EQ(w.grid[1], 1u);
  EXPECT_EQ(w.splits, 32);
  EXPECT_EQ(p.num_splits, 32);
  EXPECT_EQ(p.split_from, 4092);
  EXPECT_EQ(p.partial_row0, 4092 / 16 * (16 * 128) + 4092 % 16 * 128);
  EXPECT_EQ(p.partial_rows, rows - p.partial_row0);
  // Every (tile, split) unit is decoded exactly once: whole tiles before split_from, split units after.
  const int tiles = 4096, units = PersistentWalk::units(p, tiles);
  EXPECT_EQ(units, 4092 + 4 * 32);
  std::vector<int> whole(tiles, 0), split(static_cast<std::size_t>(tiles) * 32, 0);
  for (int x = 0; x < 132; ++x)
    for (int i = 0;; ++i) {
      const int t = PersistentWalk::unit(i, x, 132, false);
      if (t >= units) break;
      int m, s, h, b;
      PersistentWalk::decode(p, t, false, m, s, h, b);
      const int tile = (b * 16 + h) * 16 + m;
      if (s < 0) {
        EXPECT_LT(tile, p.split_from);
        ++whole[static_cast<std::size_t>(tile)];
      } else {
        EXPECT_GE(tile, p.split_from);
        ++split[static_cast<std::size_t>(tile) * 32 + s];
      }
    }
  for (int t = 0; t < tiles; ++t)
    for (int s = 0; s < (t < p.split_from ? 1 : 32); ++s)
      EXPECT_EQ(t < p.split_from ? whole[t] : split[static_cast<std::size_t>(t) * 32 + s], 1) << t << " " << s;
  // Not equal tiles (masked, packed or varlen): no tail. Few tiles: fewer CTAs than SMs.
  in.equal_tiles = false;
  p = fresh_params(in, rows);
  EXPECT_EQ(PersistentWalk::plan(in, p).splits, 1);
  EXPECT_EQ(p.split_from, 0);
  in = walk_input(1, 4, 1, 8, 132);
  p = fresh_params(in, 4 * 128);
  w = PersistentWalk::plan(in, p);
  EXPECT_EQ(w.grid[0], static_cast<unsigned>(4 * w.splits));  // one unit per CTA
}

// What the schedule assumes of a launch's lengths (schedule_model): the launch's own where the
// host knows them; packed varlen keys only through the caller's max_seqlen_k, and paged keys
// through it where it is below the page table's row.
TEST(ScheduleModel, VarlenKeysAreKnownOnlyThroughTheHint) {
  jit::FA4Config causal;
  causal.mask = jit::Mask::causal();
  jit::detail::LaunchShape shape;
  shape.batch = 8;
  shape.max_seqlen_q = 1024;
  shape.max_seqlen_k = 4096;  // a plain or paged launch: known
  jit::LaunchArgs a;
  a.max_seqlen_k = 2000;  // ... and kept, whatever the hint says
  auto m = jit::detail::schedule_model(shape, a, causal);
  EXPECT_EQ(m.shape.max_seqlen_k, 4096);
  EXPECT_TRUE(m.causal_known_lengths);
  EXPECT_FALSE(jit::detail::schedule_model(shape, a, jit::FA4Config{}).causal_known_lengths);  // unmasked

  shape.max_seqlen_k = 0;  // packed varlen keys: unknown ...
  a.cu_seqlens_q = a.cu_seqlens_k = reinterpret_cast<const int*>(16);
  a.max_seqlen_k = 0;
  m = jit::detail::schedule_model(shape, a, causal);
  EXPECT_EQ(m.shape.max_seqlen_k, 0);
  EXPECT_FALSE(m.causal_known_lengths);
  a.max_seqlen_k = 2000;  // ... unless the caller bounds them
  m = jit::detail::schedule_model(shape, a, causal);
  EXPECT_EQ(m.shape.max_seqlen_k, 2000);
  EXPECT_EQ(m.shape.max_seqlen_q, 1024);
  EXPECT_TRUE(m.causal_known_lengths);

  a.cu_seqlens_k = nullptr;  // varlen queries over a page table of 4096 keys per sequence
  a.page_table = reinterpret_cast<const int*>(16);
  shape.max_seqlen_k = 4096;
  m = jit::detail::schedule_model(shape, a, causal);
  EXPECT_EQ(m.shape.max_seqlen_k, 2000);  // the hint, within the table's bound
  EXPECT_TRUE(m.causal_known_lengths);
  a.max_seqlen_k = 9000;
  EXPECT_EQ(jit::detail::schedule_model(shape, a, causal).shape.max_seqlen_k, 4096);
  a.max_seqlen_k = 0;  // the query lengths are not known without it: the L2 rule
  EXPECT_FALSE(jit::detail::schedule_model(shape, a, causal).causal_known_lengths);

  // A paged launch without varlen queries: its table holds 32768 keys a sequence (a cache's
  // capacity), the caller's sequences at most 4096 (seqused_k): the hint sizes the split.
  a.cu_seqlens_q = nullptr;
  shape.max_seqlen_k = 32768;
  a.max_seqlen_k = 4096;
  m = jit::detail::schedule_model(shape, a, causal);
  EXPECT_EQ(m.shape.max_seqlen_k, 4096);
  EXPECT_EQ(m.kv_tiles(64), 64);
  EXPECT_TRUE(m.causal_known_lengths);
  a.max_seqlen_k = 0;  // no hint: the table's row
  EXPECT_EQ(jit::detail::schedule_model(shape, a, causal).shape.max_seqlen_k, 32768);
}

// A varlen launch's max_seqlen_q is the caller's hint: no sequence holds more queries than q's rows,
// so a larger one is clamped to them before it sizes the grid (num_m_blocks) and the schedule.
TEST(ScheduleModel, VarlenQueryHintIsBoundedByQsRows) {
  jit::FA4Config c;
  c.arch = "sm_90a";
  c.depth = 128;
  c.mask = jit::Mask::causal();
  const jit::ResolvedConfig rc = jit::resolve(c);
  char* base = reinterpret_cast<char*>(std::uintptr_t{1} << 30);
  jit::LaunchArgs a;
  a.q = jit::Tensor::contiguous(base, jit::DType::bf16, 1, 300, 8, 128);
  a.k = jit::Tensor::contiguous(base + (1 << 24), jit::DType::bf16, 1, 900, 2, 128);
  a.v = jit::Tensor::contiguous(base + (2 << 24), jit::DType::bf16, 1, 900, 2, 128);
  a.o = jit::Tensor::contiguous(base + (3 << 24), jit::DType::bf16, 1, 300, 8, 128);
  a.cu_seqlens_q = a.cu_seqlens_k = reinterpret_cast<const int*>(base + (4 << 24));
  a.batch = 3;
  jit::detail::LaunchShape shape;
  for (const int hint : {std::numeric_limits<int>::max(), 301}) {
    a.max_seqlen_q = hint;
    const fa4::FwdParams p = jit::detail::pack_params(rc, a, &shape);
    EXPECT_EQ(shape.max_seqlen_q, 300) << hint;
    EXPECT_EQ(p.num_m_blocks, (300 + rc.config.BM - 1) / rc.config.BM) << hint;
  }
  a.max_seqlen_q = 100;  // below q's rows: the caller's
  jit::detail::pack_params(rc, a, &shape);
  EXPECT_EQ(shape.max_seqlen_q, 100);
}

// Where a dynamic-walk kernel claims its units from a counter (ScheduleModel::static_order false):
// a snippet mask (its tile map weighs the tiles) or sequences of several lengths (varlen queries or
// keys, seqused_k); a built-in mask over one length strides as the persistent walk, with no counter.
TEST(ScheduleModel, StaticOrderOnlyForBuiltInMasksOverOneLength) {
  jit::FA4Config causal;
  causal.mask = jit::Mask::causal();
  jit::detail::LaunchShape shape;
  shape.batch = 4;
  shape.max_seqlen_q = shape.max_seqlen_k = 2048;
  jit::LaunchArgs a;
  EXPECT_TRUE(jit::detail::schedule_model(shape, a, causal).static_order);
  EXPECT_TRUE(jit::detail::schedule_model(shape, a, jit::FA4Config{}).static_order);  // unmasked
  a.page_table = reinterpret_cast<const int*>(16);                                    // pages of one length: still one
  EXPECT_TRUE(jit::detail::schedule_model(shape, a, causal).static_order);
  const int* some = reinterpret_cast<const int*>(16);
  using Lengths = const int* jit::LaunchArgs::*;
  for (Lengths field : {&jit::LaunchArgs::cu_seqlens_q, &jit::LaunchArgs::cu_seqlens_k, &jit::LaunchArgs::seqused_k}) {
    jit::LaunchArgs v;
    v.*field = some;
    v.max_seqlen_k = 2048;  // the hint gives an order, not the lengths
    EXPECT_FALSE(jit::detail::schedule_model(shape, v, causal).static_order);
  }
  jit::FA4Config doc = causal;
  doc.mask = jit::Mask::all_of({jit::Mask::causal(), jit::Mask::custom("return true;")});
  EXPECT_FALSE(jit::detail::schedule_model(shape, a, doc).static_order);
}

// Masked persistent walks: section size from the L2 bound, or (causal, equal lengths) from the
// balance hook with the CTA count; the masked decode of unit t is the plain grid's longest-first
// decode of linear CTA t (the same function).
TEST(PersistentWalkPlan, MaskedSectionsAndDecodeMatchTheGrid) {
  fa4::WalkInput in = walk_input(16, 16, 4, 16, 132);
  in.lpt_heads = 25;
  fa4::FwdParams p = fresh_params(in, 0);
  PersistentWalk::plan(in, p);
  EXPECT_EQ(p.lpt_heads, 25);
  in.causal_known_lengths = true;
  int asked_ctas = 0;
  in.balance = [&](int ctas, int max_heads) {
    asked_ctas = ctas;
    return fa4::LptSections{max_heads / 2, false};
  };
  p = fresh_params(in, 0);
  EXPECT_EQ(PersistentWalk::plan(in, p).grid[0], 132u);
  EXPECT_EQ(asked_ctas, 132);
  EXPECT_EQ(p.lpt_heads, 12);
  for (int t = 0; t < 16 * 64; ++t) {
    int m, s, h, b, x, pair;
    PersistentWalk::decode(p, t, true, m, s, h, b);
    GridWalk::longest_first(t, 16, 64, 12, x, pair);
    EXPECT_EQ(m, x);
    EXPECT_EQ(s, 0);
    EXPECT_EQ(b * 16 + h, pair);
  }
  // No balanced section size: one CTA per unit (16 x 64 tiles), the hook's sections.
  in.balance = [](int, int max_heads) { return fa4::LptSections{max_heads, true}; };
  p = fresh_params(in, 0);
  EXPECT_EQ(PersistentWalk::plan(in, p).grid[0], 16u * 64u);
  EXPECT_EQ(p.lpt_heads, 25);
  // Odd rounds run backwards.
  EXPECT_EQ(PersistentWalk::unit(1, 0, 132, true), 132 + 131);
  EXPECT_EQ(PersistentWalk::unit(1, 0, 132, false), 132);
  EXPECT_EQ(PersistentWalk::unit(2, 5, 132, true), 264 + 5);
}

TEST(StreamKWalkPlan, FillsUnitFieldsAndOneRowOfCtas) {
  fa4::WalkInput in = walk_input(1, 8, 64, 64, 132);  // the decode row of StreamK above
  fa4::FwdParams p = fresh_params(in, 512);
  const fa4::WalkPlan w = StreamKWalk::plan(in, p);
  EXPECT_EQ(w.grid[0], 132u);
  EXPECT_EQ(w.grid[1], 1u);
  EXPECT_EQ(w.grid[2], 1u);
  EXPECT_EQ(w.splits, 2);
  EXPECT_EQ(p.num_splits, 2);
  EXPECT_EQ(p.tile_units, 64);
  EXPECT_EQ(p.units_per_cta, 248);
  EXPECT_EQ(p.units_extra, 32768 - 248 * 132);
  const fa4::UnitSplit u = StreamKWalk::units(p);
  EXPECT_EQ(u.begin(132), 512 * 64);
}

// A sliding window bounded on both sides sizes the split count by the KV tiles one Q tile walks
// (ScheduleModel::kv_tiles), not the sequence's: gpt-oss's 128-key window over 4k keys at 16/2
// heads (64 packed decode CTAs) split in two, a combine launch for a walk of 2-3 tiles.
TEST(ScheduleModel, SlidingWindowBoundsTheKvTilesATileWalks) {
  jit::FA4Config w;
  w.mask = jit::Mask::sliding_window();
  w.BM = 64;
  jit::detail::LaunchShape shape;
  shape.batch = 32;
  shape.max_seqlen_q = 1;
  shape.max_seqlen_k = 4096;
  jit::LaunchArgs a;
  a.window_left = 127;
  a.window_right = 0;
  auto m = jit::detail::schedule_model(shape, a, w);
  EXPECT_EQ(m.band_keys, 128);
  EXPECT_EQ(m.kv_tiles(64), 3);  // 128 keys starting anywhere: at most 3 tiles of 64
  EXPECT_EQ(GridWalk::choose_splits(32 * 2, m.kv_tiles(64), 132), 1);
  EXPECT_EQ(GridWalk::choose_splits(32 * 2, 4096 / 64, 132), 2);  // what the sequence's tiles chose
  a.window_left = 63;  // a band of exactly one aligned tile can still straddle two
  EXPECT_EQ(jit::detail::schedule_model(shape, a, w).kv_tiles(64), 2);

  shape.max_seqlen_q = 16384;  // prefill: the span of a Q tile's queries (BM) widens the band
  shape.max_seqlen_k = 16384;
  a.window_left = 4095;
  m = jit::detail::schedule_model(shape, a, w);
  EXPECT_EQ(m.band_keys, 64 + 4095);
  EXPECT_EQ(m.kv_tiles(128), (64 + 4095 + 127 + 127) / 128);
  w.mask.prefix = true;  // a window's sink keys add their own tiles
  a.mask_prefix = 4;
  EXPECT_EQ(jit::detail::schedule_model(shape, a, w).kv_tiles(128), (64 + 4095 + 254) / 128 + 1);
  w.mask.prefix = false;

  shape.max_seqlen_q = 1;
  shape.max_seqlen_k = 100;  // a band wider than the sequence: the sequence's tiles
  EXPECT_EQ(jit::detail::schedule_model(shape, a, w).kv_tiles(64), 2);
  shape.max_seqlen_k = 32768;
  for (const auto& [left, right] : {std::pair{-1, 0}, std::pair{127, -1}}) {  // unbounded on a side: no band
    a.window_left = left;
    a.window_right = right;
    EXPECT_EQ(jit::detail::schedule_model(shape, a, w).kv_tiles(64), 512) << left << "," << right;
  }
  jit::FA4Config causal;  // other masks: the sequence's tiles, whatever the window fields hold
  causal.mask = jit::Mask::causal();
  a.window_left = a.window_right = 0;
  EXPECT_EQ(jit::detail::schedule_model(shape, a, causal).kv_tiles(64), 512);
}
