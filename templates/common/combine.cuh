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
// lse_s = -inf and weight 0 (their partial O is loaded but never summed: it may be unwritten); a
// row no split saw gets O = 0 and LSE = -inf. A row belongs to W = combine_warps_per_row(num_splits)
// warps: each computes the row's weights (into its own shared slice) and sums every W-th split,
// loading kUnroll splits ahead of their adds (a serial load-then-use chain made the combine 7 us at
// 15 splits on an H200); with W > 1 the warps' sums meet in shared memory.
template <class Config>
__device__ __forceinline__ void combine(const FwdParams& p) {
  using Out = typename Config::OutElement;
  constexpr int kDepth = Config::kDepth;
  static_assert(kDepth % 4 == 0, "combine: float4 rows need a depth that is a multiple of 4");
  constexpr int kVecs = kDepth / 4;
  constexpr int kVecsPerLane = (kVecs + 31) / 32;
  constexpr int kSplitsPerLane = kMaxSplits / 32;
  constexpr int kUnroll = 8;
  __shared__ float weights[kCombineWarps][kMaxSplits];
  __shared__ float4 sums[kCombineWarps][kVecs];
  if constexpr (Config::kWaitsForKernel) wait_for_primary_grid();  // launched before the kernel ended
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  const int warps_per_row = combine_warps_per_row(p.num_splits);  // uniform: the CTA agrees on it
  const int group = warp / warps_per_row, part = warp % warps_per_row;
  const long long slot_row = (long long)blockIdx.x * (kCombineWarps / warps_per_row) + group;  // in a slice
  bool live = slot_row < p.partial_rows;
  const long long row = p.partial_row0 + slot_row;  // the partials' row: the LSE row but below
  long long out_row = row;                          // the LSE row, whose O and LSE this writes
  // <= kMaxSplits (host check); stream-K: the row's tile was cut into split_count[slot_row] segments.
  int splits = !live ? 0 : p.split_count ? p.split_count[slot_row] : p.num_splits;
  if (p.split_qmax > 0 && live) {
    // Long-pole splits: the slot's sequence was split this launch (its piece 0 wrote the counts of
    // all its slots) only if it has 1..split_qmax queries; other slots hold an earlier launch's.
    const long long b = slot_row / p.split_seq_rows;
    const int seqlen_q = p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b];
    live = seqlen_q > 0 && seqlen_q <= p.split_qmax && splits > 0;
    out_row = live ? p.split_row[slot_row] : 0;
    splits = live ? splits : 0;
  }

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
  for (int s0 = part; s0 < splits; s0 += kUnroll * warps_per_row) {
    // Every load first, from addresses that are always in the workspace (a split past the row's
    // last reads the last again), so none waits on a weight; splits of weight 0 (past the last, or
    // unwritten: no key) are dropped by a select, never multiplied in (their O may be NaN bits).
    float4 v[kUnroll][kVecsPerLane];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const float4* src =
          reinterpret_cast<const float4*>(partial_o(p, min(s0 + u * warps_per_row, splits - 1), row, kDepth));
#pragma unroll
      for (int i = 0; i < kVecsPerLane; ++i)
        v[u][i] = lane + 32 * i < kVecs ? src[lane + 32 * i] : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    // Summed last load first: ptxas then keeps 4 loads in flight before the first add (3 in load
    // order); the split across warps (combine_warps_per_row) does the rest.
#pragma unroll
    for (int u = kUnroll - 1; u >= 0; --u) {
      const int s = s0 + u * warps_per_row;
      const float w = s < splits ? weights[warp][s] : 0.0f;
      if (w == 0.0f) continue;
#pragma unroll
      for (int i = 0; i < kVecsPerLane; ++i) {
        acc[i].x += w * v[u][i].x;
        acc[i].y += w * v[u][i].y;
        acc[i].z += w * v[u][i].z;
        acc[i].w += w * v[u][i].w;
      }
    }
  }
  Out* dst = static_cast<Out*>(p.o) + o_offset_of_row(p, out_row);
  // O's strides need not allow vector stores: four element stores
  auto store = [&](int vec, const float4& o) {
    const int e = 4 * vec;
    dst[e] = from_float<Out>(o.x);
    dst[e + 1] = from_float<Out>(o.y);
    dst[e + 2] = from_float<Out>(o.z);
    dst[e + 3] = from_float<Out>(o.w);
  };
  if (warps_per_row == 1) {
    if (live)
#pragma unroll
      for (int i = 0; i < kVecsPerLane; ++i)
        if (lane + 32 * i < kVecs) store(lane + 32 * i, acc[i]);
  } else {
#pragma unroll
    for (int i = 0; i < kVecsPerLane; ++i)
      if (lane + 32 * i < kVecs) sums[warp][lane + 32 * i] = acc[i];
    __syncthreads();  // every warp gets here: warps_per_row is the CTA's, and dead rows do not return
    if (live)
      for (int vec = part * 32 + lane; vec < kVecs; vec += 32 * warps_per_row) {
        float4 o = sums[group * warps_per_row][vec];
        for (int q = 1; q < warps_per_row; ++q) {
          const float4 t = sums[group * warps_per_row + q][vec];
          o.x += t.x;
          o.y += t.y;
          o.z += t.z;
          o.w += t.w;
        }
        store(vec, o);
      }
  }
  if (live && p.lse != nullptr && part == 0 && lane == 0) p.lse[out_row] = lse;
}

}  // namespace split
}  // namespace fa4
