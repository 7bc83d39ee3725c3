// The tile walks: which CTA runs which Q tile (and which KV split or stream-K segment of it), in
// what order. Each walk is one type, compiled by the host compiler and by NVRTC as
// common/segments.h is: its host plan() fills the launch grid and the FwdParams fields the walk
// reads (runtime/tile_walk.cpp), its decode rules are __host__ __device__ and used by both the
// kernels and the host's simulations and tests, and its device iteration (guarded below) is what
// every warp role of a kernel walks (the persistent and stream-K iterators PersistentTiles and
// SegmentTiles in common/tile_scheduler.cuh, next to the TileWork they yield).
//   GridWalk        one CTA per unit: grid (m blocks * KV splits, heads, batch); masked grids run
//                   longest-first over sections of p.lpt_heads (batch, head) pairs. Device:
//                   TileWork::make(p) (common/tile_scheduler.cuh), the work of the CTA's one unit.
//   PersistentWalk  grid (min(#SMs, units), 1, 1); CTA x takes units x, 2G-1-x, 2G+x, ...; whole
//                   tiles, KV splits of every tile, or whole tiles then a split tail.
//   StreamKWalk     grid (G, 1, 1); CTA x takes its contiguous range of KV units (UnitSplit).
// The per-tile work of a unit (rows, KV tile range, masking) is TileWork (common/tile_scheduler.cuh).
#pragma once
#include "common/params.h"
#include "common/segments.h"

#if !defined(__CUDACC_RTC__)
#include <functional>
#endif

