// A [kRows][D] tile of 16-bit elements in shared memory, row-major with the 16-byte chunks of
// each row XOR-swizzled by (row & kSwizzleMask). Both the cp.async writer and the ldmatrix
// reader go through offset(), so they agree by construction. The row layout R (Rows in
// traits.cuh) is Q's and K's, or V's (T::VRows, narrower with FA4Config::depth_v).
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
// R: the row layout (Rows: T::QKRows for Q and K, T::VRows for V).
template <class R>
struct LaneOffset {
  static constexpr bool kPow2Row = (R::kRowBytes & (R::kRowBytes - 1)) == 0;
  u32 off;    // pow2 rows: row * kRowBytes + (chunk0 ^ sw) * 16; else the row part only
  u32 chunk;  // (chunk0 ^ sw) * 16 (unused for pow2 rows, where the XOR cannot carry into the row part)
  __device__ __forceinline__ static LaneOffset make(int row, int chunk0) {
    const u32 c = static_cast<u32>((chunk0 ^ (row & R::kSwizzleMask)) << 4);
    const u32 r = static_cast<u32>(row * R::kRowBytes);
    return kPow2Row ? LaneOffset{r + c, 0u} : LaneOffset{r, c};
  }
  __device__ __forceinline__ u32 at(int step) const {
    const u32 lo = static_cast<u32>((step & R::kSwizzleMask) << 4), hi = static_cast<u32>((step & ~R::kSwizzleMask) << 4);
    if constexpr (kPow2Row) return (off ^ lo) + hi;
    else return off + (chunk ^ lo) + hi;
  }
  // The same lane `bytes` further along the row (a whole number of swizzle periods, 16 *
  // (kSwizzleMask + 1) bytes, so the XOR bits stay clear): an O slice's first column (kernel.cuh v_lane).
  __device__ __forceinline__ LaneOffset plus(u32 bytes) const { return LaneOffset{off + bytes, chunk}; }
  // Hides the value from loop-invariant code motion: the per-step XORs are then recomputed
  // per tile (one LOP3 each) instead of being held in registers across the KV loop.
  __device__ __forceinline__ LaneOffset refreshed() const {
    LaneOffset r = *this;
    asm volatile("" : "+r"(r.off), "+r"(r.chunk));
    return r;
  }
};

// Q's and K's ldmatrix lane offsets, and V's.
template <class T>
using QKLane = LaneOffset<typename T::QKRows>;
template <class T>
using VLane = LaneOffset<typename T::VRows>;

template <class T, int kRows, class R = typename T::QKRows>
struct SmemTile {
  static constexpr int kBytes = kRows * R::kRowBytes;

  // Byte offset of 16-byte chunk `chunk` of row `row`.
  __device__ __forceinline__ static u32 offset(int row, int chunk) {
    return row * R::kRowBytes + ((chunk ^ (row & R::kSwizzleMask)) << 4);
  }

