// The automatic split count (runtime/compiled_kernel.cpp), on the shapes it was tuned on: an
// H200's 132 SMs (one CTA slot per SM, see choose_num_splits).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "fa4jit/errors.hpp"
#include "runtime/compiled_kernel.hpp"
#include "runtime/lpt_order.hpp"

using jit::detail::choose_num_splits;

TEST(SplitHeuristic, FillsTheSlotsForDecode) {
  // B 8 x 8 KV heads, 32768 keys in 64-key tiles: 2 splits = 128 CTAs on 132 SMs.
  EXPECT_EQ(choose_num_splits(64, 512, 132), 2);
  // One sequence of 131072 keys: 16 splits = 128 CTAs (15 would fill 91%).
  EXPECT_EQ(choose_num_splits(8, 2048, 132), 16);
  // Twice the slots: twice the splits for the same fill.
  EXPECT_EQ(choose_num_splits(64, 512, 264), 4);
}

TEST(SplitHeuristic, LeavesFullGridsAndShortKeysAlone) {
  EXPECT_EQ(choose_num_splits(512, 64, 132), 1);  // B 64 x 8 heads already fills the GPU
  EXPECT_EQ(choose_num_splits(106, 512, 132), 1);  // >= 80% of the slots
  EXPECT_EQ(choose_num_splits(8, 3, 132), 1);      // fewer than 4 KV tiles
  EXPECT_EQ(choose_num_splits(8, 10, 132), 5);     // at least two KV tiles per split
}

