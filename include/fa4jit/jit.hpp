// fa4jit: runtime-generated FlashAttention-4-class attention kernels.
//
//   jit::FA4Config cfg;
//   cfg.dtype = jit::DType::bf16; cfg.depth = 128; cfg.num_q_heads = 32; cfg.group = 4;
//   cfg.mask = jit::Mask::causal();
//   auto kernel = jit::get_kernel(cfg);   // generated, compiled, cached; thread-safe
//   kernel->launch(args, stream);
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "fa4jit/advanced.hpp"
#include "fa4jit/config.hpp"
#include "fa4jit/errors.hpp"
#include "fa4jit/export.hpp"
#include "fa4jit/kernel.hpp"
#include "fa4jit/log.hpp"
#include "fa4jit/version.hpp"

namespace jit {

// Generates, compiles (NVRTC) and caches (memory, then disk) the kernel for `config`.
// An empty config.arch means the current CUDA device's arch. Many threads asking for one
// config share one compile. Works without a GPU when config.arch is set. `options`: tuning
// overrides (fa4jit/advanced.hpp; the environment is never read).
FA4JIT_API KernelPtr get_kernel(const FA4Config& config, const ResolveOptions& options = {});

// The CUDA source get_kernel compiles for `config` (deterministic: same inputs, same bytes).
FA4JIT_API std::string generate_source(const FA4Config& config, const ResolveOptions& options = {});

// The cache key get_kernel uses for `config`.
FA4JIT_API std::string cache_key(const FA4Config& config, const ResolveOptions& options = {});

// The arch string of the current device ("sm_90a" for Hopper, "sm_100a" for Blackwell,
// "sm_80" ...). Throws DriverError without a driver or GPU.
FA4JIT_API std::string current_device_arch();

// Whether get_kernel may compile on a cache miss. A serving process prewarms (fa4jit prewarm
// --model, or get_kernel on each config), then switches to forbid: a kernel missing from every
// cache tier then throws CacheMissError before NVRTC runs, instead of stalling a request for
// seconds. warn compiles and logs the config (at warn level) so it can join the prewarm list.
// Default: FA4JIT_COMPILE=allow|warn|forbid, else allow; set_compile_policy overrides it.
enum class CompilePolicy { allow, warn, forbid };
FA4JIT_API void set_compile_policy(CompilePolicy policy);
FA4JIT_API CompilePolicy compile_policy();  // ConfigError naming FA4JIT_COMPILE for a bad value
FA4JIT_API const char* to_string(CompilePolicy policy);
FA4JIT_API CompilePolicy compile_policy_from_string(const std::string& s);  // ConfigError otherwise

// What get_kernel did in this process (all threads) since it started.
struct Stats {
  // NVRTC compiles (cache misses), a kernel's split-KV combine kernel included: compiled once per
  // (arch, output dtype, head dim) and shared, so a process's first kernel of a head dim may count 2.
  // The hit counters count get_kernel calls.
  std::uint64_t compiles = 0;
  std::uint64_t memory_hits = 0;  // served from this process's memory (or joined a compile in flight)
  std::uint64_t disk_hits = 0;    // loaded from a disk cache tier
  std::uint64_t remote_hits = 0;  // loaded from the remote (Redis) tier
  std::uint64_t failures = 0;     // calls that threw (bad config, compile error, sealed miss ...)
  std::uint64_t forbidden = 0;    // misses refused by CompilePolicy::forbid (counted in failures too)
  double compile_ms = 0;          // NVRTC time of the compiles
};
FA4JIT_API Stats stats();

// The library, the toolchain and the environment this process runs with.
struct RuntimeInfo {
  std::string version;  // FA4JIT_VERSION_STRING of the library (may differ from the header's)
  int nvrtc_major = 0, nvrtc_minor = 0;
  std::vector<std::string> nvrtc_archs;
  std::string driver;  // "13.0", or why there is none
  std::vector<std::string> gpus;
  std::vector<std::string> cache_roots;  // tiers searched, in order
  std::vector<std::string> bundles;      // read-only kernel bundles searched after them
  std::string cache_writable;            // the tier that receives new kernels; empty: memory only
  bool sealed = false;                   // FA4JIT_SEALED: a miss is an error, never a compile
  std::string compile_policy;            // allow / warn / forbid, or why FA4JIT_COMPILE is refused
  std::string remote_cache;              // FA4JIT_REMOTE_CACHE, empty: none
  bool redis_built = false;              // whether this build has the Redis tier
  std::uint64_t cache_max_bytes = 0;     // FA4JIT_CACHE_MAX_BYTES, 0: no cap
  LogLevel log_level = LogLevel::warn;
  Stats stats;
  // Environment values that were refused (each message names the variable): reported here rather
  // than failing the call, so `fa4jit info` can show every one of them. get_kernel still fails on them.
  std::vector<std::string> problems;
};
FA4JIT_API RuntimeInfo runtime_info();

}  // namespace jit
