// sm80 forward attention (FlashAttention-2 structure, portable to sm_80..sm_120):
// one CTA = kBM query rows of one (batch, head) (or kBM packed rows of one KV head's group);
// 4 warps, each owning kBM/4 rows end to end. A V of 512 (sm80/abi.h o_split) runs twice the warps
// over the rows (8 at BM 64; 4 at BM 32, which 99 KiB parts run): warps w and w + kRowWarps own the
// same rows, compute the same S and softmax, and each P V's and stores one half of O's columns
// (Traits::row_warp, o_slice).
//
//   Q tile + first KV tiles --cp.async--> smem          (zero-filled past seqlen)
//   for each non-skipped KV tile n in Mask::kv_range:   (same order for loads and compute)
//     wait tile n; barrier; prefetch tile n+S-1 into the stage freed last iteration
//     S = Q K^T            ldmatrix + mma.sync, f32 accumulators in registers
//     score-mod / mask     only on partial tiles (plus score-mods everywhere)
//     online softmax       quad shuffles, RowState lazy rescale, P = exp2 in place of S
//     O += P V             P re-packed from S fragments in registers (no smem round trip)
//   O / sum -> smem staging -> 16-byte stores; LSE
//
// V's head dim (T::kDepthV, FA4Config::depth_v) may be narrower than Q's and K's (192 / 128): the
// V ring, P V's N, the O accumulator, the staging and the stores are then V's width (T::VRows);
// S = Q K^T keeps the Q/K depth.
//
// Variants (docs: common/tile_work.cuh, common/sequence.cuh, common/combine.cuh):
//   split-KV   blockIdx.x = m_linear * num_splits + split; TileWork::keep_share gives the split's
//              share of the KV tiles; the epilogue writes float32 partial O / LSE instead of O.
//   GQA pack   kPack = group > 1: blockIdx.y is the KV head, tile row r is query r / kPack of
//              head blockIdx.y * kPack + r % kPack (PackedRow), for Q loads, masks, score-mods,
//              sinks, O and LSE.
//   paged KV   p.page_table: K/V rows through the page table (KVBuffer::load_paged).
//   block mask Mask::classify (mask::Custom) skips tiles and spares full tiles the masking.
//   FP8 KV    T::kFp8KV (kv_dtype e4m3): K/V tiles land in e4m3 staging stages; after the wait
//              every thread converts its chunks of tile n into the one 16-bit K/V stage
//              (KVBuffer::convert) and a second barrier publishes it, so the MMA code is the
//              16-bit kernel's. descale_k joins the logit scale (scale, or qk_mul before a
//              score-mod), so the LSE and sinks see dequantised scores; descale_v scales O in
//              the epilogue.
#pragma once
#include "common/mask.cuh"
#include "common/prelude.cuh"
#include "common/score_mod.cuh"
#include "common/sequence.cuh"
#include "common/softmax.cuh"
#include "common/tile_work.cuh"
#include "sm80/epilogue.cuh"
#include "sm80/kv_buffer.cuh"
#include "sm80/mma.cuh"
#include "sm80/q_tile.cuh"
#include "sm80/softmax.cuh"
#include "sm80/traits.cuh"

