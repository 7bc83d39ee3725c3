// Online softmax of one consumer warpgroup on the S accumulator fragment (m64nBNk16 layout).
// Thread (warp w, lane l) of the warpgroup holds rows r0 = 16w + l/4 and r1 = r0 + 8; element
// i of the fragment is row r0 + 8*((i>>1)&1), column 8*(i>>2) + 2*(l%4) + (i&1). A row lives
// in a quad of 4 lanes, so row reductions are two xor-shuffles (1, 2).
// The running sum stays per-thread (each lane's 1/4 of the row) until finalize(): the
// correction factor is quad-uniform, so partial sums rescale exactly like the total.
#pragma once
#include "common/prelude.cuh"
#include "common/mask.cuh"
#include "common/score_mod.cuh"
#include "common/softmax.cuh"
#include "sm90a/shape.cuh"
#include "sm90a/walk.cuh"

namespace fa4 {
namespace sm90a {

// O's rescale. Eager (every tile, branch-free, as FA3/FA4's Hopper kernels) with three consumer
// warpgroups (kBM 192: depth 64, FP8 d128 and d64); lazy elsewhere (O's multiply skipped by a warp
// vote while no row maximum moved; the stale maximum kept up to 2^8 of growth, FP8 P: none).
// docs/PERF.md run 39 (H100, ABBA): eager at kBM 192 gave +1-9% on FP8 and +1-4% at bf16 d64;
// at kBM 128 it ran 3-5% slower at bf16 d128 / d256 (O's 64-128 floats per thread make every
// tile's multiply dearer than the branches it removes) and mixed on FP8 (softcap +15%, causal +
// softcap -6%), so those keep the lazy form.
template <class Config>
constexpr bool kEagerRescale = Shape<Config>::kNumConsumerWGs == 3;

// O *= corr per row (corr[0] the thread's row r0, corr[1] r0 + 8); lazy: skipped when no lane of
// the warp changed its maximum (O registers are private to the thread, so a warp-level vote is
// exact). The softmax warpgroup's O and an O split's partner warpgroup's (consumer.cuh follow_p).
template <class Config, int kNO>
__device__ __forceinline__ void rescale_o(float (&o)[kNO], const float (&corr)[2]) {
  if (kEagerRescale<Config> || __any_sync(0xffffffffu, corr[0] != 1.0f || corr[1] != 1.0f)) {
#pragma unroll
    for (int i = 0; i < kNO; ++i) o[i] *= corr[(i >> 1) & 1];
  }
}

template <class Config, class Mask, class ScoreMod>
struct WgSoftmax {
  using Sh = Shape<Config>;
  using Element = typename Sh::MmaElement;  // P's type (P V reads it)
  static constexpr int kBN = Sh::kBN;
  static constexpr int kN = kBN / 2;  // S fragment floats per thread

  static constexpr int kPack = Sh::kPack;

  // FP8: P's shift before rounding to e4m3 and the rescale rule are common/softmax.cuh's
  // (kFp8PShiftLog2; kFp8RescaleThresholdLog2, which the eager form below also keeps: the maximum
  // moves whenever it grows, so P <= 2^shift < 448); the sums are shifted back in finalize().
  static constexpr int kPShiftLog2 = Sh::kFp8 ? softmax::kFp8PShiftLog2 : 0;

  softmax::RowState row[2];
  float scale;   // exponent (log2) units per logit unit: scale_log2 for identity, log2(e) after a score-mod
  float qk_mul;  // FP8 / FP8 KV: softmax_scale * descale_q * descale_k of the tile's (batch, KV head)
  int q0;       // tile row of r0 (r1 = q0 + 8): the sequence row, or the packed row when kPack > 1
  int kc;       // column of element 0 inside a tile: 2*(lane%4)

  __device__ __forceinline__ void init(const FwdParams& p, int q_lo, int wg) {
    const int t = threadIdx.x & 127, warp = t >> 5, lane = t & 31;
    row[0].init();
    row[1].init();
    scale = ScoreMod::kIsIdentity ? p.scale_log2 : kLog2e;
    q0 = q_lo + wg * Sh::kWgRows + warp * 16 + (lane >> 2);
    kc = 2 * (lane & 3);
  }

