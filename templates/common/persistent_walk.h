// The persistent walk: its host plan (grid, KV splits, split tail, and the longest-first order's
// section size: the L2 rule and the simulated balance of causal launches), its decode and its device
// iterator PersistentTiles. Shared pieces: common/walk_plan.h.
//
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
//
// Section size of the longest-first order (masked launches). Tiles run in sections of `heads`
// (batch, head) pairs, heaviest Q tile first within a section, and CTA x takes unit x of every
// round (odd rounds reversed). The sections are at most as many pairs as keep their K/V within half
// the L2 (l2_section_heads; the grid walk's masked order uses the same bound). That static striding
// only balances when each round's tiles weigh about the same; a section's heavy-to-light sawtooth
// whose period beats against the round leaves some CTAs mostly heavy tiles. Measured on an H200
// (causal, d128): S 2048 with 25 pairs per section ran at 509 TFLOP/s against 550 with 12; S 16384
// with 2 pairs at 477 against 616 with 3 (docs/PERF.md run 16). So for causal launches of known
// lengths the section size is chosen by simulating the walk (plan_sections).
#pragma once
#include "common/grid_walk.h"

#if !defined(__CUDACC_RTC__)
#include <algorithm>
#include <cstdint>
#include <vector>
#endif

namespace fa4 {

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
  // Split tail of `tiles` equal Q tiles with `kv_blocks` KV tiles each on `sms` CTAs: the whole
  // rounds run whole tiles, and the last round's r = tiles % sms tiles, which would keep sms - r SMs
  // idle for a whole tile's time (3% of a 31-round launch), run as `splits` KV splits each, as many
  // as one round holds (splits * r <= sms) with no split left empty. splits 1: no tail (no partial
  // last round, or it is nearly full).
  struct SplitTail {
    long long from = 0;  // first split tile
    int splits = 1;
  };
  static SplitTail split_tail(long long tiles, int kv_blocks, int sms) {
    SplitTail tail;
    if (sms <= 0 || tiles < sms || kv_blocks < 2) return tail;
    const long long last_round = tiles % sms;
    if (last_round == 0) return tail;
    int splits = static_cast<int>(std::min<long long>({sms / last_round, kv_blocks, kMaxSplits}));
    if (splits < 2) return tail;
    const int per_split = (kv_blocks + splits - 1) / splits;
    tail.splits = (kv_blocks + per_split - 1) / per_split;  // TileWork::keep_share leaves none empty
    tail.from = tiles - last_round;
    return tail;
  }

  // Grid (min(sms, units), 1, 1); p.num_splits (automatic: GridWalk::choose_splits, else a split
  // tail for equal tiles), p.split_from / partial_row0 / partial_rows for a split tail, and
  // p.lpt_heads for masked launches (causal with equal lengths: in.balance, plan_sections).
  static WalkPlan plan(const WalkInput& in, FwdParams& p) {
    WalkPlan w;
    const long long tiles = in.tiles();
    w.splits = in.requested_splits;
    if (w.splits == 0) {
      w.splits = GridWalk::auto_splits(in);
      // Equal tiles: a partial last round idles SMs, so it is split (the tail's LSE rows are the
      // partial slices': tiles map to rows in order).
      if (w.splits == 1 && in.equal_tiles) {
        const SplitTail tail = split_tail(tiles, in.kv_blocks, in.sms);
        if (tail.splits > 1) {
          w.splits = tail.splits;
          p.split_from = static_cast<int>(tail.from);
          p.partial_row0 =
              static_cast<int>(tail.from / in.m_blocks * in.max_seqlen_q + tail.from % in.m_blocks * in.bm);
          p.partial_rows -= p.partial_row0;
        }
      }
    }
    p.num_splits = w.splits;
    // One CTA per SM walks every unit: a whole tile or one KV split of a tile.
    const long long units = p.split_from + (tiles - p.split_from) * w.splits;
    w.grid[0] = static_cast<unsigned>(std::max(1LL, std::min<long long>(in.sms, units)));
    if (w.splits == 1 && in.lpt_heads > 0) {
      p.lpt_heads = in.lpt_heads;
      // Causal batches of known lengths: the section size whose static walk balances
      // (plan_sections), or, where none does, one CTA per unit. Varlen without the caller's
      // max_seqlen_k keeps the L2 rule: its tiles' weights are not known here.
      if (in.causal_known_lengths && in.balance) {
        const LptSections s = in.balance(static_cast<int>(w.grid[0]), in.lpt_heads);
        p.lpt_heads = s.heads;
        if (s.one_unit_per_cta) w.grid[0] = static_cast<unsigned>(std::max(1LL, units));
      }
    }
    return w;
  }