namespace fa4 {
namespace sm80 {

// Whether classify() can return kSkip strictly inside kv_range(). The built-in single masks
// have one contiguous band of visible keys per Q tile, so every tile in the range has work;
// only unions (and user masks, which we cannot inspect) may leave holes. Skipping is then
// decided per tile; otherwise the tile walk is a plain counter (fewer live registers).
// Correctness does not depend on this trait: a kSkip tile that is walked anyway is treated
// as partial and masked element by element (all -inf), so `false` only costs work.
template <class Mask> struct MaySkipInRange { static constexpr bool value = true; };
template <> struct MaySkipInRange<mask::None> { static constexpr bool value = false; };
template <> struct MaySkipInRange<mask::Causal> { static constexpr bool value = false; };
template <> struct MaySkipInRange<mask::SlidingWindow> { static constexpr bool value = false; };
template <> struct MaySkipInRange<mask::Chunked> { static constexpr bool value = false; };
template <> struct MaySkipInRange<mask::Prefixed<mask::Causal>> { static constexpr bool value = false; };
template <class A, class B> struct MaySkipInRange<mask::And<A, B>> {
  static constexpr bool value = MaySkipInRange<A>::value || MaySkipInRange<B>::value;
};

__device__ __forceinline__ unsigned char* dynamic_smem() {
  extern __shared__ __align__(1024) unsigned char fa4_sm80_smem[];
  return fa4_sm80_smem;
}

// S = Q K^T for one KV tile (raw scores, f32).
template <class T>
__device__ __forceinline__ void gemm_qk(float (&s)[T::kMTiles][T::kNTiles][4], const QTile<T>& q,
                                        const KVBuffer<T>& kv, const QKLane<T>& lane_q_in,
                                        const QKLane<T>& lane_k_in, int stage) {
  const QKLane<T> lane_q = lane_q_in.refreshed(), lane_k = lane_k_in.refreshed();
#pragma unroll
  for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
    for (int j = 0; j < T::kNTiles; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[mt][j][e] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < T::D / 16; ++kk) {
    u32 a[T::kMTiles][4];
#pragma unroll
    for (int mt = 0; mt < T::kMTiles; ++mt) q.load_from_shared(a[mt], lane_q, mt, kk);
#pragma unroll
    for (int j = 0; j < T::kNTiles / 2; ++j) {
      u32 b[4];
      kv.load_k_from_shared(b, lane_k, stage, j, kk);
#pragma unroll
      for (int mt = 0; mt < T::kMTiles; ++mt) {
        mma_16816<typename T::Element>(s[mt][2 * j], a[mt], b[0], b[1]);
        mma_16816<typename T::Element>(s[mt][2 * j + 1], a[mt], b[2], b[3]);
      }
    }
  }
}

// O += P V for one KV tile, P taken from the S fragments (already exponentiated) and packed
// to 16-bit A fragments one k-step at a time. N: the warp's O slice of V's padded depth (T::kDTiles
// n8 blocks, from the slice's first column: v_lane).
template <class T>
__device__ __forceinline__ void gemm_pv(float (&o)[T::kMTiles][T::kDTiles][4], const float (&s)[T::kMTiles][T::kNTiles][4],
                                        const KVBuffer<T>& kv, const VLane<T>& lane_in, int stage) {
  const VLane<T> lane = lane_in.refreshed();
#pragma unroll
  for (int kk = 0; kk < T::kBN / 16; ++kk) {
    u32 a[T::kMTiles][4];
#pragma unroll
    for (int mt = 0; mt < T::kMTiles; ++mt) s_to_a_fragment<typename T::Element>(a[mt], s[mt][2 * kk], s[mt][2 * kk + 1]);
#pragma unroll
    for (int j = 0; j < T::kDTiles / 2; ++j) {
      u32 b[4];
      kv.load_v_from_shared(b, lane, stage, kk, j);
#pragma unroll
      for (int mt = 0; mt < T::kMTiles; ++mt) {
        mma_16816<typename T::Element>(o[mt][2 * j], a[mt], b[0], b[1]);
        mma_16816<typename T::Element>(o[mt][2 * j + 1], a[mt], b[2], b[3]);
      }
    }
  }
}

// V's ldmatrix lane offset (row l % 16, chunk l / 16, as Q's) in the warp's O slice: Q's own when
// V's rows are Q's (one type then) and O is not split; else rebuilt from a fresh %tid per tile, so
// that no second offset stays live across the KV loop.
template <class T>
__device__ __forceinline__ VLane<T> v_lane(const QKLane<T>& lane_qv) {
  if constexpr (T::kNarrowV || T::kOSplit > 1) {
    const int tid = fresh_tid_x(), l = tid & 31;
    return VLane<T>::make(l & 15, l >> 4).plus(T::o_slice(tid >> 5) * T::kOCols * 2);
  } else {
    return lane_qv;
  }
}

// The CTA's Q tile and KV split from blockIdx.x = m_linear * num_splits + split, decoded like
// TileWork::make (masked problems: later query tiles see more keys, so the heaviest start
// first). Fresh special-register reads: the epilogue decodes again instead of carrying these.
struct CtaTile {
  int m_block, split;
};
template <class Mask>
__device__ __forceinline__ CtaTile cta_tile(const FwdParams& p) {
  int x = fresh_ctaid_x(), m_blocks = fresh_nctaid_x(), split = 0;
  if (p.num_splits > 1) {
    split = x % p.num_splits;
    x /= p.num_splits;
    m_blocks /= p.num_splits;
  }
  return {Mask::kIsNone ? x : m_blocks - 1 - x, split};
}

template <class Config, class Mask, class ScoreMod>
__device__ __forceinline__ void attention_fwd(const FwdParams& p) {
  using T = Traits<Config>;
  constexpr int kBM = T::kBM, kBN = T::kBN, S = T::kStages, kPack = T::kPack;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;

  // Grid (num_m_blocks * num_splits, q heads or KV heads when packed, batch). TileWork::finish
  // gives the rows and KV tiles, keep_share this split's share, the same for every backend.
  const int b = blockIdx.z, head = static_cast<int>(blockIdx.y) * kPack;
  TileWork<kBM, kBN, Mask, kPack> work;
  work.seq = SeqInfo::make(p, b, head);
  work.ctx = mask::Ctx::make(p, b, head, work.seq.seqlen_q, work.seq.seqlen_k, kPack);
  {
    const CtaTile ct = cta_tile<Mask>(p);
    work.m_block = ct.m_block;
    work.split = ct.split;
  }
  work.finish(p);
  if (p.num_splits > 1) work.keep_share(work.split, work.split + 1, p.num_splits);
  if (!work.valid) return;  // varlen: this sequence is shorter than the grid (CTA-uniform)
  const SeqInfo& seq = work.seq;
  const mask::Ctx& ctx = work.ctx;
  const int q_lo = work.q_lo;
  const int n_begin = work.n_begin, n_end = work.n_end;
  auto tile_class = [&](int n) { return work.classify(n); };
  // First tile >= n that the mask does not skip (n_end if none). Loads and compute both walk
  // the tiles with this function, so the ring stays in step without any bookkeeping shared.
  auto next_tile = [&](int n) {
    if constexpr (MaySkipInRange<Mask>::value)
      while (n < n_end && tile_class(n) == mask::kSkip) ++n;
    return n;
  };

  unsigned char* smem = dynamic_smem();
  const u32 smem_q = smem_u32(smem);
  QTile<T> q_tile;
  q_tile.init(smem_q, T::row_warp(warp));
  KVBuffer<T> kv;
  kv.init(p, seq, smem_q + T::kQBytes, smem_q + T::kQBytes + T::kKBytes);
  // ldmatrix lane offsets (the swizzle term is always lane & 7). Q and V: lane l addresses
  // row l % 16, chunk l / 16 of a 16x16 block. K: row (l & 7) + 8 * (l / 16), chunk (l / 8) % 2,
  // so that each n8 block's (b0, b1) land in adjacent registers as mma wants them (no moves).
  const QKLane<T> lane_qv = QKLane<T>::make(lane & 15, lane >> 4);
  const QKLane<T> lane_k = QKLane<T>::make((lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);

  // Prologue: Q joins the first group; the first S-1 tiles go to their stages (see the loop).
  // Every stage commits a group, empty or not, so wait_group counts stay uniform.
  constexpr bool kMaySkip = MaySkipInRange<Mask>::value;
  q_tile.load_from_dram(p, seq, q_lo, tid);
  int n_load = next_tile(n_begin);
#pragma unroll
  for (int st = 0; st < S - 1; ++st) {
    if (n_load < n_end) {
      kv.load_from_dram(p, n_load, kMaySkip ? st : static_cast<int>(static_cast<unsigned>(n_load) % S), tid);
      n_load = next_tile(n_load + 1);
    }
    cp_async_commit();
  }

  float o[T::kMTiles][T::kDTiles][4];
#pragma unroll
  for (int mt = 0; mt < T::kMTiles; ++mt)
#pragma unroll
    for (int d = 0; d < T::kDTiles; ++d)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[mt][d][e] = 0.0f;
  softmax::RowState rs[T::kMTiles][2];
#pragma unroll
  for (int mt = 0; mt < T::kMTiles; ++mt) {
    rs[mt][0].init();
    rs[mt][1].init();
  }
  float scale = ScoreMod::kIsIdentity ? p.scale_log2 : 1.0f;
  // FP8 KV cache: descale_k of (batch, KV head) joins the logit scale: the exp2 scale (identity
  // score-mod; the epilogue's LSE and sink use it too) or qk_mul, which multiplies raw S before a
  // score-mod (16-bit: unused, score_mod_and_mask takes p.softmax_scale). Held across the loop: a
  // per-tile re-read spilled more (ptxas at 255 registers either way).
  float qk_mul = 0.0f;
  if constexpr (T::kFp8KV) {
    if constexpr (ScoreMod::kIsIdentity) scale = kv_descaled<T>(p.scale_log2, p.descale_k, p, seq.batch, seq.kv_head);
    else qk_mul = kv_descaled<T>(p.softmax_scale, p.descale_k, p, seq.batch, seq.kv_head);
  }

  // Contiguous masks: tile n sits in stage n % S and the prefetch is tile n+S-1 (into stage
  // (n-1) % S, freed last iteration), both derived from n alone: n_begin (a split's first tile)
  // need not stay live. Masks with holes track the load cursor and the stage explicitly.
  int stage_tracked = 0;
  for (int n = next_tile(n_begin); n < n_end; n = next_tile(n + 1)) {
    const int stage = kMaySkip ? stage_tracked : static_cast<int>(static_cast<unsigned>(n) % S);
    const int load_stage = stage + S - 1 >= S ? stage - 1 : stage + S - 1;
    const int load_tile = kMaySkip ? n_load : n + S - 1;
    // Tile n landed (at most S-2 younger groups in flight) and every warp is done with the
    // stage computed last iteration, which the prefetch below overwrites.
    KVBuffer<T>::template copy_to_shared<S - 2>();
    if (load_tile < n_end) {
      kv.load_from_dram(p, load_tile, load_stage, tid);
      if constexpr (kMaySkip) n_load = next_tile(n_load + 1);
    }
    cp_async_commit();
    // FP8 KV cache: e4m3 tile n -> the 16-bit stage. The barrier above saw every warp finish its
    // P V of the previous tile (the stage's last reader); the one below publishes the conversion.
    // The prefetch just issued writes another e4m3 stage (converted last iteration, before its barrier).
    if constexpr (T::kFp8KV) {
      kv.convert(stage, tid);
      __syncthreads();
    }
    const int mma_stage = T::kFp8KV ? 0 : stage;  // the 16-bit stage the ldmatrix code reads

    float s[T::kMTiles][T::kNTiles][4];
    gemm_qk<T>(s, q_tile, kv, lane_qv, lane_k, mma_stage);

    const bool partial = (!Mask::kIsNone && tile_class(n) != mask::kFull) || (n + 1) * kBN > seq.seqlen_k;
    {
      // This lane's first query row and first key column of the tile (C fragment layout);
      // derived here from threadIdx so they hold no registers across the loop.
      const int l = threadIdx.x & 31, w = T::row_warp(threadIdx.x >> 5);
      score_mod_and_mask<T, Mask, ScoreMod>(s, partial, q_lo + w * T::kWarpRows + (l >> 2), n * kBN + 2 * (l & 3),
                                            ctx, p, qk_mul);
    }
    online_softmax<T>(s, o, rs, scale);

    gemm_pv<T>(o, s, kv, v_lane<T>(lane_qv), mma_stage);
    if constexpr (kMaySkip) stage_tracked = stage + 1 == S ? 0 : stage + 1;
  }

  // Drain (empty groups, or the Q copy when no tile was visible) before reusing Q as staging.
  cp_async_wait<0>();
  __syncthreads();
  // Rebuild the sequence view and ids rather than carrying o_offset/lse_offset (64-bit,
  // epilogue-only) and the block indices through the KV loop.
  const int tid_out = fresh_tid_x();
  const CtaTile ct = cta_tile<Mask>(p);
  const SeqInfo seq_out = SeqInfo::make(p, fresh_ctaid_z(), fresh_ctaid_y() * kPack);
  epilogue<T>(o, rs, scale, p, seq_out, ct.m_block * kBM, ct.split, smem_q, tid_out >> 5, tid_out & 31);
}

}  // namespace sm80
}  // namespace fa4
