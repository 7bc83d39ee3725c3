// FA4Config: per-arch derivation, validation errors that name the field, JSON round trip.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "fa4jit/jit.hpp"
#include "generator/backends/backend.hpp"
#include "generator/combine.hpp"
#include "sm100a/abi.h"
#include "sm90a/abi.h"
#include "tests/support/tune.hpp"

namespace {

using jit::testing::tuned;

jit::FA4Config cfg_for(const std::string& arch, int depth = 128) {
  jit::FA4Config c;
  c.arch = arch;
  c.depth = depth;
  return c;
}

// Expects a ConfigError whose message names every one of `words`.
template <class F>
void expect_config_error(F&& f, std::initializer_list<const char*> words) {
  try {
    f();
    FAIL() << "no ConfigError";
  } catch (const jit::ConfigError& e) {
    const std::string msg = e.what();
    for (const char* w : words) EXPECT_NE(msg.find(w), std::string::npos) << "'" << w << "' missing from: " << msg;
  }
}

TEST(Config, DerivesPortableDefaults) {
  const auto r = jit::resolve(cfg_for("sm_80"));
  EXPECT_EQ(r.backend, jit::Backend::portable);
  EXPECT_EQ(r.config.BM, 128);
  EXPECT_EQ(r.config.BN, 64);
  EXPECT_EQ(r.padded_depth, 128);
  EXPECT_EQ(r.config.num_kv_stages, 2);
  EXPECT_EQ(*r.config.output_dtype, jit::DType::bf16);
  EXPECT_EQ(r.num_threads, 128);
  EXPECT_EQ(r.smem_bytes, 2 * (128 * 128 + 2 * 2 * 64 * 128));
  EXPECT_EQ(jit::resolve(cfg_for("sm_86", 64)).config.BN, 128);
}

// Head dims 192 and 256 on the portable backend: O and S stay in registers, (BM / 64) * (DpV / 8 +
// BN / 8) * 4 <= 192 floats per thread (templates/sm80/traits.cuh), so a V of 192 or 256 runs BM 64;
// BN halves to 32 where two stages do not fit (99 KiB on sm_86 / sm_120). Depth 192 with a V of 128
// (DeepSeek-V3 prefill) keeps BM 128 at BN 32 and a 128-wide V ring: smem 2*(BM*Dp + S*BN*(Dp + DpV)).
TEST(Config, DerivesPortableTilesForDeepHeads) {
  struct Want {
    const char* arch;
    int depth, depth_v, bm, bn;
  };
  for (const Want& w :
       {Want{"sm_80", 192, 0, 64, 64}, Want{"sm_80", 256, 0, 64, 64}, Want{"sm_80", 192, 128, 128, 32},
        Want{"sm_90", 192, 0, 64, 64}, Want{"sm_90", 256, 0, 64, 64}, Want{"sm_90", 192, 128, 128, 32},
        Want{"sm_86", 192, 0, 64, 32}, Want{"sm_86", 256, 0, 64, 32}, Want{"sm_120", 192, 128, 128, 32}}) {
    auto c = cfg_for(w.arch, w.depth);
    c.depth_v = w.depth_v;
    const auto r = jit::resolve(c);
    const std::string what = fmt::format("{} d{}/{}", w.arch, w.depth, w.depth_v);
    const int dpv = w.depth_v ? w.depth_v : w.depth;
    EXPECT_EQ(r.backend, jit::Backend::portable) << what;
    EXPECT_EQ(r.config.depth_v, w.depth_v) << what;
    EXPECT_EQ(r.padded_depth, w.depth) << what;
    EXPECT_EQ(r.padded_depth_v, dpv) << what;
    EXPECT_EQ(r.config.BM, w.bm) << what;
    EXPECT_EQ(r.config.BN, w.bn) << what;
    EXPECT_EQ(r.config.num_kv_stages, 2) << what;
    EXPECT_EQ(r.num_threads, 128) << what;
    EXPECT_EQ(r.smem_bytes, 2 * (w.bm * w.depth + 2 * w.bn * (w.depth + dpv))) << what;
    EXPECT_LE(w.bm / 64 * (dpv / 8 + w.bn / 8) * 4, 192) << what;
  }
  // depth_v equal to the depth is the plain config (one cache key).
  auto same = cfg_for("sm_80", 192);
  same.depth_v = 192;
  EXPECT_EQ(jit::resolve(same).config.depth_v, 0);
  EXPECT_EQ(jit::resolve(same).config.BM, 64);

  // A V of 64 at depth 192 and a V of 128 at depth 256 are not served; the refusals name depth_v.
  expect_config_error(
      [] {
        auto c = cfg_for("sm_80", 192);
        c.depth_v = 64;
        jit::resolve(c);
      },
      {"depth_v", "64", "depth 192", "128"});
  expect_config_error(
      [] {
        auto c = cfg_for("sm_86", 256);
        c.depth_v = 128;
        jit::resolve(c);
      },
      {"depth_v", "128", "depth_v = depth only"});
  expect_config_error(
      [] {
        auto c = cfg_for("sm_80", 192);
        c.depth_v = 128;
        c.kv_dtype = jit::DType::e4m3;
        jit::resolve(c);
      },
      {"depth_v", "kv_dtype e4m3"});
  // The FP8 KV cache stays at depths 64 and 128 here.
  for (int d : {192, 256})
    expect_config_error(
        [d] {
          auto c = cfg_for("sm_80", d);
          c.kv_dtype = jit::DType::e4m3;
          jit::resolve(c);
        },
        {"depth", fmt::format("{} with kv_dtype e4m3", d).c_str(), "64, 96 or 128", "sm_80"});
  // Accumulators beyond the register file are refused before anything compiles: BM 128 at depth
  // 256 (2 * (32 + 8) * 4 = 320 floats); over a 128-wide V at BM 128, BN 64 (192) is kept, BN 128 not.
  expect_config_error(
      [] {
        auto c = cfg_for("sm_90", 256);
        c.BM = 128;
        jit::resolve(c);
      },
      {"BM", "BN", "320 accumulator", "192"});
  auto v128 = cfg_for("sm_90", 192);
  v128.depth_v = 128;
  v128.BN = 64;
  EXPECT_EQ(jit::resolve(v128).smem_bytes, 2 * (128 * 192 + 2 * 64 * (192 + 128)));
  v128.BN = 128;
  expect_config_error([&] { jit::resolve(v128); }, {"BM", "BN", "depth 192 (depth_v 128)", "256 accumulator"});
  // The shared-memory refusal counts V's narrower stages: BN 128 at BM 64 takes 2 * (64 * 192 + 2 *
  // 128 * (192 + 128)) bytes, more than sm_80's 166912.
  v128.arch = "sm_80";
  v128.BM = 64;
  expect_config_error([&] { jit::resolve(v128); }, {"shared memory", "depth 192 (depth_v 128)", "188416", "166912"});
}

// Head dim 512 on the portable backend: a warp's O would be 256 floats a thread, so O is split over
// two warps per 16 rows (templates/sm80/abi.h), 8 warps at BM 64. Q alone is 64 KiB at BM 64: two
// stages of BN 32 fit 227 KiB (sm_90, sm_100), of BN 16 sm_80's 163 KiB; the 99 KiB parts run BM 32
// (2 row warps, 4 in all) and BN 16. Smem 2*(BM*512 + 2*BN*(512 + 512)).
TEST(Config, DerivesPortableTilesForHeadDim512) {
  struct Want {
    const char* arch;
    int bm, bn, threads;
  };
  for (const Want& w :
       {Want{"sm_80", 64, 16, 256}, Want{"sm_87", 64, 16, 256}, Want{"sm_86", 32, 16, 128}, Want{"sm_89", 32, 16, 128},
        Want{"sm_120", 32, 16, 128}, Want{"sm_90", 64, 32, 256}, Want{"sm_100", 64, 32, 256}})
    for (const jit::Mask& m : {jit::Mask::none(), jit::Mask::causal(), jit::Mask::sliding_window()}) {
      auto c = cfg_for(w.arch, 512);
      c.mask = m;
      const auto r = jit::resolve(c);
      const std::string what = fmt::format("{} d512 mask {}", w.arch, static_cast<int>(m.kind));
      EXPECT_EQ(r.backend, jit::Backend::portable) << what;
      EXPECT_EQ(r.padded_depth, 512) << what;
      EXPECT_EQ(r.padded_depth_v, 512) << what;
      EXPECT_EQ(r.config.BM, w.bm) << what;
      EXPECT_EQ(r.config.BN, w.bn) << what;
      EXPECT_EQ(r.config.num_kv_stages, 2) << what;
      EXPECT_EQ(r.num_threads, w.threads) << what;
      EXPECT_EQ(r.smem_bytes, 2 * (w.bm * 512 + 2 * w.bn * 1024)) << what;
    }
  // Packed GQA keeps the tile.
  auto packed = cfg_for("sm_86", 512);
  packed.group = 8;
  packed.pack_gqa = true;
  EXPECT_EQ(jit::resolve(packed).config.BM, 32);
  // Explicit tiles the kernel runs: sm_80's and the 99 KiB parts' on sm_90.
  for (const auto [bm, bn] : {std::pair{64, 16}, std::pair{32, 16}, std::pair{32, 32}}) {
    auto c = cfg_for("sm_90", 512);
    c.BM = bm;
    c.BN = bn;
    const auto r = jit::resolve(c);
    EXPECT_EQ(r.num_threads, bm == 64 ? 256 : 128) << bm << " " << bn;
    EXPECT_EQ(r.smem_bytes, 2 * (bm * 512 + 2 * bn * 1024)) << bm << " " << bn;
  }
  // Refusals name the field: BN 48 is no tile; BN 64 needs 2 * (64 * 512 + 2 * 64 * 1024) = 327680
  // bytes, more than sm_90's 232448, and BN 32 more than sm_80's 166912; BM 32 at sm_86 leaves no room
  // for BN 32; BM 128 would hold 2 * (32 + 2) * 4 = 272 accumulator floats (refused as a tile).
  expect_config_error(
      [] {
        auto c = cfg_for("sm_90", 512);
        c.BN = 48;
        jit::resolve(c);
      },
      {"BN", "48", "16, 32, 64, 128"});
  expect_config_error(
      [] {
        auto c = cfg_for("sm_90", 512);
        c.BN = 64;
        jit::resolve(c);
      },
      {"BN", "shared memory", "327680", "232448"});
  expect_config_error(
      [] {
        auto c = cfg_for("sm_80", 512);
        c.BN = 32;
        jit::resolve(c);
      },
      {"BN", "shared memory", "196608", "166912"});
  expect_config_error(
      [] {
        auto c = cfg_for("sm_86", 512);
        c.BN = 32;
        jit::resolve(c);
      },
      {"BN", "shared memory", "163840", "101376"});
  expect_config_error(
      [] {
        auto c = cfg_for("sm_90", 512);
        c.BM = 128;
        jit::resolve(c);
      },
      {"BM", "128", "32, 64"});
  // BM 32 and BN 16 are depth 512's tiles only (its O split; other depths keep 4 row warps).
  expect_config_error(
      [] {
        auto c = cfg_for("sm_86", 256);
        c.BM = 32;
        jit::resolve(c);
      },
      {"BM", "32", "64, 128"});
  expect_config_error(
      [] {
        auto c = cfg_for("sm_86", 256);
        c.BN = 16;
        jit::resolve(c);
      },
      {"BN", "16", "32, 64, 128"});
  // One K/V stage (which would fit BM 64 and BN 16 on sm_86) is no ring: refused naming the field
  // before anything compiles.
  expect_config_error(
      [] {
        auto c = cfg_for("sm_86", 512);
        c.BM = 64;
        c.num_kv_stages = 1;
        jit::resolve(c);
      },
      {"num_kv_stages", "1", "allowed: 2"});
  // No FP8 KV cache at 512 (its staging stays at depths 64 and 128).
  expect_config_error(
      [] {
        auto c = cfg_for("sm_90", 512);
        c.kv_dtype = jit::DType::e4m3;
        jit::resolve(c);
      },
      {"depth", "512 with kv_dtype e4m3", "64, 96 or 128"});
  // The split-KV combine of a d512 launch: a spec (arch, 512) that the cache's JSON reader takes back.
  const jit::detail::CombineSpec spec = jit::detail::combine_spec(jit::resolve(cfg_for("sm_86", 512)));
  EXPECT_EQ(spec.depth, 512);
  EXPECT_EQ(jit::detail::combine_spec_from_json(jit::detail::to_json(spec)), spec);
}

TEST(Config, DerivesHopperDefaults) {
  const auto r = jit::resolve(cfg_for("sm_90a"));
  EXPECT_EQ(r.backend, jit::Backend::hopper);
  EXPECT_EQ(r.config.BM, 128);
  EXPECT_EQ(r.config.BN, 128);
  EXPECT_EQ(r.num_threads, 384);
  // persistent: Q, O, 2 K/V stages; barriers (512) and the page ring (2 x 128 page numbers)
  EXPECT_EQ(r.smem_bytes, 2 * (2 * 128 * 128 + 2 * 2 * 128 * 128) + 512 + 2 * 128 * 4);
  EXPECT_EQ(jit::resolve(cfg_for("sm_90")).backend, jit::Backend::portable);
  const auto d64 = jit::resolve(cfg_for("sm_90a", 64));  // FA3's 192-row tiles: 3 consumer warpgroups
  EXPECT_EQ(d64.config.BM, 192);
  EXPECT_EQ(d64.num_threads, 512);
}

// sm90a's host and kernel share templates/sm90a/abi.h: every resolved sm90a config (16-bit at each
// depth and walk, FP8, an FP8 KV cache) launches with the shared memory abi::smem_bytes gives its
// family (with the own-O region exactly where abi::own_o takes it), abi::num_threads, a legal kBN
// and setmaxnreg budgets that fit its launch registers (the kernel static_asserts the same).
TEST(Config, HopperBudgetsAreTheKernelAbi) {
  namespace abi = fa4::sm90a::abi;
  constexpr int kMaxSmem = 232448;  // sm_90a: 227 KiB
  struct Case {
    int depth;
    jit::DType dtype;
    bool kv_fp8;
    bool causal;
    bool pack;
    const char* tune;
    int depth_v = 0;
  };
  std::vector<Case> cases;
  for (int d : {64, 96, 128, 192, 256})
    for (bool causal : {false, true})
      for (const char* tune : {"persistent=0", "persistent=1", "persistent=2", "persistent=3"})
        cases.push_back({d, jit::DType::bf16, false, causal, false, tune});
  cases.push_back({128, jit::DType::bf16, false, true, true, ""});
  // depth 192 with a V of 128 (DeepSeek-V3 prefill): its V ring and own-O region are 128 wide.
  for (const char* tune : {"persistent=0", "persistent=1", "persistent=2", "persistent=3"})
    for (bool causal : {false, true}) cases.push_back({192, jit::DType::bf16, false, causal, false, tune, 128});
  // MLA's absorbed decode (576 / 512, packed): no V ring (V is K's prefix), O over two warpgroups.
  for (bool causal : {false, true}) cases.push_back({576, jit::DType::bf16, false, causal, true, "", 512});
  // ... and over an e4m3 latent cache: the e4m3 K ring only (no V ring of either width).
  for (bool causal : {false, true}) cases.push_back({576, jit::DType::bf16, true, causal, true, "", 512});
  // Head dim 512: O over two warpgroups, K and V rings of BN 32.
  for (bool causal : {false, true})
    for (bool pack : {false, true}) cases.push_back({512, jit::DType::bf16, false, causal, pack, ""});
  for (int d : {64, 128}) cases.push_back({d, jit::DType::e4m3, false, false, false, ""});
  cases.push_back({128, jit::DType::bf16, true, false, false, ""});
  cases.push_back({128, jit::DType::bf16, true, true, true, ""});
  for (const Case& k : cases) {
    jit::FA4Config c = cfg_for("sm_90a", k.depth);
    c.depth_v = k.depth_v;
    c.dtype = k.dtype;
    if (k.kv_fp8) c.kv_dtype = jit::DType::e4m3;
    if (k.causal) c.mask = jit::Mask::causal();
    if (k.pack) {
      c.num_q_heads = 32;
      c.group = 8;
      c.pack_gqa = true;
    }
    const std::string what = fmt::format("d{}/{} {} kv_fp8 {} causal {} pack {} [{}]", k.depth, k.depth_v,
                                         jit::to_string(k.dtype), k.kv_fp8, k.causal, k.pack, k.tune);
    const jit::ResolvedConfig r = jit::resolve(c, tuned(k.tune));
    const abi::Family f = abi::family_of(k.dtype == jit::DType::e4m3, k.kv_fp8);
    const int bm = r.config.BM, bn = r.config.BN, dp = r.padded_depth, stages = r.config.num_kv_stages;
    const int dpv = r.padded_depth_v;
    EXPECT_EQ(dpv, k.depth_v ? k.depth_v : dp) << what;
    const bool own_o = abi::own_o(f, r.tuning.persistent != 0, bm, bn, dp, dpv, stages, kMaxSmem);
    EXPECT_EQ(r.smem_bytes, abi::smem_bytes(f, bm, bn, dp, dpv, stages, r.tuning.persistent != 0, own_o)) << what;
    EXPECT_EQ(own_o, abi::own_o(f, r.tuning.persistent != 0, bm, bn, dp, dpv, stages, r.smem_bytes)) << what;
    EXPECT_EQ(r.num_threads, abi::num_threads(bm, dpv)) << what;
    EXPECT_TRUE(abi::bn_legal(f, bn, bm, dp)) << what;
    EXPECT_TRUE(abi::budgets_fit(f, bm, r.ctas_per_sm, dp, dpv, bn, r.tuning.persistent != 0)) << what;
  }
  // The persistent 16-bit d128 kernel stages O in its own region; d256's does not fit one.
  const jit::ResolvedConfig d128 = jit::resolve(cfg_for("sm_90a", 128), tuned("persistent=1"));
  EXPECT_EQ(d128.smem_bytes, abi::smem_bytes(abi::Family::k16, 128, 128, 128, 128, 2, true, true));
  const jit::ResolvedConfig d256 = jit::resolve(cfg_for("sm_90a", 256), tuned("persistent=1"));
  EXPECT_EQ(d256.smem_bytes, abi::smem_bytes(abi::Family::k16, 128, d256.config.BN, 256, 256, 2, true, false));
  // Kernels that gather pages keep two tiles of page numbers behind the barriers (abi.h
  // page_ring_bytes): the grid walk at d128 (BN 128) has a 512 + 2 x 128 x 4 byte tail; packed
  // decode (BN 64) keeps the 1024 bytes it had; d256's persistent walk (BN 80) 512 + 2 x 80 x 4.
  const jit::ResolvedConfig grid = jit::resolve(cfg_for("sm_90a", 128), tuned("persistent=0"));
  EXPECT_EQ(grid.smem_bytes, 128 * 128 * 2 + 2 * 2 * 128 * 128 * 2 + 512 + 1024);
  jit::FA4Config decode = cfg_for("sm_90a", 128);
  decode.num_q_heads = 32;
  decode.group = 8;
  decode.pack_gqa = true;
  EXPECT_EQ(jit::resolve(decode).smem_bytes, 64 * 128 * 2 + 2 * 2 * 64 * 128 * 2 + 1024);
  ASSERT_EQ(d256.config.BN, 80);
  EXPECT_EQ(d256.smem_bytes, 128 * 256 * 2 + 2 * 2 * 80 * 256 * 2 + 512 + 2 * 80 * 4);
  // MLA: Q and two 576-wide K stages (64 x 576 x 2 bytes each), no V ring, the shared P ([64][64]
  // 16-bit, 64 corrections and 64 1 / sums); a producer and two consumers that split O.
  jit::FA4Config mla = cfg_for("sm_90a", 576);
  mla.depth_v = 512;
  mla.group = 16;
  mla.pack_gqa = true;
  const jit::ResolvedConfig m = jit::resolve(mla);
  EXPECT_EQ(m.smem_bytes, 3 * 64 * 576 * 2 + 64 * 64 * 2 + 4 * 64 * 4 + 1024);
  EXPECT_EQ(m.num_threads, 384);
  EXPECT_EQ(m.config.BM, 64);
  EXPECT_EQ(m.config.BN, 64);
  EXPECT_TRUE(m.v_in_k);  // the launch passes v as k's first 512 columns
  EXPECT_EQ(m.tuning.intra_wg_overlap, 0);
  EXPECT_EQ(m.walk, jit::TileWalk::grid);
  // Alternating S by default where it measured faster (sm90a.cpp default_tuning): head dim 512
  // unpacked, under a built-in mask; not MLA's latent, packed d512 decode or a snippet mask.
  EXPECT_EQ(m.tuning.alternate_s, 0);
  jit::FA4Config h512 = cfg_for("sm_90a", 512);
  EXPECT_EQ(jit::resolve(h512).tuning.alternate_s, 1);
  h512.mask = jit::Mask::custom("return kv_idx <= q_idx;");
  EXPECT_EQ(jit::resolve(h512).tuning.alternate_s, 0);
  h512.mask = jit::Mask::causal();
  h512.group = 4;
  h512.pack_gqa = true;
  EXPECT_EQ(jit::resolve(h512).tuning.alternate_s, 0);
  EXPECT_EQ(jit::resolve(cfg_for("sm_90a", 256)).tuning.alternate_s, 0);
  // K stages in parts (Tuning::k_parts, shape.cuh kKParts): MLA's 16-bit latent under one S
  // warpgroup, 1, 3 or 9 of its nine 64-column blocks; any other value or kernel is refused by name.
  // Derived: 3 (PERF.md run 111), 1 where the warpgroups alternate S or the cache is e4m3.
  EXPECT_EQ(m.tuning.k_parts, 3);
  EXPECT_EQ(jit::resolve(mla, tuned("alternate_s=1")).tuning.k_parts, 1);
  EXPECT_EQ(jit::resolve(mla, tuned("k_parts=9")).tuning.k_parts, 9);
  EXPECT_EQ(jit::resolve(mla, tuned("k_parts=1")).smem_bytes, m.smem_bytes);  // the barriers' tail holds the parts
  EXPECT_EQ(jit::resolve(cfg_for("sm_90a", 128)).tuning.k_parts, 1);
  for (const char* bad : {"k_parts=2", "k_parts=4"})
    expect_config_error([&] { jit::resolve(mla, tuned(bad)); }, {bad, "1, 3 or 9 parts", "depth 576"});
  expect_config_error([&] { jit::resolve(mla, tuned("k_parts=3,alternate_s=1")); }, {"k_parts=3", "alternate_s=1"});
  expect_config_error([&] { jit::resolve(cfg_for("sm_90a", 512), tuned("k_parts=3")); }, {"k_parts=3", "depth 512"});
  jit::FA4Config mla_e4m3 = mla;
  mla_e4m3.kv_dtype = jit::DType::e4m3;
  expect_config_error([&] { jit::resolve(mla_e4m3, tuned("k_parts=9")); }, {"k_parts=9", "an e4m3 cache"});
  EXPECT_EQ(jit::resolve(mla_e4m3).tuning.k_parts, 1);
  EXPECT_FALSE(jit::resolve(cfg_for("sm_90a", 128)).v_in_k);
  // Over an e4m3 latent cache: 576 stays 576 (64-byte e4m3 rows, fa4::swizzle_row_bytes), BN 32,
  // the 72 KiB Q tile, two 16-bit K stages and four e4m3 ones (32 x 576 bytes: abi.h
  // k_load_stages), the shared P (one SW128 block, half used at 32 keys). Narrower V heads stay
  // 16-bit, and 576 needs its 512.
  jit::FA4Config mla8 = mla;
  mla8.kv_dtype = jit::DType::e4m3;
  const jit::ResolvedConfig m8 = jit::resolve(mla8);
  EXPECT_EQ(m8.padded_depth, 576);
  EXPECT_TRUE(m8.v_in_k);
  EXPECT_EQ(m8.config.BN, 32);
  EXPECT_EQ(m8.num_threads, 384);
  EXPECT_EQ(m8.smem_bytes, 64 * 576 * 2 + 2 * 32 * 576 * 2 + 4 * 32 * 576 + 64 * 128 + 4 * 64 * 4 + 1024);
  mla8.num_kv_stages = 3;  // three 16-bit and six e4m3 stages: 282 KiB
  expect_config_error([&] { jit::resolve(mla8); }, {"num_kv_stages"});
  jit::FA4Config prefill8 = cfg_for("sm_90a", 192);
  prefill8.depth_v = 128;
  prefill8.kv_dtype = jit::DType::e4m3;
  expect_config_error([&] { jit::resolve(prefill8); }, {"depth_v", "128 with kv_dtype e4m3"});
  jit::FA4Config wide8 = cfg_for("sm_90a", 576);
  wide8.kv_dtype = jit::DType::e4m3;
  expect_config_error([&] { jit::resolve(wide8); }, {"depth"});
  // The grid walk only (the partner warpgroup follows one tile), and only sm_90a serves depth 576.
  expect_config_error([&] { jit::resolve(mla, tuned("persistent=2")); }, {"persistent=2"});
  for (const char* arch : {"sm_80", "sm_100a"}) {
    jit::FA4Config other = mla;
    other.arch = arch;
    expect_config_error([&] { jit::resolve(other); }, {"depth"});
  }
  // Head dim 512: Q (64 KiB), two K and two V stages of 32 keys (32 KiB each), the shared P (one
  // SW128 block of [64][64] 16-bit, half used at 32 keys; corrections, 1 / sums); BN 32 only.
  const jit::ResolvedConfig d512 = jit::resolve(cfg_for("sm_90a", 512));
  EXPECT_EQ(d512.smem_bytes, 64 * 512 * 2 + 2 * 2 * 32 * 512 * 2 + 64 * 128 + 4 * 64 * 4 + 1024);
  EXPECT_EQ(d512.num_threads, 384);
  EXPECT_EQ(d512.config.BM, 64);
  EXPECT_EQ(d512.config.BN, 32);
  EXPECT_EQ(d512.config.num_kv_stages, 2);
  EXPECT_FALSE(d512.v_in_k);
  EXPECT_EQ(d512.walk, jit::TileWalk::persistent);  // alternating S, plain causal: persistent CTAs
  jit::FA4Config wide_bn = cfg_for("sm_90a", 512);
  wide_bn.BN = 64;
  expect_config_error([&] { jit::resolve(wide_bn); }, {"BN", "64", "32"});
  jit::FA4Config three = cfg_for("sm_90a", 512);
  three.num_kv_stages = 3;
  expect_config_error([&] { jit::resolve(three); }, {"num_kv_stages"});
  // The persistent walk with alternating S only (its turns carry from unit to unit); not stream-K.
  EXPECT_EQ(jit::resolve(cfg_for("sm_90a", 512), tuned("persistent=0")).walk, jit::TileWalk::grid);
  expect_config_error([&] { jit::resolve(cfg_for("sm_90a", 512), tuned("alternate_s=0")); },
                      {"persistent=1", "alternate_s=1"});
  expect_config_error([&] { jit::resolve(cfg_for("sm_90a", 512), tuned("persistent=2")); }, {"persistent=2"});
  jit::FA4Config fp8 = cfg_for("sm_90a", 512);
  fp8.dtype = jit::DType::e4m3;
  expect_config_error([&] { jit::resolve(fp8); }, {"depth"});
  jit::FA4Config kv_fp8 = cfg_for("sm_90a", 512);
  kv_fp8.kv_dtype = jit::DType::e4m3;
  expect_config_error([&] { jit::resolve(kv_fp8); }, {"depth"});
  jit::FA4Config blackwell = cfg_for("sm_100a", 512);
  expect_config_error([&] { jit::resolve(blackwell); }, {"depth"});
}

// Deeper heads on sm90a: BN from the consumers' registers (O Dp/2 + S BN/2 + P BN/4 floats) and from
// shared memory for Q + 2 K/V stages; depth 96 runs padded to 128 (the d128 tiles).
TEST(Config, DerivesHopperTilesForDeepHeads) {
  struct Want {
    int depth, padded, bn, bn_heavy, smem;
  };
  // (d96 is persistent by default: its smem holds an O region too. Each ends with the barriers (512)
  // and the page ring, 2 x BN page numbers: d192 and d256 run the grid walk, which gathers too.)
  for (const Want& w : {Want{96, 128, 128, 128, 2 * (2 * 128 * 128 + 4 * 128 * 128) + 512 + 8 * 128},
                        Want{192, 192, 112, 96, 2 * (128 * 192 + 4 * 112 * 192) + 512 + 8 * 112},
                        Want{256, 256, 80, 64, 2 * (128 * 256 + 4 * 80 * 256) + 512 + 8 * 80}}) {
    const auto r = jit::resolve(cfg_for("sm_90a", w.depth));
    EXPECT_EQ(r.padded_depth, w.padded) << w.depth;
    EXPECT_EQ(r.config.BM, 128) << w.depth;
    EXPECT_EQ(r.config.BN, w.bn) << w.depth;
    EXPECT_EQ(r.config.num_kv_stages, 2) << w.depth;
    EXPECT_EQ(r.num_threads, 384) << w.depth;
    EXPECT_EQ(r.smem_bytes, w.smem) << w.depth;
    EXPECT_LE(r.smem_bytes, 232448) << w.depth;
    auto causal = cfg_for("sm_90a", w.depth);
    causal.mask = jit::Mask::causal();
    EXPECT_EQ(jit::resolve(causal).config.BN, w.bn) << w.depth;
    // A sliding window or ALiBi keeps more registers live in the softmax: a smaller default BN.
    auto heavy = cfg_for("sm_90a", w.depth);
    heavy.mask = jit::Mask::sliding_window();
    EXPECT_EQ(jit::resolve(heavy).config.BN, w.bn_heavy) << w.depth;
    heavy = causal;
    heavy.score_mod = jit::ScoreMod::alibi();
    EXPECT_EQ(jit::resolve(heavy).config.BN, w.bn_heavy) << w.depth;
    // Packed-GQA decode: BM 64 / BN 64, two CTAs per SM while both fit in shared memory.
    auto decode = causal;
    decode.group = 8;
    decode.pack_gqa = true;
    const auto d = jit::resolve(decode);
    EXPECT_EQ(d.config.BM, 64) << w.depth;
    EXPECT_EQ(d.config.BN, 64) << w.depth;
    EXPECT_EQ(d.num_threads, 256) << w.depth;
    EXPECT_EQ(d.tuning.persistent, 0) << w.depth;
    EXPECT_EQ(d.ctas_per_sm, w.padded <= 128 ? 2 : 1) << w.depth;
    EXPECT_LE(d.ctas_per_sm * (d.smem_bytes + 1024), 232448 + 1024) << w.depth;
    // Unpacked decode (MHA): the same 64-row tile where the head fits it (padded depth <= 128).
    auto mha = causal;
    mha.BM = 64;
    if (w.padded <= 128) {
      const auto m = jit::resolve(mha);
      EXPECT_EQ(m.config.BN, 64) << w.depth;
      EXPECT_EQ(m.num_threads, 256) << w.depth;
      EXPECT_EQ(m.tuning.persistent, 0) << w.depth;
      EXPECT_EQ(m.ctas_per_sm, 2) << w.depth;
    } else {
      expect_config_error([&] { jit::resolve(mha); }, {"BM", "64"});
    }
    {  // stream-K (opt-in): one CTA per SM by construction
      const auto sk = jit::resolve(decode, tuned("persistent=2"));
      EXPECT_EQ(sk.tuning.persistent, 2) << w.depth;
      EXPECT_EQ(sk.ctas_per_sm, 1) << w.depth;
      // + its own O region (at BN 64 the page ring leaves the tail at 1024 bytes, gathering or not)
      EXPECT_EQ(sk.smem_bytes, d.smem_bytes + 2 * 64 * w.padded) << w.depth;
    }
  }
  {
    const jit::ResolveOptions lpt =
        tuned("persistent=1");  // the LPT walker visits q heads: packed kernels take stream-K
    auto decode = cfg_for("sm_90a", 128);
    decode.group = 4;
    decode.pack_gqa = true;
    EXPECT_EQ(jit::resolve(decode, lpt).tuning.persistent, 2);
    EXPECT_EQ(jit::resolve(cfg_for("sm_90a", 128), lpt).tuning.persistent, 1);
    // Persistent CTAs stage O in a region of their own (SmemLayout::kOwnO) where it fits in 227 KB.
    EXPECT_EQ(jit::resolve(cfg_for("sm_90a", 128), lpt).smem_bytes,
              2 * (2 * 128 * 128 + 2 * 2 * 128 * 128) + 512 + 8 * 128);
    EXPECT_EQ(jit::resolve(cfg_for("sm_90a", 64), lpt).smem_bytes,
              2 * (2 * 192 * 64 + 2 * 2 * 128 * 64) + 512 + 8 * 128);
    EXPECT_EQ(jit::resolve(cfg_for("sm_90a", 256), lpt).smem_bytes,
              2 * (128 * 256 + 4 * 80 * 256) + 512 + 8 * 80);  // no room for O's own region
  }
  {
    // Defaults: sm90a unmasked and causal kernels without a score-mod at depth <= 128 are
    // persistent (DeepSeek's depth 192 with V 128 dynamic), and causal ones at depths 192 and 256, and 16-bit depth-128
    // ones with a sliding window or ALiBi; packed-GQA decode, unmasked deep heads, other masks and score-mods keep the
    // per-tile grid; the other backends have one scheduler.
    auto with_mask = [](int depth, jit::Mask m) {
      auto c = cfg_for("sm_90a", depth);
      c.mask = m;
      return c;
    };
    for (int depth : {64, 96, 128})
      for (const jit::Mask& m : {jit::Mask::none(), jit::Mask::causal()})
        EXPECT_EQ(jit::resolve(with_mask(depth, m)).tuning.persistent, 1) << depth;
    for (int depth : {192, 256}) {
      EXPECT_EQ(jit::resolve(with_mask(depth, jit::Mask::causal())).tuning.persistent, 1) << depth;
      EXPECT_EQ(jit::resolve(with_mask(depth, jit::Mask::none())).tuning.persistent, 0) << depth;
    }
    {
      // DeepSeek-V3 prefill (depth 192, V 128) causal claims its tiles (the dynamic walk, 3): its
      // varlen batches ran 4-17% faster so; unmasked, a score-mod or FP8 keep their walks.
      auto latent = with_mask(192, jit::Mask::causal());
      latent.depth_v = 128;
      EXPECT_EQ(jit::resolve(latent).tuning.persistent, 3);
      EXPECT_EQ(jit::resolve(latent).walk, jit::TileWalk::dynamic);
      EXPECT_EQ(jit::resolve(latent, tuned("persistent=1")).tuning.persistent, 1);
      latent.score_mod = jit::ScoreMod::softcap();
      EXPECT_EQ(jit::resolve(latent).tuning.persistent, 0);
      latent.score_mod = jit::ScoreMod::identity();
      latent.mask = jit::Mask::none();
      EXPECT_EQ(jit::resolve(latent).tuning.persistent, 0);
    }
    // A sliding window at depths 64, 96 (run 88) and 128; at 64 and 96 not with a score-mod (not
    // measured). Depth 96 (Phi-3) claims its tiles (run 95: its varlen batch 4-6% faster); with a
    // score-mod it keeps the grid.
    for (int depth : {64, 128})
      EXPECT_EQ(jit::resolve(with_mask(depth, jit::Mask::sliding_window())).tuning.persistent, 1) << depth;
    {
      auto phi3 = with_mask(96, jit::Mask::sliding_window());
      EXPECT_EQ(jit::resolve(phi3).walk, jit::TileWalk::dynamic);
      EXPECT_EQ(jit::resolve(phi3, tuned("persistent=1")).walk, jit::TileWalk::persistent);
      phi3.score_mod = jit::ScoreMod::softcap();
      EXPECT_EQ(jit::resolve(phi3).tuning.persistent, 0);
    }
    {
      // The 64-row tile walks persistently at depth 64 under a window (run 89), three CTAs per SM
      // (run 92), each claiming its tiles (the dynamic walk, run 94: its producer warp gathers alone)
      // with the own-O region beside it; causal (decode's) keeps the grid. Packed, or with a
      // score-mod, the same tile runs two CTAs per SM, whose four gathering producer warps refuse
      // the dynamic walk.
      auto tile = with_mask(64, jit::Mask::sliding_window());
      tile.BM = 64;
      const jit::ResolvedConfig rc = jit::resolve(tile);
      EXPECT_EQ(rc.tuning.persistent, 3);
      EXPECT_EQ(rc.walk, jit::TileWalk::dynamic);
      EXPECT_EQ(rc.ctas_per_sm, 3);
      EXPECT_EQ(jit::resolve(tile, tuned("persistent=1")).walk, jit::TileWalk::persistent);
      EXPECT_LE(3 * (rc.smem_bytes + 1024), 227 * 1024 + 1024) << rc.smem_bytes;
      namespace abi = fa4::sm90a::abi;  // the split fills the launch's registers (abi.h budgets_fit)
      EXPECT_EQ(abi::producer_regs(abi::Family::k16, 1, 3, 64, 64, true) +
                    abi::consumer_regs(abi::Family::k16, 1, 3, 64, 64, true),
                abi::launch_regs(256, 3) * 2);
      auto packed = tile;
      packed.num_q_heads = 64;
      packed.group = 8;
      packed.pack_gqa = true;
      EXPECT_EQ(jit::resolve(packed).ctas_per_sm, 2);
      auto scored = tile;
      scored.score_mod = jit::ScoreMod::softcap();
      EXPECT_EQ(jit::resolve(scored).ctas_per_sm, 2);
      EXPECT_THROW(jit::resolve(scored, tuned("persistent=3")), jit::ConfigError);
      tile.mask = jit::Mask::causal();
      EXPECT_EQ(jit::resolve(tile).tuning.persistent, 0);
      tile = with_mask(128, jit::Mask::sliding_window());
      tile.BM = 64;
      EXPECT_EQ(jit::resolve(tile).tuning.persistent, 0);
    }
    for (int depth : {64, 96}) {
      auto scored = with_mask(depth, jit::Mask::sliding_window());
      scored.score_mod = jit::ScoreMod::alibi();
      EXPECT_EQ(jit::resolve(scored).tuning.persistent, 0) << depth;
      scored.score_mod = jit::ScoreMod::softcap();
      EXPECT_EQ(jit::resolve(scored).tuning.persistent, 0) << depth;
    }
    for (const jit::Mask& m : {jit::Mask::none(), jit::Mask::causal(), jit::Mask::sliding_window()}) {
      auto alibi = with_mask(128, m);
      alibi.score_mod = jit::ScoreMod::alibi();
      EXPECT_EQ(jit::resolve(alibi).tuning.persistent, 1);
      alibi.dtype = jit::DType::e4m3;  // FP8's walks were measured without ALiBi or a window
      EXPECT_EQ(jit::resolve(alibi).tuning.persistent, 0);
    }
    auto softcap = with_mask(128, jit::Mask::causal());
    softcap.score_mod = jit::ScoreMod::softcap();
    EXPECT_EQ(jit::resolve(softcap).tuning.persistent, 0);
    auto decode = with_mask(128, jit::Mask::causal());
    decode.group = 4;
    decode.pack_gqa = true;
    EXPECT_EQ(jit::resolve(decode).tuning.persistent, 0);
    auto other = with_mask(128, jit::Mask::causal());
    for (const char* arch : {"sm_100a", "sm_80"}) {
      other.arch = arch;
      EXPECT_EQ(jit::resolve(other).tuning.persistent, 0) << arch;
    }
    EXPECT_EQ(jit::resolve(with_mask(128, jit::Mask::causal()), tuned("persistent=0")).tuning.persistent, 0);
  }
  {
    // The cross-tile overlap and its short-keys cubin are gone (docs/PERF.md run 53): their tuning
    // names are refused, naming the item, before anything is compiled.
    for (const char* tune : {"cross_tile=1", "short_keys=2048"}) {
      try {
        jit::parse_tune(tune, "FA4JIT_TUNE");
        ADD_FAILURE() << tune << " parsed";
      } catch (const jit::ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("FA4JIT_TUNE: unknown name"), std::string::npos) << e.what();
      }
    }
  }
  { EXPECT_THROW(jit::resolve(cfg_for("sm_90a", 128), tuned("persistent=4")), jit::ConfigError); }

