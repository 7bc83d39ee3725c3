#include "runtime/launch_args.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include <fmt/format.h>

#include "fa4jit/errors.hpp"
#include "generator/backends/backend.hpp"
#include "generator/source.hpp"
#include "common/packed_rows.h"

namespace jit::detail {

namespace {

[[noreturn]] void bad(const std::string& what) { throw LaunchError("launch: " + what); }

bool uses(const Mask& m, Mask::Kind k) {
  if (m.kind == k) return true;
  for (const Mask& c : m.children)
    if (uses(c, k)) return true;
  return false;
}

void check_tensor(const char* name, const Tensor& t, DType dtype, int depth) {
  if (!t.data) bad(fmt::format("{}.data is null", name));
  if (t.dtype != dtype)
    bad(fmt::format("{}.dtype is {}, the kernel was built for {}", name, to_string(t.dtype), to_string(dtype)));
  if (t.shape[3] != depth)
    bad(fmt::format("{}.shape[3] (head_dim) is {}, the kernel was built for {}", name, t.shape[3], depth));
  if (t.stride[3] != 1)
    bad(fmt::format("{}.stride[3] is {}: head_dim must be contiguous (stride 1)", name, t.stride[3]));
  if (reinterpret_cast<std::uintptr_t>(t.data) % 16 != 0) bad(fmt::format("{}.data is not 16-byte aligned", name));
  // TMA (and the 16-byte vector loads of sm80) step rows, heads and batches in 16-byte units:
  // 8 elements of a 16-bit type, 16 of e4m3.
  const std::int64_t align = 16 / dtype_size(dtype);
  for (int i = 0; i < 3; ++i) {
    if (t.shape[i] < 0) bad(fmt::format("{}.shape[{}] is negative ({})", name, i, t.shape[i]));
    if (t.shape[i] > INT32_MAX) bad(fmt::format("{}.shape[{}] = {} exceeds 2^31-1", name, i, t.shape[i]));
    if (t.stride[i] < 0 || t.stride[i] % align != 0)
      bad(fmt::format("{}.stride[{}] = {} must be a non-negative multiple of {} elements (16 bytes)", name, i,
                      t.stride[i], align));
  }
}

// FP8 dequantisation factors, float32 [B][Hkv] (4-byte aligned): descale_q for e4m3 queries
// (dtype e4m3), descale_k / descale_v for e4m3 keys and values (dtype or kv_dtype e4m3).
void check_descale(const char* name, const float* p, DType dtype, const char* field) {
  if (!p) return;
  if (dtype != DType::e4m3)
    bad(fmt::format("{} is set but the kernel's {} is {}: descale factors are for e4m3 (FP8) tensors only", name, field,
                    to_string(dtype)));
  if (reinterpret_cast<std::uintptr_t>(p) % alignof(float) != 0)
    bad(fmt::format("{} is not 4-byte aligned (float32 [batch][kv_heads])", name));
}

}  // namespace

fa4::FwdParams pack_params(const ResolvedConfig& rc, const LaunchArgs& a, LaunchShape* shape) {
  const FA4Config& c = rc.config;
  const DType kv = kv_type(c);
  check_tensor("q", a.q, c.dtype, c.depth);
  check_tensor("k", a.k, kv, c.depth);
  check_tensor("v", a.v, kv, c.depth);
  check_tensor("o", a.o, *c.output_dtype, c.depth);
  check_descale("descale_q", a.descale_q, c.dtype, "dtype");
  check_descale("descale_k", a.descale_k, kv, c.kv_dtype ? "kv_dtype" : "dtype");
  check_descale("descale_v", a.descale_v, kv, c.kv_dtype ? "kv_dtype" : "dtype");

  const bool paged = a.page_table != nullptr;
  const bool varlen = a.cu_seqlens_q || a.cu_seqlens_k;
  if (paged && a.cu_seqlens_k)
    bad("cu_seqlens_k with page_table: paged keys are located by the page table (pass seqused_k)");
  if (varlen && !paged && !(a.cu_seqlens_q && a.cu_seqlens_k)) bad("cu_seqlens_q and cu_seqlens_k go together");
  const std::int64_t B = varlen ? a.batch : a.q.shape[0];
  if (a.max_seqlen_k < 0)
    bad(fmt::format("max_seqlen_k is {}: pass the longest key sequence, or 0 when it is not known", a.max_seqlen_k));
  if (varlen) {
    if (a.batch <= 0) bad(fmt::format("batch is {}: varlen launches need the number of sequences", a.batch));
    if (a.max_seqlen_q <= 0)
      bad(fmt::format("max_seqlen_q is {}: varlen launches need the longest query length", a.max_seqlen_q));
    for (const auto* t : {&a.q, &a.o})
      if (t->shape[0] != 1) bad("varlen q and o are packed as (1, total, heads, head_dim)");
    if (!paged)
      for (const auto* t : {&a.k, &a.v})
        if (t->shape[0] != 1) bad("varlen k and v are packed as (1, total, heads, head_dim)");
  } else {
    if (B < 1) bad(fmt::format("q.shape[0] (batch) is {}", B));
    if (a.o.shape[0] != B || (!paged && (a.k.shape[0] != B || a.v.shape[0] != B)))
      bad(fmt::format("batch sizes differ: q {}, k {}, v {}, o {}", B, a.k.shape[0], a.v.shape[0], a.o.shape[0]));
  }
  if (paged) {
    if (a.max_pages <= 0) bad(fmt::format("max_pages is {}: a page table needs its row length", a.max_pages));
    if (a.k.shape[0] < 1) bad(fmt::format("k.shape[0] (num_pages) is {}", a.k.shape[0]));
    if (a.v.shape[0] != a.k.shape[0])
      bad(fmt::format("v.shape[0] ({}) must equal k.shape[0] (num_pages, {})", a.v.shape[0], a.k.shape[0]));
    if (static_cast<std::int64_t>(a.max_pages) * a.k.shape[1] > INT32_MAX)
      bad(fmt::format("max_pages * page_size = {} exceeds 2^31-1 keys",
                      static_cast<std::int64_t>(a.max_pages) * a.k.shape[1]));
  } else if (a.max_pages != 0) {
    bad(fmt::format("max_pages is {} without a page_table", a.max_pages));
  }
  const std::int64_t Sq = a.q.shape[1], Hq = a.q.shape[2], Hkv = a.k.shape[2];
  const std::int64_t page_size = paged ? a.k.shape[1] : 0;
  const std::int64_t Sk = paged ? a.max_pages * page_size : a.k.shape[1];
  if (Sq < 1) bad(fmt::format("q.shape[1] (seqlen_q) is {}", Sq));
  if (Sk < 1) bad(fmt::format("k.shape[1] (seqlen_k) is {}", Sk));
  if (a.o.shape[1] != Sq || a.o.shape[2] != Hq)
    bad(fmt::format("o.shape ({}, {}) must match q's (seqlen {}, heads {})", a.o.shape[1], a.o.shape[2], Sq, Hq));
  if (a.v.shape[1] != a.k.shape[1] || a.v.shape[2] != Hkv)
    bad(fmt::format("v.shape ({}, {}) must match k's (seqlen {}, heads {})", a.v.shape[1], a.v.shape[2], a.k.shape[1],
                    Hkv));
  if (Hq < 1 || Hkv < 1 || Hq % Hkv != 0)
    bad(fmt::format("q heads ({}) must be a positive multiple of k/v heads ({})", Hq, Hkv));
  if (c.num_q_heads > 0 && Hq != c.num_q_heads)
    bad(fmt::format("q has {} heads, the kernel was built for num_q_heads = {}", Hq, c.num_q_heads));
  if (c.group > 0 && Hq / Hkv != c.group)
    bad(fmt::format("q/k heads = {}/{} = group {}, the kernel was built for group = {}", Hq, Hkv, Hq / Hkv, c.group));
  if (B > 65535 || Hq > 65535) bad(fmt::format("batch ({}) and heads ({}) must be at most 65535", B, Hq));

  const float scale = a.softmax_scale == 0.0f ? 1.0f / std::sqrt(static_cast<float>(c.depth)) : a.softmax_scale;
  if (!(scale > 0.0f) || !std::isfinite(scale))
    bad(fmt::format("softmax_scale is {}: it must be positive and finite", scale));
  if (uses(c.mask, Mask::Kind::chunked) && a.chunk_size <= 0)
    bad(fmt::format("chunk_size is {}: the chunked mask needs a positive chunk size", a.chunk_size));
  if (uses(c.mask, Mask::Kind::sliding_window) && (a.window_left < -1 || a.window_right < -1))
    bad(fmt::format("window ({}, {}): extents are >= 0, or -1 for unbounded", a.window_left, a.window_right));
  if (c.score_mod.kind == ScoreMod::Kind::softcap && !(a.softcap > 0.0f))
    bad(fmt::format("softcap is {}: the softcap score-mod needs a positive cap", a.softcap));
  const LaunchArgs::BlockMask& bm = a.block_mask;
  if (bm.data) {
    if (!uses(c.mask, Mask::Kind::custom))
      bad("block_mask is set but the kernel's mask has no custom part: built-in masks classify their own tiles");
    if (bm.block_q <= 0 || bm.block_k <= 0)
      bad(fmt::format("block_mask block sizes ({}, {}) must be positive", bm.block_q, bm.block_k));
    if (bm.batch_stride < 0 || bm.head_stride < 0 || bm.row_stride < 0) bad("block_mask strides must be non-negative");
  }
  const int kv_box_rows = paged ? policy(rc).paged_kv_box_rows(rc, page_size) : c.BN;

  fa4::FwdParams p{};
  p.q = a.q.data;
  p.k = a.k.data;
  p.v = a.v.data;
  p.o = a.o.data;
  p.lse = a.lse;
  auto strides = [](const Tensor& t, long long& b, long long& r, long long& h) {
    b = t.stride[0];
    r = t.stride[1];
    h = t.stride[2];
  };
  strides(a.q, p.q_batch_stride, p.q_row_stride, p.q_head_stride);
  strides(a.k, p.k_batch_stride, p.k_row_stride, p.k_head_stride);
  strides(a.v, p.v_batch_stride, p.v_row_stride, p.v_head_stride);
  strides(a.o, p.o_batch_stride, p.o_row_stride, p.o_head_stride);
  p.batch = static_cast<int>(B);
  p.seqlen_q = static_cast<int>(Sq);
  p.seqlen_k = static_cast<int>(Sk);
  p.num_q_heads = static_cast<int>(Hq);
  p.num_kv_heads = static_cast<int>(Hkv);
  p.group = static_cast<int>(Hq / Hkv);
  p.softmax_scale = scale;
  p.scale_log2 = scale * 1.4426950408889634f;
  p.window_left = a.window_left;
  p.window_right = a.window_right;
  p.chunk_size = a.chunk_size;
  p.mask_flags = mask_flags(c.mask);
  p.cu_seqlens_q = a.cu_seqlens_q;
  p.cu_seqlens_k = a.cu_seqlens_k;
  p.seqused_k = a.seqused_k;
  p.sinks = a.sinks;
  p.descale_q = a.descale_q;  // null unless an FP8 kernel (check_descale)
  p.descale_k = a.descale_k;
  p.descale_v = a.descale_v;
  p.page_table = a.page_table;
  p.page_size = static_cast<int>(page_size);
  p.max_pages = a.max_pages;
  p.kv_box_rows = kv_box_rows;
  p.block_mask = bm.data;
  p.block_mask_q = bm.block_q;
  p.block_mask_k = bm.block_k;
  p.block_mask_batch_stride = bm.batch_stride;
  p.block_mask_head_stride = bm.head_stride;
  p.block_mask_row_stride = bm.row_stride;
  p.softcap = a.softcap;
  p.alibi_slopes = a.alibi_slopes;
  for (int i = 0; i < 4; ++i) {
    p.aux_ptr[i] = a.aux_ptr[i];
    p.aux_scalar[i] = a.aux_scalar[i];
  }
  // Packed GQA: grid heads are CTAs of `pack` query heads; a sequence's tile rows are PackedRow's
  // (templates/common/packed_rows.h), padded per Q box where pack does not divide the box rows.
  const int pack = pack_heads(rc);
  const std::int64_t max_sq = a.cu_seqlens_q ? a.max_seqlen_q : Sq;
  p.num_m_blocks = static_cast<int>((fa4::packed_row_count(max_sq, pack, pack_span(rc)) + c.BM - 1) / c.BM);
  p.num_splits = 1;  // the plan decides splits and sets the workspace
  p.partial_rows = static_cast<int>(Hq * (a.cu_seqlens_q ? Sq : B * Sq));
  shape->batch = static_cast<int>(B);
  shape->max_seqlen_q = static_cast<int>(max_sq);
  shape->max_seqlen_k = a.cu_seqlens_k ? 0 : static_cast<int>(Sk);  // varlen keys: unknown on the host
  shape->num_q_heads = static_cast<int>(Hq);
  shape->grid_heads = static_cast<int>(Hq / pack);
  return p;
}

ScheduleModel schedule_model(const LaunchShape& shape, const LaunchArgs& args, const FA4Config& c) {
  ScheduleModel m{shape, false};
  const bool varlen = args.cu_seqlens_q || args.cu_seqlens_k;
  if (varlen && args.max_seqlen_k > 0)  // packed keys: unknown without it; paged: bounded by the table
    m.shape.max_seqlen_k = shape.max_seqlen_k > 0 ? std::min(shape.max_seqlen_k, args.max_seqlen_k) : args.max_seqlen_k;
  m.causal_known_lengths =
      c.mask.kind == Mask::Kind::causal && m.shape.max_seqlen_k > 0 && (!varlen || args.max_seqlen_k > 0);
  return m;
}

}  // namespace jit::detail
