#include "runtime/tma.hpp"

#include <algorithm>
#include <cstring>

#include "generator/backends/backend.hpp"
#include "runtime/driver.hpp"

namespace jit::detail {

namespace {

static_assert(sizeof(fa4::TmaDesc) == sizeof(CUtensorMap), "TmaDesc must match CUtensorMap");

// Byte strides of dims 1.. for the driver. A size-1 dimension is never stepped over, but the
// driver still wants a valid stride: give it the span of the dimension below.
void byte_strides(int n, const cuuint64_t* dims, const long long* elem_strides, cuuint64_t elem_bytes,
                  cuuint64_t* out) {
  cuuint64_t below = dims[0] * elem_bytes;
  for (int i = 0; i < n - 1; ++i) {
    out[i] = dims[i + 1] == 1 || elem_strides[i] == 0 ? below : elem_strides[i] * elem_bytes;
    below = out[i] * dims[i + 1];
  }
}

CUtensorMapDataType tma_type(DType t) {
  switch (t) {
    case DType::bf16: return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    case DType::fp16: return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    case DType::e4m3: return CU_TENSOR_MAP_DATA_TYPE_UINT8;  // TMA copies bytes; the MMA reads them as e4m3
  }
  return CU_TENSOR_MAP_DATA_TYPE_UINT8;
}

// Elements of one swizzle row: the innermost box dimension.
cuuint32_t inner_box(DType t, int row_bytes) { return static_cast<cuuint32_t>(row_bytes / dtype_size(t)); }

TmaMapSpec make_spec(DType dtype, int row_bytes, int rank, const cuuint64_t* dims, const long long* elem_strides,
                     const cuuint32_t* box) {
  TmaMapSpec s{};
  s.type = tma_type(dtype);
  s.swizzle = row_bytes == 64 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_128B;
  s.rank = rank;
  for (int i = 0; i < rank; ++i) {
    s.dims[i] = dims[i];
    s.box[i] = box[i];
  }
  byte_strides(rank, dims, elem_strides, static_cast<cuuint64_t>(dtype_size(dtype)), s.byte_strides);
  return s;
}

// L2 fetch size on a TMA miss: one 128-byte swizzle box. 256B made each box's miss also fetch the
// neighbouring box, so decode read K/V at 4.05 TB/s; 128B reads 4.45 (B 64 x 4096 keys, H200;
// docs/PERF.md run 12), prefill unchanged within 1%. Overridable at build time for experiments
// (the A/B of docs/PERF.md run 12).
#ifndef FA4JIT_L2_PROMOTION
#define FA4JIT_L2_PROMOTION CU_TENSOR_MAP_L2_PROMOTION_L2_128B
#endif
fa4::TmaDesc encode_map(const Tensor& t, const TmaMapSpec& s) {
  cuuint32_t elem_strides_box[5];
  for (int i = 0; i < s.rank; ++i) elem_strides_box[i] = 1;
  CUtensorMap map;
  check(driver().cuTensorMapEncodeTiled(&map, s.type, static_cast<cuuint32_t>(s.rank), t.data, s.dims, s.byte_strides,
                                        s.box, elem_strides_box, CU_TENSOR_MAP_INTERLEAVE_NONE, s.swizzle,
                                        FA4JIT_L2_PROMOTION, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
        "cuTensorMapEncodeTiled");
  fa4::TmaDesc out;
  std::memcpy(&out, &map, sizeof(out));
  return out;
}

fa4::TmaDesc encode(const Tensor& t, DType dtype, int box_rows, int row_bytes) {
  return encode_map(t, tma_map_spec(t, dtype, box_rows, row_bytes));
}

fa4::TmaDesc encode_packed(const Tensor& t, DType dtype, int group, int box_rows, int row_bytes) {
  return encode_map(t, tma_packed_map_spec(t, dtype, group, box_rows, row_bytes));
}

}  // namespace

int tma_row_bytes(const ResolvedConfig& rc, DType dtype) {
  return fa4::swizzle_row_bytes(rc.padded_depth, dtype_size(dtype));
}

// 4-D map over (depth, rows, heads, batch), innermost first; box {row_bytes of depth, box_rows, 1, 1}.
// Paged K/V: "rows" are a page's rows and "batch" is the page.
TmaMapSpec tma_map_spec(const Tensor& t, DType dtype, int box_rows, int row_bytes) {
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(t.shape[3]), static_cast<cuuint64_t>(t.shape[1]),
                              static_cast<cuuint64_t>(t.shape[2]), static_cast<cuuint64_t>(t.shape[0])};
  const long long strides[3] = {t.stride[1], t.stride[2], t.stride[0]};
  const cuuint32_t box[4] = {inner_box(dtype, row_bytes), static_cast<cuuint32_t>(box_rows), 1, 1};
  return make_spec(dtype, row_bytes, 4, dims, strides, box);
}

// Packed GQA (FA4Config::pack_gqa): 5-D map over (depth, group heads, rows, kv heads, batch), box
// {row_bytes of depth, group, box_rows / group (rounded down), 1, 1}, so one box is the real rows of
// a PackedRow span, r = query * group + head in order (templates/common/packed_rows.h). `group` is
// the heads one CTA packs (detail::pack_heads): a slice of a larger group makes each slice a "kv
// head" of the map. Coordinates (d, 0, first query, kv head or slice, batch).
TmaMapSpec tma_packed_map_spec(const Tensor& t, DType dtype, int group, int box_rows, int row_bytes) {
  const cuuint64_t dims[5] = {static_cast<cuuint64_t>(t.shape[3]), static_cast<cuuint64_t>(group),
                              static_cast<cuuint64_t>(t.shape[1]), static_cast<cuuint64_t>(t.shape[2] / group),
                              static_cast<cuuint64_t>(t.shape[0])};
  const long long strides[4] = {t.stride[2], t.stride[1], t.stride[2] * group, t.stride[0]};
  const cuuint32_t box[5] = {inner_box(dtype, row_bytes), static_cast<cuuint32_t>(group),
                             static_cast<cuuint32_t>(box_rows / group), 1, 1};
  return make_spec(dtype, row_bytes, 5, dims, strides, box);
}

fa4::TmaDescs TmaDescCache::get(const ResolvedConfig& rc, const LaunchArgs& a, int kv_box_rows) {
  Signature sig{};
  sig.kv_box_rows = kv_box_rows;
  const Tensor* ts[4] = {&a.q, &a.k, &a.v, &a.o};
  for (int i = 0; i < 4; ++i) {
    sig.ptr[i] = ts[i]->data;
    for (int j = 0; j < 4; ++j) {
      sig.shape[i][j] = ts[i]->shape[j];
      sig.stride[i][j] = ts[i]->stride[j];
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (valid_ && sig == last_) return descs_;
  // One consumer's Q tile (a 64-row warpgroup tile on sm90a, a 128-row MMA tile on sm100a).
  const int q_rows = policy(rc).q_box_rows(rc.config);
  // Q in the kernel's input type, K and V in its KV type (e4m3 for an FP8 KV cache), O in its own
  // (pack_params checked each).
  const DType in = rc.config.dtype, kv = kv_type(rc.config), out = a.o.dtype;
  const int q_row = tma_row_bytes(rc, in), kv_row = tma_row_bytes(rc, kv), o_row = tma_row_bytes(rc, out);
  if (rc.config.pack_gqa) {
    descs_.q = encode_packed(a.q, in, pack_heads(rc), q_rows, q_row);
    descs_.o = encode_packed(a.o, out, pack_heads(rc), q_rows, o_row);
  } else {
    descs_.q = encode(a.q, in, q_rows, q_row);
    descs_.o = encode(a.o, out, q_rows, o_row);
  }
  // Gathered pages (kv_box_rows 0): the kernel reads K and V by cp.async; their maps go unused.
  const int kv_box = kv_box_rows > 0 ? kv_box_rows : 1;
  descs_.k = encode(a.k, kv, kv_box, kv_row);
  descs_.v = encode(a.v, kv, kv_box, kv_row);
  last_ = sig;
  valid_ = true;
  return descs_;
}

}  // namespace jit::detail
