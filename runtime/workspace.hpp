// Scratch for split-KV launches and the dynamic walk's counter: the caller's buffer, or
// stream-ordered memory from a pool that fa4jit keeps per device.
#pragma once
#include <cstddef>

#include "common/params.h"
#include "fa4jit/kernel.hpp"
#include "runtime/driver.hpp"

namespace jit::detail {

// Where a launch's scratch keeps each array, in order: a split launch's o_partial
// [splits][rows][depth] and lse_partial [splits][rows] floats, then stream-K's split_count [rows]
// ints, or a long-pole split's split_count and split_row [rows] ints; then, 16-byte aligned, the dynamic walk's
// tile_counter (one int, zeroed before each launch). The plan sizes the scratch and the launch points the params into
// it from this one description.
struct WorkspaceLayout {
  long long rows = 0;  // 0: not split
  int splits = 1, depth = 0;
  bool segment_counts = false;  // stream-K
  bool slots = false;           // long-pole splits: split_count and split_row [rows]
  bool tile_counter = false;    // TileWalk::dynamic
  std::size_t bytes() const;
  std::size_t counter_offset() const;  // of tile_counter
  void place(CUdeviceptr base, fa4::FwdParams& p) const;
};

// The device's workspace pool, created on first use and kept for the process (a cache, like the
// kernel caches). Its release threshold keeps freed memory reserved: the driver's default pool
// returns it at every synchronization, so each split launch after a sync mapped memory again
// (about 40 us per call measured on an H200, more than the combine kernel itself).
CUmemoryPool workspace_pool(CUdevice dev);

// One split launch's scratch: args.workspace when given, else allocated from workspace_pool on
// `stream` and freed on it when this goes out of scope (stream-ordered: after the combine).
class LaunchWorkspace {
 public:
  LaunchWorkspace(const LaunchArgs& args, std::size_t bytes, CUstream stream);
  ~LaunchWorkspace();
  LaunchWorkspace(const LaunchWorkspace&) = delete;
  LaunchWorkspace& operator=(const LaunchWorkspace&) = delete;
  CUdeviceptr get() const { return ptr_; }

 private:
  CUdeviceptr ptr_ = 0;
  CUstream stream_;
  bool owned_ = false;
};

}  // namespace jit::detail
