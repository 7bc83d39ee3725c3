// The compile policy (jit::set_compile_policy, FA4JIT_COMPILE): forbid refuses a miss before
// NVRTC runs, warn compiles and logs the config, and the counters say what happened.
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fa4jit/jit.hpp"
#include "runtime/runtime_internal.hpp"
#include "tests/support/cli_process.hpp"

namespace {

// A config no other test (or earlier run sharing the cache directory) has compiled: its
// score-mod carries a constant unique to this process and call.
jit::FA4Config fresh_config() {
  static int n = 0;
  const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
  jit::FA4Config c;
  c.arch = "sm_90a";
  c.depth = 64;
  c.score_mod = jit::ScoreMod::custom("return score + " + std::to_string((now % 1000003) * 64 + ++n) + ".0f * 1e-30f;");
  // Its split-KV combine kernel (shared by every sm_90a d64 bf16 kernel, perhaps not yet cached)
  // first, so that the counts below are the kernel's own.
  jit::detail::get_combine(jit::resolve(c));
  return c;
}

struct PolicyGuard {  // every test leaves the process at allow, with the default log sink
  ~PolicyGuard() {
    jit::set_compile_policy(jit::CompilePolicy::allow);
    jit::set_log_sink(nullptr);
  }
};

TEST(CompilePolicy, ForbidRefusesAMissBeforeCompilingAndServesWhatIsCached) {
  PolicyGuard guard;
  const jit::FA4Config c = fresh_config();
  const jit::Stats before = jit::stats();
  jit::set_compile_policy(jit::CompilePolicy::forbid);
  EXPECT_EQ(jit::compile_policy(), jit::CompilePolicy::forbid);
  try {
    jit::get_kernel(c);
    FAIL() << "forbid compiled a kernel";
  } catch (const jit::CacheMissError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("compile policy forbid"), std::string::npos) << what;
    EXPECT_NE(what.find(jit::cache_key(c)), std::string::npos) << what;
    EXPECT_NE(what.find("return score + "), std::string::npos) << "names the config: " << what;
  }
  jit::Stats s = jit::stats();
  EXPECT_EQ(s.compiles, before.compiles);
  EXPECT_EQ(s.forbidden, before.forbidden + 1);
  EXPECT_EQ(s.failures, before.failures + 1);

  jit::set_compile_policy(jit::CompilePolicy::allow);
  ASSERT_TRUE(jit::get_kernel(c));  // the refusal was not cached: allow compiles it
  EXPECT_EQ(jit::stats().compiles, before.compiles + 1);
  jit::set_compile_policy(jit::CompilePolicy::forbid);
  EXPECT_TRUE(jit::get_kernel(c));  // cached kernels are served under forbid
  s = jit::stats();
  EXPECT_EQ(s.compiles, before.compiles + 1);
  EXPECT_EQ(s.memory_hits, before.memory_hits + 1);
}

TEST(CompilePolicy, WarnCompilesAndLogsTheConfig) {
  PolicyGuard guard;
  std::mutex mu;
  std::vector<std::string> warnings;
  jit::set_log_sink([&](jit::LogLevel level, std::string_view msg) {
    std::lock_guard<std::mutex> lock(mu);
    if (level == jit::LogLevel::warn) warnings.emplace_back(msg);
  });
  const jit::FA4Config c = fresh_config();  // before warn: its combine kernel may compile (a warning of its own)
  jit::set_compile_policy(jit::CompilePolicy::warn);
  const std::uint64_t compiles = jit::stats().compiles;
  ASSERT_TRUE(jit::get_kernel(c));
  EXPECT_EQ(jit::stats().compiles, compiles + 1);
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("under compile policy warn"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find(jit::cache_key(c)), std::string::npos) << warnings[0];
}

TEST(CompilePolicy, NamesRoundTripAndBadNamesAreRefused) {
  for (auto p : {jit::CompilePolicy::allow, jit::CompilePolicy::warn, jit::CompilePolicy::forbid})
    EXPECT_EQ(jit::compile_policy_from_string(jit::to_string(p)), p);
  EXPECT_THROW(jit::compile_policy_from_string("deny"), jit::ConfigError);
}

using Cli = jit::testing::CliProcessTest;

TEST_F(Cli, CompileEnvironmentForbidsAndBadValuesAreNamed) {
  const auto cfg =
      write("c.json", R"({"depth": 64, "score_mod": {"kind": "custom", "snippet": "return score * 0.5f;"}})");
  auto r = run("prewarm --config " + cfg.string() + " --arch sm_90a", "FA4JIT_COMPILE=forbid");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("compile policy forbid"), std::string::npos) << r.out;
  EXPECT_EQ(run("cache ls").out, "") << "nothing was compiled";
  r = run("info", "FA4JIT_COMPILE=forbid");
  EXPECT_NE(r.out.find("compile policy: forbid"), std::string::npos) << r.out;
  r = run("prewarm --config " + cfg.string() + " --arch sm_90a", "FA4JIT_COMPILE=sometimes");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("FA4JIT_COMPILE: compile policy: 'sometimes' is not allowed; allowed: allow, warn, forbid"),
            std::string::npos)
      << r.out;
  r = run("prewarm --config " + cfg.string() + " --arch sm_90a", "FA4JIT_COMPILE=warn");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("under compile policy warn"), std::string::npos) << r.out;
  r = run("prewarm --config " + cfg.string() + " --arch sm_90a", "FA4JIT_COMPILE=forbid");
  EXPECT_EQ(r.rc, 0) << "a cached kernel is served under forbid: " << r.out;
}

// A kernel's split-KV combine kernel is an entry of its own (generator/combine.hpp): prewarm
// leaves both in the cache, and a serving process with compiles forbidden refuses a kernel whose
// combine is missing before anything runs, naming the combine.
TEST_F(Cli, TheCombineKernelIsCachedBesideItsKernelAndForbiddenToo) {
  const auto cfg = write("c.json", R"({"depth": 64, "mask": {"kind": "causal"}})");
  auto r = run("prewarm --config " + cfg.string() + " --arch sm_80");
  ASSERT_EQ(r.rc, 0) << r.out;
  const auto ls = nlohmann::json::parse(run("cache ls --json").out);
  ASSERT_EQ(ls.size(), 2u) << ls.dump(2);
  const auto combine = ls[0]["mask"] == "(combine)" ? ls[0] : ls[1];
  ASSERT_EQ(combine["mask"], "(combine)") << ls.dump(2);
  EXPECT_EQ(combine["depth"], 64);
  EXPECT_EQ(combine["arch"], "sm_80");
  EXPECT_EQ(combine["meta"]["combine"]["output_dtype"], "bf16");
  EXPECT_NE(run("cache verify").out.find("verified 2 entries"), std::string::npos);

  std::filesystem::remove_all(combine["dir"].get<std::string>());
  r = run("prewarm --config " + cfg.string() + " --arch sm_80", "FA4JIT_COMPILE=forbid");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("compile policy forbid (jit::set_compile_policy or FA4JIT_COMPILE): split-KV combine kernel "
                       "{\"arch\":\"sm_80\",\"depth\":64,\"output_dtype\":\"bf16\"}"),
            std::string::npos)
      << r.out;
  r = run("prewarm --config " + cfg.string() + " --arch sm_80");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(nlohmann::json::parse(run("cache ls --json").out).size(), 2u);
}

}  // namespace
