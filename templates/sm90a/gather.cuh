// Gathered K / V stages of the sm90a producer: paged rows no TMA box takes (page sizes 1, 2, 4, 12,
// ...) copied row by row with cp.async by the gathering warps (GatherTile), their page numbers
// fetched a KV tile ahead (GatherState). The TMA loads are load.cuh's; the producer role that
// walks these stages is producer.cuh's.
#pragma once
#include "sm90a/load.cuh"

namespace fa4 {
namespace sm90a {

// ---- Gather: paged K / V rows by cp.async ----
// Page sizes whose gcd with kBN is not a multiple of 8 rows (1, 2, 4, 12, ...; launch: kv_box_rows
// 0) cannot come in TMA boxes, which must hold whole 8-row swizzle periods. The gathering warps'
// lanes then copy each tile row by row, 16 bytes a cp.async, into the layout TMA would have left
// (chunk c of tile row r: swizzle block c / 8, 16-byte unit (c % 8) ^ (r % 8)), so the consumers
// and the e4m3 converters read it unchanged. kLanesPerRow lanes take consecutive chunks of one row
// (reads of 128 bytes or more); each lane reads the page numbers of its warp's rows row0 + lane +
// 32 j from the page ring (GatherState) and the lanes copying a row take its offset by shuffle
// (copy), or where one warp gathers, lane pairs form their rows' addresses themselves (copy_own).
// Keys past the sequence are zero-filled (P V then never meets a NaN).
// Who gathers (kGatherWarps): decode kernels (one consumer warpgroup; the producer warpgroup at 56
// registers, abi.h producer_regs) without helper warps use all four producer warps, a quarter of
// each tile's rows each: one warp's cp.async in flight was the bound (page 1 at 0.66-0.76x page 16;
// four warps 0.79-1.01x, docs/PERF.md run 64); so do the prefill walks whose producer runs at 56
// registers (abi.h roomy_producer: head dim 512, and the persistent walks at padded depth 192 and
// 256), except the dynamic walk, whose claim one warp takes. Elsewhere the producer warp alone: at
// 24 registers (prefill) every variant that spread the rows spilled (run 61), and an FP8 KV cache's
// warps 1-3 are its converters.
template <class Config>
constexpr bool kWideGather =
    kDecodeProducer<Config> ||
    (abi::roomy_producer(Shape<Config>::kDp, Shape<Config>::kPersistent) && !Shape<Config>::kDynamic);
template <class Config>
constexpr int kGatherWarps = kWideGather<Config> && !Shape<Config>::kProducerHelpers ? 4 : 1;

// The gathering thread that loads Q (thread 0), written per lane where one warp gathers: the
// 24-register producers spilled on threadIdx.x == 0 (4 B at d512, O split).
template <class Config>
__device__ __forceinline__ bool gather_leader() {
  return kGatherWarps<Config> > 1 ? threadIdx.x == 0 : threadIdx.x % 32 == 0;
}

// Which rows of a KV tile a gathering warp copies, and whose page numbers each lane fetches and
// reads (GatherState, GatherTile): warp w's rows [w kWarpRows, (w + 1) kWarpRows), lane l's j-th
// row w kWarpRows + 32 j + l.
template <class Config>
struct GatherRows {
  static constexpr int kWarpRows = Shape<Config>::kBN / kGatherWarps<Config>;
  static constexpr int kLookups = (kWarpRows + 31) / 32;  // rows a lane looks up
  __device__ __forceinline__ static int warp() {           // 0 at compile time where one warp gathers
    return kGatherWarps<Config> > 1 ? static_cast<int>(warp_uniform(threadIdx.x / 32)) : 0;
  }
  __device__ __forceinline__ static int own_row(int j) {
    return warp() * kWarpRows + 32 * j + static_cast<int>(threadIdx.x % 32);
  }
  __device__ __forceinline__ static int row_end() { return (warp() + 1) * kWarpRows; }
  // f(r) for each of this lane's rows r.
  template <class F>
  __device__ __forceinline__ static void each_own_row(F f) {
#pragma unroll
    for (int j = 0; j < kLookups; ++j) {
      const int r = own_row(j);
      if (kWarpRows % 32 == 0 || r < row_end()) f(r);
    }
  }
};

// Lanes a row in copy_own (0: copy's row groups, their addresses taken by shuffle): 2 where one
// warp gathers at 56 registers (an FP8 KV cache's decode, whose warps 1-3 convert) over 128-byte
// swizzle rows. That warp alone is bound by its issue: pairs, 8 row addresses a lane and 4
// cp.async each, ran FP8 KV page-1 decode 18% faster than row groups (one lane a row, 32 lines a
// cp.async: 3.4x slower, run 103). Four warps are bound by the 128-byte lines each cp.async
// touches: pairs (16 lines) ran bf16 page 1 2.4x slower, 4 lanes (8 lines) 1.28x, 8 lanes 1.01x,
// 16 lanes (2 rows, 16 addresses a lane) 1.31x (docs/PERF.md run 102).
template <class Config>
constexpr int kOwnRowLanes =
    kWideGather<Config> && kGatherWarps<Config> == 1 && Shape<Config>::kKvRowBytes == 128 ? 2 : 0;

// Row groups a gathering warp issues at once (GatherTile): one warp issuing one shuffle, address
// and cp.async at a time is bound by their latencies. 4 at 56 registers (an FP8 KV decode's warp
// alone over 64-byte rows, copy_own taking the 128-byte ones; four warps under masks whose tile
// walk is a range), 2 in four warps beside a mask that skips tiles (4 spilled 20 B beside a block
// snippet's walk: page 1 5-7% slower at 2), 1 at 24 registers (the addresses were hoisted out of
// the walk and spilled).
template <class Config, class Mask>
constexpr int gather_unroll() {
  return !kWideGather<Config> ? 1 : kGatherWarps<Config> > 1 && !Mask::kContiguous ? 2 : 4;
}

// kChunks: swizzle blocks per row (K's, or V's); kRealBytes: the bytes of a row in global memory
// (depth 96: 192 of the 256 its two blocks hold; the rest is zero-filled, never read past the row,
// as TMA fills a box past the tensor); kUnroll: gather_unroll; kLean: lean_producer; kHint: the
// copies' L2 priority (load.cuh kv_l2_hint).
// Blocks of 128-byte rows (SW128: unit c % 8 of a row at c % 8 ^ r % 8), or of 64-byte rows (SW64, an e4m3 latent cache's 576
// bytes: unit c % 4 at c % 4 ^ (r / 2) % 4, 4 lanes a row, so a row group of 8 rows keeps each
// lane's swizzle term).
template <class Config, int kChunks, int kRealBytes, int kUnroll, bool kLean, L2Hint kHint>
struct GatherTile {
  using Sh = Shape<Config>;
  static constexpr int kRowBytes = Sh::kKvRowBytes;
  static constexpr int kUnits = kRowBytes / 16;  // 16-byte units of a block's row
  static_assert(kRowBytes == 128 || (kRowBytes == 64 && Sh::kKvFp8),
                "gather: SW128 K / V rows, or an FP8 KV cache's 64-byte rows (not FP8's at depth 64)");
  static constexpr int kRowChunks = kChunks * kUnits;  // 16-byte chunks of a row
  static constexpr int kLanesPerRow = kRowChunks % 32 == 0   ? 32
                                      : kRowChunks % 16 == 0 ? 16
                                      : kRowChunks % 8 == 0  ? 8
                                                             : 4;
  static constexpr int kRowsPerStep = 32 / kLanesPerRow;
  static_assert(kRowBytes == 128 || kRowsPerStep % 8 == 0, "gather: SW64 row groups keep each lane's swizzle");
  static_assert(kLanesPerRow % kUnits == 0, "gather: a lane's units are whole blocks apart");
  static_assert(kRealBytes % 16 == 0 && kRealBytes <= kRowChunks * 16, "gather: a row's real bytes are whole chunks");
  static constexpr int kSteps = kRowChunks / kLanesPerRow;  // cp.async per lane and row group
  static constexpr int kWarpRows = GatherRows<Config>::kWarpRows, kLookups = GatherRows<Config>::kLookups;
  static_assert(kWarpRows % kRowsPerStep == 0, "gather: whole row groups per warp");

