// Producer warp of the sm90a kernel: one elected thread issues every TMA load (Q once, then
// K and V per KV tile through the two pipe::Producer rings), in the consumers' tile order.
#pragma once
#include "common/mbarrier.cuh"
#include "common/pipeline.cuh"
#include "common/smem.cuh"
#include "sm90a/smem_layout.cuh"
#include "sm90a/walk.cuh"

namespace fa4 {
namespace sm90a {

// Q of consumer warpgroup g into its Q tile (SmemLayout::q_offset): kQChunks boxes of
// [64 rows][128 bytes] on bar. Packed GQA: the 5-D map's box is 64 / kPack (rounded down) queries x
// kPack heads of 128 B (kQBoxRows rows in PackedRow order; padding rows past them are not loaded),
// addressed by the span's first query and the KV head (or, sliced, the slice).
template <class Config, class Mask>
__device__ __forceinline__ void load_q_wg(const TmaDescs& tma, const CtaWork<Config, Mask>& w, const TmaCoords& c,
                                          unsigned char* smem, u64* bar, int g) {
  using Sh = Shape<Config>;
  using L = SmemLayout<Config>;
#pragma unroll
  for (int ch = 0; ch < Sh::kQChunks; ++ch) {
    unsigned char* dst = smem + L::q_offset(g) + ch * (Sh::kWgRows * Sh::kRowBytes);
    if constexpr (Sh::kPack == 1)
      tma_load_4d(dst, &tma.q, bar, ch * Sh::kBlockElems, c.q_row0 + w.q_lo + g * Sh::kWgRows, c.q_head, c.q_batch);
    else
      tma_load_5d(dst, &tma.q, bar, ch * Sh::kBlockElems, 0, c.q_row0 + Sh::Rows::span_query(w.q_lo + g * Sh::kWgRows),
                  Sh::kPackSlices > 1 ? c.q_head / Sh::kPack : c.kv_head, c.q_batch);
  }
}

// The decode kernels' producer warpgroup (one consumer warpgroup; 56 registers, abi.h
// producer_regs): room for what prefill's 24-register producers cannot hold (a stage's page
// numbers, a unit's sequence).
template <class Config>
constexpr bool kDecodeProducer = abi::decode_producer(Shape<Config>::kFamily, Shape<Config>::kNumConsumerWGs,
                                                     Shape<Config>::kCtasPerSm, Shape<Config>::kDp, Shape<Config>::kBN);
// Where the producers' registers allow (the decode producer beside a tile walk that is a range;
// beside a block snippet's walk it spilled 20-56 B, and prefill's 24-register producers 4-24 B),
// paged loads take their page-table entries together and split rows by page_index / page_row
// (common/sequence.cuh), and gathering warps hold the unit's sequence across its stages:
//   - TMA boxes (load_kv_tile): the entries read together before the stage's boxes, not one before
//     each box (up to kBN / 8 global loads in a row per stage).
//   - Gathered rows (gather_kv_stage): each stage re-derived the sequence, reading its key count
//     from global memory, and divided twice per row lookup (~25 dependent instructions), both
//     before its copies: page 1 read 0.79-0.85x page 16's speed with them, 1.00-1.01x without.
//   (docs/PERF.md run 68.)
template <class Config, class Mask>
constexpr bool lean_producer() {
  return kDecodeProducer<Config> && Mask::kContiguous;
}

// The page numbers of one KV tile's TMA boxes, where the producer reads them together (kLean:
// lean_producer; otherwise empty, and load_kv_tile reads each box's entry before it). K(n) and V(n)
// share one read, and producer_unit reads tile n's after V(n-1)'s boxes are issued, before K(n)'s
// stage is acquired: the page-table reads' latency runs while the producer waits for a free stage,
// not between the free stage and its loads (docs/PERF.md run 87).
template <class Config, bool kLean>
struct TilePages {
  __device__ __forceinline__ static TilePages read(const FwdParams&, const TmaCoords&, int) { return {}; }
};
template <class Config>
struct TilePages<Config, true> {
  static constexpr int kBN = Shape<Config>::kBN;
  static constexpr int kMaxBoxes = kBN / 8;  // boxes hold whole 8-row swizzle periods
  int page[kMaxBoxes];
  __device__ __forceinline__ static TilePages read(const FwdParams& p, const TmaCoords& c, int n) {
    TilePages t;  // kLean implies kPaged: c.pages is the sequence's page-table row
#pragma unroll
    for (int i = 0; i < kMaxBoxes; ++i)
      if (i * p.kv_box_rows < kBN) t.page[i] = *page_table_entry<true>(p, c.pages, n * kBN + i * p.kv_box_rows);
    return t;
  }
};

// K or V tile n into one ring stage (dst: its first swizzle block; bar: its full barrier).
// Unpaged: one box of kBN rows per swizzle-row chunk of the depth. Paged: kBN / p.kv_box_rows boxes
// per chunk, box i at i * kv_box_rows rows (kv_box_rows % 8 == 0: whole 8-row swizzle periods, 1024
// bytes at SW128 and 512 at SW64, so the pattern is the one a single box would give), each from its
// own page. The bytes are the same either way, so the stage's expect_tx does not change. Which one: kPaged (per-CTA mode: the producer loop is chosen once per
// CTA on p.page_table), or, persistent, a uniform branch per tile on c.pages (a second copy of the
// persistent loop pushed the kBN 176 consumers into spills).
// kChunks: swizzle blocks per row (K's, or V's, which may be narrower: Shape::kVChunks).
// kLean (lean_producer): the boxes' pages come read (TilePages).
template <class Config, bool kPaged, int kChunks, bool kLean>
__device__ __forceinline__ void load_kv_tile(const FwdParams& p, const TmaDesc* map, const TmaCoords& c,
                                             unsigned char* dst, u64* bar, int n, const TilePages<Config, kLean>& pg) {
  using Sh = Shape<Config>;
  if constexpr (kPaged && kLean) {
#pragma unroll
    for (int i = 0; i < TilePages<Config, true>::kMaxBoxes; ++i) {
      const int r = i * p.kv_box_rows;
      if (r < Sh::kBN) {
#pragma unroll
        for (int ch = 0; ch < kChunks; ++ch)
          tma_load_4d(dst + ch * (Sh::kBN * Sh::kKvRowBytes) + r * Sh::kKvRowBytes, map, bar, ch * Sh::kKvBlockElems,
                      page_row(p, n * Sh::kBN + r), c.kv_head, pg.page[i]);
      }
    }
  } else if (kPaged || (Sh::kPersistent && Sh::kRuntimeVariants && c.pages)) {
    for (int r = 0; r < Sh::kBN; r += p.kv_box_rows) {
      const TmaCoords::Box b = c.kv_box(p, n * Sh::kBN + r);
#pragma unroll
      for (int ch = 0; ch < kChunks; ++ch)
        tma_load_4d(dst + ch * (Sh::kBN * Sh::kKvRowBytes) + r * Sh::kKvRowBytes, map, bar, ch * Sh::kKvBlockElems, b.row,
                    c.kv_head, b.batch);
    }
  } else {
    const int row = c.kv_row0 + n * Sh::kBN;
#pragma unroll
    for (int ch = 0; ch < kChunks; ++ch)
      tma_load_4d(dst + ch * (Sh::kBN * Sh::kKvRowBytes), map, bar, ch * Sh::kKvBlockElems, row, c.kv_head, c.kv_batch);
  }
}

// One TMA stage of KV tile n: K's ring, or V's (kV; narrower where V has a depth of its own).
template <class Config, bool kPaged, bool kV, bool kLean = false, class Ring>
__device__ __forceinline__ void load_kv_stage(const FwdParams& p, Ring& ring, const TmaDesc* map,
                                              unsigned char* ring_base, int n, const TmaCoords& c,
                                              const TilePages<Config, kLean>& pg = {}) {
  using Sh = Shape<Config>;
  using L = SmemLayout<Config>;
  constexpr u32 kBytes = kV ? L::kVLoadStageBytes : L::kKVLoadStageBytes;
  auto st = ring.acquire();
  st.expect_bytes(kBytes);
  load_kv_tile<Config, kPaged, kV ? Sh::kVChunks : Sh::kKvChunks, kLean>(p, map, c, ring_base + st.index() * kBytes,
                                                                         st.full_barrier(), n, pg);
}

// ---- Gather: paged K / V rows by cp.async ----
// Page sizes whose gcd with kBN is not a multiple of 8 rows (1, 2, 4, 12, ...; launch: kv_box_rows
// 0) cannot come in TMA boxes, which must hold whole 8-row swizzle periods. The gathering warps'
// lanes then copy each tile row by row, 16 bytes a cp.async, into the layout TMA would have left
// (chunk c of tile row r: swizzle block c / 8, 16-byte unit (c % 8) ^ (r % 8)), so the consumers
// and the e4m3 converters read it unchanged. kLanesPerRow lanes take consecutive chunks of one row
// (reads of 128 bytes or more); each lane reads the page numbers of its warp's rows row0 + lane +
// 32 j from the page ring (GatherState) and the lanes copying a row take its offset by shuffle.
// Keys past the sequence are zero-filled (P V then never meets a NaN).
// Who gathers (kGatherWarps): decode kernels (one consumer warpgroup; the producer warpgroup at 56
// registers, abi.h producer_regs) without helper warps use all four producer warps, a quarter of
// each tile's rows each: one warp's cp.async in flight was the bound (page 1 at 0.66-0.76x page 16;
// four warps 0.79-1.01x, docs/PERF.md run 64). Elsewhere the producer warp alone: at 24 registers
// (prefill) every variant that spread the rows spilled (run 61), and an FP8 KV cache's warps 1-3
// are its converters.
template <class Config>
constexpr bool kWideGather = kDecodeProducer<Config>;
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

// Row groups a gathering warp issues at once (GatherTile): one warp issuing one shuffle, address
// and cp.async at a time is bound by their latencies. 4 at 56 registers (the FP8 KV decode's warp
// alone; four warps under masks whose tile walk is a range), 2 in four warps beside a mask that
// skips tiles (4 spilled 20 B beside a block snippet's walk: page 1 5-7% slower at 2), 1 at 24
// registers (the addresses were hoisted out of the walk and spilled).
template <class Config, class Mask>
constexpr int gather_unroll() {
  return !kWideGather<Config> ? 1 : kGatherWarps<Config> > 1 && !Mask::kContiguous ? 2 : 4;
}

// kChunks: swizzle blocks per row (K's, or V's); kUnroll: gather_unroll; kLean: lean_producer.
// Blocks of 128-byte rows (SW128: unit c % 8 of a row at c % 8 ^ r % 8), or of 64-byte rows (SW64, an e4m3 latent cache's 576
// bytes: unit c % 4 at c % 4 ^ (r / 2) % 4, 4 lanes a row, so a row group of 8 rows keeps each
// lane's swizzle term).
template <class Config, int kChunks, int kUnroll, bool kLean>
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
        const u32 group_dst =
            (kRowBytes == 128 ? lane_dst ^ (((g * kRowsPerStep) % 8) << 4) : lane_dst) + g * kRowsPerStep * kRowBytes;
#pragma unroll 1
        for (int k = 0; k < kSteps; ++k)
          cp_async_16(group_dst + (k * kLanesPerRow / kUnits) * (Sh::kBN * kRowBytes), row + 16 * (k * kLanesPerRow + c0),
                      valid);
      }
    }
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
    if (has_next) {
      GatherState<Config>::template fetch_pages<kLean>(p, s, gs.next_pages(), next);
      cp_async_commit();  // a group of their own (GatherState)
    }
  }
  // Paged K / V: the KV head's offset is its only term besides the page and the row.
  const char* base = static_cast<const char*>(kV ? p.v : p.k) +
                     s.kv_head * (kV ? p.v_head_stride : p.k_head_stride) * Sh::kKvElemBytes;
  GatherTile<Config, kV ? Sh::kVChunks : Sh::kKvChunks, gather_unroll<Config, Mask>(), kLean>::copy(
      p, s, base, kV ? p.v_batch_stride : p.k_batch_stride, kV ? p.v_row_stride : p.k_row_stride,
      smem_u32(ring_base) + st.index() * kBytes, gs.pages(), n, static_cast<int>(threadIdx.x % 32),
      GatherRows<Config>::warp());
  GatherState<Config>::issued(st.full_barrier());
}

