// Internals shared by get_kernel, the CLI and the tests.
#pragma once
#include <filesystem>
#include <vector>
#include "cache/store.hpp"
#include "fa4jit/config.hpp"
#include "generator/key.hpp"

namespace jit::detail {

// Resolves `config` and renders and hashes it for this process's NVRTC (generator/key.hpp).
CompileInputs compile_inputs(const FA4Config& config, const ResolveOptions& options = {});
cache::Store& disk_cache();  // the process's store (from the environment)
// The kernel bundles of this install (share/fa4jit/kernels beside the library or the CLI), used
// as read-only tiers unless FA4JIT_BUNDLE_PATH says otherwise; empty in a build tree.
std::vector<std::filesystem::path> installed_bundles();
cache::Artifact compile_artifact(const CompileInputs& in);  // NVRTC + meta.json contents
FA4Config with_arch(const FA4Config& config);               // fills an empty arch from the current GPU
// The disk cache's validator (cache::Options::validate): the entry's recorded inputs must hash to
// its key and its cubin must define the key-derived kernel names (runtime/cache_auth.cpp).
cache::Verdict check_cache_entry(std::string_view key, const nlohmann::json& meta, std::string_view cubin);

}  // namespace jit::detail