  // Warp `warp`'s rows (GatherRows) of tile n of a sequence (s: its keys) from base (K or V at the sequence's KV
  // head; element strides page_stride, row_stride) into the stage at dst (1024-aligned); pages: the
  // tile's slot of the page ring. Each 32-row block's offsets are made just before its rows are copied, so a lane
  // holds one row offset at a time (the producer warpgroup runs at 24 registers in prefill).
  __device__ __forceinline__ static void copy(const FwdParams& p, const SeqInfo& s, const char* base,
                                              long long page_stride, long long row_stride, u32 dst, u32 pages, int n,
                                              int lane, int warp) {
    const int keys_left = min(s.seqlen_k - n * Sh::kBN, Sh::kBN);
    // The lane's chunk c = k kLanesPerRow + c0 of row r = g kRowsPerStep + r0: its swizzle unit
    // (c % 8) ^ (r % 8) = (c0 % 8) ^ r0 ^ (g kRowsPerStep % 8) (kRowsPerStep divides 8 and r0 <
    // kRowsPerStep, so the sum is an or), and every other term is a multiple of 128 bytes: one
    // per-lane address, then per g a xor of bits 4-6 and per (g, k) an immediate offset.
    const int r0 = lane / kLanesPerRow, c0 = lane % kLanesPerRow;
    const int swizzle = kRowBytes == 128 ? r0 : (r0 / 2) % 4;  // SW64: the same for every row group
    const u32 lane_dst =
        dst + (c0 / kUnits) * (Sh::kBN * kRowBytes) + r0 * kRowBytes + (((c0 % kUnits) ^ swizzle) << 4);
    const int row0 = warp * kWarpRows;
#pragma unroll 1
    for (int j = 0; j < kLookups; ++j) {
      // Row row0 + 32 j + lane's element offset (0 past the keys or the warp's rows: a mapped
      // address, zero bytes read); kLean: its address, made once.
      // (Written so that row0 0, one gathering warp, folds to the expressions the 24-register
      // producers compiled without spills.)
      const int mine = row0 + 32 * j + lane, key = n * Sh::kBN + mine;
      const bool have = (kWarpRows % 32 == 0 || 32 * j + lane < kWarpRows) && mine < keys_left;
      const long long page = have ? static_cast<int>(ld_shared_u32(pages + 4 * mine)) : 0;
      const long long off = have ? page * page_stride + (kLean ? page_row(p, key) : key % p.page_size) * row_stride : 0;
      const unsigned long long mine_row = reinterpret_cast<unsigned long long>(base + off * Sh::kKvElemBytes);
      const int end = (row0 + min(32 * j + 32, kWarpRows)) / kRowsPerStep;
#pragma unroll kUnroll
      for (int g = (row0 + 32 * j) / kRowsPerStep; g < end; ++g) {
        const int r = g * kRowsPerStep + r0;
        const char* row =
            kLean ? reinterpret_cast<const char*>(__shfl_sync(0xffffffffu, mine_row, static_cast<int>((r - row0) & 31)))
                  : base + __shfl_sync(0xffffffffu, off, (r - row0) % 32) * Sh::kKvElemBytes;
        const bool valid = r < keys_left;
        // Unsigned: g kRowsPerStep >= 0, so % 8 is a mask (the signed % kept a sign fix-up: the
        // unrolled page-1 loop ran 79 SASS instructions per 4 cp.async, 54 so; docs/PERF.md run 99).
        const u32 group_dst =
            (kRowBytes == 128 ? lane_dst ^ ((static_cast<u32>(g * kRowsPerStep) % 8u) << 4) : lane_dst) + g * kRowsPerStep * kRowBytes;
#pragma unroll 1
        for (int k = 0; k < kSteps; ++k) {
          const int chunk = k * kLanesPerRow + c0;
          const bool real = kRowChunks * 16 == kRealBytes || 16 * chunk < kRealBytes;  // padding: zeros
          cp_async_16<kHint>(group_dst + (k * kLanesPerRow / kUnits) * (Sh::kBN * kRowBytes), real ? row + 16 * chunk : row,
                      valid && real);
        }
      }
    }
  }