// The persistent walks' Q handshake of one tile with every consumer warpgroup (one Q tile per 64
// rows; O-split warpgroups share it): after the warpgroup's q_empty (its earlier epilogue is done
// with its Q region), kDynamic (DynamicTiles) writes the tile's unit to Barriers::unit[g], then
// arrive(g, q_full) loads Q with its bytes or arrives plainly; q_full's arrival (release) publishes
// the unit with the Q. kWholeWarp (gathering producers): every gathering thread waits, thread 0
// writes and arrives.
template <class Config, bool kWholeWarp, bool kDynamic, class Arrive>
__device__ __forceinline__ void hand_q(typename SmemLayout<Config>::Barriers* bars, u32 q_empty_phase,
                                       const HandedUnit& unit, Arrive&& arrive) {
#pragma unroll
  for (int g = 0; g < Shape<Config>::kRowWGs; ++g) {
    mbar_wait(&bars->q_empty[g], q_empty_phase);
    if (kWholeWarp && !gather_leader<Config>()) continue;
    if constexpr (kDynamic) bars->unit[g] = unit;
    arrive(g, &bars->q_full[g]);
  }
}

// Q of every consumer warpgroup for one tile (hand_q). load == false (tile without KV tiles or
// without Q rows): plain arrival on q_full instead of bytes, so q_full / q_empty keep one phase per
// tile on both sides.
template <class Config, class Mask, bool kWholeWarp = false, bool kDynamic = false>
__device__ __forceinline__ void load_q_persistent(const TmaDescs& tma, const CtaWork<Config, Mask>& w,
                                                  const TmaCoords& c, unsigned char* smem,
                                                  typename SmemLayout<Config>::Barriers* bars, u32 q_empty_phase,
                                                  bool load, HandedUnit unit = {}) {
  hand_q<Config, kWholeWarp, kDynamic>(bars, q_empty_phase, unit, [&](int g, u64* bar) {
    if (load) {
      mbar_expect_tx(bar, SmemLayout<Config>::kQTxBytes);
      load_q_wg<Config, Mask>(tma, w, c, smem, bar, g);
    } else {
      mbar_arrive(bar);
    }
  });
}