  // Depths 64 and 128 keep their tiles.
  EXPECT_EQ(jit::resolve(cfg_for("sm_90a", 64)).config.BN, 128);
  EXPECT_EQ(jit::resolve(cfg_for("sm_90a", 128)).config.BN, 128);
  auto d64 = cfg_for("sm_90a", 64);
  d64.mask = jit::Mask::sliding_window();
  EXPECT_EQ(jit::resolve(d64).config.BN, 128);
  EXPECT_EQ(jit::resolve(d64).config.BM, 192);
}

TEST(Config, HopperDeepHeadRefusalsNameTheField) {
  // BN 96 at depth 256: neither the registers nor 2 stages of shared memory allow it.
  expect_config_error(
      [] {
        auto c = cfg_for("sm_90a", 256);
        c.BN = 96;
        jit::resolve(c);
      },
      {"BN", "96", "depth 256", "allowed: 64, 80"});
  expect_config_error(
      [] {
        auto c = cfg_for("sm_90a", 192);
        c.BN = 128;
        jit::resolve(c);
      },
      {"BN", "128", "depth 192", "allowed: 64, 80, 96, 112"});
  expect_config_error(
      [] {
        auto c = cfg_for("sm_90a", 96);
        c.BN = 192;
        jit::resolve(c);
      },
      {"BN", "192", "depth 96 (padded 128)"});
  // 3 stages of BN 80 at depth 256 do not fit 227 KiB.
  expect_config_error(
      [] {
        auto c = cfg_for("sm_90a", 256);
        c.num_kv_stages = 3;
        jit::resolve(c);
      },
      {"num_kv_stages", "3", "232448"});
  // BM 192 (three consumer warpgroups at 160 registers) stays a depth-64 tile.
  expect_config_error(
      [] {
        auto c = cfg_for("sm_90a", 192);
        c.BM = 192;
        jit::resolve(c);
      },
      {"BM", "192", "128"});
  // Padded depth is derived: depth 96 (Phi-3) runs at 128 on every backend.
  for (const char* arch : {"sm_90a", "sm_80", "sm_90", "sm_120", "sm_100a"})
    EXPECT_EQ(jit::resolve(cfg_for(arch, 96)).padded_depth, 128) << arch;
  expect_config_error([] { jit::resolve(cfg_for("sm_90a", 160)); }, {"depth", "160", "64, 96, 128, 192, 256"});
  expect_config_error([] { jit::resolve(cfg_for("sm_80", 80)); }, {"depth", "80", "sm80", "64, 96, 128"});
  expect_config_error([] { jit::resolve(cfg_for("sm_100a", 256)); }, {"depth", "256", "sm100a"});
  // Explicit smaller tiles are kept.
  auto c = cfg_for("sm_90a", 192);
  c.BN = 64;
  c.num_kv_stages = 3;
  const auto r = jit::resolve(c);
  EXPECT_EQ(r.config.BN, 64);
  EXPECT_EQ(r.smem_bytes, 2 * (128 * 192 + 2 * 3 * 64 * 192) + 1024);
}

