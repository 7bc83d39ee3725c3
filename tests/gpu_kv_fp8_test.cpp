// FP8 KV cache ("kv_dtype": "e4m3" under a bf16/fp16 dtype): e4m3 K and V with descale_k /
// descale_v per (batch, KV head), 16-bit Q and O, on every backend this GPU runs (the portable
// kernel and, on sm_90, sm_90a). Checked against the float64 reference on the dequantised K and V
// (stored e4m3 value x descale, check/gpu.cpp) with poisoned outputs, at the 16-bit tolerances:
// e4m3 -> bf16/fp16 is exact, so the kernel does the 16-bit kernel's arithmetic on the same values
// (the descales join the logit scale and O's normalisation in float32). Every case prints its
// measured errors ("GpuKvFp8 |" lines). Skips without a GPU. Run: --gtest_filter='GpuKvFp8*'.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "check/gpu.hpp"
#include "fa4jit/jit.hpp"
#include "tests/support/expect.hpp"
#include "tests/support/gpu_cases.hpp"
#include "tests/support/tune.hpp"

namespace {

using jit::DType;
using jit::Mask;
using jit::ScoreMod;
using jit::testing::CheckCase;
using jit::testing::gqa_case;

jit::FA4Config kv_fp8_config(const std::string& arch, int depth, DType dtype = DType::bf16, Mask mask = Mask::none(),
                             ScoreMod mod = ScoreMod::identity()) {
  jit::FA4Config c;
  c.arch = arch;
  c.dtype = dtype;
  c.kv_dtype = DType::e4m3;
  c.depth = depth;
  c.mask = std::move(mask);
  c.score_mod = std::move(mod);
  return c;
}

// The Q / output type beside the e4m3 cache: fp16 at head dim 96, bf16 elsewhere (both 16-bit
// types meet the converters).
DType q_dtype(int depth) { return depth == 96 ? DType::fp16 : DType::bf16; }

// Runs, prints the measured errors, and applies the 16-bit rule (CheckResult::dtype is the Q type).
void check_case(const jit::Kernel& kernel, const CheckCase& c, const std::string& what) {
  const jit::FA4Config& k = kernel.config().config;
  jit::testing::report_and_expect(
      "GpuKvFp8", fmt::format("{} {} d{} {}", k.arch, what, k.depth, c.descale ? "descale" : "no-descale"),
      fmt::format("{}+e4m3 KV", jit::to_string(k.dtype)), jit::testing::run_and_check(kernel, c));
}

// The archs this GPU runs: the portable backend's (sm_90 on an H100) and sm_90a where present.
std::vector<std::string> archs() { return jit::testing::runnable_archs(); }

// Decode, the serving case: packed GQA 4:1 (the query heads of a KV head share each K/V read), Sq 1
// and 16, contiguous and paged K/V (pages of 64 and 16 rows), split-KV (automatic and 3) and sinks.
TEST(GpuKvFp8, PackedGqaDecodeMatchesReference) {
  SKIP_WITHOUT_GPU();
  for (const std::string& arch : archs())
    for (DType dtype : {DType::bf16, DType::fp16}) {
      jit::FA4Config cfg = kv_fp8_config(arch, 128, dtype);
      cfg.group = 4;
      cfg.pack_gqa = true;
      const auto kernel = jit::get_kernel(cfg, jit::testing::env_tune());
      for (int sq : {1, 16})
        for (int page : {0, 64, 16}) {
          CheckCase c = gqa_case(sq, 2100, /*batch=*/3);
          c.seqlens_k = {2100, 1, 777};
          c.page_size = page;
          c.num_splits = page == 16 ? 3 : 0;
          c.with_sinks = page == 64;
          c.descale = page != 16 || sq != 16;
          check_case(*kernel, c,
                     fmt::format("packed GQA 4 Sq {} Sk 2100/1/777 page {} splits {}{}", sq, page, c.num_splits,
                                 c.with_sinks ? " sinks" : ""));
        }
    }
}

// Pages no TMA box takes (1 and 3) of an FP8 cache in the packed decode tile, where sm_90a's
// producer warp gathers alone by lane pairs (gather.cuh copy_own; head dim 96: 96 real bytes of
// each 128-byte row, the rest zero-filled): under causal (the lean producer) and under a mask whose
// tile walk skips (a custom snippet beside causal), with a one-key sequence, partial last tiles and
// split-KV.
TEST(GpuKvFp8, GatheredPagesMatchReference) {
  SKIP_WITHOUT_GPU();
  const std::vector<int> keys = {2100, 1, 777};
  struct Variant {
    int depth;
    bool skipping;  // a custom snippet beside causal: a tile walk that skips (not at 96: its padded rows under causal)
  };
  for (const std::string& arch : archs())
    for (const auto& [depth, skipping] : {Variant{128, false}, Variant{128, true}, Variant{96, false}}) {
      jit::FA4Config cfg = kv_fp8_config(
          arch, depth, q_dtype(depth),
          skipping ? Mask::all_of({Mask::causal(), Mask::custom("return (kv_idx + h) % 5 != 0;")}) : Mask::causal());
      cfg.group = 4;
      cfg.pack_gqa = true;
      const auto kernel = jit::get_kernel(cfg, jit::testing::env_tune());
      for (int sq : {1, 5})
        for (int page : {1, 3}) {
          CheckCase c = gqa_case(sq, keys[0], /*batch=*/3);
          c.seqlens_k = keys;
          c.page_size = page;
          c.num_splits = page == 3 ? 3 : 0;
          if (skipping)
            c.custom_visible = [&keys, sq](int b, int h, int q, int k) {
              return k <= q + keys[b] - sq && (k + h) % 5 != 0;
            };
          check_case(*kernel, c,
                     fmt::format("packed GQA 4 {} Sq {} Sk 2100/1/777 page {} splits {}",
                                 skipping ? "causal + snippet" : "causal", sq, page, c.num_splits));
        }
    }
}

// Prefill over pages no TMA box takes: the prefill producer's warp gathers alone, in row
// groups (gather.cuh GatherTile::copy), into the e4m3 stages its converters read; head dims 128, 96
// and 64 (real bytes 128, 96 and 64 of 128-byte rows). Partial last tiles (zero-filled rows past the
// keys), split-KV, and a page size that is no power of two.
TEST(GpuKvFp8, GatheredPagesPrefillMatchesReference) {
  SKIP_WITHOUT_GPU();
  for (const std::string& arch : archs())
    for (int depth : {128, 96, 64}) {
      const auto kernel =
          jit::get_kernel(kv_fp8_config(arch, depth, q_dtype(depth), Mask::causal()), jit::testing::env_tune());
      for (int page : {1, 3}) {
        CheckCase c = gqa_case(300, 517, /*batch=*/3);
        c.seqlens_k = {517, 300, 301};
        c.page_size = page;
        c.num_splits = page == 3 && depth == 128 ? 2 : 0;
        check_case(*kernel, c, fmt::format("causal Sq 300 Sk 517/300/301 page {} splits {}", page, c.num_splits));
      }
    }
}

// Prefill over an FP8 cache: MHA and GQA, none / causal, head dims 64, 96 (sm_90a, padded) and 128,
// bf16 and fp16, Sq == Sk and Sq != Sk.
TEST(GpuKvFp8, PrefillMatchesReference) {
  SKIP_WITHOUT_GPU();
  struct Shape {
    int sq, sk;
  };
  const Shape shapes[] = {{1, 1}, {300, 300}, {1000, 1000}, {113, 2049}};
  for (const std::string& arch : archs())
    for (int depth : {64, 96, 128})
      for (bool causal : {false, true}) {
        jit::FA4Config cfg = kv_fp8_config(arch, depth, q_dtype(depth), causal ? Mask::causal() : Mask::none());
        const auto kernel = jit::get_kernel(cfg, jit::testing::env_tune());
        for (const Shape& s : shapes)
          for (int group : {1, 4}) {
            CheckCase c;
            c.batch = s.sk >= 1000 ? 1 : 2;
            c.num_kv_heads = 2;
            c.num_q_heads = 2 * group;
            c.seqlen_q = s.sq;
            c.seqlen_k = s.sk;
            check_case(*kernel, c,
                       fmt::format("{} group {} Sq {} Sk {}", causal ? "causal" : "none", group, s.sq, s.sk));
          }
      }
}

// Masks and score-mods on top: sliding window with softcap, a custom score-mod snippet, varlen
// queries and keys (empty sequences included), and a paged causal prefill.
TEST(GpuKvFp8, VariantsMatchReference) {
  SKIP_WITHOUT_GPU();
  for (const std::string& arch : archs()) {
    {
      const auto kernel = jit::get_kernel(
          kv_fp8_config(arch, 128, DType::bf16, Mask::sliding_window(), ScoreMod::softcap()), jit::testing::env_tune());
      CheckCase c = gqa_case(700, 900);
      c.num_q_heads = 4;
      c.window_left = 100;
      c.window_right = 0;
      c.softcap = 5.0f;
      check_case(*kernel, c, "sliding window (100, 0) softcap 5 Sq 700 Sk 900");
    }
    {
      const auto kernel = jit::get_kernel(
          kv_fp8_config(arch, 64, DType::fp16, Mask::none(), ScoreMod::custom("return score * 0.5f - 0.01f * h;")),
          jit::testing::env_tune());
      CheckCase c = gqa_case(129, 257);
      c.custom_score_mod = [](double s, int, int h, int, int) { return s * 0.5 - 0.01 * h; };
      check_case(*kernel, c, "custom score-mod Sq 129 Sk 257");
    }
    {
      const auto kernel =
          jit::get_kernel(kv_fp8_config(arch, 128, DType::bf16, Mask::causal()), jit::testing::env_tune());
      CheckCase v;
      v.num_q_heads = 4;
      v.num_kv_heads = 2;
      v.seqlens_q = {17, 0, 300, 128, 1, 200};
      v.seqlens_k = {40, 5, 300, 0, 700, 129};
      check_case(*kernel, v, "causal varlen");
      CheckCase p;
      p.num_q_heads = 8;
      p.num_kv_heads = 2;
      p.batch = 3;
      p.seqlen_q = 33;
      p.seqlens_k = {1000, 64, 517};
      p.page_size = 64;
      check_case(*kernel, p, "causal paged 64 Sq 33");
    }
  }
}

// sm_90a runs a bf16 Q's MMAs in fp16 (Q converted once in shared memory, docs/VARIANTS.md): exact
// for |q| in 2^-14 .. 65504, so queries of standard deviation 500 (|q| up to ~2500, scores in the thousands
// sharpen the softmax to a few keys) and 1e-3 must meet the bf16 tolerance; at 1e-5 the smallest
// values round to fp16 subnormals, whose absolute error (2^-25) is far below what the scores resolve.
TEST(GpuKvFp8, QueriesFarFromUnitScaleMatchReference) {
  SKIP_WITHOUT_GPU();
  for (const std::string& arch : archs()) {
    jit::FA4Config cfg = kv_fp8_config(arch, 128);
    cfg.group = 4;
    cfg.pack_gqa = true;
    const auto kernel = jit::get_kernel(cfg, jit::testing::env_tune());
    for (float q_stddev : {500.0f, 1e-3f, 1e-5f})
      for (int sq : {1, 40}) {
        CheckCase c = gqa_case(sq, 1500);
        c.q_stddev = q_stddev;
        check_case(*kernel, c, fmt::format("packed GQA 4 Sq {} Sk 1500 q stddev {:g}", sq, q_stddev));
      }
  }
}

// Refused before anything runs: 16-bit K/V for an FP8-KV kernel, e4m3 K/V for a 16-bit one, and
// descale_q (its Q is 16-bit); the output buffer stays as it was.
TEST(GpuKvFp8, LaunchRejectsMismatchedKvAndDescaleQBeforeRunning) {
  SKIP_WITHOUT_GPU();
  for (const std::string& arch : archs()) {
    const auto kv8 = jit::get_kernel(kv_fp8_config(arch, 128), jit::testing::env_tune());
    jit::FA4Config plain;
    plain.arch = arch;
    const auto bf16 = jit::get_kernel(plain, jit::testing::env_tune());
    const jit::testing::RefusedLaunchBuffers buffers;  // (B 2, S 128, H 4, D 128), bf16 Q
    EXPECT_THROW(kv8->launch(buffers.args(DType::bf16, DType::bf16)), jit::LaunchError) << arch;
    EXPECT_THROW(bf16->launch(buffers.args(DType::bf16, DType::e4m3)), jit::LaunchError) << arch;
    jit::LaunchArgs a = buffers.args(DType::bf16, DType::e4m3);
    a.descale_q = buffers.descale();
    EXPECT_THROW(kv8->launch(a), jit::LaunchError) << arch;
    ASSERT_EQ(buffers.written_bytes(), 0u) << arch << ": a refused launch wrote output";
  }
}

}  // namespace
