// TMA loads of the sm90a producer: a consumer warpgroup's Q tile, and one K or V stage (one box per
// depth chunk, or per page), each issued by one elected thread; and which producers are lean
// (lean_producer). The producer role that walks them: producer.cuh; gathered stages: gather.cuh.
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
                                                     Shape<Config>::kCtasPerSm, Shape<Config>::kDp, Shape<Config>::kBN,
                                                     Shape<Config>::kPersistent);
// The L2 priority of K/V loads (TMA boxes here, gathered rows in gather.cuh): EVICT_FIRST in the
// decode kernels and MLA's (latent K/V: kVInK), whose CTAs read their KV head's keys once (a packed
// tile holds the group's rows; MLA's head tiles of one sequence run side by side, reading a stage at
// about the same time), so those lines need not outlive the read and push out others. H200: paged
// decode 32 x 4k keys 8/1 heads 4-5% faster, MLA 16 heads 3% (docs/PERF.md run 116). Prefill's Q
// tiles re-read K/V from L2 over the launch, so its loads keep no hint; neither do masks whose walk
// classifies tiles (block snippets, !kContiguous): the policy's register pair spilled their decode
// producer (8 B at 56 registers).
template <class Config, class Mask>
constexpr L2Hint kv_l2_hint() {
  return Mask::kContiguous && (kDecodeProducer<Config> || Shape<Config>::kVInK) ? L2Hint::kEvictFirst
                                                                                 : L2Hint::kNone;
}
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
// share one read, made a tile ahead (PageQueue).
template <class Config, bool kLean>
struct TilePages {
  __device__ __forceinline__ static TilePages read(const FwdParams&, const TmaCoords&, int) { return {}; }
};
template <class Config>
struct TilePages<Config, true> {
  static constexpr int kBN = Shape<Config>::kBN;
  static constexpr int kMaxBoxes = kBN / 8;  // boxes hold whole 8-row swizzle periods
  int page[kMaxBoxes];
  // Every box's entry index first (PagedBoxes: one division, then a step per box), then every read
  // back to back, so the reads are in flight together. Read one by one under the box count's branch
  // (if (i * kv_box_rows < kBN)), each waited for before the next was issued (its value moved to a
  // uniform register at once: NVRTC 13, sm_90a): up to kBN / 8 load latencies a tile. H100, page 16,
  // one process (docs/PERF.md run 136): batch-1 decode 1.07x as fast, the continuous-batching steps
  // 1.02x, 32 x 4k decode 1.00-1.01x. Boxes past the tile (kv_box_rows above 8) read an entry they
  // do not use (clamped: page_table_slot).
  __device__ __forceinline__ static TilePages read(const FwdParams& p, const TmaCoords& c, int n) {
    int index[kMaxBoxes];  // kLean implies kPaged: c.pages is the sequence's page-table row
    TmaCoords::PagedBoxes box(p, n * kBN);
#pragma unroll
    for (int i = 0; i < kMaxBoxes; ++i, box.next(p)) index[i] = box.index;
    TilePages t;
#pragma unroll
    for (int i = 0; i < kMaxBoxes; ++i) t.page[i] = *page_table_slot(p, c.pages, index[i]);
    return t;
  }
};

// The lean producer's page numbers of its current KV tile (now) and of the tile after it (ahead):
// tile n+1's entries are read as tile n's loads are issued, so their latency runs under a whole
// tile's loads. Read later (after V(n)'s boxes, just before K(n+1)'s stage is acquired, run 87), a
// stage that came free at once waited on them. H100, page 16, one process, against that order
// (docs/PERF.md run 134): the continuous-batching steps 1.05-1.07x as fast (12/2, 14/2, 32/8 at
// d128 and d64), decode rows 0.98-1.00x (8/1 at 32 x 4k keys 0.98). The first tile's K loads still
// wait for both tiles' entries (TilePages::read issues them together since run 136). No registers
// spilled (56 at kBN 64 and 128, head dims 64-256, groups 2-16, FP8 KV).
// Without kLean: empty, and the loop's code as before.
template <class Config, bool kLean>
struct PageQueue {
  TilePages<Config, kLean> now, ahead;
  // Tile n (the walk's first) and the tile after it.
  template <class Work>
  __device__ __forceinline__ static PageQueue make(const FwdParams& p, const TmaCoords& c, const Work& w, int n) {
    PageQueue q{};
    if constexpr (kLean) {
      q.now = TilePages<Config, true>::read(p, c, n);
      q.advance_ahead(p, c, w, n);
    }
    return q;
  }
  // The walk moved on to tile n (w.has(n)): its entries become current, the next tile's are read.
  template <class Work>
  __device__ __forceinline__ void advance(const FwdParams& p, const TmaCoords& c, const Work& w, int n) {
    if constexpr (kLean) {
      now = ahead;
      advance_ahead(p, c, w, n);
    }
  }

