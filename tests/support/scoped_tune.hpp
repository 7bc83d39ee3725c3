// FA4JIT_TUNE for one scope (jit::resolve reads it when a config is resolved), restoring the
// previous value: tests of tuning variants such as stream-K (persistent=2) next to the defaults.
#pragma once
#include <cstdlib>
#include <optional>
#include <string>

namespace jit::testing {

class ScopedTune {
 public:
  explicit ScopedTune(const char* value) {
    if (const char* old = std::getenv("FA4JIT_TUNE")) old_ = old;
    setenv("FA4JIT_TUNE", value, 1);
  }
  ~ScopedTune() {
    if (old_) setenv("FA4JIT_TUNE", old_->c_str(), 1);
    else unsetenv("FA4JIT_TUNE");
  }
  ScopedTune(const ScopedTune&) = delete;
  ScopedTune& operator=(const ScopedTune&) = delete;

 private:
  std::optional<std::string> old_;
};

}  // namespace jit::testing
