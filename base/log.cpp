#include "base/log.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

namespace jit {

namespace {

std::optional<LogLevel> parse_level(std::string_view s) {
  if (s == "error") return LogLevel::error;
  if (s == "warn" || s == "warning") return LogLevel::warn;
  if (s == "info") return LogLevel::info;
  if (s == "debug") return LogLevel::debug;
  return std::nullopt;
}

// FA4JIT_LOG, read once (at the first log line, which may come before any place that could
// report an error): an unknown value logs at warn, and log_env_problem() names it.
LogLevel level_from_env() {
  const char* v = std::getenv("FA4JIT_LOG");
  if (!v || !*v) return LogLevel::warn;
  return parse_level(v).value_or(LogLevel::warn);
}

// The process's logging state: the level and the sink (shared_ptr so a message is delivered to
// the sink it started with while another thread replaces it).
struct LogState {
  std::atomic<int> level{static_cast<int>(level_from_env())};
  std::mutex mu;
  std::shared_ptr<const LogSink> sink;
};

LogState& state() {
  static LogState s;
  return s;
}

void write_stderr(LogLevel level, std::string_view message) {
  // Plain stdio, errors ignored: stderr may be unwritable (a full disk, RLIMIT_FSIZE on a log).
  const char* name = level == LogLevel::warn ? "warning" : to_string(level);
  std::string line = std::string("fa4jit: ") + name + ": " + std::string(message) + "\n";
  std::fputs(line.c_str(), stderr);
  std::fflush(stderr);
}

}  // namespace

const char* to_string(LogLevel level) {
  switch (level) {
    case LogLevel::error: return "error";
    case LogLevel::warn: return "warn";
    case LogLevel::info: return "info";
    case LogLevel::debug: return "debug";
  }
  return "?";
}

void set_log_level(LogLevel level) { state().level.store(static_cast<int>(level)); }

LogLevel log_level() { return static_cast<LogLevel>(state().level.load()); }

void set_log_sink(LogSink sink) {
  auto next = sink ? std::make_shared<const LogSink>(std::move(sink)) : nullptr;
  LogState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.sink = std::move(next);
}

namespace detail {

std::string log_env_problem() {
  const char* v = std::getenv("FA4JIT_LOG");
  if (!v || !*v || parse_level(v)) return {};
  return std::string("FA4JIT_LOG='") + v + "' is not a log level: use error, warn, info or debug (unset: warn)";
}

bool log_enabled(LogLevel level) { return static_cast<int>(level) <= state().level.load(std::memory_order_relaxed); }

void log(LogLevel level, std::string_view message) noexcept {
  if (!log_enabled(level)) return;
  try {
    std::shared_ptr<const LogSink> sink;
    {
      LogState& s = state();
      std::lock_guard<std::mutex> lock(s.mu);
      sink = s.sink;
    }
    if (sink)
      (*sink)(level, message);
    else
      write_stderr(level, message);
  } catch (...) {
  }
}

}  // namespace detail

}  // namespace jit
