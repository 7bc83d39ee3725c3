// The producer role of the sm90a kernel: per unit of the tile walk, Q once, then K(n) and V(n) per
// KV tile into the pipe::Producer rings, by TMA (load.cuh: one elected thread) or gathered rows
// (gather.cuh: the gathering warps); the persistent walks' Q handshake with the consumers.
#pragma once
#include "sm90a/gather.cuh"

namespace fa4 {
namespace sm90a {

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
  for (auto pages = PageQueue<Config, kLean>::make(p, c, w, n); w.has(n);) {
    const TilePages<Config, kLean>& pg = pages.now;
    if constexpr (Sh::kVInK && Sh::kKvFp8) {
      // An e4m3 latent cache: the converters hand V(n) (K(n)'s 16-bit stage) to P V (convert_loop).
      load_kv_stage<Config, Mask, kPaged, false, kLean>(p, k_ring, &tma.k, smem + L::kKLoadOffset, n, c, pg);
    } else if constexpr (Sh::kVInK) {
      // Latent KV: V(n) is K(n)'s stage, so the slot is refilled only once P V(n - stages) is done
      // too (V's empty barrier). V's full barrier is a plain arrival: a consumer acquires V(n) only
      // after it waited for K(n)'s bytes.
      auto vs = v_ring.acquire();
      load_kv_stage<Config, Mask, kPaged, false, kLean>(p, k_ring, &tma.k, smem + L::kKLoadOffset, n, c, pg, bars);
      vs.arrive();
    } else {
      // K tile n; consumers need K(n) before V(n-1) in the overlapped schedule, V(n) after.
      load_kv_stage<Config, Mask, kPaged, false, kLean>(p, k_ring, &tma.k, smem + L::kKLoadOffset, n, c, pg);
      load_kv_stage<Config, Mask, kPaged, true, kLean>(p, v_ring, &tma.v, smem + L::kVLoadOffset, n, c, pg);
    }
    n = w.next_tile(n);
    if (w.has(n)) pages.advance(p, c, w, n);  // before the next stage is acquired (PageQueue)
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
        load_kv_stage<Config, Mask, false, false>(p, k_ring, &tma.k, k_dst, n, c);
        load_q_persistent<Config, Mask, false, kDynamic>(tma, w, c, smem, bars, q_empty_phase, true, unit);
        load_kv_stage<Config, Mask, false, true>(p, v_ring, &tma.v, v_dst, n, c);
        for (n = w.next_tile(n); w.has(n); n = w.next_tile(n)) {
          load_kv_stage<Config, Mask, false, false>(p, k_ring, &tma.k, k_dst, n, c);
          load_kv_stage<Config, Mask, false, true>(p, v_ring, &tma.v, v_dst, n, c);
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

}  // namespace sm90a
}  // namespace fa4
