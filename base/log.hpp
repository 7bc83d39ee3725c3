// The library side of include/fa4jit/log.hpp.
#pragma once
#include <string>
#include <string_view>

#include "fa4jit/log.hpp"

namespace jit::detail {

// Cheap check, so callers skip formatting messages nobody receives.
bool log_enabled(LogLevel level);
// Delivers `message` to the sink when `level` is enabled. Never throws: a log line must not
// turn into an error of the operation that wrote it.
void log(LogLevel level, std::string_view message) noexcept;
// "" when FA4JIT_LOG is unset, empty or a level; else a message naming the variable and what it
// takes. The level itself is read before anyone can be told (a bad value logs at warn); the
// runtime and the CLI raise this as an error before they do any work.
std::string log_env_problem();

}  // namespace jit::detail
