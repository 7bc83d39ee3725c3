// The public API's C++17-facing parts: written equality operators, the log hook and level, the
// get_kernel counters and runtime_info's environment fields.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <random>
#include <vector>

#include "cache/store.hpp"
#include "fa4jit/c_api.h"
#include "fa4jit/jit.hpp"
#include "runtime/compiled_kernel.hpp"
#include "runtime/runtime_internal.hpp"

namespace {

using namespace jit;

// Equality was `= default` (C++20); the written operators must still compare every field.
TEST(PublicApi, ConfigEqualityComparesEveryField) {
  const FA4Config a;
  const std::vector<std::function<void(FA4Config&)>> changes = {
      [](FA4Config& c) { c.dtype = DType::fp16; },
      [](FA4Config& c) { c.dtype = DType::e4m3; },
      [](FA4Config& c) { c.output_dtype = DType::bf16; },
      [](FA4Config& c) { c.kv_dtype = DType::e4m3; },
      [](FA4Config& c) { c.depth = 64; },
      [](FA4Config& c) { c.depth_v = 128; },
      [](FA4Config& c) { c.BM = 64; },
      [](FA4Config& c) { c.BN = 64; },
      [](FA4Config& c) { c.BK0 = 64; },
      [](FA4Config& c) { c.num_q_heads = 8; },
      [](FA4Config& c) { c.group = 2; },
      [](FA4Config& c) { c.num_kv_stages = 2; },
      [](FA4Config& c) { c.num_qk_stages = 2; },
      [](FA4Config& c) { c.arch = "sm_90a"; },
      [](FA4Config& c) { c.mask = Mask::causal(); },
      [](FA4Config& c) { c.score_mod = ScoreMod::softcap(); },
      [](FA4Config& c) { c.pack_gqa = true; },
  };
  for (std::size_t i = 0; i < changes.size(); ++i) {
    FA4Config b = a;
    changes[i](b);
    EXPECT_FALSE(a == b) << "change " << i;
    EXPECT_TRUE(a != b) << "change " << i;
  }
  // Every field to_json writes is one of the fields above: same JSON and equal go together.
  FA4Config b = a;
  EXPECT_TRUE(a == b);
  EXPECT_EQ(to_json(a), to_json(b));

  // Masks compare their snippets, alignment and children, recursively.
  EXPECT_NE(Mask::causal(false), Mask::causal(true));
  EXPECT_NE(Mask::custom("return true;"), Mask::custom("return false;"));
  EXPECT_NE(Mask::custom("return true;", "return FULL;"), Mask::custom("return true;"));
  EXPECT_EQ(Mask::all_of({Mask::causal(), Mask::custom("return true;")}),
            Mask::all_of({Mask::causal(), Mask::custom("return true;")}));
  EXPECT_NE(Mask::all_of({Mask::causal(), Mask::custom("return true;")}),
            Mask::all_of({Mask::causal(), Mask::custom("return kv_idx < 4;")}));
  EXPECT_NE(Mask::all_of({Mask::causal()}), Mask::any_of({Mask::causal()}));
  EXPECT_NE(ScoreMod::custom("return score;"), ScoreMod::custom("return -score;"));
  EXPECT_NE(ScoreMod::alibi(), ScoreMod::softcap());

  const Tuning t;
  for (int i = 0; i < 8; ++i) {
    Tuning u = t;
    int* fields[] = {&u.exp2_emulate_every, &u.intra_wg_overlap, &u.pingpong,    &u.wg_spans,
                     &u.persistent,         &u.line_info,        &u.alternate_s, &u.k_parts};
    *fields[i] += 1;
    EXPECT_NE(t, u) << "Tuning field " << i;
  }
}

// Captures what reaches the sink; restores the stderr sink and the level afterwards.
class LogCapture {
 public:
  LogCapture() : old_level_(log_level()) {
    set_log_sink([this](LogLevel level, std::string_view msg) {
      std::lock_guard<std::mutex> lock(mu_);
      lines_.emplace_back(level, std::string(msg));
    });
  }
  ~LogCapture() {
    set_log_sink({});
    set_log_level(old_level_);
  }
  std::vector<std::pair<LogLevel, std::string>> lines() {
    std::lock_guard<std::mutex> lock(mu_);
    return lines_;
  }

