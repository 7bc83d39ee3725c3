// KVBuffer: the K and V rings of kStages tiles of [kBN][D] in shared memory (the seeds'
// KVBufferImpl, with cp.async replacing the register-staged global -> register -> shared hop):
//   load_from_dram(n, stage)  issue 16-byte cp.async copies of K and V tile n into one stage
//                             (through the page table when p.page_table is set);
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
    if (p.page_table != nullptr) {  // uniform: unpaged launches run the code below unchanged
      load_paged(p, kv_head, seqlen_k, k_smem, v_smem, n, stage, tid);
      return;
    }
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

  // Paged KV: key row r is row r % page_size of page pages[r / page_size] (SeqInfo::k_row /
  // v_row; K/V batch strides are page strides).
  // Not inlined: the KV loop runs at the register limit, and inlined paged code in it (even an
  // empty branch) shifted ptxas's allocation of the whole loop and added spills to unpaged
  // configs. As a call (whole-program ptxas: nothing saved around it; the callee reads the
  // parameters through a generic pointer, a few cached loads per tile) the unpaged loop keeps
  // its allocation within a register (ptxas: fa4jit gen --log). K and V go one after the other:
  // fewer registers live in the callee means fewer the caller must keep clear at the call.
  __device__ __noinline__ static void load_paged(const FwdParams& p, int kv_head, int seqlen_k, u32 k_smem, u32 v_smem,
                                                 int n, int stage, int tid) {
    load_paged_one(p, static_cast<const Element*>(p.k) + (long long)kv_head * p.k_head_stride, p.k_batch_stride,
                   p.k_row_stride, k_smem + stage * T::kKVStageBytes, seqlen_k, n, tid);
    load_paged_one(p, static_cast<const Element*>(p.v) + (long long)kv_head * p.v_head_stride, p.v_batch_stride,
                   p.v_row_stride, v_smem + stage * T::kKVStageBytes, seqlen_k, n, tid);
  }
  // One of K or V (g: the KV head's base; page_stride: the batch stride, one page). A thread
  // walks its rows with a running (page index, row in page), as SmemTile::load_async assigns
  // them when kThreads % kChunks == 0 (rows tid / kChunks + i * kRowStep), otherwise (e.g.
  // depth 96) copy idx = tid + i * kThreads is (row idx / kChunks, chunk idx % kChunks). Rows
  // >= seqlen_k are zero-filled and never use their page entry. The row loop stays rolled:
  // short code, few registers.
  __device__ __forceinline__ static void load_paged_one(const FwdParams& p, const Element* g, long long page_stride,
                                                        long long row_stride, u32 smem, int seqlen_k, int n, int tid) {
    const int* pages = p.page_table + (long long)blockIdx.z * p.max_pages;
    const unsigned ps = p.page_size, last_page = p.max_pages - 1;
    constexpr bool kFixedChunk = T::kThreads % T::kChunks == 0;
    constexpr int kRowStep = kFixedChunk ? T::kThreads / T::kChunks : 0;
    constexpr int kTotal = T::kBN * T::kChunks;
    int row = tid / T::kChunks, chunk = tid % T::kChunks;
    unsigned pg = 0, in = 0;  // unsigned: rows and page sizes are >= 0, and unsigned division is shorter
    if constexpr (kFixedChunk) {
      const unsigned kr = n * T::kBN + row;
      pg = kr / ps;
      in = kr - pg * ps;
    }
#pragma unroll 1
    for (int i = 0; i < ceil_div(kTotal, T::kThreads); ++i) {
      if constexpr (kFixedChunk) {
        if (i > 0) {
          row += kRowStep;
          in += kRowStep;
          if (in >= ps) {  // entered a later page (several ahead when page_size < kRowStep)
            const unsigned pages_on = in / ps;
            in -= pages_on * ps;
            pg += pages_on;
          }
        }
      } else {
        const int idx = tid + i * T::kThreads;
        if (kTotal % T::kThreads != 0 && idx >= kTotal) break;
        row = idx / T::kChunks;
        chunk = idx % T::kChunks;
        const unsigned kr = n * T::kBN + row;
        pg = kr / ps;
        in = kr - pg * ps;
      }
      const int page = pages[min(pg, last_page)];  // L1-resident: a tile reads one or a few entries
      const bool valid = n * T::kBN + row < seqlen_k && (T::kDepth == T::D || chunk * 8 < T::kDepth);
      const Element* src = g + (long long)page * page_stride + (long long)in * row_stride + chunk * 8;
      cp_async_16(smem + Tile::offset(row, chunk), valid ? src : g, valid);
    }
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
