#include "runtime/lpt_order.hpp"

#include <algorithm>
#include <cstdint>

#include "common/tile_walk.h"

namespace jit::detail {

double strided_balance(const std::vector<double>& weights, int pairs, int ctas, int heads) {
  const long long m_blocks = static_cast<long long>(weights.size());
  const long long tiles = m_blocks * pairs;
  if (tiles == 0 || ctas <= 0 || heads <= 0 || tiles > INT32_MAX) return 1.0;
  // The walk's own parameters: pairs as heads of one batch, unsplit, sections of `heads`.
  fa4::FwdParams p{};
  p.num_m_blocks = static_cast<int>(m_blocks);
  p.num_q_heads = pairs;
  p.batch = 1;
  p.num_splits = 1;
  p.lpt_heads = heads;
  const int units = fa4::PersistentWalk::units(p, static_cast<int>(tiles));
  std::vector<double> load(static_cast<std::size_t>(ctas), 0.0);
  double total = 0;
  // Each CTA's units exactly as PersistentTiles walks them, decoded as the kernel decodes them.
  for (int x = 0; x < ctas; ++x)
    for (int i = 0;; ++i) {
      const int t = fa4::PersistentWalk::unit(i, x, ctas, true);
      if (t >= units) break;  // units grow with i: later rounds are past the end too
      int m, split, head, batch;
      fa4::PersistentWalk::decode(p, t, true, m, split, head, batch);
      const double w = weights[static_cast<std::size_t>(m)];  // m: 0 = the heaviest tile
      load[static_cast<std::size_t>(x)] += w;
      total += w;
    }
  const long long used = std::min<long long>(ctas, tiles);
  return total / used / *std::max_element(load.begin(), load.end());
}

int balanced_section_heads(const std::vector<double>& weights, int pairs, int ctas, int max_heads) {
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

fa4::LptSections plan_lpt_sections(const std::vector<double>& weights, int pairs, int ctas, int max_heads) {
  const int heads = balanced_section_heads(weights, pairs, ctas, max_heads);
  if (strided_balance(weights, pairs, ctas, heads) >= kMinSectionBalance) return {heads, false};
  return {std::max(1, std::min(max_heads, pairs)), true};
}

std::vector<double> causal_tile_weights(int seqlen_q, int seqlen_k, int bm, int bn, bool top_left, bool bottom_tiles) {
  std::vector<double> w;
  const int m_blocks = (seqlen_q + bm - 1) / bm;
  const int pad = bottom_tiles ? m_blocks * bm - seqlen_q : 0;
  for (int m = m_blocks - 1; m >= 0; --m) {
    const int row_end = std::min(seqlen_q, (m + 1) * bm - pad);  // the tile's last row + 1
    const int key_end = std::min(seqlen_k, top_left ? row_end : row_end + seqlen_k - seqlen_q);
    w.push_back((key_end > 0 ? (key_end + bn - 1) / bn : 0) + 0.5);
  }
  return w;
}

}  // namespace jit::detail
