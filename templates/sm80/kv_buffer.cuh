// KVBuffer: the K and V rings of kStages tiles of [kBN][D] in shared memory (the seeds'
// KVBufferImpl, with cp.async replacing the register-staged global -> register -> shared hop):
//   load_from_dram(n, stage)  issue 16-byte cp.async copies of K and V tile n into one stage;
//   copy_to_shared<N>()       wait until the stage's copies landed and are visible CTA-wide;
//   load_k_from_shared / load_v_from_shared   ldmatrix the B fragments of one MMA k-step.
#pragma once
#include "common/sequence.cuh"
#include "sm80/smem_tile.cuh"

namespace fa4 {
namespace sm80 {

template <class T>
struct KVBuffer {
  using Tile = SmemTile<T, T::kBN>;
  using Element = typename T::Element;

  // Not the two 64-bit base pointers: those would stay live across the whole KV loop, where
  // the O and S accumulators need every register. The bases are rebuilt per tile from the
  // kernel parameters (constant bank) and these two ints, with SeqInfo::make's formula.
  int kv_head;      // seq.kv_head
  int k_row_start;  // first K/V row of this sequence (varlen: cu_seqlens_k[b]; else 0)
  int seqlen_k;
  u32 k_smem, v_smem;  // ring bases (stage s at + s * kKVStageBytes)

  __device__ __forceinline__ void init(const FwdParams& p, const SeqInfo& seq, u32 smem_k, u32 smem_v) {
    kv_head = seq.kv_head;
    k_row_start = p.cu_seqlens_k ? p.cu_seqlens_k[seq.batch] : 0;
    seqlen_k = seq.seqlen_k;
    k_smem = smem_k;
    v_smem = smem_v;
  }

  // Same offsets as SeqInfo::make (k_offset / v_offset), recomputed per tile; the empty asm
  // keeps the compiler from hoisting the 64-bit results out of the KV loop again.
  __device__ __forceinline__ void load_from_dram(const FwdParams& p, int n, int stage, int tid) const {
    int head = kv_head, start = k_row_start;
    int kb = p.cu_seqlens_k ? 0 : static_cast<int>(blockIdx.z);  // packed varlen tensors have no batch stride
    asm volatile("" : "+r"(head), "+r"(start), "+r"(kb));
    const Element* k = static_cast<const Element*>(p.k) + kb * p.k_batch_stride + (long long)start * p.k_row_stride +
                       (long long)head * p.k_head_stride;
    const Element* v = static_cast<const Element*>(p.v) + kb * p.v_batch_stride + (long long)start * p.v_row_stride +
                       (long long)head * p.v_head_stride;
    const int row0 = n * T::kBN;
    Tile::load_async(k_smem + stage * T::kKVStageBytes, k, p.k_row_stride, row0, seqlen_k, tid);
    Tile::load_async(v_smem + stage * T::kKVStageBytes, v, p.v_row_stride, row0, seqlen_k, tid);
  }

  // Every thread waits for its own copies, then the barrier publishes all of them. The same
  // barrier also tells the producer side that the stage computed last iteration is free.
  template <int kInFlight>
  __device__ __forceinline__ static void copy_to_shared() {
    cp_async_wait<kInFlight>();
    __syncthreads();
  }

  // Row steps are multiples of 16, so the swizzle term (row & 7) stays the lane's own.
  // K, non-trans, keys 16j.., depth k-step kk, lane l at key (l & 7) + 8 * (l / 16), chunk
  // 2kk + (l / 8) % 2: matrices {keys 0-7, k 0-7}, {keys 0-7, k 8-15}, {keys 8-15, k 0-7},
  // {keys 8-15, k 8-15}, i.e. b = {b0, b1 of n-block 2j, b0, b1 of 2j+1}.
  __device__ __forceinline__ void load_k_from_shared(u32 (&b)[4], const LaneOffset<T>& lane, int stage, int j,
                                                     int kk) const {
    ldmatrix_x4(b, k_smem + stage * T::kKVStageBytes + j * 16 * T::kRowBytes + lane.at(2 * kk));
  }
  // V, trans, keys 16kk.. (k-step of P*V), depth 16j.., lane l at key l % 16, chunk
  // 2j + l / 16: matrices {keys 0-7, d 0-7},
  // {keys 8-15, d 0-7}, {keys 0-7, d 8-15}, {keys 8-15, d 8-15}, i.e. b = {b0, b1 of depth
  // block 2j, b0, b1 of 2j+1}.
  __device__ __forceinline__ void load_v_from_shared(u32 (&b)[4], const LaneOffset<T>& lane, int stage, int kk,
                                                     int j) const {
    ldmatrix_x4_trans(b, v_smem + stage * T::kKVStageBytes + kk * 16 * T::kRowBytes + lane.at(2 * j));
  }
};

}  // namespace sm80
}  // namespace fa4