 private:
  template <class Work>
  __device__ __forceinline__ void advance_ahead(const FwdParams& p, const TmaCoords& c, const Work& w, int n) {
    const int next = w.next_tile(n);
    if (w.has(next)) ahead = TilePages<Config, true>::read(p, c, next);
  }
};

// The barriers one stage's boxes complete: its full barrier, or, for a K stage in parts
// (Shape::kKParts > 1, kPer swizzle blocks a part), part ch / kPer's (Barriers::k_part past part 0).
template <int kPer>
struct ChunkBars {
  u64* full;
  u64* rest;  // the stage's parts 1 .. (kPer > 0)
  __device__ __forceinline__ u64* of(int ch) const { return kPer == 0 || ch < kPer ? full : rest + (ch / kPer - 1); }
};

// Paged, each page one box (page sizes 16, 32 and 64 where kBN is a multiple: 16 is vLLM's
// default): tile n's boxes are entries n * kBN / kPage onward of the sequence's page-table row
// (whole_page_index), each from its page's row 0: no division and no per-box chain (PagedBoxes'
// walk, a read and ~20 uniform instructions on each box's chain, held page 16 at 0.78-0.90x
// contiguous: docs/PERF.md runs 127-128). K(n)'s stage fetches the tile's entries together into the
// page ring (cp.async, one wait), V(n)'s reads them again; each box reads its entry from shared
// memory just before it, so the 24-register producers hold one page number at a time (the entries
// held in registers spilled 28-40 B there, run 128). Kernels without the page ring (the FP8 family,
// MLA's persistent walk) hold them in registers where the producer has 32 or more; K stages in parts
// and the rest keep PagedBoxes' walk. Order as the lean path's. Returns whether it loaded the tile
// (p.page_size is kPage and kBN a multiple).
template <int kPage, class Config, bool kV, int kChunks, L2Hint kHint, int kPer>
__device__ __forceinline__ bool load_whole_pages(const FwdParams& p, const TmaDesc* map, const TmaCoords& c,
                                                 unsigned char* dst, ChunkBars<kPer> bars, int n) {
  using Sh = Shape<Config>;
  // Staged: a K stage in parts re-reads each entry per part (MLA's d576 spilled 12 B at 24).
  constexpr bool kStaged = Sh::kGathers && kPer == 0, kInRegisters = !Sh::kGathers && Sh::kProducerRegs >= 32;
  if constexpr (Sh::kBN % kPage != 0 || !(kStaged || kInRegisters)) {
    return false;
  } else {
    if (p.page_size != kPage) return false;
    using Pages = WholePages<kPage, Sh::kBN>;
    constexpr int kPages = Pages::kCount;
    constexpr int kOuter = kPer > 0 ? kChunks : kPages, kInner = kPer > 0 ? kPages : kChunks;
    auto issue = [&](auto&& page_of) {
#pragma unroll
      for (int x = 0; x < kOuter; ++x)
#pragma unroll
        for (int y = 0; y < kInner; ++y) {
          const int i = kPer > 0 ? y : x, ch = kPer > 0 ? x : y;
          tma_load_4d<kHint>(dst + ch * (Sh::kBN * Sh::kKvRowBytes) + i * kPage * Sh::kKvRowBytes, map, bars.of(ch),
                             ch * Sh::kKvBlockElems, 0, c.kv_head, page_of(i));
        }
    };
    if constexpr (kStaged) {  // the page ring (abi.h page_ring_bytes) is this kernel's
      extern __shared__ __align__(1024) unsigned char fa4_smem[];
      const u32 ring = smem_u32(fa4_smem) + SmemLayout<Config>::kPageRingOffset;
      if constexpr (!kV || Sh::kVInK) {
#pragma unroll
        for (int i = 0; i < kPages; ++i) cp_async_4(ring + 4 * i, Pages::slot(p, c.pages, n, i));
        cp_async_commit();
        cp_async_wait<0>();
      }
      issue([&](int i) { return static_cast<int>(ld_shared_u32(ring + 4 * i)); });
    } else {
      int page[kPages];
#pragma unroll
      for (int i = 0; i < kPages; ++i) page[i] = *Pages::slot(p, c.pages, n, i);
      issue([&](int i) { return page[i]; });
    }
    return true;
  }
}

