// PagedBoxes (common/paged_boxes.h): the TMA boxes of a paged KV tile, stepped page by page from one
// division per tile (sm90a and sm100a load.cuh), and whole_page_index / WholePages, the shortcut
// where each page is one box. Compiled here by the host compiler exactly as the
// kernels compile it, with the box rows the host's launch rule picks (BackendPolicy::paged_kv_box_rows)
// for the tile widths the TMA kernels resolve, and checked box by box against the division it replaced.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/paged_boxes.h"
#include "fa4jit/jit.hpp"
#include "generator/backends/backend.hpp"

namespace {

jit::FA4Config tma_config(const std::string& arch, int depth, int depth_v, jit::Mask mask, int group = 1) {
  jit::FA4Config c;
  c.arch = arch;
  c.depth = depth;
  c.depth_v = depth_v;
  c.mask = mask;
  if (group > 1) {
    c.group = group;
    c.pack_gqa = true;
  }
  return c;
}

TEST(PagedBoxes, EveryBoxSitsInOnePageAtTheRowTheDivisionGives) {
  // Tile widths of the sm90a / sm100a kernels: prefill at head dims 64-512 (BN 80 at d256, 32 at
  // d512), packed decode, MLA's latent cache.
  const std::vector<jit::FA4Config> configs = {
      tma_config("sm_90a", 128, 0, jit::Mask::causal()),   tma_config("sm_90a", 256, 0, jit::Mask::causal()),
      tma_config("sm_90a", 192, 128, jit::Mask::causal()), tma_config("sm_90a", 512, 0, jit::Mask::causal()),
      tma_config("sm_90a", 64, 0, jit::Mask::none()),      tma_config("sm_90a", 128, 0, jit::Mask::causal(), 7),
      tma_config("sm_90a", 576, 512, jit::Mask::causal()), tma_config("sm_100a", 128, 0, jit::Mask::causal()),
      tma_config("sm_100a", 192, 128, jit::Mask::causal())};
  int walked = 0, whole_boxes = 0;
  for (const jit::FA4Config& c : configs) {
    const jit::ResolvedConfig rc = jit::resolve(c);
    const int bn = rc.config.BN;
    for (int page = 1; page <= 520; ++page) {
      int box_rows = 0;
      try {
        box_rows = jit::detail::policy(rc).paged_kv_box_rows(rc, page);
      } catch (const jit::LaunchError&) {  // sm90a's persistent d576 walk: pages no box takes are refused
        continue;
      }
      if (box_rows == 0) continue;  // gathered row by row, no boxes
      const std::string what = fmt::format("{} d{} BN {} page {} boxes of {}", c.arch, c.depth, bn, page, box_rows);
      ASSERT_EQ(bn % box_rows, 0) << what;
      ASSERT_EQ(page % box_rows, 0) << what << ": a box would cross a page";
      fa4::FwdParams p{};
      p.page_size = page;
      p.kv_box_rows = box_rows;
      p.max_pages = (40 * bn + page - 1) / page;  // a 40-tile sequence's row
      std::vector<int> pages(p.max_pages);
      for (int i = 0; i < p.max_pages; ++i) pages[i] = 1000 + 7 * i;
      const bool whole = bn % page == 0;  // each page one box (sm90a's load_whole_pages)
      for (int n = 0; n < 41; ++n) {      // the last tile past the row: its boxes take the last entry
        fa4::PagedBoxes box(p, n * bn);
        for (int r = 0; r < bn; r += box_rows, box.next(p)) {
          const int key = n * bn + r, index = key / page;
          ASSERT_EQ(box.index, index) << what << " key " << key;
          ASSERT_EQ(box.row, key % page) << what << " key " << key;
          ASSERT_EQ(box.page(p, pages.data()), pages[std::min(index, p.max_pages - 1)]) << what << " key " << key;
          if (whole) {
            ASSERT_EQ(box_rows, page) << what;
            ASSERT_EQ(fa4::whole_page_index(n, bn / page, r / page), index) << what << " key " << key;
            ++whole_boxes;
          }
          ++walked;
        }
      }
    }
  }
  EXPECT_GT(walked, 100000);     // every config walked boxes at many page sizes
  EXPECT_GT(whole_boxes, 5000);  // and whole pages at each tile width's divisors
}

// WholePages<kPage, kBN> (sm100a's TMA warp, sm90a's producers with registers for it) reads, for every
// tile of a sequence and past its row, the entries PagedBoxes' walk reads, each box from row 0.
template <int kPage, int kBN>
void check_whole_pages(int& checked) {
  if constexpr (kBN % kPage == 0) {
    fa4::FwdParams p{};
    p.page_size = kPage;
    p.kv_box_rows = kPage;
    p.max_pages = (40 * kBN + kPage - 1) / kPage;
    std::vector<int> pages(p.max_pages);
    for (int i = 0; i < p.max_pages; ++i) pages[i] = 3000 + 11 * i;
    for (int n = 0; n < 41; ++n) {  // the last tile past the row
      const auto whole = fa4::WholePages<kPage, kBN>::read(p, pages.data(), n);
      fa4::PagedBoxes box(p, n * kBN);
      for (int i = 0; i < fa4::WholePages<kPage, kBN>::kCount; ++i, box.next(p)) {
        ASSERT_EQ(box.row, 0) << "page " << kPage << " BN " << kBN << " tile " << n << " box " << i;
        ASSERT_EQ(whole.page[i], box.page(p, pages.data())) << "page " << kPage << " BN " << kBN << " tile " << n;
        ++checked;
      }
    }
  }
}

template <int... kBN>
int check_widths() {
  int checked = 0;
  (check_whole_pages<16, kBN>(checked), ...);
  (check_whole_pages<32, kBN>(checked), ...);
  (check_whole_pages<64, kBN>(checked), ...);
  return checked;
}

TEST(PagedBoxes, WholePagesReadTheEntriesTheWalkReads) {
  // BN 32 (d512) to 256; a page that does not divide the width (32 at BN 80, 64 at 96, ...) is skipped.
  const int checked = check_widths<32, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 256>();
  EXPECT_GT(checked, 3000);
}

}  // namespace
