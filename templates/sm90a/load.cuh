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

// ---- Persistent mode (Shape::kPersistent) ----
// One TMA stage (K or V ring) of KV tile n.
template <class Config>
__device__ __forceinline__ void load_kv_stage(pipe::Producer<Shape<Config>::kStages>& ring, const TmaDesc* map,
                                              unsigned char* ring_base, int row, const TmaCoords& c) {
  using Sh = Shape<Config>;
  using L = SmemLayout<Config>;
  auto st = ring.acquire();
  st.expect_bytes(L::kKVStageBytes);
  unsigned char* dst = ring_base + st.index() * L::kKVStageBytes;
#pragma unroll
  for (int ch = 0; ch < Sh::kChunks; ++ch)
    tma_load_4d(dst + ch * (Sh::kBN * 128), map, st.full_barrier(), ch * 64, row, c.kv_head, c.kv_batch);
}

// Q of every consumer warpgroup for one tile, each after its q_empty (the warpgroup's previous
// epilogue is done with the region). load == false (tile without KV tiles or without Q rows):
// plain arrival on q_full instead of bytes, so q_full / q_empty keep one phase per tile on both sides.
template <class Config, class Mask>
__device__ __forceinline__ void load_q_persistent(const TmaDescs& tma, const CtaWork<Config, Mask>& w,
                                                  const TmaCoords& c, unsigned char* smem,
                                                  typename SmemLayout<Config>::Barriers* bars, u32 q_empty_phase,
                                                  bool load) {
  using Sh = Shape<Config>;
  using L = SmemLayout<Config>;
#pragma unroll
  for (int g = 0; g < Sh::kNumConsumerWGs; ++g) {
    mbar_wait(&bars->q_empty[g], q_empty_phase);
    u64* bar = &bars->q_full[g];
    if (load) {
      mbar_expect_tx(bar, L::kQWgBytes);
#pragma unroll
      for (int ch = 0; ch < Sh::kChunks; ++ch)
        tma_load_4d(smem + L::kQOffset + g * L::kQWgBytes + ch * (Sh::kWgRows * 128), &tma.q, bar, ch * 64,
                    c.q_row0 + w.q_lo + g * Sh::kWgRows, c.q_head, c.q_batch);
    } else {
      mbar_arrive(bar);
    }
  }
}

// Called by exactly one thread. Tiles t = blockIdx.x + i * gridDim.x (PersistentTiles); the K/V
// rings keep their index/phase across tiles. Per tile i of the sequence:
//   valid tile with KV tiles: K(first) [its ring slot only depends on earlier tiles' releases, so it
//   is issued before the wait on the previous epilogue], then per warpgroup g: wait q_empty[g]
//   (parity (i & 1) ^ 1; i = 0 passes at once on the fresh barrier), Q(g) on q_full[g]; then
//   V(first), K(n), V(n), ... in the consumers' order;
//   any other tile (no KV tile, or no Q rows): the q_empty waits + plain q_full arrivals only.
// So q_full[g] / q_empty[g] complete exactly one phase per tile i on both sides.
template <class Config, class Mask>
__device__ __forceinline__ void producer_loop_persistent(const FwdParams& p, const TmaDescs& tma, unsigned char* smem,
                                                         typename SmemLayout<Config>::Barriers* bars) {
  using Sh = Shape<Config>;
  using L = SmemLayout<Config>;
  pipe::Producer<Sh::kStages> k_ring(&bars->k), v_ring(&bars->v);
  for (auto tiles = PersistentTiles<Mask>::make(); tiles.valid(p); tiles.advance()) {
    const CtaWork<Config, Mask> w = tiles.template work<Sh::kBM, Sh::kBN>(p);
    const u32 q_empty_phase = tiles.parity() ^ 1u;
    const TmaCoords c = TmaCoords::make(p, w.seq);
    int n = w.first_tile();  // none when !w.valid (empty KV range)
    if (w.has(n)) {
      load_kv_stage<Config>(k_ring, &tma.k, smem + L::kKOffset, c.kv_row0 + n * Sh::kBN, c);
      load_q_persistent<Config, Mask>(tma, w, c, smem, bars, q_empty_phase, true);
      load_kv_stage<Config>(v_ring, &tma.v, smem + L::kVOffset, c.kv_row0 + n * Sh::kBN, c);
      for (n = w.next_tile(n); w.has(n); n = w.next_tile(n)) {
        load_kv_stage<Config>(k_ring, &tma.k, smem + L::kKOffset, c.kv_row0 + n * Sh::kBN, c);
        load_kv_stage<Config>(v_ring, &tma.v, smem + L::kVOffset, c.kv_row0 + n * Sh::kBN, c);
      }
    } else {
      load_q_persistent<Config, Mask>(tma, w, c, smem, bars, q_empty_phase, false);
    }
  }
}

}  // namespace sm90a
}  // namespace fa4
