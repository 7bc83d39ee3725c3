// What a script sees of the fa4jit binary: the version, --help defaults, exit statuses (0 done,
// 1 error, 2 usage), flag validation, prewarm's outcome, `cache ls`, FA4JIT_LOG and `info`.
// Each test runs the real binary; the few compiles are sm_80 kernels (about a second each).
#include <gtest/gtest.h>

#include <algorithm>
#include <regex>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "check/gpu.hpp"
#include "fa4jit/version.hpp"
#include "tests/support/cli_process.hpp"

namespace {

using CliScripts = jit::testing::CliProcessTest;

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST_F(CliScripts, VersionFlagPrintsTheLibraryVersion) {
  const auto r = run("--version");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.out, std::string("fa4jit ") + FA4JIT_VERSION_STRING + "\n");
  const auto info = run("info");
  EXPECT_TRUE(has(info.out, std::string("fa4jit ") + FA4JIT_VERSION_STRING + "\n")) << info.out;
}

TEST_F(CliScripts, HelpShowsTheDefaultOfEveryValueOption) {
  for (const char* sub : {"gen", "prewarm", "run", "check", "bench", "cache ls", "cache export"}) {
    const auto r = run(std::string(sub) + " --help");
    ASSERT_EQ(r.rc, 0) << sub << "\n" << r.out;
    // "  --batch INT=2   batch size": a numeric option without "=default" fails.
    std::istringstream lines(r.out);
    int numeric = 0;
    for (std::string line; std::getline(lines, line);) {
      std::smatch m;
      if (!std::regex_search(line, m, std::regex(R"(^\s+(-\w,)?--[\w-]+ (INT|UINT|FLOAT)\S*)"))) continue;
      ++numeric;
      EXPECT_TRUE(has(m.str(), "=")) << sub << ": no default shown in: " << line;
    }
    if (std::string(sub) == "check" || std::string(sub) == "bench") EXPECT_GT(numeric, 10) << r.out;
  }
  EXPECT_TRUE(has(run("check --help").out, "--batch INT=2")) << run("check --help").out;
  EXPECT_TRUE(has(run("--help").out, "2 usage")) << run("--help").out;  // the exit statuses are documented
}

TEST_F(CliScripts, UsageErrorsExitTwoAndJobErrorsExitOne) {
  EXPECT_EQ(run("").rc, 2);                    // no subcommand
  EXPECT_EQ(run("frobnicate").rc, 2);          // unknown subcommand
  EXPECT_EQ(run("gen --no-such-flag").rc, 2);  // unknown option
  EXPECT_EQ(run("prewarm --jobs -1").rc, 2);   // malformed value
  EXPECT_EQ(run("check --batch two").rc, 2);
  EXPECT_EQ(run("run --config x.json").rc, 2);  // missing required options
  const auto bad = write("bad.json", R"({"depht": 64})");
  EXPECT_EQ(run("gen --arch sm_90a --config " + bad.string()).rc, 1);  // the job (config) fails
}

// Issue 52 item 6: an unknown subcommand said "A subcommand is required", and `--window a,b` said
// "stoi". The messages name the word and the flag.
TEST_F(CliScripts, UsageErrorsNameTheCommandOrFlag) {
  auto r = run("frobnicate");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_TRUE(
      has(r.out, "unknown command 'frobnicate'; commands: info, gen, prewarm, bundle, run, check, bench, cache"))
      << r.out;
  r = run("cache frob");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_TRUE(has(r.out, "unknown command 'frob' for 'fa4jit cache'; commands: ls, stats, clear, verify")) << r.out;
  for (const char* window : {"a,b", "64,x", "1.5,0", "-2,0"}) {
    r = run(std::string("check --arch sm_80 --window ") + window);
    EXPECT_EQ(r.rc, 2) << window << "\n" << r.out;
    EXPECT_TRUE(has(r.out, std::string("--window: '") + window + "': expected LEFT,RIGHT")) << r.out;
    EXPECT_FALSE(has(r.out, "stoi")) << r.out;
  }
  r = run("check --arch sm_80 --mask-prefix -3");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_TRUE(has(r.out, "--mask-prefix: Value -3 not in range 0 to 2147483647")) << r.out;
}

