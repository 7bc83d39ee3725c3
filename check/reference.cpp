#include "check/reference.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <thread>

namespace jit::testing {

namespace {

long long floor_div(long long a, long long b) { return (a >= 0 ? a : a - b + 1) / b; }

}  // namespace

std::function<bool(int, int, int, int)> reference_mask(const Mask& m, int sq, int sk, int wl, int wr, int chunk,
                                                       int prefix) {
  const long long off = m.top_left ? 0 : static_cast<long long>(sk) - sq;
  if (m.prefix && prefix > 0) {  // keys below the prefix are visible to every query, besides the band
    Mask band = m;
    band.prefix = false;
    auto f = reference_mask(band, sq, sk, wl, wr, chunk);
    return [f, prefix](int b, int h, int q, int k) { return k < prefix || f(b, h, q, k); };
  }
  switch (m.kind) {
    case Mask::Kind::none: return [](int, int, int, int) { return true; };
    case Mask::Kind::causal: return [off](int, int, int q, int k) { return k <= q + off; };
    case Mask::Kind::sliding_window:
      return [off, wl, wr](int, int, int q, int k) {
        const long long d = k - q - off;
        return (wl < 0 || d >= -wl) && (wr < 0 || d <= wr);
      };
    case Mask::Kind::chunked:
      return [off, chunk](int, int, int q, int k) { return floor_div(q + off, chunk) == floor_div(k, chunk); };
    case Mask::Kind::all_of:
    case Mask::Kind::any_of: {
      std::vector<std::function<bool(int, int, int, int)>> parts;
      for (const Mask& c : m.children) parts.push_back(reference_mask(c, sq, sk, wl, wr, chunk, prefix));
      const bool all = m.kind == Mask::Kind::all_of;
      return [parts, all](int b, int h, int q, int k) {
        for (const auto& f : parts)
          if (f(b, h, q, k) != all) return !all;
        return all;
      };
    }
    case Mask::Kind::custom:  // the test supplies its own (CheckCase::custom_visible)
      throw std::invalid_argument(
          "reference: a custom mask snippet has no host reference; set CheckCase::custom_visible");
  }
  return {};
}

Reference reference_attention(const Problem& p) {
  const int B = p.batch, Sq = p.seqlen_q, Sk = p.seqlen_k, Hq = p.num_q_heads, Hkv = p.num_kv_heads, D = p.depth;
  const int Dv = p.depth_v ? p.depth_v : D;
  const int group = Hq / Hkv;
  // V's rows: their own tensor (row stride Dv), or K's rows read to Dv (latent KV, row stride D).
  const float* const v_base = p.v_from_k ? p.k.data() : p.v.data();
  const int v_stride = p.v_from_k ? D : Dv;
  if (p.v_from_k && Dv > D) throw std::invalid_argument("reference: v_from_k needs depth_v <= depth");
  const double scale = p.softmax_scale > 0 ? p.softmax_scale : 1.0 / std::sqrt(static_cast<double>(D));
  Reference r;
  r.o.assign(static_cast<size_t>(B) * Sq * Hq * Dv, 0.0);
  r.lse.assign(static_cast<size_t>(B) * Hq * Sq, -std::numeric_limits<double>::infinity());

  auto row = [&](int b, int h, int i, std::vector<double>& s) {
    const int hk = h / group;
    if (!p.seqlens_q.empty() && i >= p.seqlens_q[b]) return;
    const int Sk_b = p.seqlens_k.empty() ? Sk : p.seqlens_k[b];
    const float* qr = &p.q[((static_cast<size_t>(b) * Sq + i) * Hq + h) * D];
    double mx = -std::numeric_limits<double>::infinity();
    for (int j = 0; j < Sk_b; ++j) {
      if (p.visible && !p.visible(b, h, i, j)) {
        s[j] = -std::numeric_limits<double>::infinity();
        continue;
      }
      const float* kr = &p.k[((static_cast<size_t>(b) * Sk + j) * Hkv + hk) * D];
      double dot = 0;
      for (int d = 0; d < D; ++d) dot += static_cast<double>(qr[d]) * kr[d];
      double x = dot * scale;
      if (p.score_mod) x = p.score_mod(x, b, h, i, j);
      s[j] = x;
      mx = std::max(mx, x);
    }
    const bool has_sink = !p.sinks.empty();
    const double sink = has_sink ? p.sinks[h] : 0.0;
    if (has_sink) mx = std::max(mx, sink);
    if (mx == -std::numeric_limits<double>::infinity()) return;  // no visible key: O = 0, LSE = -inf
    double sum = has_sink ? std::exp(sink - mx) : 0.0;
    for (int j = 0; j < Sk_b; ++j) sum += (s[j] = std::exp(s[j] - mx));
    double* o = &r.o[((static_cast<size_t>(b) * Sq + i) * Hq + h) * Dv];
    for (int j = 0; j < Sk_b; ++j) {
      if (s[j] == 0.0) continue;
      const double w = s[j] / sum;
      const float* vr = v_base + ((static_cast<size_t>(b) * Sk + j) * Hkv + hk) * v_stride;
      for (int d = 0; d < Dv; ++d) o[d] += w * vr[d];
    }
    r.lse[(static_cast<size_t>(b) * Hq + h) * Sq + i] = mx + std::log(sum);
  };

  const long long rows = static_cast<long long>(B) * Hq * Sq;
  const int threads = std::max(1u, std::min(32u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      std::vector<double> s(Sk);
      for (long long idx = t; idx < rows; idx += threads) {
        const int i = static_cast<int>(idx % Sq), h = static_cast<int>(idx / Sq % Hq),
                  b = static_cast<int>(idx / Sq / Hq);
        row(b, h, i, s);
      }
    });
  for (auto& th : pool) th.join();
  return r;
}

}  // namespace jit::testing
