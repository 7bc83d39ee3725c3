// The work of one unit of a tile walk, shared by every backend (sm90a, sm100a, sm80): which Q
// tile a CTA owns, which KV tiles it visits, and where a sequence's rows sit in the 4-D (depth,
// rows, heads, batch) TMA maps. The walks that hand out the units, each with its host plan, its
// decode and its device iterator: common/grid_walk.h (TileWork::make(p) is its device half),
// common/persistent_walk.h and common/stream_k_walk.h.
#pragma once
#include "common/mask.cuh"
#include "common/sequence.cuh"
#include "common/grid_walk.h"
#include "common/paged_boxes.h"

namespace fa4 {

// TMA coordinates of a sequence's row 0. Varlen maps pack all sequences into batch 0 and rows
// are absolute (cu_seqlens[b] + local row); a KV tile that ends past its sequence reads the next
// sequence's rows, which the k < seqlen_k bound masks, or zeros past the tensor. Paged maps are
// over (depth, page_size, kv_heads, num_pages): PagedBoxes gives each box's (row, page).
struct TmaCoords {
  int q_row0, kv_row0;
  int q_batch, kv_batch;
  int q_head, kv_head;
  const int* pages;  // paged KV: the sequence's page-table row
  __device__ __forceinline__ static TmaCoords make(const FwdParams& p, const SeqInfo& s) {
    TmaCoords c;
    c.q_row0 = p.cu_seqlens_q ? p.cu_seqlens_q[s.batch] : 0;
    c.kv_row0 = p.cu_seqlens_k ? p.cu_seqlens_k[s.batch] : 0;
    c.q_batch = p.cu_seqlens_q ? 0 : s.batch;
    c.kv_batch = p.cu_seqlens_k ? 0 : s.batch;
    c.q_head = s.q_head;
    c.kv_head = s.kv_head;
    c.pages = s.pages;
    return c;
  }
  using PagedBoxes = fa4::PagedBoxes;  // paged maps: a KV tile's boxes (common/paged_boxes.h)
};

// One CTA's problem: which (batch, head, Q tile, KV split) it owns and which KV tiles it visits.
// Every warp role builds it from the same inputs, so load, MMA and softmax agree on the tile list.
// kPack > 1: GQA packing (PackedRow<kPack, kSpan>, common/packed_rows.h): the CTA serves kPack q
// heads of one KV head, tile rows are packed rows (PackedRow::count(seqlen_q) of them, spans of
// kSpan rows with padding where kPack does not divide kSpan) and the mask sees the query range
// they span.
// kBottom: Q tiles end at the sequence's last row (tile m covers rows [m kBM - pad, (m+1) kBM - pad),
// pad = the rows the last of top-aligned tiles would leave empty), so a partial tile is the first
// one, which a causal mask makes the lightest, instead of the last, the heaviest. Rows < 0 are
// padding: every role computes them like the rows past seqlen_q of a top-aligned tile (Q from TMA's
// zero fill, masked or finite scores) and the epilogue skips them (q_lo < 0 on tile 0 only).
template <int kBM, int kBN, class Mask, int kPack = 1, bool kBottom = false, int kSpan = 0>
struct TileWork {
  using Row = PackedRow<kPack, kSpan>;
  SeqInfo seq;
  mask::Ctx ctx;
  int m_block;
  int split;           // KV split of this CTA (0 when not split; stream-K: the segment's slot; -1:
                       // a whole tile of a split-tail launch, PersistentTiles)
  int splits;          // stream-K: segments of this tile (SegmentTiles); a listed varlen walk's
                       // long-pole split (FwdParams::split_qmax): this short sequence's pieces
  int q_lo, q_hi;      // tile rows [q_lo, q_hi) of this CTA (packed rows when kPack > 1; q_hi clipped;
                       // kBottom: q_lo < 0 on a partial first tile)
  int n_begin, n_end;  // KV tiles [n_begin, n_end) before skip classification (this split's share)
  bool valid;          // false: this CTA has no Q rows (varlen tail, grid over max_seqlen_q)
  int map_row;         // snippet masks: the unit's run-time tile-map row, or -1 (mask::Custom::map_row)