// Issue 52 item 6: a full disk said "2 of 1 kernels could not be written": failed writes of a
// kernel and its combine kernel were counted as kernels, and the reason was only in a warning.
TEST_F(CliScripts, PrewarmOnAFullDiskSaysSoAndCountsEntries) {
  const auto cfg = write("one.json", R"({"depth": 64})");
  const auto r = run("prewarm --config " + cfg.string() + " --arch sm_80 --jobs 1", "FA4JIT_CACHE_FAULT=enospc");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_TRUE(has(r.out, "error: could not write 2 cache entries for 1 kernel")) << r.out;
  EXPECT_TRUE(has(r.out, ": No space left on device (the disk is full)")) << r.out;
  EXPECT_FALSE(has(r.out, "2 of 1")) << r.out;
  // A bundle says why too (it said "some kernels could not be written").
  const auto b = run("bundle --config " + cfg.string() + " --arch sm_80 --out " + (dir_ / "bundle").string(),
                     "FA4JIT_CACHE_FAULT=enospc");
  EXPECT_EQ(b.rc, 1) << b.out;
  EXPECT_TRUE(has(b.out, "could not write 2 entries: write ")) << b.out;
  EXPECT_TRUE(has(b.out, ": No space left on device")) << b.out;
}

TEST_F(CliScripts, ArchListIsTrimmedAndValidatedNamingTheFlag) {
  // Sealed: nothing is compiled, each kernel is reported as missing, so this costs no NVRTC time.
  const auto r = run("prewarm --preset llama3-8b --arch ' sm_90a , sm_100a '", "FA4JIT_SEALED=1");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_TRUE(has(r.out, "2 kernels: 0 compiled, 0 hit, 0 failed, 2 missing (sealed)")) << r.out;
  EXPECT_TRUE(has(r.out, "missing: sm_90a d128")) << r.out;
  EXPECT_TRUE(has(r.out, "missing: sm_100a d128")) << r.out;

  const auto bad = run("prewarm --preset default --arch sm_90a,sm_70");
  EXPECT_EQ(bad.rc, 2) << bad.out;
  EXPECT_TRUE(has(bad.out, "--arch: 'sm_70' is not supported; allowed: sm_80, sm_86")) << bad.out;
  const auto two = run("gen --preset default --arch sm_90a,sm_100a");
  EXPECT_EQ(two.rc, 2) << two.out;
  EXPECT_TRUE(has(two.out, "--arch: 'sm_90a,sm_100a': one arch here")) << two.out;
  const auto spaced = run("gen --preset default --key --arch ' sm_90a '");
  EXPECT_EQ(spaced.rc, 0) << spaced.out;
  EXPECT_EQ(spaced.out, run("gen --preset default --key --arch sm_90a").out);
}

// The progress and summary lines name an FP8 KV cache's K/V type next to the dtype.
TEST_F(CliScripts, PrewarmNamesTheKvDtype) {
  const auto cfg = write("kv8.json", R"({"arch": "sm_90a", "depth": 128, "kv_dtype": "e4m3", "mask": "causal"})");
  const auto r = run("prewarm --config " + cfg.string(), "FA4JIT_SEALED=1");  // sealed: nothing compiles
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_TRUE(has(r.out, "missing: sm_90a d128 bf16+e4m3 KV mask=causal")) << r.out;
  const auto plain = run("prewarm --preset llama3-8b --arch sm_90a", "FA4JIT_SEALED=1");
  EXPECT_TRUE(has(plain.out, "missing: sm_90a d128 bf16 mask=")) << plain.out;
}

TEST_F(CliScripts, ErrorsNameTheFlagNotTheStructField) {
  if (jit::testing::gpu_unavailable_reason().empty()) GTEST_SKIP() << "a GPU supplies the arch here";
  for (const char* cmd : {"gen --preset default", "prewarm --preset default", "bench --preset default"}) {
    const auto r = run(cmd);
    EXPECT_EQ(r.rc, 1) << cmd << "\n" << r.out;
    EXPECT_TRUE(has(r.out, "--arch: not given")) << cmd << "\n" << r.out;
    EXPECT_FALSE(has(r.out, "FA4Config::")) << cmd << "\n" << r.out;
  }
}

TEST_F(CliScripts, ArchOfAnotherGpuIsRefusedNamingTheFlag) {
  const std::string why = jit::testing::gpu_unavailable_reason();
  if (!why.empty()) GTEST_SKIP() << why;
  const std::string other = jit::current_device_arch() == "sm_90a" ? "sm_100a" : "sm_90a";
  const auto r = run("check --arch " + other + " --batch 1 --seqlen 128 --heads 2 --kv-heads 2");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_TRUE(has(r.out, "--arch " + other + ": its kernels do not run on this GPU")) << r.out;
  EXPECT_FALSE(has(r.out, "FA4Config::")) << r.out;
}

TEST_F(CliScripts, PrewarmWithNeitherConfigNorPresetTakesTheDefaultPreset) {
  const auto r = run("prewarm --arch sm_80", "FA4JIT_SEALED=1");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_TRUE(has(r.out, "prewarm: 4 kernels:")) << r.out;  // the default preset's 4 configs
  EXPECT_FALSE(has(r.out, "no configs")) << r.out;
}

