// Score-mods: applied to score = softmax_scale * q.k before the softmax, with the
// FlexAttention signature (score, b, h, q_idx, kv_idx). Written once, used by every backend.
// kIsIdentity lets kernels fold the scale into the exp2 argument with one FMA.
#pragma once
#include "common/prelude.cuh"

namespace fa4 {
namespace score_mod {

struct Identity {
  static constexpr bool kIsIdentity = true;
  __device__ __forceinline__ float operator()(float score, int, int, int, int, const FwdParams&) const {
    return score;
  }
};

__device__ __forceinline__ float tanh_approx(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// cap * tanh(score / cap) (Gemma 2, Grok).
struct Softcap {
  static constexpr bool kIsIdentity = false;
  __device__ __forceinline__ float operator()(float score, int, int, int, int, const FwdParams& p) const {
    return p.softcap * tanh_approx(score * (1.0f / p.softcap));
  }
};

// Standard ALiBi slope for head h of H: 2^(-8(h+1)/n) on the nearest power of two n <= H,
// with the interleaved extra slopes for the remaining heads (Press et al.).
__device__ __forceinline__ float alibi_standard_slope(int h, int num_heads) {
  int n = 1;
  while (n * 2 <= num_heads) n *= 2;
  if (h < n) return exp2f(-8.0f * (h + 1) / n);
  return exp2f(-4.0f * (2 * (h - n) + 1) / n);
}

// seqlen_k - seqlen_q of sequence b (bottom-right alignment), as SeqInfo computes the lengths.
__device__ __forceinline__ int diag_offset(const FwdParams& p, int b) {
  if (!p.cu_seqlens_q && !p.cu_seqlens_k && !p.seqused_k) return p.seqlen_k - p.seqlen_q;
  const int sq = p.cu_seqlens_q ? p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b] : p.seqlen_q;
  int sk = p.cu_seqlens_k ? p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b] : p.seqlen_k;
  if (p.seqused_k) sk = p.seqused_k[b];
  return sk - sq;
}

// ALiBi: score - slope * |q + offset - k|, positions aligned bottom-right like causal.
struct Alibi {
  static constexpr bool kIsIdentity = false;
  __device__ __forceinline__ float operator()(float score, int b, int h, int q_idx, int kv_idx,
                                              const FwdParams& p) const {
    const float slope = p.alibi_slopes ? p.alibi_slopes[h] : alibi_standard_slope(h, p.num_q_heads);
    const int dist = q_idx + diag_offset(p, b) - kv_idx;
    return score - slope * fabsf(static_cast<float>(dist));
  }
};

}  // namespace score_mod
}  // namespace fa4
