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
      [](FA4Config& c) { c.depth = 64; },
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
    int* fields[] = {&u.exp2_emulate_every, &u.intra_wg_overlap, &u.pingpong,  &u.cross_tile,
                     &u.wg_spans,           &u.persistent,       &u.line_info, &u.short_keys};
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

// sm90a causal kernels with the cross-tile overlap (opt-in, cross_tile=1; the default has none and
// no sibling): launches of short sequences run a second cubin without it (Tuning::short_keys).
// get_kernel fetches it beside the kernel, and the launch picks by the longest key sequence its
// arguments allow.
TEST(PublicApi, CausalKernelCarriesItsShortKeysSibling) {
  FA4Config c;
  c.arch = "sm_90a";
  c.depth = 96;
  c.mask = Mask::causal();
  const KernelPtr by_default = get_kernel(c);
  const auto* plain_kernel = dynamic_cast<const detail::CompiledKernel*>(by_default.get());
  ASSERT_NE(plain_kernel, nullptr);
  EXPECT_EQ(plain_kernel->short_keys(), nullptr);
  EXPECT_EQ(by_default->config().tuning.cross_tile, 0);
  ResolveOptions overlap;
  overlap.tune.cross_tile = 1;
  const KernelPtr k = get_kernel(c, overlap);
  const auto* compiled = dynamic_cast<const detail::CompiledKernel*>(k.get());
  ASSERT_NE(compiled, nullptr);
  ASSERT_NE(compiled->short_keys(), nullptr);
  const Kernel& sibling = *compiled->short_keys();
  EXPECT_EQ(k->config().tuning.short_keys, 2048);
  EXPECT_EQ(sibling.config().tuning.cross_tile, 0);
  EXPECT_EQ(sibling.config().tuning.short_keys, 0);
  EXPECT_EQ(sibling.config().config, k->config().config);
  ResolveOptions plain;
  plain.tune.cross_tile = 0;
  EXPECT_EQ(get_kernel(c, plain).get(), &sibling);  // one object in this process

  LaunchArgs a;
  a.k.shape = {2, 2048, 8, 96};
  EXPECT_EQ(&compiled->kernel_for(a), &sibling);
  a.k.shape[1] = 2049;
  EXPECT_EQ(&compiled->kernel_for(a), k.get());
  a.k.shape = {1, 4096, 8, 96};  // varlen: the total bounds every sequence
  a.cu_seqlens_k = reinterpret_cast<const int*>(16);
  EXPECT_EQ(&compiled->kernel_for(a), k.get());
  a.max_seqlen_k = 2048;  // ... unless the caller bounds the longest sequence (FlashAttention's hint)
  EXPECT_EQ(&compiled->kernel_for(a), &sibling);
  a.max_seqlen_k = 2049;
  EXPECT_EQ(&compiled->kernel_for(a), k.get());
  a.max_seqlen_k = 8192;  // a hint above the total: the total still bounds it
  a.k.shape[1] = 2000;
  EXPECT_EQ(&compiled->kernel_for(a), &sibling);
  a = LaunchArgs{};
  a.k.shape = {100, 64, 8, 96};  // paged: max_pages x page_size
  a.page_table = reinterpret_cast<const int*>(16);
  a.max_pages = 32;
  EXPECT_EQ(&compiled->kernel_for(a), &sibling);
  a.max_pages = 33;
  EXPECT_EQ(&compiled->kernel_for(a), k.get());
  a.max_seqlen_k = 1500;  // sequences shorter than their page-table rows
  EXPECT_EQ(&compiled->kernel_for(a), &sibling);

  ResolveOptions one;
  one.tune.short_keys = 0;
  const auto* single = dynamic_cast<const detail::CompiledKernel*>(get_kernel(c, one).get());
  ASSERT_NE(single, nullptr);
  EXPECT_EQ(single->short_keys(), nullptr);
  EXPECT_NE(single->key(), k->key());
  c.mask = Mask::none();  // no overlap, no sibling
  EXPECT_EQ(dynamic_cast<const detail::CompiledKernel&>(*get_kernel(c)).short_keys(), nullptr);
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

}  // namespace
