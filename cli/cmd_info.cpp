#include <cstdio>
#include <cstdlib>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/commands.hpp"
#include "fa4jit/errors.hpp"
#include "fa4jit/jit.hpp"
#include "generator/presets.hpp"

namespace jit::cli {

void add_info(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "info",
      "Version, driver, GPUs, NVRTC, the cache and logging environment, archs; exits 1 after listing "
      "any environment value it refuses");
  cmd->callback([] {
    const RuntimeInfo i = runtime_info();
    fmt::print("fa4jit {}\n", i.version);
    fmt::print("nvrtc: {}.{} (archs: {})\n", i.nvrtc_major, i.nvrtc_minor, fmt::join(i.nvrtc_archs, " "));
    fmt::print("driver: {}\n", i.driver);
    fmt::print("gpus: {}\n", i.gpus.empty() ? "none" : fmt::format("{}", fmt::join(i.gpus, "; ")));
    fmt::print("cache: {}\n",
               i.cache_roots.empty() ? "memory only" : fmt::format("{}", fmt::join(i.cache_roots, " : ")));
    fmt::print("kernel bundles: {}\n", i.bundles.empty() ? "none" : fmt::format("{}", fmt::join(i.bundles, " : ")));
    fmt::print("cache writable: {}\n",
               i.cache_writable.empty() ? "none (kernels are kept in memory only)" : i.cache_writable);
    fmt::print("cache sealed: {}\n", i.sealed ? "yes (FA4JIT_SEALED: a miss is an error)" : "no");
    fmt::print("compile policy: {}\n", i.compile_policy);
    fmt::print("cache max bytes: {}\n", i.cache_max_bytes ? fmt::format("{}", i.cache_max_bytes) : "no cap");
    fmt::print("remote cache: {} (Redis tier {})\n", i.remote_cache.empty() ? "none" : i.remote_cache,
               i.redis_built ? "built in" : "not built in");
    const char* tune = std::getenv("FA4JIT_TUNE");  // read by the CLI's commands, never by the library
    fmt::print("tune: {}\n", tune && *tune ? fmt::format("FA4JIT_TUNE={}", tune) : "none");
    fmt::print("log level: {}\n", to_string(i.log_level));
    fmt::print(
        "this process: {} compiled ({:.0f} ms), {} memory hits, {} disk hits, {} remote hits, {} failed ({} "
        "forbidden)\n",
        i.stats.compiles, i.stats.compile_ms, i.stats.memory_hits, i.stats.disk_hits, i.stats.remote_hits,
        i.stats.failures, i.stats.forbidden);
    fmt::print("archs: {}\n", fmt::join(supported_archs(), " "));
    fmt::print("presets: {}\n", fmt::join(preset_names(), " "));
    // Every refused environment value, after everything else that could be shown: one look at
    // `fa4jit info` finds them all, and the exit status still says something is wrong.
    for (const std::string& p : i.problems) fmt::print("problem: {}\n", p);
    if (!i.problems.empty()) {
      std::fflush(stdout);
      throw Error(fmt::format("{} environment value{} refused (the problem lines above)", i.problems.size(),
                              i.problems.size() == 1 ? "" : "s"));
    }
  });
}

}  // namespace jit::cli
