// Per-(batch, head) view of one attention problem: lengths and base pointers after
// resolving variable-length offsets, the page table and GQA packing. Every backend and every
// warp role builds it the same way, so all of them agree on where a sequence starts, how long
// it is and where each of its rows lives.
#pragma once
#include "common/prelude.cuh"
#include "common/packed_rows.h"  // PackedRow: tile row -> (query, head)
#include "common/paged_boxes.h"   // page_table_slot

namespace fa4 {

// Paged KV whose page size no TMA box takes (the host's kv_box_rows 0: gcd(page_size, BN) not a
// multiple of 8 rows): the TMA backends' kernels gather the K / V rows themselves (sm90a and sm100a
// gather.cuh). The same for every thread of a launch.
__device__ __forceinline__ bool gathers_kv_rows(const FwdParams& p) { return p.page_table && p.kv_box_rows == 0; }

// Paged KV: key row r (>= 0) of a sequence is row page_row(p, r) of its page_index(p, r)-th page.
// Page sizes that are powers of two (1, 16, 64, ...: what engines use) take a shift and a mask; a
// 32-bit division by a run-time divisor is ~25 dependent instructions, which the gathering warps
// ran twice per row lookup before every stage's copies (docs/PERF.md run 68). Both paths take more
// registers than the division alone, so producers without room for them (sm90a load.cuh
// lean_producer: prefill's 24-register ones spilled 4-24 B) keep the division.
__device__ __forceinline__ int page_index(const FwdParams& p, int r) {
  const unsigned u = static_cast<unsigned>(r), ps = static_cast<unsigned>(p.page_size);
  return static_cast<int>((ps & (ps - 1)) == 0 ? u >> (__ffs(p.page_size) - 1) : u / ps);
}
__device__ __forceinline__ int page_row(const FwdParams& p, int r) {
  const unsigned u = static_cast<unsigned>(r), ps = static_cast<unsigned>(p.page_size);
  return static_cast<int>((ps & (ps - 1)) == 0 ? u & (ps - 1) : u % ps);
}

// Paged KV: the entry of a sequence's page-table row (pages) that holds key row r, clamped as
// page_table_slot (common/paged_boxes.h). kShift: page_index's shift for power-of-two page sizes
// (above).
template <bool kShift = false>
__device__ __forceinline__ const int* page_table_entry(const FwdParams& p, const int* pages, int r) {
  return page_table_slot(p, pages, kShift ? page_index(p, r) : r / p.page_size);
}

struct SeqInfo {
  int batch;
  int q_head;   // the CTA's head; packed: the group's first head
  int kv_head;
  int seqlen_q;
  int seqlen_k;
  long long q_offset;  // element offset of (row 0, q_head) in Q and O
  long long k_offset;  // element offset of (row 0, kv_head) in K; paged: of kv_head in page 0
  long long v_offset;
  long long o_offset;
  long long lse_offset;  // element offset of row 0 in LSE (and in each split's partial slice)
  const int* pages;      // paged KV: this sequence's row of the page table; null otherwise

  __device__ __forceinline__ static SeqInfo make(const FwdParams& p, int b, int q_head) {
    SeqInfo s;
    s.batch = b;
    s.q_head = q_head;
    s.kv_head = q_head / p.group;
    const long long q_start = p.cu_seqlens_q ? p.cu_seqlens_q[b] : 0;
    const long long k_start = p.cu_seqlens_k ? p.cu_seqlens_k[b] : 0;
    s.seqlen_q = p.cu_seqlens_q ? p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b] : p.seqlen_q;
    s.seqlen_k = keys(p, b);
    const long long qb = p.cu_seqlens_q ? 0 : b;  // packed varlen tensors have no batch stride
    const long long kb = p.cu_seqlens_k || p.page_table ? 0 : b;  // paged: the page picks the "batch"
    s.q_offset = qb * p.q_batch_stride + q_start * p.q_row_stride + q_head * p.q_head_stride;
    s.o_offset = qb * p.o_batch_stride + q_start * p.o_row_stride + q_head * p.o_head_stride;
    s.k_offset = kb * p.k_batch_stride + k_start * p.k_row_stride + s.kv_head * p.k_head_stride;
    s.v_offset = kb * p.v_batch_stride + k_start * p.v_row_stride + s.kv_head * p.v_head_stride;
    // LSE rows follow Q's packing: [batch][head][seqlen_q] padded, or [head][total_q] varlen.
    s.lse_offset = p.cu_seqlens_q ? (long long)q_head * p.seqlen_q + q_start
                                  : ((long long)b * p.num_q_heads + q_head) * p.seqlen_q;
    s.pages = p.page_table ? p.page_table + (long long)b * p.max_pages : nullptr;
    return s;
  }

  // Keys of sequence b: seqused_k, else its cu_seqlens_k run, else seqlen_k.
  __device__ __forceinline__ static int keys(const FwdParams& p, int b) {
    if (p.seqused_k) return p.seqused_k[b];
    return p.cu_seqlens_k ? p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b] : p.seqlen_k;
  }
  // Long-pole splits (FwdParams::split_qmax): the pieces a sequence of seqlen_q queries splits its
  // one Q tile into, min(num_splits, ceil(keys / split_keys)) and at least 1; 0: it is not split
  // (no long-pole splits, no queries, or more than split_qmax).
  __device__ __forceinline__ static int split_pieces(const FwdParams& p, int b, int seqlen_q) {
    if (p.split_qmax <= 0 || seqlen_q <= 0 || seqlen_q > p.split_qmax) return 0;
    return min(p.num_splits, max(1, (keys(p, b) + p.split_keys - 1) / p.split_keys));
  }

  // Paged KV: the page-table entry of key row r (page_table_entry).
  template <bool kShift = false>
  __device__ __forceinline__ const int* page_entry(const FwdParams& p, int r) const {
    return page_table_entry<kShift>(p, pages, r);
  }
  __device__ __forceinline__ int page_of(const FwdParams& p, int r) const { return *page_entry(p, r); }

  // Offsets of tile row r (PackedRow<kPack, kSpan>) in Q, O and LSE. LSE's head stride is
  // seqlen_q in both layouts (padded: per batch; varlen: seqlen_q holds total_q).
  template <int kPack, int kSpan = 0>
  __device__ __forceinline__ long long q_row(const FwdParams& p, int r) const {
    const PackedRow<kPack, kSpan> pr = PackedRow<kPack, kSpan>::of(r);
    return q_offset + (long long)pr.q * p.q_row_stride + (long long)pr.head * p.q_head_stride;
  }
  template <int kPack, int kSpan = 0>
  __device__ __forceinline__ long long o_row(const FwdParams& p, int r) const {
    const PackedRow<kPack, kSpan> pr = PackedRow<kPack, kSpan>::of(r);
    return o_offset + (long long)pr.q * p.o_row_stride + (long long)pr.head * p.o_head_stride;
  }
  template <int kPack, int kSpan = 0>
  __device__ __forceinline__ long long lse_row(const FwdParams& p, int r) const {
    const PackedRow<kPack, kSpan> pr = PackedRow<kPack, kSpan>::of(r);
    return lse_offset + (long long)pr.head * p.seqlen_q + pr.q;
  }
};

}  // namespace fa4
