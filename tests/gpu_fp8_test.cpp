// FP8 (e4m3 Q, K, V; bf16 or fp16 O) on sm_90a against the float64 reference on the dequantised
// inputs (stored value x descale, check/gpu.cpp), with poisoned outputs, through the same
// run_and_check as the 16-bit GPU tests. Every case prints its measured errors (the "GpuFp8 |"
// lines), the data behind check/gpu.hpp's kFp8RelL2Tolerance. Skips without a GPU, and on GPUs
// other than sm_90 (the FP8 kernels are sm_90a's). Run: --gtest_filter='GpuFp8*'.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "check/gpu.hpp"
#include "check/host_numeric.hpp"
#include "check/reference.hpp"
#include "check/safetensors.hpp"
#include "fa4jit/jit.hpp"
#include "tests/support/cli_process.hpp"
#include "tests/support/expect.hpp"
#include "tests/support/gpu_cases.hpp"
#include "tests/support/tune.hpp"

namespace {

using jit::DType;
using jit::Mask;
using jit::ScoreMod;
using jit::testing::CheckCase;

#define SKIP_WITHOUT_HOPPER()                                                                                    \
  do {                                                                                                           \
    SKIP_WITHOUT_GPU();                                                                                          \
    if (jit::current_device_arch() != "sm_90a")                                                                  \
      GTEST_SKIP() << "needs an sm_90 GPU: FP8 kernels are sm_90a's (this GPU is " << jit::current_device_arch() \
                   << ")";                                                                                       \
  } while (0)

jit::FA4Config fp8_config(int depth, Mask mask = Mask::none(), DType out = DType::bf16,
                          ScoreMod mod = ScoreMod::identity()) {
  jit::FA4Config c;
  c.arch = "sm_90a";
  c.dtype = DType::e4m3;
  c.output_dtype = out;
  c.depth = depth;
  c.mask = std::move(mask);
  c.score_mod = std::move(mod);
  return c;
}

// Runs, prints the measured errors (always: they justify the tolerance), and applies the rule.
void check_case(const jit::Kernel& kernel, const CheckCase& c, const std::string& what) {
  const jit::FA4Config& k = kernel.config().config;
  jit::testing::report_and_expect(
      "GpuFp8", fmt::format("{} d{} {}", what, k.depth, c.descale ? "descale" : "no-descale"),
      fmt::format("e4m3->{}", jit::to_string(*k.output_dtype)), jit::testing::run_and_check(kernel, c));
}

struct Shape {
  int sq, sk;
};

// The 16-bit matrix's shape: {D 64, 128} x {none, causal} x {MHA, GQA 4:1} x {bf16, fp16 O} x
// {Sq = Sk in 1, 100, 1000; Sq != Sk} x {random descale, none}.
TEST(GpuFp8, MatrixMatchesReference) {
  SKIP_WITHOUT_HOPPER();
  const Shape shapes[] = {{1, 1}, {100, 100}, {1000, 1000}, {1, 300}, {113, 203}, {1000, 17}, {256, 2049}};
  for (int depth : {64, 128})
    for (DType out : {DType::bf16, DType::fp16})
      for (bool causal : {false, true})
        for (int group : {1, 4}) {
          jit::FA4Config cfg = fp8_config(depth, causal ? Mask::causal() : Mask::none(), out);
          cfg.group = group;
          const auto kernel = jit::get_kernel(cfg, jit::testing::env_tune());
          for (const Shape& s : shapes)
            for (bool descale : {true, false}) {
              CheckCase c;
              c.batch = s.sq >= 1000 || s.sk >= 1000 ? 1 : 2;
              c.num_kv_heads = 2;
              c.num_q_heads = 2 * group;
              c.seqlen_q = s.sq;
              c.seqlen_k = s.sk;
              c.descale = descale;
              check_case(*kernel, c,
                         fmt::format("{} group {} Sq {} Sk {}", causal ? "causal" : "none", group, s.sq, s.sk));
            }
        }
}

// Masks and score-mods that change the scores or which keys a row sees: a sliding window, softcap,
// a custom score-mod snippet, sinks (one more term in each row's sum).
TEST(GpuFp8, VariantsMatchReference) {
  SKIP_WITHOUT_HOPPER();
  using jit::testing::gqa_case;
  for (int depth : {64, 128}) {
    {
      const auto kernel = jit::get_kernel(fp8_config(depth, Mask::sliding_window()), jit::testing::env_tune());
      CheckCase c = gqa_case(700, 900);
      c.window_left = 100;
      c.window_right = 0;
      check_case(*kernel, c, "sliding window (100, 0) Sq 700 Sk 900");
      c = gqa_case(513, 513);
      c.window_left = 64;
      c.window_right = 32;
      c.descale = false;
      check_case(*kernel, c, "sliding window (64, 32) Sq 513");
    }
    {
      const auto kernel = jit::get_kernel(fp8_config(depth, Mask::causal(), DType::bf16, ScoreMod::softcap()),
                                          jit::testing::env_tune());
      CheckCase c = gqa_case(500, 500);
      c.softcap = 5.0f;
      check_case(*kernel, c, "causal softcap 5 Sq 500");
    }
    {
      const auto kernel = jit::get_kernel(
          fp8_config(depth, Mask::none(), DType::fp16,
                     ScoreMod::custom("return score * 0.5f + (kv_idx % 7 == 0 ? 1.0f : 0.0f) - 0.001f * h;")),
          jit::testing::env_tune());
      CheckCase c = gqa_case(129, 257);
      c.custom_score_mod = [](double s, int, int h, int, int k) {
        return s * 0.5 + (k % 7 == 0 ? 1.0 : 0.0) - 0.001 * h;
      };
      check_case(*kernel, c, "custom score-mod snippet Sq 129 Sk 257");
    }
    {
      const auto kernel = jit::get_kernel(fp8_config(depth, Mask::causal()), jit::testing::env_tune());
      CheckCase c = gqa_case(300, 300);
      c.with_sinks = true;
      check_case(*kernel, c, "causal sinks Sq 300");
    }
  }
}

// Packed variable-length sequences (zero-length ones included) and seqused_k over padded keys.
TEST(GpuFp8, VarlenMatchesReference) {
  SKIP_WITHOUT_HOPPER();
  for (int depth : {64, 128})
    for (const Mask& mask : {Mask::none(), Mask::causal()}) {
      const auto kernel = jit::get_kernel(fp8_config(depth, mask), jit::testing::env_tune());
      CheckCase v;
      v.num_q_heads = 4;
      v.num_kv_heads = 2;
      v.seqlens_q = {17, 0, 300, 128, 1, 200};
      v.seqlens_k = {40, 5, 300, 0, 700, 129};
      check_case(*kernel, v, fmt::format("{} varlen", mask.kind == Mask::Kind::causal ? "causal" : "none"));
      CheckCase u;
      u.num_q_heads = 4;
      u.num_kv_heads = 1;
      u.batch = 3;
      u.seqlen_q = 150;
      u.seqlen_k = 400;
      u.seqlens_k = {400, 1, 257};
      check_case(*kernel, u, fmt::format("{} seqused_k", mask.kind == Mask::Kind::causal ? "causal" : "none"));
    }
}

// Paged K/V (pages of 64 rows in random order), with padded and with varlen queries.
TEST(GpuFp8, PagedKvMatchesReference) {
  SKIP_WITHOUT_HOPPER();
  for (int depth : {64, 128}) {
    const auto kernel = jit::get_kernel(fp8_config(depth, Mask::causal()), jit::testing::env_tune());
    CheckCase c;
    c.num_q_heads = 8;
    c.num_kv_heads = 2;
    c.batch = 3;
    c.seqlen_q = 33;
    c.seqlens_k = {1000, 64, 517};
    c.page_size = 64;
    check_case(*kernel, c, "causal paged 64");
    CheckCase v;
    v.num_q_heads = 4;
    v.num_kv_heads = 4;
    v.seqlens_q = {5, 0, 130};
    v.seqlens_k = {300, 17, 130};
    v.page_size = 64;
    check_case(*kernel, v, "causal paged 64 varlen");
  }
}

// Split-KV: 3 CTAs per Q tile and the combine kernel (which reads the 16-bit O type's partials).
TEST(GpuFp8, SplitKvMatchesReference) {
  SKIP_WITHOUT_HOPPER();
  for (int depth : {64, 128})
    for (DType out : {DType::bf16, DType::fp16}) {
      const auto kernel = jit::get_kernel(fp8_config(depth, Mask::causal(), out), jit::testing::env_tune());
      CheckCase c = jit::testing::gqa_case(3, 3000);
      c.num_splits = 3;
      check_case(*kernel, c, "causal splits 3 Sq 3 Sk 3000");
      c.with_sinks = true;
      c.descale = false;
      check_case(*kernel, c, "causal splits 3 sinks Sq 3 Sk 3000");
    }
}

// Packed GQA decode (the 4 query heads of a KV head in one tile): Sq 1 (split) and 16, with a
// head-dependent score-mod that catches a wrong row -> head mapping (and so a wrong descale_q row).
TEST(GpuFp8, PackedGqaDecodeMatchesReference) {
  SKIP_WITHOUT_HOPPER();
  for (int depth : {64, 128}) {
    jit::FA4Config cfg = fp8_config(depth, Mask::causal(), DType::bf16, ScoreMod::custom("return score - 0.05f * h;"));
    cfg.group = 4;
    cfg.pack_gqa = true;
    const auto kernel = jit::get_kernel(cfg, jit::testing::env_tune());
    for (int sq : {1, 16}) {
      CheckCase c = jit::testing::gqa_case(sq, 700);
      c.num_splits = sq == 1 ? 3 : 1;
      c.custom_score_mod = [](double s, int, int h, int, int) { return s - 0.05 * h; };
      check_case(*kernel, c, fmt::format("causal packed GQA 4 Sq {} Sk 700 splits {}", sq, c.num_splits));
    }
  }
}

// Refused before anything runs: descale factors on a 16-bit kernel, 16-bit inputs to an FP8
// kernel, an e4m3 O; the output buffer stays as it was.
TEST(GpuFp8, LaunchRejectsMismatchedDtypesAndDescaleBeforeRunning) {
  SKIP_WITHOUT_HOPPER();
  const auto fp8 = jit::get_kernel(fp8_config(128), jit::testing::env_tune());
  jit::FA4Config bf16_cfg;
  bf16_cfg.arch = "sm_90a";
  const auto bf16 = jit::get_kernel(bf16_cfg, jit::testing::env_tune());
  const jit::testing::RefusedLaunchBuffers buffers;  // (B 2, S 128, H 4, D 128)
  jit::LaunchArgs a = buffers.args(DType::bf16, DType::bf16);
  a.descale_k = buffers.descale();
  EXPECT_THROW(bf16->launch(a), jit::LaunchError);
  a = buffers.args(DType::bf16, DType::bf16);
  EXPECT_THROW(fp8->launch(a), jit::LaunchError);
  a = buffers.args(DType::e4m3, DType::e4m3);
  a.o.dtype = DType::e4m3;
  EXPECT_THROW(fp8->launch(a), jit::LaunchError);
  a = buffers.args(DType::e4m3, DType::e4m3);
  a.q.stride[1] = 4 * 128 + 8;  // 8 bytes of e4m3: not a 16-byte step
  a.q.stride[0] = 128 * a.q.stride[1];
  EXPECT_THROW(fp8->launch(a), jit::LaunchError);
  ASSERT_EQ(buffers.written_bytes(), 0u) << "a refused launch wrote output";
}

// ---- the CLI: `fa4jit run` on F8_E4M3 safetensors, `check` and `bench` on an e4m3 config ----------

using jit::testing::cli_path;
using jit::testing::run_shell;

// e4m3 q, k, v and F32 descale_q/k/v (B, Hkv) in a file -> bf16 o and lse, against the reference on
// the dequantised inputs.
TEST(GpuFp8, CliRunSafetensorsMatchesReference) {
  SKIP_WITHOUT_HOPPER();
  namespace fs = std::filesystem;
  const int B = 2, Sq = 300, Sk = 457, H = 8, Hkv = 2, D = 128;
  const fs::path dir = fs::temp_directory_path() / ("fa4jit_fp8_run_" + std::to_string(std::random_device{}()));
  fs::create_directories(dir);
  jit::testing::Problem p;
  p.batch = B;
  p.seqlen_q = Sq;
  p.seqlen_k = Sk;
  p.num_q_heads = H;
  p.num_kv_heads = Hkv;
  p.depth = D;
  p.visible = [](int, int, int q, int k) { return k <= q + (Sk - Sq); };  // causal, bottom-right
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> dist;
  std::uniform_real_distribution<float> factor(0.5f, 2.0f);
  std::map<std::string, jit::safetensors::TensorData> in;
  auto make = [&](const char* name, int s, int h, std::vector<float>& f) {
    std::vector<float> d(static_cast<std::size_t>(B) * Hkv);
    for (float& x : d) x = factor(rng);
    jit::safetensors::TensorData t{"F8_E4M3", {B, s, h, D}, std::string(static_cast<std::size_t>(B) * s * h * D, '\0')};
    f.resize(t.bytes.size());
    for (std::size_t i = 0; i < f.size(); ++i) {
      const std::uint8_t code = jit::host::float_to_e4m3(dist(rng));
      t.bytes[i] = static_cast<char>(code);
      const std::size_t b = i / (static_cast<std::size_t>(s) * h * D), head = i / D % h;
      f[i] = jit::host::e4m3_to_float(code) * d[b * Hkv + head / (h / Hkv)];
    }
    in[name] = std::move(t);
    jit::safetensors::TensorData ds{"F32", {B, Hkv}, std::string(d.size() * 4, '\0')};
    std::memcpy(ds.bytes.data(), d.data(), ds.bytes.size());
    in[std::string("descale_") + name] = std::move(ds);
  };
  make("q", Sq, H, p.q);
  make("k", Sk, Hkv, p.k);
  make("v", Sk, Hkv, p.v);
  jit::safetensors::write(dir / "in.safetensors", in);
  std::ofstream(dir / "c.json") << R"({"depth": 128, "mask": "causal", "dtype": "e4m3"})";
  const auto r = run_shell(cli_path() + " run --arch sm_90a --config " + (dir / "c.json").string() + " --inputs " +
                           (dir / "in.safetensors").string() + " --output " + (dir / "out.safetensors").string());
  ASSERT_EQ(r.rc, 0) << r.out;
  const auto out = jit::safetensors::read(dir / "out.safetensors");
  ASSERT_EQ(out.at("o").dtype, "BF16");
  ASSERT_EQ(out.at("o").bytes.size(), static_cast<std::size_t>(B) * Sq * H * D * 2);
  const auto ref = jit::testing::reference_attention(p);
  const auto* o = reinterpret_cast<const std::uint16_t*>(out.at("o").bytes.data());
  const auto* lse = reinterpret_cast<const float*>(out.at("lse").bytes.data());
  double err2 = 0, ref2 = 0, lse_err = 0;
  for (std::size_t i = 0; i < ref.o.size(); ++i) {
    const double d = jit::host::bf16_to_float(o[i]) - ref.o[i];
    err2 += d * d;
    ref2 += ref.o[i] * ref.o[i];
  }
  for (std::size_t i = 0; i < ref.lse.size(); ++i) lse_err = std::max(lse_err, std::fabs(lse[i] - ref.lse[i]));
  const double rel = std::sqrt(err2 / ref2);
  std::printf("GpuFp8 | %-70s | rel_l2 %.3e | lse_max_abs %.3e\n", "fa4jit run F8_E4M3 + descale", rel, lse_err);
  EXPECT_LE(rel, jit::testing::kFp8RelL2Tolerance);
  EXPECT_LE(lse_err, jit::testing::kLseTolerance);
  fs::remove_all(dir);
}

TEST(GpuFp8, CliCheckAndBenchRunAnFp8Config) {
  SKIP_WITHOUT_HOPPER();
  namespace fs = std::filesystem;
  const fs::path cfg = fs::temp_directory_path() / ("fa4jit_fp8_" + std::to_string(std::random_device{}()) + ".json");
  std::ofstream(cfg)
      << R"({"arch": "sm_90a", "depth": 128, "mask": "causal", "dtype": "e4m3", "output_dtype": "fp16"})";
  for (const std::string flags : {"", " --no-descale", " --seqlens-q 5,0,130 --seqlens-k 300,17,130 --page-size 64"}) {
    const auto r = run_shell(cli_path() + " check --require-gpu --config " + cfg.string() +
                             " --heads 8 --kv-heads 2 --seqlen 700" + flags);
    std::printf("%s", r.out.c_str());
    EXPECT_EQ(r.rc, 0) << flags << ": " << r.out;
    EXPECT_NE(
        r.out.find(flags.find("no-descale") != std::string::npos ? "e4m3->fp16 no-descale" : "e4m3->fp16 descale"),
        std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("rel_l2="), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("PASS"), std::string::npos) << r.out;
  }
  const auto bench =
      run_shell(cli_path() + " bench --json --iters 3 --warmup 1 --batch 2 --seqlen 1024 --config " + cfg.string());
  EXPECT_EQ(bench.rc, 0) << bench.out;
  EXPECT_NE(bench.out.find("\"dtype\":\"e4m3\""), std::string::npos) << bench.out;
  EXPECT_NE(bench.out.find("\"output_dtype\":\"fp16\""), std::string::npos) << bench.out;
  fs::remove(cfg);
}

}  // namespace
