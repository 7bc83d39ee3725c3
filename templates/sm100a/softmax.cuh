// SM100MHA2Q.softmax: two warpgroups, WG i owns Q tile i (tile rows q_lo + 128 i ..; packed GQA:
// row r is query r / kPack of head r % kPack), S_i/P_i and O_i.
// One thread per row: thread t of the WG reads TMEM lane t, so row max and row sum need no
// shuffles. Per KV tile of the Work walk:
//   wait S_i -> load S (32-column tcgen05.ld batches) -> score-mod, mask -> row max
//   -> RowState::update_max (lazy rescale: keep the stale max unless it grew by > 2^8)
//   -> factor to the correction WG through smem (not for the first tile: O is still empty)
//   -> P = exp2(s * scale - bias), part of the pairs on the FMA pipe (exp2_poly3)
//   -> P as 16-bit over S in TMEM (tcgen05.st) -> signal P_i (releases the S/P slot).
// FP8 (e4m3 Q/K/V): P x 2^8 rounded to e4m3, 4 per TMEM column, O rescaled whenever a row maximum
// grows (common/softmax.cuh kFp8PShiftLog2, kFp8RescaleThresholdLog2: the sm90a FP8 kernel's rules).
// All math is fa4::softmax (shared with sm80/sm90a, which run it on a GPU).
#pragma once
#include "common/mask.cuh"
#include "common/softmax.cuh"
#include "sm100a/traits.cuh"
#include "sm100a/pipelines.cuh"
#include "sm100a/epilogue.cuh"

namespace fa4 {
namespace sm100a {

// Exponentials that go to exp2_poly3 (FMA pipe) instead of MUFU: in each 32-column batch the
// pairs with pair % N == N - 1, i.e. 1 pair in 4 by default (MAX [Feb]); 0 = all MUFU (B300 has
// fast ex2). A Config may override it with `static constexpr int kExp2EmulateEvery`.
template <class C, class = void>
struct Exp2PolyEvery {
  static constexpr int value = 4;
};
template <class C>
struct Exp2PolyEvery<C, decltype(void(C::kExp2EmulateEvery))> {
  static constexpr int value = C::kExp2EmulateEvery;
};

template <class Config, class Mask, class ScoreMod>
struct SoftmaxRow {
  using T = Traits<Config>;
  using Element = typename T::Element;
  static constexpr bool kIdentity = ScoreMod::kIsIdentity;
  static constexpr int kPolyEvery = Exp2PolyEvery<Config>::value;
  static_assert(kPolyEvery >= 0, "kExp2EmulateEvery: 0 (off) or N (1 pair in N)");
  // P of 32 logits: 16 TMEM columns of 2 x 16-bit, or (FP8) 8 columns of 4 x e4m3.
  static constexpr int kPCols = 32 / T::kPPerColumn;
  static constexpr int kRescaleLog2 =
      T::kFp8 ? softmax::kFp8RescaleThresholdLog2 : static_cast<int>(softmax::kRescaleThresholdLog2);
  static constexpr int kPShiftLog2 = T::kFp8 ? softmax::kFp8PShiftLog2 : 0;

  const FwdParams& p;
  mask::Ctx ctx;       // q_head: this row's head (packed GQA: the group's first head + PackedRow::head)
  int q;               // this thread's query row, clamped to seqlen_q - 1 (rows past it are not stored)
  int k_lo;            // first key of the current tile
  mask::TileClass cls; // for this Q tile and KV tile
  bool bounded;        // tile reaches past seqlen_k
  float qk_mul = 0.f;  // FP8 / FP8 KV cache: softmax_scale * descale_q * descale_k of the CTA's (batch, KV head)

  // Multiplies a raw score before a score-mod: softmax_scale (FP8 / FP8 KV cache: times the descales).
  __device__ __forceinline__ float logit_mul() const {
    if constexpr (T::kDescaled) return qk_mul;
    return p.softmax_scale;
  }

