// The fa4jit command line, run as a real process on a private cache directory.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "check/gpu.hpp"
#include "check/host_numeric.hpp"
#include "check/safetensors.hpp"
#include "fa4jit/errors.hpp"
#include "tests/support/cli_process.hpp"

namespace fs = std::filesystem;

namespace {

using Result = jit::testing::CliResult;
using Cli = jit::testing::CliProcessTest;

// `fa4jit bench` inputs (testing::timing_input_bytes): the element type's bytes, random normal
// values (mean 0, standard deviation 1), different blocks past the 2^22-element pool, and no zeros
// run (zeros would time faster than real data).
TEST(BenchInputs, TimingBytesAreRandomNormalOfTheType) {
  for (const jit::DType t : {jit::DType::bf16, jit::DType::fp16, jit::DType::e4m3}) {
    std::mt19937 rng(7);
    const std::size_t size = static_cast<std::size_t>(jit::dtype_size(t));
    const std::size_t n = (std::size_t{1} << 22) + (std::size_t{3} << 20) + 5;  // past the pool, a partial block
    const std::string bytes = jit::testing::timing_input_bytes(t, n, rng);
    ASSERT_EQ(bytes.size(), n * size) << jit::to_string(t);
    double sum = 0, sum2 = 0;
    std::size_t zeros = 0;
    for (std::size_t i = 0; i < n; i += 97) {  // a sample over the whole buffer
      std::uint16_t b = 0;
      std::memcpy(&b, bytes.data() + i * size, size);
      const double x = jit::host::from_bits(t, b);
      ASSERT_TRUE(std::isfinite(x)) << jit::to_string(t) << " element " << i;
      sum += x;
      sum2 += x * x;
      zeros += x == 0.0;
    }
    const double m = static_cast<double>((n + 96) / 97), mean = sum / m, sd = std::sqrt(sum2 / m - mean * mean);
    EXPECT_NEAR(mean, 0.0, 0.02) << jit::to_string(t);
    EXPECT_NEAR(sd, 1.0, 0.05) << jit::to_string(t);
    EXPECT_LT(static_cast<double>(zeros) / m, 0.02) << jit::to_string(t);
    // The 2^20-element blocks past the pool start at random pool offsets: no two alike.
    const std::size_t block = (std::size_t{1} << 20) * size, pool = (std::size_t{1} << 22) * size;
    EXPECT_NE(bytes.compare(pool, block, bytes, pool + block, block), 0) << jit::to_string(t);
    EXPECT_NE(bytes.compare(0, block, bytes, pool, block), 0) << jit::to_string(t);
  }
  std::mt19937 rng(1);
  EXPECT_EQ(jit::testing::timing_input_bytes(jit::DType::bf16, 10, rng).size(), 20u);
}

TEST_F(Cli, InfoWorksWithoutAGpu) {
  const Result r = run("info");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("nvrtc: 13."), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("sm_100a"), std::string::npos) << r.out;
}

TEST_F(Cli, GenPrintsDeterministicSource) {
  const Result a = run("gen --preset llama3-8b --arch sm_90a");
  const Result b = run("gen --preset llama3-8b --arch sm_90a");
  EXPECT_EQ(a.rc, 0) << a.out;
  EXPECT_EQ(a.out, b.out);
  EXPECT_NE(a.out.find("extern \"C\" __global__"), std::string::npos);
  EXPECT_NE(a.out.find("\"group\":4"), std::string::npos);  // the config comment: the preset reached the source
  const Result key = run("gen --preset llama3-8b --arch sm_90a --key");
  EXPECT_EQ(key.out.size(), 33u) << key.out;  // 32 hex chars + newline
}

