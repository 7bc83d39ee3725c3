// KVBuffer: the K and V rings of kStages tiles of [kBN][D] (V: [kBN][DV], narrower with
// FA4Config::depth_v) in shared memory (the seeds' KVBufferImpl, with cp.async replacing the
// register-staged global -> register -> shared hop):
//   load_from_dram(n, stage)  issue 16-byte cp.async copies of K and V tile n into one stage
//                             (through the page table when p.page_table is set);
//   copy_to_shared<N>()       wait until the stage's copies landed and are visible CTA-wide;
//   load_k_from_shared / load_v_from_shared   ldmatrix the B fragments of one MMA k-step.
// FP8 KV cache (T::kFp8KV): load_from_dram fills a ring of kStages e4m3 stages (E4m3Tile) instead,
// and convert(stage) rewrites one of them into the single 16-bit K and V stage (stage 0) that
// the ldmatrix code reads; the e4m3 rings follow the V stage in shared memory.
#pragma once
#include "common/sequence.cuh"
#include "sm80/smem_tile.cuh"

namespace fa4 {
namespace sm80 {

template <class T>
struct KVBuffer {
  using Tile = SmemTile<T, T::kBN>;                      // a K stage
  using VTile = SmemTile<T, T::kBN, typename T::VRows>;  // a V stage
  using Element = typename T::Element;
  using KVElement = typename T::KVElement;  // in global memory: Element, or e4m3 (FP8 KV cache)
  using Staging = E4m3Tile<T, T::kBN>;      // FP8 KV cache only
  // Bytes between the ring stages the copies fill (16-bit: the K and V stages; FP8: the e4m3 stages).
  static constexpr int kLoadStageBytes = T::kFp8KV ? T::kKV8StageBytes : T::kKVStageBytes;
  static constexpr int kLoadVStageBytes = T::kFp8KV ? T::kKV8StageBytes : T::kVStageBytes;

  // Not the two 64-bit base pointers: those would stay live across the whole KV loop, where
  // the O and S accumulators need every register. The bases are rebuilt per tile from the
  // kernel parameters (constant bank) and these two ints, with SeqInfo::make's formula.
  int kv_head;      // seq.kv_head
  int k_row_start;  // first K/V row of this sequence (varlen: cu_seqlens_k[b]; else 0)
  int seqlen_k;
  // Ring bases (K stage s at + s * kKVStageBytes, V's at + s * kVStageBytes); FP8 KV cache: the
  // one 16-bit stage.
  u32 k_smem, v_smem;

  // FP8 KV cache: the e4m3 rings, after the V stage (kernel.cuh: k_smem = Q + kQBytes, v_smem =
  // k_smem + kKBytes), stage s at + s * kKV8StageBytes.
  __device__ __forceinline__ u32 k8_smem() const { return k_smem + T::kKBytes + T::kVBytes; }
  __device__ __forceinline__ u32 v8_smem() const { return k_smem + T::kKBytes + T::kVBytes + T::kKV8Bytes; }

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
      if constexpr (T::kFp8KV) load_paged(p, kv_head, seqlen_k, k8_smem(), v8_smem(), n, stage, tid);
      else load_paged(p, kv_head, seqlen_k, k_smem, v_smem, n, stage, tid);
      return;
    }
    int head = kv_head, start = k_row_start;
    int kb = p.cu_seqlens_k ? 0 : static_cast<int>(blockIdx.z);  // packed varlen tensors have no batch stride
    asm volatile("" : "+r"(head), "+r"(start), "+r"(kb));
    const KVElement* k = static_cast<const KVElement*>(p.k) + kb * p.k_batch_stride +
                         (long long)start * p.k_row_stride + (long long)head * p.k_head_stride;
    const KVElement* v = static_cast<const KVElement*>(p.v) + kb * p.v_batch_stride +
                         (long long)start * p.v_row_stride + (long long)head * p.v_head_stride;
    const int row0 = n * T::kBN;
    if constexpr (T::kFp8KV) {
      Staging::load_async(k8_smem() + stage * T::kKV8StageBytes, k, p.k_row_stride, row0, seqlen_k, tid);
      Staging::load_async(v8_smem() + stage * T::kKV8StageBytes, v, p.v_row_stride, row0, seqlen_k, tid);
    } else {
      Tile::load_async(k_smem + stage * T::kKVStageBytes, k, p.k_row_stride, row0, seqlen_k, tid);
      VTile::load_async(v_smem + stage * T::kVStageBytes, v, p.v_row_stride, row0, seqlen_k, tid);
    }
  }

  // FP8 KV cache: e4m3 K and V stage `stage` -> the 16-bit K and V stage. The caller publishes the
  // e4m3 stage (copy_to_shared) before, after every warp's last read of the 16-bit stage, and
  // syncs the CTA after.
  __device__ __forceinline__ void convert(int stage, int tid) const {
    static_assert(T::kFp8KV, "KVBuffer::convert: FP8 KV cache only");
    convert_kv(k_smem, k8_smem() + stage * T::kKV8StageBytes, tid);
  }
  // Not inlined, as load_paged: inlined, the conversion's registers joined the KV loop's
  // allocation and ptxas spilled in kernels the 16-bit loop fits (sm_120 d128 up to 120 bytes);
  // as a call the loop keeps its allocation. k16 / k8: the 16-bit K stage and e4m3 K stage; V's
  // sit kKBytes and kKV8Bytes further.
  __device__ __noinline__ static void convert_kv(u32 k16, u32 k8, int tid) {
    Staging::convert(k16, k8, tid);
    Staging::convert(k16 + T::kKBytes, k8 + T::kKV8Bytes, tid);
  }

