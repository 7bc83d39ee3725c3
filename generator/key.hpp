// Everything that shapes a binary, and its hash: the cache key.
#pragma once
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "fa4jit/advanced.hpp"
#include "generator/source.hpp"

namespace jit::detail {

struct CompileInputs {
  ResolvedConfig config;
  TuningOverrides tune;                    // resolve()'s overrides (recorded, not hashed:
                                           // their values are in the source)
  std::string source;                      // the generated layer
  std::shared_ptr<const Headers> headers;  // embedded templates it may include
  std::vector<std::string> options;        // NVRTC options (hashed)
  std::string nvrtc_version;               // "13.0"
  std::string template_digest;             // XXH3-128 of the headers
  std::string key;                         // XXH3-128 of all of the above

  // What NVRTC is given: `options` plus the key-derived kernel names (entry_name_options), which
  // cannot be hashed into the key they derive from.
  std::vector<std::string> compile_options() const;
};

// Renders and hashes a resolved config for the NVRTC of `nvrtc_version` ("13.0"; the runtime's
// compile_inputs(FA4Config) asks the loaded NVRTC). Never looks at paths, hosts or time: the same
// inputs give the same key on every machine.
// `tune`: the overrides `config` was resolved with, recorded in meta.json so the cache can resolve
// the entry again.
CompileInputs compile_inputs(ResolvedConfig config, std::string nvrtc_version, TuningOverrides tune = {});

// Hashes the inputs' fields (used by compile_inputs; exposed so tests can vary one input).
std::string compute_template_digest(const Headers& headers);
std::string compute_key(const CompileInputs& in);
// The hash both kernel families use; `family` keeps an attention kernel's and a combine
// kernel's keys apart (generator/combine.hpp).
std::string hash_key_inputs(std::string_view family, std::string_view template_digest, std::string_view source,
                            std::string_view nvrtc_version, const std::vector<std::string>& options);

// The key inputs as recorded in meta.json.
nlohmann::json describe(const CompileInputs& in);

}  // namespace jit::detail
