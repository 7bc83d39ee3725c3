// The fa4jit command line with bad input, run as a real process on a private cache directory:
// config files refused with the file name and the JSON path, `run` inputs checked before any
// compile, write failures (file size limit, unwritable path) reported as errors.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "check/safetensors.hpp"
#include "tests/support/cli_process.hpp"

namespace fs = std::filesystem;

namespace {

using Result = jit::testing::CliResult;

class CliInput : public jit::testing::CliProcessTest {
 protected:
  int cached_cubins() const {
    int n = 0;
    if (fs::exists(dir_ / "cache"))
      for (const auto& e : fs::recursive_directory_iterator(dir_ / "cache")) n += e.path().filename() == "kernel.cubin";
    return n;
  }
};

// Issue 17: "depth": 128.5 and true were accepted, "128" gave a raw nlohmann message without the file.
TEST_F(CliInput, ConfigFileTypesAreStrictAndErrorsNameTheFileAndPath) {
  const std::pair<const char*, const char*> values[] = {{"128.5", "128.5"},
                                                        {"true", "true"},
                                                        {"\"128\"", "\"128\""},
                                                        {"4294967424", "4294967424"},
                                                        {"1e10", "10000000000.0"}};
  for (const auto& [value, shown] : values) {
    const auto cfg = write("c.json", std::string(R"({"depth": )") + value + "}");
    const Result r = run("gen --config " + cfg.string() + " --arch sm_90a");
    EXPECT_TRUE(r.exited && r.rc == 1) << value << ": rc " << r.rc << "\n" << r.out;
    EXPECT_NE(r.out.find(cfg.string() + ": depth: expected an integer in 1 .. 1024, got " + shown), std::string::npos)
        << r.out;
  }
  const auto nested = write(
      "n.json", R"({"configs": [{"depth": 64}, {"mask": {"kind": "all_of", "masks": ["causal", {"kind": 3}]}}]})");
  const Result r = run("prewarm --config " + nested.string() + " --arch sm_80");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find(nested.string() + ": configs[1].mask.masks[1].kind: expected a string, got 3"),
            std::string::npos)
      << r.out;
  const auto snippet = write("s.json", R"([{"mask": {"kind": "custom", "snippet": "return true;\n}\nstruct X {"}}])");
  const Result s = run("gen --config " + snippet.string() + " --arch sm_80");
  EXPECT_EQ(s.rc, 1) << s.out;
  EXPECT_NE(s.out.find(snippet.string() + ": [0].mask snippet line 2: unbalanced '}'"), std::string::npos) << s.out;
  EXPECT_EQ(cached_cubins(), 0);
}

TEST_F(CliInput, ConfigFileShapeIsStrict) {
  struct Case {
    const char* text;
    const char* words;
  };
  for (const Case& c : {Case{R"({"configs": {"depth": 64}})", "configs: expected an array of configs, got object"},
                        Case{R"({"presets": ["default", 1]})", "presets[1]: expected a preset name, got number"},
                        Case{R"({"presets": "default"})", "presets: expected an array of preset names, got string"},
                        Case{R"({"configs": [], "x": 1})", "unknown field 'x'"}}) {
    const auto cfg = write("f.json", c.text);
    const Result r = run("prewarm --config " + cfg.string() + " --arch sm_80");
    EXPECT_EQ(r.rc, 1) << c.text << "\n" << r.out;
    EXPECT_NE(r.out.find(cfg.string() + ": " + c.words), std::string::npos) << r.out;
  }
}

// Issue 19 item 3: 30k nested masks (840 KB) overflowed the stack; big files were read whole.
TEST_F(CliInput, DeepAndHugeConfigFilesAreRefusedBeforeParsingDeeply) {
  std::string deep = R"({"mask": )";
  for (int i = 0; i < 30000; ++i) deep += R"({"kind": "all_of", "masks": [)";
  deep += R"("causal")";
  for (int i = 0; i < 30000; ++i) deep += "]}";
  deep += "}";
  const auto cfg = write("deep.json", deep);
  const Result r = run("gen --config " + cfg.string() + " --arch sm_90a");
  EXPECT_TRUE(r.exited) << "ended by a signal\n" << r.out.substr(0, 2000);
  EXPECT_EQ(r.rc, 1) << r.out.substr(0, 2000);
  EXPECT_NE(r.out.find(cfg.string() + ": JSON nested deeper than 64 levels"), std::string::npos)
      << r.out.substr(0, 2000);

  const auto big = write("big.json", R"({"depth": 64, "arch": ")" + std::string(2 << 20, 'x') + "\"}");
  const Result b = run("gen --config " + big.string());
  EXPECT_EQ(b.rc, 1) << b.out.substr(0, 2000);
  EXPECT_NE(b.out.find(big.string() + ": larger than 1048576 bytes"), std::string::npos) << b.out.substr(0, 2000);
}

