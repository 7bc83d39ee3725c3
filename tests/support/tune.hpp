// Tuning overrides in tests: resolve() and get_kernel() take them as an input (ResolveOptions),
// so a test of a tuning variant (stream-K, persistent=2) passes them and touches no environment.
#pragma once
#include <cstdlib>
#include <string>

#include "fa4jit/advanced.hpp"

namespace jit::testing {

// "persistent=2,wg_spans=1" -> the options that set those Tuning fields.
inline ResolveOptions tuned(const std::string& spec) { return ResolveOptions{parse_tune(spec)}; }

// FA4JIT_TUNE, read by the GPU suites that a device session runs once more under another tile
// walk (tools/device: FA4JIT_TUNE=persistent=1 fa4jit_tests --gtest_filter='GpuAttention.Hopper*'),
// the way the CLI reads it. Empty: the derived defaults.
inline ResolveOptions env_tune() {
  const char* env = std::getenv("FA4JIT_TUNE");
  return ResolveOptions{parse_tune(env ? env : "", "FA4JIT_TUNE")};
}

}  // namespace jit::testing
