// Split-KV: the partial results each split writes, and the combine kernel that merges them.
// Written once for every backend: a split CTA calls store_partial_* from its epilogue instead of
// writing O / LSE, and the host launches fa4_combine (generated entry) right after the kernel.
#pragma once
#include "common/prelude.cuh"

namespace fa4 {
namespace split {

// One split's O row (already divided by its own softmax sum), float32. row: LSE row index.
__device__ __forceinline__ float* partial_o(const FwdParams& p, int split, long long row, int depth) {
  return p.o_partial + ((long long)split * p.partial_rows + row) * depth;
}
__device__ __forceinline__ void store_partial_lse(const FwdParams& p, int split, long long row, float lse) {
  p.lse_partial[(long long)split * p.partial_rows + row] = lse;
}

// Where LSE row `row` lives in O: rows are [batch][head][seqlen_q], or [head][total_q] varlen.
__device__ __forceinline__ long long o_offset_of_row(const FwdParams& p, long long row) {
  const long long h = (row / p.seqlen_q) % p.num_q_heads, q = row % p.seqlen_q;
  const long long b = p.cu_seqlens_q ? 0 : row / ((long long)p.seqlen_q * p.num_q_heads);
  return b * p.o_batch_stride + q * p.o_row_stride + h * p.o_head_stride;
}

// O = sum_s exp(lse_s - lse) O_s with lse = log sum_s exp(lse_s). Splits that saw no key have
// lse_s = -inf and weight 0; a row no split saw gets O = 0 and LSE = -inf.
template <class Config>
__device__ __forceinline__ void combine(const FwdParams& p) {
  using Out = typename Config::OutElement;
  constexpr int kDepth = Config::kDepth;
  constexpr int kPerLane = (kDepth + 31) / 32;
  const int lane = threadIdx.x & 31;
  const long long row = (long long)blockIdx.x * kCombineRowsPerCta + threadIdx.x / 32;
  if (row >= p.partial_rows) return;

  float m = kNegInf;
  for (int s = lane; s < p.num_splits; s += 32) m = fmaxf(m, p.lse_partial[(long long)s * p.partial_rows + row]);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
  float sum = 0.0f;
  if (m != kNegInf)
    for (int s = lane; s < p.num_splits; s += 32) sum += __expf(p.lse_partial[(long long)s * p.partial_rows + row] - m);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  const float lse = m == kNegInf ? kNegInf : m + __logf(sum);

  float acc[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) acc[i] = 0.0f;
  if (lse != kNegInf) {
    for (int s = 0; s < p.num_splits; ++s) {
      const float ls = p.lse_partial[(long long)s * p.partial_rows + row];
      if (ls == kNegInf) continue;
      const float w = __expf(ls - lse);
      const float* src = partial_o(p, s, row, kDepth);
#pragma unroll
      for (int i = 0; i < kPerLane; ++i)
        if (lane + 32 * i < kDepth) acc[i] += w * src[lane + 32 * i];
    }
  }
  Out* dst = static_cast<Out*>(p.o) + o_offset_of_row(p, row);
#pragma unroll
  for (int i = 0; i < kPerLane; ++i)
    if (lane + 32 * i < kDepth) dst[lane + 32 * i] = from_float<Out>(acc[i]);
  if (p.lse != nullptr && lane == 0) p.lse[row] = lse;
}

}  // namespace split
}  // namespace fa4
