// Masks: written once, used by every backend and every warp role.
//
// A mask answers three questions about query rows and key columns of one sequence:
//   visible(q, k)                      element level, used only on partial tiles;
//   kv_range(q_lo, q_hi)               the key columns [k_begin, k_end) any row of the Q tile can see;
//   classify(q_lo, q_hi, k_lo, k_hi)   whether a tile is skipped, fully visible or partial.
// Load, MMA and softmax roles call the same functions with the same arguments, so they agree
// on which tiles exist without talking to each other (the seeds' iteration sets).
// Key bounds (k < seqlen_k) are not a mask concern: kernels add them on the last tile.
// visible<true>(q, k) promises q < seqlen_q and k < seqlen_k (a tile inside the sequence): a
// snippet's positions then need no clamp or bound (Custom), and the kernel no per-element key bound.
// kContiguous: every KV tile inside kv_range has a visible key for some row of the Q tile (the
// rows' key ranges overlap: None and bands), so walks step tile by tile without classify().
// kSnippet: visible() calls a user's snippet (Custom, or a combinator holding one).
// kRowInterval: each query row q sees one interval of keys, kv_range(q, q + 1) (bands, chunks, a
// prefix beside causal, an And of such); kernels may then mask a partial tile by that interval's
// two bounds instead of asking visible() per element. None keeps its one key bound (false).
#pragma once
#include "common/prelude.cuh"
#include "common/row_keys.h"