 private:
  LogLevel old_level_;
  std::mutex mu_;
  std::vector<std::pair<LogLevel, std::string>> lines_;
};

std::filesystem::path unwritable_dir() {
  // Below a regular file: not creatable by anyone, root included.
  const auto file = std::filesystem::temp_directory_path() / ("fa4jit_api_" + std::to_string(std::random_device{}()));
  std::ofstream(file) << "x";
  return file / "cache";
}

TEST(PublicApi, LogSinkReceivesCacheWarningsAtTheChosenLevel) {
  const auto dir = unwritable_dir();
  {
    LogCapture cap;
    set_log_level(LogLevel::warn);
    cache::Options o;
    o.roots = {dir};
    cache::Store store(o);  // warns once: no writable tier
    const auto lines = cap.lines();
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_EQ(lines[0].first, LogLevel::warn);
    EXPECT_EQ(lines[0].second.rfind("cache: no writable cache directory among [", 0), 0u) << lines[0].second;
  }
  {
    LogCapture cap;
    set_log_level(LogLevel::error);  // warnings dropped before they reach the sink
    cache::Options o;
    o.roots = {dir};
    cache::Store store(o);
    EXPECT_TRUE(cap.lines().empty());
    EXPECT_EQ(store.stats().warnings, 1u);  // still counted
  }
  std::filesystem::remove(dir.parent_path());
  EXPECT_STREQ(to_string(LogLevel::debug), "debug");
}

TEST(PublicApi, SinkExceptionsAreDropped) {
  const LogLevel old = log_level();
  set_log_sink([](LogLevel, std::string_view) { throw std::runtime_error("sink failed"); });
  set_log_level(LogLevel::warn);
  cache::Options o;
  o.roots = {unwritable_dir()};
  EXPECT_NO_THROW(cache::Store store(o));
  set_log_sink({});
  set_log_level(old);
  std::filesystem::remove(o.roots[0].parent_path());
}

// Split-KV launches merge partials with a combine kernel compiled once per (arch, output dtype,
// head dim) and shared by every kernel with that triple (generator/combine.hpp).
TEST(PublicApi, KernelsShareTheirCombineKernel) {
  FA4Config a;
  a.arch = "sm_80";
  a.depth = 64;
  FA4Config b = a;
  b.mask = Mask::causal();
  FA4Config c = a;
  c.output_dtype = DType::fp16;
  auto combine_of = [](const KernelPtr& k) {
    const auto* compiled = dynamic_cast<const detail::CompiledKernel*>(k.get());
    EXPECT_NE(compiled, nullptr);
    return compiled ? compiled->combine() : nullptr;
  };
  const auto ca = combine_of(get_kernel(a)), cb = combine_of(get_kernel(b)), cc = combine_of(get_kernel(c));
  ASSERT_TRUE(ca && cb && cc);
  EXPECT_EQ(ca, cb);  // one object in this process
  EXPECT_NE(ca->key(), cc->key());
  EXPECT_EQ(ca->key(), detail::combine_inputs(resolve(a)).key);
  EXPECT_NE(ca->key(), get_kernel(a)->key());
}

TEST(PublicApi, StatsCountCompilesHitsAndFailures) {
  LogCapture cap;
  set_log_level(LogLevel::debug);
  FA4Config c;  // a config no other test builds, so this process has not seen its key
  c.arch = "sm_80";
  c.depth = 64;
  c.dtype = DType::fp16;
  c.group = 3;
  c.mask = Mask::chunked();
  detail::get_combine(resolve(c));  // its split-KV combine kernel (maybe not yet cached) is not what is counted
  const Stats before = stats();
  const KernelPtr k = get_kernel(c);
  const Stats mid = stats();
  const bool compiled = k->origin() == "compiled";
  EXPECT_EQ(mid.compiles - before.compiles, compiled ? 1u : 0u);
  EXPECT_EQ(mid.disk_hits - before.disk_hits, compiled ? 0u : 1u);
  if (compiled) EXPECT_GT(mid.compile_ms, before.compile_ms);
  bool logged = false;
  for (const auto& [level, msg] : cap.lines())
    if (msg.find(k->key()) != std::string::npos) {
      logged = true;
      EXPECT_EQ(level, compiled ? LogLevel::info : LogLevel::debug) << msg;
      EXPECT_NE(msg.find(compiled ? "compiled in" : "disk hit"), std::string::npos) << msg;
    }
  EXPECT_TRUE(logged);

  EXPECT_EQ(get_kernel(c), k);  // the process's memory
  const Stats after = stats();
  EXPECT_EQ(after.memory_hits - mid.memory_hits, 1u);
  EXPECT_EQ(after.compiles, mid.compiles);

  FA4Config bad = c;
  bad.depth = 100;
  EXPECT_THROW(get_kernel(bad), ConfigError);
  EXPECT_EQ(stats().failures - after.failures, 1u);
  EXPECT_EQ(runtime_info().stats.compiles, stats().compiles);
}

TEST(PublicApi, RuntimeInfoReportsVersionAndEnvironment) {
  const RuntimeInfo i = runtime_info();
  EXPECT_EQ(i.version, FA4JIT_VERSION_STRING);
  EXPECT_EQ(i.version, std::to_string(FA4JIT_VERSION_MAJOR) + "." + std::to_string(FA4JIT_VERSION_MINOR) + "." +
                           std::to_string(FA4JIT_VERSION_PATCH));
  EXPECT_EQ(i.log_level, log_level());
  if (!i.cache_writable.empty()) {
    ASSERT_FALSE(i.cache_roots.empty());
    EXPECT_NE(std::find(i.cache_roots.begin(), i.cache_roots.end(), i.cache_writable), i.cache_roots.end());
  }
}

// Issue 52 item 5: fa4jit_prewarm with jobs = -1 or a NULL report pointer returned FA4JIT_OK;
// docs/C_API.md makes NULL out pointers (and negative counts) FA4JIT_INVALID_ARGUMENT, before
// anything is compiled.
TEST(CApi, PrewarmRefusesANegativeJobCountAndANullReport) {
  const char* config = R"({"depth": 64})";
  char* report = reinterpret_cast<char*>(1);  // must be reset, not left as it was
  EXPECT_EQ(fa4jit_prewarm(config, "sm_80", -1, &report), FA4JIT_INVALID_ARGUMENT);
  EXPECT_TRUE(report == nullptr);
  EXPECT_NE(std::string(fa4jit_last_error()).find("fa4jit_prewarm: jobs is negative"), std::string::npos)
      << fa4jit_last_error();
  EXPECT_EQ(fa4jit_prewarm(config, "sm_80", 1, nullptr), FA4JIT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fa4jit_last_error()).find("out_report is NULL"), std::string::npos) << fa4jit_last_error();
  EXPECT_EQ(fa4jit_prewarm(nullptr, "sm_80", 1, &report), FA4JIT_INVALID_ARGUMENT);
}

