// Issue-5 features on every backend that runs here, against the float64 reference: varlen,
// seqused_k, paged KV, split-KV with the combine kernel, GQA packing, block snippets and run-time
// block masks, snippets that reproduce the built-in score-mods, and seeded random combinations of
// all of them. The same random configs are compiled for sm_80, sm_90a and sm_100a without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <random>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "check/gpu.hpp"
#include "fa4jit/errors.hpp"
#include "fa4jit/jit.hpp"
#include "generator/key.hpp"
#include "common/persistent_walk.h"
#include "runtime/driver.hpp"
#include "runtime/nvrtc.hpp"
#include "runtime/runtime_internal.hpp"
#include "tests/support/expect.hpp"
#include "tests/support/tune.hpp"

namespace {

using jit::FA4Config;
using jit::Mask;
using jit::ScoreMod;
using jit::testing::CheckCase;
using jit::testing::CheckResult;

using jit::testing::runnable_archs;

using jit::testing::expect_matches;

FA4Config config(const std::string& arch, int depth, Mask mask = Mask::none(), ScoreMod mod = ScoreMod::identity()) {
  FA4Config c;
  c.arch = arch;
  c.depth = depth;
  c.mask = std::move(mask);
  c.score_mod = std::move(mod);
  return c;
}

// Launch arguments with shapes only (no data): enough for Kernel::num_splits / workspace_bytes.
jit::LaunchArgs shapes_only(int batch, int seqlen_q, int hq, int seqlen_k, int hkv, int depth = 128) {
  jit::LaunchArgs a;
  a.q = jit::Tensor::contiguous(reinterpret_cast<void*>(256), jit::DType::bf16, batch, seqlen_q, hq, depth);
  a.o = a.q;
  a.k = jit::Tensor::contiguous(reinterpret_cast<void*>(256), jit::DType::bf16, batch, seqlen_k, hkv, depth);
  a.v = a.k;
  return a;
}

CheckCase heads(int hq, int hkv) {
  CheckCase c;
  c.num_q_heads = hq;
  c.num_kv_heads = hkv;
  return c;
}

TEST(GpuFeatures, VarlenAndSequsedK) {
  SKIP_WITHOUT_GPU();
  for (const std::string& arch : runnable_archs())
    for (int depth : {64, 128})
      for (const Mask& mask : {Mask::none(), Mask::causal()}) {
        const auto kernel = jit::get_kernel(config(arch, depth, mask));
        CheckCase v = heads(4, 2);  // varlen q and k, zero-length sequences included
        v.seqlens_q = {17, 0, 300, 128, 1, 200};
        v.seqlens_k = {40, 5, 300, 0, 700, 129};
        expect_matches(jit::testing::run_and_check(*kernel, v), fmt::format("{} d{} varlen", arch, depth));
        CheckCase u = heads(4, 1);  // padded K with fewer keys used per sequence
        u.batch = 3;
        u.seqlen_q = 150;
        u.seqlen_k = 400;
        u.seqlens_k = {400, 1, 257};
        expect_matches(jit::testing::run_and_check(*kernel, u), fmt::format("{} d{} seqused_k", arch, depth));
      }
}

// sm90a: the default (persistent) walk loads paged K/V with a branch per tile, the grid walk
// (persistent=0) with its own copy of the producer (producer_unit<kPaged>): both run here.
TEST(GpuFeatures, PagedKvMatchesContiguous) {
  SKIP_WITHOUT_GPU();
  for (const std::string& arch : runnable_archs())
    for (int depth : {64, 128})
      for (const char* tune : {"", "persistent=0"}) {
        if (*tune && arch != "sm_90a") continue;
        const auto kernel = jit::get_kernel(config(arch, depth, Mask::causal()), jit::testing::tuned(tune));
        for (int page : {16, 32, 48, 64, 256}) {
          CheckCase c = heads(8, 2);
          c.batch = 3;
          c.seqlen_q = 33;
          c.seqlens_k = {1000, 64, 517};
          c.page_size = page;
          expect_matches(jit::testing::run_and_check(*kernel, c),
                         fmt::format("{} d{} {} paged {}", arch, depth, tune, page));
        }
        CheckCase v = heads(4, 4);  // varlen queries over paged keys
        v.seqlens_q = {5, 0, 130};
        v.seqlens_k = {300, 17, 130};
        v.page_size = 64;
        expect_matches(jit::testing::run_and_check(*kernel, v),
                       fmt::format("{} d{} {} paged varlen", arch, depth, tune));
      }
}

TEST(GpuFeatures, SplitKvMatchesReference) {
  SKIP_WITHOUT_GPU();
  for (const std::string& arch : runnable_archs())
    for (int depth : {64, 128})
      for (const Mask& mask : {Mask::none(), Mask::causal()}) {
        const auto kernel = jit::get_kernel(config(arch, depth, mask));
        // The combine's warps per row (combine_warps_per_row): 1 (3, 7), 4 (20), 8 (45: also more than
        // one warp's worth of split weights); the empty-splits case below: 2, with dead rows.
        for (int splits : {0, 3, 7, 20, 45}) {
          CheckCase c = heads(8, 2);
          c.batch = 2;
          c.seqlen_q = 3;
          c.seqlen_k = 3000;
          c.num_splits = splits;
          c.with_sinks = splits == 3;
          expect_matches(jit::testing::run_and_check(*kernel, c), fmt::format("{} d{} splits {}", arch, depth, splits));
        }
        CheckCase e = heads(2, 2);  // more splits than KV tiles: empty splits must combine to the right answer
        e.seqlen_q = 131;           // 262 rows: the combine's last CTA (4 rows) holds 2
        e.seqlen_k = 200;
        e.num_splits = 9;
        expect_matches(jit::testing::run_and_check(*kernel, e), fmt::format("{} d{} empty splits", arch, depth));
      }
}

// A sink far above a split's scores (ALiBi, Sq << Sk: split 0 sees only distant keys) must not
// overflow or be clamped: the sink moves the row maximum.
TEST(GpuFeatures, SinksWithSplitsAndAlibi) {
  SKIP_WITHOUT_GPU();
  for (const std::string& arch : runnable_archs())
    for (bool pack : {false, true}) {
      FA4Config cfg = config(arch, 128, Mask::causal(), ScoreMod::alibi());
      cfg.group = 4;
      cfg.pack_gqa = pack;
      const auto kernel = jit::get_kernel(cfg);
      CheckCase c = heads(8, 2);
      c.seqlen_q = 12;
      c.seqlen_k = 1116;
      c.num_splits = 5;
      c.with_sinks = true;
      expect_matches(jit::testing::run_and_check(*kernel, c), fmt::format("{} alibi sinks splits pack {}", arch, pack));
    }
}

// Stream-K decode (sm90a, Tuning::persistent = 2, opt-in): every SM streams an equal run of
// KV tiles, so tiles are cut at arbitrary unit boundaries into 2 .. ~17 segments merged by the
// combine, and CTAs run on from one tile into the next. Shapes pick the awkward cases: many
// segments per tile (5 x 4100 keys), runs straddling tile ends (37 x 777), sequences shorter than
// their units (seqused_k over pages: some segments see no key), a full 64-row packed tile (Sq 16),
// and several Q tiles per head (Sq 40: whole tiles, no partials).
TEST(GpuFeatures, StreamKDecodeMatchesReference) {
  SKIP_WITHOUT_GPU();
  for (const std::string& arch : runnable_archs()) {
    FA4Config cfg = config(arch, 128, Mask::causal());
    cfg.group = 4;
    cfg.pack_gqa = true;
    const auto kernel = jit::get_kernel(cfg, jit::testing::tuned("persistent=2"));
    const bool stream_k = kernel->config().backend == jit::Backend::hopper;
    EXPECT_EQ(kernel->config().tuning.persistent, stream_k ? 2 : 0) << arch;
    struct Shape {
      int batch, seqlen_q, seqlen_k;
      std::vector<int> seqlens_k;
      int page_size;
      bool sinks;
    };
    const Shape shapes[] = {{5, 1, 4100, {}, 0, true},
                            {37, 1, 777, {}, 0, false},
                            {4, 1, 3000, {1000, 64, 517, 3000}, 64, true},
                            {3, 16, 2000, {}, 0, true},
                            {2, 40, 900, {}, 0, false}};
    for (const Shape& sh : shapes) {
      CheckCase c = heads(8, 2);
      c.batch = sh.batch;
      c.seqlen_q = sh.seqlen_q;
      c.seqlen_k = sh.seqlen_k;
      c.seqlens_k = sh.seqlens_k;
      c.page_size = sh.page_size;
      c.with_sinks = sh.sinks;
      c.num_splits = 0;  // automatic: one unit per KV tile on sm90a
      expect_matches(jit::testing::run_and_check(*kernel, c), fmt::format("{} B {} Sq {} Sk {} page {}", arch, sh.batch,
                                                                          sh.seqlen_q, sh.seqlen_k, sh.page_size));
    }
    if (stream_k) {  // decode shapes are cut into partials; Sq 40 packs 160 rows into 3 whole tiles
      EXPECT_GT(kernel->num_splits(shapes_only(5, 1, 8, 4100, 2)), 1);
      EXPECT_EQ(kernel->num_splits(shapes_only(2, 40, 8, 900, 2)), 1);
      EXPECT_EQ(kernel->workspace_bytes(shapes_only(2, 40, 8, 900, 2)), 0u);
    }
  }
}

// Persistent unmasked launches split their last, partial round of tiles (PersistentTiles' split
// tail, PersistentWalk::split_tail): tiles before split_from write O, the tail's KV splits write partials
// that fa4_combine merges. Shapes put split_from at a head's first tile and inside a head (m
// blocks 5 do not divide the SM count of an H100/H200), with a clipped last Q tile, GQA, and sinks
// (counted once: by the whole tiles and by split 0).
TEST(GpuFeatures, PersistentSplitTailMatchesReference) {
  SKIP_WITHOUT_GPU();
  const std::vector<std::string> archs = runnable_archs();
  if (std::find(archs.begin(), archs.end(), "sm_90a") == archs.end())
    GTEST_SKIP() << "the persistent walker is sm90a's";
  const int sms = jit::detail::device_limits(jit::detail::ensure_context()).sms;
  for (int depth : {64, 128}) {
    const auto kernel = jit::get_kernel(config("sm_90a", depth), jit::testing::tuned("persistent=1"));
    ASSERT_EQ(kernel->config().tuning.persistent, 1);
    const int bm = kernel->config().config.BM, bn = kernel->config().config.BN;
    for (int m_blocks : {1, 5}) {
      CheckCase c = heads(2, 1);
      c.seqlen_q = m_blocks * bm - 7;
      c.seqlen_k = 5 * bn - 3;
      c.batch = sms / (2 * m_blocks) + 1;  // one whole round, then up to 2 * m_blocks tiles
      c.num_splits = 0;
      c.with_sinks = m_blocks == 5;
      const long long tiles = 2LL * m_blocks * c.batch;
      const int expected = fa4::PersistentWalk::split_tail(tiles, 5, sms).splits;
      ASSERT_GT(expected, 1) << "shape without a split tail: tiles " << tiles << " sms " << sms;
      EXPECT_EQ(kernel->num_splits(shapes_only(c.batch, c.seqlen_q, 2, c.seqlen_k, 1, depth)), expected);
      expect_matches(jit::testing::run_and_check(*kernel, c),
                     fmt::format("d{} m_blocks {} B {} split tail {}", depth, m_blocks, c.batch, expected));
    }
  }
}

// Persistent kernels with the own O region (d96, d128): a warpgroup hands its Q region back before
// the epilogue, so the next tile's Q load overlaps it. Every shape gives each CTA at least 3 tiles,
// and together they reach every way a tile boundary goes: a tile followed by a tile whose rows see
// no key (causal, seqlen_q > seqlen_k, bottom-right) or a tile without Q rows (varlen, empty
// sequences), and the end of the walk; with split-tail partials, GQA and sinks; on both masks.
// The same shapes run the dynamic walk (persistent=3: units claimed from the launch's counter and
// handed to the consumers with Q; over equal lengths strided as the persistent walk, with no
// counter), whose end and unit handoff cross the same boundaries, and its paged launches (TMA
// pages of 64 and gathered pages of 3, seqused_k: claimed) and forced KV splits.
TEST(GpuFeatures, PersistentOwnORegionMatchesReference) {
  SKIP_WITHOUT_GPU();
  const std::vector<std::string> archs = runnable_archs();
  if (std::find(archs.begin(), archs.end(), "sm_90a") == archs.end())
    GTEST_SKIP() << "the persistent walker is sm90a's";
  const int sms = jit::detail::device_limits(jit::detail::ensure_context()).sms;
  for (const char* tune : {"", "persistent=3"})
    for (int depth : {96, 128})
      for (const Mask& mask : {Mask::none(), Mask::causal()}) {
        const auto kernel = jit::get_kernel(config("sm_90a", depth, mask), jit::testing::tuned(tune));
        const bool dynamic = *tune != 0;
        ASSERT_EQ(kernel->config().tuning.persistent, dynamic ? 3 : 1) << "d" << depth << ": not persistent by default";
        const int bm = kernel->config().config.BM;
        const std::string what = fmt::format("d{} {}{}", depth, mask.kind == Mask::Kind::causal ? "causal" : "none",
                                             dynamic ? " dynamic" : "");
        if (dynamic) {
          // Equal lengths under a built-in mask: the static stride, no counter (no workspace unsplit);
          // the varlen, paged-with-seqused_k and split launches below claim.
          jit::LaunchArgs unsplit = shapes_only(2, 5 * bm - 7, 4, 5 * bm - 7, 2, depth);
          unsplit.num_splits = 1;
          EXPECT_EQ(kernel->workspace_bytes(unsplit), 0u) << what;
          CheckCase paged = heads(4, 2);  // seqused_k over pages: TMA boxes (64) and gathered rows (3)
          paged.batch = sms / 4 + 3;
          paged.seqlen_q = 300;
          paged.seqlens_k.clear();
          for (int b = 0; b < paged.batch; ++b) paged.seqlens_k.push_back(1 + (b * 197) % 900);
          for (int page : {64, 3}) {
            paged.page_size = page;
            expect_matches(jit::testing::run_and_check(*kernel, paged), fmt::format("{} paged {}", what, page));
          }
          CheckCase split = heads(4, 2);  // every tile in 3 KV splits, the units split fastest
          split.batch = 3;
          split.seqlen_q = 5 * bm - 7;
          split.seqlen_k = 1500;
          split.num_splits = 3;
          expect_matches(jit::testing::run_and_check(*kernel, split), what + " splits 3");
        }

        CheckCase equal = heads(4, 2);  // clipped last Q tile; automatic splits: a split tail when unmasked
        equal.seqlen_q = equal.seqlen_k = 5 * bm - 7;
        equal.batch = 3 * sms / (4 * 5) + 1;
        equal.num_splits = 0;
        equal.with_sinks = true;
        expect_matches(jit::testing::run_and_check(*kernel, equal), what + " equal lengths");

        CheckCase keyless = heads(4, 4);  // causal: the first 450 rows see no key (3 whole tiles)
        keyless.seqlen_q = 700;
        keyless.seqlen_k = 250;
        keyless.batch = 3 * sms / (4 * 6) + 1;
        expect_matches(jit::testing::run_and_check(*kernel, keyless), what + " seqlen_q > seqlen_k");

        CheckCase varlen = heads(8, 2);  // tiles past a sequence's rows have no Q rows
        varlen.seqlens_q = {0, 900, 5, 0, 640, 128, 1, 300, 0, 77};
        varlen.seqlens_k = {3, 900, 700, 0, 640, 129, 1000, 260, 9, 77};
        ASSERT_GE(8LL * 10 * ((900 + bm - 1) / bm), 3LL * sms);
        expect_matches(jit::testing::run_and_check(*kernel, varlen), what + " varlen");
      }
}

// A varlen or paged batch is bounded by its total keys unless the caller passes max_seqlen_k
// (FlashAttention's hint): with it, a varlen batch is scheduled as an equal-length one
// (schedule_model). The hint only picks the CTA order, so one below the real longest sequence (here
// 1000 against 2048 keys) still gives the reference's results.
TEST(GpuFeatures, MaxSeqlenKHintStaysCorrect) {
  SKIP_WITHOUT_GPU();
  const std::vector<std::string> archs = runnable_archs();
  if (std::find(archs.begin(), archs.end(), "sm_90a") == archs.end()) GTEST_SKIP() << "the LPT schedule is sm90a's";
  const auto kernel = jit::get_kernel(config("sm_90a", 128, Mask::causal()));
  CheckCase varlen = heads(8, 2);
  varlen.seqlens_q = {1000, 2048, 0, 700, 1500, 64};
  varlen.seqlens_k = {1000, 2048, 5, 900, 1500, 64};
  CheckCase paged = heads(8, 2);  // seqused_k, pages of 64
  paged.batch = 3;
  paged.seqlen_q = 300;
  paged.seqlens_k = {2048, 1200, 300};
  paged.page_size = 64;
  CheckCase paged_varlen = paged;                // varlen queries over the pages (a chunked prefill): with the hint,
  paged_varlen.seqlens_q = {300, 0, 129, 1000};  // scheduled as an equal-length batch too
  paged_varlen.seqlens_k = {900, 50, 700, 2048};
  for (CheckCase c : {varlen, paged, paged_varlen})
    for (int hint : {0, 2048, 1000}) {
      c.max_seqlen_k = hint;
      expect_matches(jit::testing::run_and_check(*kernel, c),
                     fmt::format("{} max_seqlen_k {}", c.page_size > 0 ? "paged" : "varlen", hint));
    }
}

// A consumer warpgroup's P V skips the keys of a KV tile that its own 64 rows cannot see (sm90a
// WgKeySpan, Tuning::wg_spans: half of the tile or none of it; on by default for causal d64, forced
// on here). The cases move the causal diagonal through every position against the warpgroups' rows
// (bottom-right, seqlen_k - seqlen_q of 0, 32, 64, 96 and 200, and seqlen_q > seqlen_k), with a
// window, chunks and a score-mod, on d64 (kBM 192: warpgroups that see none of a tile) and d128
// (kBM 128) kernels, and on the grid and the simple schedule, which reach the spans through the
// other loops.
TEST(GpuFeatures, WarpgroupKeySpansMatchReference) {
  SKIP_WITHOUT_GPU();
  const std::vector<std::string> archs = runnable_archs();
  if (std::find(archs.begin(), archs.end(), "sm_90a") == archs.end()) GTEST_SKIP() << "warpgroup spans are sm90a's";
  struct Shape {
    int seqlen_q, seqlen_k;
  };
  const std::vector<Shape> causal_shapes = {{515, 515}, {515, 547}, {515, 579}, {515, 611}, {515, 715}, {700, 250}};
  auto check = [](const FA4Config& cfg, const jit::ResolveOptions& tune, CheckCase c, const std::vector<Shape>& shapes,
                  const std::string& what) {
    const auto kernel = jit::get_kernel(cfg, tune);
    for (const Shape& sh : shapes) {
      c.seqlen_q = sh.seqlen_q;
      c.seqlen_k = sh.seqlen_k;
      expect_matches(jit::testing::run_and_check(*kernel, c),
                     fmt::format("{} BM {} Sq {} Sk {}", what, kernel->config().config.BM, sh.seqlen_q, sh.seqlen_k));
    }
  };
  for (const char* tune : {"wg_spans=1", "wg_spans=1,persistent=0", "wg_spans=1,intra_wg_overlap=0"}) {
    const jit::ResolveOptions scoped = jit::testing::tuned(tune);
    for (int depth : {64, 128}) {
      const std::string what = fmt::format("tune '{}' d{}", tune, depth);
      CheckCase c = heads(4, 2);
      c.batch = 2;
      check(config("sm_90a", depth, Mask::causal()), scoped, c, causal_shapes, what + " causal");
      if (std::string(tune) != "wg_spans=1") continue;  // the other loops: causal only
      FA4Config fp16 = config("sm_90a", depth, Mask::causal(), ScoreMod::softcap());
      fp16.dtype = jit::DType::fp16;
      CheckCase capped = c;
      capped.softcap = 4.0f;
      check(fp16, scoped, capped, {{515, 579}, {700, 250}}, what + " fp16 causal softcap");
      CheckCase window = c;
      window.window_left = 100;
      window.window_right = 0;
      check(config("sm_90a", depth, Mask::sliding_window()), scoped, window, {{515, 515}, {515, 579}},
            what + " window");
      CheckCase chunks = c;
      chunks.chunk_size = 100;
      check(config("sm_90a", depth, Mask::chunked()), scoped, chunks, {{515, 515}, {515, 611}}, what + " chunked");
    }
  }
}

TEST(GpuFeatures, AutomaticSplitsFillTheGpuForDecode) {
  SKIP_WITHOUT_GPU();
  const auto kernel = jit::get_kernel(config(runnable_archs().back(), 128));
  jit::LaunchArgs a = shapes_only(1, 1, 32, 131072, 8);  // num_splits() needs no data
  EXPECT_GT(kernel->num_splits(a), 1);
  EXPECT_GT(kernel->workspace_bytes(a), 0u);
  a = shapes_only(16, 2048, 16, 2048, 16);        // prefill fills the GPU: 4096 Q tiles
  if (kernel->config().tuning.persistent == 1) {  // sm90a default: only the last, partial round splits
    const int sms = jit::detail::device_limits(jit::detail::ensure_context()).sms;
    const fa4::PersistentWalk::SplitTail tail =
        fa4::PersistentWalk::split_tail(4096, 2048 / kernel->config().config.BN, sms);
    EXPECT_EQ(kernel->num_splits(a), tail.splits);
    const std::size_t tail_rows = tail.splits > 1 ? (4096 - tail.from) * kernel->config().config.BM : 0;
    EXPECT_EQ(kernel->workspace_bytes(a), tail_rows * tail.splits * (128 + 1) * sizeof(float));
  } else {
    EXPECT_EQ(kernel->num_splits(a), 1);  // the grid does not split
    EXPECT_EQ(kernel->workspace_bytes(a), 0u);
  }
  a.num_splits = 257;  // LaunchArgs::num_splits: at most 256
  EXPECT_THROW(kernel->num_splits(a), jit::LaunchError);
}

TEST(GpuFeatures, PackedGqaMatchesReference) {
  SKIP_WITHOUT_GPU();
  for (const std::string& arch : runnable_archs())
    for (int depth : {64, 128})
      for (int group : {4, 8}) {
        // A custom mask and score-mod that depend on the head catch a wrong row -> head mapping.
        FA4Config cfg =
            config(arch, depth, Mask::all_of({Mask::causal(), Mask::custom("return (kv_idx + h) % 5 != 0;")}),
                   ScoreMod::custom("return score - 0.05f * h;"));
        cfg.group = group;
        cfg.pack_gqa = true;
        const auto kernel = jit::get_kernel(cfg);
        for (int sq : {1, 16, 77}) {
          CheckCase c = heads(2 * group, 2);
          c.batch = 2;
          c.seqlen_q = sq;
          c.seqlen_k = 700;
          c.with_sinks = sq == 16;
          c.num_splits = sq == 1 ? 4 : 1;
          const int sk = c.seqlen_k, sqq = sq;
          c.custom_visible = [sk, sqq](int, int h, int q, int k) { return k <= q + sk - sqq && (k + h) % 5 != 0; };
          c.custom_score_mod = [](double s, int, int h, int, int) { return s - 0.05 * h; };
          expect_matches(jit::testing::run_and_check(*kernel, c),
                         fmt::format("{} d{} pack group {} sq {}", arch, depth, group, sq));
        }
        CheckCase v = heads(group, 1);  // packed varlen over pages
        v.seqlens_q = {3, 0, 40};
        v.seqlens_k = {90, 20, 600};
        v.page_size = 64;
        v.custom_visible = [&v](int b, int h, int q, int k) {
          return k <= q + v.seqlens_k[b] - v.seqlens_q[b] && (k + h) % 5 != 0;
        };
        v.custom_score_mod = [](double s, int, int h, int, int) { return s - 0.05 * h; };
        expect_matches(jit::testing::run_and_check(*kernel, v), fmt::format("{} d{} pack varlen paged", arch, depth));
      }
}

// Head dims 96 (padded to 128), 192 and 256 on sm90a through the variant paths: varlen, paged KV
// (pages that split a BN 80 / 112 tile into 16-row boxes), split-KV (partials and the combine at the
// real depth), packed-GQA decode with head-dependent masks and score-mods (split, sinks, paged varlen),
// and a sliding window with ALiBi (the smaller default BN). O rows carry 32 poisoned elements past
// head_dim that must stay untouched.
TEST(GpuFeatures, HopperDeepHeadVariants) {
  SKIP_WITHOUT_GPU();
  if (jit::current_device_arch() != "sm_90a") GTEST_SKIP() << "needs an sm_90 GPU";
  const std::string arch = "sm_90a";
  for (int depth : {96, 192, 256}) {
    const auto causal = jit::get_kernel(config(arch, depth, Mask::causal()));
    const std::string d = fmt::format("d{} BN {}", depth, causal->config().config.BN);
    CheckCase v = heads(4, 2);
    v.seqlens_q = {17, 0, 300, 128, 1, 200};
    v.seqlens_k = {40, 5, 300, 0, 700, 129};
    v.o_head_pad = 32;
    expect_matches(jit::testing::run_and_check(*causal, v), d + " varlen");
    for (int page : {48, 256}) {
      CheckCase c = heads(8, 2);
      c.batch = 3;
      c.seqlen_q = 33;
      c.seqlens_k = {1000, 64, 517};
      c.page_size = page;
      c.o_head_pad = 32;
      expect_matches(jit::testing::run_and_check(*causal, c), fmt::format("{} paged {}", d, page));
    }
    CheckCase sp = heads(8, 2);
    sp.batch = 2;
    sp.seqlen_q = 3;
    sp.seqlen_k = 3000;
    sp.num_splits = 5;
    sp.with_sinks = true;
    sp.o_head_pad = 32;
    expect_matches(jit::testing::run_and_check(*causal, sp), d + " splits 5 sinks");

    FA4Config pcfg = config(arch, depth, Mask::all_of({Mask::causal(), Mask::custom("return (kv_idx + h) % 5 != 0;")}),
                            ScoreMod::custom("return score - 0.05f * h;"));
    pcfg.group = 4;
    pcfg.pack_gqa = true;
    const auto packed = jit::get_kernel(pcfg);
    const std::string pd = fmt::format("d{} packed BM {} BN {} ctas/SM {}", depth, packed->config().config.BM,
                                       packed->config().config.BN, packed->config().ctas_per_sm);
    for (int sq : {1, 16}) {
      CheckCase c = heads(8, 2);
      c.batch = 2;
      c.seqlen_q = sq;
      c.seqlen_k = 2000;
      c.num_splits = sq == 1 ? 0 : 3;  // automatic, then explicit
      c.with_sinks = true;
      c.o_head_pad = 32;
      const int sk = c.seqlen_k;
      c.custom_visible = [sk, sq](int, int h, int q, int k) { return k <= q + sk - sq && (k + h) % 5 != 0; };
      c.custom_score_mod = [](double s, int, int h, int, int) { return s - 0.05 * h; };
      expect_matches(jit::testing::run_and_check(*packed, c), fmt::format("{} sq {} splits {}", pd, sq, c.num_splits));
    }
    CheckCase pv = heads(4, 1);  // packed varlen over pages
    pv.seqlens_q = {3, 0, 40};
    pv.seqlens_k = {90, 20, 600};
    pv.page_size = 64;
    pv.o_head_pad = 32;
    pv.custom_visible = [&pv](int b, int h, int q, int k) {
      return k <= q + pv.seqlens_k[b] - pv.seqlens_q[b] && (k + h) % 5 != 0;
    };
    pv.custom_score_mod = [](double s, int, int h, int, int) { return s - 0.05 * h; };
    expect_matches(jit::testing::run_and_check(*packed, pv), pd + " varlen paged");

    FA4Config wcfg = config(arch, depth, Mask::all_of({Mask::causal(), Mask::sliding_window()}), ScoreMod::alibi());
    wcfg.dtype = jit::DType::fp16;
    const auto window = jit::get_kernel(wcfg);
    CheckCase w = heads(6, 2);
    w.seqlen_q = 301;
    w.seqlen_k = 777;
    w.window_left = 200;
    w.window_right = 7;
    w.o_head_pad = 32;
    expect_matches(jit::testing::run_and_check(*window, w),
                   fmt::format("d{} fp16 causal+window alibi BN {}", depth, window->config().config.BN));
  }
}

// A block-sparse custom mask: 64x64 blocks on a checkerboard, described by its element snippet,
// by a block snippet, and by a run-time block mask; all three must agree with the reference.
TEST(GpuFeatures, BlockSnippetAndRunTimeBlockMask) {
  SKIP_WITHOUT_GPU();
  const std::string element = "return ((q_idx / 64) + (kv_idx / 64)) % 2 == 0 && kv_idx != q_idx + 3;";
  const std::string block =
      "return (q_hi - q_lo <= 64 - q_lo % 64 && kv_hi - kv_lo <= 64 - kv_lo % 64 && (q_lo / 64 + kv_lo / 64) % 2)"
      " ? SKIP : PARTIAL;";
  auto visible = [](int, int, int q, int k) { return ((q / 64) + (k / 64)) % 2 == 0 && k != q + 3; };
  for (const std::string& arch : runnable_archs())
    for (int depth : {64, 128}) {
      for (const std::string& b : {std::string(), block}) {
        const auto kernel = jit::get_kernel(config(arch, depth, Mask::custom(element, b)));
        CheckCase c = heads(4, 2);
        c.seqlen_q = 300;
        c.seqlen_k = 500;
        c.custom_visible = visible;
        expect_matches(jit::testing::run_and_check(*kernel, c),
                       fmt::format("{} d{} block snippet '{}'", arch, depth, b));
        c.block_mask_q = 64;
        c.block_mask_k = 64;
        expect_matches(jit::testing::run_and_check(*kernel, c), fmt::format("{} d{} run-time block mask", arch, depth));
      }
    }
}

// A run-time block mask whose key blocks are the kernel's tile width (the Python package's maps of
// 128 at BN 128), or below BN 128 a multiple of it (maps of 128 at depth 256's BN 64): the walk reads
// one byte per tile from the unit's map row, found once per Q tile (mask::Custom::map_row). The
// mask's blocks depend on batch and head, and it has empty, full and partial blocks, so a map row
// taken for the wrong batch, head or query block skips visible keys or reads a partial tile
// unmasked; ragged lengths end the sequences inside a block.
TEST(GpuFeatures, RunTimeBlockMaskAtTheTileWidthMatchesReference) {
  SKIP_WITHOUT_GPU();
  const std::string element = "return (q_idx / 128 + kv_idx / 128 + b + 2 * h) % 3 != 0 && kv_idx <= q_idx + 40;";
  auto visible = [](int b, int h, int q, int k) { return (q / 128 + k / 128 + b + 2 * h) % 3 != 0 && k <= q + 40; };
  for (const std::string& arch : runnable_archs())
    for (int depth : {128, 256}) {
      const auto kernel = jit::get_kernel(config(arch, depth, Mask::custom(element)));
      const int bn = kernel->config().config.BN;
      for (int layout = 0; layout < 3; ++layout) {
        CheckCase c = heads(4, 2);
        c.custom_visible = visible;
        c.block_mask_q = 128;
        c.block_mask_k = bn >= 128 ? bn : 128;  // the tile width, or whole tiles of it
        if (layout == 0) {
          c.batch = 3;
          c.seqlen_q = 700;
          c.seqlen_k = 900;
        } else if (layout == 1) {  // varlen
          c.seqlens_q = {300, 129, 640};
          c.seqlens_k = {300, 700, 650};
        } else {  // KV split
          c.batch = 2;
          c.seqlen_q = 200;
          c.seqlen_k = 1500;
          c.num_splits = 3;
        }
        expect_matches(
            jit::testing::run_and_check(*kernel, c),
            fmt::format("{} d{} BN {} layout {} map blocks 128 x {}", arch, depth, bn, layout, c.block_mask_k));
      }
    }
}

// Snippets that reproduce softcap and ALiBi give the built-ins' results within rounding.
TEST(GpuFeatures, SnippetsReproduceSoftcapAndAlibi) {
  SKIP_WITHOUT_GPU();
  const ScoreMod softcap_snippet = ScoreMod::custom("return scalars[0] * tanhf(score / scalars[0]);");
  const ScoreMod alibi_snippet = ScoreMod::custom(
      "int n = 1; while (n * 2 <= params.num_q_heads) n *= 2;\n"
      "const float slope = h < n ? exp2f(-8.0f * (h + 1) / n) : exp2f(-4.0f * (2 * (h - n) + 1) / n);\n"
      "return score - slope * fabsf((float)(q_idx + params.seqlen_k - params.seqlen_q - kv_idx));");
  for (const std::string& arch : runnable_archs()) {
    CheckCase c = heads(6, 2);
    c.seqlen_q = 257;
    c.seqlen_k = 513;
    c.seed = 1234;  // the same inputs for built-in and snippet
    c.softcap = 7.5f;
    const auto builtin_cap = jit::get_kernel(config(arch, 128, Mask::causal(), ScoreMod::softcap()));
    const auto builtin_alibi = jit::get_kernel(config(arch, 128, Mask::causal(), ScoreMod::alibi()));
    const auto snippet_cap = jit::get_kernel(config(arch, 128, Mask::causal(), softcap_snippet));
    const auto snippet_alibi = jit::get_kernel(config(arch, 128, Mask::causal(), alibi_snippet));
    const CheckResult bc = jit::testing::run_and_check(*builtin_cap, c);
    const double cap = c.softcap;
    c.custom_score_mod = [cap](double s, int, int, int, int) { return cap * std::tanh(s / cap); };
    CheckCase sc = c;
    sc.aux_scalar[0] = c.softcap;  // the snippet reads the cap as scalars[0]
    const CheckResult sr = jit::testing::run_and_check(*snippet_cap, sc);
    expect_matches(bc, arch + " builtin softcap");
    expect_matches(sr, arch + " snippet softcap");
    EXPECT_NEAR(sr.rel_l2, bc.rel_l2, 2e-3) << arch << " softcap snippet vs built-in";
    CheckCase a = heads(6, 2);
    a.seqlen_q = 257;
    a.seqlen_k = 513;
    a.seed = 99;
    const CheckResult ba = jit::testing::run_and_check(*builtin_alibi, a);
    const int H = 6, off = 513 - 257;
    a.custom_score_mod = [H, off](double s, int, int h, int q, int k) {
      return s - jit::testing::alibi_slope(h, H) * std::fabs(static_cast<double>(q + off - k));
    };
    const CheckResult sa = jit::testing::run_and_check(*snippet_alibi, a);
    expect_matches(ba, arch + " builtin alibi");
    expect_matches(sa, arch + " snippet alibi");
    EXPECT_NEAR(sa.rel_l2, ba.rel_l2, 2e-3) << arch << " alibi snippet vs built-in";
    EXPECT_EQ(sa.max_abs == 0, ba.max_abs == 0);
  }
}

// ---- Random combinations ----

struct RandomCase {
  std::string name;
  FA4Config cfg;
  CheckCase check;
};

// One seeded random feature combination for `arch`: mask, score-mod, depth, dtype, GQA and
// packing (compile time) and layout, lengths, splits, sinks (run time).
RandomCase random_case(std::uint64_t seed, const std::string& arch) {
  std::mt19937_64 rng(seed);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<std::uint64_t>(n)); };
  RandomCase r;
  FA4Config& cfg = r.cfg;
  CheckCase& c = r.check;
  cfg.arch = arch;
  cfg.depth = pick(2) ? 128 : 64;
  cfg.dtype = pick(4) == 0 ? jit::DType::fp16 : jit::DType::bf16;
  const int group = 1 << pick(4), hkv = 1 + pick(2);
  cfg.group = group;
  cfg.pack_gqa = group > 1 && pick(2);
  c.num_q_heads = group * hkv;
  c.num_kv_heads = hkv;
  c.seed = seed;

  // Layout and lengths (odd lengths, Sq != Sk, zero-length sequences).
  const int layout = pick(4);  // 0 uniform, 1 varlen, 2 seqused_k, 3 paged
  c.batch = 1 + pick(3);
  c.seqlen_q = 1 + pick(pick(2) ? 16 : 300);
  c.seqlen_k = 1 + pick(1200);
  if (layout == 1 || (layout == 3 && pick(2))) {
    for (int b = 0; b < c.batch; ++b) c.seqlens_q.push_back(pick(5) == 0 ? 0 : 1 + pick(200));
  }
  if (layout >= 1)
    for (int b = 0; b < c.batch; ++b) c.seqlens_k.push_back(pick(6) == 0 ? 0 : 1 + pick(1200));
  if (layout == 3) c.page_size = std::vector<int>{16, 32, 64, 128, 256, 48}[pick(6)];
  c.num_splits = std::vector<int>{1, 1, 0, 2, 5}[pick(5)];
  c.with_sinks = pick(3) == 0;

  // Mask: every built-in, combinations and head-dependent custom masks (fully masked rows included).
  switch (pick(7)) {
    case 0: cfg.mask = Mask::none(); break;
    case 1: cfg.mask = Mask::causal(pick(2)); break;
    case 2:
      cfg.mask = Mask::sliding_window(pick(2));
      c.window_left = pick(3) == 0 ? -1 : pick(300);
      c.window_right = pick(3) == 0 ? -1 : pick(50);
      break;
    case 3:
      cfg.mask = Mask::chunked();
      c.chunk_size = 16 + pick(200);
      break;
    case 4:
      cfg.mask = Mask::all_of({Mask::causal(), Mask::sliding_window()});
      c.window_left = pick(200);
      c.window_right = pick(20);
      break;
    case 5: cfg.mask = Mask::any_of({Mask::causal(), Mask::custom("return kv_idx % 7 == h % 7;")}); break;
    default: cfg.mask = Mask::custom("return (q_idx + kv_idx + h) % 3 != 1;"); break;
  }
  if (cfg.mask.kind == Mask::Kind::custom)
    c.custom_visible = [](int, int h, int q, int k) { return (q + k + h) % 3 != 1; };
  if (cfg.mask.kind == Mask::Kind::any_of) {
    // Causal alignment is per sequence: the reference gets the lengths through the closure.
    const std::vector<int> lq = c.seqlens_q, lk = c.seqlens_k;
    const int sq = c.seqlen_q, sk = c.seqlen_k;
    c.custom_visible = [lq, lk, sq, sk](int b, int h, int q, int k) {
      const int qb = lq.empty() ? sq : lq[b], kb = lk.empty() ? sk : lk[b];
      return k <= q + kb - qb || k % 7 == h % 7;
    };
  }
  switch (pick(4)) {
    case 0: cfg.score_mod = ScoreMod::identity(); break;
    case 1:
      cfg.score_mod = ScoreMod::softcap();
      c.softcap = 2.0f + pick(30);
      break;
    case 2: cfg.score_mod = ScoreMod::alibi(); break;
    default:
      cfg.score_mod = ScoreMod::custom("return score + 0.01f * (h - kv_idx % 3);");
      c.custom_score_mod = [](double s, int, int h, int, int k) { return s + 0.01 * (h - k % 3); };
  }
  r.name = fmt::format(
      "seed {} {} d{} {} group {}{} B {} Sq {} Sk {} seqlens_q [{}] seqlens_k [{}] page {} splits {} sinks {} window "
      "({}, {}) "
      "chunk {} softcap {} mask {} mod {}",
      seed, arch, cfg.depth, jit::to_string(cfg.dtype), group, cfg.pack_gqa ? " packed" : "", c.batch, c.seqlen_q,
      c.seqlen_k, fmt::join(c.seqlens_q, ","), fmt::join(c.seqlens_k, ","), c.page_size, c.num_splits, c.with_sinks,
      c.window_left, c.window_right, c.chunk_size, c.softcap, jit::to_json(cfg)["mask"].dump(),
      jit::to_json(cfg)["score_mod"].dump());
  return r;
}