  // Issues cp.async for rows [row0, row0 + kRows) of a global [rows][depth] view (element row
  // stride `stride`, depth stride 1). Rows >= rows_valid and chunks past kDepth are zero-filled.
  // The caller commits the group. Thread `tid` copies chunk tid % kChunks of rows
  // tid / kChunks + i * kRowStep: one 64-bit pointer walked by a fixed step, so per tile the
  // address cost is one multiply-add plus one add per copy. Rows of 24 chunks (depth 192), which
  // 128 threads do not split into whole rows, go 8 threads to a row, each copying chunks c, c + 8
  // and c + 16 (kReps): the swizzle only XORs the low 3 bits, so those land 128 bytes apart.
  __device__ __forceinline__ static void load_async(u32 smem, const typename T::Element* g, long long stride,
                                                    int row0, int rows_valid, int tid) {
    constexpr bool kWholeRows = T::kThreads % R::kChunks == 0;
    if constexpr (kWholeRows || (R::kChunks % 8 == 0 && R::kSwizzleMask == 7 && T::kThreads % 8 == 0)) {
      constexpr int kRowThreads = kWholeRows ? R::kChunks : 8;  // threads sharing one row
      constexpr int kReps = R::kChunks / kRowThreads;           // chunks per thread and row, 8 apart
      constexpr int kRowStep = T::kThreads / kRowThreads;
      static_assert(kRows % kRowStep == 0, "tile rows must be a multiple of the copy row step");
      const int r = tid / kRowThreads;
      // Opaque to the optimiser: otherwise it splits (row0 + r) * stride + chunk * 8 and hoists
      // the per-thread 64-bit parts out of the KV loop, holding registers the accumulators need.
      int row = row0 + r, chunk = tid % kRowThreads;
      asm volatile("" : "+r"(row), "+r"(chunk));
      const typename T::Element* src = g + (long long)row * stride + chunk * 8;
      const long long step = kRowStep * stride;
      const int remaining = rows_valid - row0 - r;  // rows of this thread still inside the view
#pragma unroll
      for (int i = 0; i < kRows / kRowStep; ++i) {
#pragma unroll
        for (int j = 0; j < kReps; ++j) {
          const bool chunk_ok = R::kDepth == R::D || (chunk + 8 * j) * 8 < R::kDepth;
          const bool valid = chunk_ok && i * kRowStep < remaining;
          // The swizzle term (row & 7) is periodic in 8 rows: with kRowStep % 8 == 0 the
          // destination moves by whole rows.
          const u32 dst = (kRowStep % 8 == 0 ? offset(r, chunk) + i * kRowStep * R::kRowBytes
                                             : offset(r + i * kRowStep, chunk)) +
                          j * 128;
          cp_async_16(smem + dst, valid ? src + 64 * j : g, valid);  // invalid: a mapped address, 0 bytes read
        }
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
    constexpr int kTotal = kRows * R::kChunks;
#pragma unroll
    for (int i = 0; i < (kTotal + T::kThreads - 1) / T::kThreads; ++i) {
      const int idx = tid + i * T::kThreads;
      if (kTotal % T::kThreads != 0 && idx >= kTotal) break;
      const int row = idx / R::kChunks, chunk = idx % R::kChunks;
      const bool valid = row0 + row < rows_valid && (R::kDepth == R::D || chunk * 8 < R::kDepth);
      const auto* src = valid ? row_src(row0 + row) + chunk * 8 : fallback;
      cp_async_16(smem + offset(row, chunk), src, valid);
    }
  }
};

// FP8 KV cache: a [kRows][D] tile of e4m3 in shared memory, the staging one K or V tile lands in
// by cp.async before convert() rewrites it as the 16-bit SmemTile the ldmatrix code reads.
// Row-major, D bytes per row, unswizzled: the copies and the conversion's 16-byte reads both walk
// it linearly (lane l of a warp at byte 16 * l of the warp's 512), so no bank conflicts to avoid.
template <class T, int kRows>
struct E4m3Tile {
  using KVElement = typename T::KVElement;
  using Element = typename T::Element;
  static constexpr int kChunks = T::kKVChunks8;          // 16-byte chunks (16 e4m3) per row
  static constexpr int kRowStep = T::kThreads / kChunks;  // rows between one thread's chunks
  static constexpr int kBytes = kRows * T::D;
  static_assert(T::kFp8KV && T::kThreads % kChunks == 0 && kRows % kRowStep == 0,
                "E4m3Tile: e4m3 K/V, rows split into whole copy row steps");

  // Byte offset of 16-byte chunk `chunk` (elements 16 * chunk ..) of row `row`.
  __device__ __forceinline__ static u32 offset(int row, int chunk) { return row * T::D + chunk * 16; }

  // SmemTile::load_async for e4m3 rows: cp.async of rows [row0, row0 + kRows) of a global
  // [rows][depth] view (row stride `stride` elements, i.e. bytes), thread tid copying chunk
  // tid % kChunks of rows tid / kChunks + i * kRowStep; rows >= rows_valid and chunks past kDepth
  // are zero-filled (e4m3 0x00 = +0). The caller commits the group.
  __device__ __forceinline__ static void load_async(u32 smem, const KVElement* g, long long stride, int row0,
                                                    int rows_valid, int tid) {
    const int r = tid / kChunks;
    int row = row0 + r, chunk = tid % kChunks;
    asm volatile("" : "+r"(row), "+r"(chunk));  // as SmemTile::load_async: no hoisted 64-bit parts
    const bool chunk_ok = T::kDepth == T::D || chunk * 16 < T::kDepth;
    const KVElement* src = g + (long long)row * stride + chunk * 16;
    const long long step = kRowStep * stride;
    const int remaining = rows_valid - row0 - r;  // rows of this thread still inside the view
    const u32 dst = smem + offset(r, tid % kChunks);
#pragma unroll
    for (int i = 0; i < kRows / kRowStep; ++i) {
      const bool valid = chunk_ok && i * kRowStep < remaining;
      cp_async_16(dst + i * kRowStep * T::D, valid ? src : g, valid);  // invalid: a mapped address, 0 bytes read
      src += step;
    }
  }

  // The 16-bit tile SmemTile<T, kRows> at `dst` <- this e4m3 tile at `src`: thread tid converts
  // chunk c = tid % kChunks of rows tid / kChunks + i * kRowStep, 16 e4m3 (one 16-byte read) into
  // 16 Element, the row's 16-byte chunks 2c and 2c + 1 (swizzled: SmemTile::offset). Exact
  // (e4m3x2_to). All of the thread's reads first, so their latencies overlap (four warps per CTA
  // leave little else to hide them). Ordering is the caller's: the e4m3 copies landed and were
  // published by a barrier before, and a barrier after publishes the 16-bit tile to the ldmatrix
  // readers. Bank conflicts: none on the reads (linear); the stores of a warp's 4 (d128) or 8
  // (d64) rows spread evenly over the 8 16-byte bank groups (the swizzle moves odd rows to odd groups).
  __device__ __forceinline__ static void convert(u32 dst, u32 src, int tid) {
    using Tile = SmemTile<T, kRows>;
    constexpr int kIters = kRows / kRowStep;
    const int r = tid / kChunks, c = tid % kChunks;
    u32 v[kIters][4];
#pragma unroll
    for (int i = 0; i < kIters; ++i) ld_shared_v4(src + offset(r + i * kRowStep, c), v[i]);
#pragma unroll
    for (int i = 0; i < kIters; ++i) {
      const int row = r + i * kRowStep;
      u32 lo[4], hi[4];  // elements 16c .. 16c + 7, 16c + 8 .. 16c + 15 (a word's low byte is its first)
#pragma unroll
      for (int w = 0; w < 2; ++w) {
        lo[2 * w] = e4m3x2_to<Element>(static_cast<u16>(v[i][w] & 0xffffu));
        lo[2 * w + 1] = e4m3x2_to<Element>(static_cast<u16>(v[i][w] >> 16));
        hi[2 * w] = e4m3x2_to<Element>(static_cast<u16>(v[i][w + 2] & 0xffffu));
        hi[2 * w + 1] = e4m3x2_to<Element>(static_cast<u16>(v[i][w + 2] >> 16));
      }
      st_shared_v4(dst + Tile::offset(row, 2 * c), lo);
      st_shared_v4(dst + Tile::offset(row, 2 * c + 1), hi);
    }
  }
};

}  // namespace sm80
}  // namespace fa4