// jit::launch_facts: what choose_kernel reads, from a launch's shapes (dense and varlen), so a C++
// caller gets the Python ops' kernel for it; shapes without heads are refused naming the field.
TEST(PublicApi, LaunchFactsFeedTheAutomaticChoice) {
  void* some = reinterpret_cast<void*>(256);
  jit::LaunchArgs a;
  a.q = jit::Tensor::contiguous(some, jit::DType::bf16, 4, 1, 28, 128);  // decode: 4 rows, 28/4 heads
  a.k = jit::Tensor::contiguous(some, jit::DType::bf16, 4, 4096, 4, 128);
  jit::LaunchFacts f = jit::launch_facts(a);
  EXPECT_EQ(f.group, 7);
  EXPECT_EQ(f.max_seqlen_q, 1);
  EXPECT_EQ(f.varlen_batch, 0);
  EXPECT_FALSE(f.pack_gqa.has_value());
  jit::FA4Config base;
  base.arch = "sm_90a";
  base.mask = jit::Mask::causal();
  EXPECT_TRUE(jit::choose_kernel(base, f).pack_gqa);

  a.q = jit::Tensor::contiguous(some, jit::DType::bf16, 1, 16048, 32, 128);  // the zoo's uneven varlen batch
  a.k = jit::Tensor::contiguous(some, jit::DType::bf16, 1, 16048, 8, 128);
  a.cu_seqlens_q = reinterpret_cast<const int*>(some);
  a.batch = 8;
  a.max_seqlen_q = 7000;
  f = jit::launch_facts(a);
  EXPECT_EQ(f.group, 4);
  EXPECT_EQ(f.max_seqlen_q, 7000);
  EXPECT_EQ(f.varlen_batch, 8);
  EXPECT_EQ(f.total_q, 16048);
  const jit::FA4Config chosen = jit::choose_kernel(base, f);
  EXPECT_TRUE(chosen.pack_gqa);
  EXPECT_EQ(chosen.BM, 128);
  EXPECT_EQ(f.window_keys, 0);  // no window
  a.window_left = 127;          // a causal window of 128 keys and 4 sink keys
  a.window_right = 0;
  a.mask_prefix = 4;
  EXPECT_EQ(jit::launch_facts(a).window_keys, 132);
  a.window_right = -1;  // one side unbounded
  EXPECT_EQ(jit::launch_facts(a).window_keys, 0);

  a.k = jit::Tensor::contiguous(some, jit::DType::bf16, 1, 16048, 5, 128);  // 32 heads over 5
  try {
    jit::launch_facts(a);
    ADD_FAILURE() << "32 query heads over 5 accepted";
  } catch (const jit::LaunchError& e) {
    EXPECT_NE(std::string(e.what()).find("k.shape[2] 5"), std::string::npos) << e.what();
  }
  EXPECT_THROW(jit::launch_facts(jit::LaunchArgs{}), jit::LaunchError);
}