// Issue 19 items 7 and 8: run checked q/k/v against each other only at launch, after compiling
// and caching a kernel, and truncated a 64-bit head_dim to int.
TEST_F(CliInput, RunChecksInputsBeforeCompilingAnything) {
  const auto cfg = write("c.json", R"({"depth": 64})");
  auto bf16 = [](std::vector<std::int64_t> shape) {
    std::int64_t n = 2;
    for (auto d : shape) n *= d;
    return jit::safetensors::TensorData{"BF16", shape, std::string(static_cast<std::size_t>(n), '\0')};
  };
  struct Case {
    std::map<std::string, jit::safetensors::TensorData> tensors;
    const char* words;
  };
  const Case cases[] = {
      {{{"q", bf16({1, 16, 4, 64})}, {"k", bf16({1, 16, 2, 64})}, {"v", bf16({1, 16, 2, 32})}},
       "'v' has shape [1, 16, 2, 32] and 'k' [1, 16, 2, 64]; they must match"},
      {{{"q", bf16({1, 16, 4, 64})}, {"k", bf16({2, 16, 2, 64})}, {"v", bf16({2, 16, 2, 64})}},
       "'k' has batch 2 and 'q' 1"},
      {{{"q", bf16({1, 16, 3, 64})}, {"k", bf16({1, 16, 2, 64})}, {"v", bf16({1, 16, 2, 64})}},
       "'q' has 3 heads, not a multiple of the 2 heads of 'k'"},
      {{{"q", bf16({1, 16, 4, 128})}, {"k", bf16({1, 16, 2, 64})}, {"v", bf16({1, 16, 2, 64})}},
       "'k' has head_dim 64 and 'q' 128"},
      {{{"q", bf16({0, 1, 1, 4294967424})}, {"k", bf16({0, 1, 1, 4294967424})}, {"v", bf16({0, 1, 1, 4294967424})}},
       "'q' shape[0] is 0"},
      {{{"q", bf16({1, 1, 1, 64})}, {"k", bf16({1, 1, 1, 64})}, {"v", {"F16", {1, 1, 1, 64}, std::string(128, '\0')}}},
       "'v' is F16, the config's dtype is bf16"},
  };
  for (const Case& c : cases) {
    const fs::path in = dir_ / "in.safetensors";
    jit::safetensors::write(in, c.tensors);
    const Result r = run("run --config " + cfg.string() + " --inputs " + in.string() + " --output " +
                         (dir_ / "o.safetensors").string() + " --arch sm_90a");
    EXPECT_EQ(r.rc, 1) << r.out;
    EXPECT_NE(r.out.find(in.string() + ": " + c.words), std::string::npos) << r.out;
  }
  EXPECT_EQ(cached_cubins(), 0) << "a kernel was compiled and cached for inputs that cannot run";
  EXPECT_FALSE(fs::exists(dir_ / "o.safetensors"));
}

