// Producer warp of the sm90a kernel: one elected thread issues every TMA load (Q once, then
// K and V per KV tile through the two pipe::Producer rings), in the consumers' tile order.
#pragma once
#include "common/mbarrier.cuh"
#include "common/pipeline.cuh"
#include "sm90a/layout.cuh"

namespace fa4 {
namespace sm90a {

// Called by exactly one thread. Loads nothing when the CTA has no KV tile (the consumers then
// skip Q as well), so no barrier is left waiting for bytes that never come.
template <class Config, class Mask>
__device__ __forceinline__ void producer_loop(const FwdParams& p, const TmaDescs& tma, const CtaWork<Config, Mask>& w,
                                              unsigned char* smem, typename SmemLayout<Config>::Barriers* bars) {
  using Sh = Shape<Config>;
  using L = SmemLayout<Config>;
  int n = w.first_tile();
  if (!w.has(n)) return;
  const TmaCoords c = TmaCoords::make(p, w.seq);

  // Q: one tile of 64 rows per consumer warpgroup, Dp/64 boxes of [64 rows][64 depth] each.
#pragma unroll
  for (int g = 0; g < Sh::kNumConsumerWGs; ++g) {
    u64* bar = &bars->q_full[g];
    mbar_expect_tx(bar, L::kQWgBytes);
#pragma unroll
    for (int ch = 0; ch < Sh::kChunks; ++ch)
      tma_load_4d(smem + L::kQOffset + g * L::kQWgBytes + ch * (Sh::kWgRows * 128), &tma.q, bar, ch * 64,
                  c.q_row0 + w.q_lo + g * Sh::kWgRows, c.q_head, c.q_batch);
  }

  pipe::Producer<Sh::kStages> k_ring(&bars->k), v_ring(&bars->v);
  for (; w.has(n); n = w.next_tile(n)) {
    const int row = c.kv_row0 + n * Sh::kBN;
    {  // K tile n; consumers need K(n) before V(n-1) in the overlapped schedule, V(n) after.
      auto st = k_ring.acquire();
      st.expect_bytes(L::kKVStageBytes);
      unsigned char* dst = smem + L::kKOffset + st.index() * L::kKVStageBytes;
#pragma unroll
      for (int ch = 0; ch < Sh::kChunks; ++ch)
        tma_load_4d(dst + ch * (Sh::kBN * 128), &tma.k, st.full_barrier(), ch * 64, row, c.kv_head, c.kv_batch);
    }
    {
      auto st = v_ring.acquire();
      st.expect_bytes(L::kKVStageBytes);
      unsigned char* dst = smem + L::kVOffset + st.index() * L::kKVStageBytes;
#pragma unroll
      for (int ch = 0; ch < Sh::kChunks; ++ch)
        tma_load_4d(dst + ch * (Sh::kBN * 128), &tma.v, st.full_barrier(), ch * 64, row, c.kv_head, c.kv_batch);
    }
  }
}

}  // namespace sm90a
}  // namespace fa4
