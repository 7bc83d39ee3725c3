// fa4jit device ABI: the one struct every backend's kernel takes by value.
// Included by host C++ (runtime/) and by NVRTC device code, so it uses plain types only
// and no headers. Changing it changes every cache key (templates are hashed).
#pragma once

namespace fa4 {

// Strides are in elements. Q/O are (batch, seqlen_q, heads, depth) views, K/V are
// (batch, seqlen_k, kv_heads, depth) views, each with arbitrary batch/row/head strides and a
// unit depth stride. LSE is float32 [batch][num_q_heads][seqlen_q], natural log.
struct FwdParams {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse;  // null: not written

  long long q_batch_stride, q_row_stride, q_head_stride;
  long long k_batch_stride, k_row_stride, k_head_stride;
  long long v_batch_stride, v_row_stride, v_head_stride;
  long long o_batch_stride, o_row_stride, o_head_stride;

  int batch;
  int seqlen_q;
  int seqlen_k;
  int num_q_heads;
  int num_kv_heads;
  int group;  // num_q_heads / num_kv_heads

  float softmax_scale;  // multiplies q.k before the score-mod
  float scale_log2;     // softmax_scale * log2(e), folded into one FMA when the score-mod is identity

  // Mask run-time arguments (one cubin serves every value).
  int window_left;   // sliding window: keys visible down to q - window_left (-1: unbounded)
  int window_right;  // and up to q + window_right (-1: unbounded)
  int chunk_size;    // chunked masks
  int mask_flags;    // bit 0: causal alignment is top-left instead of bottom-right
  int mask_prefix;   // mask::Prefixed: keys [0, mask_prefix) visible to every query too

  // Variable length / sinks (null when unused).
  const int* cu_seqlens_q;  // [batch + 1]
  const int* cu_seqlens_k;  // [batch + 1]
  const int* seqused_k;     // [batch]
  const float* sinks;       // [num_q_heads], log-domain sink logits

  // Paged KV (page_table non-null): K and V are (num_pages, page_size, kv_heads, depth), so the
  // *_batch_stride fields are page strides. Row r of sequence b is row r % page_size of page
  // page_table[b * max_pages + r / page_size]. Sequence b has seqused_k[b] keys, or seqlen_k.
  const int* page_table;  // [batch][max_pages]
  int page_size;
  int max_pages;
  int kv_box_rows;  // TMA backends: rows of one K/V TMA box (BN; gcd(page_size, BN) when paged; 0: the kernel gathers its rows)

  // Run-time block mask for custom masks (null when unused), FlexAttention's BlockMask idea:
  // one byte per (batch, q head, q block, k block), 0 = no visible key (tile skipped),
  // 1 = every key visible (no per-element mask), 2 = partial. Strides in bytes; 0 broadcasts.
  const unsigned char* block_mask;
  int block_mask_q, block_mask_k;  // block sizes in query rows and keys
  long long block_mask_batch_stride, block_mask_head_stride, block_mask_row_stride;

  // Built-in score-mod arguments.
  float softcap;              // softcap score-mod: cap * tanh(score / cap)
  const float* alibi_slopes;  // ALiBi: [num_q_heads]; null = standard geometric slopes

  // Score-mod auxiliary inputs (FA4's aux_tensors / aux_scalars).
  const void* aux_ptr[4];
  float aux_scalar[4];

  // Split-KV (num_splits > 1): CTA split s of a tile covers its share of the tile's KV blocks and
  // writes O normalised by its own sum, in float32, to o_partial[(s * partial_rows + row - partial_row0) * depth + d],
  // and its LSE (natural log, -inf when it saw no key) to lse_partial[s * partial_rows + row - partial_row0];
  // row = the LSE row index of (batch, q head, query). fa4_combine then writes O and LSE.
  // The partial slices hold LSE rows [partial_row0, partial_row0 + partial_rows): every row, or a
  // persistent split tail's rows (split_from > 0: tiles [0, split_from) write O whole; PersistentTiles).
  float* o_partial;
  float* lse_partial;
  int num_splits;    // 1: no split
  int partial_rows;  // rows of one split's slice: num_q_heads * (varlen ? total_q : batch * seqlen_q)
  int partial_row0;  // LSE row of the slices' row 0 (0 unless split tail)
  int split_from;    // persistent unmasked: first split tile (0: all)
  int num_m_blocks;  // Q tiles per (batch, head): ceil(max_seqlen_q * pack / BM), pack = group when the
                     // kernel packs GQA heads (then per KV head) else 1; the grid has num_m_blocks * num_splits in x
  // Masked, unsplit grids: the CTA order is longest-first over sections of lpt_heads (batch, head)
  // pairs whose K/V fit in L2 together (GridWalk::longest_first, PersistentTiles); 0: grid order
  // (plain grid) or one section (persistent).
  int lpt_heads;
  // Varlen grid walk (GridWalk::plan, sm90a): grid x lists the Q tiles of every sequence, at most
  // varlen_tiles of them (times num_splits), grid z is 1, and each CTA finds its sequence by
  // scanning cu_seqlens_q (TileWork::locate_varlen). 0: num_m_blocks tiles per (batch, head), grid
  // z the batch, so every sequence is sized by the longest (a decode row took max_seqlen_q / BM
  // CTAs, all but one empty).
  int varlen_tiles;
  // Long-pole splits of a listed varlen walk (GridWalk::plan, automatic splits of a batch that holds
  // short and long query runs: a continuous-batching step). Only the sequences of 1..split_qmax
  // queries split their one Q tile, each into min(num_splits, ceil(seqlen_k / split_keys)) pieces;
  // every other tile runs whole and writes O. The partial slots are per (sequence b, grid head hy,
  // tile row r < split_head_rows): slot = b * split_seq_rows + hy * split_head_rows + r (partial_rows
  // = batch * split_seq_rows). A split tile's piece 0 writes each of its slots' piece count (0: no
  // row) to split_count and its LSE row to split_row, which fa4_combine reads for sequences of
  // 1..split_qmax queries. split_qmax 0: none of this (a split launch splits every tile num_splits ways).
  int split_qmax, split_keys, split_head_rows, split_seq_rows;
  int* split_row;  // [partial_rows]

