// Packed GQA for any group (issue 53) against the float64 reference with poisoned outputs, on every
// backend this GPU runs (the portable kernel as sm_90 / sm_80, and sm_90a): groups that do not
// divide a 64-row warpgroup tile (3, 5, 6, 7, 12: padded spans, common/packed_rows.h), one that does
// (16, the dense rows every earlier kernel used), 48 (one query per span) and groups above 64 (96,
// 128: sliced into CTAs of 48 / 64 heads on sm90a). Decode and speculative lengths (Sq 1, 5, 16:
// 16 queries of group 7 cross a span), causal (bottom-right: each padded row's mask is its own
// query's), contiguous and paged K/V (pages of 1, 16 and 64), split-KV (automatic and 3, with the
// combine), varlen batches, sinks and an FP8 KV cache, a continuous-batching step's long-pole
// splits (its short sequences' tiles split, the rest whole), a decode-only varlen batch split by
// the caller's max_seqlen_k, sm_90a's packed prefill tile (BM 128) and its unpacked decode tile
// (BM 64), batch-1 decode split into runs of one KV tile, and a custom mask's tile walk over a
// packed tile's heads. Skips without a GPU. Run:
// --gtest_filter='GpuPackGqa*'.
#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "check/gpu.hpp"
#include "fa4jit/jit.hpp"
#include "runtime/driver.hpp"
#include "tests/support/expect.hpp"
#include "tests/support/tune.hpp"