  // ---- The longest-first order's sections (host) ----
  // The L2 rule: (batch, head) pairs per section, as many as keep their K/V within half of
  // `l2_bytes`, so a section's later (lighter) tiles still find them there. `keys` per sequence
  // (varlen without max_seqlen_k: the longest query length stands in), `kv_bytes_per_key` = depth
  // * 2 (K and V) * element bytes; pairs of one KV head share its K/V: per pair, the KV head's bytes
  // over the `sharing` pairs that share it (grid heads / KV heads: q heads, packed CTAs (1 per KV
  // head), or a sliced group's slices). Used by the grid walk's masked order too.
  static int l2_section_heads(long long l2_bytes, long long keys, long long kv_bytes_per_key, long long sharing) {
    const long long bytes_per_pair = std::max<long long>(1, keys * kv_bytes_per_key / std::max<long long>(1, sharing));
    return static_cast<int>(std::clamp<long long>(l2_bytes / 2 / bytes_per_pair, 1, 1 << 20));
  }

  // Balance of the static walk: weights[x] is the cost of a pair's x-th heaviest Q tile; `pairs`
  // (batch, head) pairs in sections of `heads`, walked by `ctas` CTAs through the walk's own unit
  // and decode rules (no KV splits). Mean CTA load over the largest (1: perfect).
  static double strided_balance(const std::vector<double>& weights, int pairs, int ctas, int heads) {
    const long long m_blocks = static_cast<long long>(weights.size());
    const long long tiles = m_blocks * pairs;
    if (tiles == 0 || ctas <= 0 || heads <= 0 || tiles > INT32_MAX) return 1.0;
    // The walk's own parameters: pairs as heads of one batch, unsplit, sections of `heads`.
    FwdParams p{};
    p.num_m_blocks = static_cast<int>(m_blocks);
    p.num_q_heads = pairs;
    p.batch = 1;
    p.num_splits = 1;
    p.lpt_heads = heads;
    const int n = units(p, static_cast<int>(tiles));
    std::vector<double> load(static_cast<std::size_t>(ctas), 0.0);
    double total = 0;
    // Each CTA's units exactly as PersistentTiles walks them, decoded as the kernel decodes them.
    for (int x = 0; x < ctas; ++x)
      for (int i = 0;; ++i) {
        const int t = unit(i, x, ctas, true);
        if (t >= n) break;  // units grow with i: later rounds are past the end too
        int m, split, head, batch;
        decode(p, t, true, m, split, head, batch);
        const double w = weights[static_cast<std::size_t>(m)];  // m: 0 = the heaviest tile
        load[static_cast<std::size_t>(x)] += w;
        total += w;
      }
    const long long used = std::min<long long>(ctas, tiles);
    return total / used / *std::max_element(load.begin(), load.end());
  }

  // The section size in [1, max_heads] (max_heads: the most pairs whose K/V fit the L2 budget) with
  // the best strided_balance, over every size up to 64 and max_heads itself; sizes within 0.5% of
  // the best count as equal, and the largest of those wins (the order the L2 budget alone would give).
  static int balanced_section_heads(const std::vector<double>& weights, int pairs, int ctas, int max_heads) {
    const int top = std::max(1, std::min(max_heads, pairs));
    // Candidates: every size up to 64, and the largest (the cost stays at 65 walks of the tiles).
    std::vector<int> sizes;
    for (int h = 1; h <= std::min(top, 64); ++h) sizes.push_back(h);
    if (top > 64) sizes.push_back(top);
    std::vector<double> balance;
    for (int h : sizes) balance.push_back(strided_balance(weights, pairs, ctas, h));
    const double best = *std::max_element(balance.begin(), balance.end());
    std::size_t pick = sizes.size() - 1;
    while (balance[pick] < best - 0.005) --pick;
    return sizes[pick];
  }