// Stream-K (common/segments.h, runtime plan_stream_k): walking every CTA's segments the way
// SegmentTiles does covers each unit exactly once, gives each CTA q or q + 1 units, numbers a
// tile's segments 0 .. segments(t) - 1 in CTA order, and never needs more than the planned slots.
namespace {

void expect_partition(long long tiles, int kv_blocks, int m_blocks, int requested, int sms) {
  SCOPED_TRACE(testing::Message() << "tiles " << tiles << " kv_blocks " << kv_blocks << " m_blocks " << m_blocks
                                  << " requested " << requested << " sms " << sms);
  const jit::detail::StreamKPlan sk = jit::detail::plan_stream_k(tiles, kv_blocks, m_blocks, requested, sms);
  const fa4::UnitSplit& u = sk.units;
  const int total = static_cast<int>(tiles) * u.units_per_tile;
  ASSERT_LE(sk.ctas, sms);
  ASSERT_LE(sk.slots, fa4::kMaxSplits);
  std::vector<int> owner(total, -1), seen_slots(tiles, 0);
  for (int x = 0; x < sk.ctas; ++x) {
    const int end = u.begin(x + 1);
    EXPECT_TRUE(end - u.begin(x) == u.per_cta || end - u.begin(x) == u.per_cta + 1);
    for (int k = 0; u.segment_start(x, k) < end; ++k) {
      const int s = u.segment_start(x, k), t = s / u.units_per_tile;
      const int stop = std::min(end, (t + 1) * u.units_per_tile);
      const int slot = x - u.first_cta(t);
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
  expect_partition(512, 64, 1, 0, 132);    // B 64 x 8 KV heads, 4096 keys: q = 248, tiles cut in 2
  expect_partition(64, 512, 1, 0, 132);    // B 8, 32768 keys: each tile over 2-3 CTAs
  expect_partition(8, 2048, 1, 0, 132);    // B 1, 131072 keys: each tile over ~17 CTAs
  expect_partition(3, 5, 1, 0, 132);       // fewer units than SMs: one unit per CTA
  expect_partition(37, 13, 1, 0, 100);     // runs that straddle tile boundaries unevenly
  expect_partition(10, 700, 2, 0, 132);    // several Q tiles per head: whole tiles
  expect_partition(10, 700, 2, 3, 132);    // explicit: 3 units per tile
  expect_partition(1000, 1, 1, 0, 132);    // one KV tile: whole tiles
  for (int tiles : {1, 2, 7, 131, 133, 264})
    for (int kv : {2, 3, 64, 65})
      for (int sms : {1, 16, 132}) expect_partition(tiles, kv, 1, 0, sms);
}

TEST(StreamK, PlanBalancesDecodeAndKeepsWholeTilesForPrefill) {
  const auto sk = jit::detail::plan_stream_k(512, 64, 1, 0, 132);
  EXPECT_EQ(sk.ctas, 132);
  EXPECT_EQ(sk.units.units_per_tile, 64);
  EXPECT_EQ(sk.units.per_cta, 248);  // 32768 units / 132 CTAs
  EXPECT_EQ(sk.units.extra, 32768 - 248 * 132);
  EXPECT_EQ(sk.slots, 2);
  const auto prefill = jit::detail::plan_stream_k(512, 64, 16, 0, 132);  // 16 Q tiles per head
  EXPECT_EQ(prefill.units.units_per_tile, 1);
  EXPECT_EQ(prefill.slots, 1);
  const auto explicit_splits = jit::detail::plan_stream_k(4, 64, 1, 5, 132);
  EXPECT_EQ(explicit_splits.units.units_per_tile, 5);
  EXPECT_EQ(explicit_splits.ctas, 20);  // one unit (= one split) per CTA, like a split grid
  EXPECT_EQ(explicit_splits.slots, 5);
  EXPECT_THROW(jit::detail::plan_stream_k(1LL << 31, 2, 1, 0, 132), jit::LaunchError);
}

// The split workspace: o_partial, lse_partial and (stream-K) split_count back to back, inside the
// bytes the plan asks for, and the same description sizes and places them.
TEST(SplitWorkspace, LayoutPlacesEveryArrayInsideItsBytes) {
  for (bool counts : {false, true}) {
    const jit::detail::SplitLayout layout{37, 5, 96, counts};
    fa4::FwdParams p{};
    const CUdeviceptr base = 4096;
    layout.place(base, p);
    const auto at = [&](const void* ptr) { return reinterpret_cast<std::uintptr_t>(ptr) - base; };
    EXPECT_EQ(at(p.o_partial), 0u);
    EXPECT_EQ(at(p.lse_partial), 37u * 5 * 96 * sizeof(float));
    const std::uintptr_t end = counts ? at(p.split_count) + 37 * sizeof(int) : at(p.lse_partial) + 37 * 5 * sizeof(float);
    EXPECT_EQ(end, layout.bytes()) << counts;
    if (counts) {
      EXPECT_EQ(at(p.split_count), at(p.lse_partial) + 37u * 5 * sizeof(float));
    } else {
      EXPECT_EQ(p.split_count, nullptr);
    }
  }
}

// Split tail (PersistentTiles, runtime plan_split_tail): the last, partial round of equal tiles
// is cut into KV splits that fit in one round, none empty; full rounds and nearly full last
// rounds stay whole.
TEST(SplitTail, SplitsOnlyAPartialLastRound) {
  using jit::detail::plan_split_tail;
  // The D128 rows: 4096 tiles on 132 SMs = 31 rounds + 4 tiles. 64 KV tiles: 33 splits
  // would leave one empty (2 KV tiles each), so 32; 16 KV tiles: one each.
  EXPECT_EQ(plan_split_tail(4096, 64, 132).from, 4092);
  EXPECT_EQ(plan_split_tail(4096, 64, 132).splits, 32);
  EXPECT_EQ(plan_split_tail(4096, 16, 132).splits, 16);
  EXPECT_EQ(plan_split_tail(4096, 132, 132).splits, 33);  // 33 x 4 = 132: the round is full
  EXPECT_EQ(plan_split_tail(4096, 128, 132).splits, 32);  // 33 would leave the last split empty
  EXPECT_EQ(plan_split_tail(140, 16, 132).from, 132);
  EXPECT_EQ(plan_split_tail(140, 16, 132).splits, 16);  // 8 tiles x 16 splits = 128 CTAs
  EXPECT_EQ(plan_split_tail(264, 64, 132).splits, 1);   // whole rounds
  EXPECT_EQ(plan_split_tail(131, 64, 132).splits, 1);   // one partial round: choose_num_splits' case
  EXPECT_EQ(plan_split_tail(132 + 70, 64, 132).splits, 1);  // 70 of 132: two splits would not fit
  EXPECT_EQ(plan_split_tail(4096, 1, 132).splits, 1);   // one KV tile: nothing to split
  for (long long tiles : {133LL, 200LL, 1000LL, 4097LL})
    for (int kv : {2, 3, 5, 64, 1000})
      for (int sms : {78, 114, 132}) {
        const jit::detail::SplitTail t = plan_split_tail(tiles, kv, sms);
        if (t.splits == 1) continue;
        SCOPED_TRACE(testing::Message() << "tiles " << tiles << " kv " << kv << " sms " << sms);
        EXPECT_EQ(t.from % sms, 0);                     // whole rounds first
        EXPECT_LE((tiles - t.from) * t.splits, sms);    // the tail is one round
        EXPECT_LE(t.splits, std::min(kv, fa4::kMaxSplits));
        const int per = (kv + t.splits - 1) / t.splits;
        EXPECT_LT(per * (t.splits - 1), kv);            // the last split has a KV tile
      }
}

// Persistent causal launches choose the LPT section size by simulating the static walk
// (runtime/lpt_order.hpp). The shapes are the rows on 132 SMs, where the section sizes
// that the L2 budget alone gives (H100: 25 pairs at S 2048; 2 pairs at S 16384 with a smaller L2)
// measured 8% and 23% slower than balanced ones on an H200 (docs/PERF.md run 16).
TEST(LptSections, CausalWeightsCountVisibleKvTiles) {
  using jit::detail::causal_tile_weights;
  // 3 tiles of 128 rows over 384 keys, bottom-right = top-left when Sq == Sk: 3, 2, 1 KV tiles.
  EXPECT_EQ(causal_tile_weights(384, 384, 128, 128, false), (std::vector<double>{3.5, 2.5, 1.5}));
  // Sq 300 > Sk 100, bottom-right: rows < 200 see no key; the last tile (rows 256..299) sees 100.
  EXPECT_EQ(causal_tile_weights(300, 100, 128, 128, false), (std::vector<double>{1.5, 1.5, 0.5}));
  // Top-left: row r sees keys <= r, clipped at Sk.
  EXPECT_EQ(causal_tile_weights(300, 100, 128, 64, true), (std::vector<double>{2.5, 2.5, 2.5}));
}

TEST(LptSections, AvoidsSectionSizesThatUnbalanceTheStaticWalk) {
  using jit::detail::balanced_section_heads;
  using jit::detail::causal_tile_weights;
  using jit::detail::strided_balance;
  struct Row { int seqlen, batch, l2_heads; };
  for (const Row& r : {Row{2048, 16, 25}, Row{8192, 4, 5}, Row{16384, 2, 2}}) {
    SCOPED_TRACE(testing::Message() << "S " << r.seqlen << " L2 bound " << r.l2_heads);
    const std::vector<double> w = causal_tile_weights(r.seqlen, r.seqlen, 128, 128, false);
    const int pairs = r.batch * 16;
    EXPECT_LT(strided_balance(w, pairs, 132, r.l2_heads), 0.94);  // the bound alone: unbalanced
    const int h = balanced_section_heads(w, pairs, 132, r.l2_heads);
    EXPECT_LE(h, r.l2_heads);  // never more pairs than the L2 budget
    EXPECT_GT(strided_balance(w, pairs, 132, h), 0.965);
  }
  // Equal weights balance at any size: the L2 bound stays.
  EXPECT_EQ(balanced_section_heads(std::vector<double>(4, 2.5), 64, 132, 7), 7);
  // The model: 264 equal tiles on 132 CTAs are two per CTA; one heavy tile in each pair's section
  // lands on the CTAs of the first round.
  EXPECT_DOUBLE_EQ(strided_balance({1.0}, 264, 132, 1), 1.0);
  EXPECT_DOUBLE_EQ(strided_balance({3.0, 1.0}, 132, 132, 132), 1.0);  // round 0 heavy, round 1 light, reversed
}
