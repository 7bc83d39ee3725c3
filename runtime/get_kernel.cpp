// get_kernel: memory cache (one compile per key per process) over the disk cache over NVRTC.
#include <atomic>
#include <functional>
#include <future>
#include <mutex>
#include <system_error>
#include <unordered_map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/log.hpp"
#include "cache/store.hpp"
#include "fa4jit/errors.hpp"
#include "fa4jit/jit.hpp"
#include "generator/combine.hpp"
#include "generator/key.hpp"
#include "generator/source.hpp"
#include "runtime/compiled_kernel.hpp"
#include "runtime/driver.hpp"
#include "runtime/nvrtc.hpp"
#include "runtime/runtime_internal.hpp"

namespace jit {

namespace detail {

CompileInputs compile_inputs(const FA4Config& config, const ResolveOptions& options) {
  ResolvedConfig rc = resolve(config, options);
  const auto [major, minor] = nvrtc_version();
  return compile_inputs(std::move(rc), fmt::format("{}.{}", major, minor), options.tune);
}

cache::Store& disk_cache() {
  static cache::Store store([] {
    cache::Options o = cache::Store::options_from_env();
    if (!o.bundles_from_env) o.bundles = installed_bundles();
    o.validate = check_cache_entry;
    return o;
  }());
  return store;
}

namespace {

// meta.json's record of one compile: the key inputs, NVRTC time, sizes and ptxas resources.
cache::Artifact artifact_of(CompileOutput out, nlohmann::json meta, const char* entry, int smem_dynamic) {
  const ResourceUsage use = parse_ptxas_log(out.log, entry);
  meta["compile_ms"] = out.ms;
  meta["cubin_bytes"] = out.cubin.size();
  meta["ptx_bytes"] = out.ptx.size();
  meta["resources"] = {{"registers", use.registers},
                       {"spill_stores", use.spill_stores},
                       {"spill_loads", use.spill_loads},
                       {"stack_frame", use.stack_frame},
                       {"smem_dynamic", smem_dynamic}};
  return cache::Artifact{std::move(out.cubin), std::move(meta), "compiled"};
}

}  // namespace

cache::Artifact compile_artifact(const CompileInputs& in) {
  CompileOutput out = nvrtc_compile(in.source, kSourceName, *in.headers, in.compile_options());
  return artifact_of(std::move(out), describe(in), kEntryName, in.config.smem_bytes);
}

CombineInputs combine_inputs(const ResolvedConfig& rc) {
  const auto [major, minor] = nvrtc_version();
  return combine_inputs(combine_spec(rc), fmt::format("{}.{}", major, minor));
}

cache::Artifact compile_artifact(const CombineInputs& in) {
  CompileOutput out = nvrtc_compile(in.source, kCombineSourceName, *in.headers, in.compile_options());
  return artifact_of(std::move(out), describe(in), kCombineEntryName, 0);
}

FA4Config with_arch(const FA4Config& config) {
  FA4Config c = config;
  if (!c.arch.empty()) return c;
  try {
    c.arch = current_device_arch();
  } catch (const DriverError& e) {
    throw ConfigError(std::string("arch: empty, and there is no GPU to take it from (") + e.what() +
                      "); set FA4Config::arch, e.g. sm_90a");
  }
  return c;
}

}  // namespace detail

namespace {

// Process-wide: key -> the value (or the load in flight). Threads asking for one key wait on the
// same future, so each key is compiled once per process; a failure is not kept (a later call may
// succeed, e.g. after fixing the cache dir).
template <class T>
class OncePerKey {
 public:
  // `joined`: set when the value came from this map (made earlier or by another thread).
  T get(const std::string& key, const std::function<T()>& make, bool* joined = nullptr) {
    std::promise<T> promise;
    std::unique_lock<std::mutex> lock(mu_);
    if (auto it = entries_.find(key); it != entries_.end()) {
      std::shared_future<T> pending = it->second;
      lock.unlock();  // wait without holding the map
      if (joined) *joined = true;
      return pending.get();  // rethrows the owner's error
    }
    entries_.emplace(key, promise.get_future().share());
    lock.unlock();
    if (joined) *joined = false;
    try {
      T value = make();
      promise.set_value(value);
      return value;
    } catch (...) {
      lock.lock();
      entries_.erase(key);
      lock.unlock();
      promise.set_exception(std::current_exception());
      throw;
    }
  }

