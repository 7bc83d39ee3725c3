// get_kernel: memory cache (one compile per key per process) over the disk cache over NVRTC.
#include <atomic>
#include <future>
#include <mutex>
#include <unordered_map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/log.hpp"
#include "cache/store.hpp"
#include "fa4jit/errors.hpp"
#include "fa4jit/jit.hpp"
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

cache::Artifact compile_artifact(const CompileInputs& in) {
  const CompileOutput out = nvrtc_compile(in.source, kSourceName, *in.headers, in.compile_options());
  nlohmann::json meta = describe(in);
  const ResourceUsage use = parse_ptxas_log(out.log);
  meta["compile_ms"] = out.ms;
  meta["cubin_bytes"] = out.cubin.size();
  meta["ptx_bytes"] = out.ptx.size();
  meta["resources"] = {{"registers", use.registers},
                       {"spill_stores", use.spill_stores},
                       {"spill_loads", use.spill_loads},
                       {"stack_frame", use.stack_frame},
                       {"smem_dynamic", in.config.smem_bytes}};
  return cache::Artifact{out.cubin, std::move(meta), "compiled"};
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

// Process-wide: key -> the kernel (or the compile in flight). Threads asking for one key
// wait on the same future, so each key is compiled once per process.
struct MemoryCache {
  std::mutex mu;
  std::unordered_map<std::string, std::shared_future<KernelPtr>> entries;
};

MemoryCache& memory_cache() {
  static MemoryCache cache;
  return cache;
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

// Where a kernel came from, counted and (info/debug) logged.
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
    detail::log(level, fmt::format("kernel {}: compiled in {:.0f} ms", config, compile_ms));
}

// Called by the store on a miss in every tier, before NVRTC runs.
cache::Artifact compile_under_policy(const detail::CompileInputs& in, const std::string& config_json) {
  switch (compile_policy()) {
    case CompilePolicy::allow: break;
    case CompilePolicy::warn:
      detail::log(LogLevel::warn, fmt::format("compiling kernel {} (key {}) under compile policy warn: add it to the "
                                              "prewarm list",
                                              config_json, in.key));
      break;
    case CompilePolicy::forbid:
      counters().forbidden++;
      throw CacheMissError(
          fmt::format("compile policy forbid (jit::set_compile_policy or FA4JIT_COMPILE): kernel {} "
                      "(key {}) is in none of the cache tiers; prewarm it (fa4jit prewarm) or allow "
                      "compiles",
                      config_json, in.key));
  }
  return detail::compile_artifact(in);
}

}  // namespace

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
  detail::CompileInputs in;
  try {
    in = detail::compile_inputs(detail::with_arch(config), options);  // ConfigError first
  } catch (...) {
    counters().failures++;
    throw;
  }

  MemoryCache& mem = memory_cache();
  std::promise<KernelPtr> promise;
  std::unique_lock<std::mutex> lock(mem.mu);
  if (auto it = mem.entries.find(in.key); it != mem.entries.end()) {
    std::shared_future<KernelPtr> pending = it->second;
    lock.unlock();  // wait without holding the map
    try {
      KernelPtr k = pending.get();  // rethrows the owner's error
      counters().memory_hits++;
      return k;
    } catch (...) {
      counters().failures++;
      throw;
    }
  }
  mem.entries.emplace(in.key, promise.get_future().share());
  lock.unlock();
  try {
    const std::string what = to_json(in.config.config).dump();
    cache::Artifact art = detail::disk_cache().get_or_compile(
        in.key, [&] { return compile_under_policy(in, what); }, what);
    const double ms = art.origin == "compiled" ? art.meta.value("compile_ms", 0.0) : 0.0;
    record(in, art, ms);
    KernelPtr k = std::make_shared<detail::CompiledKernel>(in.config, in.key, std::move(art.cubin), art.origin, ms);
    promise.set_value(k);
    return k;
  } catch (...) {
    lock.lock();
    mem.entries.erase(in.key);  // a later call may succeed (e.g. after fixing the cache dir)
    lock.unlock();
    counters().failures++;
    promise.set_exception(std::current_exception());
    throw;
  }
}

}  // namespace jit
