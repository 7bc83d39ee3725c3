// Internals shared by get_kernel, the CLI and the tests.
#pragma once
#include "cache/store.hpp"
#include "fa4jit/config.hpp"
#include "generator/key.hpp"

namespace jit::detail {

cache::Store& disk_cache();                                // the process's store (from the environment)
cache::Artifact compile_artifact(const CompileInputs& in);  // NVRTC + meta.json contents
FA4Config with_arch(const FA4Config& config);               // fills an empty arch from the current GPU

}  // namespace jit::detail
