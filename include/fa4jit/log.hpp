// Where fa4jit's messages go: cache warnings (an unwritable or damaged cache, an unreachable
// remote tier), and at info/debug level compiles and cache hits. Default: stderr, level from
// FA4JIT_LOG=error|warn|info|debug (warn when unset). An engine routes them into its own log:
//
//   jit::set_log_sink([](jit::LogLevel level, std::string_view msg) { my_log(level, msg); });
#pragma once
#include <functional>
#include <string_view>

#include "fa4jit/export.hpp"

namespace jit {

enum class LogLevel { error = 0, warn = 1, info = 2, debug = 3 };

FA4JIT_API const char* to_string(LogLevel level);  // "error", "warn", "info", "debug"

// Messages at `level` and more severe ones are delivered; the rest are not even formatted.
FA4JIT_API void set_log_level(LogLevel level);
FA4JIT_API LogLevel log_level();

// Receives every delivered message (no trailing newline). Called from whichever thread logs,
// possibly several at once, and possibly while that thread holds a cache lock: it must return
// promptly and must not call get_kernel. An exception it throws is dropped.
using LogSink = std::function<void(LogLevel level, std::string_view message)>;
// Replaces the sink (process-wide); an empty function restores the stderr sink.
FA4JIT_API void set_log_sink(LogSink sink);

}  // namespace jit
