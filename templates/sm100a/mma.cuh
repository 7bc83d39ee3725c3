// SM100MHA2Q.mma: the MMA warp (warp 12). One elected thread issues every tcgen05.mma.
//
// Order (TMAConsumerPipeline): per KV tile n = 0, 1, .. of the CTA's walk (Work: descending from
// the tile that crosses seqlen_k, kSkip tiles skipped, this split's share only)
//   0. S0 <- Q0 K_n'            commit s[0].full
//   1. O1 <- O1 + P1 V_{n-1}    (n > 0) wait P1, O1 free; commit o[1]; release V_{n-1}
//   2. S1 <- Q1 K_n'            release K_n chunks; commit s[1].full
//   3. O0 <- O0 + P0 V_n        wait P0, O0 free; commit o[0] (o_final[0] on the last tile)
// then O1 <- O1 + P1 V_last. Two MMAs separate producing S_i from consuming P_i, so one
// softmax warpgroup works while the tensor core serves the other. MMAs of one thread run in
// issue order, so S_i(n+1) overwriting P_i(n) in TMEM is safe once P_i(n) V has been issued.
#pragma once
#include "sm100a/traits.cuh"
#include "sm100a/pipelines.cuh"

namespace fa4 {
namespace sm100a {

template <class Config>
struct MmaIssuer {
  using T = Traits<Config>;
  using Element = typename T::Element;
  // S = Q K': M 128, N BN, K Dp, both K-major. O += P V: M 128, N DpV (V's width), A (P) from TMEM, V MN-major (also
  // for e4m3: kind::f8f6f4 takes an MN-major B for 8-bit types, so V needs no transpose).
  static constexpr u32 kIdescQK = umma::instr_desc<Element>(128, T::kBN, false, false);
  static constexpr u32 kIdescPV = umma::instr_desc<Element>(128, T::kDpV, false, true);

  u32 tmem;     // TMEM base (lane 0, column 0)
  u32 q_smem;   // shared addresses
  u32 k_smem;
  u32 v_smem;

  // One K chunk (BK0 of depth) of S_tile = Q_tile K'. Within a 128-byte box row a K step (k16, or
  // k32 for e4m3) is +32 bytes along the swizzled row (the hardware applies the swizzle to the final
  // address).
  __device__ __forceinline__ void qk_chunk(int tile, u32 k_slot, int chunk) const {
    const u32 q_base = q_smem + tile * T::kQTileBytes;
    const u32 k_base = k_smem + k_slot * T::kKChunkBytes;
#pragma unroll
    for (int kk = 0; kk < T::kBK0 / T::kMmaK; ++kk) {
      const int box = kk / (T::kBox / T::kMmaK), in_box = kk % (T::kBox / T::kMmaK);
      const int q_box = chunk * (T::kBK0 / T::kBox) + box;
      const u64 a = umma::smem_desc_sw128(q_base + q_box * T::kTileM * 128 + in_box * 32, 16, 1024);
      const u64 b = umma::smem_desc_sw128(k_base + box * T::kBN * 128 + in_box * 32, 16, 1024);
      umma::mma_ss<Element>(tmem + T::tmem_s(tile), a, b, kIdescQK, (chunk > 0 || kk > 0) ? 1u : 0u);
    }
  }