// The grid walk's one unit: loads nothing when the CTA has no KV tile (the consumers then skip Q
// as well), so no barrier is left waiting for bytes that never come (this includes a KV split
// whose share of the tiles is empty); else Q of every consumer warpgroup, then K(n), V(n) per KV
// tile. Rings live for this unit only. kGather (paged, pages TMA cannot take): the gathering warps
// (kGatherWarps) run this, thread 0 loads Q and every lane gathers its share of each K / V stage.
template <class Config, class Mask, bool kPaged, bool kGather = false>
__device__ __forceinline__ void producer_unit(const FwdParams& p, const TmaDescs& tma, const CtaWork<Config, Mask>& w,
                                              unsigned char* smem, typename SmemLayout<Config>::Barriers* bars) {
  using Sh = Shape<Config>;
  using L = SmemLayout<Config>;
  static_assert(kPaged || !kGather, "gathered K / V rows are paged");
  int n = w.first_tile();
  if (!w.has(n)) return;
  // Paged: the sequence's page-table row is re-derived here (opaque batch, so not CSE'd) instead of
  // taken from the CTA prologue's SeqInfo, which would hold it across the role split (it spills
  // there: the producer runs at 24 registers).
  const SeqInfo s =
      kPaged ? SeqInfo::make(p, static_cast<int>(opaque_u32(static_cast<u32>(w.seq.batch))), w.seq.q_head) : w.seq;
  const TmaCoords c = TmaCoords::make(p, s);

  // Q: one tile of 64 rows per consumer warpgroup, Dp/64 boxes of [64 rows][64 depth] each.
  if (!kGather || gather_leader<Config>()) {
#pragma unroll
    for (int g = 0; g < Sh::kRowWGs; ++g) {  // one Q tile per 64 rows (O-split warpgroups share it)
      u64* bar = &bars->q_full[g];
      mbar_expect_tx(bar, L::kQTxBytes);
      load_q_wg<Config, Mask>(tma, w, c, smem, bar, g);
    }
  }

  // An FP8 KV cache's K and V go to the e4m3 rings (the converters feed the consumers' rings).
  pipe::Producer<Sh::kKLoadStages> k_ring(L::k_load_barriers(bars));
  pipe::Producer<Sh::kStages> v_ring(L::v_load_barriers(bars));
  if constexpr (kGather) {
    GatherState<Config> gs(p, s, smem, n);
    for (int next; w.has(n); n = next, gs.advance()) {
      next = w.next_tile(n);
      if constexpr (Sh::kVInK && Sh::kKvFp8) {  // as below
        gather_kv_stage<Config, Mask, false>(p, s, k_ring, smem + L::kKLoadOffset, n, w.has(next), next, gs);
      } else if constexpr (Sh::kVInK) {
        auto vs = v_ring.acquire();
        gather_kv_stage<Config, Mask, false>(p, s, k_ring, smem + L::kKLoadOffset, n, w.has(next), next, gs);
        vs.arrive();
      } else {
        gather_kv_stage<Config, Mask, false>(p, s, k_ring, smem + L::kKLoadOffset, n, w.has(next), next, gs);
        gather_kv_stage<Config, Mask, true>(p, s, v_ring, smem + L::kVLoadOffset, n, false, 0, gs);
      }
    }
    GatherState<Config>::finish();
    return;
  }
  constexpr bool kLean = lean_producer<Config, Mask>() && kPaged;
  using Pages = TilePages<Config, kLean>;
  for (Pages pg = Pages::read(p, c, n); w.has(n);) {
    if constexpr (Sh::kVInK && Sh::kKvFp8) {
      // An e4m3 latent cache: the converters hand V(n) (K(n)'s 16-bit stage) to P V (convert_loop).
      load_kv_stage<Config, kPaged, false, kLean>(p, k_ring, &tma.k, smem + L::kKLoadOffset, n, c, pg);
    } else if constexpr (Sh::kVInK) {
      // Latent KV: V(n) is K(n)'s stage, so the slot is refilled only once P V(n - stages) is done
      // too (V's empty barrier). V's full barrier is a plain arrival: a consumer acquires V(n) only
      // after it waited for K(n)'s bytes.
      auto vs = v_ring.acquire();
      load_kv_stage<Config, kPaged, false, kLean>(p, k_ring, &tma.k, smem + L::kKLoadOffset, n, c, pg);
      vs.arrive();
    } else {
      // K tile n; consumers need K(n) before V(n-1) in the overlapped schedule, V(n) after.
      load_kv_stage<Config, kPaged, false, kLean>(p, k_ring, &tma.k, smem + L::kKLoadOffset, n, c, pg);
      load_kv_stage<Config, kPaged, true, kLean>(p, v_ring, &tma.v, smem + L::kVLoadOffset, n, c, pg);
    }
    n = w.next_tile(n);
    if (w.has(n)) pg = Pages::read(p, c, n);  // before the next stage is acquired (TilePages)
  }
}