// FP8 `run` inputs: F8_E4M3 q/k/v for an e4m3 config, optional F32 descale_q/k/v of shape (batch,
// kv_heads), all checked before any compile; descale factors on a 16-bit config are refused.
TEST_F(CliInput, RunChecksFp8InputsBeforeCompilingAnything) {
  const auto fp8_cfg = write("fp8.json", R"({"depth": 64, "dtype": "e4m3"})");
  const auto bf16_cfg = write("bf16.json", R"({"depth": 64})");
  auto tensor = [](const char* dtype, std::vector<std::int64_t> shape) {
    std::int64_t n = jit::safetensors::element_size(dtype);
    for (auto d : shape) n *= d;
    return jit::safetensors::TensorData{dtype, shape, std::string(static_cast<std::size_t>(n), '\0')};
  };
  auto fp8 = [&](std::vector<std::int64_t> shape) { return tensor("F8_E4M3", shape); };
  auto bf16 = [&](std::vector<std::int64_t> shape) { return tensor("BF16", shape); };
  struct Case {
    std::filesystem::path config;
    std::map<std::string, jit::safetensors::TensorData> tensors;
    const char* words;
  };
  const Case cases[] = {
      {fp8_cfg,
       {{"q", bf16({1, 16, 4, 64})}, {"k", fp8({1, 16, 2, 64})}, {"v", fp8({1, 16, 2, 64})}},
       "'q' is BF16, the config's dtype is e4m3 (F8_E4M3)"},
      {bf16_cfg,
       {{"q", fp8({1, 16, 4, 64})}, {"k", fp8({1, 16, 2, 64})}, {"v", fp8({1, 16, 2, 64})}},
       "'q' is F8_E4M3, the config's dtype is bf16 (BF16)"},
      {fp8_cfg,
       {{"q", fp8({1, 16, 4, 64})}, {"k", fp8({1, 16, 2, 64})}, {"v", tensor("F8_E5M2", {1, 16, 2, 64})}},
       "'v' is F8_E5M2, the config's dtype is e4m3 (F8_E4M3)"},
      {fp8_cfg,
       {{"q", fp8({1, 16, 4, 64})},
        {"k", fp8({1, 16, 2, 64})},
        {"v", fp8({1, 16, 2, 64})},
        {"descale_k", tensor("F32", {1, 4})}},
       "'descale_k' has shape [1, 4]; expected [1, 2] (batch, kv_heads)"},
      {fp8_cfg,
       {{"q", fp8({2, 16, 4, 64})},
        {"k", fp8({2, 16, 2, 64})},
        {"v", fp8({2, 16, 2, 64})},
        {"descale_q", tensor("F32", {2, 2})},
        {"descale_v", tensor("BF16", {2, 2})}},
       "'descale_v' is BF16; descale factors are F32"},
      {bf16_cfg,
       {{"q", bf16({1, 16, 4, 64})},
        {"k", bf16({1, 16, 2, 64})},
        {"v", bf16({1, 16, 2, 64})},
        {"descale_q", tensor("F32", {1, 2})}},
       "'descale_q' is given but the config's dtype is bf16"},
  };
  for (const Case& c : cases) {
    const fs::path in = dir_ / "in.safetensors";
    jit::safetensors::write(in, c.tensors);
    const Result r = run("run --config " + c.config.string() + " --inputs " + in.string() + " --output " +
                         (dir_ / "o.safetensors").string() + " --arch sm_90a");
    EXPECT_EQ(r.rc, 1) << r.out;
    EXPECT_NE(r.out.find(in.string() + ": " + c.words), std::string::npos) << r.out;
  }
  EXPECT_EQ(cached_cubins(), 0) << "a kernel was compiled and cached for inputs that cannot run";
  EXPECT_FALSE(fs::exists(dir_ / "o.safetensors"));
}

// Restores a signal's disposition when it goes out of scope.
class ScopedSignal {
 public:
  ScopedSignal(int sig, void (*handler)(int)) : sig_(sig) {
    struct sigaction sa {};
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    sigaction(sig_, &sa, &old_);
  }
  ~ScopedSignal() { sigaction(sig_, &old_, nullptr); }

 private:
  int sig_;
  struct sigaction old_ {};
};

// Issue 19 item 10: under `ulimit -f` the CLI died of SIGXFSZ (rc 153). The children here get the
// signal's default action (an ignored signal would be inherited and hide the bug), as a shell would.
TEST_F(CliInput, FileSizeLimitIsAnErrorNotASignal) {
  const ScopedSignal dfl(SIGXFSZ, SIG_DFL);
  const Result control = run_raw("bash -c 'ulimit -f 1; head -c 100000 /dev/zero > " + (dir_ / "zeros").string() + "'");
  ASSERT_EQ(control.rc, 153) << "the harness does not deliver SIGXFSZ, so this test would prove nothing: "
                             << control.out;

  const Result gen = run_raw("bash -c 'ulimit -f 1; exec " + cli() + " gen --preset default --arch sm_90a > " +
                             (dir_ / "source.cu").string() + "'");
  EXPECT_TRUE(gen.exited && gen.rc == 1) << "rc " << gen.rc << "\n" << gen.out;
  EXPECT_NE(gen.out.find("File too large"), std::string::npos) << gen.out;

  const fs::path cubin = dir_ / "k.cubin";
  const Result c = run_raw("bash -c 'ulimit -f 16; exec " + cli() + " gen --preset default --arch sm_80 --cubin " +
                           cubin.string() + "'");
  EXPECT_TRUE(c.exited && c.rc == 1) << "rc " << c.rc << "\n" << c.out;
  EXPECT_NE(c.out.find("--cubin " + cubin.string() + ": write failed: File too large"), std::string::npos) << c.out;

  // The cache's writes fail the same way: warned about, never a signal.
  const Result p = run_raw("bash -c 'ulimit -f 16; exec " + cli() + " prewarm --preset llama3-8b --arch sm_80'");
  EXPECT_TRUE(p.exited && p.rc != 153) << "rc " << p.rc << "\n" << p.out;
  EXPECT_NE(p.out.find("File too large"), std::string::npos) << p.out;
}

