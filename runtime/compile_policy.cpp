// The compile policy: whether get_kernel may run NVRTC on a cache miss (serving processes switch
// to forbid after warm-up, so a missed prewarm is an error at once instead of a multi-second stall).
#include <atomic>
#include <cstdlib>

#include <fmt/format.h>

#include "fa4jit/errors.hpp"
#include "fa4jit/jit.hpp"

namespace jit {

const char* to_string(CompilePolicy p) {
  switch (p) {
    case CompilePolicy::allow: return "allow";
    case CompilePolicy::warn: return "warn";
    case CompilePolicy::forbid: return "forbid";
  }
  return "?";
}

CompilePolicy compile_policy_from_string(const std::string& s) {
  for (CompilePolicy p : {CompilePolicy::allow, CompilePolicy::warn, CompilePolicy::forbid})
    if (s == to_string(p)) return p;
  throw ConfigError(fmt::format("compile policy: '{}' is not allowed; allowed: allow, warn, forbid", s.substr(0, 64)));
}

namespace {

// set_compile_policy's choice; -1: none, FA4JIT_COMPILE decides (read at each miss, which is rare
// and costs a compile anyway, so a bad value fails every miss until fixed, never taken as allow).
std::atomic<int>& chosen() {
  static std::atomic<int> p{-1};
  return p;
}

}  // namespace

void set_compile_policy(CompilePolicy p) { chosen().store(static_cast<int>(p)); }

CompilePolicy compile_policy() {
  if (const int p = chosen().load(); p >= 0) return static_cast<CompilePolicy>(p);
  const char* env = std::getenv("FA4JIT_COMPILE");
  if (!env || !*env) return CompilePolicy::allow;
  try {
    return compile_policy_from_string(env);
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format("FA4JIT_COMPILE: {}", e.what()));
  }
}

}  // namespace jit
