// jit::choose_kernel: the automatic pack_gqa and a backend's own tile for a launch, the choice the
// Python ops and `prewarm --model` share (generator/kernel_choice.cpp, BackendPolicy::launch_bm).
#include <gtest/gtest.h>

#include <limits>

#include "fa4jit/advanced.hpp"
#include "fa4jit/errors.hpp"

namespace {

jit::LaunchFacts facts(int group, int sq, int varlen_batch = 0, long long total_q = 0) {
  jit::LaunchFacts f;
  f.group = group;
  f.max_seqlen_q = sq;
  f.varlen_batch = varlen_batch;
  f.total_q = total_q;
  return f;
}

bool packs(int group, int sq, int varlen_batch = 0, long long total_q = 0) {
  jit::FA4Config c;
  c.mask = jit::Mask::causal();
  return jit::choose_kernel(c, facts(group, sq, varlen_batch, total_q)).pack_gqa;
}

jit::FA4Config bf16(int depth = 128, const char* arch = "sm_90a") {
  jit::FA4Config c;
  c.arch = arch;
  c.depth = depth;
  c.mask = jit::Mask::causal();
  return c;
}

int bm(const jit::FA4Config& c, const jit::LaunchFacts& f) { return jit::choose_kernel(c, f).BM; }

}  // namespace

// Short queries pack; a varlen batch packs when its query lengths are uneven (the longest at least
// 1.2x the mean: prefill batches and continuous-batching steps) or its mean is at most 64 queries;
// one prompt and a varlen batch of even lengths stay unpacked; MHA and a prime group above 64 never.
TEST(ChooseKernel, PacksDecodeRowsContinuousBatchingStepsAndUnevenBatches) {
  EXPECT_TRUE(packs(7, 1) && packs(4, 16));                                // decode, speculative
  EXPECT_TRUE(packs(4, 1, 48, 48));                                        // varlen decode
  EXPECT_FALSE(packs(4, 2048));                                            // one prompt
  EXPECT_TRUE(packs(4, 2048, 50, 48 + 2 * 2048));                          // 48 decode rows + 2 chunks (mean 83)
  EXPECT_TRUE(packs(4, 2048, 20, 16 + 4 * 2048));                          // 16 decode rows + 4 chunks (mean 410)
  EXPECT_TRUE(packs(4, 7000, 8, 16048) && packs(8, 7000, 8, 16048));       // 7000 beside a mean of 2006
  EXPECT_TRUE(packs(4, 2500, 5, 10000));                                   // 1.25x the mean
  EXPECT_FALSE(packs(4, 2200, 5, 10000));                                  // 1.1x
  EXPECT_FALSE(packs(4, 2048, 8, 8 * 2048) || packs(8, 512, 8, 8 * 512));  // even prefill, chunks
  EXPECT_TRUE(packs(8, 64, 32, 32 * 64));                                  // short chunks: 64 queries
  EXPECT_FALSE(packs(8, 128, 32, 32 * 128));
  EXPECT_FALSE(packs(1, 1));   // MHA
  EXPECT_FALSE(packs(67, 1));  // a prime above 64: no equal slices
  EXPECT_TRUE(packs(128, 1));  // two slices of 64
  jit::FA4Config c;
  jit::LaunchFacts f = facts(4, 2048);
  f.pack_gqa = true;  // the caller's choice wins, but MHA has nothing to pack
  const jit::FA4Config forced = jit::choose_kernel(c, f);
  EXPECT_TRUE(forced.pack_gqa);
  EXPECT_EQ(forced.group, 4);
  f = facts(4, 1);
  f.pack_gqa = false;
  EXPECT_FALSE(jit::choose_kernel(c, f).pack_gqa);
  f = facts(1, 1);
  f.pack_gqa = true;
  EXPECT_FALSE(jit::choose_kernel(c, f).pack_gqa);
}