TEST_F(CliInput, GenCubinToAnUnwritablePathIsAnError) {
  const fs::path target = dir_ / "no_such_dir" / "k.cubin";
  const Result r = run("gen --preset default --arch sm_80 --cubin " + target.string());
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("--cubin " + target.string() + ": cannot open for writing"), std::string::npos) << r.out;
}

// Issue 52 item 3: `run --inputs /dev/zero` grew to 4.2 GB, a FIFO blocked. Refused at once,
// naming the file, before anything is compiled.
TEST_F(CliInput, RunInputsMustBeRegularFiles) {
  const auto cfg = write("c.json", R"({"depth": 64})");
  const Result r = run("run --config " + cfg.string() + " --inputs /dev/zero --output " +
                       (dir_ / "o.safetensors").string() + " --arch sm_90a");
  EXPECT_TRUE(r.exited && r.rc == 1) << r.out;
  EXPECT_NE(r.out.find("/dev/zero: not a regular file (a character device)"), std::string::npos) << r.out;
  EXPECT_EQ(cached_cubins(), 0);
}

// Issue 52 items 5 and 6: a key given twice took the last value silently, and {"depth": 1e400}
// gave nlohmann's text without the file or the field.
TEST_F(CliInput, DuplicateKeysAndOverflowingNumbersNameTheFileAndField) {
  struct Case {
    const char* text;
    const char* words;
  };
  for (const Case& c :
       {Case{R"({"depth": 64, "mask": "causal", "depth": 128})", "duplicate key \"depth\" at the top level"},
        Case{R"({"configs": [{"depth": 64, "mask": {"kind": "causal", "kind": "none"}}]})",
             "duplicate key \"configs.mask.kind\""},
        Case{R"({"depth": 1e400})",
             "not valid JSON in field 'depth': [json.exception.out_of_range.406] number "
             "overflow parsing '1e400'"}}) {
    const auto cfg = write("f.json", c.text);
    const Result r = run("prewarm --config " + cfg.string() + " --arch sm_80");
    EXPECT_TRUE(r.exited && r.rc == 1) << c.text << "\n" << r.out;
    EXPECT_NE(r.out.find(cfg.string() + ": " + c.words), std::string::npos) << r.out;
  }
  EXPECT_EQ(cached_cubins(), 0);
}

// Issue 52 item 5: FA4JIT_TUNE=exp2_emulate_every=-3 compiled a kernel under a key of its own,
// FA4JIT_LOG=loud and FA4JIT_CACHE_FAULT=bogus changed nothing, silently.
TEST_F(CliInput, EnvironmentValuesAreErrorsNamingTheVariable) {
  const auto cfg = write("c.json", R"({"depth": 64})");
  const std::string prewarm = "prewarm --config " + cfg.string() + " --arch sm_80 --jobs 1";
  struct Case {
    const char* env;
    const char* words;
  };
  for (const Case& c : {Case{"FA4JIT_TUNE=exp2_emulate_every=-3",
                             "FA4JIT_TUNE: 'exp2_emulate_every=-3' is out of range: exp2_emulate_every takes 0 .. 64"},
                        Case{"FA4JIT_TUNE=pingpong=1x", "FA4JIT_TUNE: 'pingpong=1x' needs an integer value"},
                        Case{"FA4JIT_LOG=loud", "FA4JIT_LOG='loud' is not a log level: use error, warn, info or debug"},
                        Case{"FA4JIT_CACHE_FAULT=bogus", "FA4JIT_CACHE_FAULT='bogus': 'bogus' is not a fault"}}) {
    const Result r = run(prewarm, c.env);
    EXPECT_TRUE(r.exited && r.rc == 1) << c.env << "\n" << r.out;
    EXPECT_NE(r.out.find(c.words), std::string::npos) << c.env << "\n" << r.out;
  }
  EXPECT_EQ(cached_cubins(), 0) << "a kernel was compiled under a refused environment";
}

}  // namespace
