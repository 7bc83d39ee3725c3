// Typed errors. Every error fa4jit raises derives from jit::Error; the subtype says which
// layer refused (config, compiler, cache, driver, launch), the message says what and why.
#pragma once
#include <stdexcept>
#include <string>
#include <utility>

#include "fa4jit/export.hpp"

namespace jit {

class FA4JIT_API Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A config that cannot work: names the field, the value and what is allowed.
class FA4JIT_API ConfigError : public Error {
 public:
  using Error::Error;
};

// NVRTC refused the generated source; what() carries the log (snippet lines point at the snippet).
class FA4JIT_API CompileError : public Error {
 public:
  CompileError(const std::string& message, std::string log) : Error(message + "\n" + log), log_(std::move(log)) {}
  const std::string& log() const { return log_; }

 private:
  std::string log_;
};

// The on-disk cache could not do what was asked (sealed miss, unusable directory, bad archive).
class FA4JIT_API CacheError : public Error {
 public:
  using Error::Error;
};

// Sealed mode (FA4JIT_SEALED=1): a kernel is missing from every cache tier.
class FA4JIT_API CacheMissError : public CacheError {
 public:
  using CacheError::CacheError;
};

// No driver, no GPU, wrong arch, out of memory: anything the CUDA driver refused.
class FA4JIT_API DriverError : public Error {
 public:
  DriverError(const std::string& message, int code = 0) : Error(message), code_(code) {}
  int code() const { return code_; }  // CUresult, 0 when not from a driver call

 private:
  int code_;
};

// Launch arguments that do not match the kernel (shapes, strides, dtypes, alignment).
class FA4JIT_API LaunchError : public Error {
 public:
  using Error::Error;
};

}  // namespace jit