// sm_90a's own tiles: a packed launch over more than 128 rows runs the prefill tile (BM 128; 192 at
// head dim 64), except a continuous-batching step (uneven, mean at most 512 queries), decode and
// speculative rows, FP8, head dim 192 (not measured; 256 takes the tile), V narrower than Q and
// groups above 64; an unpacked launch of a group that never packs (MHA), at most 64 queries or a
// continuous-batching step at head dim 128 without a window, runs the decode tile (BM 64); other archs, or none, keep
// their default (0), and so does an explicit BM.
TEST(ChooseKernel, Sm90aTilesForPackedPrefillAndUnpackedDecode) {
  const jit::FA4Config c = bf16();
  EXPECT_EQ(bm(c, facts(4, 7000, 8, 16048)), 128);  // uneven varlen prefill
  EXPECT_EQ(bm(c, facts(8, 64, 32, 2048)), 128);    // 32 chunks of 64 queries
  jit::LaunchFacts prompt = facts(4, 2048);
  prompt.pack_gqa = true;
  EXPECT_EQ(bm(c, prompt), 128);                           // one prompt, packed by the caller
  EXPECT_EQ(bm(c, facts(4, 2048, 50, 48 + 2 * 2048)), 0);  // a continuous-batching step
  EXPECT_EQ(bm(c, facts(8, 16)), 0);                       // speculative decode
  EXPECT_EQ(bm(c, facts(96, 7000, 8, 16048)), 0);          // a group above 64
  jit::FA4Config kv8 = c;
  kv8.kv_dtype = jit::DType::e4m3;
  EXPECT_EQ(bm(kv8, facts(4, 7000, 8, 16048)), 0);  // FP8 KV cache
  jit::FA4Config fp8 = c;
  fp8.dtype = jit::DType::e4m3;
  EXPECT_EQ(bm(fp8, facts(4, 7000, 8, 16048)), 0);
  EXPECT_EQ(bm(bf16(192), facts(4, 7000, 8, 16048)), 0);           // not measured there
  EXPECT_EQ(bm(bf16(256), facts(2, 7000, 8, 16048)), 128);         // Gemma 3 4B's varlen batch
  EXPECT_EQ(bm(bf16(256), facts(2, 2048, 50, 48 + 2 * 2048)), 0);  // its continuous-batching step
  EXPECT_EQ(bm(bf16(256), facts(2, 1)), 0);                        // its decode
  EXPECT_EQ(bm(bf16(96), facts(4, 7000, 8, 16048)), 128);
  EXPECT_EQ(bm(bf16(64), facts(8, 7000, 8, 16048)), 192);         // gpt-oss's varlen batch
  EXPECT_EQ(bm(bf16(64), facts(8, 2048, 50, 48 + 2 * 2048)), 0);  // its continuous-batching step
  EXPECT_EQ(bm(bf16(64), facts(8, 16)), 0);
  jit::FA4Config narrow = bf16(128);
  narrow.depth_v = 64;
  EXPECT_EQ(bm(narrow, facts(4, 7000, 8, 16048)), 0);

  EXPECT_EQ(bm(c, facts(1, 1)), 64);   // MHA decode
  EXPECT_EQ(bm(c, facts(1, 64)), 64);  // ... up to 64 queries
  EXPECT_EQ(bm(c, facts(1, 65)), 0);
  EXPECT_EQ(bm(c, facts(1, 2048, 50, 48 + 2 * 2048)), 64);        // MHA continuous-batching step (mean 83)
  EXPECT_EQ(bm(c, facts(1, 2048, 20, 16 + 4 * 2048)), 64);        // ... a mean of 410
  EXPECT_EQ(bm(c, facts(1, 7000, 8, 16048)), 0);                  // MHA uneven prefill batch (mean 2006)
  EXPECT_EQ(bm(c, facts(1, 2048, 8, 8 * 2048)), 0);               // MHA even chunks
  EXPECT_EQ(bm(bf16(96), facts(1, 2048, 50, 48 + 2 * 2048)), 0);  // not measured at d96
  jit::FA4Config window = c;
  window.mask = jit::Mask::sliding_window();
  jit::LaunchFacts banded = facts(1, 2048, 50, 48 + 2 * 2048);
  banded.window_keys = 2048;
  EXPECT_EQ(bm(window, banded), 0);  // under a window the decode rows' bands are no long poles
  window.depth = 96;
  EXPECT_EQ(bm(window, banded), 0);  // Phi-3's step (slower at BM 64)
  banded.max_seqlen_q = 1;
  banded.total_q = 48;
  banded.varlen_batch = 48;
  EXPECT_EQ(bm(window, banded), 64);   // its decode rows
  EXPECT_EQ(bm(c, facts(67, 1)), 64);  // a group no backend packs
  jit::LaunchFacts unpacked = facts(4, 1);
  unpacked.pack_gqa = false;
  EXPECT_EQ(bm(c, unpacked), 0);  // a packable group left unpacked keeps the default
  EXPECT_EQ(bm(bf16(64), facts(1, 1)), 0);

  for (const char* arch : {"sm_90", "sm_100a", "sm_80", ""}) {
    EXPECT_EQ(bm(bf16(128, arch), facts(4, 7000, 8, 16048)), 0) << arch;
    EXPECT_EQ(bm(bf16(128, arch), facts(1, 1)), 0) << arch;
  }
  jit::FA4Config fixed = c;
  fixed.BM = 64;
  EXPECT_EQ(bm(fixed, facts(4, 7000, 8, 16048)), 64);
  // A varlen max_seqlen_q above q's rows is a loose hint: 8 MHA decode rows keep the decode tile.
  EXPECT_EQ(bm(c, facts(1, std::numeric_limits<int>::max(), 8, 8)), 64);
  EXPECT_EQ(bm(c, facts(1, 65, 8, 8)), 64);
  EXPECT_EQ(bm(c, facts(1, 65, 8, 520)), 0);  // within q's rows: the caller's
}