  // O_tile (+)= P_tile V. P: BN values per lane packed in BN/kPPerColumn columns (2 x 16-bit or
  // 4 x e4m3), a K step (32 bytes of P) is 8 columns. V slot: DpV/kBox boxes of [BN keys][128 B of
  // depth]; a K step is kMmaK key rows (16-bit: 2048 bytes, e4m3: 4096, whole swizzle atoms); LBO
  // steps between the 128-byte depth boxes (16-bit d128: two; e4m3: one, LBO unused).
  // k_steps < BN/16 on the tile crossing seqlen_k: key blocks entirely past seqlen_k are not multiplied
  // (MAX's mma_maybe_partial_k), so rows there (padding, seqused_k tail) never reach O.
  __device__ __forceinline__ void pv(int tile, u32 v_slot, bool accumulate, int k_steps) const {
    // Rolled: one descriptor and one TMEM address advance per step keeps the MMA warp
    // within its 48 registers; issue cost is a few instructions per 128 x DpV x 16 MMA.
    u64 b = umma::smem_desc_sw128(v_smem + v_slot * T::kVStageBytes, T::kBN * 128, 1024);
    u32 a = tmem + T::tmem_s(tile);
    const u32 d = tmem + T::tmem_o(tile);
#pragma unroll 1
    for (int kk = 0; kk < k_steps; ++kk) {
      umma::mma_ts<Element>(d, a, b, kIdescPV, (accumulate || kk > 0) ? 1u : 0u);
      b = umma::desc_advance(b, T::kMmaK * 128);
      a += T::kMmaK / T::kPPerColumn;
    }
  }
};

template <class Config, class Mask>
__device__ __forceinline__ void mma(const FwdParams& p, u32 tmem_base, unsigned char* smem,
                                    BarriersOf<Config>& bars) {
  using T = Traits<Config>;
  if (!elect_one_sync()) return;
  const Work<Config, Mask> w = make_work<Config, Mask>(p);  // the same tiles as every other role
  const int n_first = w.first_tile();
  if (!w.has(n_first)) return;
  // The MMAs only depend on how many tiles the walk visits, not which: count them before the
  // loop (overlapping the first TMA loads), so the loop keeps no mask classification live in
  // this warp's 48 registers. The walk descends, so only its first tile can cross seqlen_k:
  // K-step blocks (16 keys, e4m3: 32) entirely past seqlen_k there are not multiplied.
  int N = 0;
#pragma unroll 1
  for (int n = n_first; w.has(n); n = w.next_tile(n)) ++N;
  constexpr int kSteps = T::kBN / T::kMmaK;
  const int first_steps = min(kSteps, ceil_div(w.seq.seqlen_k - n_first * T::kBN, T::kMmaK));

  const MmaIssuer<Config> issue{tmem_base, smem_u32(smem + T::kQOff), smem_u32(smem + T::kKOff),
                                smem_u32(smem + T::kVOff)};
  // Gathered 16-bit stages come through the generic proxy (an FP8 KV cache's converters fence).
  const bool generic = !T::kFp8KV && gathers_kv_rows(p);
  TMAConsumerPipeline<T::kKSlots> k_pipe(&bars.k, generic);
  TMAConsumerPipeline<T::kStages> v_pipe(&bars.v, generic);
  SPProducer sp[2] = {SPProducer(&bars.s[0]), SPProducer(&bars.s[1])};
  OProducer o_prod[2] = {OProducer(&bars.o[0]), OProducer(&bars.o[1])};

  // O_tile += P_tile V(slot) for the n-th visited tile. The O stage is free once the correction
  // WG has rescaled it.
  auto pv_step = [&](int tile, u32 v_slot, int n) {
    sp[tile].wait_p();
    auto st = o_prod[tile].acquire();
    tmem::fence_after();
    issue.pv(tile, v_slot, n > 0, n == 0 ? first_steps : kSteps);
    umma::commit(n == N - 1 ? &bars.o_final[tile] : st.full_barrier());
  };

  mbar_wait(&bars.q_full[0], 0);
  tmem::fence_after();
  u32 v_prev = 0;
  for (int n = 0; n < N; ++n) {
    // 0. S0 <- Q0 K_n'
    u32 k_slot[T::kQKStages];
#pragma unroll
    for (int c = 0; c < T::kQKStages; ++c) {
      k_slot[c] = k_pipe.wait();
      issue.qk_chunk(0, k_slot[c], c);
    }
    sp[0].commit_s();
    // 1. O1 <- O1 + P1 V_{n-1}; V_{n-1} has now been read by both tiles.
    if (n > 0) {
      pv_step(1, v_prev, n - 1);
      v_pipe.release();
    }
    // 2. S1 <- Q1 K_n'; K_n has now been read by both tiles.
    if (n == 0) {
      mbar_wait(&bars.q_full[1], 0);
      tmem::fence_after();
    }
#pragma unroll
    for (int c = 0; c < T::kQKStages; ++c) {
      issue.qk_chunk(1, k_slot[c], c);
      k_pipe.release();
    }
    sp[1].commit_s();
    // 3. O0 <- O0 + P0 V_n
    v_prev = v_pipe.wait();
    pv_step(0, v_prev, n);
  }
  // Tail: O1 <- O1 + P1 V_last.
  pv_step(1, v_prev, N - 1);
  v_pipe.release();
}

}  // namespace sm100a
}  // namespace fa4
