// sm90a (Hopper) forward attention, FlashAttention-3 structure:
//   warpgroup 0: producer (setmaxnreg.dec), one elected thread of warp 0 issues all TMA loads;
//   warpgroups 1..kBM/64: consumers (setmaxnreg.inc), 64 Q rows each, wgmma S = Q K^T (SS) and
//   O += P V (RS, P from registers), online softmax on the accumulator fragments, epilogue.
// Grid (ceil(max_seqlen_q / kBM), q heads, batch); 128 * (1 + kBM/64) threads (384 for kBM 128,
// 512 for kBM 192); dynamic smem per the ABI formula.
// Layout, TMA maps and protocol: docs/HOPPER.md.
#pragma once
#include "common/prelude.cuh"
#include "common/mbarrier.cuh"
#include "common/pipeline.cuh"
#include "common/sequence.cuh"
#include "common/mask.cuh"
#include "common/score_mod.cuh"
#include "common/softmax.cuh"
#include "sm90a/smem_layout.cuh"
#include "sm90a/walk.cuh"
#include "sm90a/mma.cuh"
#include "sm90a/softmax.cuh"
#include "sm90a/producer.cuh"
#include "sm90a/helpers.cuh"
#include "sm90a/epilogue.cuh"
#include "sm90a/consumer.cuh"

namespace fa4 {
namespace sm90a {

// Every role walks the CTA's tile walk (TileWalker, walk.cuh): GridTiles (one CTA per unit),
// PersistentTiles (Config::kPersistent = 1: grid (min(#SMs, units), 1, 1)) or SegmentTiles
// (stream-K, 2); the walks are common/grid_walk.h, persistent_walk.h and stream_k_walk.h.
// Persistent protocol: docs/HOPPER.md "Persistent mode".
template <class Config, class Mask, class ScoreMod>
__device__ __forceinline__ void attention_fwd(const FwdParams& p, const TmaDescs& tma) {
  using Sh = Shape<Config>;
  using L = SmemLayout<Config>;
  using Bars = typename L::Barriers;
  extern __shared__ __align__(1024) unsigned char fa4_smem[];
  unsigned char* smem = fa4_smem;
  Bars* bars = reinterpret_cast<Bars*>(smem + L::kBarOffset);

  // One CTA, one tile: its work is known up front. Persistent: each role walks PersistentTiles.
  CtaWork<Config, Mask> w{};
  if constexpr (!Sh::kPersistent) {
    w = CtaWork<Config, Mask>::make(p);
    if (!w.valid) return;  // uniform over the CTA, before any barrier exists
  }

  if (threadIdx.x == 0) {
    // SW128 TMA boxes and wgmma descriptors (base_offset 0) assume 1024-aligned buffers.
    if (smem_u32(smem) & 1023u) __trap();
#pragma unroll
    for (int g = 0; g < Sh::kNumConsumerWGs; ++g) {
      mbar_init(&bars->q_full[g], 1);  // producer: expect_tx (+ Q bytes), or a plain arrive (persistent, empty tile)
      // Row group g's threads (the warpgroups of an O split share its Q), done with Q.
      if constexpr (Sh::kPersistent)
        if (g < Sh::kRowWGs) mbar_init(&bars->q_empty[g], 128 * Sh::kOSplit);
    }
    // full: the producer's expect_tx arrival, or each gathering thread's (32 a gathering warp);
    // empty: every consumer warp (8 or 12) arrives once.
    const u32 fills = gathers_kv<Config>(p) ? 32 * kGatherWarps<Config> : 1;
    if constexpr (Sh::kFp8) {  // V -> transposer warps (3) -> Vt (every transposer thread) -> consumers
      bars->k.init(fills, Sh::kNumConsumerWGs * 4);
      bars->v.init(fills, kHelperThreads / 32);
      bars->vt.init(kHelperThreads, Sh::kNumConsumerWGs * 4);
    } else if constexpr (Sh::kKvFp8) {  // e4m3 K, V -> converter warps (3) -> K, V (every converter thread) -> consumers
      bars->k_load.init(fills, kHelperThreads);  // every converter thread releases (helpers.cuh convert_loop)
      bars->v_load.init(fills, kHelperThreads);
      bars->k.init(kHelperThreads, Sh::kKReaderWGs * 4);
      bars->v.init(kHelperThreads, Sh::kNumConsumerWGs * 4);  // latent KV: the converters hand V on too
    } else {
      bars->k.init(fills, Sh::kKReaderWGs * 4);  // O-split: only the warpgroups computing S read K
      bars->v.init(fills, Sh::kNumConsumerWGs * 4);
      if constexpr (Sh::kKParts > 1)  // the producer's expect_tx arrival (gathered stages: unused)
        for (int i = 0; i < Sh::kStages * (Sh::kKParts - 1); ++i) mbar_init(&bars->k_part[i], 1);
    }
    if constexpr (Sh::kOSplit > 1) bars->p.init(128, 128);  // the S warpgroup's threads -> the partner's
    fence_barrier_init();
  }
  __syncthreads();

  const int wg = static_cast<int>(warp_uniform(threadIdx.x / 128));  // role branches, Q address: uniform
  if (wg == 0) {
    setmaxnreg_dec<Sh::kProducerRegs>();
    if constexpr (Sh::kProducerHelpers) {  // warps 1-3: V -> Vt, or e4m3 K, V -> 16-bit (the grid or persistent walk)
      if (threadIdx.x >= 32) {
        const int t = static_cast<int>(threadIdx.x) - 32;
        if constexpr (Sh::kFp8)
          transpose_loop<Config, Mask>(p, cta_tiles<Config, Mask>(w), smem, bars, t);
        else
          convert_loop<Config, Mask>(p, cta_tiles<Config, Mask>(w), smem, bars, t);
        return;
      }
    }
    if (threadIdx.x < 32 * kGatherWarps<Config> && gathers_kv<Config>(p)) {
      gather_producer<Config, Mask>(p, tma, w, smem, bars);  // the gathering warps: thread 0 loads Q, every lane K / V rows
    } else if (threadIdx.x < 32 && elect_one_sync()) {
      tma_prefetch(&tma.q);
      tma_prefetch(&tma.k);
      tma_prefetch(&tma.v);
      if constexpr (Sh::kPersistent) {
        producer_loop<Config, Mask, false>(p, tma, TileWalker<Config, Mask>::make(), smem, bars);  // paged: a branch per tile
      } else {
        // Paged KV: a separate copy of the loop, chosen once (uniform), so the unpaged one is
        // exactly the loop that unpaged launches always ran.
        if (Sh::kRuntimeVariants && p.page_table)
          producer_loop<Config, Mask, true>(p, tma, GridTiles<CtaWork<Config, Mask>>{w, 0}, smem, bars);
        else
          producer_loop<Config, Mask, false>(p, tma, GridTiles<CtaWork<Config, Mask>>{w, 0}, smem, bars);
      }
    }
  } else {
    setmaxnreg_inc<Sh::kConsumerRegs>();
    consumer_loop<Config, Mask, ScoreMod>(p, cta_tiles<Config, Mask>(w), smem, bars, wg - 1);
  }
}

}  // namespace sm90a
}  // namespace fa4
