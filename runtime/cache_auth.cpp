// The runtime's check of a cache entry before it is used (cache::Options::validate): an entry is
// served under a key only if its own recorded inputs hash to that key, and its cubin exports the
// kernel name derived from that key (fa4_fwd_<key[0:16]>, or fa4_combine_<key[0:16]> for a
// combine kernel's entry, whose meta.json records "combine" instead of "config"). Copying entry B under key A, even
// with meta.json edited to match, then fails here (and at load: cuModuleGetFunction finds no fa4_fwd_<A>) unless the
// cubin itself is patched, which only the MAC of a deployment secret stops (docs/CACHE.md).
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "fa4jit/errors.hpp"
#include "generator/combine.hpp"
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

// The checks both kernel families share, once the entry's inputs are rendered again.
cache::Verdict check_inputs(std::string_view key, const nlohmann::json& meta, std::string_view cubin,
                            const std::string& template_digest, const std::string& recomputed_key,
                            const std::string& entry) {
  if (text(meta, "template_digest") != template_digest)
    return {fmt::format("made with other templates ({})", text(meta, "template_digest")), /*foreign=*/true};
  if (recomputed_key != key) return {fmt::format("its recorded inputs hash to {}, not to its key", recomputed_key)};
  if (!defines(cubin, entry))
    return {fmt::format("kernel.cubin does not define {} (the cubin of another key?)", entry)};
  return {};
}

}  // namespace

cache::Verdict check_cache_entry(std::string_view key, const nlohmann::json& meta, std::string_view cubin) {
  const auto [major, minor] = nvrtc_version();
  const std::string generator = text(meta, "generator"), nvrtc = text(meta, "nvrtc");
  const auto schema = meta.find("schema");
  if (generator.empty() || nvrtc.empty() || schema == meta.end() ||
      !(meta.contains("config") || meta.contains("combine")))
    return {"meta.json does not record the key inputs (generator, schema, NVRTC, config or combine)"};
  // Another build's entry: its key was computed from inputs this build cannot reproduce.
  if (generator != kGeneratorVersion || *schema != kCacheSchema || nvrtc != fmt::format("{}.{}", major, minor))
    return {fmt::format("made by another fa4jit build (generator {}, schema {}, NVRTC {})", generator, schema->dump(),
                        nvrtc),
            /*foreign=*/true};
  if (meta.contains("combine")) {
    CombineInputs in;
    try {
      in = combine_inputs(combine_spec_from_json(meta.at("combine")), nvrtc);
    } catch (const std::exception& e) {
      return {fmt::format("meta.json combine is not a valid combine kernel here: {}", e.what())};
    }
    return check_inputs(key, meta, cubin, in.template_digest, in.key, combine_entry_name(key));
  }
  CompileInputs in;
  try {
    // Entries made with tuning overrides record them ("tune"); older ones had none.
    in = compile_inputs(config_from_json(meta.at("config")),
                        ResolveOptions{parse_tune(text(meta, "tune"), "meta.json tune")});
  } catch (const std::exception& e) {
    return {fmt::format("meta.json config is not a valid config here: {}", e.what())};
  }
  return check_inputs(key, meta, cubin, in.template_digest, in.key, entry_name(key));
}

}  // namespace jit::detail