TEST_F(Cli, PrewarmCompilesThenHits) {
  const auto cfg = write("c.json", R"({"configs": [{"depth": 64, "mask": "causal"}], "presets": ["llama3-8b"]})");
  const Result first = run("prewarm --config " + cfg.string() + " --arch sm_90a,sm_100a --jobs 2");
  EXPECT_EQ(first.rc, 0) << first.out;
  EXPECT_NE(first.out.find("4 kernels: 4 compiled, 0 hit, 0 failed"), std::string::npos) << first.out;
  const Result second = run("prewarm --config " + cfg.string() + " --arch sm_90a,sm_100a --jobs 2");
  EXPECT_EQ(second.rc, 0) << second.out;
  EXPECT_NE(second.out.find("4 kernels: 0 compiled, 4 hit, 0 failed"), std::string::npos) << second.out;
  const Result ls = run("cache ls");
  EXPECT_EQ(ls.rc, 0) << ls.out;
  // The 4 kernels and their split-KV combine kernels: d64 and d128 on each arch.
  EXPECT_EQ(std::count(ls.out.begin(), ls.out.end(), '\n'), 8) << ls.out;
  int combines = 0;
  for (auto at = ls.out.find("mask=(combine)"); at != std::string::npos; at = ls.out.find("mask=(combine)", at + 1))
    ++combines;
  EXPECT_EQ(combines, 4) << ls.out;
}

TEST_F(Cli, PrewarmNamesAFailingKernelAndExitsNonZero) {
  const auto cfg = write("bad.json", R"([{"depth": 128, "score_mod": {"kind": "custom", "snippet": "return nope;"}}])");
  const Result r = run("prewarm --config " + cfg.string() + " --arch sm_90a");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("failed: sm_90a d128"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("score_mod(1)"), std::string::npos) << r.out;
}

TEST_F(Cli, BadConfigIsRefusedNamingTheField) {
  const auto cfg = write("typo.json", R"({"depht": 64})");
  const Result r = run("gen --config " + cfg.string() + " --arch sm_90a");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("unknown field 'depht'"), std::string::npos) << r.out;
  const Result arch = run("prewarm --preset default --arch sm_70");
  EXPECT_NE(arch.rc, 0);
  EXPECT_NE(arch.out.find("arch: 'sm_70' is not supported"), std::string::npos) << arch.out;
}

TEST_F(Cli, RunRefusesMissingInputsClearly) {
  const auto cfg = write("c.json", R"({"depth": 64})");
  const Result r = run("run --config " + cfg.string() + " --inputs " + (dir_ / "none.safetensors").string() +
                       " --output " + (dir_ / "o.safetensors").string() + " --arch sm_90a");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("cannot open"), std::string::npos) << r.out;
}

TEST(Safetensors, RoundTripsAndRejectsTruncatedFiles) {
  const fs::path p = fs::temp_directory_path() / "fa4jit_st_test.safetensors";
  std::map<std::string, jit::safetensors::TensorData> t;
  t["q"] = {"BF16", {1, 3, 2, 4}, std::string(48, '\x11')};
  t["lse"] = {"F32", {1, 2, 3}, std::string(24, '\x22')};
  jit::safetensors::write(p, t);
  const auto back = jit::safetensors::read(p);
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back.at("q").shape, t["q"].shape);
  EXPECT_EQ(back.at("q").bytes, t["q"].bytes);
  EXPECT_EQ(back.at("lse").dtype, "F32");
  fs::resize_file(p, fs::file_size(p) - 5);
  EXPECT_THROW(jit::safetensors::read(p), jit::Error);
  fs::remove(p);
}

}  // namespace