  // Visibility of keys [k0, k0 + 32) for this row, bit j = key k0 + j (FA4's R2P idea): the
  // per-key mask runs in a rolled loop (small code), the select on the scores is unrolled.
  __device__ __forceinline__ u32 visible_bits(int k0) const {
    if (cls == mask::kSkip) return 0u;
    const int valid = ctx.seqlen_k - k0;  // keys past seqlen_k are never visible
    u32 bits = mask::span_bits(0, valid);
    if (cls == mask::kPartial) {  // masks never see keys >= seqlen_k (DEVICE_ABI)
      if constexpr (Mask::kRowInterval) {  // bands, chunks: the row's interval, no per-key loop
        const mask::KvRange r = mask::row_keys<Mask>(q, k0, ctx);
        bits &= mask::span_bits(r.begin, r.end);
      } else {
        u32 vis = 0u;
        const int n = min(32, valid);
#pragma unroll 1
        for (int j = 0; j < n; ++j) vis |= static_cast<u32>(Mask::visible(q, k0 + j, ctx)) << j;
        bits &= vis;
      }
    }
    return bits;
  }

  // Whether transform() changes anything on this tile (uniform over the warpgroup).
  __device__ __forceinline__ bool transforms() const { return !kIdentity || cls != mask::kFull || bounded; }

  // Scores -> logits in the RowState units: raw s for identity (scale_log2 is folded into the
  // exp2 FMA), score_mod(s * softmax_scale) * log2(e) otherwise. Masked keys -> -inf.
  __device__ __forceinline__ void transform(float (&s)[32], int col0) const {
    if constexpr (!kIdentity) {
      if (cls != mask::kSkip) {
        // Keys past seqlen_k are masked below; clamping their index keeps a score-mod that
        // reads memory by kv_idx inside the sequence (the value is discarded).
        const ScoreMod mod = score_mod::for_sequence<ScoreMod>(ctx, p);
        const int k_last = bounded ? ctx.seqlen_k - 1 : 0x7fffffff;
        const score_mod::RowMod<ScoreMod> row = score_mod::along_row(mod, ctx.batch, ctx.q_head, q, k_lo + col0, k_last, p);
#pragma unroll
        for (int j = 0; j < 32; ++j) s[j] = row(s[j] * logit_mul(), j, p) * kLog2e;
      }
    }
    if (cls != mask::kFull || bounded) {
      const u32 bits = visible_bits(k_lo + col0);
#pragma unroll
      for (int j = 0; j < 32; ++j) s[j] = (bits >> j) & 1u ? s[j] : kNegInf;
    }
  }

  // P for 32 logits -> kPCols packed columns; returns their fp32 sum (FP8: of the unrounded P).
  __device__ __forceinline__ static float exp_pack(const float (&s)[32], float scale, float bias, u32 (&pk)[kPCols]) {
    float sum0 = 0.f, sum1 = 0.f;
    float lo0 = 0.f, lo1 = 0.f;  // FP8: the previous pair, packed with this one into four e4m3
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const float x0 = fmaf(s[2 * j], scale, -bias), x1 = fmaf(s[2 * j + 1], scale, -bias);
      float e0, e1;
      bool poly = false;
      if constexpr (kPolyEvery > 0) poly = j % kPolyEvery == kPolyEvery - 1;
      if (poly) {
        e0 = softmax::exp2_poly3(x0);
        e1 = softmax::exp2_poly3(x1);
      } else {
        e0 = exp2_approx(x0);
        e1 = exp2_approx(x1);
      }
      sum0 += e0;
      sum1 += e1;
      if constexpr (T::kFp8) {
        if (j % 2 == 0) {
          lo0 = e0;
          lo1 = e1;
        } else {
          pk[j / 2] = pack4_e4m3(lo0, lo1, e0, e1);  // keys 2j-2 .. 2j+1, the lowest in the low byte
        }
      } else {
        pk[j] = pack2<Element>(e0, e1);
      }
    }
    return sum0 + sum1;
  }

