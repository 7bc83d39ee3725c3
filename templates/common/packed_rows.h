// Packed GQA rows: which (query, head) pair a Q tile row holds, and how many tile rows a sequence
// takes. The one definition of the mapping, compiled by the host compiler (runtime/: tile counts,
// TMA boxes) and by NVRTC (every backend's loads, masks, epilogues), as common/segments.h is.
// Plain C++: no headers beyond segments.h's FA4_HOST_DEVICE.
//
// pack: the query heads of one CTA (FA4Config::pack_gqa: the group, or for groups larger than a
// box an equal slice of it, pack_heads in generator/backends/backend.hpp); 1 unpacked.
// span: the rows one TMA box of Q fills (sm90a: a consumer warpgroup's 64, sm100a: a 128-row MMA
// tile's BM / 2); 0 where Q is not loaded by boxes (sm80: rows are contiguous).
//
// Tile rows are cut into spans. Span i holds queries [i * qs, (i + 1) * qs), qs = span / pack
// (rounded down), in (query, head) order: row i * span + j is query i * qs + j / pack of head
// j % pack, for j < qs * pack. The last span - qs * pack rows of a span are padding: every role
// computes them (row-independent in the softmax and P V: they cannot leak into real rows), no
// epilogue writes them, and a TMA box of exactly qs * pack rows never loads them. When pack
// divides span (or span is 0) there is no padding: row r is query r / pack of head r % pack, the
// same code as before any-group packing (dense).
#pragma once
#include "common/segments.h"

namespace fa4 {

// Whether rows are dense (no padding rows): row r is query r / pack of head r % pack.
FA4_HOST_DEVICE constexpr bool packed_dense(int pack, int span) { return span == 0 || span % pack == 0; }
// Real rows of one span (the rows one Q box loads): span when dense, else whole queries of pack heads.
FA4_HOST_DEVICE constexpr int packed_box_rows(int pack, int span) {
  return packed_dense(pack, span) ? span : span / pack * pack;
}
// Tile rows of a sequence of seqlen_q queries: real rows and the padding of every full span (a
// partial last span ends at its last real row; the padding of a full one adds no tile).
FA4_HOST_DEVICE constexpr long long packed_row_count(long long seqlen_q, int pack, int span) {
  return packed_dense(pack, span)
             ? seqlen_q * pack
             : seqlen_q / (span / pack) * span + seqlen_q % (span / pack) * pack;
}

template <int kPack, int kSpan = 0>
struct PackedRow {
  static constexpr bool kDense = packed_dense(kPack, kSpan);
  static constexpr int kSpanQueries = kDense ? 0 : kSpan / kPack;  // queries of one span (padded form)
  static constexpr int kSpanRows = packed_box_rows(kPack, kSpan);  // real rows of one span
  static_assert(kPack >= 1 && (kDense || kSpanQueries >= 1), "PackedRow: a span holds at least one query");

  int q;     // query index in the sequence
  int head;  // head offset inside the CTA's heads (0 unpacked)
  // Padding rows map to their span's last real row: a real (query, head), so masks and score-mods
  // see in-range values; the rows' results are never stored.
  FA4_HOST_DEVICE static PackedRow of(int r) {
    if constexpr (kPack == 1) return {r, 0};
    if constexpr (kDense) return {r / kPack, r % kPack};
    const int i = r / kSpan;
    const int j = (r - i * kSpan) < kSpanRows ? r - i * kSpan : kSpanRows - 1;
    return {i * kSpanQueries + j / kPack, j % kPack};
  }
  // Tile rows of a sequence of seqlen_q queries.
  FA4_HOST_DEVICE static int count(int seqlen_q) { return static_cast<int>(packed_row_count(seqlen_q, kPack, kSpan)); }
  // Whether tile row r (>= 0) holds a (query, head) pair of the sequence: below count() and,
  // padded, not a span's padding.
  FA4_HOST_DEVICE static bool real(int r, int seqlen_q) {
    if constexpr (kDense) return r < seqlen_q * kPack;
    return r < count(seqlen_q) && r % kSpan < kSpanRows;
  }
  // The first query of the span that starts at tile row r (r % kSpan == 0; dense: any r % kPack == 0).
  FA4_HOST_DEVICE static int span_query(int r) {
    if constexpr (kDense) return r / kPack;
    return r / kSpan * kSpanQueries;
  }
};

}  // namespace fa4
