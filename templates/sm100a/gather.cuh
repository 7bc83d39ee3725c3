// Gathered K / V rows of the sm100a load warp: paged caches whose page size no TMA box takes
// (FwdParams::kv_box_rows 0: gcd(page_size, BN) not a multiple of 8 rows, page sizes 1, 2, 4, 12, ...).
// Every lane of the load warp copies rows with cp.async, 16 bytes a copy, into the layout TMA would
// have left (boxes of [BN][128 bytes], 16-byte unit u of row r at ((u % 8) ^ (r % 8)) * 16 in box
// u / 8), so the MMA warp and the e4m3 converters read a stage as they read TMA's. Each lane arrives
// on the stage's full barrier by cp.async.mbarrier.arrive.noinc once its copies landed (the rings'
// full barriers then count 32 arrivals: pipelines.cuh), so no lane waits for its own copies and every
// free stage can be in flight, as with TMA. cp.async writes through the generic proxy and tcgen05.mma
// reads through the async one: the MMA warp fences after its wait (TMAConsumerPipeline).
// This is sm90a's gather (sm90a/gather.cuh) for one warp at 48 registers, without its page ring in
// shared memory: each lane reads its rows' page-table entries where it copies them (gather_stage).
#pragma once
#include "common/sequence.cuh"  // gathers_kv_rows
#include "common/smem.cuh"
#include "sm100a/traits.cuh"

namespace fa4 {
namespace sm100a {

// Tile n's rows: the first key and how many are keys (rows past them copy nothing: zero-filled, so
// P V never meets a NaN).
struct GatherTile {
  int key0;
  int keys_left;  // at most kBN
  template <int kBN>
  __device__ __forceinline__ static GatherTile of(const SeqInfo& s, int n) {
    return {n * kBN, min(s.seqlen_k - n * kBN, kBN)};
  }
};

// One stage's copies: bytes [col0, col0 + kRowBytes) of each of tile t's rows (kRowBytes: the
// stage's boxes x 128) from base (K or V at the KV head; element strides page_stride and row_stride
// below 2^31: launch_args.cpp checks a gathered cache's) into the stage at dst (1024-aligned). Bytes
// at or past real_end of a row (kPadded: a depth its padded depth exceeds) are zero-filled, as TMA
// fills a box past the tensor. kLanes lanes take a row's 16-byte units (kLanes divides 32 and the
// row's units), 32 / kLanes rows a step. The rows go in blocks of 32: lane l reads the page-table entry of the
// block's row l and forms its address, which the lanes copying that row take by shuffle; the next
// block's entry loads while this block is copied. At 48 registers (kernel.cuh kRegsOther) no more is
// held: a lane keeping its kBN / 32 rows' pages across K and V spilled 108-148 B beside the walk, and
// copy steps unrolled 4 deep spilled 28 B beside a block snippet's walk.
template <int kBN, int kRowBytes, int kElemBytes, bool kPadded>
__device__ __forceinline__ void gather_stage(const FwdParams& p, const SeqInfo& s, GatherTile t, const char* base,
                                             u32 page_stride, u32 row_stride, int col0, int real_end, u32 dst,
                                             int lane) {
  constexpr int kUnits = kRowBytes / 16;
  static_assert(kRowBytes % 128 == 0, "gather: whole 128-byte box rows");
  constexpr int kLanes = kUnits % 32 == 0 ? 32 : kUnits % 16 == 0 ? 16 : 8;
  constexpr int kRows = 32 / kLanes;  // rows a step
  constexpr int kSteps = kUnits / kLanes;
  const int r0 = lane / kLanes, c0 = lane % kLanes;
  auto entry = [&](int block) {  // the page of the block's row `lane` (0 past the keys: not copied)
    const int r = 32 * block + lane;
    return r < t.keys_left ? static_cast<u32>(__ldg(s.page_entry<true>(p, t.key0 + r))) : 0u;
  };
  u32 page = entry(0);
#pragma unroll 1
  for (int block = 0; block < kBN / 32; ++block) {
    const int mine = 32 * block + lane;
    const u32 in_page = mine < t.keys_left ? static_cast<u32>(page_row(p, t.key0 + mine)) : 0u;
    const unsigned long long off = static_cast<unsigned long long>(page) * page_stride +
                                   static_cast<unsigned long long>(in_page) * row_stride;
    const unsigned long long my_row = reinterpret_cast<unsigned long long>(base + off * kElemBytes + col0);
    if (block + 1 < kBN / 32) page = entry(block + 1);
#pragma unroll 2
    for (int step = 0; step < 32 / kRows; ++step) {
      const int r = 32 * block + step * kRows + r0;  // the tile row this lane copies
      const char* row = reinterpret_cast<const char*>(__shfl_sync(0xffffffffu, my_row, step * kRows + r0));
      const bool valid = r < t.keys_left;
      const u32 row_dst = dst + static_cast<u32>(r) * 128u;
#pragma unroll
      for (int k = 0; k < kSteps; ++k) {
        const int unit = k * kLanes + c0;
        const bool real = !kPadded || col0 + 16 * unit < real_end;
        const u32 to =
            row_dst + static_cast<u32>((unit / 8) * kBN * 128) + ((static_cast<u32>(unit % 8) ^ (r % 8u)) << 4);
        cp_async_16(to, real ? row + 16 * unit : row, valid && real);
      }
    }
  }
}

// One gathered stage of K or V (kV): kBoxes boxes of rows from element column col0 into dst, then
// the lane's arrival on the stage's full barrier, once its copies landed.
template <class T, int kBoxes, bool kV>
__device__ __forceinline__ void gather_kv(const FwdParams& p, const SeqInfo& s, GatherTile t, int col0,
                                          unsigned char* dst, u64* full) {
  constexpr int kElemBytes = sizeof(typename T::KVElement);
  constexpr bool kPadded = kV ? T::kDpV != T::kDepthV : T::kDp != T::kDepth;
  // Paged K / V: the KV head's offset is its only term besides the page and the row.
  const char* base = static_cast<const char*>(kV ? p.v : p.k) +
                     s.kv_head * (kV ? p.v_head_stride : p.k_head_stride) * kElemBytes;
  gather_stage<T::kBN, kBoxes * 128, kElemBytes, kPadded>(
      p, s, t, base, static_cast<u32>(kV ? p.v_batch_stride : p.k_batch_stride),
      static_cast<u32>(kV ? p.v_row_stride : p.k_row_stride), col0 * kElemBytes,
      (kV ? T::kDepthV : T::kDepth) * kElemBytes, smem_u32(dst), static_cast<int>(threadIdx.x % 32));
  cp_async_arrive_noinc(smem_u32(full));
}
// The end of the walk: no copy outlives the warp.
__device__ __forceinline__ void gather_finish() {
  cp_async_commit();
  cp_async_wait<0>();
}

}  // namespace sm100a
}  // namespace fa4
