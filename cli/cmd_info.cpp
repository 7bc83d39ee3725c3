#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/commands.hpp"
#include "fa4jit/jit.hpp"
#include "generator/presets.hpp"

namespace jit::cli {

void add_info(CLI::App& app) {
  auto* cmd = app.add_subcommand("info", "Driver, GPUs, NVRTC version, cache directories, archs");
  cmd->callback([] {
    const RuntimeInfo i = runtime_info();
    fmt::print("fa4jit {}\n", i.version);
    fmt::print("nvrtc: {}.{} (archs: {})\n", i.nvrtc_major, i.nvrtc_minor, fmt::join(i.nvrtc_archs, " "));
    fmt::print("driver: {}\n", i.driver);
    fmt::print("gpus: {}\n", i.gpus.empty() ? "none" : fmt::format("{}", fmt::join(i.gpus, "; ")));
    fmt::print("cache: {}\n", i.cache_roots.empty() ? "memory only" : fmt::format("{}", fmt::join(i.cache_roots, " : ")));
    fmt::print("archs: {}\n", fmt::join(supported_archs(), " "));
    fmt::print("presets: {}\n", fmt::join(preset_names(), " "));
  });
}

}  // namespace jit::cli