// Called by exactly one thread (kGather: by the gathering warps); walks the consumers' tile walk (TileWalker), so both sides see
// the same tiles in the same order.
// Grid (GridTiles): its one unit, producer_unit; kPaged: paged K/V (a separate copy, chosen once
// per CTA). Persistent: tiles t = blockIdx.x + i * gridDim.x (PersistentTiles), or the CTA's stream-K
// segments (SegmentTiles; a "tile" below is then a segment); the K/V rings keep their index/phase
// across tiles. Per tile i of the sequence:
//   valid tile with KV tiles: K(first) [its ring slot only depends on earlier tiles' releases, so it
//   is issued before the wait on the previous epilogue], then per warpgroup g: wait q_empty[g]
//   (parity (i & 1) ^ 1; i = 0 passes at once on the fresh barrier), Q(g) on q_full[g]; then
//   V(first), K(n), V(n), ... in the consumers' order;
//   any other tile (no KV tile, or no Q rows): the q_empty waits + plain q_full arrivals only.
// So q_full[g] / q_empty[g] complete exactly one phase per tile i on both sides (paged K/V: a
// uniform branch per tile in load_kv_tile).
// kGather: every gathering lane runs this (thread 0 loads Q; the lanes gather K / V rows,
// GatherTile; their arrivals come from the copies themselves, GatherState).
template <class Config, class Mask, bool kPaged, class Tiles, bool kGather = false>
__device__ __forceinline__ void producer_loop(const FwdParams& p, const TmaDescs& tma, Tiles tiles, unsigned char* smem,
                                              typename SmemLayout<Config>::Barriers* bars) {
  using Sh = Shape<Config>;
  using L = SmemLayout<Config>;
  static_assert(!(Tiles::kPersistent && kPaged), "persistent walks branch per tile on c.pages (load_kv_tile)");
  if constexpr (!Tiles::kPersistent) {
    // The grid walk's one unit, without the loop. A one-trip loop over GridTiles here (the grid as
    // a one-unit case of the walk loop) once changed the SASS of the unmasked grid kernels (d128,
    // d256, softcap: the prologue scheduled differently); measured again for issue 55 (NVRTC 13,
    // tools/ptx_snapshot.py, its 25 sm_90a kernels): PTX different for window, chunked, doc_mask,
    // window_softcap_gqa and both packed decode presets, SASS identical for all of them. The loop
    // alone removes no branch (the persistent tile's Q handshake and carried rings still differ),
    // so it is kept out and the PTX stays as it was.
    producer_unit<Config, Mask, kPaged, kGather>(p, tma, tiles.template work<Sh::kBM, Sh::kBN, Sh::kPack, Sh::kBottomTiles, Sh::kWgRows>(p), smem, bars);
  } else {
    // An FP8 KV cache's K and V go to the e4m3 rings (the converters feed the consumers' rings).
    pipe::Producer<Sh::kKLoadStages> k_ring(L::k_load_barriers(bars));
    pipe::Producer<Sh::kStages> v_ring(L::v_load_barriers(bars));
    unsigned char* const k_dst = smem + L::kKLoadOffset;
    unsigned char* const v_dst = smem + L::kVLoadOffset;
    // FP8 (its producer warpgroup at 32 registers, kBM 192) and padded depths above 128 (24
    // registers, wider Q boxes): the unit count re-read per tile from an opaque zero rather than
    // held across the walk (4 B spilled at FP8 d128 causal and at d256 causal).
    constexpr bool kTightProducer = Sh::kFp8 || Sh::kDp > 128;
    constexpr bool kDynamic = Tiles::kDynamic;
    static_assert(!kDynamic || kGatherWarps<Config> == 1, "the dynamic walk's claim is shared within one warp");
    int claimed = 0;  // DynamicTiles: the unit after this one, claimed once this one's loads are issued
    for (; tiles.valid(p, kTightProducer ? static_cast<int>(opaque_u32(0u)) : 0); tiles.advance(claimed)) {
      const CtaWork<Config, Mask>& w = tiles.template work<Sh::kBM, Sh::kBN, Sh::kPack, Sh::kBottomTiles, Sh::kWgRows>(p);
      // The parity of tile i's q_empty wait: the previous tile's use of the Q region is done.
      const u32 q_empty_phase = (static_cast<u32>(tiles.iter) & 1u) ^ 1u;
      const TmaCoords c = TmaCoords::make(p, w.seq);
      HandedUnit unit{};
      if constexpr (kDynamic) unit = tiles.hand(w);
      int n = w.first_tile();  // none when !w.valid (empty KV range)
      if constexpr (kGather) {
        if (w.has(n)) {
          GatherState<Config> gs(p, w.seq, smem, n);
          int next = w.next_tile(n);
          gather_kv_stage<Config, Mask, false>(p, w.seq, k_ring, k_dst, n, w.has(next), next, gs);
          load_q_persistent<Config, Mask, true, kDynamic>(tma, w, c, smem, bars, q_empty_phase, true, unit);
          gather_kv_stage<Config, Mask, true>(p, w.seq, v_ring, v_dst, n, false, 0, gs);
          for (n = next, gs.advance(); w.has(n); n = next, gs.advance()) {
            next = w.next_tile(n);
            gather_kv_stage<Config, Mask, false>(p, w.seq, k_ring, k_dst, n, w.has(next), next, gs);
            gather_kv_stage<Config, Mask, true>(p, w.seq, v_ring, v_dst, n, false, 0, gs);
          }
        } else {
          load_q_persistent<Config, Mask, true, kDynamic>(tma, w, c, smem, bars, q_empty_phase, false, unit);
        }
      } else if (w.has(n)) {
        load_kv_stage<Config, false, false>(p, k_ring, &tma.k, k_dst, n, c);
        load_q_persistent<Config, Mask, false, kDynamic>(tma, w, c, smem, bars, q_empty_phase, true, unit);
        load_kv_stage<Config, false, true>(p, v_ring, &tma.v, v_dst, n, c);
        for (n = w.next_tile(n); w.has(n); n = w.next_tile(n)) {
          load_kv_stage<Config, false, false>(p, k_ring, &tma.k, k_dst, n, c);
          load_kv_stage<Config, false, true>(p, v_ring, &tma.v, v_dst, n, c);
        }
      } else {
        load_q_persistent<Config, Mask, false, kDynamic>(tma, w, c, smem, bars, q_empty_phase, false, unit);
      }
      // Claimed here, not as the tile starts: nothing holds it across the loads (the producer runs at
      // 24 registers), and its latency passes while the producer waits for the next free stage.
      if constexpr (kDynamic) claimed = tiles.template claim<Sh::kBM, kGather>(p);
    }
    // The dynamic walk's end: the unit past the last one, with a plain arrival on each q_full, ends
    // the consumers' walk (consumer_loop reads it as an invalid unit).
    if constexpr (kDynamic)
      hand_q<Config, kGather, true>(bars, (static_cast<u32>(tiles.iter) & 1u) ^ 1u, HandedUnit{tiles.t, 0, 0, 0},
                                    [](int, u64* bar) { mbar_arrive(bar); });
  }
}

