// The CTA's tile walk as the sm90a roles see it: the work unit type (CtaWork), the walker of the
// Config's kPersistent (TileWalker), and the KV split helpers of the epilogue.
#pragma once
#include "common/grid_walk.h"
#include "common/persistent_walk.h"
#include "common/stream_k_walk.h"
#include "common/tile_work.cuh"
#include "sm90a/shape.cuh"

namespace fa4 {
namespace sm90a {

// One CTA's problem and KV tile list (common/tile_work.cuh).
template <class Config, class Mask>
using CtaWork = TileWork<Shape<Config>::kBM, Shape<Config>::kBN, Mask, Shape<Config>::kPack, Shape<Config>::kBottomTiles,
                         Shape<Config>::kWgRows>;

// The CTA's tile walk: GridTiles (kPersistent 0; it holds the CtaWork built before the role
// split), PersistentTiles (1), SegmentTiles (2) or DynamicTiles (3).
template <int kPersistent, class Work, class Mask> struct TileWalkerOf { using type = GridTiles<Work>; };
template <class Work, class Mask> struct TileWalkerOf<1, Work, Mask> { using type = PersistentTiles<Mask>; };
template <class Work, class Mask> struct TileWalkerOf<2, Work, Mask> { using type = SegmentTiles<Mask>; };
template <class Work, class Mask> struct TileWalkerOf<3, Work, Mask> { using type = DynamicTiles<Mask>; };
template <class Config, class Mask>
using TileWalker = typename TileWalkerOf<PersistentOf<Config>::value, CtaWork<Config, Mask>, Mask>::type;

// A role's copy of the CTA's tile walk: a fresh persistent walker, or the grid CTA's one unit (w,
// built before the role split).
template <class Config, class Mask>
__device__ __forceinline__ TileWalker<Config, Mask> cta_tiles(const CtaWork<Config, Mask>& w) {
  if constexpr (PersistentOf<Config>::value != 0)
    return TileWalker<Config, Mask>::make();
  else
    return TileWalker<Config, Mask>{w, 0};
}

// The CTA's KV split (w.split), re-derived for the epilogue exactly as TileWork::make decodes it
// from blockIdx.x, instead of being held across the KV loop: one more live register there spills
// at kBM 192 (NVRTC, softcap). Persistent CTAs: w.split (PersistentTiles: the split, -1 for a
// split tail's whole tiles; SegmentTiles: the segment's slot).
template <class Config, class Work>
__device__ __forceinline__ int split_of(const FwdParams& p, const Work& w) {
  if constexpr (Shape<Config>::kPersistent) return w.split;
  if (p.split_qmax > 0) return w.split;  // long-pole splits (TileWork::make): -1 for a whole tile
  return p.num_splits > 1 ? static_cast<int>(blockIdx.x) % p.num_splits : 0;
}

// Whether the tile's epilogue writes split partials (fa4_combine then writes O) instead of O:
// every tile of a split launch, except a split-tail launch's whole tiles (split -1, PersistentTiles)
// and a long-pole split's (FwdParams::split_qmax: the tiles of sequences it does not split).
template <class Config, class Work>
__device__ __forceinline__ bool writes_partials(const FwdParams& p, const Work& w) {
  if constexpr (Shape<Config>::kPersistent) return p.num_splits > 1 && w.split >= 0;
  return p.num_splits > 1 && (p.split_qmax <= 0 || w.split >= 0);
}

}  // namespace sm90a
}  // namespace fa4