namespace {

using jit::DType;
using jit::FA4Config;
using jit::Mask;
using jit::testing::CheckCase;
using jit::testing::expect_matches;
using jit::testing::runnable_archs;

FA4Config packed(const std::string& arch, int group, Mask mask = Mask::causal()) {
  FA4Config c;
  c.arch = arch;
  c.depth = 128;
  c.mask = std::move(mask);
  c.group = group;
  c.pack_gqa = true;
  return c;
}

// Three sequences of 2 KV heads: full, one key, and a partial last KV tile.
CheckCase decode_case(int group, int sq) {
  CheckCase c;
  c.batch = 3;
  c.seqlen_q = sq;
  c.seqlen_k = 777;
  c.seqlens_k = {777, 1, 300};
  c.num_q_heads = 2 * group;
  c.num_kv_heads = 2;
  return c;
}

// Every layout of one decode shape: contiguous (automatic splits), paged 1 (sm90a gathers its rows),
// 16, 24 and 32 (sm90a: 2-8 TMA boxes a KV tile, their page-table entries read together; 24 by
// division, 32 by shift) and 64 (with sinks), split-KV 3, and a varlen batch (Sq, 1, Sq + 3 queries
// over 777, 40, 300 keys).
void check_layouts(const jit::Kernel& kernel, int group, int sq, const std::string& what) {
  CheckCase c = decode_case(group, sq);
  c.num_splits = 0;
  expect_matches(jit::testing::run_and_check(kernel, c), fmt::format("{} contiguous", what));
  for (int page : {1, 16, 24, 32, 64}) {
    CheckCase p = decode_case(group, sq);
    p.page_size = page;
    p.num_splits = 0;
    p.with_sinks = page == 64;
    expect_matches(jit::testing::run_and_check(kernel, p), fmt::format("{} paged {}", what, page));
  }
  CheckCase s = decode_case(group, sq);
  s.num_splits = 3;
  expect_matches(jit::testing::run_and_check(kernel, s), fmt::format("{} splits 3", what));
  CheckCase v = decode_case(group, sq);
  v.seqlens_q = {sq, 1, sq + 3};
  v.seqlens_k = {777, 40, 300};
  expect_matches(jit::testing::run_and_check(kernel, v), fmt::format("{} varlen", what));
}

TEST(GpuPackGqa, AnyGroupDecodeMatchesReference) {
  SKIP_WITHOUT_GPU();
  for (const std::string& arch : runnable_archs())
    for (int group : {3, 5, 6, 7, 12, 16}) {
      const auto kernel = jit::get_kernel(packed(arch, group), jit::testing::env_tune());
      for (int sq : {1, 5, 16}) check_layouts(*kernel, group, sq, fmt::format("{} group {} Sq {}", arch, group, sq));
    }
}

// Packed decode under a custom mask whose 64-key blocks are empty for every head of a batch, or
// for the even heads alone, with and without a run-time tile map (64 x 64 blocks): a packed tile
// covers 2 to 7 heads, and its walk classifies each KV tile over all of them (mask::Custom::classify,
// its head loop kept rolled: at groups 2 and 4 the sm90a gathering warps spilled there), so it
// skips the first kind and must read the second (a walk that asked the tile's first head alone
// would skip keys its odd heads see). Contiguous, paged 1 (gathered rows) and 16 (TMA boxes), split
// 3; Sq 1 and 5. Key 0 stays visible, so no row is empty.
TEST(GpuPackGqa, CustomMaskDecodeWalksEachHeadsTiles) {
  SKIP_WITHOUT_GPU();
  const Mask mask = Mask::custom(
      "return kv_idx == 0 || ((kv_idx / 64 + b) % 3 != 1 && (kv_idx / 64 % 4 != 0 || h % 2 == 1) && (kv_idx + h) % 5 "
      "!= 0);");
  const auto visible = [](int b, int h, int, int k) {
    return k == 0 || ((k / 64 + b) % 3 != 1 && (k / 64 % 4 != 0 || h % 2 == 1) && (k + h) % 5 != 0);
  };
  for (const std::string& arch : runnable_archs())
    for (int group : {2, 4, 7}) {
      const auto kernel = jit::get_kernel(packed(arch, group, mask), jit::testing::env_tune());
      for (int sq : {1, 5})
        for (int map : {0, 64})
          for (int layout = 0; layout < 4; ++layout) {
            CheckCase c = decode_case(group, sq);
            c.custom_visible = visible;
            c.block_mask_q = c.block_mask_k = map;
            c.page_size = layout == 1 ? 1 : layout == 2 ? 16 : 0;
            c.num_splits = layout == 3 ? 3 : 0;
            expect_matches(jit::testing::run_and_check(*kernel, c),
                           fmt::format("{} group {} Sq {} map {} layout {}", arch, group, sq, map, layout));
          }
    }
}

// A continuous-batching step in one varlen call (issue 53's mixed batch): 36 decode rows, 2
// speculative rows (Sq 5) and 2 prefill chunks (Sq 300 over 500 keys, causal bottom-right), 40
// sequences so sm90a's varlen grid walk (FwdParams::varlen_tiles) scans cu_seqlens_q in two warp
// chunks; contiguous, paged 16 and split 3. Packed (groups 4 and 7), and unpacked with softcap (the
// grid walk over unpacked rows) and plain causal (the persistent walk).
void check_mixed_batch(const jit::Kernel& kernel, int group, const std::string& what) {
  CheckCase c;
  for (int i = 0; i < 40; ++i) {
    const int sq = i < 36 ? 1 : i < 38 ? 5 : 300;
    c.seqlens_q.push_back(sq);
    c.seqlens_k.push_back(i < 38 ? 60 + (i * 97) % 900 : 500);
  }
  c.batch = 40;
  c.seqlen_q = 300;
  c.seqlen_k = 960;
  c.num_q_heads = 2 * group;
  c.num_kv_heads = 2;
  c.softcap = kernel.config().config.score_mod.kind == jit::ScoreMod::Kind::softcap ? 30.0f : 0.0f;
  expect_matches(jit::testing::run_and_check(kernel, c), fmt::format("{} contiguous", what));
  c.page_size = 16;
  expect_matches(jit::testing::run_and_check(kernel, c), fmt::format("{} paged 16", what));
  c.page_size = 0;
  c.num_splits = 3;
  expect_matches(jit::testing::run_and_check(kernel, c), fmt::format("{} splits 3", what));
}

TEST(GpuPackGqa, MixedVarlenBatchMatchesReference) {
  SKIP_WITHOUT_GPU();
  for (const std::string& arch : runnable_archs())
    for (int group : {4, 7}) {
      check_mixed_batch(*jit::get_kernel(packed(arch, group), jit::testing::env_tune()), group,
                        fmt::format("{} packed group {}", arch, group));
      FA4Config unpacked = packed(arch, group);
      unpacked.pack_gqa = false;
      check_mixed_batch(*jit::get_kernel(unpacked, jit::testing::env_tune()), group,
                        fmt::format("{} unpacked group {}", arch, group));
      unpacked.score_mod = jit::ScoreMod::softcap();
      check_mixed_batch(*jit::get_kernel(unpacked, jit::testing::env_tune()), group,
                        fmt::format("{} unpacked softcap group {}", arch, group));
    }
}

// Long-pole splits (GridWalk::long_pole_split): a continuous-batching step whose decode rows read
// long KV caches (1.5k-6k keys) beside prefill chunks (Sq 300). The automatic choice splits only the
// sequences of up to 8 queries (decode, speculative Sq 5 and 8), each into pieces by its own key
// count, and runs every other tile whole (Sq 9 and the chunks); an empty sequence sits between.
// Then the same batch reversed through the same kernel: the slots a sequence of the first launch
// wrote now belong to sequences that are not split (or empty), so the combine must not take their
// stale counts. Contiguous, paged 16 with sinks, and paged 1 (gathered rows on sm90a).
CheckCase long_pole_batch(int group, bool reversed) {
  CheckCase c;
  constexpr int kSeqs = 18;
  for (int i = 0; i < kSeqs; ++i) {
    const int j = reversed ? kSeqs - 1 - i : i;
    const int sq = j < 12 ? 1 : j == 12 ? 5 : j == 13 ? 8 : j == 14 ? 9 : j == 15 ? 0 : 300;
    c.seqlens_q.push_back(sq);
    c.seqlens_k.push_back(j < 15 ? 1500 + (j * 1237) % 4500 : j == 15 ? 50 : 700);
  }
  c.batch = kSeqs;
  c.seqlen_q = 300;
  c.seqlen_k = 6000;
  c.max_seqlen_k = 6000;  // the hint that sizes the pieces (contiguous varlen keys are unknown without it)
  c.num_q_heads = 2 * group;
  c.num_kv_heads = 2;
  c.num_splits = 0;
  return c;
}

void check_long_poles(const jit::Kernel& kernel, int group, const std::string& what) {
  const bool lists = kernel.config().config.arch == "sm_90a";  // sm90a's grid walk lists varlen tiles
  for (bool reversed : {false, true}) {
    CheckCase c = long_pole_batch(group, reversed);
    c.softcap = kernel.config().config.score_mod.kind == jit::ScoreMod::Kind::softcap ? 30.0f : 0.0f;
    const std::string order = reversed ? "reversed" : "in order";
    const jit::testing::CheckResult r = jit::testing::run_and_check(kernel, c);
    expect_matches(r, fmt::format("{} {} contiguous", what, order));
    if (lists) EXPECT_GT(r.splits, 1) << what << ": the decode rows' long poles were not split";
    c.page_size = 16;
    c.with_sinks = true;
    expect_matches(jit::testing::run_and_check(kernel, c), fmt::format("{} {} paged 16 sinks", what, order));
    c.page_size = 1;
    c.with_sinks = false;
    expect_matches(jit::testing::run_and_check(kernel, c), fmt::format("{} {} paged 1", what, order));
  }
}

void long_pole_splits(const std::string& arch) {
  for (int group : {3, 5, 7, 16})
    check_long_poles(*jit::get_kernel(packed(arch, group), jit::testing::env_tune()), group,
                     fmt::format("{} packed group {}", arch, group));
  FA4Config unpacked = packed(arch, 4);  // unpacked rows on the grid walk (softcap keeps it there)
  unpacked.pack_gqa = false;
  unpacked.score_mod = jit::ScoreMod::softcap();
  check_long_poles(*jit::get_kernel(unpacked, jit::testing::env_tune()), 4, fmt::format("{} unpacked softcap", arch));
}

// One test per runnable arch (the GPU's own, sm_90a on Hopper; the portable kernel): 30 float64
// checks each. As one test over both it ran past every device call's time (200-220 s, twice).
TEST(GpuPackGqa, LongPoleSplitsMatchReference) {
  SKIP_WITHOUT_GPU();
  long_pole_splits(runnable_archs().back());
}
TEST(GpuPackGqa, LongPoleSplitsOfThePortableKernelMatchReference) {
  SKIP_WITHOUT_GPU();
  const std::vector<std::string> archs = runnable_archs();
  if (archs.size() < 2)
    GTEST_SKIP() << "the portable kernel is this GPU's own arch: LongPoleSplitsMatchReference runs it";
  long_pole_splits(archs.front());
}

// Under a sliding window the decode rows' tiles walk only the window's band (a few KV tiles), so the
// same step splits nothing (GridWalk::long_pole_split counts the band's keys: gpt-oss's 128-key
// window made 2-3 pieces of which all but one were empty, and a combine launch).
TEST(GpuPackGqa, LongPolesUnderAWindowRunWhole) {
  SKIP_WITHOUT_GPU();
  if (jit::current_device_arch() != "sm_90a") GTEST_SKIP() << "sm_90a's grid walk lists varlen tiles";
  FA4Config window = packed("sm_90a", 8, Mask::sliding_window());
  window.depth = 64;
  const auto kernel = jit::get_kernel(window, jit::testing::env_tune());
  CheckCase c = long_pole_batch(8, false);
  c.window_left = 127;
  c.window_right = 0;
  c.with_sinks = true;
  const jit::testing::CheckResult r = jit::testing::run_and_check(*kernel, c);
  expect_matches(r, "packed group 8 d64 window 127");
  EXPECT_EQ(r.splits, 1) << "the decode rows under a 128-key window were split";
  c.window_left = 4000;  // a band as long as the caches: split again
  const jit::testing::CheckResult wide = jit::testing::run_and_check(*kernel, c);
  expect_matches(wide, "packed group 8 d64 window 4000");
  EXPECT_GT(wide.splits, 1) << "the decode rows under a 4001-key window were not split";
}

// A decode-only varlen batch over packed keys (cu_seqlens_k, no page table): 40 rows of 1.5k-6k
// keys at 2 KV heads, a grid far from full. The caller's max_seqlen_k is the only length the host
// has, and with it the automatic choice splits the keys (before, such a batch never split: 1.5
// TB/s at 48 rows, docs/PERF.md run 84); without it the launch runs unsplit. Both match the reference.
TEST(GpuPackGqa, VarlenDecodeSplitsByTheKeyHint) {
  SKIP_WITHOUT_GPU();
  for (const std::string& arch : runnable_archs())
    for (int group : {5, 16}) {
      const auto kernel = jit::get_kernel(packed(arch, group), jit::testing::env_tune());
      CheckCase c;
      for (int i = 0; i < 40; ++i) {
        c.seqlens_q.push_back(1);
        c.seqlens_k.push_back(1500 + (i * 1237) % 4500);
      }
      c.batch = 40;
      c.seqlen_q = 1;
      c.seqlen_k = 6000;
      c.num_q_heads = 2 * group;
      c.num_kv_heads = 2;
      c.num_splits = 0;
      const std::string what = fmt::format("{} group {}", arch, group);
      expect_matches(jit::testing::run_and_check(*kernel, c), what + " no key hint");
      c.max_seqlen_k = 6000;
      const jit::testing::CheckResult r = jit::testing::run_and_check(*kernel, c);
      expect_matches(r, what + " max_seqlen_k 6000");
      EXPECT_GT(r.splits, 1) << what << ": a varlen decode batch with the key hint was not split";
    }
}

// Batch-1 decode at one KV head: where even one KV tile a split keeps the grid within half the CTA
// slots (GridWalk::choose_splits; 64 CTAs of 64 keys at 4096 keys on sm_90a), the automatic choice
// splits the keys into runs of one tile, the combine merging up to 64 splits a row; a partial last
// tile (4000 keys), contiguous and paged (1: gathered rows, 16: TMA boxes).
TEST(GpuPackGqa, BatchOneDecodeSplitsIntoSingleKvTiles) {
  SKIP_WITHOUT_GPU();
  const int sms = jit::detail::device_limits(jit::detail::ensure_context()).sms;
  for (const std::string& arch : runnable_archs())
    for (int group : {8, 16}) {
      const auto kernel = jit::get_kernel(packed(arch, group), jit::testing::env_tune());
      const int bn = kernel->config().config.BN;
      for (int keys : {4096, 4000})
        for (int page : {0, 1, 16}) {
          CheckCase c;
          c.batch = 1;
          c.seqlen_q = 1;
          c.seqlen_k = keys;
          c.num_q_heads = group;
          c.num_kv_heads = 1;
          c.page_size = page;
          c.num_splits = 0;
          const std::string what = fmt::format("{} group {} keys {} page {}", arch, group, keys, page);
          const jit::testing::CheckResult r = jit::testing::run_and_check(*kernel, c);
          expect_matches(r, what);
          const int tiles = (keys + bn - 1) / bn;
          // Paged: the launch models the keys by the page table's width (4096 keys: 65 tiles here).
          if (arch == "sm_90a" && 2 * tiles <= sms)
            EXPECT_TRUE(page ? r.splits >= tiles : r.splits == tiles) << what << ": " << r.splits << " splits";
        }
    }
}

// The same steps over an FP8 KV cache (group 5): its converters walk the same pieces.
TEST(GpuPackGqa, LongPoleSplitsOverFp8KvCacheMatchReference) {
  SKIP_WITHOUT_GPU();
  for (const std::string& arch : runnable_archs()) {
    FA4Config fp8_kv = packed(arch, 5);
    fp8_kv.kv_dtype = DType::e4m3;
    check_long_poles(*jit::get_kernel(fp8_kv, jit::testing::env_tune()), 5,
                     fmt::format("{} packed e4m3 KV group 5", arch));
  }
}

// sm_90a's packed prefill tile (BM 128, 192 at head dim 64: jit::choose_kernel, for varlen
// prefill batches of uneven lengths and short chunks): groups 5, 7 and 8 over an uneven causal
// batch (a 700-query prompt beside short ones, one query, an empty sequence and more keys than
// queries: bottom-right), paged 16 with sinks, a sliding window with softcap, split 3, and the
// long-pole steps (decode rows split into pieces beside whole tiles; head dim 256 runs page 1
// alone instead). The other backends' packed
// default is this tile.
int prefill_tile_bm(int depth) { return depth <= 64 ? 192 : 128; }

FA4Config prefill_tile(const std::string& arch, int group, int depth, Mask mask = Mask::causal()) {
  FA4Config c = packed(arch, group, std::move(mask));
  c.depth = depth;
  if (arch == "sm_90a") c.BM = prefill_tile_bm(depth);
  return c;
}

CheckCase uneven_prefill(int group) {
  CheckCase c;
  c.seqlens_q = {700, 1, 300, 129, 0, 64, 5};
  c.seqlens_k = {700, 1, 450, 129, 50, 64, 5};
  c.batch = 7;
  c.seqlen_q = 700;
  c.seqlen_k = 700;
  c.num_q_heads = 2 * group;
  c.num_kv_heads = 2;
  return c;
}

void check_prefill_tile(const std::string& arch, int depth, std::initializer_list<int> groups = {5, 7, 8},
                        bool long_poles = true) {
  for (int group : groups) {
    const std::string what = fmt::format("{} d{} prefill tile group {}", arch, depth, group);
    const auto kernel = jit::get_kernel(prefill_tile(arch, group, depth), jit::testing::env_tune());
    if (arch == "sm_90a") EXPECT_EQ(kernel->config().config.BM, prefill_tile_bm(depth)) << what;
    CheckCase c = uneven_prefill(group);
    expect_matches(jit::testing::run_and_check(*kernel, c), fmt::format("{} contiguous", what));
    c.page_size = 16;
    c.with_sinks = true;
    expect_matches(jit::testing::run_and_check(*kernel, c), fmt::format("{} paged 16 sinks", what));
    c = uneven_prefill(group);
    c.num_splits = 3;
    expect_matches(jit::testing::run_and_check(*kernel, c), fmt::format("{} splits 3", what));
    if (long_poles) {
      check_long_poles(*kernel, group, fmt::format("{} long poles", what));
    } else {  // their page-1 launch alone (gathered rows), at a fraction of their reference's work
      c = uneven_prefill(group);
      c.page_size = 1;
      expect_matches(jit::testing::run_and_check(*kernel, c), fmt::format("{} paged 1", what));
    }
    FA4Config window = prefill_tile(arch, group, depth, Mask::sliding_window());
    window.score_mod = jit::ScoreMod::softcap();
    c = uneven_prefill(group);
    c.window_left = 100;
    c.window_right = 0;
    c.softcap = 30.0f;
    expect_matches(jit::testing::run_and_check(*jit::get_kernel(window, jit::testing::env_tune()), c),
                   fmt::format("{} window 100 softcap", what));
  }
}

TEST(GpuPackGqa, PrefillTileMatchesReference) {
  SKIP_WITHOUT_GPU();
  for (const std::string& arch : runnable_archs()) check_prefill_tile(arch, 128);
}

// Head dim 64's tile (BM 192: three consumer warpgroups of packed rows), sm_90a's own; a test of
// its own so the two compile side by side (gpu.sh tests).
TEST(GpuPackGqa, PrefillTileAtHeadDim64MatchesReference) {
  SKIP_WITHOUT_GPU();
  if (jit::current_device_arch() != "sm_90a") GTEST_SKIP() << "sm_90a's tile";
  check_prefill_tile("sm_90a", 64);
}

// Head dim 256's (BM 128 over one CTA per SM: Gemma 2 and 3's varlen batches, Gemma 3's prompts
// under its window), sm_90a's own, at group 2 (Gemma 3 4B) and 5; the long-pole steps are the tile
// walk's, tested above at head dim 128.
TEST(GpuPackGqa, PrefillTileAtHeadDim256MatchesReference) {
  SKIP_WITHOUT_GPU();
  if (jit::current_device_arch() != "sm_90a") GTEST_SKIP() << "sm_90a's tile";
  check_prefill_tile("sm_90a", 256, {2, 5}, /*long_poles=*/false);
  // Dense launches under a window of at most 1024 keys pack at this tile (jit::choose_kernel, docs/
  // PERF.md run 98): two prompts of 1200 queries, and one of 1000 over 1300 keys (bottom-right).
  for (int group : {2, 5}) {
    jit::LaunchFacts f;
    f.group = group;
    f.max_seqlen_q = 1200;
    f.window_keys = 301;
    FA4Config w = packed("sm_90a", group, Mask::sliding_window());
    w.depth = 256;
    w.pack_gqa = false;
    w.group = 0;
    const FA4Config chosen = jit::choose_kernel(w, f);
    ASSERT_TRUE(chosen.pack_gqa && chosen.BM == 128) << "group " << group;
    const auto kernel = jit::get_kernel(chosen, jit::testing::env_tune());
    CheckCase c;
    c.batch = 2;
    c.seqlen_q = c.seqlen_k = 1200;
    c.num_q_heads = 2 * group;
    c.num_kv_heads = 2;
    c.window_left = 300;
    c.window_right = 0;
    expect_matches(jit::testing::run_and_check(*kernel, c), fmt::format("d256 window prompt group {}", group));
    c.batch = 1;
    c.seqlen_q = 1000;
    c.seqlen_k = 1300;
    expect_matches(jit::testing::run_and_check(*kernel, c), fmt::format("d256 window prompt group {} Sq < Sk", group));
  }
}

// sm_90a's unpacked decode tile (BM 64, BN 64, two CTAs per SM: jit::choose_kernel, MHA
// decode and speculative rows of at most 64 queries, and continuous-batching steps): every decode
// layout of check_layouts (one query head per KV head), causal; the mixed batch and the long-pole
// steps (decode rows split into pieces beside whole chunk tiles: d128 MHA steps take this tile); a
// sliding window with softcap, and Phi-3's decode kernel (d96, its 2047-key window) over a step.
TEST(GpuPackGqa, UnpackedDecodeTileMatchesReference) {
  SKIP_WITHOUT_GPU();
  if (jit::current_device_arch() != "sm_90a") GTEST_SKIP() << "sm_90a's tile";
  FA4Config c = packed("sm_90a", 0);
  c.pack_gqa = false;
  c.BM = 64;
  const auto kernel = jit::get_kernel(c, jit::testing::env_tune());
  EXPECT_EQ(kernel->config().config.BN, 64);
  EXPECT_EQ(kernel->config().ctas_per_sm, 2);
  for (int sq : {1, 5, 16}) check_layouts(*kernel, 1, sq, fmt::format("unpacked BM 64 Sq {}", sq));
  check_mixed_batch(*kernel, 1, "unpacked BM 64 mixed batch");
  check_long_poles(*kernel, 1, "unpacked BM 64");
  FA4Config d96 = c;
  d96.depth = 96;
  d96.mask = Mask::sliding_window();
  CheckCase step = long_pole_batch(1, false);
  step.window_left = 2047;
  step.window_right = 0;
  expect_matches(jit::testing::run_and_check(*jit::get_kernel(d96, jit::testing::env_tune()), step),
                 "unpacked BM 64 d96 window 2047 long-pole step");
  c.mask = Mask::sliding_window();
  c.score_mod = jit::ScoreMod::softcap();
  CheckCase w = decode_case(1, 4);
  w.window_left = 100;
  w.window_right = 0;
  w.softcap = 30.0f;
  w.num_splits = 0;
  expect_matches(jit::testing::run_and_check(*jit::get_kernel(c, jit::testing::env_tune()), w),
                 "unpacked BM 64 window 100 softcap");
}

// Prefill under a sliding window at head dims 64 and 96 (docs/PERF.md runs 88, 89): gpt-oss's
// 128-key window (with sinks) takes sm_90a's 64-row tile (jit::choose_kernel with the window's keys;
// the dynamic walk, three CTAs per SM), wider windows the default tile (d64 on the persistent walk,
// d96 on the dynamic one); a window open on the right too, and varlen rows.
TEST(GpuPackGqa, WindowedPrefillTilesMatchReference) {
  SKIP_WITHOUT_GPU();
  if (jit::current_device_arch() != "sm_90a") GTEST_SKIP() << "sm_90a's tiles";
  FA4Config w;
  w.arch = "sm_90a";
  w.depth = 64;
  w.mask = Mask::sliding_window();
  jit::LaunchFacts f;
  f.group = 8;
  f.max_seqlen_q = 1500;
  f.total_q = 1500;
  f.window_keys = 128;
  const FA4Config tile = jit::choose_kernel(w, f);
  ASSERT_EQ(tile.BM, 64);
  struct Run {
    FA4Config config;
    int left, right;
    int walk;  // Tuning::persistent the defaults give
  };
  FA4Config d96 = w;
  d96.depth = 96;
  // The 64-row tile and d96 claim their tiles (3: the dynamic walk, docs/PERF.md runs 94, 95); d64's
  // default tile walks persistently.
  for (const Run& r : {Run{tile, 127, 0, 3}, Run{tile, 63, 5, 3}, Run{w, 300, 0, 1}, Run{d96, 300, 0, 3}}) {
    const auto kernel = jit::get_kernel(r.config, jit::testing::env_tune());
    if (jit::testing::env_tune().tune.empty()) EXPECT_EQ(kernel->config().tuning.persistent, r.walk);
    const std::string what =
        fmt::format("d{} BM {} window ({}, {})", r.config.depth, kernel->config().config.BM, r.left, r.right);
    CheckCase c;
    c.batch = 2;
    c.seqlen_q = c.seqlen_k = 1500;
    c.num_q_heads = 16;
    c.num_kv_heads = 2;
    c.window_left = r.left;
    c.window_right = r.right;
    c.with_sinks = true;
    expect_matches(jit::testing::run_and_check(*kernel, c), what);
    c.seqlens_q = {1500, 700};  // varlen: a shorter second sequence
    c.seqlens_k = {1500, 900};
    expect_matches(jit::testing::run_and_check(*kernel, c), what + " varlen");
    // Mostly units without Q rows (every sequence counted at the longest), which the dynamic walk's
    // producer claims past: one query, none, a tile and a row.
    c.seqlens_q = {1, 1500, 0, 65};
    c.seqlens_k = {500, 1500, 10, 65};
    expect_matches(jit::testing::run_and_check(*kernel, c), what + " uneven varlen");
  }
}

// Unmasked (every padded row sees every key) and a query count that fills whole spans exactly
// (group 7: 9 queries a span, Sq 18) or leaves one query in the last (Sq 19).
TEST(GpuPackGqa, UnmaskedWholeAndPartialSpansMatchReference) {
  SKIP_WITHOUT_GPU();
  for (const std::string& arch : runnable_archs())
    for (int group : {7, 12}) {
      const auto kernel = jit::get_kernel(packed(arch, group, Mask::none()), jit::testing::env_tune());
      for (int sq : {1, 18, 19}) {
        CheckCase c = decode_case(group, sq);
        c.num_splits = 0;
        expect_matches(jit::testing::run_and_check(*kernel, c),
                       fmt::format("{} unmasked group {} Sq {}", arch, group, sq));
      }
    }
}

// Groups above a warpgroup tile (sm90a slices: 96 = 2 x 48, 128 = 2 x 64) and one that fills it
// with a single query per span (48).
TEST(GpuPackGqa, LargeGroupsMatchReference) {
  SKIP_WITHOUT_GPU();
  for (const std::string& arch : runnable_archs())
    for (int group : {48, 96, 128}) {
      const auto kernel = jit::get_kernel(packed(arch, group), jit::testing::env_tune());
      for (int sq : {1, 5}) {
        const std::string what = fmt::format("{} group {} Sq {}", arch, group, sq);
        CheckCase c = decode_case(group, sq);
        c.num_kv_heads = 1;
        c.num_q_heads = group;
        c.num_splits = 0;
        expect_matches(jit::testing::run_and_check(*kernel, c), fmt::format("{} contiguous", what));
        c.page_size = 64;
        c.with_sinks = true;
        expect_matches(jit::testing::run_and_check(*kernel, c), fmt::format("{} paged 64 sinks", what));
        c.page_size = 0;
        c.num_splits = 3;
        expect_matches(jit::testing::run_and_check(*kernel, c), fmt::format("{} splits 3", what));
      }
    }
}

// An FP8 KV cache (kv_dtype e4m3, descale_k / descale_v per (batch, KV head)) at the 16-bit tolerance.
TEST(GpuPackGqa, AnyGroupOverFp8KvCacheMatchesReference) {
  SKIP_WITHOUT_GPU();
  for (const std::string& arch : runnable_archs())
    for (int group : {3, 7, 12}) {
      FA4Config cfg = packed(arch, group);
      cfg.kv_dtype = DType::e4m3;
      const auto kernel = jit::get_kernel(cfg, jit::testing::env_tune());
      for (int sq : {1, 5})
        for (int page : {0, 1, 16}) {
          CheckCase c = decode_case(group, sq);
          c.page_size = page;
          c.num_splits = page > 0 ? 3 : 0;
          expect_matches(
              jit::testing::run_and_check(*kernel, c),
              fmt::format("{} e4m3 KV group {} Sq {} page {} splits {}", arch, group, sq, page, c.num_splits));
        }
    }
}

}  // namespace