 private:
  std::mutex mu_;
  std::unordered_map<std::string, std::shared_future<T>> entries_;
};

OncePerKey<KernelPtr>& kernels() {
  static OncePerKey<KernelPtr> map;
  return map;
}

OncePerKey<detail::CombinePtr>& combine_kernels() {
  static OncePerKey<detail::CombinePtr> map;
  return map;
}

// jit::stats(): relaxed atomics, read as a snapshot (each counter exact, not a consistent cut).
struct Counters {
  std::atomic<std::uint64_t> compiles{0}, memory_hits{0}, disk_hits{0}, remote_hits{0}, failures{0}, forbidden{0};
  std::atomic<std::uint64_t> compile_us{0};
};

Counters& counters() {
  static Counters c;
  return c;
}

// Where a kernel came from, counted and logged: a compile at info (one line: the kernel, its
// arch, the seconds NVRTC took and the cache tier it was written to), a hit at debug.
void record(const detail::CompileInputs& in, const cache::Artifact& art, double compile_ms) {
  Counters& n = counters();
  const char* what = "memory";
  if (art.origin == "compiled") {
    n.compiles++;
    n.compile_us += static_cast<std::uint64_t>(compile_ms * 1000);
    what = nullptr;
  } else if (art.origin == "remote") {
    n.remote_hits++;
    what = "remote";
  } else if (art.origin == "memory") {
    n.memory_hits++;  // the cache keeps kernels in memory when no tier is writable
  } else {
    n.disk_hits++;
    what = "disk";
  }
  const LogLevel level = what ? LogLevel::debug : LogLevel::info;
  if (!detail::log_enabled(level)) return;
  const auto& c = in.config.config;
  const std::string config = fmt::format("{} d{} {} (key {})", c.arch, c.depth, to_string(c.dtype), in.key);
  if (what)
    detail::log(level, fmt::format("kernel {}: {} hit ({})", config, what, art.origin));
  else
    detail::log(level, fmt::format("kernel {}: compiled in {:.2f} s, cached in {}", config, compile_ms / 1000.0,
                                   art.written.empty() ? "memory" : art.written));
}

// Called by the store on a miss in every tier, before NVRTC runs. `what`: "kernel <config JSON>"
// or "split-KV combine kernel <spec JSON>".
template <class Inputs>
cache::Artifact compile_under_policy(const Inputs& in, const std::string& what) {
  switch (compile_policy()) {
    case CompilePolicy::allow: break;
    case CompilePolicy::warn:
      detail::log(
          LogLevel::warn,
          fmt::format("compiling {} (key {}) under compile policy warn: add it to the prewarm list", what, in.key));
      break;
    case CompilePolicy::forbid:
      counters().forbidden++;
      throw CacheMissError(
          fmt::format("compile policy forbid (jit::set_compile_policy or FA4JIT_COMPILE): {} "
                      "(key {}) is in none of the cache tiers; prewarm it (fa4jit prewarm) or allow "
                      "compiles",
                      what, in.key));
  }
  return detail::compile_artifact(in);
}

// A kernel not in this process's memory: its entry and its combine kernel's, looked up (and, on a
// miss, compiled) side by side: a first kernel waits for the longer of them.
KernelPtr load_kernel(const detail::CompileInputs& in) {
  // FA4JIT_LOG is read at the first log line, which cannot report an error: refused here, at the
  // first kernel a process loads (`fa4jit info` lists it with the other bad values).
  if (std::string bad = detail::log_env_problem(); !bad.empty()) throw ConfigError(bad);
  std::future<detail::CombinePtr> combine;
  try {
    combine = std::async(std::launch::async, [&] { return detail::get_combine(in.config); });
  } catch (const std::system_error&) {  // no thread to be had: fetched after the kernel instead
  }
  cache::Artifact art;
  try {
    const std::string what = to_json(in.config.config).dump();
    art = detail::disk_cache().get_or_compile(
        in.key, [&] { return compile_under_policy(in, "kernel " + what); }, what);
  } catch (...) {
    // It reads `in`; the kernel's own error is the one to report.
    if (combine.valid()) combine.wait();
    throw;
  }
  detail::CombinePtr c = combine.valid() ? combine.get() : detail::get_combine(in.config);
  const double ms = art.origin == "compiled" ? art.meta.value("compile_ms", 0.0) : 0.0;
  record(in, art, ms);
  return std::make_shared<detail::CompiledKernel>(in.config, in.key, std::move(art.cubin), art.origin, ms,
                                                  std::move(c));
}

}  // namespace

namespace detail {

// The combine kernel of `rc`'s (arch, output dtype, head dim): process memory, then the cache
// tiers, then NVRTC. Its compiles count in Stats::compiles; its hits are part of its kernel's.
CombinePtr get_combine(const ResolvedConfig& rc) {
  const CombineInputs in = combine_inputs(rc);
  return jit::combine_kernels().get(in.key, [&] {
    const std::string what = "split-KV combine kernel " + to_json(in.spec).dump();
    cache::Artifact art = disk_cache().get_or_compile(
        in.key, [&] { return jit::compile_under_policy(in, what); }, what);
    if (art.origin == "compiled") {
      const double ms = art.meta.value("compile_ms", 0.0);
      jit::counters().compiles++;
      jit::counters().compile_us += static_cast<std::uint64_t>(ms * 1000);
      log(LogLevel::info, fmt::format("{} (key {}): compiled in {:.2f} s, cached in {}", what, in.key, ms / 1000.0,
                                      art.written.empty() ? "memory" : art.written));
    }
    return std::make_shared<const CombineKernel>(in.key, std::move(art.cubin), art.origin,
                                                 combine_waits_for_kernel(in.spec));
  });
}

}  // namespace detail

std::string current_device_arch() { return detail::device_arch(detail::ensure_context()); }

std::string generate_source(const FA4Config& config, const ResolveOptions& options) {
  return detail::compile_inputs(detail::with_arch(config), options).source;
}

std::string cache_key(const FA4Config& config, const ResolveOptions& options) {
  return detail::compile_inputs(detail::with_arch(config), options).key;
}

Stats stats() {
  const Counters& n = counters();
  Stats s;
  s.compiles = n.compiles.load();
  s.memory_hits = n.memory_hits.load();
  s.disk_hits = n.disk_hits.load();
  s.remote_hits = n.remote_hits.load();
  s.failures = n.failures.load();
  s.forbidden = n.forbidden.load();
  s.compile_ms = static_cast<double>(n.compile_us.load()) / 1000.0;
  return s;
}

KernelPtr get_kernel(const FA4Config& config, const ResolveOptions& options) {
  FA4Config c;
  detail::CompileInputs in;
  try {
    c = detail::with_arch(config);
    in = detail::compile_inputs(c, options);  // ConfigError first
  } catch (...) {
    counters().failures++;
    throw;
  }

  bool joined = false;
  try {
    KernelPtr k = kernels().get(
        in.key, [&] { return load_kernel(in); }, &joined);
    if (joined) counters().memory_hits++;
    return k;
  } catch (...) {
    counters().failures++;
    throw;
  }
}

}  // namespace jit
