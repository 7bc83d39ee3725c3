// A compiled attention kernel and its launch arguments.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "fa4jit/advanced.hpp"
#include "fa4jit/export.hpp"
#include "fa4jit/launch_args.hpp"
#include "fa4jit/tensor.hpp"

namespace jit {

// struct LaunchArgs, the arguments of a launch, is generated from the launch table
// (python/fa4jit/launch_table.py, one row per field; tools/gen_launch.py) into the build tree's
// fa4jit/launch_args.hpp: the fields of fa4jit_launch_args (fa4jit/c_api.h) with the same names and
// meanings, block_mask_* as LaunchArgs::BlockMask. Everything the optional features do not use is
// null or zero; window_left / window_right default to -1 (unbounded) and the block mask's blocks to
// 128 x 128.

using Stream = void*;  // a CUstream (0: the legacy default stream)

class FA4JIT_API Kernel {
 public:
  virtual ~Kernel() = default;
  // Checks `args` against the config (throws LaunchError before anything is launched),
  // loads the module on the current device if needed, and launches on `stream`.
  virtual void launch(const LaunchArgs& args, Stream stream = nullptr) const = 0;
  // Splits a launch with `args` would use (after the automatic choice) and the workspace it needs
  // (0 when not split). Needs a GPU when args.num_splits is 0.
  virtual int num_splits(const LaunchArgs& args) const = 0;
  virtual std::size_t workspace_bytes(const LaunchArgs& args) const = 0;

  virtual const ResolvedConfig& config() const = 0;
  virtual const std::string& key() const = 0;  // the cache key (32 hex chars)
  virtual const std::string& cubin() const = 0;
  virtual const std::string& origin() const = 0;  // "compiled", a cache dir, or "memory"
  virtual double compile_ms() const = 0;          // NVRTC time, 0 on a cache hit
};

using KernelPtr = std::shared_ptr<const Kernel>;

}  // namespace jit
