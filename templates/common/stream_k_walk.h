// The stream-K walk (Tuning::persistent = 2, packed-GQA decode): its host plan, its decode and its
// device iterator SegmentTiles. Shared pieces: common/walk_plan.h; the unit split itself (which
// CTA takes which units, and the segments they form): UnitSplit, common/segments.h.
//
// grid = (G, 1, 1), G <= #SMs; CTA x walks the segments of its unit range, in order, and every warp
// role of the CTA walks the same sequence. Tiles decode as the plain grid does (m block fastest,
// then head (KV head when packed), then batch). A segment keeps its units' share of the tile's
// visible KV tiles; its slot is its index among the tile's segments.
#pragma once
#include "common/walk_plan.h"

#if !defined(__CUDACC_RTC__)
#include <algorithm>
#include <cstdint>
#include <string>

#include "fa4jit/errors.hpp"
#endif

namespace fa4 {

struct StreamKWalk {
  struct Segment {
    int tile;      // linear tile (m block fastest, then grid head, then batch)
    int u0, u1;    // its units [u0, u1) of units_per_tile
  };
  FA4_HOST_DEVICE static UnitSplit units(const FwdParams& p) {
    return UnitSplit{p.tile_units, p.units_per_cta, p.units_extra};
  }
  // Segment k of CTA x; valid while segment_start(x, k) < u.begin(x + 1).
  FA4_HOST_DEVICE static Segment segment(const UnitSplit& u, int x, int k) {
    const int s = u.segment_start(x, k), end = u.begin(x + 1);
    Segment g;
    g.tile = s / u.units_per_tile;
    g.u0 = s - g.tile * u.units_per_tile;
    g.u1 = walk_min(u.units_per_tile, end - g.tile * u.units_per_tile);
    return g;
  }
  // The index of CTA x's segment among its tile's (its partial slot when the tile is cut).
  FA4_HOST_DEVICE static int slot(const UnitSplit& u, int x, int tile) { return x - u.first_cta(tile); }

#if !defined(__CUDACC_RTC__)
  // Stream-K geometry for `tiles` Q tiles of `kv_blocks` KV tiles on `sms` SMs. `requested` is
  // LaunchArgs::num_splits: 0 picks one unit per KV tile when each (batch, head) has a single Q tile
  // (decode: K/V bytes balanced over the SMs), else whole tiles; n > 0 cuts each tile into n units.
  // `slots` is the partial slots per row (1: no partials, no combine). Throws jit::LaunchError.
  struct Geometry {
    UnitSplit units;
    int ctas = 1;
    int slots = 1;
  };
  static Geometry geometry(long long tiles, int kv_blocks, int m_blocks, int requested, int sms) {
    if (tiles <= 0 || tiles > INT32_MAX)
      throw jit::LaunchError("launch: " + std::to_string(tiles) + " Q tiles for a stream-K kernel");
    int units = requested > 0 ? requested : (m_blocks == 1 && kv_blocks >= 2 ? kv_blocks : 1);
    if (tiles * units > INT32_MAX) {
      if (requested > 0)
        throw jit::LaunchError("launch: num_splits = " + std::to_string(requested) + " over " + std::to_string(tiles) +
                               " tiles is too large");
      units = 1;
    }
    Geometry g;
    g.ctas = static_cast<int>(std::min<long long>({tiles * units, std::max(1, sms), kMaxSplits}));
    g.units = UnitSplit::make(static_cast<int>(tiles), units, g.ctas);
    g.slots = units == 1 ? 1 : g.units.max_segments(g.ctas);
    return g;
  }
  // Grid (ctas, 1, 1), p.tile_units / units_per_cta / units_extra; splits = slots.
  static WalkPlan plan(const WalkInput& in, FwdParams& p) {
    const Geometry g = geometry(in.tiles(), in.kv_blocks, in.m_blocks, in.requested_splits, in.sms);
    p.tile_units = g.units.units_per_tile;
    p.units_per_cta = g.units.per_cta;
    p.units_extra = g.units.extra;
    p.num_splits = g.slots;
    WalkPlan w;
    w.grid[0] = static_cast<unsigned>(g.ctas);
    w.splits = g.slots;
    return w;
  }
#endif
};

}  // namespace fa4

#if defined(__CUDACC_RTC__) || defined(__CUDACC__)
#include "common/tile_work.cuh"

namespace fa4 {

// The stream-K walk's device iteration: CTA x walks its segments k = 0, 1, ... A segment's
// TileWork keeps its units' share of the tile's visible KV tiles, split = its slot and splits = the
// tile's segment count. Only the segment count k is carried: the state is recomputed from it
// (UnitSplit::segment_start), as in PersistentTiles.
template <class Mask>
struct SegmentTiles : StreamKWalk {
  static constexpr bool kPersistent = true;
  static constexpr bool kDynamic = false;
  int iter;  // segments of this CTA before the current one

  __device__ __forceinline__ static SegmentTiles make() { return SegmentTiles{{}, 0}; }
  // The opaque 0 of the role loops, as PersistentTiles::loop_zero.
  __device__ __forceinline__ static int loop_zero() { return static_cast<int>(opaque_u32(0u)); }
  __device__ __forceinline__ bool valid(const FwdParams& p) const { return valid(p, 0); }
  // zero: as PersistentTiles::valid.
  __device__ __forceinline__ bool valid(const FwdParams& p, int zero) const {
    const UnitSplit u{p.tile_units + zero, p.units_per_cta, p.units_extra};
    return u.segment_start(static_cast<int>(blockIdx.x), iter) < u.begin(static_cast<int>(blockIdx.x) + 1);
  }
  __device__ __forceinline__ void advance() { ++iter; }
  __device__ __forceinline__ void advance(int) { ++iter; }  // the producer's (DynamicTiles claims)
  template <int kBM, int kBN, int kPack = 1, bool kBottom = false, int kSpan = 0>
  // The unused int: PersistentTiles::work's opaque zero (no stream-K caller passes one).
  __device__ __forceinline__ TileWork<kBM, kBN, Mask, kPack, kBottom, kSpan> work(const FwdParams& p, int = 0) const {
    const UnitSplit u = units(p);
    const int x = static_cast<int>(blockIdx.x);
    const Segment g = segment(u, x, iter);
    const int heads = kPack > 1 ? p.num_kv_heads : p.num_q_heads;
    const int m = g.tile % p.num_m_blocks, hb = g.tile / p.num_m_blocks;
    TileWork<kBM, kBN, Mask, kPack, kBottom, kSpan> w =
        TileWork<kBM, kBN, Mask, kPack, kBottom, kSpan>::make(p, m, (hb % heads) * kPack, hb / heads);
    w.keep_share(g.u0, g.u1, u.units_per_tile);
    w.split = slot(u, x, g.tile);
    w.splits = u.segments(g.tile);
    return w;
  }
};

}  // namespace fa4
#endif
