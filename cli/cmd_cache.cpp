#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "runtime/runtime_internal.hpp"

namespace jit::cli {

void add_cache(CLI::App& app) {
  auto* cmd = app.add_subcommand("cache", "Inspect and maintain the kernel cache");
  cmd->require_subcommand(1);
  cmd->add_subcommand("ls", "List entries")->callback([] {
    for (const auto& e : detail::disk_cache().list()) {
      const auto& m = e.meta;
      const auto cfg = m.value("config", nlohmann::json::object());
      fmt::print("{}  {:>8} B  {:<8} d{:<4} {:<5} {}\n", e.key, e.bytes, m.value("arch", "?"), cfg.value("depth", 0),
                 cfg.value("dtype", "?"), cfg.contains("mask") ? cfg["mask"].value("kind", "?") : "?");
    }
  });
  cmd->add_subcommand("stats", "Entry count and bytes per tier")->callback([] {
    const auto entries = detail::disk_cache().list();
    std::uint64_t bytes = 0;
    for (const auto& e : entries) bytes += e.bytes;
    fmt::print("entries: {}\nbytes: {}\n", entries.size(), bytes);
    for (const auto& r : detail::disk_cache().options().roots) fmt::print("tier: {}\n", r.string());
  });
  cmd->add_subcommand("clear", "Remove every entry of the writable tier")->callback([] {
    fmt::print("removed {} entries\n", detail::disk_cache().clear());
  });
  cmd->add_subcommand("verify", "Check every entry; remove bad ones")->callback([] {
    const auto r = detail::disk_cache().verify();
    for (const auto& p : r.problems) fmt::print("bad: {}\n", p);
    fmt::print("verified {} entries, removed {}\n", r.checked, r.removed);
  });
  auto* prune = cmd->add_subcommand("prune", "Remove least recently used entries down to a size");
  auto max_size = std::make_shared<std::uint64_t>(0);
  prune->add_option("--max-size", *max_size, "bytes to keep at most")->required();
  prune->callback([max_size] { fmt::print("removed {} entries\n", detail::disk_cache().prune(*max_size)); });
}

}  // namespace jit::cli
