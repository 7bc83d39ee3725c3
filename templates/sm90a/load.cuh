// Producer warp of the sm90a kernel: one elected thread issues every TMA load (Q once, then
// K and V per KV tile through the two pipe::Producer rings), in the consumers' tile order.
#pragma once
#include "common/mbarrier.cuh"
#include "common/pipeline.cuh"
#include "common/smem.cuh"
#include "sm90a/layout.cuh"

namespace fa4 {
namespace sm90a {

// Q of consumer warpgroup g into Q buffer `buffer` (SmemLayout::q_offset): kQChunks boxes of
// [64 rows][128 bytes] on bar. Packed GQA: the 5-D map's box is the same 64 x 128 B (64 / kPack
// queries x kPack heads, rows in PackedRow order), addressed by the box's first query and the KV head.
template <class Config, class Mask>
__device__ __forceinline__ void load_q_wg(const TmaDescs& tma, const CtaWork<Config, Mask>& w, const TmaCoords& c,
                                          unsigned char* smem, u64* bar, int g, u32 buffer = 0) {
  using Sh = Shape<Config>;
  using L = SmemLayout<Config>;
#pragma unroll
  for (int ch = 0; ch < Sh::kQChunks; ++ch) {
    unsigned char* dst = smem + L::q_offset(buffer, g) + ch * (Sh::kWgRows * Sh::kRowBytes);
    if constexpr (Sh::kPack == 1)
      tma_load_4d(dst, &tma.q, bar, ch * Sh::kBlockElems, c.q_row0 + w.q_lo + g * Sh::kWgRows, c.q_head, c.q_batch);
    else
      tma_load_5d(dst, &tma.q, bar, ch * Sh::kBlockElems, 0, c.q_row0 + (w.q_lo + g * Sh::kWgRows) / Sh::kPack, c.kv_head,
                  c.q_batch);
  }
}

// K or V tile n into one ring stage (dst: its first swizzle block; bar: its full barrier).
// Unpaged: one box of kBN rows per swizzle-row chunk of the depth. Paged: kBN / p.kv_box_rows boxes
// per chunk, box i at i * kv_box_rows rows (kv_box_rows % 8 == 0: whole 8-row swizzle periods, 1024
// bytes at SW128 and 512 at SW64, so the pattern is the one a single box would give), each from its
// own page. The bytes are the same either way, so the stage's expect_tx does not change. Which one: kPaged (per-CTA mode: the producer loop is chosen once per
// CTA on p.page_table), or, persistent, a uniform branch per tile on c.pages (a second copy of the
// persistent loop pushed the kBN 176 consumers into spills).
template <class Config, bool kPaged>
__device__ __forceinline__ void load_kv_tile(const FwdParams& p, const TmaDesc* map, const TmaCoords& c,
                                             unsigned char* dst, u64* bar, int n) {
  using Sh = Shape<Config>;
  if (kPaged || (Sh::kPersistent && Sh::kRuntimeVariants && c.pages)) {
    for (int r = 0; r < Sh::kBN; r += p.kv_box_rows) {
      const TmaCoords::Box b = c.kv_box(p, n * Sh::kBN + r);
#pragma unroll
      for (int ch = 0; ch < Sh::kKvChunks; ++ch)
        tma_load_4d(dst + ch * (Sh::kBN * Sh::kKvRowBytes) + r * Sh::kKvRowBytes, map, bar, ch * Sh::kKvBlockElems, b.row,
                    c.kv_head, b.batch);
    }
  } else {
    const int row = c.kv_row0 + n * Sh::kBN;
#pragma unroll
    for (int ch = 0; ch < Sh::kKvChunks; ++ch)
      tma_load_4d(dst + ch * (Sh::kBN * Sh::kKvRowBytes), map, bar, ch * Sh::kKvBlockElems, row, c.kv_head, c.kv_batch);
  }
}

// One TMA stage (K or V ring) of KV tile n.
template <class Config, bool kPaged>
__device__ __forceinline__ void load_kv_stage(const FwdParams& p, pipe::Producer<Shape<Config>::kStages>& ring,
                                              const TmaDesc* map, unsigned char* ring_base, int n, const TmaCoords& c) {
  using L = SmemLayout<Config>;
  auto st = ring.acquire();
  st.expect_bytes(L::kKVLoadStageBytes);
  load_kv_tile<Config, kPaged>(p, map, c, ring_base + st.index() * L::kKVLoadStageBytes, st.full_barrier(), n);
}

// Q of every consumer warpgroup for one tile into Q buffer `buffer`, each after its q_empty (the
// warpgroup's earlier epilogue is done with the buffer). load == false (tile without KV tiles or
// without Q rows): plain arrival on q_full instead of bytes, so q_full / q_empty keep one phase
// per use of the buffer on both sides.
template <class Config, class Mask>
__device__ __forceinline__ void load_q_persistent(const TmaDescs& tma, const CtaWork<Config, Mask>& w,
                                                  const TmaCoords& c, unsigned char* smem,
                                                  typename SmemLayout<Config>::Barriers* bars, u32 buffer,
                                                  u32 q_empty_phase, bool load) {
  using Sh = Shape<Config>;
  using L = SmemLayout<Config>;
#pragma unroll
  for (int g = 0; g < Sh::kNumConsumerWGs; ++g) {
    mbar_wait(&bars->q_empty[buffer][g], q_empty_phase);
    u64* bar = &bars->q_full[buffer][g];
    if (load) {
      mbar_expect_tx(bar, L::kQLoadBytes);
      load_q_wg<Config, Mask>(tma, w, c, smem, bar, g, buffer);
    } else {
      mbar_arrive(bar);
    }
  }
}

// The grid walk's one unit: loads nothing when the CTA has no KV tile (the consumers then skip Q
// as well), so no barrier is left waiting for bytes that never come (this includes a KV split
// whose share of the tiles is empty); else Q of every consumer warpgroup, then K(n), V(n) per KV
// tile. Rings live for this unit only.
template <class Config, class Mask, bool kPaged>
__device__ __forceinline__ void producer_unit(const FwdParams& p, const TmaDescs& tma, const CtaWork<Config, Mask>& w,
                                              unsigned char* smem, typename SmemLayout<Config>::Barriers* bars) {
  using Sh = Shape<Config>;
  using L = SmemLayout<Config>;
  int n = w.first_tile();
  if (!w.has(n)) return;
  // Paged: the sequence's page-table row is re-derived here (opaque batch, so not CSE'd) instead of
  // taken from the CTA prologue's SeqInfo, which would hold it across the role split (it spills
  // there: the producer runs at 24 registers).
  const TmaCoords c = TmaCoords::make(
      p, kPaged ? SeqInfo::make(p, static_cast<int>(opaque_u32(static_cast<u32>(w.seq.batch))), w.seq.q_head) : w.seq);

  // Q: one tile of 64 rows per consumer warpgroup, Dp/64 boxes of [64 rows][64 depth] each.
#pragma unroll
  for (int g = 0; g < Sh::kNumConsumerWGs; ++g) {
    u64* bar = &bars->q_full[0][g];
    mbar_expect_tx(bar, L::kQLoadBytes);
    load_q_wg<Config, Mask>(tma, w, c, smem, bar, g);
  }

  // An FP8 KV cache's K and V go to the e4m3 rings (the converters feed the consumers' rings).
  pipe::Producer<Sh::kStages> k_ring(L::k_load_barriers(bars)), v_ring(L::v_load_barriers(bars));
  for (; w.has(n); n = w.next_tile(n)) {
    // K tile n; consumers need K(n) before V(n-1) in the overlapped schedule, V(n) after.
    load_kv_stage<Config, kPaged>(p, k_ring, &tma.k, smem + L::kKLoadOffset, n, c);
    load_kv_stage<Config, kPaged>(p, v_ring, &tma.v, smem + L::kVLoadOffset, n, c);
  }
}

// Called by exactly one thread; walks the consumers' tile walk (TileWalker), so both sides see
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
// Cross-tile overlap (SmemLayout::kCrossTile): tile i's Q goes into buffer i & 1, and its q_empty
// wait (parity ((i >> 1) & 1) ^ 1) is for the epilogue of tile i - 2, which the consumers finish
// early in tile i - 1: the producer reaches tile i about kStages KV tiles before tile i - 1 ends,
// so Q(i) lands while tile i - 1 still runs instead of after it. The consumers' first step of a
// running tile takes a V stage for the previous tile's last P V; where no tile is pending (the
// walk's first running tile, or one after a tile that did not run) the producer loads V(first)
// once more before K(first), for a P V whose result the consumers discard, so that the first step
// is one code path (consumer_loop_cross_tile).
template <class Config, class Mask, bool kPaged, class Tiles>
__device__ __forceinline__ void producer_loop(const FwdParams& p, const TmaDescs& tma, Tiles tiles, unsigned char* smem,
                                              typename SmemLayout<Config>::Barriers* bars) {
  using Sh = Shape<Config>;
  using L = SmemLayout<Config>;
  static_assert(!(Tiles::kPersistent && kPaged), "persistent walks branch per tile on c.pages (load_kv_tile)");
  if constexpr (!Tiles::kPersistent) {
    // The grid walk's one unit, without the loop: a one-trip loop here changed the SASS of the
    // unmasked grid kernels (d128, d256, softcap: the prologue scheduled differently).
    producer_unit<Config, Mask, kPaged>(p, tma, tiles.template work<Sh::kBM, Sh::kBN, Sh::kPack>(p), smem, bars);
  } else {
    pipe::Producer<Sh::kStages> k_ring(&bars->k), v_ring(&bars->v);
    bool pending = false;  // cross-tile: the consumers hold the previous tile's last P V
    for (; tiles.valid(p); tiles.advance()) {
      const CtaWork<Config, Mask>& w = tiles.template work<Sh::kBM, Sh::kBN, Sh::kPack>(p);
      // Q buffer of tile i and the parity of its q_empty wait: the buffer's previous use is done.
      const u32 i = static_cast<u32>(tiles.iter), q_buffer = L::kQBuffers == 2 ? i & 1u : 0u;
      const u32 q_empty_phase = ((L::kQBuffers == 2 ? i >> 1 : i) & 1u) ^ 1u;
      const TmaCoords c = TmaCoords::make(p, w.seq);
      int n = w.first_tile();  // none when !w.valid (empty KV range)
      const bool runs = w.has(n);
      if (runs) {
        if (L::kCrossTile && !pending) load_kv_stage<Config, false>(p, v_ring, &tma.v, smem + L::kVOffset, n, c);
        load_kv_stage<Config, false>(p, k_ring, &tma.k, smem + L::kKOffset, n, c);
        load_q_persistent<Config, Mask>(tma, w, c, smem, bars, q_buffer, q_empty_phase, true);
        load_kv_stage<Config, false>(p, v_ring, &tma.v, smem + L::kVOffset, n, c);
        for (n = w.next_tile(n); w.has(n); n = w.next_tile(n)) {
          load_kv_stage<Config, false>(p, k_ring, &tma.k, smem + L::kKOffset, n, c);
          load_kv_stage<Config, false>(p, v_ring, &tma.v, smem + L::kVOffset, n, c);
        }
      } else {
        load_q_persistent<Config, Mask>(tma, w, c, smem, bars, q_buffer, q_empty_phase, false);
      }
      pending = runs;
    }
  }
}

// ---- FP8: V transposed in shared memory ----
// FP8 wgmma reads B K-major only, and V arrives [keys][depth]. Three warps of the producer
// warpgroup (warps 1-3; warp 0 issues the TMA loads) copy each V stage to a Vt stage, [depth][keys]
// in SW128 blocks of [kDp rows][128 keys], through the rings v (TMA -> transposers) and vt
// (transposers -> consumers). Within each 16-key chunk of a row the keys are permuted as pack_p
// (softmax.cuh) leaves P: logical key 4t + i is tile key 8(i/2) + 2t + i%2, so P V needs no shuffle.
// Warps 1-3 of the producer warpgroup: FP8's V transposers, or an FP8 KV cache's converters.
constexpr int kHelperThreads = 96;

__device__ __forceinline__ u32 byte_perm(u32 a, u32 b, u32 sel) {
  u32 r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
  return r;
}

// One V stage (src) -> one Vt stage (dst) by thread t of kHelperThreads. A task is 16 keys (key
// block kb) x 4 depths (depth quad dq): 16 4-byte reads, four 4x4 byte transposes, four 16-byte
// writes (rows d..d+3 of Vt, the keys' 16-byte chunk). Writes: the 8 lanes of each 16-byte write
// phase hit 8 different chunks (kb ^ row % 8), all 32 banks. Reads cover the 32 banks once.
// SW128 V rows (depth >= 128): the 32 tasks of a warp's round take 32 depth quads (one row's 128
// bytes per read) and, lane l, key block (l + round) % 8. (Key block by round alone put a phase's 8
// rows on 2 chunks: 4 times the write wavefronts, and 26M bank conflicts per B4 H16 S4096 call,
// docs/PERF.md run 31.)
// SW64 V rows (FP8 at depth 64): 16 depth quads per 64-byte row, so a round's two half-warps (h)
// take key blocks kb = (dq / 2 + 4h + round) % 8 (4 consecutive key blocks per write phase, paired
// with both row parities: 8 chunks), and half-warp 1 reads its rows in pair-swapped order (slot i
// holds key i ^ 1), which puts its reads on the other 16 banks (64-byte rows of the other parity);
// its byte transposes take the pair-swapped selectors.
template <class Config>
__device__ __forceinline__ void transpose_v(u32 src, u32 dst, int t) {
  using Sh = Shape<Config>;
  constexpr int kBN = Sh::kBN, kDp = Sh::kDp, kQuads = kDp / 4, kRow = Sh::kRowBytes;
  constexpr int kTasks = (kBN / 16) * kQuads;
  static_assert(kBN == 128 && kQuads % 16 == 0 && kHelperThreads % 32 == 0, "transpose_v: 8 key blocks, whole warp rounds");
  static_assert(kRow == 128 || (kRow == 64 && kQuads == 16), "transpose_v: SW128 rows, or SW64 rows of depth 64");
#pragma unroll 1
  for (int task = t; task < kTasks; task += kHelperThreads) {
    const int lane = task % 32, round = task / 32;  // task % 32 == t % 32: the thread's lane
    int dq, kb;
    u32 swap = 0;  // SW64: 1 for half-warp 1 (slot i holds key i ^ 1)
    if constexpr (kRow == 128) {
      dq = 32 * (round / 8) + lane;
      kb = (lane + round) % 8;
    } else {
      dq = lane % 16;
      swap = static_cast<u32>(lane / 16);
      kb = (dq / 2 + 4 * static_cast<int>(swap) + round) % 8;
    }
    const int d0 = 4 * dq;
    // Key k of the block at row k of the V block; SW128 chunk c of row k is at (c ^ k % 8), SW64 at
    // (c ^ (k / 2) % 4): the same for keys i and i ^ 1, so a swapped read only moves by one row.
    const u32 vblk = src + (d0 / kRow) * (kBN * kRow) + (d0 % 16) + 16 * kb * kRow;
    const int dc = (d0 % kRow) / 16;
    const u32 even = vblk + swap * kRow, odd = vblk - swap * kRow;  // slots i even / odd
    u32 in[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const int chunk = kRow == 128 ? dc ^ (i % 8) : dc ^ ((i / 2) % 4);
      in[i] = ld_shared_u32((i % 2 ? odd : even) + i * kRow + (chunk << 4));
    }
    // Interleave the bytes of keys 2w, 2w+1 ([a0 b0 a1 b1], [a2 b2 a3 b3]); swapped slots: b, a.
    const u32 sel_lo = swap ? 0x1504u : 0x5140u, sel_hi = swap ? 0x3726u : 0x7362u;
    u32 out[4][4];  // [depth d0 + j][word t]: keys 2t, 2t+1, 8+2t, 9+2t of the chunk
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const u32 ab_lo = byte_perm(in[2 * w], in[2 * w + 1], sel_lo), ab_hi = byte_perm(in[2 * w], in[2 * w + 1], sel_hi);
      const u32 cd_lo = byte_perm(in[8 + 2 * w], in[9 + 2 * w], sel_lo), cd_hi = byte_perm(in[8 + 2 * w], in[9 + 2 * w], sel_hi);
      out[0][w] = byte_perm(ab_lo, cd_lo, 0x5410);
      out[1][w] = byte_perm(ab_lo, cd_lo, 0x7632);
      out[2][w] = byte_perm(ab_hi, cd_hi, 0x5410);
      out[3][w] = byte_perm(ab_hi, cd_hi, 0x7632);
    }
    const u32 tblk = dst + (kb / 8) * (kDp * 128);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int r = d0 + j;
      st_shared_v4(tblk + r * 128 + (((kb % 8) ^ (r % 8)) << 4), out[j]);
    }
  }
}