// The producer of a launch that gathers its pages (gathers_kv): the gathering warps walk the CTA's
// tiles (w: a grid CTA's one unit), thread 0 loading Q, every lane its share of K / V.
template <class Config, class Mask>
__device__ __forceinline__ void gather_producer(const FwdParams& p, const TmaDescs& tma, const CtaWork<Config, Mask>& w,
                                                unsigned char* smem, typename SmemLayout<Config>::Barriers* bars) {
  using Sh = Shape<Config>;
  if constexpr (Sh::kGathers && Sh::kPersistent) {
    producer_loop<Config, Mask, false, TileWalker<Config, Mask>, true>(p, tma, TileWalker<Config, Mask>::make(), smem,
                                                                       bars);
    GatherState<Config>::finish();
  } else if constexpr (Sh::kGathers)
    producer_loop<Config, Mask, true, GridTiles<CtaWork<Config, Mask>>, true>(p, tma, GridTiles<CtaWork<Config, Mask>>{w, 0},
                                                                              smem, bars);
}

// ---- FP8: V transposed in shared memory ----
// FP8 wgmma reads B K-major only, and V arrives [keys][depth]. Three warps of the producer
// warpgroup (warps 1-3; warp 0 issues the TMA loads) copy each V stage to a Vt stage, [depth][keys]
// in SW128 blocks of [kDp rows][128 keys], through the rings v (TMA -> transposers) and vt
// (transposers -> consumers); kBN 160 fills a second block's first 32 keys (SmemLayout::
// kVtStageBytes). Within each 16-key chunk of a row the keys are permuted as pack_p
// (softmax.cuh) leaves P: logical key 4t + i is tile key 8(i/2) + 2t + i%2, so P V needs no shuffle.
// Warps 1-3 of the producer warpgroup: FP8's V transposers, or an FP8 KV cache's converters.
constexpr int kHelperThreads = 96;

__device__ __forceinline__ u32 byte_perm(u32 a, u32 b, u32 sel) {
  u32 r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
  return r;
}

// One V stage (src) -> one Vt stage (dst) by thread t of kHelperThreads, in units of 16 keys (key
// block kb) x 32 depths (depth group dg), a warp at a time: the V bytes are read as b16 pairs of
// depths by one transposing ldmatrix.x4 (matrices: keys 0-7 / 8-15 of the block x depths 0-15 /
// 16-31 of the group), so lane l holds keys 2t, 2t+1 (matrix 0, 2) and 8+2t, 9+2t (matrix 1, 3) of
// depths 2c, 2c+1 (t = l % 4, c = l / 4); four byte permutes make one word per depth of exactly
// pack_p's key order, and one stmatrix.x4 writes them as Vt rows: about 15 warp instructions per
// unit, against 32 for the 4-byte reads, byte transposes and per-read swizzle arithmetic this
// replaced, most of the FP8 kernel's integer instructions (docs/PERF.md runs 33-34; cuDNN's FP8
// kernel transposes with LDSM/STSM too).
// Conflicts: a read phase takes 8 rows (keys) of one 16-byte depth chunk, each at its own swizzled
// chunk (SW128: c ^ k % 8; SW64 rows: 64 bytes, c ^ (k / 2) % 4, half a row apart): all 32 banks.
// A write phase's 8 Vt rows are depths whose d % 8 differ (lanes c >= 4 store the odd depth of
// their pair in the even matrix: depths 0 2 4 6 9 11 13 15 and 1 3 5 7 8 10 12 14), so their
// chunks kb ^ d % 8 differ too.
template <class Config>
__device__ __forceinline__ void transpose_v(u32 src, u32 dst, int t) {
  using Sh = Shape<Config>;
  constexpr int kBN = Sh::kBN, kDp = Sh::kDp, kRow = Sh::kRowBytes;
  constexpr u32 kWarps = kHelperThreads / 32;
  static_assert(kBN % 32 == 0 && kDp % 32 == 0 && kHelperThreads % 32 == 0,
                "transpose_v: pairs of 16-key blocks, whole depth groups");
  static_assert(kRow == 128 || kRow == 64, "transpose_v: SW128 or SW64 V rows");
  // opaque: the lane's bases below are recomputed per stage (a few instructions) rather than hoisted
  // out of the walk and held across it, which the 32-register producer warpgroup cannot afford.
  const u32 lane = opaque_u32(static_cast<u32>(t)) % 32, m = lane / 8, j = lane % 8;  // row j of matrix m
  // Unit-invariant parts (unsigned: the unit's / and % are shifts). The read row: key 16 kb + 8 (m % 2)
  // + j, whose swizzle term (SW128 key % 8, SW64 (key / 2) % 4) does not depend on kb; its depth
  // chunk starts 16 (m / 2) into the group.
  const u32 key_in_block = 8 * (m % 2) + j, read_depth = 16 * (m / 2);
  const u32 swz = kRow == 128 ? key_in_block % 8 : (key_in_block / 2) % 4;
  const u32 read_base = src + key_in_block * kRow;
  // The write row (depth) in the group: matrix m holds the even depth of pair j for j < 4 (the odd
  // one for j >= 4) when m is even, the other one when m is odd; its d % 8 does not depend on dg.
  const u32 write_depth = 16 * (m / 2) + 2 * j + ((m % 2) ^ (j / 4));
  const u32 write_base = dst + write_depth * 128, write_chunk = write_depth % 8;
  // Byte selectors: depth 2c of the lane's pair c = l / 4 is bytes 0 2 4 6 of (matrix 0, matrix 1),
  // depth 2c + 1 bytes 1 3 5 7; lanes with c >= 4 put the odd depth in the even matrix.
  const bool odd_first = lane / 4 >= 4;
  const u32 sel_even_matrix = odd_first ? 0x7531u : 0x6420u, sel_odd_matrix = odd_first ? 0x6420u : 0x7531u;
  // A warp's item: depth group dg, key blocks kb0 and kb0 + 1 (items round-robin over the warps:
  // 6/5/5 at depth 128 and kBN 128). The second block's read is the first's plus an immediate; both
  // land in Vt block kb0 / 8 (128 keys), chunks kb0 % 8 and kb0 % 8 + 1.
  constexpr u32 kPairs = kBN / 32, kItems = kPairs * (kDp / 32);
#pragma unroll 1
  for (u32 item = static_cast<u32>(t) / 32; item < kItems; item += kWarps) {
    const u32 dg = item / kPairs, kb0 = 2 * (item % kPairs), d = 32 * dg + read_depth;
    const u32 read = read_base + 16 * kb0 * kRow + (d / kRow) * (kBN * kRow) + ((((d % kRow) / 16) ^ swz) << 4);
    const u32 write = write_base + 32 * dg * 128 + (kb0 / 8) * (kDp * 128);
    u32 r[2][4];
#pragma unroll
    for (u32 h = 0; h < 2; ++h) ldmatrix_x4_trans(r[h], read + 16 * kRow * h);
#pragma unroll
    for (u32 h = 0; h < 2; ++h) {
      const u32 w[4] = {byte_perm(r[h][0], r[h][1], sel_even_matrix), byte_perm(r[h][0], r[h][1], sel_odd_matrix),
                        byte_perm(r[h][2], r[h][3], sel_even_matrix), byte_perm(r[h][2], r[h][3], sel_odd_matrix)};
      stmatrix_x4(write + ((((kb0 % 8) + h) ^ write_chunk) << 4), w);
    }
  }
}