  // The sections: balanced_section_heads where the static walk balances to at least
  // kMinSectionBalance; else sections of max_heads with one CTA per unit (the grid walk's order,
  // balanced by the hardware's CTA dispatch). Measured on an H100, causal d256: S 16384, 16 pairs,
  // an L2 budget of one pair balances 0.65 and ran 0.72x the grid walk; all 16 pairs per section
  // balance 0.998 but, their K/V no longer in the L2, still ran 0.93x (docs/PERF.md run 40).
  static constexpr double kMinSectionBalance = 0.9;
  static LptSections plan_sections(const std::vector<double>& weights, int pairs, int ctas, int max_heads) {
    const int heads = balanced_section_heads(weights, pairs, ctas, max_heads);
    if (strided_balance(weights, pairs, ctas, heads) >= kMinSectionBalance) return {heads, false};
    return {std::max(1, std::min(max_heads, pairs)), true};
  }

  // Causal Q tile costs, heaviest first: visible KV tiles of each BM-row tile (bottom-right
  // alignment unless top_left), plus half a tile for its prologue and epilogue. bottom_tiles: the
  // tiles end at the last query row (BackendPolicy::bottom_q_tiles), so a partial tile is the lightest.
  static std::vector<double> causal_tile_weights(int seqlen_q, int seqlen_k, int bm, int bn, bool top_left,
                                                 bool bottom_tiles = false) {
    // In 64 bits: seqlen_k may be the caller's max_seqlen_k hint, any int.
    std::vector<double> w;
    const long long sq = seqlen_q, sk = seqlen_k;
    const long long m_blocks = (sq + bm - 1) / bm;
    const long long pad = bottom_tiles ? m_blocks * bm - sq : 0;
    for (long long m = m_blocks - 1; m >= 0; --m) {
      const long long row_end = std::min(sq, (m + 1) * bm - pad);  // the tile's last row + 1
      const long long key_end = std::min(sk, top_left ? row_end : row_end + sk - sq);
      w.push_back(static_cast<double>(key_end > 0 ? (key_end + bn - 1) / bn : 0) + 0.5);
    }
    return w;
  }
#endif
};

}  // namespace fa4

#if defined(__CUDACC_RTC__) || defined(__CUDACC__)
#include "common/tile_work.cuh"

namespace fa4 {

// The persistent walk's device iteration: CTA x visits units PersistentWalk::unit(i, x, gridDim.x)
// for i = 0, 1, ... Only the iteration count i is carried (one register): the unit is recomputed
// from it, and so are the per-tile barrier phases. A decoded tile may have no Q rows (varlen:
// m_block * kBM >= seqlen_q of its batch): TileWork::valid is false; every role must treat it
// identically.
template <class Mask>
struct PersistentTiles : PersistentWalk {
  static constexpr bool kPersistent = true;
  static constexpr bool kDynamic = false;
  int iter;  // units of this CTA before the current one

