// Masks, score-mods, snippets and sinks on every backend that runs here, against the float64
// reference (the semantics in check/reference.cpp). Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>

#include <fmt/format.h>

#include "fa4jit/jit.hpp"
#include "tests/support/expect.hpp"
#include "tests/support/tune.hpp"
#include "check/gpu.hpp"
#include "tests/support/gpu_cases.hpp"

namespace {

using jit::Mask;
using jit::ScoreMod;
using jit::testing::CheckCase;

using jit::testing::runnable_archs;

struct Variant {
  std::string name;
  Mask mask;
  ScoreMod mod;
  CheckCase c;
};

std::vector<Variant> variants() {
  std::vector<Variant> v;
  auto base = [](int sq, int sk) {
    CheckCase c;
    c.batch = 2;
    c.seqlen_q = sq;
    c.seqlen_k = sk;
    c.num_q_heads = 6;
    c.num_kv_heads = 2;
    return c;
  };
  {
    Variant x{"sliding causal 100", Mask::sliding_window(), ScoreMod::identity(), base(700, 900)};
    x.c.window_left = 100;
    x.c.window_right = 0;
    v.push_back(x);
  }
  {
    Variant x{"sliding non-causal (64, 32)", Mask::sliding_window(), ScoreMod::identity(), base(513, 513)};
    x.c.window_left = 64;
    x.c.window_right = 32;
    v.push_back(x);
  }
  {
    Variant x{"chunked 128, Sq > Sk (empty rows)", Mask::chunked(), ScoreMod::identity(), base(600, 300)};
    x.c.chunk_size = 128;
    v.push_back(x);
  }
  {
    Variant x{"causal and chunked 100", Mask::all_of({Mask::causal(), Mask::chunked()}), ScoreMod::identity(),
              base(777, 777)};
    x.c.chunk_size = 100;
    v.push_back(x);
  }
  v.push_back({"causal top-left Sq > Sk", Mask::causal(true), ScoreMod::identity(), base(400, 250)});
  v.push_back({"causal bottom-right Sq > Sk (empty rows)", Mask::causal(), ScoreMod::identity(), base(400, 250)});
  // Mask::prefix: keys below mask_prefix visible to every query besides the band (prefix LM, sink tokens).
  auto prefixed = [](Mask m) {
    m.prefix = true;
    return m;
  };
  {
    Variant x{"prefix LM 300 (causal + prefix)", prefixed(Mask::causal()), ScoreMod::identity(), base(700, 700)};
    x.c.mask_prefix = 300;
    v.push_back(x);
  }
  {
    Variant x{"prefix 100, causal top-left Sq > Sk", prefixed(Mask::causal(true)), ScoreMod::identity(),
              base(400, 250)};
    x.c.mask_prefix = 100;
    v.push_back(x);
  }
  {  // rows before the bottom-right diagonal see the prefix only; a prefix past seqlen_k sees every key
    Variant x{"prefix 1000 > Sk, causal bottom-right Sq > Sk", prefixed(Mask::causal()), ScoreMod::identity(),
              base(400, 250)};
    x.c.mask_prefix = 1000;
    v.push_back(x);
  }
  {
    Variant x{"sliding window 64 + 4 sink keys", prefixed(Mask::sliding_window()), ScoreMod::identity(),
              base(700, 900)};
    x.c.window_left = 64;
    x.c.window_right = 0;
    x.c.mask_prefix = 4;
    v.push_back(x);
  }
  {  // the flag alone (mask_prefix 0) is the plain band
    Variant x{"prefix flag, mask_prefix 0", prefixed(Mask::causal()), ScoreMod::identity(), base(300, 300)};
    v.push_back(x);
  }
  {
    Variant x{"custom mask snippet", Mask::custom("return (q_idx + kv_idx) % 3 != 0 || kv_idx == 0;"),
              ScoreMod::identity(), base(333, 444)};
    x.c.custom_visible = [](int, int, int q, int k) { return (q + k) % 3 != 0 || k == 0; };
    v.push_back(x);
  }
  {
    Variant x{"causal or custom", Mask::any_of({Mask::causal(), Mask::custom("return kv_idx >= 1000;")}),
              ScoreMod::identity(), base(300, 1100)};
    x.c.custom_visible = [](int, int, int q, int k) { return k <= q + 800 || k >= 1000; };
    v.push_back(x);
  }
  {
    Variant x{"softcap 5", Mask::causal(), ScoreMod::softcap(), base(500, 500)};
    x.c.softcap = 5.0f;
    v.push_back(x);
  }
  v.push_back({"alibi", Mask::causal(), ScoreMod::alibi(), base(600, 600)});
  {
    Variant x{"custom score-mod", Mask::none(),
              ScoreMod::custom("return score * 0.5f + (kv_idx % 7 == 0 ? 1.0f : 0.0f) - 0.001f * h;"), base(129, 257)};
    x.c.custom_score_mod = [](double s, int, int h, int, int k) {
      return s * 0.5 + (k % 7 == 0 ? 1.0 : 0.0) - 0.001 * h;
    };
    v.push_back(x);
  }
  {
    Variant x{"sinks", Mask::causal(), ScoreMod::identity(), base(300, 300)};
    x.c.with_sinks = true;
    v.push_back(x);
  }
  {
    Variant x{"sinks with empty rows", Mask::chunked(), ScoreMod::identity(), base(300, 100)};
    x.c.chunk_size = 64;
    x.c.with_sinks = true;
    v.push_back(x);
  }
  return v;
}

TEST(GpuVariants, MasksScoreModsSnippetsAndSinksMatchReference) {
  SKIP_WITHOUT_GPU();
  for (const std::string& arch : runnable_archs())
    for (int depth : {64, 128})
      for (const Variant& v : variants()) {
        jit::FA4Config cfg;
        cfg.arch = arch;
        cfg.depth = depth;
        cfg.mask = v.mask;
        cfg.score_mod = v.mod;
        const auto kernel = jit::get_kernel(cfg, jit::testing::env_tune());
        jit::testing::expect_matches(jit::testing::run_and_check(*kernel, v.c),
                                     fmt::format("{} d{} {}", arch, depth, v.name));
      }
}

// DeepSeek-V3-style heads: Q and K 192 wide, V and O 128 (FA4Config::depth_v), through every mask
// and score-mod above and the layouts that read V or write O their own way: varlen, paged, split-KV
// with its combine, packed-GQA decode, and O rows padded with poison past their 128 columns.
// The variants of `cases` (plus varlen, paged and split-KV layouts of a causal GQA case) at Q/K
// head dim `depth` and V head dim `depth_v` (0: depth), on every arch that runs here, unpacked
// and (decode rows) with packed GQA.
void expect_depths_match(int depth, int depth_v, std::vector<Variant> cases) {
  auto layout = [](const char* name, auto&& set) {
    Variant x{name, Mask::causal(), ScoreMod::identity(), {}};
    x.c.batch = 3;
    x.c.num_q_heads = 8;
    x.c.num_kv_heads = 2;
    x.c.o_head_pad = 8;
    set(x.c);
    return x;
  };
  cases.push_back(layout("varlen", [](CheckCase& c) {
    c.seqlens_q = {1, 300, 77};
    c.seqlens_k = {500, 300, 1000};
  }));
  cases.push_back(layout("paged 64", [](CheckCase& c) {
    c.seqlen_q = 5;
    c.seqlens_k = {700, 64, 1};
    c.page_size = 64;
  }));
  cases.push_back(layout("paged 16", [](CheckCase& c) {
    c.seqlen_q = 1;
    c.seqlens_k = {333, 16, 1000};
    c.page_size = 16;
  }));
  cases.push_back(layout("split-KV 3", [](CheckCase& c) {
    c.seqlen_q = 1;
    c.seqlen_k = 3000;
    c.num_splits = 3;
  }));
  const std::string dims = fmt::format("d{}/v{}", depth, depth_v ? depth_v : depth);
  for (const std::string& arch : runnable_archs())
    for (bool pack : {false, true})
      for (const Variant& v : cases) {
        if (pack && v.c.seqlen_q > 16 && v.c.seqlens_q.empty()) continue;  // packing is for decode rows
        jit::FA4Config cfg;
        cfg.arch = arch;
        cfg.depth = depth;
        cfg.depth_v = depth_v;
        cfg.mask = v.mask;
        cfg.score_mod = v.mod;
        if (pack) {
          cfg.group = v.c.num_q_heads / v.c.num_kv_heads;
          cfg.pack_gqa = true;
        }
        const std::string what = fmt::format("{} {} {}{}", arch, dims, v.name, pack ? " packed" : "");
        try {  // every arch and case reports, rather than the first failure ending the test
          const auto kernel = jit::get_kernel(cfg, jit::testing::env_tune());
          jit::testing::expect_matches(jit::testing::run_and_check(*kernel, v.c), what);
        } catch (const std::exception& e) {
          ADD_FAILURE() << what << ": " << e.what();
        }
      }
}

// Prefix LM (causal + a bidirectional prefix, Mask::prefix) on the layouts and tile walks a serving
// engine uses it with: varlen, paged, split-KV decode and packed GQA, under each sm_90a walk (grid,
// persistent, dynamic), d64 (per-warpgroup spans) and d128.
TEST(GpuVariants, PrefixMaskOnEveryLayoutAndWalk) {
  SKIP_WITHOUT_GPU();
  auto base = [](int prefix) {
    CheckCase c;
    c.batch = 3;
    c.num_q_heads = 8;
    c.num_kv_heads = 2;
    c.mask_prefix = prefix;
    return c;
  };
  std::vector<std::pair<std::string, CheckCase>> cases;
  {
    CheckCase c = base(200);
    c.seqlens_q = {1, 300, 77};
    c.seqlens_k = {500, 300, 1000};
    cases.push_back({"varlen, prefix 200", c});
  }
  {
    CheckCase c = base(100);
    c.seqlen_q = 130;
    c.seqlens_k = {700, 64, 150};
    c.page_size = 64;
    cases.push_back({"paged 64, prefix 100", c});
  }
  {
    CheckCase c = base(40);
    c.seqlen_q = 1;
    c.seqlen_k = 3000;
    c.num_splits = 3;
    cases.push_back({"split-KV 3 decode, prefix 40", c});
  }
  {
    CheckCase c = base(1500);
    c.seqlen_q = 1000;
    c.seqlen_k = 1000;
    c.batch = 1;
    cases.push_back({"dense, prefix 1500 > S (all visible)", c});
  }
  for (const std::string& arch : runnable_archs())
    for (int depth : {64, 128})
      for (const char* tune : {"", "persistent=0", "persistent=1", "persistent=3"})
        for (bool pack : {false, true})
          for (const auto& [name, c] : cases) {
            const bool sm90a = arch == "sm_90a";
            if ((*tune && !sm90a) || (pack && c.seqlen_q > 16 && c.seqlens_q.empty())) continue;
            if (pack && std::string(tune) == "persistent=3") continue;  // the dynamic walk runs unpacked
            jit::FA4Config cfg;
            cfg.arch = arch;
            cfg.depth = depth;
            cfg.mask = Mask::causal();
            cfg.mask.prefix = true;
            if (pack) {
              cfg.group = c.num_q_heads / c.num_kv_heads;
              cfg.pack_gqa = true;
            }
            const std::string what = fmt::format("{} d{} [{}] {}{}", arch, depth, tune, name, pack ? " packed" : "");
            try {
              const auto kernel = jit::get_kernel(cfg, jit::testing::tuned(tune));
              jit::testing::expect_matches(jit::testing::run_and_check(*kernel, c), what);
            } catch (const std::exception& e) {
              ADD_FAILURE() << what << ": " << e.what();
            }
          }
}

// DeepSeek-V3 prefill's Q/K 192 with a 128-wide V: every variant.
TEST(GpuVariants, NarrowerValueHeadsMatchReference) {
  SKIP_WITHOUT_GPU();
  expect_depths_match(192, 128, variants());
}

// Head dim 512 (sm_90a: O split over two warpgroups, BN 32): unmasked, causal (both corners),
// sliding windows, a snippet mask, softcap and sinks, then the layouts (GQA, varlen, paged 16 and
// 64, split-KV, packed decode).
TEST(GpuVariants, HeadDim512MatchesReference) {
  SKIP_WITHOUT_GPU();
  std::vector<Variant> cases;
  for (const Variant& v : variants())
    if (v.name.rfind("sliding", 0) == 0 || v.name.rfind("causal top-left", 0) == 0 ||
        v.name.rfind("causal bottom-right", 0) == 0 || v.name == "custom mask snippet" || v.name == "softcap 5" ||
        v.name == "sinks")
      cases.push_back(v);
  CheckCase plain;
  plain.batch = 2;
  plain.seqlen_q = 200;
  plain.seqlen_k = 333;
  plain.num_q_heads = 4;
  plain.num_kv_heads = 4;
  cases.push_back({"unmasked MHA", Mask::none(), ScoreMod::identity(), plain});
  expect_depths_match(512, 0, cases);
}

// Head dim 512's persistent walk (sm_90a, plain causal and unmasked): more units than SMs, so CTAs
// walk several, with odd and even KV tile counts (32-key tiles of 333 keys), so the alternating
// warpgroups' turns carry across units (consumer.cuh alternate_mainloop); unmasked, the last round
// split over the SMs (split partials of both O slices).
TEST(GpuVariants, HeadDim512PersistentWalkMatchesReference) {
  SKIP_WITHOUT_GPU();
  if (jit::current_device_arch() != "sm_90a")
    GTEST_SKIP() << "the persistent O-split walk is sm_90a's; this GPU runs " << jit::current_device_arch();
  CheckCase c = jit::testing::gqa_case(300, 333, 3);
  c.num_q_heads = 16;  // 3 x 16 x 5 Q tiles: 240 units
  c.num_kv_heads = 4;
  c.o_head_pad = 8;
  for (const Mask& mask : {Mask::causal(), Mask::none()}) {
    jit::FA4Config cfg;
    cfg.arch = "sm_90a";
    cfg.depth = 512;
    cfg.mask = mask;
    const auto kernel = jit::get_kernel(cfg, jit::ResolveOptions{jit::parse_tune("persistent=1")});
    ASSERT_EQ(kernel->config().walk, jit::TileWalk::persistent);
    const std::string what =
        fmt::format("sm_90a d512 persistent {}", mask.kind == Mask::Kind::causal ? "causal" : "unmasked");
    jit::testing::expect_matches(jit::testing::run_and_check(*kernel, c), what);
  }
}

// Pages no TMA box takes (gcd(page_size, BN) not a multiple of 8 rows): sm_90a's producer warp
// gathers their rows (cp.async, gather.cuh GatherTile), the portable kernel loads them as any page.
// Prefill through the persistent walk (d128 and d64 causal, pages 1, 3 and 100; d256 and DeepSeek's
// (192, 128) causal, whose producer runs at 56 registers: abi.h roomy_producer) and the grid walk
// (a window; a custom mask whose walk skips tiles; d256 under persistent=0; head dim 512, its
// persistent walk and its grid walk under a window: four gathering warps), varlen
// queries, split-KV, and packed decode (pages of 1 to 12 rows, one and five queries). Keys past a
// sequence come from table entries of other sequences' pages.
TEST(GpuVariants, GatheredPagesMatchReference) {
  SKIP_WITHOUT_GPU();
  struct Case {
    const char* name;
    int depth;
    Mask mask;
    const char* tune;
    int page;
    CheckCase c;
    int group = 0;    // packed GQA (decode): the query heads of a KV head
    int depth_v = 0;  // V's head dim (0: depth)
  };
  auto prefill = [](int sq, std::vector<int> keys) {
    CheckCase c;
    c.batch = static_cast<int>(keys.size());
    c.seqlen_q = sq;
    c.seqlens_k = std::move(keys);
    c.num_q_heads = 4;
    c.num_kv_heads = 2;
    return c;
  };
  std::vector<Case> cases;
  for (int page : {1, 3, 100})
    cases.push_back({"d128 causal", 128, Mask::causal(), "", page, prefill(300, {300, 517})});
  cases.push_back({"d64 causal", 64, Mask::causal(), "", 1, prefill(200, {700, 201})});
  {
    Case w{"d128 window 100", 128, Mask::sliding_window(), "", 12, prefill(250, {640, 250})};
    w.c.window_left = 100;
    w.c.window_right = 0;
    cases.push_back(w);
  }
  // A walk that skips KV tiles (the block snippet's): each tile's page numbers are fetched with the
  // stage before it (gather.cuh GatherState), which must follow the walk, not n - 1.
  {
    Case m{
        "d128 skipping custom mask",
        128,
        Mask::custom("return kv_idx < 100 || kv_idx >= 700;", "return kv_lo >= 100 && kv_hi <= 700 ? SKIP : PARTIAL;"),
        "",
        1,
        prefill(150, {1000, 760})};
    m.c.custom_visible = [](int, int, int, int k) { return k < 100 || k >= 700; };
    cases.push_back(m);
  }
  cases.push_back({"d256 causal grid", 256, Mask::causal(), "persistent=0", 1, prefill(130, {130, 400})});
  for (int page : {1, 3})
    cases.push_back({"d256 causal persistent", 256, Mask::causal(), "persistent=1", page, prefill(300, {300, 517})});
  for (int page : {1, 100})
    cases.push_back(
        {"d192/128 causal persistent", 192, Mask::causal(), "persistent=1", page, prefill(260, {700, 260}), 0, 128});
  cases.push_back({"d512 causal", 512, Mask::causal(), "", 1, prefill(70, {70, 333})});
  {
    Case w{"d512 window 90 grid", 512, Mask::sliding_window(), "", 3, prefill(150, {500, 150})};
    w.c.window_left = 90;
    w.c.window_right = 7;
    cases.push_back(w);
  }
  {
    Case v{"d128 causal varlen queries", 128, Mask::causal(), "", 1, prefill(0, {400, 40, 129})};
    v.c.seqlens_q = {17, 0, 129};
    cases.push_back(v);
  }
  {
    Case s{"d128 causal split 3", 128, Mask::causal(), "persistent=0", 1, prefill(2, {3000, 900})};
    s.c.num_splits = 3;
    cases.push_back(s);
  }
  // Packed decode (the decode producer warpgroup's four gathering warps, which hold the sequence and
  // split rows by a shift for power-of-two pages, load.cuh lean_producer): pages 1, 2, 4 (shifts) and
  // 3, 12 (divisions), one query and five (speculative, bottom-right causal), split-KV.
  for (int page : {1, 2, 3, 4, 12})
    for (int sq : {1, 5}) {
      Case d{"d128 packed decode", 128, Mask::causal(), "", page, prefill(sq, {700, 64, 333}), 4};
      d.c.num_q_heads = 8;
      d.c.num_splits = page == 3 ? 3 : 0;
      cases.push_back(d);
    }
  for (const std::string& arch : runnable_archs())
    for (const Case& k : cases) {
      jit::FA4Config cfg;
      cfg.arch = arch;
      cfg.depth = k.depth;
      cfg.depth_v = k.depth_v;
      cfg.mask = k.mask;
      cfg.group = k.group;
      cfg.pack_gqa = k.group > 1;
      CheckCase c = k.c;
      c.page_size = k.page;
      const std::string what = fmt::format("{} {} Sq {} page {} splits {}{}{}", arch, k.name, c.seqlen_q, k.page,
                                           c.num_splits, *k.tune ? " " : "", k.tune);
      try {
        const auto kernel = jit::get_kernel(cfg, *k.tune ? jit::testing::tuned(k.tune) : jit::testing::env_tune());
        jit::testing::expect_matches(jit::testing::run_and_check(*kernel, c), what);
      } catch (const std::exception& e) {
        ADD_FAILURE() << what << ": " << e.what();
      }
    }
}

}  // namespace