TEST_F(CliScripts, SealedMissIsReportedAsAMissNotACompileFailure) {
  const auto r = run("prewarm --preset llama3-8b --arch sm_80", "FA4JIT_SEALED=1");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_TRUE(has(r.out, "not in cache (sealed)")) << r.out;
  EXPECT_TRUE(has(r.out, "1 of 1 kernels are not in the cache, and this process compiles nothing (FA4JIT_SEALED=1"))
      << r.out;
  EXPECT_FALSE(has(r.out, "failed to compile")) << r.out;
  EXPECT_FALSE(has(r.out, "failed: ")) << r.out;
}

TEST_F(CliScripts, PrewarmFailsWhenNothingCouldBePersisted) {
  // A cache "directory" below a regular file: no process (root included) can create it.
  write("file", "x");
  const std::string env = "FA4JIT_CACHE_DIR='" + (dir_ / "file" / "cache").string() + "'";
  const auto r = run("prewarm --preset llama3-8b --arch sm_80 --jobs 1", env);
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_TRUE(has(r.out, "1 compiled")) << r.out;  // compiled fine, kept in memory only ...
  EXPECT_TRUE(has(r.out, "fa4jit: warning: cache: no writable cache directory")) << r.out;
  EXPECT_TRUE(has(r.out, "error: nothing was persisted")) << r.out;  // ... which is a failed prewarm

  // FA4JIT_LOG=error drops the warning; the outcome is the same.
  const auto quiet = run("prewarm --preset llama3-8b --arch sm_80 --jobs 1", env + " FA4JIT_LOG=error");
  EXPECT_EQ(quiet.rc, 1) << quiet.out;
  EXPECT_FALSE(has(quiet.out, "warning")) << quiet.out;
  EXPECT_TRUE(has(quiet.out, "nothing was persisted")) << quiet.out;
}

TEST_F(CliScripts, CheckRefusesAnInvalidConfigWithOrWithoutAGpu) {
  const auto cfg = write("d100.json", R"({"depth": 100})");
  const auto r = run("check --config " + cfg.string());
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_TRUE(has(r.out, "depth: 100 is not allowed")) << r.out;
  EXPECT_FALSE(has(r.out, "skipped")) << r.out;
  const auto with_arch = run("check --arch sm_90a --config " + cfg.string());
  EXPECT_EQ(with_arch.rc, 1) << with_arch.out;
  EXPECT_TRUE(has(with_arch.out, "depth: 100 is not allowed")) << with_arch.out;
}

TEST_F(CliScripts, CachePruneTakesTheSizesOfTheEnvironmentVariable) {
  const auto cfg = write("one.json", R"({"depth": 64})");
  ASSERT_EQ(run("prewarm --config " + cfg.string() + " --arch sm_80 --jobs 1").rc, 0);
  const auto keep = run("cache prune --max-size 1G");
  EXPECT_EQ(keep.rc, 0) << keep.out;
  EXPECT_TRUE(has(keep.out, "removed 0 entries")) << keep.out;
  const auto drop = run("cache prune --max-size 1KiB");  // a cubin is larger than 1 KiB
  EXPECT_EQ(drop.rc, 0) << drop.out;
  EXPECT_TRUE(has(drop.out, "removed 2 entries")) << "the kernel and its split-KV combine kernel: " << drop.out;
  for (const char* bad : {"-1", "nan", "inf", "1X", "G", "0x10", "1e30G", ""}) {
    const auto r = run(std::string("cache prune --max-size '") + bad + "'");
    EXPECT_EQ(r.rc, 2) << bad << "\n" << r.out;
    EXPECT_TRUE(has(r.out, "--max-size")) << bad << "\n" << r.out;
  }
  // The environment variable goes through the same parser: nan was accepted (and cast) before.
  const auto env = run("cache stats", "FA4JIT_CACHE_MAX_BYTES=nan");
  EXPECT_EQ(env.rc, 1) << env.out;
  EXPECT_TRUE(has(env.out, "FA4JIT_CACHE_MAX_BYTES='nan' is not a size")) << env.out;
  EXPECT_EQ(run("cache stats", "FA4JIT_CACHE_MAX_BYTES=1.5G").rc, 0);
}