namespace fa4 {
namespace mask {

enum TileClass : int { kSkip = 0, kFull = 1, kPartial = 2 };

struct Ctx {
  int batch;
  int q_head;
  int seqlen_q;
  int seqlen_k;
  const FwdParams* params;
  int num_heads;  // heads the Q tile covers: 1, or the group when GQA heads are packed
  // Causal alignment: key k is "at" query position k - offset. Bottom-right (FlashAttention >= 2.1)
  // uses seqlen_k - seqlen_q; top-left uses 0. Read from the parameters once per tile (make), not
  // per element: the element loops test the key bound after visible(), and a load behind that
  // test was not hoisted (docs/PERF.md "Compile time", item 2).
  int diag;
  __device__ __forceinline__ static Ctx make(const FwdParams& p, int batch, int q_head, int seqlen_q, int seqlen_k,
                                             int num_heads) {
    return Ctx{batch, q_head, seqlen_q, seqlen_k, &p, num_heads, (p.mask_flags & 1) ? 0 : seqlen_k - seqlen_q};
  }
  __device__ __forceinline__ int diag_offset() const { return diag; }
};

struct KvRange {
  int begin;  // first key column that may be visible
  int end;    // one past the last
};

__device__ __forceinline__ int floor_div(int a, int b) { return (a >= 0 ? a : a - b + 1) / b; }

// No mask: every key is visible.
struct None {
  static constexpr bool kIsNone = true;
  static constexpr bool kSnippet = false;
  static constexpr bool kContiguous = true;
  static constexpr bool kRowInterval = false;
  template <bool kInside = false>
  __device__ __forceinline__ static bool visible(int, int, const Ctx&) {
    return true;
  }
  __device__ __forceinline__ static KvRange kv_range(int, int, const Ctx& c) { return {0, c.seqlen_k}; }
  __device__ __forceinline__ static TileClass classify(int, int, int, int, const Ctx&) { return kFull; }
};

// A diagonal band: key k is visible from query q iff
//   q + offset - left <= k <= q + offset + right, with left/right < 0 meaning unbounded.
// Causal is (left unbounded, right 0); a causal sliding window of W keys is (W - 1, 0).
struct Band {
  int left, right;  // < 0: unbounded
  __device__ __forceinline__ bool visible(int q, int k, const Ctx& c) const {
    const int d = k - q - c.diag_offset();
    return (left < 0 || d >= -left) && (right < 0 || d <= right);
  }
  __device__ __forceinline__ KvRange kv_range(int q_lo, int q_hi, const Ctx& c) const {
    const int off = c.diag_offset();
    const int lo = left < 0 ? 0 : max(0, q_lo + off - left);
    const int hi = right < 0 ? c.seqlen_k : min(c.seqlen_k, q_hi - 1 + off + right + 1);
    return {lo, max(lo, hi)};
  }
  __device__ __forceinline__ TileClass classify(int q_lo, int q_hi, int k_lo, int k_hi, const Ctx& c) const {
    const int off = c.diag_offset();
    // d = k - q - off ranges over [k_lo - (q_hi-1) - off, (k_hi-1) - q_lo - off] in the tile.
    const int d_min = k_lo - (q_hi - 1) - off, d_max = (k_hi - 1) - q_lo - off;
    if ((right >= 0 && d_min > right) || (left >= 0 && d_max < -left)) return kSkip;
    if ((right < 0 || d_max <= right) && (left < 0 || d_min >= -left)) return kFull;
    return kPartial;
  }
};

// A mask that is one Band, chosen by Derived::band(ctx): the three questions forward to it.
template <class Derived>
struct BandMask {
  static constexpr bool kIsNone = false;
  static constexpr bool kSnippet = false;
  static constexpr bool kContiguous = true;
  static constexpr bool kRowInterval = true;
  template <bool kInside = false>
  __device__ __forceinline__ static bool visible(int q, int k, const Ctx& c) {
    return Derived::band(c).visible(q, k, c);
  }
  __device__ __forceinline__ static KvRange kv_range(int q_lo, int q_hi, const Ctx& c) {
    return Derived::band(c).kv_range(q_lo, q_hi, c);
  }
  __device__ __forceinline__ static TileClass classify(int q_lo, int q_hi, int k_lo, int k_hi, const Ctx& c) {
    return Derived::band(c).classify(q_lo, q_hi, k_lo, k_hi, c);
  }
};

struct Causal : BandMask<Causal> {
  __device__ __forceinline__ static Band band(const Ctx&) { return Band{-1, 0}; }
};

// Sliding window with run-time extents (params.window_left / window_right).
struct SlidingWindow : BandMask<SlidingWindow> {
  __device__ __forceinline__ static Band band(const Ctx& c) { return Band{c.params->window_left, c.params->window_right}; }
};

// A band with a bidirectional prefix (Mask::prefix): keys [0, params.mask_prefix) are visible to
// every query too (prefix LM: the prefix both ways, causal after it; a sliding window's sink tokens).
// Written as a built-in rather than left to an any_of with a snippet: a causal-shaped custom mask
// ran 5-7% slower than the built-in causal mask, its tile map or block snippet and all (H200,
// docs/PERF.md run 79), so traced prefix-LM masks lower to this (fa4jit.flex.Band). Causal keys stay
// contiguous (the prefix only widens the range: every tile of [0, end) has a visible key); a
// window's range has a gap between the prefix and the band, so its walk classifies each tile.
template <class M>
struct PrefixKeepsContiguous {
  static constexpr bool value = false;
};
template <>
struct PrefixKeepsContiguous<Causal> {
  static constexpr bool value = true;
};

template <class M>
struct Prefixed {
  static constexpr bool kIsNone = false;
  static constexpr bool kSnippet = false;
  static constexpr bool kContiguous = PrefixKeepsContiguous<M>::value;
  static constexpr bool kRowInterval = PrefixKeepsContiguous<M>::value;
  template <bool kInside = false>
  __device__ __forceinline__ static bool visible(int q, int k, const Ctx& c) {
    return k < c.params->mask_prefix || M::template visible<kInside>(q, k, c);
  }
  __device__ __forceinline__ static KvRange kv_range(int q_lo, int q_hi, const Ctx& c) {
    const KvRange r = M::kv_range(q_lo, q_hi, c);
    const int p = min(c.params->mask_prefix, c.seqlen_k);
    if (p <= 0) return r;
    return {0, r.end > r.begin ? max(r.end, p) : p};
  }
  __device__ __forceinline__ static TileClass classify(int q_lo, int q_hi, int k_lo, int k_hi, const Ctx& c) {
    const int p = c.params->mask_prefix;
    if (k_hi <= p) return kFull;
    const TileClass t = M::classify(q_lo, q_hi, k_lo, k_hi, c);
    return k_lo < p && t == kSkip ? kPartial : t;
  }
};

// Chunked (Llama 4): visible iff query position and key fall in the same chunk of
// params.chunk_size keys. Query positions are aligned like causal (offset).
struct Chunked {
  static constexpr bool kIsNone = false;
  static constexpr bool kSnippet = false;
  static constexpr bool kContiguous = false;
  static constexpr bool kRowInterval = true;
  template <bool kInside = false>
  __device__ __forceinline__ static bool visible(int q, int k, const Ctx& c) {
    const int C = c.params->chunk_size;
    return floor_div(q + c.diag_offset(), C) == floor_div(k, C);
  }
  __device__ __forceinline__ static KvRange kv_range(int q_lo, int q_hi, const Ctx& c) {
    const int C = c.params->chunk_size, off = c.diag_offset();
    const int lo = max(0, floor_div(q_lo + off, C) * C);
    const int hi = min(c.seqlen_k, (floor_div(q_hi - 1 + off, C) + 1) * C);
    return {lo, max(lo, hi)};
  }
  __device__ __forceinline__ static TileClass classify(int q_lo, int q_hi, int k_lo, int k_hi, const Ctx& c) {
    const int C = c.params->chunk_size, off = c.diag_offset();
    const int cq_lo = floor_div(q_lo + off, C), cq_hi = floor_div(q_hi - 1 + off, C);
    const int ck_lo = floor_div(k_lo, C), ck_hi = floor_div(k_hi - 1, C);
    if (ck_hi < cq_lo || ck_lo > cq_hi) return kSkip;
    if (cq_lo == cq_hi && ck_lo == ck_hi && cq_lo == ck_lo) return kFull;
    return kPartial;
  }
};

// Combinators: a key is visible under And<A, B> iff both see it, under Or<A, B> iff either does.
// Beside a snippet both sides are evaluated (no short circuit), so Custom's branch-free aux loads
// stay unconditional and shared by a row or column (causal + document at sm90a d64: 232 bytes of
// spills with &&, none without); built-in pairs keep && (chunked beside causal or a window spilled
// more without it).
template <class A, class B>
struct And {
  static constexpr bool kIsNone = false;
  static constexpr bool kContiguous = false;
  static constexpr bool kRowInterval = A::kRowInterval && B::kRowInterval;
  static constexpr bool kSnippet = A::kSnippet || B::kSnippet;
  template <bool kInside = false>
  __device__ __forceinline__ static bool visible(int q, int k, const Ctx& c) {
    const bool a = A::template visible<kInside>(q, k, c);
    if constexpr (kSnippet) return a & B::template visible<kInside>(q, k, c);
    return a && B::template visible<kInside>(q, k, c);
  }
  __device__ __forceinline__ static KvRange kv_range(int q_lo, int q_hi, const Ctx& c) {
    const KvRange a = A::kv_range(q_lo, q_hi, c), b = B::kv_range(q_lo, q_hi, c);
    const int lo = max(a.begin, b.begin);
    return {lo, max(lo, min(a.end, b.end))};
  }
  __device__ __forceinline__ static TileClass classify(int q_lo, int q_hi, int k_lo, int k_hi, const Ctx& c) {
    const TileClass a = A::classify(q_lo, q_hi, k_lo, k_hi, c), b = B::classify(q_lo, q_hi, k_lo, k_hi, c);
    if (a == kSkip || b == kSkip) return kSkip;
    return (a == kFull && b == kFull) ? kFull : kPartial;
  }
};

template <class A, class B>
struct Or {
  static constexpr bool kIsNone = false;
  static constexpr bool kContiguous = false;
  static constexpr bool kRowInterval = false;
  static constexpr bool kSnippet = A::kSnippet || B::kSnippet;
  template <bool kInside = false>
  __device__ __forceinline__ static bool visible(int q, int k, const Ctx& c) {
    const bool a = A::template visible<kInside>(q, k, c);
    if constexpr (kSnippet) return a | B::template visible<kInside>(q, k, c);
    return a || B::template visible<kInside>(q, k, c);
  }
  __device__ __forceinline__ static KvRange kv_range(int q_lo, int q_hi, const Ctx& c) {
    const KvRange a = A::kv_range(q_lo, q_hi, c), b = B::kv_range(q_lo, q_hi, c);
    if (a.end <= a.begin) return b;
    if (b.end <= b.begin) return a;
    return {min(a.begin, b.begin), max(a.end, b.end)};
  }
  __device__ __forceinline__ static TileClass classify(int q_lo, int q_hi, int k_lo, int k_hi, const Ctx& c) {
    const TileClass a = A::classify(q_lo, q_hi, k_lo, k_hi, c), b = B::classify(q_lo, q_hi, k_lo, k_hi, c);
    if (a == kFull || b == kFull) return kFull;
    return (a == kSkip && b == kSkip) ? kSkip : kPartial;
  }
};

// x / d for x >= 0, d > 0: a shift where d is a power of two (automatic tile maps have blocks of 128).
// The walk classifies every tile it passes; a division by a run-time d there (a reciprocal and a
// dozen integer instructions, four per tile) sat between the consumers' MMAs: H200, the four custom
// masks below goal 6-12% faster with the shift than with the division, and than with a multiply-high
// by a host-made reciprocal (docs/PERF.md run 57). sm_100a keeps the division: its packed-GQA
// custom-mask kernels sit at their register limit and either form spilled there
// (tests/blackwell_compile_test.cpp; no Blackwell GPU here to weigh them).
__device__ __forceinline__ int div_block(int x, int d) {
#if __CUDA_ARCH__ >= 1000
  return x / d;
#else
  return (d & (d - 1)) == 0 ? x >> (__ffs(d) - 1) : x / d;
#endif
}

// Run-time block mask (FwdParams::block_mask): the class of a tile is the combination of the
// classes of every mask block it overlaps, for every head it covers.
__device__ __forceinline__ TileClass combine_classes(TileClass acc, TileClass t, bool first) {
  if (first) return t;
  return acc == t ? acc : kPartial;
}

// Head `head`'s tile map in the context's batch: row bq (a block of query rows) at bq *
// block_mask_row_stride, one byte per key block.
__device__ __forceinline__ const unsigned char* map_of(int head, const Ctx& c) {
  const FwdParams& p = *c.params;
  return p.block_mask + c.batch * p.block_mask_batch_stride + head * p.block_mask_head_stride;
}

// A tile-map byte's class: 0 no key visible, 1 every key, anything else partial.
__device__ __forceinline__ TileClass map_class(int v) { return v == 0 ? kSkip : v == 1 ? kFull : kPartial; }

__device__ __forceinline__ TileClass block_mask_class(int head, int q_lo, int q_hi, int k_lo, int k_hi, const Ctx& c) {
  const FwdParams& p = *c.params;
  const unsigned char* base = map_of(head, c);
  TileClass acc = kPartial;
  bool first = true;
  const int bk_lo = div_block(k_lo, p.block_mask_k), bk_hi = div_block(k_hi - 1, p.block_mask_k);
  for (int bq = div_block(q_lo, p.block_mask_q); bq <= div_block(q_hi - 1, p.block_mask_q); ++bq)
    for (int bk = bk_lo; bk <= bk_hi; ++bk) {
      acc = combine_classes(acc, map_class(base[bq * p.block_mask_row_stride + bk]), first);
      first = false;
      if (acc == kPartial) return kPartial;
    }
  return acc;
}

// Folds the non-zero bytes of w, bytes j .. j+3 of a tile-map row (little-endian), into the
// non-empty block range [first, last].
__device__ __forceinline__ void note_blocks(unsigned w, int j, int& first, int& last) {
  if (w != 0) {
    first = min(first, j + ((__ffs(w) - 1) >> 3));
    last = max(last, j + ((31 - __clz(w)) >> 3));
  }
}

// The keys [begin, end) that the run-time block mask lets query rows [q_lo, q_hi) of heads
// [c.q_head, c.q_head + c.num_heads) see: from the first to one past the last non-empty block of
// their block rows (whole blocks, so a superset of the visible keys). Lets a walk start at the last
// non-empty tile instead of testing every tile of the sequence (a document mask's rows see ~1/8 of
// it). Every role of a CTA scans the row before its first tile, so the scan's latency is on the
// critical path of each Q tile: a 16-byte-aligned row (the Python package's maps where the key
// blocks are a multiple of 16) is read 16 blocks per load, the rest a byte at a time; the loads are
// independent (no early exit), so they issue together (docs/PERF.md run 71: 1-4% on the custom-mask
// rows). Query rows clamped to the sequence; none: an empty range.
__device__ __forceinline__ KvRange block_mask_range(int q_lo, int q_hi, const Ctx& c) {
  const FwdParams& p = *c.params;
  q_lo = max(q_lo, 0);
  q_hi = min(q_hi, c.seqlen_q);
  const int nk = (c.seqlen_k + p.block_mask_k - 1) / p.block_mask_k;
  int first = nk, last = -1;
  if (q_lo < q_hi)
    for (int h = c.q_head; h < c.q_head + c.num_heads; ++h) {
      const unsigned char* base = map_of(h, c);
      for (int bq = div_block(q_lo, p.block_mask_q); bq <= div_block(q_hi - 1, p.block_mask_q); ++bq) {
        const unsigned char* row = base + bq * p.block_mask_row_stride;
        int j = 0;
        if ((reinterpret_cast<unsigned long long>(row) & 15) == 0) {
#pragma unroll 4
          for (; j + 16 <= nk; j += 16) {
            const uint4 w = *reinterpret_cast<const uint4*>(row + j);
            note_blocks(w.x, j, first, last);
            note_blocks(w.y, j + 4, first, last);
            note_blocks(w.z, j + 8, first, last);
            note_blocks(w.w, j + 12, first, last);
          }
        }
#pragma unroll 8
        for (; j < nk; ++j)
          if (row[j] != 0) {
            first = min(first, j);
            last = max(last, j);
          }
      }
    }
  if (last < 0) return {0, 0};
  return {first * p.block_mask_k, min((last + 1) * p.block_mask_k, c.seqlen_k)};
}

// A user mask (generated from Mask::custom): User::eval is the element snippet, User::block the
// optional block snippet (kPartial when the user gave none). The snippet's claims and the run-time
// block mask both describe the same element mask, so either one's kSkip or kFull is trusted.
// Snippets only see their sequence (VARIANTS.md), so they may index per-position tensors (document
// ids): eval is called on positions clamped into the sequence and its result discarded outside it
// (tiles reach past the sequence); block for tile bounds clamped to the sequence and never for a
// tile outside it (kSkip). Positions are never negative (every backend counts tile rows and keys up
// from 0), so clamping is a min against the last query and key; visible<true> (a tile inside the
// sequence, sm90a) passes them as they are: a strided mask's sm90a loop about 3 instructions per
// element instead of 7.6, 1.14 -> 1.36x FlexAttention (docs/PERF.md run 75). Branch-free, so a
// snippet's loads that depend on the row alone (doc[q_idx]) or the column alone (doc[kv_idx]) are
// shared by the thread's elements of that row or column: a document mask's sm90a d128 tile issues
// 34 loads per thread instead of 128 and ran 1.18x as fast (docs/PERF.md run 69). In run 57 this form spilled
// 60-156 bytes at the consumers' 168 registers and was slower; in run 69's kernels it spills less
// than the branch did (document: 20 bytes after the KV loop, against 28).
template <class User>
struct Custom {
  static constexpr bool kIsNone = false;
  static constexpr bool kContiguous = false;
  static constexpr bool kRowInterval = false;
  static constexpr bool kSnippet = true;
  template <bool kInside = false>
  __device__ __forceinline__ static bool visible(int q, int k, const Ctx& c) {
    if constexpr (kInside) return User::eval(c.batch, c.q_head, q, k, *c.params);
    const bool in = (q < c.seqlen_q) & (k < c.seqlen_k);
    return User::eval(c.batch, c.q_head, min(q, c.seqlen_q - 1), min(k, c.seqlen_k - 1), *c.params) & in;
  }
  __device__ __forceinline__ static KvRange kv_range(int q_lo, int q_hi, const Ctx& c) {
    if (c.params->block_mask) return block_mask_range(q_lo, q_hi, c);
    return {0, c.seqlen_k};
  }
  __device__ __forceinline__ static TileClass classify(int q_lo, int q_hi, int k_lo, int k_hi, const Ctx& c) {
    q_lo = max(q_lo, 0);
    k_lo = max(k_lo, 0);
    q_hi = min(q_hi, c.seqlen_q);
    k_hi = min(k_hi, c.seqlen_k);
    if (q_lo >= q_hi || k_lo >= k_hi) return kSkip;
    TileClass acc = kPartial;
    // Not unrolled: a packed tile's heads (2 or 4) unrolled with their map loops spilled the sm90a
    // decode kernels' gathering warps (56 registers) 12-52 bytes; one head per pass spills nothing.
#pragma unroll 1
    for (int h = c.q_head; h < c.q_head + c.num_heads; ++h) {
      TileClass t = static_cast<TileClass>(User::block(c.batch, h, q_lo, q_hi, k_lo, k_hi, *c.params));
      if (t == kPartial && c.params->block_mask) t = block_mask_class(h, q_lo, q_hi, k_lo, k_hi, c);
      acc = combine_classes(acc, t, h == c.q_head);
      if (acc == kPartial) break;
    }
    return acc;
  }

