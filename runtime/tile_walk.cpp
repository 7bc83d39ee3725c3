// Host plans of the tile walks (templates/common/tile_walk.h): the launch grid and the FwdParams
// fields each walk reads on the device.
#include "common/tile_walk.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include <fmt/format.h>

#include "fa4jit/errors.hpp"

namespace fa4 {

namespace {

// Automatic split count of the grid and persistent walks: none without known keys.
int auto_splits(const WalkInput& in) {
  return in.keys_known ? GridWalk::choose_splits(in.tiles(), in.kv_blocks, in.sms) : 1;
}

}  // namespace

int GridWalk::choose_splits(long long tiles, int kv_blocks, int slots) {
  if (tiles <= 0 || slots <= 0 || tiles >= slots * 8LL / 10 || kv_blocks < 4) return 1;
  const int max_splits = std::min({128, kv_blocks / 2, static_cast<int>(4LL * slots / tiles + 1)});
  auto fill = [&](int s) {
    const double waves = static_cast<double>(tiles * s) / slots;
    return waves / std::ceil(waves);
  };
  double best = 0;
  for (int s = 1; s <= max_splits; ++s) best = std::max(best, fill(s));
  for (int s = 1; s <= max_splits; ++s)
    if (fill(s) >= 0.95 * best) return s;
  return 1;
}

WalkPlan GridWalk::plan(const WalkInput& in, FwdParams& p) {
  WalkPlan w;
  w.splits = in.requested_splits > 0 ? in.requested_splits : auto_splits(in);
  w.grid[0] = static_cast<unsigned>(in.m_blocks) * static_cast<unsigned>(w.splits);
  w.grid[1] = static_cast<unsigned>(in.heads);
  w.grid[2] = static_cast<unsigned>(in.batch);
  p.num_splits = w.splits;
  // The longest-first order assumes gridDim.x is the m blocks (lpt_cta): unsplit launches only.
  if (w.splits == 1) p.lpt_heads = in.lpt_heads;
  return w;
}

PersistentWalk::SplitTail PersistentWalk::split_tail(long long tiles, int kv_blocks, int sms) {
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

WalkPlan PersistentWalk::plan(const WalkInput& in, FwdParams& p) {
  WalkPlan w;
  const long long tiles = in.tiles();
  w.splits = in.requested_splits;
  if (w.splits == 0) {
    w.splits = auto_splits(in);
    // Equal tiles: a partial last round idles SMs, so it is split (the tail's LSE rows are the
    // partial slices': tiles map to rows in order).
    if (w.splits == 1 && in.equal_tiles) {
      const SplitTail tail = split_tail(tiles, in.kv_blocks, in.sms);
      if (tail.splits > 1) {
        w.splits = tail.splits;
        p.split_from = static_cast<int>(tail.from);
        p.partial_row0 = static_cast<int>(tail.from / in.m_blocks * in.max_seqlen_q + tail.from % in.m_blocks * in.bm);
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
    // (runtime/lpt_order.hpp), or, where none does, one CTA per unit. Varlen without the caller's
    // max_seqlen_k keeps the L2 rule: its tiles' weights are not known here.
    if (in.causal_known_lengths && in.balance) {
      const LptSections s = in.balance(static_cast<int>(w.grid[0]), in.lpt_heads);
      p.lpt_heads = s.heads;
      if (s.one_unit_per_cta) w.grid[0] = static_cast<unsigned>(std::max(1LL, units));
    }
  }
  return w;
}

StreamKWalk::Geometry StreamKWalk::geometry(long long tiles, int kv_blocks, int m_blocks, int requested, int sms) {
  if (tiles <= 0 || tiles > INT32_MAX)
    throw jit::LaunchError(fmt::format("launch: {} Q tiles for a stream-K kernel", tiles));
  int units = requested > 0 ? requested : (m_blocks == 1 && kv_blocks >= 2 ? kv_blocks : 1);
  if (tiles * units > INT32_MAX) {
    if (requested > 0)
      throw jit::LaunchError(fmt::format("launch: num_splits = {} over {} tiles is too large", requested, tiles));
    units = 1;
  }
  Geometry g;
  g.ctas = static_cast<int>(std::min<long long>({tiles * units, std::max(1, sms), kMaxSplits}));
  g.units = UnitSplit::make(static_cast<int>(tiles), units, g.ctas);
  g.slots = units == 1 ? 1 : g.units.max_segments(g.ctas);
  return g;
}

WalkPlan StreamKWalk::plan(const WalkInput& in, FwdParams& p) {
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

}  // namespace fa4
