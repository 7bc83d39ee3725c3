// `fa4jit run` end to end on the GPU: q, k, v in a safetensors file -> o and lse in another,
// compared with the float64 reference. Skips without a GPU.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "check/gpu.hpp"
#include "check/host_numeric.hpp"
#include "check/reference.hpp"
#include "check/safetensors.hpp"
#include "tests/support/cli_process.hpp"
#include "tests/support/expect.hpp"

namespace fs = std::filesystem;
using jit::testing::cli_path;
using jit::testing::run_shell;

namespace {

TEST(GpuCliRun, SafetensorsInOutMatchesReference) {
  SKIP_WITHOUT_GPU();
  const int B = 2, Sq = 300, Sk = 457, H = 8, Hkv = 2, D = 128;
  const fs::path dir = fs::temp_directory_path() / ("fa4jit_run_" + std::to_string(std::random_device{}()));
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
  std::map<std::string, jit::safetensors::TensorData> in;
  auto make = [&](const char* name, int s, int h, std::vector<float>& f) {
    jit::safetensors::TensorData t{"BF16", {B, s, h, D}, std::string(static_cast<size_t>(B) * s * h * D * 2, '\0')};
    f.resize(static_cast<size_t>(B) * s * h * D);
    auto* bits = reinterpret_cast<std::uint16_t*>(t.bytes.data());
    for (size_t i = 0; i < f.size(); ++i) {
      bits[i] = jit::host::float_to_bf16(dist(rng));
      f[i] = jit::host::bf16_to_float(bits[i]);
    }
    in[name] = std::move(t);
  };
  make("q", Sq, H, p.q);
  make("k", Sk, Hkv, p.k);
  make("v", Sk, Hkv, p.v);
  jit::safetensors::write(dir / "in.safetensors", in);
  std::ofstream(dir / "c.json") << R"({"depth": 128, "mask": "causal"})";

  const std::string cmd = cli_path() + " run --config " + (dir / "c.json").string() + " --inputs " +
                          (dir / "in.safetensors").string() + " --output " + (dir / "out.safetensors").string();
  const auto r = run_shell(cmd);
  std::printf("%s", r.out.c_str());
  ASSERT_EQ(r.rc, 0) << cmd;  // its output is printed above
  const auto out = jit::safetensors::read(dir / "out.safetensors");
  const auto ref = jit::testing::reference_attention(p);
  const auto* o = reinterpret_cast<const std::uint16_t*>(out.at("o").bytes.data());
  const auto* lse = reinterpret_cast<const float*>(out.at("lse").bytes.data());
  EXPECT_EQ(out.at("lse").shape, (std::vector<std::int64_t>{B, H, Sq}));
  double err2 = 0, ref2 = 0, lse_err = 0;
  for (size_t i = 0; i < ref.o.size(); ++i) {
    const double d = jit::host::bf16_to_float(o[i]) - ref.o[i];
    err2 += d * d;
    ref2 += ref.o[i] * ref.o[i];
  }
  for (size_t i = 0; i < ref.lse.size(); ++i) lse_err = std::max(lse_err, std::fabs(lse[i] - ref.lse[i]));
  EXPECT_LE(std::sqrt(err2 / ref2), 1e-2);
  EXPECT_LE(lse_err, 2e-2);
  fs::remove_all(dir);
}

}  // namespace

namespace {

// Every variant feature is selectable from the CLI: `check` runs it against the reference.
TEST(GpuCliRun, CheckSelectsVariantFeatures) {
  SKIP_WITHOUT_GPU();
  for (const std::string args : {
           "--seqlens-q 5,0,130 --seqlens-k 300,17,130 --page-size 64 --heads 8 --kv-heads 2 --pack-gqa",
           "--seqlen-q 1 --seqlen-k 5000 --heads 8 --kv-heads 2 --splits 4 --sinks",
           "--batch 2 --seqlen-q 100 --seqlen-k 700 --seqlens-k 700,333 --heads 4 --kv-heads 4",
       }) {
    const std::string cmd = cli_path() + " check --require-gpu " + args;
    const auto r = run_shell(cmd);
    std::printf("%s", r.out.c_str());
    EXPECT_EQ(r.rc, 0) << cmd;
  }
}

// `fa4jit bench` times what it is asked for: the softcap score-mod's cap and the sinks reach the
// launch (they did not before run 39: the softcap rows of `tools/gpu.sh ab` failed), and the JSON
// carries the per-call, back-to-back and host times.
TEST(GpuCliRun, BenchPassesScoreModArgumentsAndReportsHostTime) {
  SKIP_WITHOUT_GPU();
  const fs::path cfg = fs::temp_directory_path() / ("fa4jit_bench_" + std::to_string(std::random_device{}()) + ".json");
  std::ofstream(cfg) << R"({"depth": 128, "mask": "causal", "score_mod": "softcap"})";
  const std::string base = cli_path() + " bench --config " + cfg.string() +
                           " --batch 1 --heads 4 --kv-heads 4 --seqlen 512 --iters 3 --warmup 1 --json";
  const auto r = run_shell(base + " --softcap 30 --sinks");
  ASSERT_EQ(r.rc, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out.substr(r.out.rfind('{')));
  EXPECT_GT(j.at("ms").get<double>(), 0.0);
  EXPECT_GT(j.at("ms_stream").get<double>(), 0.0);
  EXPECT_GT(j.at("host_launch_us").get<double>(), 0.0);
  const auto no_cap = run_shell(base);  // the launch refuses a softcap kernel without its cap
  EXPECT_NE(no_cap.rc, 0);
  EXPECT_NE(no_cap.out.find("softcap"), std::string::npos) << no_cap.out;
  fs::remove(cfg);
}

// `fa4jit bench` launches the mask's extents it is given (`--window`, `--chunk`, `--mask-prefix`;
// before run 87 it left them unbounded, so windowed rows timed full attention), and the automatic
// split sees the window: 128 keys over 4k are at most 3 KV tiles, never split (ScheduleModel::kv_tiles).
TEST(GpuCliRun, BenchLaunchesTheWindowItIsGiven) {
  SKIP_WITHOUT_GPU();
  const fs::path cfg = fs::temp_directory_path() / ("fa4jit_bench_" + std::to_string(std::random_device{}()) + ".json");
  std::ofstream(cfg) << R"({"depth": 64, "mask": "sliding_window"})";
  const auto r = run_shell(cli_path() + " bench --config " + cfg.string() +
                           " --pack-gqa --batch 32 --heads 16 --kv-heads 2 --seqlen-q 1 --seqlen-k 4096 --window 127,0"
                           " --iters 3 --warmup 1 --json");
  ASSERT_EQ(r.rc, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out.substr(r.out.rfind('{')));
  EXPECT_EQ(j.at("window"), nlohmann::json::array({127, 0}));
  EXPECT_EQ(j.at("num_splits").get<int>(), 1);
  fs::remove(cfg);
}

}  // namespace
