// A [kRows][D] tile of 16-bit elements in shared memory, row-major with the 16-byte chunks of
// each row XOR-swizzled by (row & kSwizzleMask). Both the cp.async writer and the ldmatrix
// reader go through offset(), so they agree by construction.
#pragma once
#include "sm80/copy.cuh"
#include "sm80/traits.cuh"

namespace fa4 {
namespace sm80 {

// A lane's ldmatrix address inside a tile, for 16-byte chunk steps that keep (row & 7):
// at(step) = offset(row, chunk0 + step) for even `step` and chunk0 in {0, 1}. Since
// chunk0 + step == chunk0 ^ step, the swizzled chunk is (chunk0 ^ sw) ^ step. The part of
// `step` above the swizzle period is a plain add (no carry: chunk0 ^ sw < period), which
// ptxas folds into the ldmatrix immediate, so a k-loop needs only period/2 distinct bases.
template <class T>
struct LaneOffset {
  static constexpr bool kPow2Row = (T::kRowBytes & (T::kRowBytes - 1)) == 0;
  u32 off;    // pow2 rows: row * kRowBytes + (chunk0 ^ sw) * 16; else the row part only
  u32 chunk;  // (chunk0 ^ sw) * 16 (unused for pow2 rows, where the XOR cannot carry into the row part)
  __device__ __forceinline__ static LaneOffset make(int row, int chunk0) {
    const u32 c = static_cast<u32>((chunk0 ^ (row & T::kSwizzleMask)) << 4);
    const u32 r = static_cast<u32>(row * T::kRowBytes);
    return kPow2Row ? LaneOffset{r + c, 0u} : LaneOffset{r, c};
  }
  __device__ __forceinline__ u32 at(int step) const {
    const u32 lo = static_cast<u32>((step & T::kSwizzleMask) << 4), hi = static_cast<u32>((step & ~T::kSwizzleMask) << 4);
    if constexpr (kPow2Row) return (off ^ lo) + hi;
    else return off + (chunk ^ lo) + hi;
  }
  // Hides the value from loop-invariant code motion: the per-step XORs are then recomputed
  // per tile (one LOP3 each) instead of being held in registers across the KV loop.
  __device__ __forceinline__ LaneOffset refreshed() const {
    LaneOffset r = *this;
    asm volatile("" : "+r"(r.off), "+r"(r.chunk));
    return r;
  }
};

template <class T, int kRows>
struct SmemTile {
  static constexpr int kBytes = kRows * T::kRowBytes;

  // Byte offset of 16-byte chunk `chunk` of row `row`.
  __device__ __forceinline__ static u32 offset(int row, int chunk) {
    return row * T::kRowBytes + ((chunk ^ (row & T::kSwizzleMask)) << 4);
  }

  // Issues cp.async for rows [row0, row0 + kRows) of a global [rows][depth] view (element row
  // stride `stride`, depth stride 1). Rows >= rows_valid and chunks past kDepth are zero-filled.
  // The caller commits the group. Thread `tid` copies chunk tid % kChunks of rows
  // tid / kChunks + i * kRowStep: one 64-bit pointer walked by a fixed step, so per tile the
  // address cost is one multiply-add plus one add per copy.
  __device__ __forceinline__ static void load_async(u32 smem, const typename T::Element* g, long long stride,
                                                    int row0, int rows_valid, int tid) {
    if constexpr (T::kThreads % T::kChunks == 0) {
      constexpr int kRowStep = T::kThreads / T::kChunks;
      static_assert(kRows % kRowStep == 0, "tile rows must be a multiple of the copy row step");
      const int r = tid / T::kChunks;
      // Opaque to the optimiser: otherwise it splits (row0 + r) * stride + chunk * 8 and hoists
      // the per-thread 64-bit parts out of the KV loop, holding registers the accumulators need.
      int row = row0 + r, chunk = tid % T::kChunks;
      asm volatile("" : "+r"(row), "+r"(chunk));
      const bool chunk_ok = T::kDepth == T::D || chunk * 8 < T::kDepth;
      const typename T::Element* src = g + (long long)row * stride + chunk * 8;
      const long long step = kRowStep * stride;
      const int remaining = rows_valid - row0 - r;  // rows of this thread still inside the view
#pragma unroll
      for (int i = 0; i < kRows / kRowStep; ++i) {
        const bool valid = chunk_ok && i * kRowStep < remaining;
        // The swizzle term (row & 7) is periodic in 8 rows: with kRowStep % 8 == 0 the
        // destination moves by whole rows.
        const u32 dst = kRowStep % 8 == 0 ? offset(r, chunk) + i * kRowStep * T::kRowBytes
                                          : offset(r + i * kRowStep, chunk);
        cp_async_16(smem + dst, valid ? src : g, valid);  // invalid: a mapped address, 0 bytes read
        src += step;
      }
    } else {  // threads do not split into whole rows: the generic per-chunk walk
      load_async_rows(smem, [g, stride](int row) { return g + (long long)row * stride; }, g, row0, rows_valid, tid);
    }
  }

  // load_async for rows without a fixed stride (packed GQA Q rows): row_src(row) is the global
  // address of row `row`'s first element, called only for rows < rows_valid. Used once per
  // CTA, so it favours simplicity over the per-tile address tricks above.
  template <class RowSrc>
  __device__ __forceinline__ static void load_async_rows(u32 smem, const RowSrc& row_src,
                                                         const typename T::Element* fallback, int row0,
                                                         int rows_valid, int tid) {
    constexpr int kTotal = kRows * T::kChunks;
#pragma unroll
    for (int i = 0; i < (kTotal + T::kThreads - 1) / T::kThreads; ++i) {
      const int idx = tid + i * T::kThreads;
      if (kTotal % T::kThreads != 0 && idx >= kTotal) break;
      const int row = idx / T::kChunks, chunk = idx % T::kChunks;
      const bool valid = row0 + row < rows_valid && (T::kDepth == T::D || chunk * 8 < T::kDepth);
      const auto* src = valid ? row_src(row0 + row) + chunk * 8 : fallback;
      cp_async_16(smem + offset(row, chunk), src, valid);
    }
  }
};

}  // namespace sm80
}  // namespace fa4