constexpr std::uint64_t kRandomSeed0 = 0x5eed0000;
constexpr int kRandomCases = 24;

TEST(GpuFeatures, RandomCombinationsMatchReference) {
  SKIP_WITHOUT_GPU();
  for (const std::string& arch : runnable_archs())
    for (int i = 0; i < kRandomCases; ++i) {
      const RandomCase rc = random_case(kRandomSeed0 + i, arch);
      std::string why;
      if (!jit::supported(rc.cfg, &why)) {
        ADD_FAILURE() << rc.name << ": generator produced an unsupported config: " << why;
        continue;
      }
      try {
        expect_matches(jit::testing::run_and_check(*jit::get_kernel(rc.cfg), rc.check), rc.name);
      } catch (const std::exception& e) {
        ADD_FAILURE() << rc.name << ": " << e.what();
      }
    }
}

// The random configs go through JSON unchanged (same cache key), so bench/compile_time.py can time
// exactly these kernels: with FA4JIT_WRITE_RANDOM_CASES=FILE this test also writes them there
// ([{"name", "config"}], every case for each backend's arch).
TEST(FeatureCompile, RandomCasesSurviveJson) {
  nlohmann::json all = nlohmann::json::array();
  for (const std::string arch : {"sm_80", "sm_90a", "sm_100a"})
    for (int i = 0; i < kRandomCases; ++i) {
      const RandomCase rc = random_case(kRandomSeed0 + i, arch);
      const nlohmann::json j = jit::to_json(rc.cfg);
      EXPECT_EQ(jit::cache_key(jit::config_from_json(nlohmann::json::parse(j.dump()))), jit::cache_key(rc.cfg))
          << rc.name;
      all.push_back({{"name", rc.name}, {"config", j}});
    }
  if (const char* path = std::getenv("FA4JIT_WRITE_RANDOM_CASES")) {
    std::ofstream out(path);
    out << all.dump(1) << "\n";
    ASSERT_TRUE(out.good()) << "could not write " << path;
  }
}