  // Paged KV: key row r is row r % page_size of page pages[r / page_size] (common/sequence.cuh
  // page_table_entry; K/V batch strides are page strides).
  // Not inlined: the KV loop runs at the register limit, and inlined paged code in it (even an
  // empty branch) shifted ptxas's allocation of the whole loop and added spills to unpaged
  // configs. As a call (whole-program ptxas: nothing saved around it; the callee reads the
  // parameters through a generic pointer, a few cached loads per tile) the unpaged loop keeps
  // its allocation within a register (ptxas: fa4jit gen --log). K and V go one after the other:
  // fewer registers live in the callee means fewer the caller must keep clear at the call.
  // FP8 KV cache: k_smem / v_smem are the e4m3 rings (E4m3Tile rows, kLoadStageBytes apart).
  __device__ __noinline__ static void load_paged(const FwdParams& p, int kv_head, int seqlen_k, u32 k_smem, u32 v_smem,
                                                 int n, int stage, int tid) {
    load_paged_one<typename T::QKRows>(p, static_cast<const KVElement*>(p.k) + (long long)kv_head * p.k_head_stride,
                                       p.k_batch_stride, p.k_row_stride, k_smem + stage * kLoadStageBytes, seqlen_k, n,
                                       tid);
    load_paged_one<typename T::VRows>(p, static_cast<const KVElement*>(p.v) + (long long)kv_head * p.v_head_stride,
                                      p.v_batch_stride, p.v_row_stride, v_smem + stage * kLoadVStageBytes, seqlen_k, n,
                                      tid);
  }
  // One of K or V (g: the KV head's base; page_stride: the batch stride, one page). A thread
  // walks its rows with a running (page index, row in page), as SmemTile::load_async assigns
  // them when kThreads % kChunks == 0 (rows tid / kChunks + i * kRowStep), otherwise (depth
  // 192: 24 chunks) copy idx = tid + i * kThreads is (row idx / kChunks, chunk idx % kChunks). Rows
  // >= seqlen_k are zero-filled and never use their page entry. The row loop stays rolled:
  // short code, few registers. FP8 KV cache: e4m3 rows, chunks of 16 elements (E4m3Tile layout).
  // R: the row layout (T::QKRows for K, T::VRows for V).
  template <class R>
  __device__ __forceinline__ static void load_paged_one(const FwdParams& p, const KVElement* g, long long page_stride,
                                                        long long row_stride, u32 smem, int seqlen_k, int n, int tid) {
    constexpr int kPer = 16 / static_cast<int>(sizeof(KVElement));  // elements per 16-byte chunk
    constexpr int kRowChunks = R::D / kPer;                          // R::kChunks, or E4m3Tile::kChunks
    const int* pages = p.page_table + (long long)blockIdx.z * p.max_pages;
    const unsigned ps = p.page_size, last_page = p.max_pages - 1;
    constexpr bool kFixedChunk = T::kThreads % kRowChunks == 0;
    constexpr int kRowStep = kFixedChunk ? T::kThreads / kRowChunks : 0;
    constexpr int kTotal = T::kBN * kRowChunks;
    int row = tid / kRowChunks, chunk = tid % kRowChunks;
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
        row = idx / kRowChunks;
        chunk = idx % kRowChunks;
        const unsigned kr = n * T::kBN + row;
        pg = kr / ps;
        in = kr - pg * ps;
      }
      const int page = pages[min(pg, last_page)];  // L1-resident: a tile reads one or a few entries
      const bool valid = n * T::kBN + row < seqlen_k && (R::kDepth == R::D || chunk * kPer < R::kDepth);
      const KVElement* src = g + (long long)page * page_stride + (long long)in * row_stride + chunk * kPer;
      u32 dst;
      if constexpr (T::kFp8KV) dst = Staging::offset(row, chunk);
      else dst = SmemTile<T, T::kBN, R>::offset(row, chunk);
      cp_async_16(smem + dst, valid ? src : g, valid);
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
  __device__ __forceinline__ void load_k_from_shared(u32 (&b)[4], const QKLane<T>& lane, int stage, int j,
                                                     int kk) const {
    ldmatrix_x4(b, k_smem + stage * T::kKVStageBytes + j * 16 * T::kRowBytes + lane.at(2 * kk));
  }
  // V, trans, keys 16kk.. (k-step of P*V), depth 16j.., lane l at key l % 16, chunk
  // 2j + l / 16: matrices {keys 0-7, d 0-7},
  // {keys 8-15, d 0-7}, {keys 0-7, d 8-15}, {keys 8-15, d 8-15}, i.e. b = {b0, b1 of depth
  // block 2j, b0, b1 of 2j+1}. V's rows (T::VRows): DV wide.
  __device__ __forceinline__ void load_v_from_shared(u32 (&b)[4], const VLane<T>& lane, int stage, int kk,
                                                     int j) const {
    ldmatrix_x4_trans(b, v_smem + stage * T::kVStageBytes + kk * 16 * T::VRows::kRowBytes + lane.at(2 * j));
  }
};

}  // namespace sm80
}  // namespace fa4