// The seeds' FA4Config budgets: 2*BN + 2*Dp <= 512 TMEM columns, stages from 227 KiB of smem.
TEST(Config, DerivesBlackwellDefaultsFromBudgets) {
  const auto r128 = jit::resolve(cfg_for("sm_100a", 128));
  EXPECT_EQ(r128.backend, jit::Backend::blackwell);
  EXPECT_EQ(r128.config.BM, 256);
  EXPECT_EQ(r128.config.BN, 128);
  EXPECT_EQ(r128.config.num_qk_stages, 2);
  EXPECT_EQ(r128.config.BK0, 64);
  EXPECT_EQ(r128.config.num_kv_stages, 2);
  EXPECT_EQ(r128.num_threads, 512);
  EXPECT_LE(r128.smem_bytes, 232448);
  const auto r64 = jit::resolve(cfg_for("sm_100a", 64));
  EXPECT_EQ(r64.config.BN, 192);
  EXPECT_EQ(r64.config.num_kv_stages, 4);
  EXPECT_LE(r64.smem_bytes, 232448);
}

// sm100a's host and kernel share templates/sm100a/abi.h: every resolved sm100a config (16-bit at
// each depth, Q/K 192 with V 128, FP8, an FP8 KV cache, packed GQA) launches with exactly the shared
// memory abi::smem_bytes gives it for the K chunk slots abi::k_slots reads back from those bytes (as
// the kernel's Traits do; an FP8 KV cache: whole stages and 2..4 e4m3 slots beyond), a legal kBN and
// S0, S1, O0 (V's width), O1 in the 512 TMEM columns (the kernel static_asserts the same).
TEST(Config, BlackwellBudgetsAreTheKernelAbi) {
  namespace abi = fa4::sm100a::abi;
  struct Case {
    int depth;
    int depth_v;
    jit::DType dtype;
    bool kv_fp8;
    bool causal;
    bool pack;
  };
  std::vector<Case> cases;
  for (int d : {64, 128, 192})
    for (bool causal : {false, true}) cases.push_back({d, 0, jit::DType::bf16, false, causal, false});
  for (bool causal : {false, true}) cases.push_back({192, 128, jit::DType::bf16, false, causal, false});
  cases.push_back({192, 128, jit::DType::fp16, false, true, true});
  cases.push_back({192, 0, jit::DType::bf16, false, true, true});
  for (int d : {64, 128}) cases.push_back({d, 0, jit::DType::e4m3, false, false, false});
  for (int d : {64, 128}) cases.push_back({d, 0, jit::DType::bf16, true, true, false});
  for (const Case& k : cases) {
    jit::FA4Config c = cfg_for("sm_100a", k.depth);
    c.depth_v = k.depth_v;
    c.dtype = k.dtype;
    if (k.kv_fp8) c.kv_dtype = jit::DType::e4m3;
    if (k.causal) c.mask = jit::Mask::causal();
    if (k.pack) {
      c.group = 8;
      c.pack_gqa = true;
    }
    const std::string what = fmt::format("d{}/{} {} kv_fp8 {} causal {} pack {}", k.depth, k.depth_v,
                                         jit::to_string(k.dtype), k.kv_fp8, k.causal, k.pack);
    const jit::ResolvedConfig r = jit::resolve(c);
    const int e = jit::dtype_size(k.dtype), bm = r.config.BM, bn = r.config.BN, dp = r.padded_depth;
    const int dpv = r.padded_depth_v, stages = r.config.num_kv_stages, qk = r.config.num_qk_stages;
    EXPECT_EQ(dpv, k.depth_v ? k.depth_v : dp) << what;
    EXPECT_TRUE(abi::bn_legal(bn, dpv)) << what;
    EXPECT_EQ(abi::tmem_columns(bn, dpv), abi::kTmemColumns) << what << ": BN is the largest TMEM allows";
    EXPECT_EQ(r.config.BK0 * qk, dp) << what;
    EXPECT_EQ(r.num_threads, 512) << what;
    const int k_slots = abi::k_slots(e, bm, bn, dp, dpv, stages, qk, r.smem_bytes);
    EXPECT_GE(k_slots, qk) << what;
    const int smem16 = abi::smem_bytes(e, bm, bn, dp, dpv, stages, qk, k.kv_fp8 ? stages * qk : k_slots);
    if (k.kv_fp8) {
      EXPECT_EQ(k_slots, stages * qk) << what;
      const int f8 = abi::f8_slots(smem16, bn, dp, r.smem_bytes);
      EXPECT_TRUE(f8 >= 2 && f8 <= 4) << what << ": " << f8 << " e4m3 slots";
      EXPECT_EQ(r.smem_bytes, smem16 + f8 * abi::f8_slot_bytes(bn, dp)) << what;
    } else {
      EXPECT_EQ(r.smem_bytes, smem16) << what;
    }
    EXPECT_LE(r.smem_bytes, 232448) << what;
  }
}

