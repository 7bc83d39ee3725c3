// Host-built TMA descriptors for the sm90a / sm100a backends (docs/DEVICE_ABI.md, "TMA maps").
#pragma once
#include <mutex>

#include "common/params.h"
#include "fa4jit/kernel.hpp"

namespace jit::detail {

// Encodes q, k, v, o maps; reuses the last result when pointers, shapes and strides repeat,
// so a steady-state launch encodes nothing.
class TmaDescCache {
 public:
  // kv_box_rows: rows of one K/V box (FwdParams::kv_box_rows). By value: another thread may re-encode.
  fa4::TmaDescs get(const ResolvedConfig& rc, const LaunchArgs& a, int kv_box_rows);

 private:
  struct Signature {
    const void* ptr[4];
    long long shape[4][4];
    long long stride[4][4];
    int kv_box_rows;
    bool operator==(const Signature&) const = default;
  };
  std::mutex mu_;
  bool valid_ = false;
  Signature last_{};
  fa4::TmaDescs descs_{};
};

}  // namespace jit::detail
