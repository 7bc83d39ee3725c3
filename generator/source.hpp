// Renders the thin specialised layer over the embedded templates, and the key inputs.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fa4jit/advanced.hpp"

namespace jit::detail {

// 2: the split-KV combine left the attention kernel's module (generator/combine.hpp).
constexpr const char* kGeneratorVersion = "fa4jit-generator-2";
// 2: the generated Config writes every member for every backend (KVElement, kQInRegs and
// kPackSlices too), so the templates detect none (issue 55).
constexpr int kCacheSchema = 2;
constexpr const char* kSourceName = "fa4jit.cu";
constexpr const char* kEntryName = "fa4_fwd";
constexpr const char* kCombineEntryName = "fa4_combine";  // split-KV merge, a module of its own

// Key-derived kernel names, fa4_fwd_<key[0:16]> (an attention kernel) and fa4_combine_<key[0:16]>
// (a combine kernel, under its own key): a cubin then exports the name of the key it was compiled
// for, and one served under another key fails to load (cuModuleGetFunction) instead of running.
// The key hashes the source, so the name cannot be in it: the source says FA4JIT_FWD_NAME /
// FA4JIT_COMBINE_NAME, defined by -D options added after hashing (CompileInputs::compile_options(),
// CombineInputs::compile_options()).
std::string entry_name(std::string_view key);
std::string combine_entry_name(std::string_view key);
std::vector<std::string> entry_name_options(std::string_view key);

// Deterministic: the same resolved config gives byte-identical source.
std::string render_source(const ResolvedConfig& rc);

using Headers = std::vector<std::pair<std::string, std::string>>;

// The templates a backend's source may include: (include name, bytes), sorted by name. Built
// once per backend per process: get_kernel's hit path must not copy them on every call.
const std::shared_ptr<const Headers>& template_headers(Backend backend);

// NVRTC options for an arch (part of the cache key).
std::vector<std::string> nvrtc_options(const ResolvedConfig& rc);

// The declarations of a mask tree (the user mask structs, with their snippets under #line) and, in
// *type, its C++ type: what the attention kernel's source says for it, for other kernels that
// evaluate the same mask (runtime/tile_map.cpp).
std::string render_mask_decls(const Mask& m, std::string* type);

// Mask flags the launch passes for this config (bit 0: top-left causal alignment).
int mask_flags(const Mask& m);

}  // namespace jit::detail