  // kOwnRowLanes's copy (L = kLanes lanes a row, R = 32 / L rows a cp.async): lane L i + h copies
  // chunks c = L k + h of rows r = row0 + R st + i, each row's address formed by the lane itself
  // from the page ring (no shuffle). Chunk c's unit (c % 8) ^ (r % 8) = t ^ u(k, st) with the
  // lane's t = (h % 8) ^ (i % 8) and u(k, st) = (L k % 8) ^ (R st % 8) a constant (h < L, i < R,
  // and L, R divide or are multiples of 8); rows are 128-byte aligned, so u is one xor of bits 4-6
  // and the block ((L k + h) / 8), the row step and the global chunk are immediates. Rows past the
  // keys read zero bytes from a mapped address (base).
  template <int kLanes>
  __device__ __forceinline__ static void copy_own(const FwdParams& p, const SeqInfo& s, const char* base,
                                                  long long page_stride, long long row_stride, u32 dst, u32 pages,
                                                  int n, int lane, int warp) {
    constexpr int R = 32 / kLanes;
    static_assert(kRowBytes == 128 && kRowChunks % kLanes == 0 && kWarpRows % R == 0 && (R % 8 == 0 || 8 % R == 0),
                  "copy_own: 128-byte rows, whole chunk and row steps");
    const int keys_left = min(s.seqlen_k - n * Sh::kBN, Sh::kBN);
    const int i = lane / kLanes, h = lane % kLanes, row0 = warp * kWarpRows;
    const u32 lane_dst = dst + static_cast<u32>((row0 + i) * kRowBytes + (h / 8) * (Sh::kBN * kRowBytes)) +
                         (static_cast<u32>((h % 8) ^ (i % 8)) << 4);
    // Strides below 2^31 elements (launch_args.cpp checks a gathered cache's), unsigned (pages, rows
    // and strides are not negative): a row's offset is two wide multiply-adds without sign fix-ups,
    // and the page size's power-of-two test is made once, not per row: about 10 instructions a row,
    // 36 before (FP8 KV page 1 4-11% faster, docs/PERF.md run 106).
    const u32 page_elems = static_cast<u32>(page_stride), row_elems = static_cast<u32>(row_stride);
    const u32 size = static_cast<u32>(p.page_size);
    auto rows = [&](auto in_page) {
#pragma unroll
      for (int st = 0; st < kWarpRows / R; ++st) {
        const int r = row0 + R * st + i;
        const bool valid = r < keys_left;
        const u32 page = valid ? ld_shared_u32(pages + 4 * r) : 0u;
        const u32 row_in_page = valid ? in_page(static_cast<u32>(n * Sh::kBN + r)) : 0u;
        const unsigned long long off = static_cast<unsigned long long>(page) * page_elems +
                                       static_cast<unsigned long long>(row_in_page) * row_elems;
        const char* row = base + off * Sh::kKvElemBytes + 16 * h;
#pragma unroll
        for (int k = 0; k < kRowChunks / kLanes; ++k) {
          const bool real = kRowChunks * 16 == kRealBytes || 16 * (kLanes * k + h) < kRealBytes;  // padding: zeros
          const u32 u = static_cast<u32>(((kLanes * k) % 8) ^ ((R * st) % 8)) << 4;
          cp_async_16<kHint>((lane_dst ^ u) + static_cast<u32>((kLanes * k / 8) * (Sh::kBN * kRowBytes) + R * st * kRowBytes),
                      row + 16 * kLanes * k, valid && real);
        }
      }
    };
    if ((size & (size - 1)) == 0)
      rows([=](u32 key) { return key & (size - 1); });
    else
      rows([=](u32 key) { return key % size; });
  }
};

// A gathering warp's state over one unit of work.
//   Arrivals on the stages' full barriers (32 a stage per gathering warp: kernel.cuh): each lane's
//   cp.async.mbarrier.arrive.noinc arrives once its copies into the stage have landed, so no lane
//   waits for its own copies and every free stage can be in flight, as with TMA. (The lanes used to
//   arrive themselves after a wait_group, one stage behind; alone, this change measured the same,
//   docs/PERF.md run 64: the bound was one warp's copies, kGatherWarps.) cp.async writes through
//   the generic proxy and wgmma reads through the async one, so the consumers fence after their
//   wait (consumer.cuh KvLanded).
//   The page ring (SmemLayout::kPageRingOffset): two slots of kBN page numbers, the current KV
//   tile's and the next one's. K(n)'s stage fetches the next tile's (cp.async, 4 bytes a row) as a
//   commit group of its own before K(n)'s rows; K(n + 1)'s stage waits for it, which leaves K(n)'s
//   and V(n)'s rows in flight (kGroupsAfterPages). Each lane fetches and reads the entries of its
//   own rows (GatherRows): its own wait_group makes them visible.
template <class Config>
struct GatherState {
  using Sh = Shape<Config>;
  static constexpr u32 kSlotBytes = 4 * Sh::kBN;
  // Commit groups after a tile's page numbers: its K stage's rows, and V's (latent KV: none).
  static constexpr int kGroupsAfterPages = Sh::kVInK ? 1 : 2;
  u32 ring;         // the page ring
  u32 slot = 0;     // the current KV tile's slot (0 or 1)

