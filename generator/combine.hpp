// The split-KV combine kernel as a kernel family of its own: it merges the splits' partial O / LSE
// (templates/common/combine.cuh) and depends only on the arch, the output dtype and the head dim.
// Compiled once per such triple, cached under its own key, and shared by every attention kernel
// with that triple; the attention kernels' modules no longer carry it (NVRTC then spends ~5% less
// on each of them: docs/PERF.md "Compile time").
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "fa4jit/advanced.hpp"
#include "generator/source.hpp"

namespace jit::detail {

constexpr const char* kCombineSourceName = "fa4jit_combine.cu";

struct CombineSpec {
  std::string arch;  // the attention kernel's FA4Config::arch
  DType out = DType::bf16;
  int depth = 0;
  bool operator==(const CombineSpec&) const = default;
};

CombineSpec combine_spec(const ResolvedConfig& rc);
// sm_90+: the combine is launched as a programmatic dependent of its attention kernel and waits for
// it in griddepcontrol.wait (templates/common/prelude.cuh). Source and launch both ask this.
bool combine_waits_for_kernel(const CombineSpec& s);
nlohmann::json to_json(const CombineSpec& s);
// ConfigError naming the field for anything that is not a spec combine_spec() can give.
CombineSpec combine_spec_from_json(const nlohmann::json& j);

// As CompileInputs, for a combine kernel: the key hashes the source, the headers it may include
// (templates/common only), the NVRTC version and options.
struct CombineInputs {
  CombineSpec spec;
  std::string source;
  std::shared_ptr<const Headers> headers;
  std::vector<std::string> options;  // hashed
  std::string nvrtc_version;
  std::string template_digest;
  std::string key;
  // `options` plus -DFA4JIT_COMBINE_NAME=combine_entry_name(key), added after hashing.
  std::vector<std::string> compile_options() const;
};

CombineInputs combine_inputs(CombineSpec spec, std::string nvrtc_version);

// The templates/common headers, the only ones the combine (and the tile-map classifier,
// runtime/tile_map.cpp) include: a change to a backend's templates does not invalidate them. Built
// once per process.
const std::shared_ptr<const Headers>& common_headers();

// The key inputs as meta.json records them; "combine" (the spec) marks a combine entry.
nlohmann::json describe(const CombineInputs& in);

}  // namespace jit::detail
