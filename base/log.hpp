// The library side of include/fa4jit/log.hpp.
#pragma once
#include <string_view>

#include "fa4jit/log.hpp"

namespace jit::detail {

// Cheap check, so callers skip formatting messages nobody receives.
bool log_enabled(LogLevel level);
// Delivers `message` to the sink when `level` is enabled. Never throws: a log line must not
// turn into an error of the operation that wrote it.
void log(LogLevel level, std::string_view message) noexcept;

}  // namespace jit::detail
