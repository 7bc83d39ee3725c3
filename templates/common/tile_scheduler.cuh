// Tile scheduling and K/V index math shared by the TMA backends (sm90a runs it on hardware;
// sm100a uses the same functions): which Q tile a CTA owns, which KV tiles it visits, and where
// a sequence's rows sit in the 4-D (depth, rows, heads, batch) TMA maps.
#pragma once
#include "common/mask.cuh"
#include "common/sequence.cuh"

namespace fa4 {

// TMA coordinates of a sequence's row 0. Varlen maps pack all sequences into batch 0 and rows
// are absolute (cu_seqlens[b] + local row); a KV tile that ends past its sequence reads the next
// sequence's rows, which the k < seqlen_k bound masks, or zeros past the tensor.
struct TmaCoords {
  int q_row0, kv_row0;
  int q_batch, kv_batch;
  int q_head, kv_head;
  __device__ __forceinline__ static TmaCoords make(const FwdParams& p, const SeqInfo& s) {
    TmaCoords c;
    c.q_row0 = p.cu_seqlens_q ? p.cu_seqlens_q[s.batch] : 0;
    c.kv_row0 = p.cu_seqlens_k ? p.cu_seqlens_k[s.batch] : 0;
    c.q_batch = p.cu_seqlens_q ? 0 : s.batch;
    c.kv_batch = p.cu_seqlens_k ? 0 : s.batch;
    c.q_head = s.q_head;
    c.kv_head = s.kv_head;
    return c;
  }
};

// One CTA's problem: which (batch, head, Q tile) it owns and which KV tiles it visits. Every
// warp role builds it from the same inputs, so load, MMA and softmax agree on the tile list.
template <int kBM, int kBN, class Mask>
struct TileWork {
  SeqInfo seq;
  mask::Ctx ctx;
  int m_block;
  int q_lo, q_hi;      // rows [q_lo, q_hi) of this CTA inside the sequence (q_hi clipped)
  int n_begin, n_end;  // KV tiles [n_begin, n_end) before skip classification
  bool valid;          // false: this CTA has no Q rows (varlen tail, grid over max_seqlen_q)

  // Non-persistent grid (ceil(max_seqlen_q / kBM), heads, batch): the CTA's tile from blockIdx.
  // (Written out rather than forwarding to the overload below: that reorders the special-register
  // reads and changes the PTX of the GPU-verified kernels.)
  __device__ __forceinline__ static TileWork make(const FwdParams& p) {
    TileWork w;
    const int b = blockIdx.z, h = blockIdx.y;
    w.seq = SeqInfo::make(p, b, h);
    w.ctx = mask::Ctx{b, h, w.seq.seqlen_q, w.seq.seqlen_k, &p};
    // Masked problems: the last Q tiles see the most keys; start them first (LPT-like).
    w.m_block = Mask::kIsNone ? static_cast<int>(blockIdx.x) : static_cast<int>(gridDim.x - 1 - blockIdx.x);
    w.finish();
    return w;
  }
  // Any (m_block, q head, batch), e.g. from PersistentTiles.
  __device__ __forceinline__ static TileWork make(const FwdParams& p, int m_block, int h, int b) {
    TileWork w;
    w.seq = SeqInfo::make(p, b, h);
    w.ctx = mask::Ctx{b, h, w.seq.seqlen_q, w.seq.seqlen_k, &p};
    w.m_block = m_block;
    w.finish();
    return w;
  }
  // Row range and KV tile range from seq, ctx and m_block.
  __device__ __forceinline__ void finish() {
    TileWork& w = *this;
    w.q_lo = w.m_block * kBM;
    w.q_hi = min(w.q_lo + kBM, w.seq.seqlen_q);
    w.valid = w.q_lo < w.seq.seqlen_q;
    w.n_begin = 0;
    w.n_end = 0;
    if (w.valid && w.seq.seqlen_k > 0) {
      const mask::KvRange r = Mask::kv_range(w.q_lo, w.q_hi, w.ctx);
      const int end = min(r.end, w.seq.seqlen_k);
      const int begin = max(r.begin, 0);
      if (end > begin) {
        w.n_begin = begin / kBN;
        w.n_end = ceil_div(end, kBN);
      }
    }
  }