  __device__ __forceinline__ static PersistentTiles make() { return PersistentTiles{{}, 0}; }
  // The opaque 0 a role's loop passes to valid() and work(): the walk's bounds (unit count, grid
  // size) are recomputed per tile from it rather than held across the loop (opaque_u32).
  __device__ __forceinline__ static int loop_zero() { return static_cast<int>(opaque_u32(0u)); }
  // zero (here and in decode, work): an opaque 0 from a caller short of registers, so the grid size
  // is re-read per tile instead of held across the walk (the FP8 V transposers, at 32 registers).
  __device__ __forceinline__ int unit(int zero = 0) const {
    return PersistentWalk::unit(iter, static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x) + zero, !Mask::kIsNone);
  }
  __device__ __forceinline__ bool valid(const FwdParams& p) const { return valid(p, 0); }
  __device__ __forceinline__ bool valid(const FwdParams& p, int zero) const {
    return in_walk(p, zero, [&] { return unit(); });
  }
  // Whether the unit unit_of() gives is one of the walk's. zero: an opaque 0 produced inside the
  // loop, so the compiler recomputes the unit count from the parameters instead of hoisting it into
  // a register that stays live across the loop. The unit is taken after the count (the order the
  // kernels' SASS was measured with: taken first, ptxas inverts the branches and renames registers).
  template <class UnitOf>
  __device__ __forceinline__ static bool in_walk(const FwdParams& p, int zero, UnitOf&& unit_of) {
    const int tiles = (p.num_m_blocks + zero) * p.num_q_heads * p.batch;
    return unit_of() < units(p, tiles);
  }
  __device__ __forceinline__ void advance() { ++iter; }
  __device__ __forceinline__ void decode(const FwdParams& p, int& m, int& split, int& head, int& batch,
                                         int zero = 0) const {
    PersistentWalk::decode(p, unit(zero), !Mask::kIsNone, m, split, head, batch);
  }
  template <int kBM, int kBN, int kPack = 1, bool kBottom = false, int kSpan = 0>
  __device__ __forceinline__ TileWork<kBM, kBN, Mask, kPack, kBottom, kSpan> work(const FwdParams& p, int zero = 0) const {
    int m, split, h, b;
    decode(p, m, split, h, b, zero);
    return work_of<kBM, kBN, kPack, kBottom, kSpan>(p, m, split, h, b);
  }
  // The m block of walk-order m: masked walks run the last (heaviest) Q tile first.
  __device__ __forceinline__ static int m_block_of(const FwdParams& p, int m) {
    return Mask::kIsNone ? m : p.num_m_blocks - 1 - m;
  }
  // The work of decoded unit (m, split, h, b): m in walk order, split as decode() gives it.
  template <int kBM, int kBN, int kPack, bool kBottom, int kSpan>
  __device__ __forceinline__ static TileWork<kBM, kBN, Mask, kPack, kBottom, kSpan> work_of(const FwdParams& p, int m,
                                                                                          int split, int h, int b) {
    TileWork<kBM, kBN, Mask, kPack, kBottom, kSpan> w =
        TileWork<kBM, kBN, Mask, kPack, kBottom, kSpan>::make(p, m_block_of(p, m), h * kPack, b);
    w.split = split;
    if (split >= 0 && p.num_splits > 1) w.keep_share(split, split + 1, p.num_splits);
    return w;
  }
  // The producer's interface shared with DynamicTiles: nothing to claim here.
  __device__ __forceinline__ void advance(int) { ++iter; }
};

// What the producer hands a consumer warpgroup per tile (Barriers::unit): the unit and its KV tiles
// [n_begin, n_end) as the producer's TileWork has them (its split's share), so the consumers' walk
// reads no tile map before its first tile (the static walk's consumers scan it while Q loads).
struct alignas(16) HandedUnit {
  int t, n_begin, n_end, unused;
};

// The dynamic persistent walk (Config::kPersistent 3, sm90a): PersistentTiles's units in its order
// (decode, longest-first when masked), handed out at run time instead of striped. CTA x starts at
// unit x; the producer claims the CTA's next unit from the launch's counter (p.tile_counter, zeroed
// before the launch: unit gridDim.x + the claims before it; a launch without one strides as
// PersistentTiles does, claim()) once a tile's loads are issued (the
// consumers are a few stages behind), and hands every unit to the consumers in shared memory
// with the tile's Q (Barriers::unit, written before q_full's arrival, which releases it; a unit
// past the end, with a plain arrival, ends their walk). The static stride balances only tiles
// whose weights follow the order (causal); a custom mask's tile map makes them uneven (a document
// mask's Q tiles see 1 to 15 KV tiles), where the static walk ran 17% slower than the grid's
// hardware dispatch (docs/PERF.md run 75). The claim's latency passes while the producer waits for
// a free stage; CTAs still run neighbouring tiles together (K/V in L2).
template <class Mask>
struct DynamicTiles : PersistentWalk {
  static constexpr bool kPersistent = true;
  static constexpr bool kDynamic = true;
  int iter;  // units of this CTA before the current one (the barrier phases)
  int t;     // the current unit: the producer's claim, or what the consumers read from Barriers::unit
  int n_begin, n_end;  // the consumers': the unit's KV tiles as handed