TEST_F(CliScripts, CacheLsShowsWhatTellsEntriesApart) {
  const auto cfg = write("c.json", R"({"configs": [
      {"depth": 64, "score_mod": {"kind": "custom", "snippet": "return score;"}},
      {"depth": 64, "score_mod": {"kind": "custom", "snippet": "return score * 0.5f;"}}],
    "presets": ["llama3-8b-decode"]})");
  const auto pre = run("prewarm --config " + cfg.string() + " --arch sm_80 --jobs 1", "FA4JIT_LOG=info");
  ASSERT_EQ(pre.rc, 0) << pre.out;
  EXPECT_TRUE(has(pre.out, "fa4jit: info: kernel sm_80 d64 bf16")) << pre.out;  // FA4JIT_LOG=info: compiles

  // Three kernels, and the split-KV combine kernels of d64 and d128 (one each, shared).
  const auto ls = run("cache ls");
  ASSERT_EQ(ls.rc, 0) << ls.out;
  EXPECT_EQ(std::count(ls.out.begin(), ls.out.end(), '\n'), 5) << ls.out;
  EXPECT_TRUE(has(ls.out, "group=4  packed")) << ls.out;
  EXPECT_TRUE(has(ls.out, "score_mod=custom")) << ls.out;
  EXPECT_TRUE(has(ls.out, "d128  mask=(combine)")) << ls.out;

  const auto js = run("cache ls --json");
  ASSERT_EQ(js.rc, 0) << js.out;
  const nlohmann::json entries = nlohmann::json::parse(js.out);
  ASSERT_EQ(entries.size(), 5u) << js.out;
  std::set<std::string> hashes;
  std::set<int> combine_depths;
  int packed = 0;
  for (const auto& e : entries) {
    EXPECT_EQ(e.at("key").get<std::string>().size(), 32u);
    EXPECT_EQ(e.at("arch"), "sm_80");
    if (e.at("mask") == "(combine)") {
      combine_depths.insert(e.at("depth").get<int>());
      EXPECT_TRUE(e.at("meta").contains("combine"));
      continue;
    }
    if (e.at("pack_gqa").get<bool>()) {
      ++packed;
      EXPECT_EQ(e.at("group"), 4);
      EXPECT_TRUE(e.at("snippet_hash").is_null());
    } else {
      EXPECT_EQ(e.at("score_mod"), "custom");
      hashes.insert(e.at("snippet_hash").get<std::string>());
    }
    EXPECT_TRUE(e.at("meta").contains("config"));
  }
  EXPECT_EQ(packed, 1);
  EXPECT_EQ(combine_depths, (std::set<int>{64, 128})) << js.out;
  EXPECT_EQ(hashes.size(), 2u) << "the two snippets must hash apart: " << js.out;
}

TEST_F(CliScripts, InfoShowsTheEnvironment) {
  const auto r = run("info",
                     "FA4JIT_TUNE=pingpong=0 FA4JIT_SEALED=1 FA4JIT_CACHE_MAX_BYTES=2G "
                     "FA4JIT_REMOTE_CACHE=redis://127.0.0.1:1/0 FA4JIT_LOG=debug");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(has(r.out, "cache writable: " + (dir_ / "cache").string())) << r.out;
  EXPECT_TRUE(has(r.out, "cache sealed: yes")) << r.out;
  EXPECT_TRUE(has(r.out, "cache max bytes: 2147483648")) << r.out;
  EXPECT_TRUE(has(r.out, "remote cache: redis://127.0.0.1:1/0 (Redis tier")) << r.out;
  EXPECT_TRUE(has(r.out, "tune: FA4JIT_TUNE=pingpong=0")) << r.out;
  EXPECT_TRUE(has(r.out, "log level: debug")) << r.out;
  EXPECT_TRUE(has(r.out, "this process: 0 compiled")) << r.out;
  const auto plain = run("info");
  EXPECT_TRUE(has(plain.out, "cache sealed: no")) << plain.out;
  EXPECT_TRUE(has(plain.out, "tune: none")) << plain.out;
  EXPECT_TRUE(has(plain.out, "log level: warn")) << plain.out;
}

// Bad values are listed, each naming its variable, after the rest of the report (which still
// shows), and the exit status says so; get_kernel keeps failing on them.
TEST_F(CliScripts, InfoReportsEveryBadEnvironmentValue) {
  const auto r = run("info", "FA4JIT_CACHE_MAX_BYTES=lots FA4JIT_COMPILE=sometimes FA4JIT_LOG=loud");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_TRUE(has(r.out, "nvrtc: 13.")) << r.out;
  EXPECT_TRUE(has(r.out, "presets: ")) << r.out;
  EXPECT_TRUE(has(r.out, "problem: ")) << r.out;
  EXPECT_TRUE(has(r.out, "FA4JIT_CACHE_MAX_BYTES")) << r.out;
  EXPECT_TRUE(has(r.out, "problem: FA4JIT_COMPILE")) << r.out;
  EXPECT_TRUE(has(r.out, "problem: FA4JIT_LOG='loud'")) << r.out;
  EXPECT_TRUE(has(r.out, "3 environment values refused")) << r.out;
}

}  // namespace