  // FP8 inputs or an FP8 KV cache: the launch's descale_q * descale_k for the tile's (batch, KV
  // head) joins the logit scale (after init, once per tile; descale_q is null under a 16-bit Q).
  // 16-bit kernels: nothing.
  template <class Work>
  __device__ __forceinline__ void descale(const FwdParams& p, const Work& w) {
    if constexpr (Sh::kDescaled) {
      const int i = w.seq.batch * p.num_kv_heads + w.seq.kv_head;
      const float d = (p.descale_q ? p.descale_q[i] : 1.0f) * (p.descale_k ? p.descale_k[i] : 1.0f);
      qk_mul = p.softmax_scale * d;
      if constexpr (ScoreMod::kIsIdentity) scale = p.scale_log2 * d;
    }
  }
  // Multiplies a raw score before a score-mod: softmax_scale (FP8: times the descales).
  __device__ __forceinline__ float logit_mul(const FwdParams& p) const {
    if constexpr (Sh::kDescaled) return qk_mul;
    return p.softmax_scale;
  }

  // Raw scores of KV tile n -> logits, -inf where masked: raw for identity (scale_log2 is folded
  // into the exp2 FMA), score_mod(s * softmax_scale) otherwise (log2(e) folded there the same way:
  // a multiply per element fewer). Per-element masks run only on tiles that
  // need them. Score-mods see every element of a visited tile with kv_idx < seqlen_k (clamped);
  // masked results are discarded (set to -inf).
  // Packed GQA: rows r0 / r1 are (query, head) pairs (PackedRow), so the mask and the score-mod
  // take them per row; the mask context's q_head becomes the row's head.
  template <class Work>
  __device__ __forceinline__ void logits(float (&s)[kN], int n, bool need_mask, const FwdParams& p,
                                         const Work& w) const {
    if constexpr (kPack == 1) {
      logits_unpacked(s, n, need_mask, p, w);
    } else {
      const int k0 = n * kBN + kc;
      // Row r1 = r0 + 8 from Rows::of(r0) where kPack divides 64 (dense rows): r0 % 16 < 8 and kPack is a
      // power of two, so r1 is the same head 8 / kPack queries on (kPack <= 8) or the same query 8
      // heads on (kPack >= 16). Written so, the offsets fold into immediates (fewer live registers at
      // kBM 192). Other packs (padded spans): each row's own mapping.
      using Rows = typename Sh::Rows;
      const Rows pr = Rows::of(q0);
      const Rows pr1 = Rows::kDense ? pr : Rows::of(q0 + 8);
      const int q[2] = {pr.q, !Rows::kDense ? pr1.q : kPack <= 8 ? pr.q + 8 / kPack : pr.q};
      const int head[2] = {w.seq.q_head + pr.head,
                           w.seq.q_head + (!Rows::kDense ? pr1.head : pr.head + (kPack <= 8 ? 0 : 8))};
      mask::Ctx ctx[2] = {w.ctx, w.ctx};
      ctx[0].q_head = head[0];
      ctx[1].q_head = head[1];
      if constexpr (!ScoreMod::kIsIdentity) {  // branch-free, as in logits_unpacked
        const ScoreMod mod = score_mod::for_sequence<ScoreMod>(w.seq, p);
        const ScoreMod row_mod[2] = {score_mod::for_head(mod, head[0], p), score_mod::for_head(mod, head[1], p)};
        const int k_last = w.seq.seqlen_k - 1;
        const score_mod::RowMod<ScoreMod> row[2] = {
            score_mod::along_row(row_mod[0], w.seq.batch, head[0], q[0], k0, k_last, p),
            score_mod::along_row(row_mod[1], w.seq.batch, head[1], q[1], k0, k_last, p)};
#pragma unroll
        for (int i = 0; i < kN; ++i)
          s[i] = row[(i >> 1) & 1](s[i] * logit_mul(p), 8 * (i >> 2) + (i & 1), p);
      }
      if (need_mask)
        apply_mask(s, n, k0, w, [&](int h) { return q[h]; }, [&](int h) -> const mask::Ctx& { return ctx[h]; });
    }
  }