namespace {

TEST_F(Cli, CacheVerifyExportImportAndPrune) {
  ASSERT_EQ(run("prewarm --preset default --arch sm_80 --jobs 2").rc, 0);
  const Result ex = run("cache export " + (dir_ / "a.fa4c").string());
  EXPECT_EQ(ex.rc, 0) << ex.out;
  EXPECT_NE(ex.out.find("exported 6 entries"), std::string::npos) << "4 kernels, 2 combine kernels: " << ex.out;
  // Damage one entry: verify must find it, remove it, and the rest must survive.
  fs::path victim;
  for (const auto& e : fs::recursive_directory_iterator(dir_ / "cache"))
    if (e.path().filename() == "kernel.cubin") victim = e.path();
  ASSERT_FALSE(victim.empty());
  fs::resize_file(victim, fs::file_size(victim) / 2);
  const Result v = run("cache verify");
  EXPECT_EQ(v.rc, 0) << v.out;
  EXPECT_NE(v.out.find("verified 6 entries"), std::string::npos) << v.out;
  EXPECT_NE(v.out.find("removed 1"), std::string::npos) << v.out;
  const Result im = run("cache import " + (dir_ / "a.fa4c").string());
  EXPECT_EQ(im.rc, 0) << im.out;
  EXPECT_NE(im.out.find("imported 1 entries (5 already present, 0 rejected)"), std::string::npos) << im.out;
  const Result pr = run("cache prune --max-size 1");
  EXPECT_EQ(pr.rc, 0) << pr.out;
  EXPECT_EQ(run("cache ls").out, "");
}

TEST_F(Cli, BenchAndCheckRefuseBadVarlenFlagsBeforeCompiling) {
  const std::pair<const char*, const char*> cases[] = {
      {"--seqlens-q 100,200", "--seqlens-q has 2 lengths and --seqlens-k 0"},
      {"--seqlens-q 100,200 --seqlens-k 100", "--seqlens-q has 2 lengths and --seqlens-k 1"},
      {"--seqlens-q 100,-1 --seqlens-k 100,5", "sequence 1 has length -1 / 5"},
      {"--seqlens-q 0,0 --seqlens-k 0,0", "every sequence is empty"},
      {"--seqlens-q 64 --seqlens-k 64 --kv-bhsd", "--kv-bhsd with --seqlens-q"},
      {"--seqlens-q 64 --seqlens-k 64 --max-seqlen-k -2", "--max-seqlen-k is -2"},
  };
  for (const auto& [flags, message] : cases) {
    const Result r = run(std::string("bench --arch sm_90a ") + flags);
    EXPECT_NE(r.rc, 0) << flags;
    EXPECT_NE(r.out.find(message), std::string::npos) << flags << ": " << r.out;
  }
  const Result check = run("check --arch sm_90a --seqlens-q 5 --seqlens-k 5 --max-seqlen-k -3");
  EXPECT_NE(check.rc, 0);  // check takes the hint too, and refuses it before the GPU check
  EXPECT_NE(check.out.find("--max-seqlen-k is -3"), std::string::npos) << check.out;
  EXPECT_EQ(run("cache ls").out, "");  // refused before get_kernel: nothing compiled
}

TEST_F(Cli, CheckRefusesSnippetsItHasNoReferenceFor) {
  const auto cfg = write("custom.json", R"({"mask": {"kind": "custom", "snippet": "return true;"}})");
  const Result r = run("check --arch sm_90a --config " + cfg.string());
  EXPECT_NE(r.rc, 0) << r.out;  // before any GPU check: the same answer with or without a GPU
  EXPECT_NE(r.out.find("no reference semantics"), std::string::npos) << r.out;
}

TEST_F(Cli, SealedModeRefusesToCompileAndNamesTheConfig) {
  const std::string cmd = "FA4JIT_SEALED=1 " + cli() + " prewarm --preset llama3-8b --arch sm_90a";
  const Result r = run_raw(cmd);
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("\"num_q_heads\":32"), std::string::npos) << r.out;
}

}  // namespace

namespace {

// Several prewarm processes on one cache directory compile each key once between them.
TEST_F(Cli, ConcurrentPrewarmsCompileEachKeyOnce) {
  const std::string one = "FA4JIT_CACHE_DIR='" + (dir_ / "cache").string() + "' " + cli() +
                          " prewarm --preset default --arch sm_80 --jobs 1";
  const std::string cmd = "(" + one + " > " + (dir_ / "a.log").string() + " 2>&1 & " + one + " > " +
                          (dir_ / "b.log").string() + " 2>&1 & " + one + " > " + (dir_ / "c.log").string() +
                          " 2>&1 & wait)";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  int compiled = 0, hit = 0;
  for (const char* log : {"a.log", "b.log", "c.log"}) {
    std::ifstream f(dir_ / log);
    const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    int c = 0, h = 0;
    const auto at = text.find("4 kernels: ");
    ASSERT_NE(at, std::string::npos) << text;
    ASSERT_EQ(std::sscanf(text.c_str() + at, "4 kernels: %d compiled, %d hit", &c, &h), 2) << text;
    compiled += c;
    hit += h;
  }
  EXPECT_EQ(compiled, 4) << "each of the 4 keys compiled exactly once across 3 processes";
  EXPECT_EQ(hit, 8);
}

}  // namespace