// The transposers' walk: the CTA's tile walk (TileWalker), one Vt stage per V stage the producer
// loads (producer_loop), so the V and Vt rings run on across a persistent CTA's tiles.
template <class Config, class Mask, class Tiles>
__device__ __forceinline__ void transpose_loop(const FwdParams& p, Tiles tiles, unsigned char* smem,
                                               typename SmemLayout<Config>::Barriers* bars, int t) {
  using Sh = Shape<Config>;
  using L = SmemLayout<Config>;
  static_assert(Sh::kFp8, "transpose_loop: FP8 kernels only");
  const u32 base = smem_u32(smem);
  pipe::Relay<Sh::kStages> v_to_vt(&bars->v, &bars->vt);
  auto transpose_stage = [&] {
    auto st = v_to_vt.acquire();
    transpose_v<Config>(base + L::kVOffset + st.index() * L::kVStageBytes,
                        base + L::kPVOffset + st.index() * L::kPVStageBytes, t);
    fence_proxy_async();  // this thread's Vt writes (and V reads) before the wgmma / TMA that follow
    st.publish();
  };  // release V: its TMA slot is free again
  // The walk's constants (unit count, grid size) re-read per tile from an opaque zero, not held
  // across it: this warpgroup runs at 32 registers at kBM 192.
  for (; tiles.valid(p, Tiles::loop_zero()); tiles.advance()) {
    const CtaWork<Config, Mask>& w =
        tiles.template work<Sh::kBM, Sh::kBN, Sh::kPack, Sh::kBottomTiles, Sh::kWgRows>(p, Tiles::loop_zero());
    for (int n = w.first_tile(); w.has(n); n = w.next_tile(n)) transpose_stage();  // none when !w.valid
  }
}

// ---- FP8 KV cache: e4m3 K / V converted to the 16-bit stages the consumers read ----
// The converters' passes (a pass: one 16-byte task of each converter thread): the reads of up to
// kBatch passes go out before their conversions. ld/st.shared are volatile with a memory clobber,
// so pass by pass each read's latency sat between one pass's stores and the next pass's
// conversions, the converters' top stall (docs/PERF.md run 46: e4m3-KV prefill +6-13%, decode
// +1-2%). live(i): pass i has a row; read(i): its 16-byte e4m3 source; write(i, out): stores its 16
// converted elements (out[0]: the first 8, out[1] the next 8, in MmaElement pairs).
template <class MmaElement, int kPasses, int kBatch, class Live, class Read, class Write>
__device__ __forceinline__ void convert_passes(Live live, Read read, Write write) {
#pragma unroll
  for (int i0 = 0; i0 < kPasses; i0 += kBatch) {
    u32 in[kBatch][4];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = i0 + b;
      if (i < kPasses && live(i)) ld_shared_v4(read(i), in[b]);
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = i0 + b;
      if (i >= kPasses || !live(i)) continue;
      u32 out[2][4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        out[j / 2][(j % 2) * 2] = e4m3x2_to<MmaElement>(static_cast<u16>(in[b][j] & 0xffffu));
        out[j / 2][(j % 2) * 2 + 1] = e4m3x2_to<MmaElement>(static_cast<u16>(in[b][j] >> 16));
      }
      write(i, out);
    }
  }
}