  // -inf where row h (query row_q(h), context row_ctx(h)) cannot see key k of tile n. kInside: the
  // tile's rows and keys are inside the sequence, so neither the mask nor this loop bounds them.
  // Rows as functions of h: the unpacked rows' q0 + 8 h folds the 8 into the compares' immediates
  // (an array of the two rows cost a causal kernel 64 IADDs).
  template <bool kInside, class RowQ, class RowCtx>
  __device__ __forceinline__ void mask_tile(float (&s)[kN], int n, RowQ row_q, RowCtx row_ctx, int seqlen_k) const {
    const int k0 = n * kBN + kc;
#pragma unroll
    for (int i = 0; i < kN; ++i) {
      const int h = (i >> 1) & 1, k = k0 + 8 * (i >> 2) + (i & 1);
      if (!(Mask::template visible<kInside>(row_q(h), k, row_ctx(h)) && (kInside || k < seqlen_k))) s[i] = kNegInf;
    }
  }
  // A partial tile under a mask whose rows each see one interval of keys (Mask::kRowInterval:
  // bands, chunks): row h's interval in the tile's own columns once per row (mask::row_keys), then
  // two compares per element against its column, an immediate. The per-element visible() and key
  // bound ran 12 instructions an element under a sliding window's run-time extents.
  template <class RowQ, class RowCtx>
  __device__ __forceinline__ void mask_rows(float (&s)[kN], int n, RowQ row_q, RowCtx row_ctx) const {
    const int k0 = n * kBN + kc;
    int lo[2], hi[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const mask::KvRange r = mask::row_keys<Mask>(row_q(h), k0, row_ctx(h));
      lo[h] = r.begin;
      hi[h] = r.end;
    }
#pragma unroll
    for (int i = 0; i < kN; ++i) {
      const int h = (i >> 1) & 1, c = 8 * (i >> 2) + (i & 1);
      if (c < lo[h] || c >= hi[h]) s[i] = kNegInf;
    }
  }
  // A snippet mask's partial tile. Tiles inside the sequence (all but its last Q tile and last KV
  // tile) drop the positions' clamps and bounds: a strided mask's loop runs about 3 instructions
  // per element instead of 7.6, and a document mask's key loads take immediate offsets
  // (docs/PERF.md run 75: strided 1.14 -> 1.36x FlexAttention, document 1.13 -> 1.24x). Built-in
  // masks keep their element loops in logits: routed through mask_tile, their kernels' SASS changed
  // (register allocation); so it stays byte-identical (causal d64 / d128, window + softcap, causal
  // + ALiBi checked). `w`: the CTA's work (its Q tile's rows).
  template <class Work, class RowQ, class RowCtx>
  __device__ __forceinline__ void apply_snippet_mask(float (&s)[kN], int n, const Work& w, RowQ row_q,
                                                     RowCtx row_ctx) const {
    const int seqlen_k = w.seq.seqlen_k;
    if ((n + 1) * kBN <= seqlen_k && w.q_lo >= 0 && w.q_hi - w.q_lo == Sh::kBM)
      mask_tile<true>(s, n, row_q, row_ctx, seqlen_k);
    else
      mask_tile<false>(s, n, row_q, row_ctx, seqlen_k);
  }

