#define XXH_INLINE_ALL
#include <xxhash.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "fa4jit/errors.hpp"
#include "runtime/compiled_kernel.hpp"
#include "runtime/driver.hpp"
#include "runtime/runtime_internal.hpp"

namespace jit::cli {

namespace {

// What tells two entries of one arch, dtype and depth apart, as `cache ls` shows it.
struct EntryRow {
  std::string key, arch, dtype, mask, score_mod, snippets;
  std::uint64_t bytes = 0;
  int depth = 0, group = 0;
  bool pack_gqa = false;
};

// XXH3-64 of the mask and score-mod JSON when either carries a snippet: entries built from
// different snippets differ here even when every other column matches.
std::string snippet_hash(const nlohmann::json& cfg) {
  const nlohmann::json mask = cfg.value("mask", nlohmann::json::object());
  const nlohmann::json mod = cfg.value("score_mod", nlohmann::json::object());
  const std::string text = mask.dump() + "\n" + mod.dump();
  if (text.find("snippet") == std::string::npos) return {};
  return fmt::format("{:016x}", XXH3_64bits(text.data(), text.size()));
}

EntryRow row(const cache::EntryInfo& e) {
  const auto& m = e.meta;
  if (const auto c = m.find("combine"); c != m.end() && c->is_object()) {  // a split-KV combine kernel
    EntryRow r;
    r.key = e.key;
    r.bytes = e.bytes;
    r.arch = m.value("arch", "?");
    r.dtype = c->value("output_dtype", "?");
    r.depth = c->value("depth", 0);
    r.mask = "(combine)";
    r.score_mod = "-";
    return r;
  }
  const nlohmann::json cfg = m.value("config", nlohmann::json::object());
  auto kind = [&](const char* field) {
    const auto it = cfg.find(field);
    return it != cfg.end() && it->is_object() ? it->value("kind", std::string("?")) : std::string("?");
  };
  EntryRow r;
  r.key = e.key;
  r.bytes = e.bytes;
  r.arch = m.value("arch", "?");
  r.dtype = cfg.value("dtype", "?");
  r.depth = cfg.value("depth", 0);
  r.group = cfg.value("group", 0);
  r.pack_gqa = cfg.value("pack_gqa", false);
  r.mask = kind("mask");
  r.score_mod = kind("score_mod");
  r.snippets = snippet_hash(cfg);
  return r;
}

}  // namespace

void add_cache(CLI::App& app) {
  auto* cmd = app.add_subcommand("cache", "Inspect and maintain the kernel cache");
  cmd->require_subcommand(1);
  auto* ls = cmd->add_subcommand("ls",
                                 "List entries: key, size, arch, dtype, head dim, mask, score-mod, GQA group, "
                                 "packed GQA, snippet hash");
  auto ls_json = std::make_shared<bool>(false);
  ls->add_flag("--json", *ls_json, "print one JSON array (each entry's full config and meta.json)");
  ls->callback([ls_json] {
    const auto entries = detail::disk_cache().list();
    if (*ls_json) {
      nlohmann::json out = nlohmann::json::array();
      for (const auto& e : entries) {
        const EntryRow r = row(e);
        out.push_back({{"key", r.key},
                       {"bytes", r.bytes},
                       {"dir", e.dir.string()},
                       {"arch", r.arch},
                       {"dtype", r.dtype},
                       {"depth", r.depth},
                       {"mask", r.mask},
                       {"score_mod", r.score_mod},
                       {"group", r.group},
                       {"pack_gqa", r.pack_gqa},
                       {"snippet_hash", r.snippets.empty() ? nlohmann::json() : nlohmann::json(r.snippets)},
                       {"meta", e.meta}});
      }
      fmt::print("{}\n", out.dump(2));
      return;
    }
    for (const auto& e : entries) {
      const EntryRow r = row(e);
      fmt::print("{}  {:>8} B  {:<8} {:<4} d{:<4} mask={:<14} score_mod={:<8} group={:<2} {:<6} snippets={}\n", r.key,
                 r.bytes, r.arch, r.dtype, r.depth, r.mask, r.score_mod, r.group, r.pack_gqa ? "packed" : "-",
                 r.snippets.empty() ? "-" : r.snippets);
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
  cmd->add_subcommand("verify",
                      "Check every entry (digest, meta.json; loads it where a GPU can run it); remove bad ones")
      ->callback([] {
        const bool gpu = detail::driver_unavailable_reason().empty();
        int sm = 0;
        if (gpu) sm = detail::device_sm(detail::ensure_context());
        std::size_t loaded = 0;
        const auto r = detail::disk_cache().verify([&](const cache::Artifact& a) -> std::string {
          if (!gpu) return {};
          try {
            const std::string key = a.meta.at("key").get<std::string>();
            if (a.meta.contains("combine")) {  // a combine kernel: loaded on the GPU of its own arch
              if (a.meta.value("arch", "") != detail::device_arch(detail::ensure_context())) return {};
              detail::LoadedModule m(a.cubin, detail::combine_entry_name(key));
              ++loaded;
              return {};
            }
            const ResolvedConfig rc = resolve(config_from_json(a.meta.at("config")),
                                              ResolveOptions{parse_tune(a.meta.value("tune", ""), "meta.json tune")});
            if (!detail::runs_on(rc, sm)) return {};  // built for another GPU: nothing to load here
            detail::LoadedModule m(a.cubin, detail::entry_name(key), rc.smem_bytes);
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
    // What was dropped, and a failed import: a script must not take a truncated or forged
    // archive for an imported one.
    for (const std::string& p : r.problems) fmt::print(stderr, "dropped: {}\n", p);
    if (!r.problems.empty())
      throw CacheError(
          fmt::format("import {}: not everything was imported: {} entries rejected, {} problem(s) "
                      "listed above",
                      *imp_path, r.rejected, r.problems.size()));
  });
  auto* prune = cmd->add_subcommand("prune", "Remove least recently used entries down to a size");
  auto max_size = std::make_shared<std::uint64_t>(0);
  prune->add_option("--max-size", *max_size, "size to keep at most: bytes, or with a K, M or G suffix (1G)")
      ->required()
      ->transform(size_validator())
      ->type_name("SIZE")
      ->default_str("");
  prune->callback([max_size] { fmt::print("removed {} entries\n", detail::disk_cache().prune(*max_size)); });
}

}  // namespace jit::cli
