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
  const int n = 1 << (31 - __clz(max(num_heads, 1)));  // the largest power of two <= num_heads
  return exp2f((h < n ? -8.0f * (h + 1) : -4.0f * (2 * (h - n) + 1)) / n);
}
__device__ __forceinline__ float alibi_slope(int h, const FwdParams& p) {
  return p.alibi_slopes ? p.alibi_slopes[h] : alibi_standard_slope(h, p.num_q_heads);
}

// ALiBi: score - slope * |q + offset - k|, positions aligned bottom-right like causal: offset =
// seqlen_k - seqlen_q of the sequence (for_sequence; the lengths the kernel holds anyway), not
// re-derived from the parameters per element.
// The sequence's head's slope is computed once per tile (for_sequence, from the head through an
// opaque move): per element it was most of the code of ALiBi kernels (compile time), and hoisted
// out of the KV loop the slopes spilled. Packed GQA rows of other heads compute theirs.
struct Alibi {
  static constexpr bool kIsIdentity = false;
  int seqlen_q, seqlen_k;
  int q_head;   // the sequence's (packed: the group's first) query head
  float slope;  // q_head's
  __device__ __forceinline__ float operator()(float score, int, int h, int q_idx, int kv_idx,
                                              const FwdParams& p) const {
    return score - slope_of(h, p) * fabsf(static_cast<float>(distance(q_idx, kv_idx)));
  }
  // Head h's slope (the sequence's own without a load) and the signed distance from query q to key k
  // (bottom-right aligned): what operator() and RowMod<Alibi> share.
  __device__ __forceinline__ float slope_of(int h, const FwdParams& p) const {
    return h == q_head ? slope : alibi_slope(h, p);
  }
  __device__ __forceinline__ int distance(int q, int k) const { return q + (seqlen_k - seqlen_q) - k; }
  // For rows of head h: h's slope from h through an opaque move (computed where the mod is made).
  __device__ __forceinline__ static Alibi of_head(int seqlen_q, int seqlen_k, int h, const FwdParams& p) {
    return Alibi{seqlen_q, seqlen_k, h, alibi_slope(static_cast<int>(opaque_u32(static_cast<u32>(h))), p)};
  }
};

// A user score-mod (generated from ScoreMod::custom): User::eval is the snippet. It only sees its
// sequence (VARIANTS.md), so it may index per-position tensors (biases) by q_idx and kv_idx: the
// rows and keys of a tile past the sequence (whose results are discarded) are evaluated at the
// sequence's last query / key, and the padding rows above row 0 of a bottom-aligned Q tile (sm90a's
// causal kBM 192 kernels, TileWork's kBottom) at query 0. Clamped, not branched: a branch per
// element of the unrolled tile costs registers (sm90a/softmax.cuh). Keys are never negative, and no
// tile of an empty sequence is computed (TileWork::finish), so the clamped indices are in range.
template <class User>
struct Custom {
  static constexpr bool kIsIdentity = false;
  int seqlen_q, seqlen_k;  // of the sequence being computed (for_sequence)
  __device__ __forceinline__ float operator()(float score, int b, int h, int q_idx, int kv_idx,
                                              const FwdParams& p) const {
    return User::eval(score, b, h, min(max(q_idx, 0), seqlen_q - 1), min(kv_idx, seqlen_k - 1), p);
  }
};

// The score-mod every backend applies to the tiles of one sequence: seq is anything with seqlen_q
// and seqlen_k (SeqInfo, mask::Ctx). Other built-ins are defined everywhere and ignore it. (Overloads on
// a pointer rather than a trait struct: a trait's constexpr member became a PTX global.)
template <class Mod, class Seq>
__device__ __forceinline__ Mod with_sequence(const Mod*, const Seq&, const FwdParams&) {
  return Mod{};
}
template <class User, class Seq>
__device__ __forceinline__ Custom<User> with_sequence(const Custom<User>*, const Seq& seq, const FwdParams&) {
  return Custom<User>{seq.seqlen_q, seq.seqlen_k};
}
template <class Seq>
__device__ __forceinline__ Alibi with_sequence(const Alibi*, const Seq& seq, const FwdParams& p) {
  return Alibi::of_head(seq.seqlen_q, seq.seqlen_k, seq.q_head, p);
}
template <class Mod, class Seq>
__device__ __forceinline__ Mod for_sequence(const Seq& seq, const FwdParams& p) {
  return with_sequence(static_cast<const Mod*>(nullptr), seq, p);
}

// A score-mod along one row of a tile: batch b, head h and query q fixed, keys k0 + c for the
// unrolled tile's compile-time column offsets c. Mods see min(k0 + c, k_last) (Custom reads memory
// by kv_idx; the clamped elements are masked). ALiBi holds the row's distance to k0 as a float,
// converted once per row and tile: per element a subtraction of an immediate (exact below 2^24)
// instead of an integer-to-float conversion, a quarter-rate instruction beside the exp2 (MUFU) every
// element already pays.
template <class Mod>
struct RowMod {
  Mod mod;
  int b, h, q, k0, k_last;
  __device__ __forceinline__ float operator()(float score, int c, const FwdParams& p) const {
    return mod(score, b, h, q, min(k0 + c, k_last), p);
  }
};
template <>
struct RowMod<Alibi> {
  float slope, d0;  // d0 = Alibi::distance(q, k0)
  __device__ __forceinline__ float operator()(float score, int c, const FwdParams&) const {
    return score - slope * fabsf(d0 - static_cast<float>(c));
  }
};
template <class Mod>
__device__ __forceinline__ RowMod<Mod> along_row(const Mod& mod, int b, int h, int q, int k0, int k_last,
                                              const FwdParams&) {
  return RowMod<Mod>{mod, b, h, q, k0, k_last};
}
__device__ __forceinline__ RowMod<Alibi> along_row(const Alibi& mod, int, int h, int q, int k0, int,
                                                const FwdParams& p) {
  return RowMod<Alibi>{mod.slope_of(h, p), static_cast<float>(mod.distance(q, k0))};
}

// The score-mod of a sequence's rows of head h (packed GQA rows, whose heads differ from the
// sequence's): ALiBi computes h's slope here, once per row and tile, instead of per element.
template <class Mod>
__device__ __forceinline__ Mod for_head(const Mod& m, int, const FwdParams&) {
  return m;
}
__device__ __forceinline__ Alibi for_head(const Alibi& m, int h, const FwdParams& p) {
  return Alibi::of_head(m.seqlen_q, m.seqlen_k, h, p);
}

}  // namespace score_mod
}  // namespace fa4