  // -inf where a row of tile n cannot see a key (a tile that needs its mask): a snippet's partial
  // tile (apply_snippet_mask), a mask whose rows each see one interval of keys (mask_rows), or a
  // built-in mask element by element. k0: the caller's n kBN + kc.
  template <class Work, class RowQ, class RowCtx>
  __device__ __forceinline__ void apply_mask(float (&s)[kN], int n, int k0, const Work& w, RowQ row_q,
                                             RowCtx row_ctx) const {
    if constexpr (Mask::kSnippet) {
      apply_snippet_mask(s, n, w, row_q, row_ctx);
    } else if constexpr (Mask::kRowInterval) {
      mask_rows(s, n, row_q, row_ctx);
    } else {
#pragma unroll
      for (int i = 0; i < kN; ++i) {
        const int h = (i >> 1) & 1, k = k0 + 8 * (i >> 2) + (i & 1);
        if (!(Mask::visible(row_q(h), k, row_ctx(h)) && k < w.seq.seqlen_k)) s[i] = kNegInf;
      }
    }
  }

  template <class Work>
  __device__ __forceinline__ void logits_unpacked(float (&s)[kN], int n, bool need_mask, const FwdParams& p,
                                                  const Work& w) const {
    const int k0 = n * kBN + kc;
    // The causal alignment through an opaque move, once per tile: hoisted and held across the KV
    // loop it cost the d64 causal kernel (kBM 192, 128 registers) 9% (docs/PERF.md run 21).
    mask::Ctx ctx = w.ctx;
    ctx.diag = static_cast<int>(opaque_u32(static_cast<u32>(ctx.diag)));
    if constexpr (!ScoreMod::kIsIdentity) {
      // Branch-free: the mod runs on every element (kv_idx clamped below seqlen_k, so aux data
      // indexed by it stays in bounds) and masked results are replaced by -inf afterwards. A
      // per-element `if (visible) s = mod(..)` turns every element into a basic block (Softcap's
      // IEEE division then has a slow-path call per element) and spills at 160 registers.
      const ScoreMod mod = score_mod::for_sequence<ScoreMod>(w.seq, p);
      const int k_last = w.seq.seqlen_k - 1;
      const score_mod::RowMod<ScoreMod> row[2] = {
          score_mod::along_row(mod, w.seq.batch, w.seq.q_head, q0, k0, k_last, p),
          score_mod::along_row(mod, w.seq.batch, w.seq.q_head, q0 + 8, k0, k_last, p)};
#pragma unroll
      for (int i = 0; i < kN; ++i)
        s[i] = row[(i >> 1) & 1](s[i] * logit_mul(p), 8 * (i >> 2) + (i & 1), p);
    }
    if (need_mask)
      apply_mask(s, n, k0, w, [&](int h) { return q0 + 8 * h; }, [&](int) -> const mask::Ctx& { return ctx; });
  }

  // Folds tile logits into the row state and turns them into unnormalised P (fp32, in place).
  // corr[r]: factor O must be multiplied by before P of this tile is added (1 = no rescale).
  __device__ __forceinline__ void online(float (&s)[kN], float (&corr)[2]) {
    // Row maxima in kMaxChains independent chains per row, combined at the end. With three
    // consumer warpgroups (d64) one chain of kN / 2 fmaxf per row was the softmax's longest
    // dependency (ncu "wait" stalls); four chains ran 1-3% faster there and 1% slower at d128
    // (two warpgroups, whose ping-pong hides the chain), so 16-bit d128 keeps one (docs/PERF.md
    // run 26). FP8's GEMMs take half the time, so the ping-pong no longer hides it: four (run 32).
    constexpr int kMaxChains = Sh::kNumConsumerWGs == 3 || Sh::kFp8 ? 4 : 1;
    float mc[2][kMaxChains];
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int c = 0; c < kMaxChains; ++c) mc[r][c] = kNegInf;
#pragma unroll
    for (int i = 0; i < kN; ++i) {
      float& acc = mc[(i >> 1) & 1][((i & 1) | ((i >> 1) & 2)) % kMaxChains];
      acc = fmaxf(acc, s[i]);
    }
    float m[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if constexpr (kMaxChains == 4)
        m[r] = fmaxf(fmaxf(mc[r][0], mc[r][1]), fmaxf(mc[r][2], mc[r][3]));
      else
        m[r] = mc[r][0];
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      m[r] = fmaxf(m[r], __shfl_xor_sync(0xffffffffu, m[r], 1));
      m[r] = fmaxf(m[r], __shfl_xor_sync(0xffffffffu, m[r], 2));
      if constexpr (kEagerRescale<Config>)
        corr[r] = row[r].update_max_eager(m[r], scale);
      else
        corr[r] = row[r].template update_max<Sh::kFp8 ? softmax::kFp8RescaleThresholdLog2
                                                      : static_cast<int>(softmax::kRescaleThresholdLog2)>(m[r], scale);
      row[r].sum *= corr[r];
    }
    const float bias[2] = {row[0].exp_bias(scale) - kPShiftLog2, row[1].exp_bias(scale) - kPShiftLog2};
    float sum[4] = {0.f, 0.f, 0.f, 0.f};  // two chains per row for ILP
#pragma unroll
    for (int i = 0; i < kN; ++i) {
      const int r = (i >> 1) & 1;
      const float x = fmaf(s[i], scale, -bias[r]);
      constexpr int kEvery = Sh::kExp2EmulateEvery;
      s[i] = (kEvery > 0 && (i >> 1) % kEvery == kEvery - 1) ? softmax::exp2_poly3(x) : exp2_approx(x);
      sum[r * 2 + (i & 1)] += s[i];
    }
    row[0].sum += sum[0] + sum[1];
    row[1].sum += sum[2] + sum[3];
  }