namespace fa4 {

FA4_HOST_DEVICE int walk_min(int a, int b) {
#if defined(__CUDA_ARCH__)
  return min(a, b);
#else
  return a < b ? a : b;
#endif
}

#if !defined(__CUDACC_RTC__)
// The persistent walk's longest-first sections (runtime/lpt_order.hpp): `heads` (batch, head)
// pairs per section; one_unit_per_cta: no section size within the L2 budget balances the static
// walk, so the launch runs one CTA per unit in that order and the hardware's CTA dispatch
// balances it, as it does the grid walk's.
struct LptSections {
  int heads = 1;
  bool one_unit_per_cta = false;
};

// What a walk's host plan needs from a launch (runtime/compiled_kernel.cpp fills it).
struct WalkInput {
  int m_blocks = 0;          // Q tiles per (batch, grid head): FwdParams::num_m_blocks
  int heads = 0;             // grid heads: q heads, or KV heads when GQA heads are packed
  int batch = 0;
  int kv_blocks = 0;         // KV tiles of the longest sequence (max_seqlen_k / BN, rounded up)
  bool keys_known = true;    // false: max_seqlen_k is 0 (no automatic split)
  int requested_splits = 0;  // LaunchArgs::num_splits (0: automatic), already range-checked
  int sms = 0;               // multiprocessors of the device
  // Longest-first order: the most (batch, head) pairs per section whose K/V fit the L2 budget,
  // 0 when the kernel keeps grid order (unmasked, or a backend without LPT order).
  int lpt_heads = 0;
  // Unmasked, unpacked, not varlen: every tile weighs the same and tiles map to LSE rows in order,
  // so a persistent walk may split its last round (split tail).
  bool equal_tiles = false;
  int max_seqlen_q = 0, bm = 0;  // rows of a (batch, head) and of a Q tile: the split tail's first row
  // Causal with lengths the host knows: equal lengths, or a packed varlen batch with max_seqlen_k
  // (modelled as every sequence at the longest lengths). The persistent sections are chosen by
  // simulating the walk; balance(ctas, max_heads) gives them (LptSections: their size, and whether
  // the launch runs one CTA per unit), memoized by the caller. Unset: L2 bound only.
  bool causal_known_lengths = false;
  std::function<LptSections(int ctas, int max_heads)> balance;
  long long tiles() const { return 1LL * m_blocks * heads * batch; }
};

// What a walk's plan decided besides the FwdParams fields: the grid and the partial slots per
// LSE row that fa4_combine merges (1: no split).
struct WalkPlan {
  unsigned grid[3] = {1, 1, 1};
  int splits = 1;
};
#endif

// ---- Grid walk ---------------------------------------------------------------------------------
struct GridWalk {
  // Longest-first order over sections of `heads` (batch, head) pairs: linear position i of a walk
  // over `pairs` pairs of `xs` positions each (x fastest) -> (x, pair), x = 0 the heaviest. Within a
  // section, every pair's heaviest position comes before any pair's next one, while the section's
  // K/V stay in L2 for its other tiles. The plain grid's CTA order (hardware: x fastest), the
  // persistent walk's units and the host simulation (runtime/lpt_order.cpp) all decode by this.
  FA4_HOST_DEVICE static void longest_first(int i, int xs, int pairs, int heads, int& x, int& pair) {
    const int section = i / (heads * xs), in_section = i - section * heads * xs;
    const int section_heads = walk_min(heads, pairs - section * heads);
    pair = section * heads + in_section % section_heads;
    x = in_section / section_heads;
  }

#if !defined(__CUDACC_RTC__)
  // Grid (m_blocks * splits, heads, batch); p.num_splits (automatic: choose_splits) and, for
  // unsplit masked launches, p.lpt_heads.
  static WalkPlan plan(const WalkInput& in, FwdParams& p);
  // Split count for `tiles` CTAs over `kv_blocks` KV tiles each, on `slots` CTA slots: 1 when the
  // grid already fills 80% of them, else the fewest splits whose slot fill is within 95% of the
  // best (FlashAttention's wave rule), each split keeping at least two KV tiles. The caller passes
  // the SM count even for 2-CTA-per-SM decode kernels: on an H200, 128 CTAs (one per SM) read K/V
  // at 4.27 TB/s and 256 at 4.03 (B 8 x Sk 32768: 2 vs 4 splits; B 1 x Sk 131072: 16 splits 3.99
  // TB/s, 32 splits 3.64). The persistent walk uses it too.
  static int choose_splits(long long tiles, int kv_blocks, int slots);
#endif

#if defined(__CUDACC_RTC__) || defined(__CUDACC__)
  // Masked plain grids (host sets lpt_heads only without splits): the hardware starts CTAs in
  // linear order, x fastest, so grid order runs one head's Q tiles, heavy to light, before the
  // next head's, and the last heads' heavy tiles start late and finish alone (the causal tail).
  // Remaps this CTA's (x, hy, b) to the longest-first order (x = 0 heaviest: TileWork::make
  // reverses it into the m block).
  __device__ __forceinline__ static void lpt_cta(int heads, int& x, int& hy, int& b) {
    const int m_blocks = static_cast<int>(gridDim.x), num_hy = static_cast<int>(gridDim.y);
    const int pairs = num_hy * static_cast<int>(gridDim.z);
    int pair;
    longest_first(x + m_blocks * (hy + num_hy * b), m_blocks, pairs, heads, x, pair);
    hy = pair % num_hy;
    b = pair / num_hy;
  }
#endif
};

// ---- Persistent walk ---------------------------------------------------------------------------
// grid = (min(#SMs, units), 1, 1); CTA x visits linear units t = unit(i, x) (i = 0, 1, ...;
// t < units), and every warp role of the CTA walks the same sequence. A unit is a whole tile or one
// KV split of a tile: no split, every tile in num_splits, or the split tail below (units() counts
// them). Tiles decode as a plain grid's CTA would: m block, then head, then batch:
//   unmasked:  m block fastest (the CTAs running at the same time share one head's K/V in L2);
//   masked:    longest-first within sections of p.lpt_heads pairs (GridWalk::longest_first; 0: one
//              section). Odd rounds run backwards (t = i * G + G-1-x): a CTA that took a heavy tile
//              in one round takes a light one in the next, so static striding over decreasing tile
//              weights stays balanced.
// Split tail (unmasked; split_tail()): tiles [0, p.split_from) run whole (split -1: they write O,
// not partials) and each tile from split_from on runs as num_splits units, split fastest. The whole
// tiles fill complete rounds, and the last partial round, which would leave most SMs idle, becomes
// num_splits-way KV splits that fa4_combine merges. split_from = 0: every tile split.
struct PersistentWalk {
  // Unit of CTA x (of `ctas`) in round `iter`; longest_first: odd rounds reversed.
  FA4_HOST_DEVICE static int unit(int iter, int x, int ctas, bool longest_first) {
    return iter * ctas + (longest_first && (iter & 1) ? ctas - 1 - x : x);
  }
  // Units of the walk: split_from whole tiles, then num_splits units per tile.
  FA4_HOST_DEVICE static int units(const FwdParams& p, int tiles) {
    return p.split_from + (tiles - p.split_from) * p.num_splits;
  }
  // Unit t's tile as (m, head, batch), m in grid order (longest_first: 0 = heaviest), and its
  // split: 0 .. num_splits-1, or -1 for a whole tile of a split-tail launch.
  FA4_HOST_DEVICE static void decode(const FwdParams& p, int t, bool longest_first, int& m, int& split, int& head,
                                     int& batch) {
    int hb;
    if (!longest_first) {
      int tile = t;
      split = p.num_splits > 1 ? -1 : 0;
      if (p.num_splits > 1 && t >= p.split_from) {
        const int j = t - p.split_from;
        tile = p.split_from + j / p.num_splits;
        split = j % p.num_splits;
      }
      m = tile % p.num_m_blocks;
      hb = tile / p.num_m_blocks;
    } else {  // every tile split alike (split_from 0), so t decodes as a plain grid's linear CTA
      const int xs = p.num_m_blocks * p.num_splits, nhb = p.num_q_heads * p.batch;
      const int heads = p.lpt_heads > 0 ? p.lpt_heads : nhb;
      int x;
      GridWalk::longest_first(t, xs, nhb, heads, x, hb);
      split = x % p.num_splits;
      m = x / p.num_splits;
    }
    head = hb % p.num_q_heads;
    batch = hb / p.num_q_heads;
  }

#if !defined(__CUDACC_RTC__)
  // Grid (min(sms, units), 1, 1); p.num_splits (automatic: GridWalk::choose_splits, else a split
  // tail for equal tiles), p.split_from / partial_row0 / partial_rows for a split tail, and
  // p.lpt_heads for masked launches (causal with equal lengths: balance()).
  static WalkPlan plan(const WalkInput& in, FwdParams& p);
  // Split tail of `tiles` equal Q tiles with `kv_blocks` KV tiles each on `sms` CTAs: the whole
  // rounds run whole tiles, and the last round's r = tiles % sms tiles, which would keep sms - r SMs
  // idle for a whole tile's time (3% of a 31-round launch), run as `splits` KV splits each, as many
  // as one round holds (splits * r <= sms) with no split left empty. splits 1: no tail (no partial
  // last round, or it is nearly full).
  struct SplitTail {
    long long from = 0;  // first split tile
    int splits = 1;
  };
  static SplitTail split_tail(long long tiles, int kv_blocks, int sms);
#endif
};

// ---- Stream-K walk -----------------------------------------------------------------------------
// (Tuning::persistent = 2, packed-GQA decode.) grid = (G, 1, 1), G <= #SMs; CTA x walks the
// segments of its unit range (common/segments.h), in order, and every warp role of the CTA walks
// the same sequence. Tiles decode as the plain grid does (m block fastest, then head (KV head when
// packed), then batch). A segment keeps its units' share of the tile's visible KV tiles; its slot
// is its index among the tile's segments.
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
  // `slots` is the partial slots per row (1: no partials, no combine). Throws LaunchError.
  struct Geometry {
    UnitSplit units;
    int ctas = 1;
    int slots = 1;
  };
  static Geometry geometry(long long tiles, int kv_blocks, int m_blocks, int requested, int sms);
  // Grid (ctas, 1, 1), p.tile_units / units_per_cta / units_extra; splits = slots.
  static WalkPlan plan(const WalkInput& in, FwdParams& p);
#endif
};

}  // namespace fa4