  // Stream-K persistent decode (sm90a Tuning::persistent = 2; common/stream_k_walk.h): the grid's CTAs
  // split tiles * tile_units work units evenly, units_per_cta each and one more for the first
  // units_extra CTAs. When num_splits > 1 every segment writes partials to its slot (< num_splits),
  // and the tile's slot-0 segment stores the tile's segment count per row in split_count, which
  // fa4_combine reads instead of num_splits. tile_units 0 and split_count null otherwise.
  int tile_units, units_per_cta, units_extra;
  int* split_count;  // [partial_rows]

  // FP8 kernels (Element e4m3): float32 [batch][num_kv_heads] dequantisation factors of Q, K and V
  // (FlashAttention-3's descale_q/k/v); null = 1. Other kernels ignore them.
  const float* descale_q;
  const float* descale_k;
  const float* descale_v;
  // An e4m3 latent cache (MLA): float32 [num_pages], page p's rows are page_descale[p] x stored
  // value (sm90a's converters apply it, LatentConverter); null = 1. Other kernels ignore it.
  const float* page_descale;
  // Dynamic persistent walk (sm90a Tuning::persistent = 3; DynamicTiles in
  // common/persistent_walk.h): the units claimed after each CTA's first, zeroed before each launch
  // (in the launch's workspace). Null otherwise.
  int* tile_counter;
};

// Bytes of one swizzled shared-memory row (a TMA box's inner span, the wgmma descriptors' swizzle)
// for rows of padded_depth elements of elem_bytes: 128 (SW128), or 64 (SW64) where the row is no
// whole number of 128-byte rows: e4m3 at padded depth 64, and MLA's 576-wide e4m3 latent rows
// (4.5 x 128 bytes, 9 x 64). The host's TMA maps (runtime/tma.cpp) and sm90a's Shape read this rule.
constexpr int swizzle_row_bytes(int padded_depth, int elem_bytes) {
  return padded_depth * elem_bytes % 128 == 0 ? 128 : 64;
}

// Split-KV combine kernel geometry (fa4_combine). Host and device share it.
constexpr int kCombineThreads = 256;
constexpr int kCombineWarps = kCombineThreads / 32;
constexpr int kMaxSplits = 256;  // the combine keeps each row's split weights in registers / smem
// Warps that share one LSE row, each taking every W-th split: enough that a warp walks at most 8
// splits where 8 warps allow. One warp per row walked all 122 splits of a batch-1 32k decode with
// 3-4 loads in flight, ~35 dependent L2 round trips (docs/PERF.md run 66).
constexpr int combine_warps_per_row(int splits) {
  int w = 1;
  while (w < kCombineWarps && 8 * w < splits) w *= 2;
  return w;
}
constexpr int combine_rows_per_cta(int splits) { return kCombineWarps / combine_warps_per_row(splits); }

// TMA descriptors for the backends that load by TMA (sm90a, sm100a). Layout-compatible with
// the driver's CUtensorMap (CUDA 13: 128 bytes, 128-byte aligned). Each map is 4-D over
// (depth, rows, heads, batch), innermost first, SWIZZLE_128B, box {64 elements, box_rows, 1, 1}:
// box_rows = one consumer's Q tile for q and o (sm90a: 64, sm100a: BM/2), BN for k and v.
struct alignas(128) TmaDesc {
  unsigned long long opaque[16];
};
struct TmaDescs {
  TmaDesc q, k, v, o;
};

}  // namespace fa4
