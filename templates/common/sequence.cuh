// Per-(batch, head) view of one attention problem: lengths and base pointers after
// resolving variable-length offsets. Every backend and every warp role builds it the same
// way, so all of them agree on where a sequence starts and how long it is.
#pragma once
#include "common/prelude.cuh"

namespace fa4 {

struct SeqInfo {
  int batch;
  int q_head;
  int kv_head;
  int seqlen_q;
  int seqlen_k;
  long long q_offset;  // element offset of (row 0, q_head) in Q and O
  long long k_offset;  // element offset of (row 0, kv_head) in K
  long long v_offset;
  long long o_offset;
  long long lse_offset;  // element offset of row 0 in LSE

  __device__ __forceinline__ static SeqInfo make(const FwdParams& p, int b, int q_head) {
    SeqInfo s;
    s.batch = b;
    s.q_head = q_head;
    s.kv_head = q_head / p.group;
    const long long q_start = p.cu_seqlens_q ? p.cu_seqlens_q[b] : 0;
    const long long k_start = p.cu_seqlens_k ? p.cu_seqlens_k[b] : 0;
    s.seqlen_q = p.cu_seqlens_q ? p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b] : p.seqlen_q;
    s.seqlen_k = p.cu_seqlens_k ? p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b] : p.seqlen_k;
    if (p.seqused_k) s.seqlen_k = p.seqused_k[b];
    const long long qb = p.cu_seqlens_q ? 0 : b;  // packed varlen tensors have no batch stride
    const long long kb = p.cu_seqlens_k ? 0 : b;
    s.q_offset = qb * p.q_batch_stride + q_start * p.q_row_stride + q_head * p.q_head_stride;
    s.o_offset = qb * p.o_batch_stride + q_start * p.o_row_stride + q_head * p.o_head_stride;
    s.k_offset = kb * p.k_batch_stride + k_start * p.k_row_stride + s.kv_head * p.k_head_stride;
    s.v_offset = kb * p.v_batch_stride + k_start * p.v_row_stride + s.kv_head * p.v_head_stride;
    // LSE rows follow Q's packing: [batch][head][seqlen_q] padded, or [head][total_q] varlen.
    s.lse_offset = p.cu_seqlens_q ? (long long)q_head * p.seqlen_q + q_start
                                  : ((long long)b * p.num_q_heads + q_head) * p.seqlen_q;
    return s;
  }
};

}  // namespace fa4