  __device__ __forceinline__ static DynamicTiles make() {
    return DynamicTiles{{}, 0, static_cast<int>(blockIdx.x), 0, 0};
  }
  // The consumers' copy of what the producer handed.
  __device__ __forceinline__ void take(const HandedUnit& u) {
    t = u.t;
    n_begin = u.n_begin;
    n_end = u.n_end;
  }
  template <class Work>
  __device__ __forceinline__ HandedUnit hand(const Work& w) const {
    return {t, w.n_begin, w.n_end, 0};
  }
  __device__ __forceinline__ static int loop_zero() { return PersistentTiles<Mask>::loop_zero(); }
  __device__ __forceinline__ bool valid(const FwdParams& p, int zero = 0) const {
    return PersistentTiles<Mask>::in_walk(p, zero, [&] { return t; });
  }
  // The unit after the current one, claimed by the producer (kWholeWarp: every lane of a gathering
  // warp runs the walk; lane 0 claims and the warp shares it). Without a counter (the host's
  // ScheduleModel::static_order: a built-in mask over equal lengths, whose tiles weigh as the order
  // says) the static walk's next unit, as PersistentTiles strides: no memset, no atomics.
  // With one, units without Q rows (a varlen batch's units past a shorter sequence's last tile: the
  // walk counts every sequence at the longest, most of the units of an uneven batch) are claimed
  // past here, so only units with Q rows and the end reach the consumers: handed, each would cost
  // a Q handshake, during which the producer issues no loads for the next real tile. H200, `fa4jit
  // bench`, the zoo's batch of 7000 to 100 queries (docs/PERF.md run 94): gpt-oss d64 under its
  // 128-key window 64/8 heads 0.379 -> 0.345 ms, 16/2 0.104 -> 0.093; DeepSeek-V3 prefill (d192,
  // V 128, causal) 128 heads 4.95 -> 4.82.
  template <int kBM, bool kWholeWarp = false>
  __device__ __forceinline__ int claim(const FwdParams& p) const {
    if (p.tile_counter == nullptr)
      return PersistentWalk::unit(iter + 1, static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x), !Mask::kIsNone);
    // in_walk's unit count, held across the loop (in_walk itself here spilled 8 B more in the d128
    // snippet kernel's 24-register producer).
    const int end = units(p, p.num_m_blocks * p.num_q_heads * p.batch);
    int next = 0;
    do {
      if (!kWholeWarp || threadIdx.x % 32 == 0) next = static_cast<int>(gridDim.x) + atomicAdd(p.tile_counter, 1);
      if constexpr (kWholeWarp) next = __shfl_sync(0xffffffffu, next, 0);
    } while (next < end && !has_q_rows<kBM>(p, next));
    return next;
  }
  // Whether unit t's tile holds Q rows: its m block below its sequence's ceil(seqlen_q / kBM) (the
  // dynamic walk runs unpacked; TileWork::finish_rows' test, bottom-aligned tiles or not).
  template <int kBM>
  __device__ __forceinline__ static bool has_q_rows(const FwdParams& p, int t) {
    if (p.cu_seqlens_q == nullptr) return true;
    int m, split, h, b;
    PersistentWalk::decode(p, t, !Mask::kIsNone, m, split, h, b);
    return PersistentTiles<Mask>::m_block_of(p, m) * kBM < p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b];
  }
  __device__ __forceinline__ void advance(int next) {  // the producer
    ++iter;
    t = next;
  }
  __device__ __forceinline__ void advance() { ++iter; }  // the consumers (t: read per tile)
  // The producer's work of unit t (its KV range from the mask and the tile map).
  template <int kBM, int kBN, int kPack = 1, bool kBottom = false, int kSpan = 0>
  __device__ __forceinline__ TileWork<kBM, kBN, Mask, kPack, kBottom, kSpan> work(const FwdParams& p, int = 0) const {
    int m, split, h, b;
    PersistentWalk::decode(p, t, !Mask::kIsNone, m, split, h, b);
    return PersistentTiles<Mask>::template work_of<kBM, kBN, kPack, kBottom, kSpan>(p, m, split, h, b);
  }
  // The consumers' work of the handed unit (take()): its KV range as handed.
  template <int kBM, int kBN, int kPack = 1, bool kBottom = false, int kSpan = 0>
  __device__ __forceinline__ TileWork<kBM, kBN, Mask, kPack, kBottom, kSpan> handed_work(const FwdParams& p) const {
    int m, split, h, b;
    PersistentWalk::decode(p, t, !Mask::kIsNone, m, split, h, b);
    TileWork<kBM, kBN, Mask, kPack, kBottom, kSpan> w = TileWork<kBM, kBN, Mask, kPack, kBottom, kSpan>::make(
        p, PersistentTiles<Mask>::m_block_of(p, m), h * kPack, b, n_begin, n_end);
    w.split = split;
    return w;
  }
};

}  // namespace fa4
#endif