  // P chunk c (32 logits) -> TMEM columns [c kPCols, (c + 1) kPCols) of this lane's S/P slot.
  __device__ __forceinline__ static void store_p(u32 t_s, int c, const u32 (&pk)[kPCols]) {
    if constexpr (T::kFp8)
      tmem::st_32x32b_x8(t_s + c * kPCols, pk);
    else
      tmem::st_32x32b_x16(t_s + c * kPCols, pk);
  }
};

__device__ __forceinline__ void to_float(const u32 (&r)[32], float (&s)[32]) {
#pragma unroll
  for (int j = 0; j < 32; ++j) s[j] = __uint_as_float(r[j]);
}

template <class Config, class Mask, class ScoreMod>
__device__ __forceinline__ void softmax_wg(const FwdParams& p, const TmaDescs& tma, u32 tmem_base,
                                           unsigned char* smem,
                                           BarriersOf<Config>& bars,
                                           int tile) {
  using T = Traits<Config>;
  using Row = SoftmaxRow<Config, Mask, ScoreMod>;
  const Work<Config, Mask> w = make_work<Config, Mask>(p);  // the same tiles as every other role
  constexpr int kChunks = T::kBN / 32;
  // Identity score-mod and BN <= 128: the whole row of S stays in registers (one TMEM read,
  // FA4's way). Otherwise (BN = 192 for d64 would not fit in 192 registers; score-mods would
  // be inlined once per 32-column batch) two rolled passes: pass 1 reads S, applies the
  // score-mod and mask, takes the max and writes the logits back over S (fp32, own lane);
  // pass 2 reads them again for the exponentials.
  constexpr bool kRowInRegisters = T::kBN <= 128 && ScoreMod::kIsIdentity;

  const int r = threadIdx.x % 128;
  const u32 t_s = tmem_base + tmem::warp_lane_base() + T::tmem_s(tile);
  float* corr_smem = reinterpret_cast<float*>(smem + T::kCorrOff) + tile * T::kTileM;
  // FP8 inputs / an FP8 KV cache: real X = stored X * descale_x, per (batch, KV head) of the CTA
  // (null = 1). descale_q * descale_k (an FP8 KV cache: descale_k; its Q is 16-bit) joins the logit
  // scale, descale_v the epilogue's 1/sum (before the split-KV partials too). 16-bit: nothing is read.
  float descale_qk = 1.0f, descale_v = 1.0f;
  if constexpr (T::kDescaled) {
    const int i = w.seq.batch * p.num_kv_heads + w.seq.kv_head;
    if (p.descale_k) descale_qk = p.descale_k[i];
    if constexpr (T::kFp8) {
      if (p.descale_q) descale_qk *= p.descale_q[i];
    }
    if (p.descale_v) descale_v = p.descale_v[i];
  }
  float scale = Row::kIdentity ? p.scale_log2 : 1.0f;
  if constexpr (T::kDescaled && Row::kIdentity) scale *= descale_qk;

  // Tile rows of this Q tile (packed rows when kPack > 1) and the queries they span.
  const int r_lo = w.q_lo + tile * T::kTileM;
  const int r_hi = min(r_lo + T::kTileM, w.q_hi);
  const int q_lo = Work<Config, Mask>::query_lo(r_lo), q_hi = Work<Config, Mask>::query_hi(r_hi);
  const typename T::Rows pr = T::Rows::of(r_lo + r);
  // Masks and score-mods only see rows inside the sequence; rows past it are computed on a
  // clamped index and never stored. Packed: each row has its own head (mask, score-mod, sink).
  mask::Ctx row_mask = w.ctx;
  row_mask.q_head = w.seq.q_head + pr.head;
  Row row_ctx{p, row_mask, min(pr.q, w.seq.seqlen_q - 1), 0, mask::kFull, false};
  if constexpr (T::kDescaled) row_ctx.qk_mul = p.softmax_scale * descale_qk;
  softmax::RowState row;
  row.init();

  SPConsumer s_cons(&bars.s[tile]);
  CorrProducer c_prod(&bars.c[tile]);

  const int n_first = w.first_tile();
#pragma unroll 1
  for (int n = n_first; w.has(n); n = w.next_tile(n)) {
    row_ctx.k_lo = n * T::kBN;
    // This Q tile's class (finer than the CTA's, which chose the tiles): kSkip here masks all.
    const int k_hi = min(row_ctx.k_lo + T::kBN, w.seq.seqlen_k);
    row_ctx.cls = r_hi > r_lo ? Mask::classify(q_lo, q_hi, row_ctx.k_lo, k_hi, w.ctx) : mask::kSkip;
    row_ctx.bounded = row_ctx.k_lo + T::kBN > w.seq.seqlen_k;

    auto s_stage = s_cons.acquire();  // S_i(n) is in TMEM; scope exit publishes P_i(n)
    tmem::fence_after();

    float tile_max = kNegInf;
    float s_all[kRowInRegisters ? T::kBN : 1];
    if constexpr (kRowInRegisters) {
      u32 raw[kChunks][32];
#pragma unroll
      for (int c = 0; c < kChunks; ++c) tmem::ld_32x32b_x32(t_s + c * 32, raw[c]);
      tmem::wait_ld();
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        tmem::pin(raw[c]);
        float s[32];
        to_float(raw[c], s);
        row_ctx.transform(s, c * 32);
#pragma unroll
        for (int j = 0; j < 32; ++j) {
          s_all[c * 32 + j] = s[j];
          tile_max = fmaxf(tile_max, s[j]);
        }
      }
    } else {
      const bool rewrite = row_ctx.transforms();
#pragma unroll 1
      for (int c = 0; c < kChunks; ++c) {
        u32 raw[32];
        tmem::ld_32x32b_x32(t_s + c * 32, raw);
        tmem::wait_ld();
        tmem::pin(raw);
        if (rewrite) {
          float s[32];
          to_float(raw, s);
          row_ctx.transform(s, c * 32);
#pragma unroll
          for (int j = 0; j < 32; ++j) raw[j] = __float_as_uint(s[j]);
          tmem::st_32x32b_x32(t_s + c * 32, raw);
        }
#pragma unroll
        for (int j = 0; j < 32; ++j) tile_max = fmaxf(tile_max, __uint_as_float(raw[j]));
      }
      if (rewrite) tmem::wait_st();  // pass 2 reads the logits back
    }

    const float corr = row.template update_max<Row::kRescaleLog2>(tile_max, scale);
    if (n != n_first) {  // O_i holds earlier tiles: the correction WG rescales it if corr < 1
      auto c_stage = c_prod.acquire();
      corr_smem[r] = corr;
      c_stage.arrive();
    }
    float bias = row.exp_bias(scale);
    if constexpr (Row::kPShiftLog2 != 0) bias -= Row::kPShiftLog2;  // FP8: P x 2^8

    float tile_sum = 0.f;
    if constexpr (kRowInRegisters) {
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        float s[32];
#pragma unroll
        for (int j = 0; j < 32; ++j) s[j] = s_all[c * 32 + j];
        u32 pk[Row::kPCols];
        tile_sum += Row::exp_pack(s, scale, bias, pk);
        // P columns [16 c, 16 c + 16) (FP8: [8 c, 8 c + 8)) hold S columns < 32 c + 32, all read already.
        Row::store_p(t_s, c, pk);
      }
    } else {
#pragma unroll 1
      for (int c = 0; c < kChunks; ++c) {
        u32 raw[32];
        tmem::ld_32x32b_x32(t_s + c * 32, raw);
        tmem::wait_ld();
        tmem::pin(raw);
        float s[32];
        to_float(raw, s);
        u32 pk[Row::kPCols];
        tile_sum += Row::exp_pack(s, scale, bias, pk);
        // P chunk c covers columns [16 c, 16 c + 16) (FP8: [8 c, 8 c + 8)): logits of chunks <= c, read already.
        Row::store_p(t_s, c, pk);
      }
    }
    row.sum = fmaf(row.sum, corr, tile_sum);
  }

  // FP8: the sums were taken on P x 2^8; back to P's units before the sink and the LSE.
  if constexpr (Row::kPShiftLog2 != 0) row.sum *= 1.0f / static_cast<float>(1 << Row::kPShiftLog2);
  // Split-KV: only split 0 counts the sink, so the combine adds it once.
  if (p.sinks && w.split == 0) row.add_sink(p.sinks[row_ctx.ctx.q_head] * kLog2e, scale);
  float inv_sum = row.inv_sum();
  // O = P (V descale_v) / sum; the LSE does not change. FP8: O accumulated (P x 2^8) V.
  if constexpr (T::kDescaled) inv_sum *= descale_v * (1.0f / static_cast<float>(1 << Row::kPShiftLog2));
  epilogue<Config, Mask>(w, p, tma, tmem_base, smem, bars, tile, w.has(n_first), inv_sum, row.lse(scale));
}

}  // namespace sm100a
}  // namespace fa4