// Q/K 192 with V 128 (DeepSeek-V3 prefill), FA4's Blackwell shape: BN 128 fills TMEM (S0, S1, O0, O1:
// 4 x 128 columns); beside Q (2 x 128 x 192 x 2 B = 96 KiB) and 2 V stages (128 x 128 x 2 B each)
// two whole K stages (48 KiB each) do not fit, so the K ring holds the 4 chunks of 128 x 64 that do:
// 231424 bytes. Depth 192 with V 192 runs at BN 64 (O0 and O1 take 384 columns) with whole stages.
TEST(Config, BlackwellDepth192Tiles) {
  namespace abi = fa4::sm100a::abi;
  jit::FA4Config c = cfg_for("sm_100a", 192);
  c.depth_v = 128;
  const jit::ResolvedConfig r = jit::resolve(c);
  EXPECT_EQ(r.config.depth_v, 128);
  EXPECT_EQ(r.padded_depth, 192);
  EXPECT_EQ(r.padded_depth_v, 128);
  EXPECT_EQ(r.config.BM, 256);
  EXPECT_EQ(r.config.BN, 128);
  EXPECT_EQ(r.config.num_qk_stages, 3);
  EXPECT_EQ(r.config.BK0, 64);
  EXPECT_EQ(r.config.num_kv_stages, 2);
  EXPECT_EQ(abi::tmem_columns(128, 128), 512);
  EXPECT_EQ(abi::k_slots(2, 256, 128, 192, 128, 2, 3, r.smem_bytes), 4);
  EXPECT_EQ(r.smem_bytes, 2 * 256 * 192 + 4 * 128 * 64 * 2 + 2 * 128 * 128 * 2 + 256 * 4 + 1024);
  EXPECT_EQ(r.smem_bytes, 231424);
  // One K chunk of the whole depth: a single K tile fits beside the 2 V stages.
  jit::FA4Config one_chunk = c;
  one_chunk.num_qk_stages = 1;
  const jit::ResolvedConfig r1 = jit::resolve(one_chunk);
  EXPECT_EQ(r1.config.BK0, 192);
  EXPECT_EQ(r1.smem_bytes, 2 * 256 * 192 + 128 * 192 * 2 + 2 * 128 * 128 * 2 + 256 * 4 + 1024);
  // A narrower BN keeps whole K stages: 2 x (96 x 192 + 96 x 128) x 2 B beside Q.
  jit::FA4Config bn96 = c;
  bn96.BN = 96;
  EXPECT_EQ(jit::resolve(bn96).smem_bytes, 2 * 256 * 192 + 2 * (96 * 192 + 96 * 128) * 2 + 256 * 4 + 1024);

  // depth_v = depth is the plain kernel (normalized to 0, the same cache key): BN 64, 2 whole stages.
  jit::FA4Config same = cfg_for("sm_100a", 192);
  same.depth_v = 192;
  const jit::ResolvedConfig r192 = jit::resolve(same);
  EXPECT_EQ(r192.config.depth_v, 0);
  EXPECT_EQ(jit::cache_key(same), jit::cache_key(cfg_for("sm_100a", 192)));
  EXPECT_EQ(r192.padded_depth_v, 192);
  EXPECT_EQ(r192.config.BN, 64);
  EXPECT_EQ(r192.config.num_qk_stages, 3);
  EXPECT_EQ(r192.config.num_kv_stages, 2);
  EXPECT_EQ(abi::tmem_columns(64, 192), 512);
  EXPECT_EQ(r192.smem_bytes, 2 * 256 * 192 + 2 * (64 * 192 + 64 * 192) * 2 + 256 * 4 + 1024);
  // The split-KV combine kernel of (192, 128) is keyed by O's head dim.
  EXPECT_EQ(jit::detail::combine_spec(r).depth, 128);
}

