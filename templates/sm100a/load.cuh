// SM100MHA2Q.load: the TMA warp (warp 13). One elected thread issues every copy.
// Order (MAX): Q0, K0, Q1, V0, then K_n, V_n. K_n arrives in qk_stages chunks along depth,
// each on its own barrier, so the MMA can start on the first chunk while the rest lands.
#pragma once
#include "sm100a/traits.cuh"
#include "sm100a/pipelines.cuh"

namespace fa4 {
namespace sm100a {

template <class Config, class Mask>
__device__ __forceinline__ void load(const FwdParams& p, const TmaDescs& tma, unsigned char* smem,
                                     SharedBarriers<Traits<Config>::kKSlots, Traits<Config>::kStages>& bars) {
  using T = Traits<Config>;
  if (!elect_one_sync()) return;
  const Work w = make_work<Config, Mask>(p);  // the same tiles as every other role
  const int h = w.seq.q_head, kvh = w.seq.kv_head;

  auto load_q = [&](int tile) {
    unsigned char* dst = smem + T::kQOff + tile * T::kQTileBytes;
    mbar_expect_tx(&bars.q_full[tile], T::kQTileBytes);
#pragma unroll
    for (int b = 0; b < T::kDp / T::kBox; ++b)
      tma_load_4d(dst + b * T::kTileM * 128, &tma.q, &bars.q_full[tile], b * T::kBox,
                  w.q_row0 + w.m0 + tile * T::kTileM, h, w.q_batch);
  };

  pipe::Producer<T::kKSlots> k_prod(&bars.k);
  pipe::Producer<T::kStages> v_prod(&bars.v);
  auto load_k = [&](int n) {  // one acquire per depth chunk; chunk slots of a stage are contiguous
    const int row = w.k_row0 + (w.n_begin + n) * T::kBN;
#pragma unroll
    for (int c = 0; c < T::kQKStages; ++c) {
      auto st = k_prod.acquire();
      st.expect_bytes(T::kKChunkBytes);
      unsigned char* dst = smem + T::kKOff + st.index() * T::kKChunkBytes;
#pragma unroll
      for (int b = 0; b < T::kBK0 / T::kBox; ++b)
        tma_load_4d(dst + b * T::kBN * 128, &tma.k, st.full_barrier(), c * T::kBK0 + b * T::kBox, row, kvh,
                    w.k_batch);
    }
  };
  auto load_v = [&](int n) {
    const int row = w.k_row0 + (w.n_begin + n) * T::kBN;
    auto st = v_prod.acquire();
    st.expect_bytes(T::kKVStageBytes);
    unsigned char* dst = smem + T::kVOff + st.index() * T::kKVStageBytes;
#pragma unroll
    for (int b = 0; b < T::kDp / T::kBox; ++b)
      tma_load_4d(dst + b * T::kBN * 128, &tma.v, st.full_barrier(), b * T::kBox, row, kvh, w.k_batch);
  };

  if (w.num_tiles == 0) return;  // nothing visible: no role touches Q, K or V
  load_q(0);
  load_k(0);
  load_q(1);
  load_v(0);
  for (int n = 1; n < w.num_tiles; ++n) {
    load_k(n);
    load_v(n);
  }
}

}  // namespace sm100a
}  // namespace fa4
