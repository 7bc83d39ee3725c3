// Split-KV: the partial results each split writes, and the combine kernel that merges them.
// Written once for every backend: a split CTA calls store_partial_* from its epilogue instead of
// writing O / LSE, and the host launches fa4_combine (generated entry) right after the kernel.
#pragma once
#include "common/prelude.cuh"

namespace fa4 {
namespace split {

// Index of LSE row `row` in one split's slice (the slices start at partial_row0).
__device__ __forceinline__ long long slice_row(const FwdParams& p, int split, long long row) {
  return (long long)split * p.partial_rows + row - p.partial_row0;
}
// One split's O row (already divided by its own softmax sum), float32. row: LSE row index.
__device__ __forceinline__ float* partial_o(const FwdParams& p, int split, long long row, int depth) {
  return p.o_partial + slice_row(p, split, row) * depth;
}
__device__ __forceinline__ void store_partial_lse(const FwdParams& p, int split, long long row, float lse) {
  p.lse_partial[slice_row(p, split, row)] = lse;
}

// Where LSE row `row` lives in O: rows are [batch][head][seqlen_q], or [head][total_q] varlen.
__device__ __forceinline__ long long o_offset_of_row(const FwdParams& p, long long row) {
  const long long h = (row / p.seqlen_q) % p.num_q_heads, q = row % p.seqlen_q;
  const long long b = p.cu_seqlens_q ? 0 : row / ((long long)p.seqlen_q * p.num_q_heads);
  return b * p.o_batch_stride + q * p.o_row_stride + h * p.o_head_stride;
}

// O = sum_s exp(lse_s - lse) O_s with lse = log sum_s exp(lse_s). Splits that saw no key have
// lse_s = -inf and weight 0 (their partial O is never read: it may be unwritten); a row no split
// saw gets O = 0 and LSE = -inf. One warp per row: the split weights go through shared memory so
// the O loop can keep kUnroll splits' float4 loads in flight at once (a serial load-then-use
// chain per split made the combine 7 us at 15 splits on an H200, 5% of a long-context decode).
template <class Config>
__device__ __forceinline__ void combine(const FwdParams& p) {
  using Out = typename Config::OutElement;
  constexpr int kDepth = Config::kDepth;
  static_assert(kDepth % 4 == 0, "combine: float4 rows need a depth that is a multiple of 4");
  constexpr int kVecsPerLane = (kDepth / 4 + 31) / 32;
  constexpr int kSplitsPerLane = kMaxSplits / 32;
  constexpr int kUnroll = 8;
  __shared__ float weights[kCombineRowsPerCta][kMaxSplits];
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  const long long slot_row = (long long)blockIdx.x * kCombineRowsPerCta + warp;  // in a slice
  if (slot_row >= p.partial_rows) return;
  const long long row = p.partial_row0 + slot_row;  // LSE row
  // <= kMaxSplits (host check); stream-K: the row's tile was cut into split_count[slot_row] segments.
  const int splits = p.split_count ? p.split_count[slot_row] : p.num_splits;

  float ls[kSplitsPerLane];
  float m = kNegInf;
#pragma unroll
  for (int c = 0; c < kSplitsPerLane; ++c) {
    const int s = lane + 32 * c;
    ls[c] = s < splits ? p.lse_partial[slice_row(p, s, row)] : kNegInf;
    m = fmaxf(m, ls[c]);
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
  float sum = 0.0f;
#pragma unroll
  for (int c = 0; c < kSplitsPerLane; ++c) sum += ls[c] == kNegInf ? 0.0f : __expf(ls[c] - m);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  const float lse = m == kNegInf ? kNegInf : m + __logf(sum);
#pragma unroll
  for (int c = 0; c < kSplitsPerLane; ++c)
    weights[warp][lane + 32 * c] = ls[c] == kNegInf ? 0.0f : __expf(ls[c] - lse);
  __syncwarp();

  float4 acc[kVecsPerLane];
#pragma unroll
  for (int i = 0; i < kVecsPerLane; ++i) acc[i] = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int s0 = 0; s0 < splits; s0 += kUnroll) {
    float4 v[kUnroll][kVecsPerLane];
    float w[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      w[u] = s0 + u < splits ? weights[warp][s0 + u] : 0.0f;
      const float4* src = reinterpret_cast<const float4*>(partial_o(p, s0 + u, row, kDepth));
#pragma unroll
      for (int i = 0; i < kVecsPerLane; ++i) {
        const int vec = lane + 32 * i;
        v[u][i] = w[u] != 0.0f && vec < kDepth / 4 ? src[vec] : make_float4(0.f, 0.f, 0.f, 0.f);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int i = 0; i < kVecsPerLane; ++i) {
        acc[i].x += w[u] * v[u][i].x;
        acc[i].y += w[u] * v[u][i].y;
        acc[i].z += w[u] * v[u][i].z;
        acc[i].w += w[u] * v[u][i].w;
      }
  }
  Out* dst = static_cast<Out*>(p.o) + o_offset_of_row(p, row);
#pragma unroll
  for (int i = 0; i < kVecsPerLane; ++i) {
    const int e = 4 * (lane + 32 * i);
    if (e < kDepth) {  // O's strides need not allow vector stores: four element stores
      dst[e] = from_float<Out>(acc[i].x);
      dst[e + 1] = from_float<Out>(acc[i].y);
      dst[e + 2] = from_float<Out>(acc[i].z);
      dst[e + 3] = from_float<Out>(acc[i].w);
    }
  }
  if (p.lse != nullptr && lane == 0) p.lse[row] = lse;
}

}  // namespace split
}  // namespace fa4
