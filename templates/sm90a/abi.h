// sm90a's compile-time facts, written once for the host (generator/backends/sm90a.cpp derives and
// checks configs with them) and the kernel (sm90a/shape.cuh and sm90a/smem_layout.cuh assert and
// lay out with them). Compiled by the host compiler and by NVRTC, as common/params.h and
// the common/*_walk.h headers are: plain C++, no headers beyond segments.h's FA4_HOST_DEVICE.
//   - the legal kBN of each kernel family;
//   - the shared-memory size of each family (the one formula; SmemLayout's offsets are its terms);
//   - the own-O rule (persistent CTAs stage O in a region of their own where it fits);
//   - the register budgets: the consumers' fragments, the setmaxnreg splits, the launch bound;
//   - wide O (a V of 512 columns: split across warpgroups) and latent KV (MLA: V is K's prefix).
#pragma once
#include "common/segments.h"

namespace fa4 {
namespace sm90a {
namespace abi {

// The kernel families. Each reads 16-bit or e4m3 Q/K/V and has its own shared memory:
//   k16     bf16 / fp16 Q, K, V.
//   kFp8    e4m3 Q, K, V: the producer warpgroup also writes a transposed copy of each V stage.
//   kKvFp8  16-bit Q over an e4m3 KV cache: TMA fills e4m3 K / V rings that the producer's helper
//           warps convert into the 16-bit rings the consumers read.
enum class Family : int { k16 = 0, kFp8 = 1, kKvFp8 = 2 };
FA4_HOST_DEVICE constexpr Family family_of(bool fp8, bool kv_fp8) {
  return fp8 ? Family::kFp8 : kv_fp8 ? Family::kKvFp8 : Family::k16;
}

// ---- kBN ------------------------------------------------------------------------------------
// 16-bit kernels: multiples of 16 (one k16 step of P V) with a wgmma N generated for S = Q K^T
// (dev/gen_mma.py NS, mma_ops.inc; NS also holds 256, P V's N at padded depth 256, whose S fragment
// alone would be 128 registers a thread, so not a kBN). The host's candidates are these, in order.
// Head dim 512 (padded depth 512, V as wide): 32, so that two K and two V stages of 32 KiB fit
// beside its 64 KiB Q tile (at 64 a stage of each alone takes 128 KiB).
FA4_HOST_DEVICE constexpr bool bn_16bit(int bn, int dp) {
  return dp == 512 ? bn == 32 : bn == 64 || bn == 80 || bn == 96 || bn == 112 || bn == 128 || bn == 176 || bn == 192;
}
// FP8: 128 (the transposed V stage is one block of 128 keys a row); 160 (FA3's FP8 d64 tile,
// 192 x 160: two Vt blocks, the second holding 32 keys) at kBM 192 and padded depth 64.
FA4_HOST_DEVICE constexpr bool bn_fp8(int bn, int bm, int dp) { return bn == 128 || (bn == 160 && bm == 192 && dp == 64); }
// An FP8 KV cache: 64 (decode: two CTAs per SM fit) or 128 (prefill); MLA's e4m3 latent (padded
// depth 576) 32, so that its 16-bit and e4m3 K rings of two stages fit beside the 72 KiB Q tile.
FA4_HOST_DEVICE constexpr bool bn_kv_fp8(int bn, int dp) { return dp == 576 ? bn == 32 : bn == 64 || bn == 128; }
FA4_HOST_DEVICE constexpr bool bn_legal(Family f, int bn, int bm, int dp) {
  return f == Family::kFp8 ? bn_fp8(bn, bm, dp) : f == Family::kKvFp8 ? bn_kv_fp8(bn, dp) : bn_16bit(bn, dp);
}

// ---- Wide O and latent KV -------------------------------------------------------------------
// A warpgroup's O fragment holds at most 256 columns (128 registers a thread). A wider V (512:
// MLA's latent, head dim 512) is split across o_split warpgroups that share their 64 Q rows: the
// first computes S = Q K^T and the softmax and hands P to the others (shared_p_bytes below); each
// P V's and stores its own dpv / o_split columns (FlashMLA's split of the 512-wide accumulator).
FA4_HOST_DEVICE constexpr int o_split(int dpv) { return dpv > 256 ? (dpv + 255) / 256 : 1; }
// MLA's absorbed attention (DeepSeek-V3, Kimi-K2 decode): Q and K 576 wide (512 latent + 64
// rope), V = the first 512 columns of the same K rows. The kernel loads each latent row once and
// P V reads V from K's stage (no V ring); the launch passes v as k's 512-column prefix view.
FA4_HOST_DEVICE constexpr bool v_in_k(int dp, int dpv) { return dp == 576 && dpv == 512; }
// O-split warpgroups share P: the row group's first warpgroup computes S = Q K^T and the softmax
// and hands the others P (16-bit [64 rows][bn keys] in whole SW128 blocks of 64 keys: a 32-key P
// fills half of each 128-byte row), each row's O correction and its final 1 / sum through shared
// memory, so S is computed once (shared_p.cuh SharedP).
FA4_HOST_DEVICE constexpr int shared_p_tile_bytes(int bn) { return (bn + 63) / 64 * 64 * 128; }
// Beside P, four floats per row: O's correction, the final 1 / sum (one S warpgroup), and the
// running maximum and sum after the tile (alternating S warpgroups: the next tile's owner resumes
// the softmax from them).
FA4_HOST_DEVICE constexpr int shared_p_bytes(int bn, int dpv) {
  return o_split(dpv) > 1 ? shared_p_tile_bytes(bn) + 4 * 64 * 4 : 0;
}

// Room in the producer warpgroup: the 16-bit two-consumer kernels at head dim 512 (the O split) and
// the persistent ones at padded depth 192 and 256 run their producer at 56 registers and their
// consumers at 224, not at 24 / 240: their persistent producers gather pages no TMA box takes only
// so (at 24 they spilled 4-24 B, at 40 / 232 still 4 B at d192 causal; NVRTC's ptxas, sm_90a). The
// grid walks at 192 and 256 gather at 24 and keep 240 (d256 softcap spilled 8 B at 224). MLA's
// latent (576) keeps 24 / 240. producer_regs, consumer_regs and gathers read this one rule.
FA4_HOST_DEVICE constexpr bool roomy_producer(int dp, bool persistent) {
  return dp == 512 || (persistent && dp > 128 && dp < 512);
}

// ---- Gathered pages ----
// Paged K / V whose pages no TMA box takes (gcd(page_size, kBN) not a multiple of 8 rows: page
// sizes 1, 2, 4, 12, ...) are gathered by producer warps with cp.async (gather.cuh GatherTile):
// by the 16-bit kernels and an FP8 KV cache's, on every walk up to head dim 512 (the persistent ones
// above padded depth 128 with their 56-register producer: roomy_producer), not by FP8 (e4m3 Q, K, V;
// 72 B spilled at d128 causal) or a persistent walk over MLA's latent. The launch refuses such pages
// for those (naming page_size).
FA4_HOST_DEVICE constexpr bool gathers(Family f, bool persistent, int dp) {
  return f != Family::kFp8 && (!persistent || dp <= 128 || roomy_producer(dp, persistent));
}
// The gathering warps read each key row's page number from shared memory, fetched by cp.async one
// KV tile ahead (gather.cuh GatherState): two slots of bn page numbers (4 bytes a key row), behind
// the barriers. A page-table read per 32 rows, made just before their copies, left every stage
// waiting on a global load's latency (page 1 at 0.31-0.43x page 16, docs/PERF.md run 63).
FA4_HOST_DEVICE constexpr int page_ring_bytes(Family f, bool persistent, int dp, int bn) {
  return gathers(f, persistent, dp) ? 2 * 4 * bn : 0;
}

// ---- Shared memory --------------------------------------------------------------------------
// Offsets from the 1024-aligned dynamic base (smem_layout.cuh SmemLayout, dp = padded depth,
// S = K/V stages):
//   [Q: bm x dp, 16-bit sized (O is staged there; an FP8 Q fills half)][K ring: S stages][V ring]
//   [extra: FP8's transposed V ring, or an FP8 KV cache's e4m3 K and V rings][shared P: O-split
//   warpgroups][own O: bm x dp 16-bit,
//   persistent CTAs where it fits][tail: the barriers (at most kBarrierBytes), then the page ring of
//   kernels that gather pages; 1024 bytes at least]
FA4_HOST_DEVICE constexpr int q_bytes(int bm, int dp) { return 2 * bm * dp; }  // also the own-O region
// Bytes of an element of the K / V stages the consumers read, and of those TMA fills.
FA4_HOST_DEVICE constexpr int kv_elem_bytes(Family f) { return f == Family::kFp8 ? 1 : 2; }
FA4_HOST_DEVICE constexpr int kv_load_elem_bytes(Family f) { return f == Family::k16 ? 2 : 1; }
FA4_HOST_DEVICE constexpr int kv_stage_bytes(Family f, int bn, int dp) { return bn * dp * kv_elem_bytes(f); }
FA4_HOST_DEVICE constexpr int kv_load_stage_bytes(Family f, int bn, int dp) { return bn * dp * kv_load_elem_bytes(f); }
// FP8's transposed V stage: whole SW128 blocks of [dp rows][128 keys].
FA4_HOST_DEVICE constexpr int vt_blocks(int bn) { return (bn + 127) / 128; }
FA4_HOST_DEVICE constexpr int vt_stage_bytes(int bn, int dp) { return vt_blocks(bn) * dp * 128; }
// Stages of the ring TMA fills with K: the K ring's, except an e4m3 latent cache's (MLA over an FP8
// cache), whose e4m3 ring is twice as deep as the 16-bit ring its converters feed. Its 32-key tiles
// (BN 32: the 16-bit ring beside the 72 KiB Q tile) left two e4m3 stages, 36 KiB in flight per SM,
// and the kernel read the cache at 1.0-1.3 TB/s, 0.67-0.84x the 16-bit cache's kernel (docs/PERF.md
// run 67); four stages of 18 KiB still fit beside the two 16-bit ones.
FA4_HOST_DEVICE constexpr int k_load_stages(Family f, int dp, int dpv, int stages) {
  return f == Family::kKvFp8 && v_in_k(dp, dpv) ? 2 * stages : stages;
}
// Behind the K and V rings: FP8's transposed V ring, or an FP8 KV cache's e4m3 K and V rings (K's
// only for latent KV, whose V is K's prefix).
FA4_HOST_DEVICE constexpr int extra_bytes(Family f, int bn, int dp, int dpv, int stages) {
  return f == Family::kFp8 ? stages * vt_stage_bytes(bn, dp)
         : f == Family::kKvFp8
             ? (k_load_stages(f, dp, dpv, stages) + (v_in_k(dp, dpv) ? 0 : stages)) * kv_load_stage_bytes(f, bn, dp)
             : 0;
}
constexpr int kBarrierBytes = 512;
// The tail: at least the 1024 bytes every layout had before the page ring, so the kernels that
// gather at kBN 64 (decode, where BM 64 BN 64 at 3 stages is exactly two CTAs per SM) keep their size.
FA4_HOST_DEVICE constexpr int tail_bytes(Family f, bool persistent, int dp, int bn) {
  const int bytes = kBarrierBytes + page_ring_bytes(f, persistent, dp, bn);
  return bytes > 1024 ? bytes : 1024;
}
// The dynamic shared memory of a kernel: the one formula (Config::kSmemBytes is this value). dpv:
// V's and O's padded depth (dp, or narrower for a 16-bit V of its own: FA4Config::depth_v); V's
// ring and the own-O region are that wide.
// Latent KV (v_in_k) has no V ring. Warpgroups that split O (o_split) share one Q region per 64 rows.
FA4_HOST_DEVICE constexpr int v_stage_bytes(Family f, int bn, int dp, int dpv) {
  return v_in_k(dp, dpv) ? 0 : kv_stage_bytes(f, bn, dpv);
}
// persistent: the walk (gathers above); the host's derive, before the walk is tuned, asks for the
// grid walk's, which is the larger.
FA4_HOST_DEVICE constexpr int smem_bytes(Family f, int bm, int bn, int dp, int dpv, int stages, bool persistent,
                                         bool own_o) {
  return q_bytes(bm, dp) + stages * (kv_stage_bytes(f, bn, dp) + v_stage_bytes(f, bn, dp, dpv)) +
         extra_bytes(f, bn, dp, dpv, stages) + shared_p_bytes(bn, dpv) + (own_o ? q_bytes(bm, dpv) : 0) +
         tail_bytes(f, persistent, dp, bn);
}

// ---- Own O ----------------------------------------------------------------------------------
// Persistent CTAs stage O in a region of their own where it fits in `limit` bytes (not d256): a
// warpgroup then hands its Q region back right after its KV loop, and the next tile's Q load
// overlaps this tile's epilogue instead of following it. An FP8 KV cache's kernels stage O in the Q
// region. The host asks with the arch's shared memory and then adds the region to the budget; the
// kernel asks with Config::kSmemBytes, which then holds it.
FA4_HOST_DEVICE constexpr bool own_o(Family f, bool persistent, int bm, int bn, int dp, int dpv, int stages, int limit) {
  return persistent && f != Family::kKvFp8 && smem_bytes(f, bm, bn, dp, dpv, stages, persistent, true) <= limit;
}

// ---- Registers ------------------------------------------------------------------------------
// Threads: one producer warpgroup and o_split(dpv) consumer warpgroups per 64 rows of Q.
FA4_HOST_DEVICE constexpr int consumer_wgs(int bm, int dpv) { return bm / 64 * o_split(dpv); }
FA4_HOST_DEVICE constexpr int num_threads(int bm, int dpv) { return 128 * (1 + consumer_wgs(bm, dpv)); }

// The host's kBN choice (16-bit): per consumer thread the overlapped schedule keeps O (dp/2 floats),
// S (bn/2) and packed P (bn/4) live at once. Largest totals ptxas fits with 0 spills: 196 at 240
// registers (d128 BN 176) and 128 at 160 (BM 192: d64 BN 128; BN 192 there needs 176 and spills
// 400 B). Indices, row state, addresses and the mask take the rest. Per-element masks (all but none
// and causal) and position-dependent score-mods (ALiBi, snippets) keep ~20 more registers live in
// the softmax: 176 for their defaults (d192 BN 112 and d256 BN 80 spill 8-180 B with them; FA3 too
// lowers BN for local masks there).
FA4_HOST_DEVICE constexpr int fragment_regs(int dpv, int bn) {  // O: the warpgroup's share of V's width
  return dpv / o_split(dpv) / 2 + bn / 2 + bn / 4;
}
FA4_HOST_DEVICE constexpr int fragment_budget(int bm, bool heavy_softmax) {
  return bm == 192 ? 128 : heavy_softmax ? 176 : 196;
}

// setmaxnreg budgets (FA3's splits): 2 consumer WGs: 128*24 + 256*240 = 64512 <= 65536 (padded depth
// <= 128 and grid walks at 192 / 256; 128*56 + 256*224 = 64512 where roomy_producer);
// 3 consumer WGs: 128*32 + 384*160 = 65536.
// 1 consumer WG, 2 CTAs per SM (decode): 2 * (128*56 + 128*200) = 65536. The producer's 56 let its
// four warps gather pages no TMA box takes, each unrolling its row copies (gather.cuh kGatherWarps,
// GatherTile); at 24 one warp issued one dependent shuffle, address and cp.async at a time (page 1
// at 0.31-0.43x page 16, docs/PERF.md run 63). The consumer's fragments there are 112 registers
// (d128 BN 64).
// 1 consumer WG, 3 CTAs per SM (the unpacked small-window tile at padded depth 64:
// generator/backends/sm90a.cpp ctas_per_sm): 3 * (128*40 + 128*120) = 61440 = 3 * 256 * 80 launch
// registers. The consumer's fragments are 80 (d64 BN 64); 56 / 104 spilled 48 B (ptxas, sm_90a)
// and 48 / 112 spilled 52 B with softcap; at 40 (or 48) the producer gathers page-1 rows 1.35x
// slower than at 56 (docs/PERF.md run 92), which is why packed launches keep two CTAs.
// 1 consumer WG, 1 CTA per SM (decode at padded depth > 128, or a large kBN): FA3's 56 / 256
// (128*56 + 128*256 = 39936). With 24 / 240 there ptxas spills ~470 B (packed GQA + custom mask
// and score-mod, d128 kBN 128 or d192 kBN 64); 56 / 256 spills none.
// FP8, 2 consumer WGs: the producer warpgroup also transposes V (16 + 16 registers of bytes in
// flight): 128*56 + 256*224 = 64512, and P takes 16 fewer consumer registers than at 16 bits.
// FP8 at depth 64, 3 consumer WGs: 128*56 + 384*152 = 65536 (S 64 + P 16 + O 32 per thread).
// FP8, 3 consumer WGs, at 160 (fp8_consumers_160): 128*32 + 384*160 = 65536; the ldmatrix
// transposer fits 32 (the producer spilled 12 B there before it, 4e1d4d4). Padded depth 128:
// S 64 + P 16 + O 64, no intra-warpgroup overlap (152 spills 1 KB); depth 64 over kBN 160 (FA3's
// 192 x 160): S 80 + P 20 + O 32 with the overlap (152 spilled 96 B and serialized wgmma).
// FP8 KV cache, 1 consumer WG at 2 CTAs per SM: the same 56 / 200.
// 16-bit at head dim 512 (the O split) and persistent at padded depth 192 and 256: 56 / 224 as FP8's
// 2 WGs (roomy_producer above).
// The producer's helper warps (FP8's V transposers, an FP8 KV cache's converters) work for both
// FP8 families.
FA4_HOST_DEVICE constexpr bool fp8_consumers_160(Family f, int wgs, int dp, int bn) {
  return f == Family::kFp8 && wgs == 3 && (dp == 128 || bn == 160);
}
FA4_HOST_DEVICE constexpr int producer_regs(Family f, int wgs, int ctas_per_sm, int dp, int bn, bool persistent) {
  return ctas_per_sm == 3                                                  ? 40
         : fp8_consumers_160(f, wgs, dp, bn)                                ? 32
         : wgs == 1 || f != Family::k16 || roomy_producer(dp, persistent) ? 56
         : wgs <= 2                                                         ? 24
                                                                            : 32;
}
// The decode kernels' producer warpgroup (load.cuh kDecodeProducer): one consumer warpgroup beside a
// producer of 56 registers, room for a stage's page numbers and four gathering warps. The
// three-CTA tile's 40-register producer is not one: its producer warp gathers alone.
FA4_HOST_DEVICE constexpr bool decode_producer(Family f, int wgs, int ctas_per_sm, int dp, int bn, bool persistent) {
  return wgs == 1 && producer_regs(f, wgs, ctas_per_sm, dp, bn, persistent) >= 56;
}
FA4_HOST_DEVICE constexpr int consumer_regs(Family f, int wgs, int ctas_per_sm, int dp, int bn, bool persistent) {
  return ctas_per_sm == 3                                     ? 120
         : ctas_per_sm == 2                                   ? 200
         : wgs == 1 && ctas_per_sm == 1                       ? 256
         : fp8_consumers_160(f, wgs, dp, bn)                  ? 160
         : f != Family::k16 && wgs == 3                       ? 152
         : f != Family::k16 || roomy_producer(dp, persistent) ? 224
         : wgs <= 2                                           ? 240
                                                              : 160;
}
// setmaxnreg moves registers through a per-CTA pool holding what the launch allocated: the
// __launch_bounds__ count (65536 / (threads x CTAs per SM), at most 255, in units of 8) for every
// thread. Budgets above it make setmaxnreg.inc wait forever: a hang, not an error (docs/PERF.md
// run 46 (6): 128*64 + 256*224 against 384*168).
FA4_HOST_DEVICE constexpr int launch_regs(int threads, int ctas_per_sm) {
  return (65536 / (threads * ctas_per_sm) < 255 ? 65536 / (threads * ctas_per_sm) : 255) / 8 * 8;
}
FA4_HOST_DEVICE constexpr bool budgets_fit(Family f, int bm, int ctas_per_sm, int dp, int dpv, int bn, bool persistent) {
  return 128 * producer_regs(f, consumer_wgs(bm, dpv), ctas_per_sm, dp, bn, persistent) +
             128 * consumer_wgs(bm, dpv) * consumer_regs(f, consumer_wgs(bm, dpv), ctas_per_sm, dp, bn, persistent) <=
         launch_regs(num_threads(bm, dpv), ctas_per_sm) * num_threads(bm, dpv);
}

}  // namespace abi
}  // namespace sm90a
}  // namespace fa4