TEST(Config, BlackwellDepth192RefusalsNameTheField) {
  // V 192: O0 and O1 take 384 TMEM columns, so S0 and S1 get 64 each.
  expect_config_error(
      [] {
        auto c = cfg_for("sm_100a", 192);
        c.BN = 128;
        jit::resolve(c);
      },
      {"BN", "128", "TMEM", "padded_depth (192)", "max 64"});
  expect_config_error(
      [] {
        auto c = cfg_for("sm_100a", 192);
        c.depth_v = 128;
        c.BN = 160;
        jit::resolve(c);
      },
      {"BN", "160", "TMEM", "padded depth_v (128)", "max 128"});
  // A multiple of 32 (the softmax's 32-column TMEM loads), which the kernel static_asserts.
  expect_config_error(
      [] {
        auto c = cfg_for("sm_100a", 128);
        c.BN = 80;
        jit::resolve(c);
      },
      {"BN", "80", "multiple of 32"});
  // The V widths the backend pairs with each depth.
  expect_config_error(
      [] {
        auto c = cfg_for("sm_100a", 192);
        c.depth_v = 64;
        jit::resolve(c);
      },
      {"depth_v", "64", "depth 192 with depth_v 128"});
  expect_config_error(
      [] {
        auto c = cfg_for("sm_100a", 128);
        c.depth_v = 64;
        jit::resolve(c);
      },
      {"depth_v", "64", "depth_v = depth only"});
  // A narrower V is 16-bit only; FP8 at depth 192 pads to two 128-byte e4m3 rows (256).
  expect_config_error(
      [] {
        auto c = cfg_for("sm_100a", 192);
        c.depth_v = 128;
        c.dtype = jit::DType::e4m3;
        jit::resolve(c);
      },
      {"depth_v", "dtype e4m3"});
  expect_config_error(
      [] {
        auto c = cfg_for("sm_100a", 192);
        c.depth_v = 128;
        c.kv_dtype = jit::DType::e4m3;
        jit::resolve(c);
      },
      {"depth_v", "kv_dtype e4m3"});
  expect_config_error(
      [] {
        auto c = cfg_for("sm_100a", 192);
        c.dtype = jit::DType::e4m3;
        jit::resolve(c);
      },
      {"depth", "192 (padded 256)", "e4m3", "64, 96 or 128"});
  expect_config_error(
      [] {
        auto c = cfg_for("sm_100a", 192);
        c.kv_dtype = jit::DType::e4m3;
        jit::resolve(c);
      },
      {"kv_dtype", "padded depth 256", "128"});
  // 3 V stages beside Q leave less than one K tile (3 chunks of 16 KiB).
  expect_config_error(
      [] {
        auto c = cfg_for("sm_100a", 192);
        c.depth_v = 128;
        c.num_kv_stages = 3;
        jit::resolve(c);
      },
      {"num_kv_stages", "3", "allows 2..2"});
  // K chunks are whole 64-column boxes.
  expect_config_error(
      [] {
        auto c = cfg_for("sm_100a", 192);
        c.depth_v = 128;
        c.num_qk_stages = 2;
        jit::resolve(c);
      },
      {"num_qk_stages", "2", "allowed: 1, 3"});
}