  // The unit's first KV tile n: its page numbers read and stored by plain loads (a wait_group would
  // also wait for the previous unit's copies still in flight: persistent walks).
  __device__ __forceinline__ GatherState(const FwdParams& p, const SeqInfo& s, unsigned char* smem, int n)
      : ring(smem_u32(smem) + SmemLayout<Config>::kPageRingOffset) {
    const u32 dst = ring;
    GatherRows<Config>::each_own_row(
        [&](int r) { st_shared_u32(dst + 4 * r, static_cast<u32>(*s.page_entry(p, n * Sh::kBN + r))); });
  }
  __device__ __forceinline__ u32 pages() const { return ring + slot * kSlotBytes; }
  __device__ __forceinline__ u32 next_pages() const { return ring + (slot ^ 1u) * kSlotBytes; }
  __device__ __forceinline__ void advance() { slot ^= 1u; }  // after the last stage of a KV tile

  // Tile n's page numbers into the slot at dst (cp.async; the caller commits). Rows past the table
  // (the tile's padding past the keys) fetch its last entry (SeqInfo::page_entry), which the copies
  // then skip.
  template <bool kLean>
  __device__ __forceinline__ static void fetch_pages(const FwdParams& p, const SeqInfo& s, u32 dst, int n) {
    GatherRows<Config>::each_own_row(
        [&](int r) { cp_async_4(dst + 4 * r, s.template page_entry<kLean>(p, n * Sh::kBN + r)); });
  }
  // Before K(n)'s stage reads the current slot: its page numbers, fetched one KV tile earlier, landed.
  __device__ __forceinline__ static void pages_landed() { cp_async_wait<kGroupsAfterPages>(); }