// K or V tile n into one ring stage (dst: its first swizzle block; bars: its full barrier, or its parts').
// Unpaged: one box of kBN rows per swizzle-row chunk of the depth. Paged: kBN / p.kv_box_rows boxes
// per chunk, box i at i * kv_box_rows rows (kv_box_rows % 8 == 0: whole 8-row swizzle periods, 1024
// bytes at SW128 and 512 at SW64, so the pattern is the one a single box would give), each from its
// own page. The bytes are the same either way, so the stage's expect_tx does not change. Which one: kPaged (per-CTA mode: the producer loop is chosen once per
// CTA on p.page_table), or, persistent, a uniform branch per tile on c.pages (a second copy of the
// persistent loop pushed the kBN 176 consumers into spills).
// kChunks: swizzle blocks per row (K's, or V's, which may be narrower: Shape::kVChunks).
// kLean (lean_producer): the boxes' pages come read (TilePages); a stage in parts issues them part
// by part (every page's blocks of part 0 first).
template <class Config, bool kPaged, bool kV, int kChunks, bool kLean, L2Hint kHint, int kPer>
__device__ __forceinline__ void load_kv_tile(const FwdParams& p, const TmaDesc* map, const TmaCoords& c,
                                             unsigned char* dst, ChunkBars<kPer> bars, int n,
                                             const TilePages<Config, kLean>& pg) {
  using Sh = Shape<Config>;
  if constexpr (kPaged && kLean) {
    constexpr int kBoxes = TilePages<Config, true>::kMaxBoxes;
    constexpr int kOuter = kPer > 0 ? kChunks : kBoxes, kInner = kPer > 0 ? kBoxes : kChunks;
#pragma unroll
    for (int x = 0; x < kOuter; ++x) {
      if (kPer == 0 && x * p.kv_box_rows >= Sh::kBN) continue;  // page-major: box x past the tile
#pragma unroll
      for (int y = 0; y < kInner; ++y) {
        const int i = kPer > 0 ? y : x, ch = kPer > 0 ? x : y, r = i * p.kv_box_rows;
        if (kPer == 0 || r < Sh::kBN)
          tma_load_4d<kHint>(dst + ch * (Sh::kBN * Sh::kKvRowBytes) + r * Sh::kKvRowBytes, map, bars.of(ch),
                      ch * Sh::kKvBlockElems, page_row(p, n * Sh::kBN + r), c.kv_head, pg.page[i]);
      }
    }
  } else if (kPaged || (Sh::kPersistent && Sh::kRuntimeVariants && c.pages)) {
    if (load_whole_pages<16, Config, kV, kChunks, kHint>(p, map, c, dst, bars, n) ||
        load_whole_pages<32, Config, kV, kChunks, kHint>(p, map, c, dst, bars, n) ||
        load_whole_pages<64, Config, kV, kChunks, kHint>(p, map, c, dst, bars, n))
      return;
    TmaCoords::PagedBoxes box(p, n * Sh::kBN);
    for (int r = 0; r < Sh::kBN; r += p.kv_box_rows, box.next(p)) {
      const int page = box.page(p, c.pages);
#pragma unroll
      for (int ch = 0; ch < kChunks; ++ch)
        tma_load_4d<kHint>(dst + ch * (Sh::kBN * Sh::kKvRowBytes) + r * Sh::kKvRowBytes, map, bars.of(ch),
                    ch * Sh::kKvBlockElems, box.row, c.kv_head, page);
    }
  } else {
    const int row = c.kv_row0 + n * Sh::kBN;
#pragma unroll
    for (int ch = 0; ch < kChunks; ++ch)
      tma_load_4d<kHint>(dst + ch * (Sh::kBN * Sh::kKvRowBytes), map, bars.of(ch), ch * Sh::kKvBlockElems, row, c.kv_head,
                  c.kv_batch);
  }
}

// One TMA stage of KV tile n: K's ring, or V's (kV; narrower where V has a depth of its own).
// bars_parts: the barriers whose k_part a K stage in parts lands on (Shape::kKParts > 1).
template <class Config, class Mask, bool kPaged, bool kV, bool kLean = false, class Ring>
__device__ __forceinline__ void load_kv_stage(const FwdParams& p, Ring& ring, const TmaDesc* map,
                                              unsigned char* ring_base, int n, const TmaCoords& c,
                                              const TilePages<Config, kLean>& pg = {},
                                              typename SmemLayout<Config>::Barriers* bars_parts = nullptr) {
  using Sh = Shape<Config>;
  using L = SmemLayout<Config>;
  constexpr u32 kBytes = kV ? L::kVLoadStageBytes : L::kKVLoadStageBytes;
  constexpr int kChunks = kV ? Sh::kVChunks : Sh::kKvChunks;
  constexpr int kParts = kV ? 1 : Sh::kKParts;
  constexpr int kPer = kParts > 1 ? kChunks / kParts : 0;
  auto st = ring.acquire();
  ChunkBars<kPer> bars{st.full_barrier(), nullptr};
  st.expect_bytes(kBytes / kParts);
  if constexpr (kParts > 1) {
    bars.rest = bars_parts->k_parts_of(st.index());
#pragma unroll
    for (int j = 0; j < kParts - 1; ++j) mbar_expect_tx(bars.rest + j, kBytes / kParts);
  }
  load_kv_tile<Config, kPaged, kV, kChunks, kLean, kv_l2_hint<Config, Mask>()>(p, map, c, ring_base + st.index() * kBytes, bars, n, pg);
}

}  // namespace sm90a
}  // namespace fa4
