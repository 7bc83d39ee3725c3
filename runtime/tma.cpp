#include "runtime/tma.hpp"

#include <cstring>

#include "runtime/driver.hpp"

namespace jit::detail {

namespace {

static_assert(sizeof(fa4::TmaDesc) == sizeof(CUtensorMap), "TmaDesc must match CUtensorMap");

// 4-D map over (depth, rows, heads, batch), innermost first; box {64, box_rows, 1, 1}.
fa4::TmaDesc encode(const Tensor& t, int box_rows) {
  const DriverApi& d = driver();
  constexpr cuuint64_t kElem = 2;
  cuuint64_t dims[4] = {static_cast<cuuint64_t>(t.shape[3]), static_cast<cuuint64_t>(t.shape[1]),
                        static_cast<cuuint64_t>(t.shape[2]), static_cast<cuuint64_t>(t.shape[0])};
  // Byte strides of dims 1..3. A size-1 dimension is never stepped over, but the driver still
  // wants a valid stride: give it the span of the dimension below.
  cuuint64_t strides[3];
  const long long elem_strides[3] = {t.stride[1], t.stride[2], t.stride[0]};
  cuuint64_t below = dims[0] * kElem;
  for (int i = 0; i < 3; ++i) {
    strides[i] = dims[i + 1] == 1 || elem_strides[i] == 0 ? below : elem_strides[i] * kElem;
    below = strides[i] * dims[i + 1];
  }
  cuuint32_t box[4] = {64, static_cast<cuuint32_t>(box_rows), 1, 1};
  cuuint32_t elem_strides_box[4] = {1, 1, 1, 1};
  CUtensorMap map;
  check(d.cuTensorMapEncodeTiled(&map, t.dtype == DType::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                                 4, t.data, dims, strides, box, elem_strides_box, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                 CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                 CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
        "cuTensorMapEncodeTiled");
  fa4::TmaDesc out;
  std::memcpy(&out, &map, sizeof(out));
  return out;
}

}  // namespace

fa4::TmaDescs TmaDescCache::get(const ResolvedConfig& rc, const LaunchArgs& a) {
  Signature sig{};
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
  // One consumer's Q tile: a 64-row warpgroup tile on Hopper, a 128-row MMA tile on Blackwell.
  const int q_rows = rc.backend == Backend::hopper ? 64 : rc.config.BM / 2, kv_rows = rc.config.BN;
  descs_.q = encode(a.q, q_rows);
  descs_.k = encode(a.k, kv_rows);
  descs_.v = encode(a.v, kv_rows);
  descs_.o = encode(a.o, q_rows);
  last_ = sig;
  valid_ = true;
  return descs_;
}

}  // namespace jit::detail