TEST(Config, RefusalsNameFieldValueAndAllowed) {
  expect_config_error([] { jit::resolve(cfg_for("sm_70")); }, {"arch", "sm_70", "sm_90a"});
  expect_config_error([] { jit::resolve(cfg_for("")); }, {"arch"});
  expect_config_error([] { jit::resolve(cfg_for("sm_90a", 80)); }, {"depth", "80", "64"});
  expect_config_error(
      [] {
        auto c = cfg_for("sm_90a");
        c.BN = 100;
        jit::resolve(c);
      },
      {"BN", "100", "allowed"});
  expect_config_error(
      [] {
        auto c = cfg_for("sm_100a");
        c.BN = 256;
        jit::resolve(c);
      },
      {"BN", "256", "TMEM"});
  expect_config_error(
      [] {
        auto c = cfg_for("sm_100a");
        c.num_kv_stages = 9;
        jit::resolve(c);
      },
      {"num_kv_stages", "9"});
  expect_config_error(
      [] {
        auto c = cfg_for("sm_86");
        c.BN = 128;
        jit::resolve(c);
      },
      {"BN", "shared memory", "sm_86"});
  expect_config_error(
      [] {
        auto c = cfg_for("sm_90a");
        c.num_q_heads = 30;
        c.group = 4;
        jit::resolve(c);
      },
      {"group", "4", "num_q_heads"});
  // The fields that took one value only are gone; a file that still sets one is told why.
  for (const char* field : {"padded_depth", "BK1", "num_mma_stages", "swizzle_bytes"})
    expect_config_error([&] { jit::config_from_json({{"depth", 128}, {field, 0}}); }, {field, "removed", "one value"});
  expect_config_error([] { jit::config_from_json({{"configs", 1}}); }, {"unknown field 'configs'"});
  expect_config_error(
      [] {
        auto c = cfg_for("sm_90a");
        c.score_mod = jit::ScoreMod::custom("  ");
        jit::resolve(c);
      },
      {"score_mod.snippet"});
  expect_config_error(
      [] {
        auto c = cfg_for("sm_90a");
        c.mask = jit::Mask::all_of({});
        jit::resolve(c);
      },
      {"mask.masks"});
  expect_config_error([] { jit::dtype_from_string("fp8"); }, {"dtype", "fp8", "bf16"});
}