// One e4m3 stage (src: kKvChunks SW128 blocks of [kBN rows][128 keys' bytes]) -> one 16-bit stage
// (dst: kChunks SW128 blocks of [kBN rows][64 elements]), exactly (e4m3x2_to), by thread t of
// kHelperThreads. A task is 16 elements (group g) of one row: one 16-byte read, eight conversions,
// two 16-byte writes (elements 16g.. to block g / 4, chunks 2 (g % 4) and 2 (g % 4) + 1).
// A thread keeps its group for the whole stage: 16 consecutive threads take rows 2p and 2p + 1,
// lanes 0-3 / 4-7 of each 8-lane phase groups 0-3 of one row and 4-7 of the other (the next phase
// the other way round), so a phase reads 8 chunks whose bit 2 differs between the rows (the rows'
// swizzles differ in bit 0, the groups in bit 2) and writes 8 distinct chunks of the two blocks.
// A pass of the 96 threads covers 12 rows; 12 rows on, a row's swizzle term (row % 8) flips bit 2,
// so every address is a per-thread base, on odd passes with bit 6 flipped, plus an immediate (the
// per-task index arithmetic was ~40 of the loop's ~52 instructions per task before, docs/PERF.md
// run 35).
template <class Config>
__device__ __forceinline__ void convert_kv(u32 src, u32 dst, int t) {
  using Sh = Shape<Config>;
  constexpr int kGroups = Sh::kDp / 16;  // 16-element groups per row
  constexpr int kRowStep = 2 * (kHelperThreads / 16);  // rows per pass
  constexpr int kPasses = (Sh::kBN + kRowStep - 1) / kRowStep;
  static_assert(Sh::kKvFp8 && Sh::kDp == 128 && kGroups == 8, "convert_kv: e4m3 rows of one 128-byte block");
  static_assert(kHelperThreads % 16 == 0 && kRowStep % 8 == 4, "convert_kv: a pass moves a row's swizzle by 4");
  const int q = t % 16, half = q / 8, sub = (q / 4) % 2;
  const int r0 = 2 * (t / 16) + sub, g = q % 4 + 4 * (sub ^ half), c0 = 2 * (g % 4);
  const int sw0 = r0 % 8;
  // The swizzle is sw0 on even passes and sw0 ^ 4 on odd ones: chunk bit 2, address bit 6 (rows are
  // 128-byte aligned and a pass steps whole rows, so the step never reaches that bit).
  const u32 in_base = src + r0 * 128 + ((g ^ sw0) << 4);
  const u32 out_row = dst + (g / 4) * (Sh::kBN * 128) + r0 * 128;
  const u32 out_base[2] = {out_row + ((c0 ^ sw0) << 4), out_row + (((c0 + 1) ^ sw0) << 4)};
  // A pass's rows exist unless it is the last one of a kBN that is no multiple of kRowStep.
  const auto live = [&](int i) { return Sh::kBN % kRowStep == 0 || i < kPasses - 1 || r0 + kRowStep * i < Sh::kBN; };
  // Reads in flight (convert_passes): 6 passes of 4 registers fit the 56-register producer
  // warpgroup of the grid walk; the persistent walk's state leaves room for 3 (6 spilled 28 B there,
  // and 64 producer registers exceed the launch's pool: Shape::kLaunchRegs, docs/PERF.md runs 46-47).
  constexpr int kMaxBatch = Sh::kPersistent ? 3 : 6;
  constexpr int kBatch = kPasses < kMaxBatch ? kPasses : kMaxBatch;
  convert_passes<typename Sh::MmaElement, kPasses, kBatch>(
      live, [&](int i) { return (in_base ^ ((i % 2) << 6)) + kRowStep * i * 128; },
      [&](int i, const u32(&out)[2][4]) {  // [elements 16g..16g+7, 16g+8..16g+15]
        const u32 step = kRowStep * i * 128, odd = (i % 2) << 6;
        st_shared_v4((out_base[0] ^ odd) + step, out[0]);
        st_shared_v4((out_base[1] ^ odd) + step, out[1]);
      });
}

constexpr int kRows64Step = kHelperThreads / 4;  // rows per pass of convert_kv_rows64: 24

// An e4m3 latent cache's per-page factors (FwdParams::page_descale) for the rows one converter
// thread t writes in one KV tile: pass i of convert_kv_rows64 writes tile row (t / 4 + 24 i) % kBN,
// one of the kBN / 8 rows t / 4 % 8 + 8 j, whose page's factor is h2[i % (kBN / 8)] (an fp16 pair,
// the MMAs' type). 1 where the launch has no factors. Loaded one KV tile ahead (convert_loop), so
// the page-table and factor reads are in flight while the converters work on the tile before.
template <class Config>
struct PageFactors {
  static constexpr int kClasses = Shape<Config>::kBN / 8;
  static_assert(kRows64Step % 8 == 0, "PageFactors: a pass keeps each row's class");
  u32 h2[kClasses];

  __device__ __forceinline__ static PageFactors load(const FwdParams& p, const SeqInfo& s, int n, int t) {
    PageFactors f;
    const int row = t / 4;
#pragma unroll
    for (int m = 0; m < kClasses; ++m) {
      f.h2[m] = 0x3c003c00u;  // fp16 1.0 twice
      if (p.page_descale && s.pages) {  // uniform
        const int r = row % 8 + 8 * ((row / 8 + (kRows64Step / 8) * m) % kClasses);
        const float x = p.page_descale[s.page_of(p, n * Shape<Config>::kBN + r)];
        asm("cvt.rn.f16x2.f32 %0, %1, %1;" : "=r"(f.h2[m]) : "f"(x));
      }
    }
    return f;
  }
};

// convert_kv for MLA's e4m3 latent rows (Shape::kKvRowBytes 64: 576 bytes are no whole 128-byte
// rows), each element times its page's factor (PageFactors, in fp16): src is kKvChunks SW64 blocks of [kBN rows][64 e4m3] (16-byte unit u of row r at unit
// u ^ (r / 2) % 4), dst kChunks SW128 blocks of [kBN rows][64 16-bit elements] (unit c at c ^ r % 8).
// Both stages list their rows block after block, so row R = b kBN + r of the stage is at R x 64
// (src) and R x 128 (dst). A task is 16 elements (unit u = t % 4 of row R): one 16-byte read, eight
// conversions, two 16-byte writes (units 2u, 2u + 1 of the same row). Thread t takes rows t / 4 +
// 24 k: 24 rows on, both swizzle terms repeat (r / 2 % 4 and r % 8, also across a block boundary:
// kBN is a multiple of 8), so every address is a per-thread base plus an immediate (index
// arithmetic per task spilled the 56-register producer warpgroup: 152 B). A phase of 8 threads
// reads 128 contiguous bytes, and its writes land in 8 distinct units (rows r and r + 1 differ in
// bit 0 of their swizzle, 2u never has it).
template <class Config>
__device__ __forceinline__ void convert_kv_rows64(u32 src, u32 dst, int t, const PageFactors<Config>& factors) {
  using Sh = Shape<Config>;
  static_assert(DTypeTraits<typename Sh::MmaElement>::kIsBf16 == false, "convert_kv_rows64: fp16 MMAs (the factors' type)");
  constexpr int kRows = Sh::kKvChunks * Sh::kBN;       // rows of the stage, block after block
  constexpr int kRowStep = kRows64Step;
  constexpr int kPasses = (kRows + kRowStep - 1) / kRowStep;
  constexpr int kBatch = 4;  // reads in flight before their conversions (16 of the 56 registers)
  static_assert(Sh::kKvFp8 && Sh::kKvRowBytes == 64 && Sh::kRowBytes == 128 && Sh::kKvChunks == Sh::kChunks,
                "convert_kv_rows64: 64-byte e4m3 rows into 128-byte 16-bit rows, block for block");
  static_assert(kRowStep % 8 == 0 && Sh::kBN % 8 == 0, "convert_kv_rows64: a pass keeps each row's swizzle");
  const int row = t / 4, u = t % 4;
  const u32 in_base = src + row * 64 + ((u ^ ((row / 2) % 4)) << 4);
  const u32 out_base[2] = {dst + row * 128 + (((2 * u) ^ (row % 8)) << 4),
                           dst + row * 128 + (((2 * u + 1) ^ (row % 8)) << 4)};
  const auto live = [&](int i) { return kRows % kRowStep == 0 || i < kPasses - 1 || row + kRowStep * i < kRows; };
  convert_passes<typename Sh::MmaElement, kPasses, kBatch>(
      live, [&](int i) { return in_base + kRowStep * i * 64; },
      [&](int i, const u32(&converted)[2][4]) {  // [elements 16u..16u+7, 16u+8..16u+15]
        // The row's page factor (exact for 1; else one fp16 rounding of the factor and one of the product).
        const u32 f = factors.h2[i % PageFactors<Config>::kClasses];
        u32 out[2][4];
#pragma unroll
        for (int j = 0; j < 8; ++j)
          asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(out[j / 4][j % 4]) : "r"(converted[j / 4][j % 4]), "r"(f));
        st_shared_v4(out_base[0] + kRowStep * i * 128, out[0]);
        st_shared_v4(out_base[1] + kRowStep * i * 128, out[1]);
      });
}