// The transposers' walk of a grid CTA: one Vt stage per V stage the producer loads (producer_unit).
template <class Config, class Mask>
__device__ __forceinline__ void transpose_unit(const CtaWork<Config, Mask>& w, unsigned char* smem,
                                               typename SmemLayout<Config>::Barriers* bars, int t) {
  using Sh = Shape<Config>;
  using L = SmemLayout<Config>;
  static_assert(Sh::kFp8, "transpose_unit: FP8 kernels only");
  const u32 base = smem_u32(smem);
  pipe::Consumer<Sh::kStages, pipe::ArriveOnePerWarp> v_ring(&bars->v);
  pipe::Producer<Sh::kStages> vt_ring(&bars->vt);
  for (int n = w.first_tile(); w.has(n); n = w.next_tile(n)) {
    auto vs = v_ring.acquire();
    auto ts = vt_ring.acquire();
    transpose_v<Config>(base + L::kVOffset + vs.index() * L::kKVStageBytes,
                        base + L::kPVOffset + ts.index() * L::kKVStageBytes, t);
    fence_proxy_async();  // this thread's Vt writes (and V reads) before the wgmma / TMA that follow
    ts.arrive();
  }  // release V: its TMA slot is free again
}

// ---- FP8 KV cache: e4m3 K / V converted to the 16-bit stages the consumers read ----
// One e4m3 stage (src: kKvChunks SW128 blocks of [kBN rows][128 keys' bytes]) -> one 16-bit stage
// (dst: kChunks SW128 blocks of [kBN rows][64 elements]), exactly (e4m3x2_to), by thread t of
// kHelperThreads. A task is 16 elements of one row: one 16-byte read, two 16-byte writes. Eight
// consecutive threads take one row's 8 source chunks (a conflict-free read); those whose elements
// land in the row's odd 64-element block write their two chunks in the other order, so each
// 8-thread write phase covers all 32 banks once.
template <class Config>
__device__ __forceinline__ void convert_kv(u32 src, u32 dst, int t) {
  using Sh = Shape<Config>;
  constexpr int kGroups = Sh::kDp / 16;  // 16-element groups per row
  constexpr int kTasks = Sh::kBN * kGroups;
  static_assert(Sh::kKvFp8 && Sh::kDp == 128, "convert_kv: e4m3 rows of one 128-byte block");
#pragma unroll 2
  for (int task = t; task < kTasks; task += kHelperThreads) {
    const int r = task / kGroups, g = task % kGroups;
    u32 in[4];
    ld_shared_v4(src + r * 128 + ((g ^ (r % 8)) << 4), in);
    u32 out[2][4];  // [elements 16g..16g+7, 16g+8..16g+15]
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const u32 cv_lo = e4m3x2_to<typename Sh::MmaElement>(static_cast<u16>(in[j] & 0xffffu));
      const u32 cv_hi = e4m3x2_to<typename Sh::MmaElement>(static_cast<u16>(in[j] >> 16));
      out[j / 2][(j % 2) * 2] = cv_lo;
      out[j / 2][(j % 2) * 2 + 1] = cv_hi;
    }
    const u32 row = dst + (g / 4) * (Sh::kBN * 128) + r * 128;
    const int c0 = (2 * g) % 8, odd = (g / 4) & 1;
    u32 first[4], second[4];  // selects, not a dynamically indexed (local-memory) array
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      first[i] = odd ? out[1][i] : out[0][i];
      second[i] = odd ? out[0][i] : out[1][i];
    }
    st_shared_v4(row + (((c0 + odd) ^ (r % 8)) << 4), first);
    st_shared_v4(row + (((c0 + 1 - odd) ^ (r % 8)) << 4), second);
  }
}

