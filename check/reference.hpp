// The float64 CPU reference attention that every kernel result is checked against.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "fa4jit/config.hpp"

namespace jit::testing {

// Inputs as float (already rounded to the kernel's input type; FP8: dequantised, stored value x
// descale), (B, S, H, D) contiguous.
struct Problem {
  int batch = 1, seqlen_q = 1, seqlen_k = 1, num_q_heads = 1, num_kv_heads = 1, depth = 64;
  int depth_v = 0;           // V's and O's head dim; 0: depth
  double softmax_scale = 0;  // 0: 1/sqrt(depth)
  std::vector<float> q, k, v;
  // Latent KV (MLA absorbed decode): V is K's first depth_v columns, V = K[..., :depth_v]; `v` is
  // not read (leave it empty).
  bool v_from_k = false;
  // Semantics hooks (identity / all-visible when empty).
  std::function<bool(int b, int h, int q, int k)> visible;
  std::function<double(double score, int b, int h, int q, int k)> score_mod;
  std::vector<float> sinks;  // per q head, empty: none
  // Per-sequence lengths (varlen / seqused_k / paged); empty: every sequence is seqlen_q x seqlen_k.
  // Tensors stay padded to seqlen_q / seqlen_k; rows past a sequence's length are left O = 0, LSE = -inf.
  std::vector<int> seqlens_q, seqlens_k;
};

struct Reference {
  std::vector<double> o;    // (B, Sq, Hq, Dv)
  std::vector<double> lse;  // [B][Hq][Sq], natural log; -inf for rows with no visible key
};

Reference reference_attention(const Problem& p);  // multi-threaded, float64 throughout

// The semantics of the built-in masks, for Problem::visible.
std::function<bool(int, int, int, int)> reference_mask(const Mask& m, int seqlen_q, int seqlen_k, int window_left = -1,
                                                       int window_right = -1, int chunk = 0, int prefix = 0);

}  // namespace jit::testing
