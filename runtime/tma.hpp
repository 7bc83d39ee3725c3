// Host-built TMA descriptors for the sm90a / sm100a backends (docs/DEVICE_ABI.md, "TMA maps").
#pragma once
#include <cuda.h>  // CUtensorMapDataType and friends (types only)

#include <mutex>

#include "common/params.h"
#include "fa4jit/kernel.hpp"

namespace jit::detail {

// The arguments of one cuTensorMapEncodeTiled call, innermost dimension first: a pure function of
// the tensor, its element type and the box, so the layout rules are testable without a driver.
// Element type: BFLOAT16 / FLOAT16 for the 16-bit types, UINT8 for e4m3 (TMA only moves bytes).
// Strides are in bytes (dims 1..), and the innermost box is one swizzle row of row_bytes: 128
// (SW128: 64 elements of a 16-bit type, 128 of e4m3), or 64 (SW64: the kernel's 64-byte e4m3 rows at
// padded depth 64, swizzle_row_bytes).
struct TmaMapSpec {
  CUtensorMapDataType type;
  CUtensorMapSwizzle swizzle;
  int rank;  // 4, or 5 for packed GQA
  cuuint64_t dims[5];
  cuuint64_t byte_strides[4];  // of dims 1 .. rank-1
  cuuint32_t box[5];
};
// 4-D map over (depth, rows, heads, batch), box {row_bytes / elem bytes, box_rows, 1, 1}.
TmaMapSpec tma_map_spec(const Tensor& t, DType dtype, int box_rows, int row_bytes = 128);
// Packed GQA: 5-D (depth, group heads, rows, kv heads, batch), box {row_bytes / elem bytes, group,
// box_rows / group, 1, 1}.
TmaMapSpec tma_packed_map_spec(const Tensor& t, DType dtype, int group, int box_rows, int row_bytes = 128);
// The swizzle row of a tensor of `dtype` in the kernel of rc: 128 bytes, or the padded depth's bytes
// where a row is narrower (e4m3 at padded depth 64).
int tma_row_bytes(const ResolvedConfig& rc, DType dtype);

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