// CI has no GPU: the same random configs must at least compile (NVRTC + ptxas) for every backend.
TEST(FeatureCompile, RandomCombinationsCompileForEveryBackend) {
  std::set<std::string> combines;  // each split-KV combine kernel the cases need, compiled once
  for (const std::string arch : {"sm_80", "sm_90a", "sm_100a"})
    for (int i = 0; i < kRandomCases; i += 3) {
      const RandomCase rc = random_case(kRandomSeed0 + i, arch);
      try {
        const auto in = jit::detail::compile_inputs(rc.cfg);
        const auto out = jit::detail::nvrtc_compile(in.source, "fa4jit.cu", *in.headers, in.compile_options());
        EXPECT_NE(out.ptx.find(".entry " + jit::detail::entry_name(in.key) + "("), std::string::npos) << rc.name;
        const auto use = jit::detail::parse_ptxas_log(out.log);
        EXPECT_GT(use.registers, 0) << rc.name;
        const auto ci = jit::detail::combine_inputs(in.config);
        if (combines.insert(ci.key).second) {
          const auto co =
              jit::detail::nvrtc_compile(ci.source, jit::detail::kCombineSourceName, *ci.headers, ci.compile_options());
          EXPECT_NE(co.ptx.find(".entry " + jit::detail::combine_entry_name(ci.key) + "("), std::string::npos)
              << rc.name;
          EXPECT_EQ(jit::detail::parse_ptxas_log(co.log, jit::detail::kCombineEntryName).spill_stores, 0) << rc.name;
        }
      } catch (const jit::Error& e) {
        ADD_FAILURE() << rc.name << ": " << e.what();
      }
    }
}

}  // namespace
