// SM100MHA2Q.load: the TMA warp (warp 13). One elected thread issues every copy.
// Order (MAX): Q0, K0, Q1, V0, then K_n, V_n over the CTA's KV tiles (Work: descending, kSkip
// tiles skipped, this split's share only). K_n arrives in qk_stages chunks along depth,
// each on its own barrier, so the MMA can start on the first chunk while the rest lands. V_n
// lands in kDpV columns (a V narrower than Q and K: FA4Config::depth_v).
// FP8 KV cache (Traits::kFp8KV): K_n and V_n land whole, as e4m3, in consecutive slots of the f8
// ring (same order); the converter warps (convert.cuh) fill the 16-bit K chunks and V stages.
// Paged caches whose page size no TMA box takes (FwdParams::kv_box_rows 0): every lane of the warp
// gathers the K / V rows (gather.cuh) into the same stages; the elected lane still loads Q by TMA.
#pragma once
#include "sm100a/traits.cuh"
#include "sm100a/pipelines.cuh"
#include "sm100a/gather.cuh"

namespace fa4 {
namespace sm100a {

// Tile n's row boxes where each page of kPage rows is one box (kBN a multiple: page sizes 16, 32,
// 64), their page numbers read together (common/paged_boxes.h WholePages), each box from its page's
// row 0: no PagedBoxes walk, whose division and per-box chain bounded sm90a's paged prefill (docs/PERF.md
// runs 127-129). False where the page size is another, and over an FP8 KV cache (its e4m3 stages
// took the walk's page numbers in registers where one variant spilled 4 B: d128 fp16, a block snippet,
// ALiBi, a packed group of 8). Arguments as load's load_rows.
template <int kPage, class T>
__device__ __forceinline__ bool load_whole_pages(const FwdParams& p, const TmaCoords& c, unsigned char* dst,
                                                 const TmaDesc* map, u64* bar, int col0, int boxes, int n, int box_cols) {
  if constexpr (T::kBN % kPage != 0 || T::kFp8KV) {
    return false;
  } else {
    if (p.page_size != kPage) return false;
    using Pages = WholePages<kPage, T::kBN>;
    const Pages pages = Pages::read(p, c.pages, n);
#pragma unroll
    for (int i = 0; i < Pages::kCount; ++i)
#pragma unroll
      for (int b = 0; b < boxes; ++b)
        tma_load_4d(dst + b * T::kBN * 128 + i * kPage * 128, map, bar, col0 + b * box_cols, 0, c.kv_head, pages.page[i]);
    return true;
  }
}

// The load walk; kGather: every lane runs it (leader: the elected lane, which loads Q), else the
// elected lane alone.
template <class Config, class Mask, bool kGather>
__device__ __forceinline__ void load_walk(const FwdParams& p, const TmaDescs& tma, unsigned char* smem,
                                          BarriersOf<Config>& bars, bool leader) {
  using T = Traits<Config>;
  const Work<Config, Mask> w = make_work<Config, Mask>(p);  // the same tiles as every other role
  int n = w.first_tile();
  if (!w.has(n)) return;  // nothing visible: no role touches Q, K or V
  const TmaCoords c = TmaCoords::make(p, w.seq);

  auto load_q = [&](int tile) {
    if (kGather && !leader) return;
    unsigned char* dst = smem + T::kQOff + tile * T::kQTileBytes;
    const int r0 = w.q_lo + tile * T::kTileM;  // first tile row of the box
    mbar_expect_tx(&bars.q_full[tile], T::kQLoadBytes);
#pragma unroll
    for (int b = 0; b < T::kDp / T::kBox; ++b) {
      if constexpr (T::kPack == 1) {
        tma_load_4d(dst + b * T::kTileM * 128, &tma.q, &bars.q_full[tile], b * T::kBox, c.q_row0 + r0, c.q_head,
                    c.q_batch);
      } else {  // 5-D map (depth, group, rows, kv heads, batch): box rows are T::Rows's real rows of the span
        tma_load_5d(dst + b * T::kTileM * 128, &tma.q, &bars.q_full[tile], b * T::kBox, 0,
                    c.q_row0 + T::Rows::span_query(r0), T::kPackSlices > 1 ? c.q_head / T::kPack : c.kv_head, c.q_batch);
      }
    }
  };

  // KV tile n's kBN key rows into the 64-column boxes at dst + box * kBN * 128, for the `boxes`
  // boxes starting at depth column col0. Paged: kBN / kv_box_rows row boxes per column box, each
  // from its page (kv_box_rows divides page_size and kBN, so no box crosses a page and each lands
  // on whole 1024-byte swizzle atoms); pages that are whole boxes read their numbers together
  // (load_whole_pages). Unpaged: one box, as always.
  // box_cols: elements per 128-byte box row (64 of 16 bits, 128 of e4m3).
  auto load_rows = [&](unsigned char* dst, const TmaDesc* map, u64* bar, int col0, int boxes, int n,
                       int box_cols = T::kBox) {
    const int row = n * T::kBN;
    if (c.pages == nullptr) {
#pragma unroll
      for (int b = 0; b < boxes; ++b)
        tma_load_4d(dst + b * T::kBN * 128, map, bar, col0 + b * box_cols, c.kv_row0 + row, c.kv_head, c.kv_batch);
    } else if (!load_whole_pages<16, T>(p, c, dst, map, bar, col0, boxes, n, box_cols) &&
               !load_whole_pages<32, T>(p, c, dst, map, bar, col0, boxes, n, box_cols) &&
               !load_whole_pages<64, T>(p, c, dst, map, bar, col0, boxes, n, box_cols)) {
      TmaCoords::PagedBoxes box(p, row);
#pragma unroll 1
      for (int i = 0; i < T::kBN; i += p.kv_box_rows, box.next(p)) {
        const int page = box.page(p, c.pages);
#pragma unroll
        for (int b = 0; b < boxes; ++b)
          tma_load_4d(dst + b * T::kBN * 128 + i * 128, map, bar, col0 + b * box_cols, box.row, c.kv_head, page);
      }
    }
  };

  if constexpr (T::kFp8KV) {
    // One e4m3 slot per K or V tile: Dp/128 boxes of [BN][128 bytes].
    pipe::Producer<T::kF8Slots> f8_prod(&bars.f8);
    // side: BoolConst<true> for V's tile, <false> for K's.
    auto load_f8 = [&](auto side, int n) {
      constexpr bool kV = decltype(side)::value;
      auto st = f8_prod.acquire();
      unsigned char* dst = smem + T::kF8Off + st.index() * T::kF8StageBytes;
      if constexpr (kGather) {
        gather_kv<T, T::kDp / T::kBoxF8, kV>(p, w.seq, GatherTile::of<T::kBN>(w.seq, n), 0, dst, st.full_barrier());
      } else {
        st.expect_bytes(T::kF8StageBytes);
        load_rows(dst, kV ? &tma.v : &tma.k, st.full_barrier(), 0, T::kDp / T::kBoxF8, n, T::kBoxF8);
      }
    };
    constexpr BoolConst<false> k_tile{};
    constexpr BoolConst<true> v_tile{};
    load_q(0);
    load_f8(k_tile, n);
    load_q(1);
    load_f8(v_tile, n);
    for (n = w.next_tile(n); w.has(n); n = w.next_tile(n)) {
      load_f8(k_tile, n);
      load_f8(v_tile, n);
    }
  } else {
    pipe::Producer<T::kKSlots> k_prod(&bars.k);
    pipe::Producer<T::kStages> v_prod(&bars.v);
    // One acquire per depth chunk, each chunk its own slot: a tile's chunks may wrap around the ring
    // (Q/K 192 with V 128 has 4 chunk slots for 3-chunk tiles, so K_{n+1}'s first chunk lands early).
    auto load_k = [&](int n) {
#pragma unroll
      for (int ch = 0; ch < T::kQKStages; ++ch) {
        auto st = k_prod.acquire();
        unsigned char* dst = smem + T::kKOff + st.index() * T::kKChunkBytes;
        if constexpr (kGather) {
          gather_kv<T, T::kBK0 / T::kBox, false>(p, w.seq, GatherTile::of<T::kBN>(w.seq, n), ch * T::kBK0, dst,
                                                  st.full_barrier());
        } else {
          st.expect_bytes(T::kKChunkBytes);
          load_rows(dst, &tma.k, st.full_barrier(), ch * T::kBK0, T::kBK0 / T::kBox, n);
        }
      }
    };
    auto load_v = [&](int n) {
      auto st = v_prod.acquire();
      unsigned char* dst = smem + T::kVOff + st.index() * T::kVStageBytes;
      if constexpr (kGather) {
        gather_kv<T, T::kDpV / T::kBox, true>(p, w.seq, GatherTile::of<T::kBN>(w.seq, n), 0, dst, st.full_barrier());
      } else {
        st.expect_bytes(T::kVStageBytes);
        load_rows(dst, &tma.v, st.full_barrier(), 0, T::kDpV / T::kBox, n);
      }
    };
    load_q(0);
    load_k(n);
    load_q(1);
    load_v(n);
    for (n = w.next_tile(n); w.has(n); n = w.next_tile(n)) {
      load_k(n);
      load_v(n);
    }
  }
  if constexpr (kGather) gather_finish();
}

// Warp 13. Gathered pages (kv_box_rows 0, a page size no TMA box takes): every lane; else the elected one.
template <class Config, class Mask>
__device__ __forceinline__ void load(const FwdParams& p, const TmaDescs& tma, unsigned char* smem,
                                     BarriersOf<Config>& bars) {
  const bool leader = elect_one_sync();
  if (gathers_kv_rows(p))
    load_walk<Config, Mask, true>(p, tma, smem, bars, leader);
  else if (leader)
    load_walk<Config, Mask, false>(p, tma, smem, bars, leader);
}

}  // namespace sm100a
}  // namespace fa4