  __device__ __forceinline__ static void issued(u64* full) {  // after the copies into full's stage
    cp_async_commit();
    cp_async_arrive_noinc(smem_u32(full));
  }
  // The end of the walk: no copy outlives the warp.
  __device__ __forceinline__ static void finish() { cp_async_wait<0>(); }
};

// One gathered stage of KV tile n: K's ring, or V's (kV). K's stage also fetches the page numbers of
// the unit's next KV tile (next; none when !has_next) into the page ring (GatherState).
// The sequence (its page-table row, keys, KV head) is re-derived per stage from its batch and q
// head (opaque, so not held across the walk: the producer warpgroup runs at 24 registers in prefill).
template <class Config, class Mask, bool kV, class Ring>
__device__ __forceinline__ void gather_kv_stage(const FwdParams& p, const SeqInfo& seq, Ring& ring,
                                                unsigned char* ring_base, int n, bool has_next, int next,
                                                GatherState<Config>& gs) {
  using Sh = Shape<Config>;
  using L = SmemLayout<Config>;
  constexpr u32 kBytes = kV ? L::kVLoadStageBytes : L::kKVLoadStageBytes;
  auto st = ring.acquire();
  constexpr bool kLean = lean_producer<Config, Mask>();
  // The sequence (its page-table row, keys, KV head): the unit's (kLean), or re-derived per stage
  // from its batch and q head (opaque, so not held across the walk: the producer warpgroup runs at
  // 24 registers in prefill).
  const SeqInfo s =
      kLean ? seq : SeqInfo::make(p, static_cast<int>(opaque_u32(static_cast<u32>(seq.batch))), seq.q_head);
  if constexpr (!kV) {
    GatherState<Config>::pages_landed();
    // copy_own's lanes read other lanes' page numbers: landed for every lane, and the previous
    // tile's reads of the slot the next fetch overwrites are done.
    if constexpr (kOwnRowLanes<Config> > 0) __syncwarp();
    if (has_next) {
      GatherState<Config>::template fetch_pages<kLean>(p, s, gs.next_pages(), next);
      cp_async_commit();  // a group of their own (GatherState)
    }
  }
  // Paged K / V: the KV head's offset is its only term besides the page and the row.
  const char* base = static_cast<const char*>(kV ? p.v : p.k) +
                     s.kv_head * (kV ? p.v_head_stride : p.k_head_stride) * Sh::kKvElemBytes;
  using Tile = GatherTile<Config, kV ? Sh::kVChunks : Sh::kKvChunks, (kV ? Sh::kDepthV : Sh::kDepth) * Sh::kKvElemBytes,
                          gather_unroll<Config, Mask>(), kLean, kv_l2_hint<Config, Mask>()>;
  const long long page_stride = kV ? p.v_batch_stride : p.k_batch_stride;
  const long long row_stride = kV ? p.v_row_stride : p.k_row_stride;
  const u32 dst = smem_u32(ring_base) + st.index() * kBytes;
  if constexpr (kOwnRowLanes<Config> > 0)
    Tile::template copy_own<kOwnRowLanes<Config>>(p, s, base, page_stride, row_stride, dst, gs.pages(), n,
                                                  static_cast<int>(threadIdx.x % 32), GatherRows<Config>::warp());
  else
    Tile::copy(p, s, base, page_stride, row_stride, dst, gs.pages(), n, static_cast<int>(threadIdx.x % 32),
               GatherRows<Config>::warp());
  GatherState<Config>::issued(st.full_barrier());
}

}  // namespace sm90a
}  // namespace fa4