  // A tile's class in two steps, for a walk that reads it a tile early (TileWork::peek / after):
  // read() loads the run-time block mask's byte, resolve() decodes it when the tile is done. For one
  // head and one map block per tile dimension (the Python package's maps: blocks of 128), a single
  // load at the unit's map row (map_row) without classify()'s loops and early exits: H200, the
  // kernels of the flex prefix LM, strided and document rows 5.5%, 2% and 1.8% faster (docs/PERF.md
  // run 72). ptxas still moves the byte to a uniform register right after the load (SASS), so its
  // latency is not hidden yet. Other tiles (packed heads, smaller blocks), a block snippet's SKIP /
  // FULL and no map: classify().
  struct Read {
    int cls;  // the class, or kPartial pending the map's byte
    int raw;  // the map's byte (0 none, 1 all, other: partial) or -1: cls is the class
  };
  // The Q tile's row of the run-time block mask, found once per unit (TileWork::finish_rows): the
  // byte offset of key block 0 of its one map row, where the tile covers one head and one block row
  // and each KV tile lies in one key block: the blocks are the tiles (block_mask_k == kBN: the Python
  // package's maps of 128 at BN 128) or, below BN 128, whole multiples of them (maps of 128 at BN 64);
  // else -1. Found per tile (four block divisions and three 64-bit strides), it made the snippet
  // kernel of causal attention 1.14x the time of the built-in one over the same tiles (H100,
  // docs/PERF.md run 113).
  template <int kBN>
  __device__ __forceinline__ static int map_row(int q_lo, int q_hi, const Ctx& c) {
    const FwdParams& p = *c.params;
    const int ql = max(q_lo, 0), qh = min(q_hi, c.seqlen_q), bk = p.block_mask_k;
    if (!p.block_mask || c.num_heads != 1 || ql >= qh || !(bk == kBN || (kBN < 128 && bk % kBN == 0))) return -1;
    const int bq = div_block(ql, p.block_mask_q);
    if (bq != div_block(qh - 1, p.block_mask_q)) return -1;
    const long long row = (map_of(c.q_head, c) - p.block_mask) + bq * p.block_mask_row_stride;
    return row + ceil_div(c.seqlen_k, kBN) <= 0x7fffffffLL ? static_cast<int>(row) : -1;
  }
  // The class of KV tile n (keys [k_lo, k_hi)) of the unit whose map row is `row` (map_row): one byte
  // load where the row is known (the block snippet, if any, first), else classify(). Read a tile
  // ahead and decoded (resolve) when the tile is done: TileWork::peek / after.
  template <int kBN>
  __device__ __forceinline__ static Read read(int row, int n, int q_lo, int q_hi, int k_lo, int k_hi, const Ctx& c) {
    const FwdParams& p = *c.params;
    if (row >= 0) {  // tile n lies inside the sequence (the walk's tiles start below seqlen_k)
      const int ql = max(q_lo, 0), qh = min(q_hi, c.seqlen_q), kl = max(k_lo, 0), kh = min(k_hi, c.seqlen_k);
      const int t = User::block(c.batch, c.q_head, ql, qh, kl, kh, p);
      const int bk = kBN >= 128 ? n : div_block(n * kBN, p.block_mask_k);
      return t == kPartial ? Read{kPartial, p.block_mask[row + bk]} : Read{t, -1};
    }
    return {classify(q_lo, q_hi, k_lo, k_hi, c), -1};
  }
  __device__ __forceinline__ static TileClass resolve(Read r) {
    return r.raw < 0 ? static_cast<TileClass>(r.cls) : map_class(r.raw);
  }
};

// Row q's visible keys under a kRowInterval mask, relative to key k0: [begin, end) (kv_range of
// the one row, bounded by seqlen_k). The kernels mask a partial tile by it (sm90a mask_rows,
// sm100a visible_bits) instead of asking visible() per key.
template <class M>
__device__ __forceinline__ KvRange row_keys(int q, int k0, const Ctx& c) {
  static_assert(M::kRowInterval, "row_keys: a mask whose rows each see one interval of keys");
  const KvRange r = M::kv_range(q, q + 1, c);
  return {r.begin - k0, r.end - k0};
}

// The two-step class read (Custom::read / resolve) for any mask: Custom's own, and for every other
// mask its class at once (their classes are arithmetic, or a Custom inside And / Or, read at once).
// map_row: the unit's tile-map row where one load reads a tile's byte (Custom::map_row), else -1.
template <class M>
struct ClassRead {
  using Read = TileClass;
  template <int kBN>
  __device__ __forceinline__ static int map_row(int, int, const Ctx&) { return -1; }
  template <int kBN>
  __device__ __forceinline__ static Read read(int, int, int q_lo, int q_hi, int k_lo, int k_hi, const Ctx& c) {
    return M::classify(q_lo, q_hi, k_lo, k_hi, c);
  }
  __device__ __forceinline__ static Read none() { return kSkip; }
  __device__ __forceinline__ static TileClass resolve(Read r) { return r; }
};
template <class User>
struct ClassRead<Custom<User>> {
  using Read = typename Custom<User>::Read;
  template <int kBN>
  __device__ __forceinline__ static int map_row(int q_lo, int q_hi, const Ctx& c) {
    return Custom<User>::template map_row<kBN>(q_lo, q_hi, c);
  }
  template <int kBN>
  __device__ __forceinline__ static Read read(int row, int n, int q_lo, int q_hi, int k_lo, int k_hi, const Ctx& c) {
    return Custom<User>::template read<kBN>(row, n, q_lo, q_hi, k_lo, k_hi, c);
  }
  __device__ __forceinline__ static Read none() { return {kSkip, -1}; }
  __device__ __forceinline__ static TileClass resolve(Read r) { return Custom<User>::resolve(r); }
};

}  // namespace mask
}  // namespace fa4