  __device__ __forceinline__ int num_tiles() const { return n_end - n_begin; }
  __device__ __forceinline__ mask::TileClass classify(int n) const {
    const int k_lo = n * kBN, k_hi = min(k_lo + kBN, seq.seqlen_k);
    return Mask::classify(q_lo, q_hi, k_lo, k_hi, ctx);
  }
  // Descending walk: from the last tile (n_end - 1) down to n_begin, skipping kSkip tiles, so
  // the key-bound and diagonal tiles come first. Returns n_begin - 1 when done.
  __device__ __forceinline__ int next_tile(int n) const {
    --n;
    while (n >= n_begin && classify(n) == mask::kSkip) --n;
    return n;
  }
  __device__ __forceinline__ int first_tile() const { return next_tile(n_end); }
  __device__ __forceinline__ bool has(int n) const { return n >= n_begin; }
  // Per-element masking is needed on partial tiles and on the tile that crosses seqlen_k.
  __device__ __forceinline__ bool needs_mask(int n) const {
    return (n + 1) * kBN > seq.seqlen_k || (!Mask::kIsNone && classify(n) == mask::kPartial);
  }
};

// Persistent static scheduler: grid = (min(#SMs, total), 1, 1) with total = num_m_blocks *
// num_q_heads * batch; CTA x visits linear tiles t = x + i * gridDim.x (i = 0, 1, ...; t < total),
// and every warp role of the CTA walks the same sequence. Decoding of t:
//   Mask::kIsNone:  m_block fastest, then head, then batch (the CTAs running at the same time
//                   share one head's K/V in L2);
//   masked:         longest-processing-time first: m_block = num_m_blocks - 1 - t / (heads * batch)
//                   (every head/batch's last Q tile, which sees the most keys, before any earlier one),
//                   head fastest, then batch, from t % (heads * batch).
// Only the iteration count i is carried (one register): t is recomputed from it, and i & 1 is the
// parity of per-tile barrier phases. A decoded tile may have no Q rows (varlen: m_block * kBM >=
// seqlen_q of its batch): TileWork::valid is false; every role must treat it identically.
template <class Mask>
struct PersistentTiles {
  int iter;  // tiles of this CTA before the current one

  __device__ __forceinline__ static PersistentTiles make() { return PersistentTiles{0}; }
  __device__ __forceinline__ int tile() const {
    return static_cast<int>(blockIdx.x) + iter * static_cast<int>(gridDim.x);
  }
  __device__ __forceinline__ static int total(const FwdParams& p) { return p.num_m_blocks * p.num_q_heads * p.batch; }
  __device__ __forceinline__ bool valid(const FwdParams& p) const { return tile() < total(p); }
  // zero: an opaque 0 produced inside the loop, so the compiler recomputes total from the
  // parameters instead of hoisting it into a register that stays live across the loop.
  __device__ __forceinline__ bool valid(const FwdParams& p, int zero) const {
    return tile() < (p.num_m_blocks + zero) * p.num_q_heads * p.batch;
  }
  __device__ __forceinline__ void advance() { ++iter; }
  __device__ __forceinline__ u32 parity() const { return static_cast<u32>(iter) & 1u; }
  __device__ __forceinline__ void decode(const FwdParams& p, int& m_block, int& head, int& batch) const {
    const int t = tile();
    if (Mask::kIsNone) {
      m_block = t % p.num_m_blocks;
      const int hb = t / p.num_m_blocks;
      head = hb % p.num_q_heads;
      batch = hb / p.num_q_heads;
    } else {
      const int nhb = p.num_q_heads * p.batch;
      m_block = p.num_m_blocks - 1 - t / nhb;
      const int hb = t % nhb;
      head = hb % p.num_q_heads;
      batch = hb / p.num_q_heads;
    }
  }
  template <int kBM, int kBN>
  __device__ __forceinline__ TileWork<kBM, kBN, Mask> work(const FwdParams& p) const {
    int m, h, b;
    decode(p, m, h, b);
    return TileWork<kBM, kBN, Mask>::make(p, m, h, b);
  }
};

}  // namespace fa4
