// A paged KV tile's TMA boxes (sm90a and sm100a load.cuh), walked page by page. Plain C++, so the
// unit tests walk them on the host as the kernels do (tests/paged_boxes_test.cpp).
#pragma once
#include "common/params.h"
#include "common/segments.h"  // FA4_HOST_DEVICE

namespace fa4 {

// Entry `index` of a sequence's page-table row (pages): the page that holds its key rows
// [index * page_size, (index + 1) * page_size). Indices past the row (only in the padding of the
// last tile, which the key bound masks) take its last entry: finite data, never a fault. The one
// clamp rule (page_table_entry, PagedBoxes).
FA4_HOST_DEVICE const int* page_table_slot(const FwdParams& p, const int* pages, int index) {
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
  return pages + min(index, p.max_pages - 1);  // the device's min: the kernels' SASS as GPU-tested
#else
  return pages + (index < p.max_pages - 1 ? index : p.max_pages - 1);
#endif
}

// The boxes of one KV tile, in order from the tile's key row r0 (a tile of kBN rows is kBN /
// p.kv_box_rows boxes): the first box's page and row by one division by the run-time page size,
// each next box kv_box_rows rows on (kv_box_rows divides page_size, so no box crosses a page: the
// host's rule, BackendPolicy::paged_kv_box_rows). A division per box (~40 dependent uniform
// instructions before each box's page-table read) held paged prefill's TMA producer at 0.70x
// contiguous at page 16, 16 boxes a K / V tile (docs/PERF.md run 122).
struct PagedBoxes {
  int index;  // the box's page: its entry in the sequence's page-table row
  int row;    // the box's first row in that page (the map's row coordinate)
  FA4_HOST_DEVICE PagedBoxes(const FwdParams& p, int r0) : index(r0 / p.page_size), row(r0 - index * p.page_size) {}
  FA4_HOST_DEVICE int page(const FwdParams& p, const int* pages) const {  // the map's batch coordinate
    return *page_table_slot(p, pages, index);
  }
  FA4_HOST_DEVICE void next(const FwdParams& p) {
    row += p.kv_box_rows;
    if (row == p.page_size) {
      row = 0;
      ++index;
    }
  }
};

// Pages that are whole boxes (page_size divides the tile width BN; sm90a load.cuh load_whole_pages
// and sm100a load.cuh for page sizes 16, 32 and 64): box i of tile n is entry n * (BN / page_size) + i
// from its row 0, where PagedBoxes' walk lands without its division and per-box chain.
FA4_HOST_DEVICE constexpr int whole_page_index(int n, int pages_per_tile, int i) { return n * pages_per_tile + i; }

// Tile n's page numbers where each page of kPage rows is one box of a kBN-row tile, read together
// (the reads in flight at once, then the boxes back to back): sm100a's TMA warp. slot: box i's
// page-table entry, which sm90a's load_whole_pages reads itself (into shared memory for its
// 24-register producers; into a local array elsewhere, whose SASS read went through `read` differed
// in its FP8 kernels from the GPU-tested build, run 129).
template <int kPage, int kBN>
struct WholePages {
  static_assert(kPage > 0 && kBN % kPage == 0, "WholePages: each page one box of the tile");
  static constexpr int kCount = kBN / kPage;
  int page[kCount];
  FA4_HOST_DEVICE static const int* slot(const FwdParams& p, const int* pages, int n, int i) {
    return page_table_slot(p, pages, whole_page_index(n, kCount, i));
  }
  FA4_HOST_DEVICE static WholePages read(const FwdParams& p, const int* pages, int n) {
    WholePages w;
    for (int i = 0; i < kCount; ++i) w.page[i] = *slot(p, pages, n, i);
    return w;
  }
};

}  // namespace fa4
