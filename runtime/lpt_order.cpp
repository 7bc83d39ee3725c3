#include "runtime/lpt_order.hpp"

#include <algorithm>

namespace jit::detail {

double strided_balance(const std::vector<double>& weights, int pairs, int ctas, int heads) {
  const long long m_blocks = static_cast<long long>(weights.size());
  const long long tiles = m_blocks * pairs;
  if (tiles == 0 || ctas <= 0 || heads <= 0) return 1.0;
  std::vector<double> load(static_cast<std::size_t>(ctas), 0.0);
  double total = 0;
  for (long long t = 0; t < tiles; ++t) {
    // PersistentTiles::decode (masked): sections of `heads` pairs, the x-th heaviest tile of every
    // pair of a section before the (x+1)-th.
    const long long section = t / (heads * m_blocks), in_section = t - section * heads * m_blocks;
    const long long section_heads = std::min<long long>(heads, pairs - section * heads);
    const double w = weights[static_cast<std::size_t>(in_section / section_heads)];
    // PersistentTiles::unit: round t / ctas, odd rounds reversed.
    const long long round = t / ctas, pos = t % ctas;
    load[static_cast<std::size_t>(round & 1 ? ctas - 1 - pos : pos)] += w;
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

std::vector<double> causal_tile_weights(int seqlen_q, int seqlen_k, int bm, int bn, bool top_left) {
  std::vector<double> w;
  const int m_blocks = (seqlen_q + bm - 1) / bm;
  for (int m = m_blocks - 1; m >= 0; --m) {
    const int row_end = std::min(seqlen_q, (m + 1) * bm);  // the tile's last row + 1
    const int key_end = std::min(seqlen_k, top_left ? row_end : row_end + seqlen_k - seqlen_q);
    w.push_back((key_end > 0 ? (key_end + bn - 1) / bn : 0) + 0.5);
  }
  return w;
}

}  // namespace jit::detail