  // P (fp32 fragment) -> wgmma A-operand registers. 16-bit: k16 step k uses p[4k..4k+3], which are
  // exactly the accumulator pairs of columns 16k..16k+15 in order (same 16-bit layouts).
  // FP8: k32 step c uses p[4c..4c+3], four e4m3 each. The A fragment wants row g, keys 4t..4t+3
  // (t = lane % 4) in register 0, row g + 8 in 1, keys 16 + 4t.. in 2 and 3; the accumulator gives
  // this thread keys {2t, 2t+1, 8+2t, 9+2t} (+16) of those rows. So each register takes those four,
  // and P V runs over the keys in that order: transpose_v (helpers.cuh) writes Vt's columns permuted to
  // match (logical key 16h + 4t + i <-> tile key 16h + 8(i/2) + 2t + i%2), so no shuffle is needed.
  __device__ __forceinline__ static void pack_p(const float (&s)[kN], u32 (&pr)[Sh::kPRegs]) {
    if constexpr (Sh::kFp8) {
#pragma unroll
      for (int c = 0; c < kBN / 32; ++c) {
#pragma unroll
        for (int r = 0; r < 4; ++r) {  // r: (h = r / 2, row half r % 2)
          const int e = 16 * c + 8 * (r >> 1) + 2 * (r & 1);
          pr[4 * c + r] = pack4_e4m3(s[e], s[e + 1], s[e + 4], s[e + 5]);
        }
      }
    } else {
#pragma unroll
      for (int i = 0; i < kN / 2; ++i) pr[i] = pack2<Element>(s[2 * i], s[2 * i + 1]);
    }
  }

  // End of the KV loop: full row sums, then the sink joins the denominator. Split-KV: split 0
  // only (or a split tail's whole tile, split -1), so fa4_combine counts the sink once. Packed
  // GQA: each row's own head's sink.
  template <class Work>
  __device__ __forceinline__ void finalize(const FwdParams& p, const Work& w) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if constexpr (kPShiftLog2 != 0) row[r].sum *= 1.0f / static_cast<float>(1 << kPShiftLog2);
      row[r].sum += __shfl_xor_sync(0xffffffffu, row[r].sum, 1);
      row[r].sum += __shfl_xor_sync(0xffffffffu, row[r].sum, 2);
      if (p.sinks && (!Sh::kRuntimeVariants || split_of<Config>(p, w) <= 0)) {
        int head = w.seq.q_head;
        if constexpr (kPack > 1) head += Sh::Rows::of(q0 + 8 * r).head;
        row[r].add_sink(p.sinks[head] * kLog2e, scale);
      }
    }
  }
};

}  // namespace sm90a
}  // namespace fa4
