// Online-softmax arithmetic shared by every backend: the per-row state update with lazy
// rescaling, the exp2 paths, and the final normalisation. Backends differ only in how a row
// is spread over threads (sm80: a quad of lanes; sm90a: a quad; sm100a: one thread per row);
// they reduce the tile maximum their own way and then call these.
//
// Domain: kernels keep the running maximum in the units the exponent is taken in after
// multiplying by `scale` (scale_log2 for identity score-mods, where scores stay raw; log2(e)
// after a score-mod). Masked scores are -inf; a row that has seen nothing has max -inf.
#pragma once
#include "common/prelude.cuh"

namespace fa4 {
namespace softmax {

// Keep the stale maximum unless the new one is larger by more than 2^8 (FA4): P then stays
// below 256, which fp32 accumulation and 16-bit P absorb, and O needs no rescale.
constexpr float kRescaleThresholdLog2 = 8.0f;

// FP8 P (e4m3 inputs: P is rounded to e4m3 for the P V MMA). O is rescaled whenever a row maximum
// grows (threshold 0), so P <= 1; P is then scaled by 2^kFp8PShiftLog2 before rounding (exact, folded
// into the exp2 bias), which keeps P >= 2^-14 in e4m3's normal range (below 2^-6 it has fewer
// mantissa bits) and <= 256 < 448 (e4m3's largest). The row sums are taken on the shifted P and
// shifted back before the epilogue, which also divides O by 2^kFp8PShiftLog2.
constexpr int kFp8RescaleThresholdLog2 = 0;
constexpr int kFp8PShiftLog2 = 8;

// FA4's software exp2: degree-3 minimax polynomial on the fraction, integer part added to
// the exponent field. Runs on the FMA pipe so part of the exponentials leave MUFU.
// Returns 0 below 2^-127 (so -inf maps to 0, like ex2.approx).
__device__ __forceinline__ float exp2_poly3(float x) {
  const float xc = fmaxf(x, -127.0f);
  float fl;
  asm("cvt.rmi.f32.f32 %0, %1;" : "=f"(fl) : "f"(xc));
  const float f = xc - fl;
  const float p = fmaf(fmaf(fmaf(0.0771190897f, f, 0.2275643945f), f, 0.6951461434f), f, 1.0f);
  const float r = __int_as_float(__float_as_int(p) + (static_cast<int>(fl) << 23));
  return x < -127.0f ? 0.0f : r;
}

struct RowState {
  float max;  // running maximum (kernel units, see above); -inf until a visible key
  float sum;  // running sum of exp2 terms relative to max
  // O's accumulator is relative to the maximum before add_sink; when the sink raises the maximum,
  // inv_sum() folds in the factor (a constant 1 in the main loop: no register is held for it).
  float o_scale;

  __device__ __forceinline__ void init() {
    max = kNegInf;
    sum = 0.0f;
    o_scale = 1.0f;
  }

  // Folds a tile's row maximum in. Returns the factor to multiply O and sum by
  // (1 when the stale maximum is kept or nothing was visible before). kThresholdLog2: how far
  // the maximum may grow before O is rescaled (FP8 P, which must stay below e4m3's 448: 0).
  template <int kThresholdLog2 = static_cast<int>(kRescaleThresholdLog2)>
  __device__ __forceinline__ float update_max(float tile_max, float scale) {
    const float m_new = fmaxf(max, tile_max);
    if (max == kNegInf) {  // first visible tile: O and sum are still zero
      max = m_new;
      return 1.0f;
    }
    const float grow = (m_new - max) * scale;
    if (grow > static_cast<float>(kThresholdLog2)) {
      const float corr = exp2_approx(-grow);
      max = m_new;
      return corr;
    }
    return 1.0f;
  }

  // Eager form (FlashAttention-3/4's Hopper softmax): the maximum always moves and the factor is
  // returned for every tile, without branches: 1 while nothing was visible, 0 on the first visible
  // tile (O and sum are still zero then).
  __device__ __forceinline__ float update_max_eager(float tile_max, float scale) {
    const float m_new = fmaxf(max, tile_max);
    const float corr = m_new == kNegInf ? 1.0f : exp2_approx((max - m_new) * scale);
    max = m_new;
    return corr;
  }

  // The exp2 bias to subtract from scaled scores: max * scale, or 0 for an empty row
  // (so exp2(-inf - 0) = 0 instead of NaN).
  __device__ __forceinline__ float exp_bias(float scale) const { return max == kNegInf ? 0.0f : max * scale; }

  // 1/sum for the epilogue (times the sink's O correction); 0 for a row with no visible key, so O = 0.
  __device__ __forceinline__ float inv_sum() const { return sum > 0.0f ? o_scale / sum : 0.0f; }

  // Natural-log LSE: ln(sum) + max*scale*ln2; -inf for a row with no visible key.
  __device__ __forceinline__ float lse(float scale) const {
    return sum > 0.0f ? (max * scale + __log2f(sum)) * kLn2 : kNegInf;
  }

  // Attention sink (gpt-oss): one more logit in the denominator only, added before the
  // epilogue. O is relative to `max`, so the sink joins the sum in the same units.
  // sink_log2 = sink * log2(e).
  // A sink far above the running maximum (a split that saw only distant keys under ALiBi, say)
  // moves the maximum to the sink, so nothing overflows; an empty row becomes all sink (O = 0).
  __device__ __forceinline__ void add_sink(float sink_log2, float scale) {
    const float d = sink_log2 - exp_bias(scale);
    if (max != kNegInf && d <= 0.0f) {
      sum += exp2_approx(d);
      return;
    }
    o_scale = max == kNegInf ? 0.0f : exp2_approx(-d);  // O relative to the old maximum
    sum = sum * o_scale + 1.0f;
    max = sink_log2 / scale;
  }
};

}  // namespace softmax
}  // namespace fa4
