// get_kernel: memory cache (one compile per key per process) over the disk cache over NVRTC.
#include <future>
#include <mutex>
#include <unordered_map>

#include <nlohmann/json.hpp>

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

cache::Store& disk_cache() {
  static cache::Store store([] {
    cache::Options o = cache::Store::options_from_env();
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

}  // namespace

std::string current_device_arch() { return detail::device_arch(detail::ensure_context()); }

std::string generate_source(const FA4Config& config) { return detail::compile_inputs(detail::with_arch(config)).source; }

std::string cache_key(const FA4Config& config) { return detail::compile_inputs(detail::with_arch(config)).key; }

KernelPtr get_kernel(const FA4Config& config) {
  const detail::CompileInputs in = detail::compile_inputs(detail::with_arch(config));  // ConfigError first

  MemoryCache& mem = memory_cache();
  std::promise<KernelPtr> promise;
  std::unique_lock<std::mutex> lock(mem.mu);
  if (auto it = mem.entries.find(in.key); it != mem.entries.end()) {
    std::shared_future<KernelPtr> pending = it->second;
    lock.unlock();           // wait without holding the map
    return pending.get();    // rethrows the owner's error
  }
  mem.entries.emplace(in.key, promise.get_future().share());
  lock.unlock();
  try {
    cache::Artifact art = detail::disk_cache().get_or_compile(
        in.key, [&] { return detail::compile_artifact(in); }, to_json(in.config.config).dump());
    const double ms = art.origin == "compiled" ? art.meta.value("compile_ms", 0.0) : 0.0;
    KernelPtr k = std::make_shared<detail::CompiledKernel>(in.config, in.key, std::move(art.cubin), art.origin, ms);
    promise.set_value(k);
    return k;
  } catch (...) {
    lock.lock();
    mem.entries.erase(in.key);  // a later call may succeed (e.g. after fixing the cache dir)
    lock.unlock();
    promise.set_exception(std::current_exception());
    throw;
  }
}

}  // namespace jit