  // The unit of a plain grid's CTA (GridWalk): grid (num_m_blocks * num_splits, heads (KV heads if
  // packed), batch), longest-first CTA order for masked launches with p.lpt_heads; or, for a varlen
  // grid walk (p.varlen_tiles), grid x lists every sequence's tiles (locate_varlen). With
  // varlen_tiles set, every thread of the CTA calls it converged (sm90a: at kernel entry), for
  // locate_varlen's shuffles; sm100a calls it per role from one elected lane, with varlen_tiles 0.
  __device__ __forceinline__ static TileWork make(const FwdParams& p) {
    TileWork w;
    int x = static_cast<int>(blockIdx.x), m_blocks = static_cast<int>(gridDim.x);
    int hy = static_cast<int>(blockIdx.y), b = static_cast<int>(blockIdx.z);
    if (!Mask::kIsNone && p.lpt_heads > 0) GridWalk::lpt_cta(p.lpt_heads, x, hy, b);
    w.split = 0;
    const bool long_poles = p.varlen_tiles > 0 && p.split_qmax > 0;
    if (p.num_splits > 1 && !long_poles) {
      w.split = x % p.num_splits;
      x /= p.num_splits;
      m_blocks /= p.num_splits;
    }
    // A listed tile past the batch's last one (the grid holds an upper bound of them) builds
    // sequence 0's first tile and is then marked invalid: an early return here spilled registers.
    int pieces = 0;
    const bool listed = p.varlen_tiles <= 0 || locate_varlen(p, x, b, m_blocks, pieces);
    if (pieces > 0) {  // a short sequence's one tile, as piece x of its KV tiles
      w.split = x;
      w.splits = pieces;
      x = 0;
      m_blocks = 1;
    } else if (long_poles) {
      w.split = -1;  // a whole tile: it writes O
    }
    const int h = hy * kPack;
    w.seq = SeqInfo::make(p, b, h);
    w.ctx = mask::Ctx::make(p, b, h, w.seq.seqlen_q, w.seq.seqlen_k, kPack);
    // Masked problems: the last Q tiles see the most keys; start them first (LPT-like).
    w.m_block = Mask::kIsNone ? x : m_blocks - 1 - x;
    w.finish(p);
    w.valid = w.valid && listed;
    if (pieces > 0)
      w.keep_share(w.split, w.split + 1, pieces);
    else if (p.num_splits > 1 && !long_poles)
      w.keep_share(w.split, w.split + 1, p.num_splits);
    return w;
  }
  // Varlen grid walk: the sequence b that holds listed tile x, x's index among that sequence's
  // tiles and their count (m_blocks). The tiles are listed sequence after sequence, each sequence
  // with its own ceil(rows / kBM) (rows: Row::count of its query length), in batch order: serving
  // engines put a continuous-batching step's decode rows first, whose tiles (a whole KV cache each)
  // are its long poles; listing the prefill chunks first ran 0.65-0.99x as fast back to back
  // (docs/PERF.md run 62). Each warp scans cu_seqlens_q 32 sequences at a time (a shuffle prefix
  // sum of their tile counts), so the whole warp must be converged: sm90a builds its CTA's work at
  // kernel entry. (sm100a builds it per role after electing one lane, so its launches keep the
  // batch grid: BackendPolicy::lists_varlen_tiles.) False: x is past the last sequence's tiles
  // (b, x = 0, m_blocks = 1 then).
  // Long-pole splits (p.split_qmax > 0): a sequence of 1..split_qmax queries lists its one tile as
  // `pieces` units (SeqInfo::split_pieces), x then the piece; pieces is 0 for every other unit.
  __device__ __forceinline__ static bool locate_varlen(const FwdParams& p, int& x, int& b, int& m_blocks,
                                                       int& pieces) {
    constexpr unsigned kAll = 0xffffffffu;
    const int lane = static_cast<int>(threadIdx.x) & 31;
    int before = 0;  // tiles of the sequences scanned so far
    for (int b0 = 0; b0 < p.batch; b0 += 32) {
      const int i = b0 + lane;
      const int seqlen_q = i < p.batch ? max(p.cu_seqlens_q[i + 1] - p.cu_seqlens_q[i], 0) : 0;
      const int my_pieces = i < p.batch ? SeqInfo::split_pieces(p, i, seqlen_q) : 0;
      const int tiles = my_pieces > 0 ? my_pieces : ceil_div(Row::count(seqlen_q), kBM);
      int incl = tiles;  // inclusive prefix sum over the warp's sequences
#pragma unroll
      for (int d = 1; d < 32; d <<= 1) {
        const int v = __shfl_up_sync(kAll, incl, d);
        if (lane >= d) incl += v;
      }
      const unsigned hit = __ballot_sync(kAll, before + incl > x);
      if (hit != 0u) {
        const int l = __ffs(hit) - 1;
        b = b0 + l;
        m_blocks = __shfl_sync(kAll, tiles, l);
        pieces = __shfl_sync(kAll, my_pieces, l);
        x -= before + __shfl_sync(kAll, incl, l) - m_blocks;
        return true;
      }
      before += __shfl_sync(kAll, incl, 31);
    }
    b = 0;
    x = 0;
    m_blocks = 1;
    return false;
  }
  // Any (m_block, q head, batch), e.g. from a persistent walker: every visible KV tile (the walker
  // then keeps its split's share).
  __device__ __forceinline__ static TileWork make(const FwdParams& p, int m_block, int h, int b) {
    TileWork w;
    w.seq = SeqInfo::make(p, b, h);
    w.ctx = mask::Ctx::make(p, b, h, w.seq.seqlen_q, w.seq.seqlen_k, kPack);
    w.m_block = m_block;
    w.split = 0;
    w.finish(p);
    return w;
  }
  // The same unit with its KV tiles [n_begin, n_end) as another role computed them (DynamicTiles:
  // the producer hands them to the consumers, whose walk then reads no tile map before its first tile).
  __device__ __forceinline__ static TileWork make(const FwdParams& p, int m_block, int h, int b, int n_begin,
                                                  int n_end) {
    TileWork w;
    w.seq = SeqInfo::make(p, b, h);
    w.ctx = mask::Ctx::make(p, b, h, w.seq.seqlen_q, w.seq.seqlen_k, kPack);
    w.m_block = m_block;
    w.split = 0;
    w.finish_rows();
    w.n_begin = n_begin;
    w.n_end = n_end;
    return w;
  }
  // Keep shares [s0, s1) of `shares` equal shares of the KV tiles [n_begin, n_end): a KV split
  // (one share) or a stream-K segment (a run of units, common/segments.h). Empty shares are allowed.
  __device__ __forceinline__ void keep_share(int s0, int s1, int shares) {
    const int per = ceil_div(n_end - n_begin, shares);
    const int lo = n_begin + s0 * per;
    n_end = min(n_end, n_begin + s1 * per);
    n_begin = min(lo, n_end);
  }
  // Query range [lo, hi) that tile rows [r_lo, r_hi) span.
  __device__ __forceinline__ static int query_lo(int r_lo) { return Row::of(r_lo).q; }
  __device__ __forceinline__ static int query_hi(int r_hi) { return Row::of(r_hi - 1).q + 1; }
  // Row range and KV tile range (every visible tile) from seq, ctx and m_block.
  __device__ __forceinline__ void finish(const FwdParams& p) {
    TileWork& w = *this;
    w.finish_rows();
    w.n_begin = 0;
    w.n_end = 0;
    if (w.valid && w.seq.seqlen_k > 0) {
      const mask::KvRange r = Mask::kv_range(query_lo(row_lo()), query_hi(w.q_hi), w.ctx);
      const int end = min(r.end, w.seq.seqlen_k);
      const int begin = max(r.begin, 0);
      if (end > begin) {
        w.n_begin = begin / kBN;
        w.n_end = ceil_div(end, kBN);
      }
    }
  }
  // Row range from seq and m_block.
  __device__ __forceinline__ void finish_rows() {
    const int rows = Row::count(seq.seqlen_q);
    q_lo = m_block * kBM - (kBottom ? ceil_div(rows, kBM) * kBM - rows : 0);
    q_hi = min(q_lo + kBM, rows);
    valid = q_lo < rows;
    map_row = mask::ClassRead<Mask>::template map_row<kBN>(query_lo(row_lo()), query_hi(q_hi), ctx);
  }
  // The tile's first real row: q_lo, or 0 where kBottom tiling starts the tile above row 0.
  __device__ __forceinline__ int row_lo() const { return kBottom ? max(q_lo, 0) : q_lo; }
  __device__ __forceinline__ int num_tiles() const { return n_end - n_begin; }
  __device__ __forceinline__ int keys_end(int n) const { return min(n * kBN + kBN, seq.seqlen_k); }
  __device__ __forceinline__ mask::TileClass classify(int n) const {
    return Mask::classify(query_lo(row_lo()), query_hi(q_hi), n * kBN, keys_end(n), ctx);
  }
  // Descending walk: from the last tile (n_end - 1) down to n_begin, skipping kSkip tiles, so
  // the key-bound and diagonal tiles come first. Returns n_begin - 1 when done.
  __device__ __forceinline__ int next_tile(int n) const {
    --n;
    if constexpr (!Mask::kContiguous)
      while (n >= n_begin && classify(n) == mask::kSkip) --n;
    return n;
  }
  __device__ __forceinline__ int first_tile() const { return next_tile(n_end); }
  __device__ __forceinline__ bool has(int n) const { return n >= n_begin; }
  // One past the last key that tile rows [r_lo, r_lo + rows) may see (mask and key bound): the
  // bound of one consumer warpgroup's rows, which can end before the CTA's last KV tile does (on a
  // causal diagonal). Rows past the tile's (r_lo >= q_hi): the key bound alone.
  // kBottom: rows above row 0 are padding; only padding rows: the key bound, as rows past q_hi.
  __device__ __forceinline__ int kv_end_of_rows(int r_lo, int rows) const {
    if constexpr (kBottom) {
      const int r_hi = min(r_lo + rows, q_hi);
      if (r_hi <= 0 || r_lo >= q_hi) return seq.seqlen_k;
      return min(Mask::kv_range(query_lo(max(r_lo, 0)), query_hi(r_hi), ctx).end, seq.seqlen_k);
    }
    if (r_lo >= q_hi) return seq.seqlen_k;
    const int r_hi = min(r_lo + rows, q_hi);
    return min(Mask::kv_range(query_lo(r_lo), query_hi(r_hi), ctx).end, seq.seqlen_k);
  }
  // Per-element masking is needed on partial tiles and on the tile that crosses seqlen_k.
  __device__ __forceinline__ bool needs_mask(int n) const {
    return (n + 1) * kBN > seq.seqlen_k || (!Mask::kIsNone && classify(n) == mask::kPartial);
  }