// fa4jit_choose_kernel: jit::choose_kernel through plain values (the Python ops' per-launch call),
// and its refusals before anything is chosen.
TEST(CApi, ChooseKernelReportsThePackAndTheTile) {
  int32_t pack = -7, bm = -7;
  // An uneven varlen prefill batch of group 4 on sm_90a: packed, the prefill tile.
  ASSERT_EQ(fa4jit_choose_kernel("sm_90a", "bf16", "", 128, 0, 4, 7000, 8, 16048, -1, &pack, &bm), FA4JIT_OK);
  EXPECT_EQ(pack, 1);
  EXPECT_EQ(bm, 128);
  // The same over an e4m3 KV cache: packed, the default tile; the caller's pack_gqa 0 wins.
  ASSERT_EQ(fa4jit_choose_kernel("sm_90a", "bf16", "e4m3", 128, 128, 4, 7000, 8, 16048, -1, &pack, &bm), FA4JIT_OK);
  EXPECT_EQ(pack, 1);
  EXPECT_EQ(bm, 0);
  ASSERT_EQ(fa4jit_choose_kernel("sm_90a", "bf16", nullptr, 128, 0, 4, 7000, 8, 16048, 0, &pack, &bm), FA4JIT_OK);
  EXPECT_EQ(pack, 0);
  // MHA decode: unpacked at sm_90a's decode tile; no arch, no tile.
  ASSERT_EQ(fa4jit_choose_kernel("sm_90a", "fp16", nullptr, 96, 0, 1, 1, 0, 0, -1, &pack, &bm), FA4JIT_OK);
  EXPECT_EQ(pack, 0);
  EXPECT_EQ(bm, 64);
  ASSERT_EQ(fa4jit_choose_kernel(nullptr, "fp16", nullptr, 96, 0, 1, 1, 0, 0, -1, &pack, &bm), FA4JIT_OK);
  EXPECT_EQ(bm, 0);

  EXPECT_EQ(fa4jit_choose_kernel("sm_90a", "bf16", nullptr, 128, 0, 4, 1, 0, 0, 2, &pack, &bm),
            FA4JIT_INVALID_ARGUMENT);
  EXPECT_NE(std::string(fa4jit_last_error()).find("pack_gqa is 2"), std::string::npos) << fa4jit_last_error();
  EXPECT_EQ(fa4jit_choose_kernel("sm_90a", nullptr, nullptr, 128, 0, 4, 1, 0, 0, -1, &pack, &bm),
            FA4JIT_INVALID_ARGUMENT);
  EXPECT_EQ(fa4jit_choose_kernel("sm_90a", "bf16", nullptr, 128, 0, 4, 1, 0, 0, -1, nullptr, &bm),
            FA4JIT_INVALID_ARGUMENT);
  EXPECT_EQ(fa4jit_choose_kernel("sm_90a", "bf32", nullptr, 128, 0, 4, 1, 0, 0, -1, &pack, &bm), FA4JIT_CONFIG_ERROR);
  EXPECT_EQ(fa4jit_choose_kernel("sm_91z", "bf16", nullptr, 128, 0, 4, 1, 0, 0, -1, &pack, &bm), FA4JIT_CONFIG_ERROR);
  EXPECT_EQ(fa4jit_choose_kernel("sm_90a", "bf16", nullptr, 128, 0, 0, 1, 0, 0, -1, &pack, &bm), FA4JIT_CONFIG_ERROR);
  EXPECT_NE(std::string(fa4jit_last_error()).find("choose_kernel: group 0"), std::string::npos) << fa4jit_last_error();
}

// fa4jit_choose_kernel2: the same with the launch's window. gpt-oss's 128 keys (left 127, right 0)
// at head dim 64 take sm_90a's 64-row tile; unbounded extents choose as fa4jit_choose_kernel.
TEST(CApi, ChooseKernel2ReadsTheWindow) {
  int32_t pack = -7, bm = -7;
  ASSERT_EQ(fa4jit_choose_kernel2("sm_90a", "bf16", "", 64, 0, 8, 16384, 0, 16384, 127, 0, 0, -1, &pack, &bm),
            FA4JIT_OK);
  EXPECT_EQ(pack, 0);
  EXPECT_EQ(bm, 64);
  ASSERT_EQ(fa4jit_choose_kernel2("sm_90a", "bf16", "", 64, 0, 8, 16384, 0, 16384, 4095, 0, 0, -1, &pack, &bm),
            FA4JIT_OK);
  EXPECT_EQ(bm, 0);
  ASSERT_EQ(fa4jit_choose_kernel2("sm_90a", "bf16", "", 64, 0, 8, 16384, 0, 16384, -1, -1, 0, -1, &pack, &bm),
            FA4JIT_OK);
  EXPECT_EQ(bm, 0);
  EXPECT_EQ(fa4jit_choose_kernel2("sm_90a", "bf16", "", 64, 0, 8, 16384, 0, 16384, 127, 0, 0, 3, &pack, &bm),
            FA4JIT_INVALID_ARGUMENT);
}

}  // namespace