// Tuning overrides are an input of resolve() (ResolveOptions); parse_tune reads the FA4JIT_TUNE
// syntax the CLI and the bench pass, and its errors name the item.
TEST(Config, TuningOverridesAreAnInputAndTheirErrorsNameTheItem) {
  const jit::TuningOverrides t = jit::parse_tune("pingpong=0,persistent=2");
  EXPECT_EQ(t.pingpong, 0);
  EXPECT_EQ(t.persistent, 2);
  EXPECT_FALSE(t.wg_spans.has_value());
  EXPECT_EQ(jit::to_string(t), "pingpong=0,persistent=2");
  EXPECT_EQ(jit::parse_tune(jit::to_string(t)), t);
  EXPECT_TRUE(jit::parse_tune("").empty());
  EXPECT_EQ(jit::to_string(jit::TuningOverrides{}), "");
  auto error = [](const std::string& text) {
    try {
      jit::parse_tune(text, "FA4JIT_TUNE");
    } catch (const jit::ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error("pingpong"), "FA4JIT_TUNE: 'pingpong' is not name=value");
  EXPECT_EQ(error("pingpong=off"), "FA4JIT_TUNE: 'pingpong=off' needs an integer value");
  EXPECT_NE(error("ping=0").find("FA4JIT_TUNE: unknown name 'ping'; allowed: exp2_emulate_every"), std::string::npos);
  // Issue 52 item 5: out-of-range and sloppy values were compiled under keys of their own.
  EXPECT_EQ(error("exp2_emulate_every=-3"),
            "FA4JIT_TUNE: 'exp2_emulate_every=-3' is out of range: exp2_emulate_every takes 0 .. 64 (0: every exp2 on "
            "MUFU; n: one pair in n by polynomial)");
  for (const char* t : {"pingpong=3", "wg_spans=2", "line_info=-1", "persistent=4", "intra_wg_overlap=2"})
    EXPECT_NE(error(t).find("is out of range"), std::string::npos) << t;
  for (const char* t : {"pingpong= 1", "pingpong=+1", "pingpong=1x", "pingpong=", "pingpong=99999999999"})
    EXPECT_NE(error(t).find("needs an integer value"), std::string::npos) << t << ": " << error(t);
  EXPECT_EQ(jit::parse_tune("exp2_emulate_every=64,wg_spans=0").exp2_emulate_every, 64);

  const jit::FA4Config c = cfg_for("sm_90a", 128);
  const jit::ResolvedConfig plain = jit::resolve(c);
  const jit::ResolvedConfig tuned_rc = jit::resolve(c, tuned("pingpong=0,persistent=2,exp2_emulate_every=8"));
  EXPECT_EQ(plain.tuning.pingpong, 1);
  EXPECT_EQ(tuned_rc.tuning.pingpong, 0);
  EXPECT_EQ(tuned_rc.tuning.exp2_emulate_every, 8);
  EXPECT_EQ(tuned_rc.walk, jit::TileWalk::stream_k);
  EXPECT_EQ(plain.walk, jit::TileWalk::persistent);
  // The values land in the generated source, so they change the cache key.
  EXPECT_NE(jit::cache_key(c), jit::cache_key(c, tuned("pingpong=0")));
  EXPECT_EQ(jit::cache_key(c), jit::cache_key(c, tuned("pingpong=1")));  // the default, spelled out
}

// The dynamic walk (persistent 3: units claimed at run time, templates/common/persistent_walk.h
// DynamicTiles): sm90a's default for snippet masks (alone or in a combinator) at head dim 128,
// 16-bit and unpacked; built-in masks keep their walks, and the kernels whose helper warps or
// packed heads walk the tiles on their own refuse it, naming the tune.
TEST(Config, SnippetMasksTakeTheDynamicWalkWhereItWasMeasured) {
  const jit::Mask doc = jit::Mask::custom("return q_idx >= kv_idx;");
  const auto with = [](jit::FA4Config c, const jit::Mask& m) {
    c.mask = m;
    return c;
  };
  const jit::FA4Config d128 = cfg_for("sm_90a", 128), d64 = cfg_for("sm_90a", 64);
  EXPECT_EQ(jit::resolve(with(d128, doc)).walk, jit::TileWalk::dynamic);
  EXPECT_EQ(jit::resolve(with(d128, doc)).tuning.persistent, 3);
  EXPECT_EQ(jit::resolve(with(d128, jit::Mask::all_of({jit::Mask::causal(), doc}))).walk, jit::TileWalk::dynamic);
  EXPECT_EQ(jit::resolve(with(d128, jit::Mask::causal())).walk, jit::TileWalk::persistent);
  EXPECT_EQ(jit::resolve(with(d64, doc)).walk, jit::TileWalk::grid);  // not measured there
  EXPECT_EQ(jit::resolve(with(d64, doc), tuned("persistent=3")).walk, jit::TileWalk::dynamic);
  jit::FA4Config packed = with(d128, doc);
  packed.pack_gqa = true;
  packed.group = 8;
  EXPECT_NE(jit::resolve(packed).walk, jit::TileWalk::dynamic);
  jit::FA4Config fp8 = with(d128, doc), kv8 = with(d128, doc);
  fp8.dtype = jit::DType::e4m3;
  kv8.kv_dtype = jit::DType::e4m3;
  EXPECT_NE(jit::resolve(fp8).walk, jit::TileWalk::dynamic);
  EXPECT_NE(jit::resolve(kv8).walk, jit::TileWalk::dynamic);
  jit::FA4Config small_tile = with(d128, doc);  // one consumer warpgroup: every producer warp gathers
  small_tile.BM = 64;
  for (const jit::FA4Config& c : {packed, fp8, kv8, small_tile}) {
    try {
      jit::resolve(c, tuned("persistent=3"));
      ADD_FAILURE() << "persistent=3 accepted for " << jit::to_json(c).dump();
    } catch (const jit::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("tune: persistent=3"), std::string::npos) << e.what();
    }
  }
  // Other backends walk their grid.
  EXPECT_EQ(jit::resolve(with(cfg_for("sm_90", 128), doc)).walk, jit::TileWalk::grid);
}

// resolve() is pure: the environment variable the CLI reads does not reach the library.
TEST(Config, ResolveNeverReadsTheEnvironment) {
  const jit::FA4Config c = cfg_for("sm_90a", 128);
  const jit::ResolvedConfig before = jit::resolve(c);
  ASSERT_EQ(setenv("FA4JIT_TUNE", "persistent=0,pingpong=0", 1), 0);
  const jit::ResolvedConfig during = jit::resolve(c);
  const std::string key = jit::cache_key(c);
  unsetenv("FA4JIT_TUNE");
  EXPECT_EQ(during.tuning, before.tuning);
  EXPECT_EQ(key, jit::cache_key(c));
}

TEST(Config, SupportedExplainsARefusal) {
  auto c = cfg_for("sm_100a");
  EXPECT_TRUE(jit::supported(c));
  c.BN = 192;  // 2*192 + 2*128 = 640 > 512 TMEM columns
  std::string why;
  EXPECT_FALSE(jit::supported(c, &why));
  EXPECT_NE(why.find("TMEM"), std::string::npos) << why;
}

TEST(Config, ExplicitValidValuesAreKept) {
  auto c = cfg_for("sm_90a");
  c.num_kv_stages = 3;
  c.BN = 64;
  const auto r = jit::resolve(c);
  EXPECT_EQ(r.config.num_kv_stages, 3);
  EXPECT_EQ(r.config.BN, 64);
}

TEST(ConfigJson, RoundTripsEveryField) {
  jit::FA4Config c = cfg_for("sm_100a", 64);
  c.dtype = jit::DType::fp16;
  c.output_dtype = jit::DType::bf16;
  c.num_q_heads = 32;
  c.group = 8;
  c.BN = 128;
  c.num_kv_stages = 3;
  jit::Mask prefixed = jit::Mask::causal(true);
  prefixed.prefix = true;
  c.mask = jit::Mask::any_of({prefixed, jit::Mask::custom("return kv_idx == 0;", "return PARTIAL;")});
  c.score_mod = jit::ScoreMod::custom("return score * 0.5f;");
  c.pack_gqa = true;
  EXPECT_EQ(jit::config_from_json(jit::to_json(c)), c);
  EXPECT_EQ(jit::to_json(c)["mask"]["masks"][0]["prefix"], true);
  const auto r = jit::resolve(c);
  EXPECT_EQ(jit::config_from_json(jit::to_json(r.config)), r.config);
  EXPECT_EQ(jit::config_from_json(nlohmann::json::parse(jit::to_json(c).dump())), c);
}

// FP8: dtype e4m3 (aliases float8_e4m3fn, fp8_e4m3) round-trips; O defaults to bf16 and is written
// back resolved; fp16 O is kept.
TEST(ConfigJson, RoundTripsAnFp8Config) {
  jit::FA4Config c = cfg_for("sm_90a", 128);
  c.dtype = jit::DType::e4m3;
  c.group = 4;
  c.mask = jit::Mask::causal();
  EXPECT_EQ(jit::to_json(c)["dtype"], "e4m3");
  EXPECT_TRUE(jit::to_json(c)["output_dtype"].is_null());
  EXPECT_EQ(jit::config_from_json(jit::to_json(c)), c);
  EXPECT_EQ(jit::config_from_json(nlohmann::json::parse(jit::to_json(c).dump())), c);
  const auto r = jit::resolve(c);
  EXPECT_EQ(r.config.dtype, jit::DType::e4m3);
  EXPECT_EQ(*r.config.output_dtype, jit::DType::bf16);
  EXPECT_EQ(jit::to_json(r.config)["output_dtype"], "bf16");
  EXPECT_EQ(jit::config_from_json(jit::to_json(r.config)), r.config);
  c.output_dtype = jit::DType::fp16;
  EXPECT_EQ(jit::config_from_json(jit::to_json(c)), c);
  EXPECT_EQ(*jit::resolve(c).config.output_dtype, jit::DType::fp16);
  for (const char* name : {"e4m3", "float8_e4m3fn", "fp8_e4m3"}) {
    EXPECT_EQ(jit::dtype_from_string(name), jit::DType::e4m3) << name;
    EXPECT_EQ(jit::config_from_json({{"dtype", name}}).dtype, jit::DType::e4m3) << name;
  }
  EXPECT_EQ(jit::dtype_size(jit::DType::e4m3), 1);
  EXPECT_EQ(jit::dtype_size(jit::DType::bf16), 2);
  EXPECT_EQ(jit::dtype_size(jit::DType::fp16), 2);
  EXPECT_STREQ(jit::to_string(jit::DType::e4m3), "e4m3");
  // Every DType's name reads back as itself.
  for (jit::DType t : {jit::DType::bf16, jit::DType::fp16, jit::DType::e4m3})
    EXPECT_EQ(jit::dtype_from_string(jit::to_string(t)), t);
  // K/V storage: kv_dtype where set (an FP8 KV cache), else dtype.
  jit::FA4Config cache;
  cache.dtype = jit::DType::fp16;
  EXPECT_EQ(jit::kv_type(cache), jit::DType::fp16);
  cache.kv_dtype = jit::DType::e4m3;
  EXPECT_EQ(jit::kv_type(cache), jit::DType::e4m3);
}