// One stage through the converters: the e4m3 stage TMA filled -> the consumers' 16-bit stage.
template <class Config>
__device__ __forceinline__ void convert_stage(pipe::Consumer<Shape<Config>::kStages, pipe::ArriveOnePerWarp>& in,
                                              pipe::Producer<Shape<Config>::kStages>& out, u32 src_ring, u32 dst_ring,
                                              int t) {
  using L = SmemLayout<Config>;
  auto is = in.acquire();
  auto os = out.acquire();
  convert_kv<Config>(src_ring + is.index() * L::kKVLoadStageBytes, dst_ring + os.index() * L::kKVStageBytes, t);
  fence_proxy_async();  // this thread's writes (and reads) before the wgmma / TMA that follow
  os.arrive();
}  // release the e4m3 stage: its TMA slot is free again

// The converters' walk of a grid CTA: K(n), then V(n), per KV tile the producer loads (producer_unit).
template <class Config, class Mask>
__device__ __forceinline__ void convert_unit(const CtaWork<Config, Mask>& w, unsigned char* smem,
                                             typename SmemLayout<Config>::Barriers* bars, int t) {
  using Sh = Shape<Config>;
  using L = SmemLayout<Config>;
  const u32 base = smem_u32(smem);
  pipe::Consumer<Sh::kStages, pipe::ArriveOnePerWarp> k_in(&bars->k_load), v_in(&bars->v_load);
  pipe::Producer<Sh::kStages> k_out(&bars->k), v_out(&bars->v);
  for (int n = w.first_tile(); w.has(n); n = w.next_tile(n)) {
    convert_stage<Config>(k_in, k_out, base + L::kKLoadOffset, base + L::kKOffset, t);
    convert_stage<Config>(v_in, v_out, base + L::kVLoadOffset, base + L::kVOffset, t);
  }
}

}  // namespace sm90a
}  // namespace fa4