// sm_90a under a small sliding window at head dim 64 (at most 512 keys per query, gpt-oss's 128):
// the 64-row tile for an unpacked launch of any length; a wider or one-sided window, another mask,
// head dim 128, a packed launch and other archs keep their choice.
TEST(ChooseKernel, Sm90aSmallWindowAtHeadDim64TakesTheDecodeTile) {
  jit::FA4Config w = bf16(64);
  w.mask = jit::Mask::sliding_window();
  const auto windowed = [](int group, int sq, int keys, int varlen_batch = 0, long long total_q = 0) {
    jit::LaunchFacts f = facts(group, sq, varlen_batch, total_q);
    f.window_keys = keys;
    return f;
  };
  EXPECT_EQ(bm(w, windowed(8, 16384, 128)), 64);  // gpt-oss: one prompt, 64/8 heads
  EXPECT_EQ(bm(w, windowed(2, 2048, 128)), 64);
  EXPECT_EQ(bm(w, windowed(1, 4096, 512)), 64);
  EXPECT_EQ(bm(w, windowed(8, 16384, 513)), 0);                      // wider: BM 192
  EXPECT_EQ(bm(w, windowed(8, 16384, 0)), 0);                        // one side unbounded
  EXPECT_TRUE(jit::choose_kernel(w, windowed(8, 1, 128)).pack_gqa);  // decode rows pack: their tile
  EXPECT_EQ(bm(w, windowed(8, 1, 128)), 0);
  // An uneven prefill batch runs the tile unpacked (three CTAs per SM, docs/PERF.md run 93), with a
  // score-mod too (the C API's choice does not know it); a continuous-batching step (a mean of at
  // most 512 queries) keeps the packed decode tile (BM 64, the default), a wider window the packed
  // prefill tile.
  EXPECT_FALSE(jit::choose_kernel(w, windowed(8, 7000, 128, 8, 16048)).pack_gqa);
  EXPECT_EQ(bm(w, windowed(8, 7000, 128, 8, 16048)), 64);
  EXPECT_TRUE(jit::choose_kernel(w, windowed(8, 2048, 128, 50, 4144)).pack_gqa);
  EXPECT_EQ(bm(w, windowed(8, 2048, 128, 50, 4144)), 0);
  jit::FA4Config capped = w;
  capped.score_mod = jit::ScoreMod::softcap();
  EXPECT_FALSE(jit::choose_kernel(capped, windowed(8, 7000, 128, 8, 16048)).pack_gqa);
  EXPECT_EQ(bm(capped, windowed(8, 7000, 128, 8, 16048)), 64);
  EXPECT_TRUE(jit::choose_kernel(w, windowed(8, 7000, 513, 8, 16048)).pack_gqa);
  EXPECT_EQ(bm(w, windowed(8, 7000, 513, 8, 16048)), 192);
  jit::FA4Config fixed = w;
  fixed.BM = 192;  // a caller's tile: the automatic packing as on any arch
  EXPECT_TRUE(jit::choose_kernel(fixed, windowed(8, 7000, 128, 8, 16048)).pack_gqa);
  EXPECT_EQ(bm(bf16(64), windowed(8, 16384, 128)), 0);  // causal: the window fields are not its
  jit::FA4Config w128 = w;
  w128.depth = 128;
  EXPECT_EQ(bm(w128, windowed(8, 16384, 128)), 0);
  for (const char* arch : {"sm_90", "sm_100a", "sm_80"}) {
    jit::FA4Config other = w;
    other.arch = arch;
    EXPECT_EQ(bm(other, windowed(8, 16384, 128)), 0) << arch;
    EXPECT_TRUE(jit::choose_kernel(other, windowed(8, 7000, 128, 8, 16048)).pack_gqa) << arch;
  }
  // The tile resolves, and walks persistently, three CTAs per SM, each claiming its tiles
  // (docs/PERF.md runs 89, 92 and 94).
  const jit::ResolvedConfig rc = jit::resolve(jit::choose_kernel(w, windowed(8, 16384, 128)));
  EXPECT_EQ(rc.config.BM, 64);
  EXPECT_EQ(rc.walk, jit::TileWalk::dynamic);
  EXPECT_EQ(rc.ctas_per_sm, 3);
}

