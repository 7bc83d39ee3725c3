// The grid walk (one CTA per unit): its host plan, its decode (the longest-first order, which the
// persistent walk and its host simulation decode by too) and its device iterator GridTiles. The
// unit's work is TileWork::make(p) (common/tile_work.cuh). Shared pieces: common/walk_plan.h.
//   grid (m blocks * KV splits, heads (KV heads when packed), batch); masked unsplit grids run
//   longest-first over sections of p.lpt_heads (batch, head) pairs (lpt_cta).
#pragma once
#include "common/packed_rows.h"
#include "common/walk_plan.h"

#if !defined(__CUDACC_RTC__)
#include <algorithm>
#include <cmath>
#endif

namespace fa4 {

struct GridWalk {
  // Longest-first order over sections of `heads` (batch, head) pairs: linear position i of a walk
  // over `pairs` pairs of `xs` positions each (x fastest) -> (x, pair), x = 0 the heaviest. Within a
  // section, every pair's heaviest position comes before any pair's next one, while the section's
  // K/V stay in L2 for its other tiles. The plain grid's CTA order (hardware: x fastest), the
  // persistent walk's units and the host simulation (PersistentWalk::strided_balance) all decode by
  // this.
  FA4_HOST_DEVICE static void longest_first(int i, int xs, int pairs, int heads, int& x, int& pair) {
    const int section = i / (heads * xs), in_section = i - section * heads * xs;
    const int section_heads = walk_min(heads, pairs - section * heads);
    pair = section * heads + in_section % section_heads;
    x = in_section / section_heads;
  }

#if !defined(__CUDACC_RTC__)
  // Split count for `tiles` CTAs over `kv_blocks` KV tiles each, on `slots` CTA slots: 1 when the
  // grid already fills 80% of them, else the fewest splits whose slot fill is within 95% of the
  // best (FlashAttention's wave rule), each split keeping at least two KV tiles (small grids: one,
  // below), and none that saves
  // fewer than kMinSavedKvTiles (below). The caller passes
  // the SM count for the grid walk's contiguous 16-bit decode even where two CTAs fit an SM
  // (CompiledKernel::slots_per_sm): on an H200, 128 CTAs (one per SM) read K/V at 4.27 TB/s and 256
  // at 4.03 (B 8 x Sk 32768: 2 vs 4 splits; B 1 x Sk 131072: 16 splits 3.99 TB/s, 32 splits 3.64).
  // The persistent walk uses this rule too, over every CTA slot of its SMs.
  // A grid that stays within half the slots even at the most splits is bound by latency, not DRAM:
  // its time is the longest split's run of KV tiles, so it takes the fewest splits whose longest run
  // is the shortest possible (batch-1 decode at 4k keys and 2 KV heads: 32 splits of 2 tiles, where
  // the fill rule's 31 left runs of 3: 7.3 against 7.8 us per call in a CUDA graph at 1-2 KV heads,
  // docs/PERF.md run 66; at 4 KV heads, 128 CTAs, even runs were not faster). Where even one tile a
  // split stays within half the slots, runs of one: batch-1 decode at 4k keys and one KV head, 64
  // CTAs, 4-9% faster a call than 32 of 2 tiles (H200); at two KV heads 128 CTAs of one tile were 2%
  // slower than 64 of two (H100; CUDA graphs, run 114).
  // A split pays for itself only where it shortens the longest run of KV tiles by at least
  // kMinSavedKvTiles: the combine launch costs about what 7 KV tiles of decode take. H200, `fa4jit
  // bench`, 32 x 16/2 packed decode, d128 (docs/PERF.md run 89): 256-512 keys (4-8 tiles) split in
  // two 7.98-10.8 -> 11.9-13.4 us, 1024 (16 tiles, 8 saved) 16.5 either way; gpt-oss's speculative
  // rows under its 128-key window (4 tiles) 8.9 -> 13.9 us.
  static constexpr int kMinSavedKvTiles = 8;
  // The most splits the automatic rule picks (a caller's num_splits may go to kMaxSplits).
  static constexpr int kMaxAutoSplits = 128;
  static int choose_splits(long long tiles, int kv_blocks, int slots) {
    if (tiles <= 0 || slots <= 0 || tiles >= slots * 8LL / 10 || kv_blocks < kMinSavedKvTiles + 1) return 1;
    const int max_splits = std::min({kMaxAutoSplits, kv_blocks / 2, static_cast<int>(4LL * slots / tiles + 1)});
    const auto worth = [&](int s) { return s > 1 && kv_blocks - (kv_blocks + s - 1) / s >= kMinSavedKvTiles ? s : 1; };
    if (2 * tiles * max_splits <= slots) {
      if (2 * tiles * kv_blocks <= slots && kv_blocks <= kMaxAutoSplits) return worth(kv_blocks);
      const int run = (kv_blocks + max_splits - 1) / max_splits;
      return worth((kv_blocks + run - 1) / run);
    }
    auto fill = [&](int s) {
      const double waves = static_cast<double>(tiles * s) / slots;
      return waves / std::ceil(waves);
    };
    double best = 0;
    for (int s = 1; s <= max_splits; ++s) best = std::max(best, fill(s));
    for (int s = 1; s <= max_splits; ++s)
      if (fill(s) >= 0.95 * best) return worth(s);
    return 1;
  }
  // Automatic split count of the grid and persistent walks: none without known keys.
  static int auto_splits(const WalkInput& in) {
    return in.keys_known ? choose_splits(in.tiles(), in.kv_blocks, in.sms) : 1;
  }
  // Long-pole splits of a listed varlen walk (automatic splits only): a batch that holds both
  // sequences of at most pole_qmax queries (decode and speculative rows) and longer ones (prefill
  // chunks), a continuous-batching step. Each short sequence's one tile reads its whole KV cache
  // alone; unsplit, those tiles are the launch's long poles (48 decode rows of 4.1k-8.7k keys + 2
  // chunks of 2048 at 1 KV head: ~100 us, where every tile split 3 ways took 73 and the chunks'
  // tiles split too made 16 query heads 1.4x slower; docs/PERF.md run 80). So only the short
  // sequences split, into pieces of about twice the keys a chunk's heaviest tile walks under a
  // causal mask (2 max_seqlen_q, at least 16 KV tiles), at most kMaxSplits pieces and a scratch
  // within kPoleScratchBytes: a piece of 16 query rows reads its keys at a fraction of the time a
  // 64-row tile computes over as many (pieces of 3072-4096 keys were 7-12% faster than 2048 on the
  // zoo's 16/1, 10/2 and 14/2 steps; 1024 slower, 6144 faster at 16/1 only, one piece slowest: run 84).
  // A tile walks at most kv_blocks KV tiles (fewer than the sequence's under a sliding window's
  // band, ScheduleModel::kv_tiles): pieces count those keys, so a band within one piece splits
  // nothing (gpt-oss's 128-key window: 2-3 pieces of which all but one were empty, and a combine).
  // Returns the most pieces (1: no long-pole split) and the keys per piece.
  static constexpr long long kPoleScratchBytes = 256LL << 20;
  struct PoleSplit {
    int splits = 1, keys = 0;
  };
  static PoleSplit long_pole_split(const WalkInput& in) {
    PoleSplit ps;
    if (in.varlen_tiles <= 0 || in.requested_splits != 0 || in.pole_qmax <= 0 || in.max_seqlen_q <= in.pole_qmax ||
        in.max_seqlen_k <= 0)
      return ps;
    // In 64 bits: both lengths may be the caller's hints, any int. More than one piece only where
    // keys < max_seqlen_k, so the keys a piece holds then fit an int.
    const long long keys = std::max(16LL * in.bn, 2LL * std::min(in.max_seqlen_q, in.max_seqlen_k));
    const long long walked = std::min<long long>(in.max_seqlen_k, 1LL * in.kv_blocks * in.bn);
    int s = static_cast<int>(std::min<long long>(kMaxSplits, (walked + keys - 1) / keys));
    const long long rows = 1LL * in.batch * in.heads * in.pole_head_rows;
    while (s >= 2 && rows * (1LL * s * (in.value_depth + 1) + 2) * 4 > kPoleScratchBytes) --s;
    if (s >= 2) ps = PoleSplit{s, static_cast<int>(keys)};
    return ps;
  }
  // The short sequences a long-pole split takes (WalkInput::pole_qmax, pole_head_rows): the most
  // queries, at most kPoleMaxQueries (decode and speculative rows), whose packed rows fit one BM-row
  // Q tile, and those rows; {0, 0} when not even one query's rows fit.
  static constexpr int kPoleMaxQueries = 8;
  struct PoleRows {
    int qmax = 0, head_rows = 0;
  };
  static PoleRows pole_rows(int pack, int span, int bm) {
    for (int q = kPoleMaxQueries; q >= 1; --q) {
      const long long rows = packed_row_count(q, pack, span);
      if (rows <= bm) return PoleRows{q, static_cast<int>(rows)};
    }
    return PoleRows{};
  }
  // Grid (m_blocks * splits, heads, batch); p.num_splits (automatic: choose_splits) and, for
  // unsplit masked launches, p.lpt_heads. A varlen grid walk (in.varlen_tiles): grid
  // (varlen_tiles * splits, heads, 1), every sequence's tiles listed in x (TileWork::locate_varlen).
  static WalkPlan plan(const WalkInput& in, FwdParams& p) {
    WalkPlan w;
    const bool listed = in.varlen_tiles > 0;
    const PoleSplit poles = long_pole_split(in);
    if (poles.splits > 1) {
      // Every short sequence lists up to splits pieces in place of its one tile.
      w.splits = poles.splits;
      w.slots = true;
      w.grid[0] = static_cast<unsigned>(in.varlen_tiles + 1LL * in.batch * (poles.splits - 1));
      p.split_qmax = in.pole_qmax;
      p.split_keys = poles.keys;
      p.split_head_rows = in.pole_head_rows;
      p.split_seq_rows = in.pole_head_rows * in.heads;
      p.partial_row0 = 0;
      p.partial_rows = in.batch * p.split_seq_rows;
    } else {
      w.splits = in.requested_splits > 0 ? in.requested_splits : auto_splits(in);
      w.grid[0] = static_cast<unsigned>(listed ? in.varlen_tiles : in.m_blocks) * static_cast<unsigned>(w.splits);
    }
    w.grid[1] = static_cast<unsigned>(in.heads);
    w.grid[2] = listed ? 1u : static_cast<unsigned>(in.batch);
    p.num_splits = w.splits;
    p.varlen_tiles = in.varlen_tiles;
    // The longest-first order assumes gridDim.x is the m blocks and z the batch (lpt_cta): unsplit
    // launches of the batch grid only.
    if (w.splits == 1 && !listed) p.lpt_heads = in.lpt_heads;
    return w;
  }
  // The varlen grid walk's tile count: an upper bound of sum over sequences of ceil(rows_b / bm),
  // from what the host knows, total_q (the packed Q tensor's rows) and the batch, never above the
  // batch grid's batch * m_blocks. rows_b = packed_row_count(seqlen_b, pack, span) is at most
  // seqlen_b * span / (span / pack) (a padded span of span / pack queries), seqlen_b * pack when
  // dense, so the sum of the ceilings is at most (those rows over total_q) / bm + batch.
  static int varlen_tile_bound(long long total_q, int batch, int pack, int span, int bm, int m_blocks) {
    const long long rows = packed_dense(pack, span) ? total_q * pack
                                                    : (total_q * span + span / pack - 1) / (span / pack);
    const long long bound = (rows + bm - 1) / bm + batch;
    return static_cast<int>(std::min<long long>(bound, 1LL * batch * m_blocks));
  }
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

#if defined(__CUDACC_RTC__) || defined(__CUDACC__)
// The grid walk's device iteration: the CTA's one unit, whose work the kernel builds before its
// roles split (TileWork::make(p), so a CTA without Q rows returns before any barrier exists). The
// same interface as PersistentTiles and SegmentTiles, so one role loop serves every walk: valid()
// holds for iter 0 only, which the compiler folds (the loop runs exactly once).
template <class Work>
struct GridTiles {
  static constexpr bool kPersistent = false;
  static constexpr bool kDynamic = false;  // DynamicTiles: units claimed at run time
  const Work& w;
  int iter;
  __device__ __forceinline__ bool valid(const FwdParams&, int = 0) const { return iter == 0; }
  __device__ __forceinline__ void advance() { ++iter; }
  // PersistentTiles::loop_zero's opaque 0: the one unit has no bounds to recompute, so a plain 0.
  __device__ __forceinline__ static int loop_zero() { return 0; }
  template <int kBM, int kBN, int kPack = 1, bool kBottom = false, int kSpan = 0>
  __device__ __forceinline__ const Work& work(const FwdParams&, int = 0) const { return w; }
};
#endif

}  // namespace fa4
