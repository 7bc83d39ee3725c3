#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "runtime/compiled_kernel.hpp"
#include "runtime/driver.hpp"
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
  cmd->add_subcommand("verify", "Check every entry (digest, meta.json; loads it where a GPU can run it); remove bad ones")
      ->callback([] {
        const bool gpu = detail::driver_unavailable_reason().empty();
        int sm = 0;
        if (gpu) sm = detail::device_sm(detail::ensure_context());
        std::size_t loaded = 0;
        const auto r = detail::disk_cache().verify([&](const cache::Artifact& a) -> std::string {
          if (!gpu) return {};
          try {
            const ResolvedConfig rc = resolve(config_from_json(a.meta.at("config")));
            if (!detail::runs_on(rc, sm)) return {};  // built for another GPU: nothing to load here
            detail::LoadedModule m(a.cubin, rc.smem_bytes, a.meta.at("key").get<std::string>());
            ++loaded;
            return {};
          } catch (const std::exception& e) {
            return fmt::format("does not load on this GPU: {}", e.what());
          }
        });
        for (const auto& p : r.problems) fmt::print("bad: {}\n", p);
        fmt::print("verified {} entries ({} loaded on the GPU{}), removed {}\n", r.checked, loaded,
                   gpu ? "" : ": none here", r.removed);
      });
  auto* exp = cmd->add_subcommand("export", "Write entries (all, or --key ...) to one archive file");
  auto exp_path = std::make_shared<std::string>();
  auto exp_keys = std::make_shared<std::vector<std::string>>();
  exp->add_option("file", *exp_path, "archive to write")->required();
  exp->add_option("--key", *exp_keys, "keys to export (default: every entry)");
  exp->callback([exp_path, exp_keys] {
    fmt::print("exported {} entries to {}\n", detail::disk_cache().export_archive(*exp_path, *exp_keys), *exp_path);
  });
  auto* imp = cmd->add_subcommand("import", "Verify and publish the entries of an archive into the writable tier");
  auto imp_path = std::make_shared<std::string>();
  imp->add_option("file", *imp_path, "archive to read")->required();
  imp->callback([imp_path] {
    const auto r = detail::disk_cache().import_archive(*imp_path);
    fmt::print("imported {} entries ({} already present, {} rejected)\n", r.imported, r.present, r.rejected);
  });
  auto* prune = cmd->add_subcommand("prune", "Remove least recently used entries down to a size");
  auto max_size = std::make_shared<std::uint64_t>(0);
  prune->add_option("--max-size", *max_size, "bytes to keep at most")->required();
  prune->callback([max_size] { fmt::print("removed {} entries\n", detail::disk_cache().prune(*max_size)); });
}

}  // namespace jit::cli
