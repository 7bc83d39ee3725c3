// The runtime's check of a cache entry before it is used (cache::Options::validate): an entry is
// served under a key only if its own recorded inputs hash to that key, and its cubin exports the
// kernel names derived from that key. Copying entry B under key A, even with meta.json edited to
// match, then fails here (and at load: cuModuleGetFunction finds no fa4_fwd_<A>) unless the cubin
// itself is patched, which only the MAC of a deployment secret stops (docs/CACHE.md).
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "fa4jit/errors.hpp"
#include "generator/key.hpp"
#include "generator/source.hpp"
#include "runtime/nvrtc.hpp"
#include "runtime/runtime_internal.hpp"

namespace jit::detail {

namespace {

std::string text(const nlohmann::json& meta, const char* field) {
  auto it = meta.find(field);
  return it != meta.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// A cubin is an ELF file: symbol and section names sit in string tables, NUL-terminated and
// preceded by a NUL (a symbol) or a '.' (".text.<name>", ".nv.info.<name>"). Only a whole name counts.
bool defines(std::string_view cubin, const std::string& name) {
  std::string needle = name;
  needle.push_back('\0');
  for (std::size_t at = cubin.find(needle); at != std::string_view::npos; at = cubin.find(needle, at + 1))
    if (at > 0 && (cubin[at - 1] == '\0' || cubin[at - 1] == '.')) return true;
  return false;
}

}  // namespace

cache::Verdict check_cache_entry(std::string_view key, const nlohmann::json& meta, std::string_view cubin) {
  const auto [major, minor] = nvrtc_version();
  const std::string generator = text(meta, "generator"), nvrtc = text(meta, "nvrtc");
  const auto schema = meta.find("schema");
  if (generator.empty() || nvrtc.empty() || schema == meta.end() || !meta.contains("config"))
    return {"meta.json does not record the key inputs (generator, schema, NVRTC, config)"};
  // Another build's entry: its key was computed from inputs this build cannot reproduce.
  if (generator != kGeneratorVersion || *schema != kCacheSchema || nvrtc != fmt::format("{}.{}", major, minor))
    return {fmt::format("made by another fa4jit build (generator {}, schema {}, NVRTC {})", generator, schema->dump(),
                        nvrtc),
            /*foreign=*/true};
  CompileInputs in;
  try {
    // Entries made with tuning overrides record them ("tune"); older ones had none.
    in = compile_inputs(config_from_json(meta.at("config")),
                        ResolveOptions{parse_tune(text(meta, "tune"), "meta.json tune")});
  } catch (const std::exception& e) {
    return {fmt::format("meta.json config is not a valid config here: {}", e.what())};
  }
  if (text(meta, "template_digest") != in.template_digest)
    return {fmt::format("made with other templates ({})", text(meta, "template_digest")), /*foreign=*/true};
  if (in.key != key) return {fmt::format("its recorded inputs hash to {}, not to its key", in.key)};
  for (const std::string& name : {entry_name(key), combine_entry_name(key)})
    if (!defines(cubin, name))
      return {fmt::format("kernel.cubin does not define {} (the cubin of another key?)", name)};
  return {};
}

}  // namespace jit::detail