  // A consumer's walk with each tile's class read one tile early (kClassAhead: snippet masks,
  // whose class under a run-time block mask is a global load). Read at the step, that load sat on
  // the consumer's critical path twice per tile (next_tile, then needs_mask): prefix LM through
  // its tile map ran 1.20x as long as with a block snippet (docs/PERF.md run 70). Per tile:
  // ahead = peek(at) as the tile starts, needs_mask(at), at = after(at, ahead) when it is done
  // (sm90a's consumers; producers and the other backends step with next_tile).
  // Other masks keep next_tile / needs_mask (cls unused), so their kernels do not change.
  static constexpr bool kClassAhead = Mask::kSnippet;
  struct Pos {
    int n;
    mask::TileClass cls;  // kClassAhead: tile n's class
  };
  __device__ __forceinline__ mask::TileClass class_of(int n) const { return n >= n_begin ? classify(n) : mask::kSkip; }
  // The first tile at or below n that is not skipped, cls being class_of(n).
  __device__ __forceinline__ Pos settle(int n, mask::TileClass cls) const {
    while (n >= n_begin && cls == mask::kSkip) cls = class_of(--n);
    return {n, cls};
  }
  __device__ __forceinline__ Pos pos(int n) const { return {n, kClassAhead ? class_of(n) : mask::kPartial}; }
  __device__ __forceinline__ Pos after(int n) const {
    if constexpr (kClassAhead) return settle(n - 1, class_of(n - 1));
    return {next_tile(n), mask::kPartial};
  }
  // The next tile's class as read (mask::ClassRead: a run-time block mask's byte is decoded in
  // after(), when the tile is done).
  using Ahead = typename mask::ClassRead<Mask>::Read;
  __device__ __forceinline__ Ahead peek(const Pos& at) const {
    using R = mask::ClassRead<Mask>;
    if constexpr (kClassAhead) {
      const int n = at.n - 1;
      if (n < n_begin) return R::none();
      return R::template read<kBN>(map_row, n, query_lo(row_lo()), query_hi(q_hi), n * kBN, keys_end(n), ctx);
    }
    return Ahead{};
  }
  __device__ __forceinline__ Pos after(const Pos& at, Ahead ahead) const {
    if constexpr (kClassAhead) return settle(at.n - 1, mask::ClassRead<Mask>::resolve(ahead));
    return {next_tile(at.n), mask::kPartial};
  }
  __device__ __forceinline__ bool needs_mask(const Pos& at) const {
    if constexpr (kClassAhead) return (at.n + 1) * kBN > seq.seqlen_k || at.cls == mask::kPartial;
    return needs_mask(at.n);
  }
};

}  // namespace fa4