// The converters of an FP8 KV cache: per KV tile, K's e4m3 stage TMA filled -> the consumers'
// 16-bit K stage, then V's. Each e4m3 ring and its 16-bit ring move in lockstep (one stage each per
// K or V tile), so one Relay serves both, as for FP8's V transposers. Every converter thread
// releases the e4m3 stage it read (the empty barriers count 96): a gathered stage's next cp.async
// writes then follow each thread's own reads (compute-sanitizer's racecheck flagged the
// one-lane-per-warp release there, which TMA's writes never meet).
template <class Config>
struct KvConverter {
  using L = SmemLayout<Config>;
  pipe::Relay<Shape<Config>::kStages, pipe::ArriveEachThread> k, v;

  __device__ __forceinline__ explicit KvConverter(typename L::Barriers* bars)
      : k(&bars->k_load, &bars->k), v(&bars->v_load, &bars->v) {}
  __device__ __forceinline__ void tile(u32 base, int t) {
    stage(k, base + L::kKLoadOffset, base + L::kKOffset, t);
    stage(v, base + L::kVLoadOffset, base + L::kVOffset, t);
  }
  __device__ __forceinline__ static void stage(pipe::Relay<Shape<Config>::kStages, pipe::ArriveEachThread>& relay,
                                               u32 src_ring, u32 dst_ring, int t) {
    auto st = relay.acquire();
    convert_kv<Config>(src_ring + st.index() * L::kKVLoadStageBytes, dst_ring + st.index() * L::kKVStageBytes, t);
    fence_proxy_async();  // this thread's writes (and reads) before the wgmma / TMA that follow
    st.publish();
  }  // release the e4m3 stage: its TMA slot is free again
};

// An e4m3 latent cache (MLA): the e4m3 ring (Shape::kKLoadStages deep) feeds the 16-bit K ring
// (kStages), whose stage P V also reads as V. The rings no longer move in lockstep, and V's readers
// are this stage's second consumers: a converter thread takes a 16-bit stage once S = Q K^T (K's
// empty barrier) and P V (V's) have both released it, and hands it to both (K's and V's full
// barriers; the producer loads no V).
template <class Config>
struct LatentConverter {
  using Sh = Shape<Config>;
  using L = SmemLayout<Config>;
  pipe::Consumer<Sh::kKLoadStages, pipe::ArriveEachThread> in;
  pipe::Producer<Sh::kStages> k_out, v_out;

  __device__ __forceinline__ explicit LatentConverter(typename L::Barriers* bars)
      : in(&bars->k_load), k_out(&bars->k), v_out(&bars->v) {}
  __device__ __forceinline__ void tile(u32 base, int t, const PageFactors<Config>& factors) {
    auto src = in.acquire();
    auto ks = k_out.acquire();
    auto vs = v_out.acquire();
    convert_kv_rows64<Config>(base + L::kKLoadOffset + src.index() * L::kKVLoadStageBytes,
                              base + L::kKOffset + ks.index() * L::kKVStageBytes, t, factors);
    fence_proxy_async();  // this thread's writes (and reads) before the wgmma / TMA that follow
    ks.arrive();
    vs.arrive();
  }  // release the e4m3 stage (every converter thread)
};

// The converters' walk: the CTA's tile walk (TileWalker, or a grid CTA's one unit), a tile (K(n), then
// V(n); latent: K(n)) per KV tile the producer loads (producer_unit, producer_loop), so the rings run on across a
// persistent CTA's tiles, as the FP8 V transposers' (transpose_loop).
template <class Config, class Mask, class Tiles>
__device__ __forceinline__ void convert_loop(const FwdParams& p, Tiles tiles, unsigned char* smem,
                                             typename SmemLayout<Config>::Barriers* bars, int t) {
  using Sh = Shape<Config>;
  using L = SmemLayout<Config>;
  static_assert(Sh::kKvFp8, "convert_loop: FP8 KV caches only");
  const u32 base = smem_u32(smem);
  typename IfT<Sh::kVInK, LatentConverter<Config>, KvConverter<Config>>::type converter(bars);
  // The walk's constants re-read per tile from an opaque zero, as the transposers' (transpose_loop):
  // held across it, they spilled the 56-register warpgroup (28 B at causal d128).
  for (; tiles.valid(p, Tiles::loop_zero()); tiles.advance()) {
    const CtaWork<Config, Mask>& w =
        tiles.template work<Sh::kBM, Sh::kBN, Sh::kPack, Sh::kBottomTiles, Sh::kWgRows>(p, Tiles::loop_zero());
    if constexpr (Sh::kVInK) {  // the tile's page factors, read one tile ahead (PageFactors)
      int n = w.first_tile();
      PageFactors<Config> f = PageFactors<Config>::load(p, w.seq, n, t);
      for (int next; w.has(n); n = next) {
        next = w.next_tile(n);
        const PageFactors<Config> f_next = w.has(next) ? PageFactors<Config>::load(p, w.seq, next, t) : f;
        converter.tile(base, t, f);
        f = f_next;
      }
    } else {
      for (int n = w.first_tile(); w.has(n); n = w.next_tile(n)) converter.tile(base, t);
    }
  }
}

}  // namespace sm90a
}  // namespace fa4
