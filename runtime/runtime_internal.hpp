// Internals shared by get_kernel, the CLI and the tests.
#pragma once
#include <filesystem>
#include <vector>
#include "cache/store.hpp"
#include "fa4jit/config.hpp"
#include "generator/combine.hpp"
#include "generator/key.hpp"

namespace jit::detail {

class CombineKernel;  // runtime/compiled_kernel.hpp
using CombinePtr = std::shared_ptr<const CombineKernel>;

// Resolves `config` and renders and hashes it for this process's NVRTC (generator/key.hpp).
CompileInputs compile_inputs(const FA4Config& config, const ResolveOptions& options = {});
cache::Store& disk_cache();  // the process's store (from the environment)
// The kernel bundles of this install (share/fa4jit/kernels beside the library or the CLI), used
// as read-only tiers unless FA4JIT_BUNDLE_PATH says otherwise; empty in a build tree.
std::vector<std::filesystem::path> installed_bundles();
cache::Artifact compile_artifact(const CompileInputs& in);  // NVRTC + meta.json contents
// The combine kernel an attention kernel's split launches use, for this process's NVRTC.
CombineInputs combine_inputs(const ResolvedConfig& rc);
cache::Artifact compile_artifact(const CombineInputs& in);
// The combine kernel of rc's (arch, output dtype, head dim): process memory, then the cache tiers,
// then NVRTC under the compile policy. get_kernel fetches it beside each kernel it loads.
CombinePtr get_combine(const ResolvedConfig& rc);
FA4Config with_arch(const FA4Config& config);  // fills an empty arch from the current GPU
// The disk cache's validator (cache::Options::validate): the entry's recorded inputs must hash to
// its key and its cubin must define the key-derived kernel name (runtime/cache_auth.cpp). Serves
// both kernel families: a meta.json with "combine" is a combine kernel's.
cache::Verdict check_cache_entry(std::string_view key, const nlohmann::json& meta, std::string_view cubin);
// Whether an ELF64 file (a cubin) defines the function `name` in a symbol table (.symtab, its
// string table, every offset bounds-checked): a name merely present in the bytes, e.g. appended
// after the sections, does not count. False for anything that is not such an ELF file.
bool elf_defines_function(std::string_view elf, std::string_view name);

}  // namespace jit::detail