// One prompt at head dim 256 under a window of at most 1024 keys (Gemma 3's) packs at sm_90a's
// prefill tile (docs/PERF.md run 98); a wider window, a varlen batch of even lengths, head dim 128,
// decode rows' own tiles and other archs keep the automatic rule.
TEST(ChooseKernel, Sm90aPacksOnePromptAtHeadDim256UnderANarrowWindow) {
  jit::FA4Config w = bf16(256);
  w.mask = jit::Mask::sliding_window();
  const auto windowed = [](int sq, int keys, int varlen_batch = 0, long long total_q = 0) {
    jit::LaunchFacts f = facts(2, sq, varlen_batch, total_q);
    f.window_keys = keys;
    return f;
  };
  for (int sq : {2048, 16384}) {
    const jit::FA4Config chosen = jit::choose_kernel(w, windowed(sq, 1024));
    EXPECT_TRUE(chosen.pack_gqa) << sq;
    EXPECT_EQ(chosen.group, 2);
    EXPECT_EQ(chosen.BM, 128);
    EXPECT_NO_THROW(jit::resolve(chosen));
  }
  EXPECT_FALSE(jit::choose_kernel(w, windowed(16384, 4096)).pack_gqa);          // Gemma 2's window: not measured
  EXPECT_FALSE(jit::choose_kernel(w, windowed(16384, 0)).pack_gqa);             // no window
  EXPECT_FALSE(jit::choose_kernel(w, windowed(2048, 1024, 4, 8192)).pack_gqa);  // an even varlen batch
  const jit::FA4Config decode = jit::choose_kernel(w, windowed(1, 1024));
  EXPECT_TRUE(decode.pack_gqa);
  EXPECT_EQ(decode.BM, 0);  // decode's own tile, the default
  jit::FA4Config w128 = w;
  w128.depth = 128;
  EXPECT_FALSE(jit::choose_kernel(w128, windowed(16384, 1024)).pack_gqa);
  jit::FA4Config fixed = w;
  fixed.BM = 128;  // a caller's tile: the automatic rule
  EXPECT_FALSE(jit::choose_kernel(fixed, windowed(16384, 1024)).pack_gqa);
  jit::FA4Config other = w;
  other.arch = "sm_100a";
  EXPECT_FALSE(jit::choose_kernel(other, windowed(16384, 1024)).pack_gqa);
}

// The chosen configs resolve: the tile is one sm_90a accepts for the packed or unpacked kernel.
TEST(ChooseKernel, ChosenTilesResolve) {
  for (int depth : {64, 96, 128})
    for (const jit::LaunchFacts& f : {facts(4, 7000, 8, 16048), facts(1, 1), facts(7, 1), facts(12, 3000, 4, 5000)}) {
      const jit::FA4Config chosen = jit::choose_kernel(bf16(depth), f);
      EXPECT_NO_THROW(jit::resolve(chosen)) << depth << " " << f.group << " " << f.max_seqlen_q;
    }
}

TEST(ChooseKernel, RefusesAGroupBelowOneAndNegativeLengths) {
  jit::LaunchFacts negative_window = facts(4, 1);
  negative_window.window_keys = -1;
  for (const jit::LaunchFacts& f : {facts(0, 1), facts(4, -1), facts(4, 1, -1), facts(4, 1, 2, -5), negative_window}) {
    try {
      jit::choose_kernel(bf16(), f);
      ADD_FAILURE() << "accepted group " << f.group;
    } catch (const jit::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("choose_kernel"), std::string::npos) << e.what();
    }
  }
}