TEST(Config, Fp8RefusalsNameTheFieldAndArch) {
  // The portable backend has no FP8 MMA: the error names the arch.
  for (const char* arch : {"sm_80", "sm_86", "sm_90"}) {
    auto c = cfg_for(arch);
    c.dtype = jit::DType::e4m3;
    expect_config_error([&] { jit::resolve(c); }, {"dtype", "e4m3", arch});
    EXPECT_FALSE(jit::supported(c));
  }
  // O is 16-bit: e4m3 output refused by resolve() (a C++ config) and by the JSON reader.
  auto c = cfg_for("sm_90a");
  c.dtype = jit::DType::e4m3;
  c.output_dtype = jit::DType::e4m3;
  expect_config_error([&] { jit::resolve(c); }, {"output_dtype", "e4m3", "bf16"});
  c.dtype = jit::DType::bf16;
  expect_config_error([&] { jit::resolve(c); }, {"output_dtype", "e4m3"});
  expect_config_error(
      [] {
        jit::config_from_json({{"dtype", "e4m3"}, {"output_dtype", "e4m3"}});
      },
      {"output_dtype", "e4m3", "bf16, fp16"});
  expect_config_error([] { jit::dtype_from_string("e5m2"); }, {"dtype", "e5m2", "e4m3"});
}

TEST(Config, PackGqaAndBlockSnippetsAreValidated) {
  jit::FA4Config c = cfg_for("sm_90a", 128);
  c.pack_gqa = true;
  expect_config_error([&] { jit::resolve(c); }, {"pack_gqa", "group"});
  c.group = 1;  // MHA: nothing to pack (its sm_90a kernel stopped at an illegal instruction)
  expect_config_error([&] { jit::resolve(c); }, {"pack_gqa", "group = 1", "pack_gqa false"});
  c.group = 3;  // a 64-row warpgroup tile holds 21 whole groups of 3 heads and a padding row
  EXPECT_EQ(jit::resolve(c).config.pack_gqa, true);
  c.group = 67;  // above a warpgroup tile and prime: no slice of 2..64 heads divides it
  expect_config_error([&] { jit::resolve(c); }, {"pack_gqa", "group = 67", "64"});
  c.group = 8;
  EXPECT_EQ(jit::resolve(c).config.pack_gqa, true);
  c.arch = "sm_80";
  c.group = 3;  // pointer loads: any group
  EXPECT_NO_THROW(jit::resolve(c));
  jit::FA4Config b = cfg_for("sm_90a", 128);
  b.mask = jit::Mask::causal();
  b.mask.block_snippet = "return SKIP;";
  expect_config_error([&] { jit::resolve(b); }, {"mask.block_snippet", "custom"});
}

TEST(ConfigJson, AcceptsShorthandsAndRejectsUnknownFields) {
  const auto c =
      jit::config_from_json(nlohmann::json::parse(R"({"depth": 64, "mask": "causal", "score_mod": "softcap"})"));
  EXPECT_EQ(c.depth, 64);
  EXPECT_EQ(c.mask, jit::Mask::causal());
  EXPECT_EQ(c.score_mod, jit::ScoreMod::softcap());
  expect_config_error([] { jit::config_from_json(nlohmann::json::parse(R"({"dpeth": 64})")); },
                      {"unknown field", "dpeth"});
  expect_config_error([] { jit::config_from_json(nlohmann::json::parse(R"({"depth": "64"})")); }, {"depth"});
  expect_config_error([] { jit::config_from_json(nlohmann::json::parse(R"({"mask": {"kind": "diagonal"}})")); },
                      {"mask.kind", "diagonal", "causal"});
  expect_config_error([] { jit::config_from_json(nlohmann::json::parse(R"({"mask": {"kind": "causal", "x": 1}})")); },
                      {"mask", "unknown field", "x"});
}

}  // namespace

namespace {

// FA4Config::depth_v: 0 and the depth itself are one kernel (normalized to 0, so its JSON and cache
// key are the plain kernel's); a narrower V is a pair the backend lists, 16-bit only, and every
// refusal names the field.
TEST(Config, ValueHeadDimIsAPairTheBackendServes) {
  jit::FA4Config c = cfg_for("sm_90a", 192);
  c.mask = jit::Mask::causal();
  const jit::ResolvedConfig plain = jit::resolve(c);
  c.depth_v = 192;
  EXPECT_EQ(jit::resolve(c).config, plain.config);
  EXPECT_FALSE(jit::to_json(jit::resolve(c).config).contains("depth_v"));

  c.depth_v = 128;
  const jit::ResolvedConfig r = jit::resolve(c);
  EXPECT_EQ(r.config.depth_v, 128);
  EXPECT_EQ(jit::value_depth(r.config), 128);
  EXPECT_EQ(r.padded_depth, 192);
  EXPECT_EQ(r.padded_depth_v, 128);
  // V's ring is narrower, so the kernel needs less shared memory than the 192-wide one.
  EXPECT_LT(r.smem_bytes, plain.smem_bytes);
  EXPECT_EQ(jit::config_from_json(jit::to_json(r.config)), r.config);
  EXPECT_EQ(jit::to_json(r.config).at("depth_v"), 128);

  auto refused = [](jit::FA4Config x, const std::string& want) {
    std::string why;
    EXPECT_FALSE(jit::supported(x, &why)) << want;
    EXPECT_NE(why.find(want), std::string::npos) << why;
  };
  jit::FA4Config bad = c;
  bad.depth_v = 64;
  refused(bad, "depth_v: 64 is not allowed");
  bad = cfg_for("sm_90a", 128);
  bad.depth_v = 64;
  refused(bad, "depth_v = depth only");
  bad = c;
  bad.kv_dtype = jit::DType::e4m3;
  refused(bad, "depth_v");
  EXPECT_THROW(jit::config_from_json(nlohmann::json{{"depth", 192}, {"depth_v", -1}}), jit::ConfigError);
}

// Paged launches: pages load by TMA boxes of gcd(page_size, BN) rows where that is a multiple of 8
// (FwdParams::kv_box_rows), and are gathered row by row (kv_box_rows 0) where it is not, by every
// sm90a kernel that gathers (abi.h gathers) and every sm100a kernel; the others refuse such pages
// naming page_size and why.
TEST(Config, PagesNoTmaBoxTakesAreGatheredOrRefusedByName) {
  auto rows = [](const jit::FA4Config& c, long long page, const std::string& tune = "") {
    const jit::ResolvedConfig r = jit::resolve(c, tuned(tune));
    return jit::detail::policy(r).paged_kv_box_rows(r, page);
  };
  auto expect_refused = [&](const jit::FA4Config& c, long long page, std::initializer_list<const char*> words,
                            const std::string& tune = "") {
    try {
      rows(c, page, tune);
      ADD_FAILURE() << "page " << page << ": no LaunchError";
    } catch (const jit::LaunchError& e) {
      const std::string msg = e.what();
      for (const char* w : words) EXPECT_NE(msg.find(w), std::string::npos) << "'" << w << "' missing from: " << msg;
    }
  };
  jit::FA4Config causal = cfg_for("sm_90a");
  causal.mask = jit::Mask::causal();
  ASSERT_EQ(jit::resolve(causal).tuning.persistent, 1);
  EXPECT_EQ(rows(causal, 16), 16);
  EXPECT_EQ(rows(causal, 256), 128);                                                        // BN 128: one box a tile
  for (long long page : {1, 2, 4, 12, 100, 255}) EXPECT_EQ(rows(causal, page), 0) << page;  // gathered
  jit::FA4Config decode = causal;
  decode.group = 7;
  decode.pack_gqa = true;
  EXPECT_EQ(rows(decode, 1), 0);
  EXPECT_EQ(rows(decode, 24), 8);  // BN 64: gcd 8, TMA
  jit::FA4Config kv_fp8 = decode;
  kv_fp8.kv_dtype = jit::DType::e4m3;
  EXPECT_EQ(rows(kv_fp8, 1), 0);
  jit::FA4Config mla = cfg_for("sm_90a", 576);
  mla.depth_v = 512;
  mla.group = 16;
  mla.pack_gqa = true;
  EXPECT_EQ(rows(mla, 1), 0);
  EXPECT_EQ(rows(cfg_for("sm_90a", 512), 1), 0);
  // Persistent walks past padded depth 128 gather too (their producer at 56 registers: abi.h
  // roomy_producer), as their grid walk does.
  for (const int depth : {192, 256}) {
    jit::FA4Config deep = cfg_for("sm_90a", depth);
    deep.mask = jit::Mask::causal();
    ASSERT_EQ(jit::resolve(deep).tuning.persistent, 1) << depth;
    EXPECT_EQ(rows(deep, 1), 0) << depth;
    EXPECT_EQ(rows(deep, 100), 0) << depth;
    EXPECT_EQ(rows(deep, 1, "persistent=0"), 0) << depth;
  }
  jit::FA4Config fp8 = cfg_for("sm_90a");
  fp8.dtype = jit::DType::e4m3;
  expect_refused(fp8, 12, {"page_size", "12", "FP8"});
  // sm100a's load warp gathers them (templates/sm100a/gather.cuh), every config: 16-bit, FP8, FP8 KV.
  EXPECT_EQ(rows(cfg_for("sm_100a"), 1), 0);
  EXPECT_EQ(rows(cfg_for("sm_100a"), 12), 0);
  EXPECT_EQ(rows(cfg_for("sm_100a"), 48), 16);
  jit::FA4Config blackwell_fp8 = cfg_for("sm_100a");
  blackwell_fp8.dtype = jit::DType::e4m3;
  EXPECT_EQ(rows(blackwell_fp8, 3), 0);
  jit::FA4Config blackwell_kv_fp8 = cfg_for("sm_100a");
  blackwell_kv_fp8.kv_dtype = jit::DType::e4m3;
  EXPECT_EQ(rows(blackwell_kv_fp8, 1), 0);
  EXPECT_EQ(rows(cfg_for("sm_80"), 1), jit::resolve(cfg_for("sm_80")).config.BN);  // plain loads: any page
}

}  // namespace
