// Stream-K work split for persistent decode (sm90a Tuning::persistent = 2), written once for the
// kernel (SegmentTiles), the host launch plan and the unit tests. Plain C++: no headers.
//
// The work is `tiles` Q tiles (grid order: m block fastest, then head, then batch) of U units each;
// a unit is 1/U of the tile's visible KV tiles (U = the KV tile count: one unit per KV tile). The
// W = tiles * U units are cut into G contiguous ranges, one per CTA, as evenly as integers allow:
// every CTA takes q = W / G units and the first r = W % G one more. A CTA walks its range as
// segments, the runs of its units inside one tile. Segment `slot` s of a tile is the tile's s-th
// CTA; a tile cut into more than one segment is merged by fa4_combine from per-slot partials.
// Every CTA then streams the same number of K/V bytes, with no tail wave and no idle SM.
#pragma once

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define FA4_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define FA4_HOST_DEVICE inline
#endif

namespace fa4 {

struct UnitSplit {
  int units_per_tile;  // U
  int per_cta;         // q = W / G (>= 1)
  int extra;           // r = W % G: CTAs 0 .. r-1 take q + 1 units

  // First unit of CTA x (x = G gives W).
  FA4_HOST_DEVICE int begin(int x) const { return x * per_cta + (x < extra ? x : extra); }
  // The CTA whose range holds unit u.
  FA4_HOST_DEVICE int cta_of(int u) const {
    const int big = extra * (per_cta + 1);  // units of the r larger CTAs
    return u < big ? u / (per_cta + 1) : extra + (u - big) / per_cta;
  }
  // CTAs (= segments) that tile t is cut into, and the slot of CTA x in it.
  FA4_HOST_DEVICE int first_cta(int t) const { return cta_of(t * units_per_tile); }
  FA4_HOST_DEVICE int segments(int t) const { return cta_of(t * units_per_tile + units_per_tile - 1) - first_cta(t) + 1; }
  // Start unit of segment k of CTA x: its range start, then each later tile's first unit.
  FA4_HOST_DEVICE int segment_start(int x, int k) const {
    const int b = begin(x);
    return k == 0 ? b : (b / units_per_tile + k) * units_per_tile;
  }
  // The most segments any tile is cut into: one partial run at each end, q-unit runs between.
  FA4_HOST_DEVICE int max_segments(int ctas) const {
    const int s = 1 + (units_per_tile - 1 + per_cta - 1) / per_cta;
    return s < ctas ? s : ctas;
  }
  // Units [w * U, ...) split over `ctas` CTAs (ctas <= tiles * units_per_tile).
  FA4_HOST_DEVICE static UnitSplit make(int tiles, int units_per_tile, int ctas) {
    const int w = tiles * units_per_tile;
    return UnitSplit{units_per_tile, w / ctas, w % ctas};
  }
};

}  // namespace fa4
