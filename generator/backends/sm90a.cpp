// sm90a (templates/sm90a): FA3-style warp-specialized wgmma kernel, TMA loads, and the tile walks
// (grid, persistent with LPT order, stream-K).
#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "fa4jit/errors.hpp"
#include "generator/backends/backend.hpp"
#include "generator/kernel_choice.hpp"
#include "sm90a/abi.h"  // templates/sm90a/abi.h: the kernel's legal kBN, shared memory, registers

namespace jit::detail {

namespace {

namespace abi = fa4::sm90a::abi;

abi::Family family(const FA4Config& c) {
  return abi::family_of(c.dtype == DType::e4m3, c.dtype != DType::e4m3 && kv_type(c) == DType::e4m3);
}

// The kernel's legal kBN for this family, tile and padded depth, ascending (abi.h bn_legal).
std::vector<int> legal_bns(abi::Family f, int bm, int dp) {
  std::vector<int> out;
  for (int bn = 16; bn <= 256; bn += 16)
    if (abi::bn_legal(f, bn, bm, dp)) out.push_back(bn);
  return out;
}

// The dynamic shared memory each of `ctas` CTAs on one SM may take: each also takes 1 KiB of
// reserved shared memory per block, which a.max_smem (one block's limit) already leaves out once.
int smem_per_cta(int ctas, const ArchInfo& a) { return (a.max_smem + 1024) / ctas - 1024; }

// CTAs per SM: one, or two where both fit (BM 64, the decode and small-window tile, at padded depth
// <= 128; deeper heads run one). Three for the unpacked 16-bit small-window tile (padded depth 64, BN
// <= 64, a sliding window without a score-mod: gpt-oss's prefill under its 128-key band), whose Q
// tiles each walk three KV tiles between a prologue and an epilogue that a third CTA's work hides
// (abi.h consumer_regs: the register split). H200, `fa4jit bench`, ABBA (docs/PERF.md run 92): 1 x
// 16k 64/8 heads 0.357 -> 0.316 ms, 16/2 0.095 -> 0.082, 1 x 2k 64/8 0.049 -> 0.044; slower: 1 x 2k
// 16/2 0.0152 -> 0.0162 (512 tiles on 396 CTAs against 264) and page 1 (gathered rows) 1 x 16k 0.467
// -> 0.508. Packed (decode, the varlen batch, the continuous-batching step: the same kernel) keeps
// two: page-1 decode ran 1.35x slower at three (the producer's 40 or 48 registers; at 56 the
// consumer spills), though the contiguous varlen batch ran 1.26x faster.
int ctas_per_sm(const FA4Config& c, int dp, int smem, const ArchInfo& a) {
  if (c.BM != 64) return 1;
  const bool window_tile = family(c) == abi::Family::k16 && dp == 64 && c.BN <= 64 && !c.pack_gqa &&
                           c.mask.kind == Mask::Kind::sliding_window && c.score_mod.kind == ScoreMod::Kind::identity;
  if (window_tile && smem <= smem_per_cta(3, a)) return 3;
  return smem <= smem_per_cta(2, a) ? 2 : 1;
}

// Per-element masks (all but none and causal) and position-dependent score-mods (ALiBi, snippets).
bool heavy_softmax(const FA4Config& c) {
  return (c.mask.kind != Mask::Kind::none && c.mask.kind != Mask::Kind::causal) ||
         c.score_mod.kind == ScoreMod::Kind::alibi || c.score_mod.kind == ScoreMod::Kind::custom;
}

// A V wider than one warpgroup's O (MLA's 512): O split over two warpgroups (abi.h o_split).
bool wide_o(const FA4Config& c, int dp) { return abi::o_split(padded_depth_v(c, dp)) > 1; }

// Unmasked or causal attention without a score-mod: where FP8 takes three consumer warpgroups and
// the 16-bit kernels persistent tiles by default.
bool plain_softmax(const FA4Config& c) {
  return (c.mask.kind == Mask::Kind::none || c.mask.kind == Mask::Kind::causal) &&
         c.score_mod.kind == ScoreMod::Kind::identity;
}

// Beyond plain_softmax, what the persistent walk was measured faster on at head dim 128 (H200, `gpu.sh
// ab`, docs/PERF.md run 74): a sliding window +1.5-2.5% (causal and not), ALiBi +3-7% (a window with
// ALiBi spills 20 B on the grid walk, none persistent). Softcap read within +-1%, so it keeps the grid.
// Head dims 64 and 96 under a sliding window without a score-mod (`fa4jit bench`, 1 x 16k and 1 x 2k,
// docs/PERF.md run 88): d64 (BM 192, sinks) +20% at 128 keys, +4% at 4096; d96 (padded to 128; the
// persistent walk spills 4 B) at Phi-3's 2047 keys +4% at 16k, +15% at 2k.
bool persistent_measured(const FA4Config& c) {
  if (c.dtype == DType::e4m3 || c.kv_dtype || value_depth(c) != c.depth) return false;
  const bool mask_ok =
      c.mask.kind == Mask::Kind::none || c.mask.kind == Mask::Kind::causal || c.mask.kind == Mask::Kind::sliding_window;
  const bool mod_ok = c.score_mod.kind == ScoreMod::Kind::identity || c.score_mod.kind == ScoreMod::Kind::alibi;
  const bool narrow_window = (c.depth == 64 || c.depth == 96) && c.mask.kind == Mask::Kind::sliding_window &&
                             c.score_mod.kind == ScoreMod::Kind::identity;
  return (mask_ok && mod_ok && c.depth == 128) || narrow_window;
}

// Whether the mask tree holds a snippet (a custom mask, alone or inside all_of / any_of): its tile
// weights come from the snippet or the launch's tile map, which no static order knows.
bool snippet_mask(const Mask& m) {
  if (m.kind == Mask::Kind::custom) return true;
  return std::any_of(m.children.begin(), m.children.end(), snippet_mask);
}

// Where the O-split warpgroups can take turns computing S (Tuning::alternate_s): O split, 16-bit
// K/V, a built-in mask (a snippet mask's evaluation beside the other warpgroup's P V spilled 4 B at
// d512 with softcap).
bool alternate_s_runs(const FA4Config& c, int dp) { return wide_o(c, dp) && !c.kv_dtype && !snippet_mask(c.mask); }

// The dynamic walk (persistent 3: units claimed at run time, templates/common/persistent_walk.h
// DynamicTiles) for snippet masks at head dim 128, 16-bit, unpacked: the persistent walk's next
// tile loads overlap the epilogue, and claiming balances tiles as uneven as a document mask's,
// where the static stride ran 17% slower than the grid (docs/PERF.md run 75). H200, against the
// grid (run 76): document 0.740 -> 0.718 ms, strided 1.461 -> 1.387, dilated 1.755 -> 1.661, prefix
// LM 2.330 -> 2.224. Also causal DeepSeek-V3 / Kimi-K2 prefill (depth 192, V 128, no score-mod):
// a varlen batch's tiles are as uneven, and the static walk orders them as if every sequence were
// the longest; over equal lengths the kernel strides as the persistent walk (no counter,
// ScheduleModel::static_order). H200 against the persistent walk (run 83, `fa4jit bench`): the
// zoo's varlen batch (7000 ... 100 tokens) 0.350 -> 0.284 ms at 8 heads, 0.677 -> 0.562 at 16,
// 5.32 -> 4.93 at 128; one 16k prompt within +-1%; one 2k prompt 2-3% slower (not profiled:
// presumably each unit's handoff through shared memory). Other depths were not measured.
// And the three-CTA small-window tile (ctas_per_sm: gpt-oss's prefill under its 128-key band),
// whose varlen batches are uneven: since the producer claims past units without Q rows
// (DynamicTiles::claim), H200, `fa4jit bench` (run 94), against the persistent walk: the zoo's
// varlen batch 64/8 heads 0.399 -> 0.345 ms, 16/2 0.110 -> 0.093 (the grid walk 0.362 / 0.097);
// 1 x 16k and 1 x 2k at 64/8 within +-0.3%; 1 x 2k 16/2 0.0160 -> 0.0165.
// And Phi-3's head dim 96 under a sliding window without a score-mod (BM 128): H200, `fa4jit bench`
// (run 95), 32/32 heads, window 2047: the zoo's varlen batch 0.712-0.717 -> 0.672-0.688 ms against
// the persistent walk (the grid 0.715-0.722); one 16k prompt 0.947-0.956 -> 0.951-0.962.
// The other BM 64 tiles keep their walks: their decode producer gathers with four warps (settle).
bool dynamic_measured(const FA4Config& c, int dp, int ctas_per_sm) {
  if (c.dtype == DType::e4m3 || c.kv_dtype || c.pack_gqa) return false;
  if (ctas_per_sm == 3) return true;
  if (c.BM == 64) return false;
  const bool snippet_d128 = snippet_mask(c.mask) && dp == 128 && c.depth == 128 && value_depth(c) == 128;
  const bool latent_prefill =
      c.depth == 192 && value_depth(c) == 128 && plain_softmax(c) && c.mask.kind == Mask::Kind::causal;
  const bool d96_window =
      c.depth == 96 && c.mask.kind == Mask::Kind::sliding_window && c.score_mod.kind == ScoreMod::Kind::identity;
  return snippet_d128 || latent_prefill || d96_window;
}

class Sm90a final : public BackendPolicy {
 public:
  Backend backend() const override { return Backend::hopper; }
  // 96 runs padded to 128; 512 splits O over two warpgroups; 576 is MLA's latent (with depth_v 512 only).
  std::vector<int> depths() const override { return {64, 96, 128, 192, 256, 512, 576}; }
  // DeepSeek-V3 / Kimi-K2 prefill (MLA without absorption): Q/K 128 + 64 rope columns, V 128.
  // Their decode (absorbed MLA): Q/K 512 latent + 64 rope columns, V the latent (abi.h v_in_k).
  std::vector<int> depths_v(int depth) const override {
    return depth == 192 ? std::vector<int>{128} : depth == 576 ? std::vector<int>{512} : std::vector<int>{};
  }
  bool v_in_k(const ResolvedConfig& rc) const override { return abi::v_in_k(rc.padded_depth, rc.padded_depth_v); }
  // MLA's latent over an e4m3 cache (its converters feed the 16-bit K ring that P V also reads).
  bool kv_fp8_depth_v(int depth, int depth_v) const override { return abi::v_in_k(depth, depth_v); }
  // FP8 at depth 64: 64-byte e4m3 rows (SW64 TMA boxes and wgmma descriptors) instead of padding to
  // 128, which doubled S = Q K^T and the K bytes (docs/PERF.md run 32). An e4m3 latent cache (576
  // wide: 9 rows of 64 bytes, not whole 128-byte ones) keeps 64-byte e4m3 rows too, so it is not
  // padded to 640 (fa4::swizzle_row_bytes).
  int swizzle_row_bytes(const FA4Config& c) const override {
    if (c.dtype == DType::e4m3 && c.depth <= 64) return 64;
    return c.kv_dtype && abi::v_in_k(c.depth, c.depth_v) ? 64 : 128;
  }

  Budget derive(FA4Config& c, int dp, const ArchInfo& a) const override {
    if (c.dtype == DType::e4m3) return derive_fp8(c, dp, a);
    if (c.kv_dtype) return derive_kv_fp8(c, dp, a);
    // BM = 64 rows per consumer warpgroup: 2 warpgroups (128), or FA3's 3 (192) at depth 64, where
    // 160 registers per consumer thread still hold the S and O fragments.
    // Packed-GQA decode: one 64-row warpgroup holds 64 / group queries of a KV head; a second
    // warpgroup would mostly compute padding (Sq of 1..16), so BM 64 halves the tensor work.
    // A V wider than 256 (head dim 512, MLA's latent) splits O over two warpgroups on one 64-row Q
    // tile (abi.h o_split), whose 512- or 576-wide Q and K stages leave room for BM 64 only.
    const int dpv = padded_depth_v(c, dp);  // V and O (FA4Config::depth_v)
    const bool split_o = wide_o(c, dp);
    const int bm_default = c.pack_gqa || split_o ? 64 : dp <= 64 ? 192 : 128;
    std::vector<int> bm_allowed = split_o    ? std::vector<int>{64}
                                  : dp <= 64 ? std::vector<int>{128, 192}
                                             : std::vector<int>{128};
    if ((c.pack_gqa || dp <= 128) && !split_o) bm_allowed.insert(bm_allowed.begin(), 64);
    c.BM = pick("BM", c.BM, bm_default, bm_allowed);
    auto smem_for = [&](int bn, int stages) {
      return abi::smem_bytes(abi::Family::k16, c.BM, bn, dp, dpv, stages, /*persistent=*/false, false);
    };
    // BN: every candidate whose fragments fit the consumers' registers and whose tiles fit shared
    // memory with the minimum 2 stages (d192: up to 112, d256: up to 80, FA3's tiles there).
    std::vector<int> bn_allowed;
    for (int bn : legal_bns(abi::Family::k16, c.BM, dp))
      if (abi::fragment_regs(dpv, bn) <= abi::fragment_budget(c.BM, false) && smem_for(bn, 2) <= a.max_smem)
        bn_allowed.push_back(bn);
    // Default: 128 (BN 176 at d128, FA3's non-causal tile, and 192 at d64 are opt-in), the largest
    // allowed below it at d192 / d256 (112 / 80; 96 / 64 with a heavier softmax); decode (BM 64)
    // streams K/V with BN 64: two CTAs per SM where both fit in shared memory keep twice the loads in
    // flight (head dim 512: 32, its one legal BN, abi.h bn_16bit).
    const int default_budget = abi::fragment_budget(c.BM, heavy_softmax(c));
    int bn_default = 0;
    for (int bn : bn_allowed)  // ascending: the largest that qualifies
      if (c.BM == 64 ? bn <= 64 : bn <= 128 && abi::fragment_regs(dpv, bn) <= default_budget) bn_default = bn;
    if (c.BN != 0 && std::find(bn_allowed.begin(), bn_allowed.end(), c.BN) == bn_allowed.end())
      refuse("BN", std::to_string(c.BN),
             fmt::format("at depth {} (padded {}) with BM {} on {} allowed: {} (S, P and O registers of a consumer "
                         "thread, and shared memory for Q + 2 K/V stages, {} bytes)",
                         c.depth, dp, c.BM, c.arch, fmt::join(bn_allowed, ", "), a.max_smem));
    c.BN = c.BN ? c.BN : bn_default;
    c.BK0 = pick("BK0", c.BK0, dp, {dp});
    c.num_qk_stages = pick("num_qk_stages", c.num_qk_stages, 1, {1});
    c.num_kv_stages = pick("num_kv_stages", c.num_kv_stages, 2, {2, 3, 4});
    const int smem = smem_for(c.BN, c.num_kv_stages);
    if (smem > a.max_smem)
      throw ConfigError(fmt::format("num_kv_stages: {} stages of BN={} at depth {} need {} bytes; {} allows {}",
                                    c.num_kv_stages, c.BN, c.depth, smem, c.arch, a.max_smem));
    return {abi::num_threads(c.BM, dpv), smem, ctas_per_sm(c, dp, smem, a)};
  }

  // FP8 (e4m3 Q, K, V; templates/sm90a: k32 wgmma, V transposed in shared memory by the producer
  // warpgroup): BN 128 (Vt is one block of 128 keys per row; 160 at depth 64 takes two), padded
  // depth 64 (64-byte rows) or 128
  // (depths 96, 128: at 256 the 16-bit O staging and three rings exceed 227 KB), one CTA per SM, the
  // grid walk (settle).
  Budget derive_fp8(FA4Config& c, int dp, const ArchInfo& a) const {
    if (dp != 64 && dp != 128)
      refuse("depth", fmt::format("{} with dtype e4m3", c.depth), fmt::format("64, 96 or 128 for FP8 on {}", c.arch));
    // Three consumer warpgroups (BM 192) for unmasked and causal attention: with e4m3 GEMMs at twice
    // the 16-bit rate a warpgroup's softmax outlasts its GEMMs, and a third warpgroup keeps the
    // tensor cores fed (docs/PERF.md run 36: d128 +4-15% over BM 128). Registers (abi.h): 152
    // per consumer at depth 64; 160 at padded depth 128, without the intra-warpgroup overlap (settle).
    // A score-mod or a per-element mask spills there (d64 causal + softcap, window + softcap: 16 B;
    // d128 softcap 16 B, causal + softcap 76 B), so those keep BM 128.
    const bool plain = plain_softmax(c);
    const std::vector<int> bm_allowed = c.pack_gqa ? std::vector<int>{64, 128} : std::vector<int>{128, 192};
    c.BM = pick("BM", c.BM, c.pack_gqa ? 64 : plain ? 192 : 128, bm_allowed);
    // BN 160 (FA3's FP8 d64 tile, 192 x 160) for unmasked attention at depth 64: S 80 + P 20 + O 32
    // per thread with the overlap, the consumers at 160 registers (abi.h). docs/PERF.md run 47
    // (5), H200: unmasked +0.5-4.6% over BN 128 (without the ping-pong turns); causal -3.1..+1.3%, so
    // BN 128 there. FA3's d128 tile (128 x 224) and narrower ones were slower (run 47 (1), (3)).
    const bool bn160_ok = abi::bn_fp8(160, c.BM, dp);
    const int bn_default = bn160_ok && plain && c.mask.kind == Mask::Kind::none ? 160 : 128;
    c.BN = pick("BN", c.BN, bn_default, legal_bns(abi::Family::kFp8, c.BM, dp));
    c.BK0 = pick("BK0", c.BK0, dp, {dp});
    c.num_qk_stages = pick("num_qk_stages", c.num_qk_stages, 1, {1});
    c.num_kv_stages = pick("num_kv_stages", c.num_kv_stages, 2, {2, 3, 4});
    // Q regions sized for 16-bit O staging; K and V rings of 1-byte elements; the transposed V ring
    // in whole blocks of 128 keys.
    const int smem =
        abi::smem_bytes(abi::Family::kFp8, c.BM, c.BN, dp, dp, c.num_kv_stages, /*persistent=*/false, false);
    if (smem > a.max_smem)
      throw ConfigError(fmt::format("num_kv_stages: {} stages of BN={} at depth {} (e4m3) need {} bytes; {} allows {}",
                                    c.num_kv_stages, c.BN, c.depth, smem, c.arch, a.max_smem));
    return {abi::num_threads(c.BM, dp), smem, 1};
  }

  // FP8 KV cache (e4m3 K and V under a 16-bit Q; templates/sm90a: the producer warpgroup's warps 1-3
  // convert each e4m3 K / V stage into the 16-bit stage the consumers read, so the consumers run the
  // 16-bit kernel unchanged). Padded depth 128 (depths 64, 96, 128: e4m3 rows of one 128-byte
  // swizzle atom), BM as the 16-bit kernel (64 packed, else 128), BN 64 for decode (two CTAs per SM
  // fit) and 128 for prefill, the grid walk (settle). Shared memory: Q, the 16-bit K and V rings
  // and the e4m3 rings TMA fills.
  // MLA's latent (depth 576, depth_v 512: abi.h v_in_k) over an e4m3 cache: O split over two
  // warpgroups on one 64-row Q tile as the 16-bit latent kernel, BN 32 (the 16-bit and e4m3 K rings
  // of two stages beside the 72 KiB Q tile; at BN 64 the 16-bit ring alone takes 144 KiB), no V ring.
  Budget derive_kv_fp8(FA4Config& c, int dp, const ArchInfo& a) const {
    const int dpv = padded_depth_v(c, dp);
    const bool latent = abi::v_in_k(dp, dpv);
    if (dp != 128 && !latent)
      refuse("depth", fmt::format("{} with kv_dtype e4m3", c.depth),
             fmt::format("64, 96 or 128 (or MLA's 576 with depth_v 512) for an FP8 KV cache on {}", c.arch));
    c.BM = pick("BM", c.BM, c.pack_gqa || latent ? 64 : 128,
                latent       ? std::vector<int>{64}
                : c.pack_gqa ? std::vector<int>{64, 128}
                             : std::vector<int>{128});
    // The consumers run at 224 registers here (the converting producer takes 56): per-element masks
    // and position-dependent score-mods spill at BN 128 (d96 sliding window + softcap: 4 B), so BN 64.
    const int bn_default = latent ? 32 : c.BM == 64 || heavy_softmax(c) ? 64 : 128;
    c.BN = pick("BN", c.BN, bn_default, legal_bns(abi::Family::kKvFp8, c.BM, dp));
    c.BK0 = pick("BK0", c.BK0, dp, {dp});
    c.num_qk_stages = pick("num_qk_stages", c.num_qk_stages, 1, {1});
    c.num_kv_stages = pick("num_kv_stages", c.num_kv_stages, 2, {2, 3, 4});
    const int smem =
        abi::smem_bytes(abi::Family::kKvFp8, c.BM, c.BN, dp, dpv, c.num_kv_stages, /*persistent=*/false, false);
    if (smem > a.max_smem)
      throw ConfigError(
          fmt::format("num_kv_stages: {} stages of BN={} at depth {} (kv_dtype e4m3) need {} bytes; {} allows {}",
                      c.num_kv_stages, c.BN, c.depth, smem, c.arch, a.max_smem));
    return {abi::num_threads(c.BM, dpv), smem, ctas_per_sm(c, dp, smem, a)};
  }

  static bool fp8_three_wgs(const FA4Config& c, int dp) { return c.dtype == DType::e4m3 && c.BM == 192 && dp == 128; }

  // One consumer warpgroup's 64 rows.
  int q_box_rows(const FA4Config&) const override { return 64; }

  Tuning default_tuning(const FA4Config& c, int dp, const Budget& b) const override {
    Tuning t;
    // Persistent CTAs (one per SM walking the tiles; masked: heaviest first) for unmasked and
    // causal attention without a score-mod at padded depth <= 128. docs/PERF.md run 15, per call:
    // unmasked +1-4% over the grid with the split tail (d64 +4%), causal d64 +6%, causal d128 S2048
    // +2%, longer causal d128 rows within the noise. Elsewhere the grid: packed-GQA decode runs two
    // CTAs per SM, and other masks and score-mods were not measured (some spill persistent: d64
    // softcap).
    // FP8 (e4m3) too: its V transposers walk the same tiles (docs/PERF.md run 38), and so do an
    // FP8 KV cache's converters (run 47, H200: prefill over an e4m3 cache +1-8.5% against the grid;
    // packed-GQA decode keeps the grid's two CTAs per SM). Deeper heads (d192, d256) take
    // it for causal attention: d256 causal +9-10% (not profiled: presumably the next tile's K/V
    // loads now overlap the epilogue), unmasked d256 within the noise (docs/PERF.md run 40).
    const bool plain = plain_softmax(c);
    const bool deep_ok = dp <= 128 || c.mask.kind == Mask::Kind::causal;
    // O split over warpgroups (V 512, abi.h o_split): the grid walk here; head dim 512 walks
    // persistently with alternating S (below).
    // The 64-row tile (two CTAs per SM, each walking persistently) at head dim 64 under a sliding
    // window (BackendPolicy::launch_bm's small-window tile): gpt-oss's window of 128 keys 16-22%
    // faster than the grid, whose CTAs each ran three KV tiles between a prologue and an epilogue
    // (H200, `fa4jit bench`, docs/PERF.md run 89: 1 x 16k 64/8 0.459 -> 0.357 ms, 1 x 2k 0.0614 ->
    // 0.0493; 16/2 0.1227 -> 0.0956, 0.0180 -> 0.0152). Decode's 64-row tile keeps the grid. At
    // three CTAs per SM (ctas_per_sm, run 92) it claims its tiles instead (dynamic_measured, run 94).
    const bool bm_ok = c.BM != 64 || (c.depth == 64 && c.mask.kind == Mask::Kind::sliding_window);
    t.persistent = !c.pack_gqa && bm_ok && !wide_o(c, dp) && deep_ok && (plain || persistent_measured(c)) ? 1 : 0;
    if (dynamic_measured(c, dp, b.ctas_per_sm)) t.persistent = 3;
    // Per-warpgroup P V spans (consumer.cuh, WgKeySpan) for causal attention without a score-mod
    // at kBM 192 (d64), where a warpgroup sees none or half of up to two tiles per Q tile.
    // docs/PERF.md run 17 (H200, ABBA): d64 causal +3%; d128 causal (kBM 128, only the first
    // warpgroup's half tile to gain) -5% at S2048, so off there. With a window ptxas serializes every
    // wgmma (C7515) and causal+softcap d128 spills 12 B.
    t.wg_spans =
        c.BM == 192 && c.mask.kind == Mask::Kind::causal && c.score_mod.kind == ScoreMod::Kind::identity ? 1 : 0;
    // MUFU keeps up with the tensor cores here: FA4's exp2 split (sm100a) measured 8-13% slower
    // (docs/PERF.md), so every exp2 stays on MUFU.
    t.exp2_emulate_every = 0;
    // O split over two warpgroups (MLA's latent): S, softmax and P V one tile at a time, so each K/V
    // stage is released a GEMM earlier (H200, 3 decode shapes, 2 rounds each: as fast or up to 12%
    // faster than the overlap, separate processes; docs/PERF.md run 59).
    if (wide_o(c, dp)) t.intra_wg_overlap = 0;
    // Head dim 512 (V its own tensor) without packed GQA: the two warpgroups take turns computing S
    // (alternate_s), so one's S = Q K^T and softmax run under the other's P V. H200, fa4jit bench, 3
    // passes (docs/PERF.md run 86): prefill 1x2k to 1x16k causal, non-causal, softcap, chunked, and
    // unpacked decode 7-14% faster; packed decode (memory-bound) 0-0.5% slower, and MLA's latent
    // (V is K's prefix) 12-30% slower (Sq 1 and 4, 16 and 128 heads): off there. Never with an e4m3
    // cache or a snippet mask (alternate_s_runs).
    const bool latent = abi::v_in_k(dp, padded_depth_v(c, dp));  // MLA's: V is K's first 512 columns
    if (alternate_s_runs(c, dp) && !latent && !c.pack_gqa) t.alternate_s = 1;
    // ... and walks its tiles persistently (one CTA per SM, heaviest first; the warpgroups' turns
    // carry from unit to unit) for plain causal or unmasked attention: each CTA's Q load and first S
    // then follow the previous tile's KV loop instead of a CTA launch (measured: docs/PERF.md run 119).
    if (t.alternate_s == 1 && plain) t.persistent = 1;
    // MLA's 16-bit latent: K stages in 3 parts (S = Q K^T starts on a stage's first third). H200,
    // one process, interleaved rounds (docs/PERF.md run 111): 3 parts 0.4-1.4% faster on 9 decode
    // shapes (16 and 128 heads, Sq 1 and 4, pages 16 and 64), 9 parts 0-2.8% slower. 0 here: settle
    // takes 3, or 1 where alternate_s was set (the parts run under one S warpgroup).
    if (latent && !c.kv_dtype) t.k_parts = 0;
    // FP8 BM 192 at padded depth 128: S (64 floats) and O (64) leave no room for P(n-1) beside
    // S(n) in 160 registers (the overlap spills 144 B and serializes wgmma), so one step at a time;
    // the three warpgroups take turns around their softmax (pingpong 2), not their GEMM issue:
    // +2-7% over no turns (docs/PERF.md run 48 (7)), which was +1-2.5% over GEMM turns (run 36).
    if (fp8_three_wgs(c, dp)) {
      t.intra_wg_overlap = 0;
      t.pingpong = 2;
    }
    // FP8 at depth 64 over BN 160: without the ping-pong turns too (+0-1.9% over them, run 47 (5)).
    if (c.dtype == DType::e4m3 && c.BN == 160) t.pingpong = 0;
    return t;
  }

  void settle(Tuning& t, Budget& b, const FA4Config& c, int dp, const ArchInfo& a) const override {
    // The dynamic walk hands each unit to the consumers with Q (templates/common/persistent_walk.h
    // DynamicTiles); FP8's transposers and an FP8 KV cache's converters walk the tiles on their own,
    // and packed GQA runs stream-K or the grid.
    // The decode producer (one consumer warpgroup, 56 registers: the 64-row tile at one or two CTAs
    // per SM) gathers pages with all four warps (templates/sm90a/gather.cuh kGatherWarps), and the
    // dynamic walk's claim is shared within one warp; the three-CTA tile's producer warp gathers alone.
    const int wgs = abi::consumer_wgs(c.BM, padded_depth_v(c, dp));
    const bool four_gatherers = abi::decode_producer(family(c), wgs, b.ctas_per_sm, dp, c.BN, t.persistent != 0);
    if (t.persistent == 3 && (c.dtype == DType::e4m3 || c.kv_dtype || c.pack_gqa || four_gatherers))
      throw ConfigError(fmt::format(
          "tune: persistent=3: the dynamic walk runs 16-bit Q, K and V without packed GQA at BM 128 or 192, or "
          "BM 64 at three CTAs per SM, on {} (this config: {})",
          c.arch,
          c.dtype == DType::e4m3 ? "dtype e4m3"
          : c.kv_dtype           ? "kv_dtype e4m3"
          : c.pack_gqa           ? "pack_gqa"
                                 : "BM 64 at one or two CTAs per SM"));
    // The converters walk whole tiles (grid or persistent); stream-K, which packed GQA turns a
    // persistent walk into, cuts tiles into segments.
    if (c.kv_dtype && (t.persistent == 2 || (t.persistent == 1 && c.pack_gqa)))
      throw ConfigError(
          fmt::format("tune: persistent={}: FP8 KV cache (kv_dtype e4m3) kernels on {} run the grid (0) or "
                      "persistent (1) walk, without packed GQA for the persistent one",
                      t.persistent, c.arch));
    if (c.dtype == DType::e4m3) {
      // The transposers walk whole tiles (grid or persistent); stream-K, which packed GQA turns a
      // persistent walk into, cuts tiles into segments.
      if (t.persistent == 2 || (t.persistent == 1 && c.pack_gqa))
        throw ConfigError(
            fmt::format("tune: persistent={}: FP8 (e4m3) kernels on {} run the grid (0) or persistent (1) "
                        "walk, without packed GQA for the persistent one",
                        t.persistent, c.arch));
      if (fp8_three_wgs(c, dp) && t.intra_wg_overlap != 0)
        throw ConfigError(fmt::format(
            "tune: intra_wg_overlap={}: FP8 (e4m3) at BM 192 and padded depth 128 on {} runs without it (0): "
            "its registers do not hold S and P of two tiles; set BM 128 for the overlapped schedule",
            t.intra_wg_overlap, c.arch));
    }
    // Turns: 0 none, 1 around the GEMM issue (FA3's ping-pong), 2 around the softmax, which the
    // simple schedule alone has (templates/sm90a/consumer.cuh kv_mainloop).
    if (t.pingpong < 0 || t.pingpong > 2)
      throw ConfigError(
          fmt::format("tune: pingpong={}: 0 (no turns), 1 (around the GEMMs) or 2 (around the softmax)", t.pingpong));
    if (t.pingpong == 2 && t.intra_wg_overlap != 0)
      throw ConfigError(
          fmt::format("tune: pingpong=2: turns around the softmax run with the simple schedule only "
                      "(intra_wg_overlap=0); this kernel has intra_wg_overlap={}",
                      t.intra_wg_overlap));
    // A group packed in slices (pack_heads < group): the persistent walks count one packed CTA per KV
    // head (templates/common/persistent_walk.h), so these run the grid walk.
    if (c.pack_gqa && pack_heads(c, q_box_rows(c)) < c.group && t.persistent != 0)
      throw ConfigError(
          fmt::format("tune: persistent={}: packed GQA with group {} (packed in slices of {} heads) "
                      "runs the grid walk (0) on {}",
                      t.persistent, c.group, pack_heads(c, q_box_rows(c)), c.arch));
    // The persistent walk of an O split carries its warpgroups' turns from unit to unit (consumer.cuh
    // alternate_mainloop); the S warpgroup and partner of the other O split do not.
    if (wide_o(c, dp) && t.persistent != 0 && (t.persistent != 1 || t.alternate_s == 0 || c.pack_gqa))
      throw ConfigError(
          fmt::format("tune: persistent={}: a V of {} columns (O split over two warpgroups) runs the "
                      "grid walk (0), or the persistent one (1, the default for plain causal or unmasked head dim "
                      "512) with alternating S (alternate_s=1) and without packed GQA, on {}",
                      t.persistent, value_depth(c), c.arch));
    if (t.alternate_s != 0 && !alternate_s_runs(c, dp))
      throw ConfigError(fmt::format(
          "tune: alternate_s={}: warpgroups take turns computing S where O is split over two (a V wider than "
          "256 columns) over 16-bit K/V under a built-in mask on {}; this kernel: V {} columns{}{}",
          t.alternate_s, c.arch, value_depth(c), c.kv_dtype ? ", an e4m3 cache" : "",
          snippet_mask(c.mask) ? ", a snippet mask" : ""));
    // MLA's K stages in parts (templates/sm90a/shape.cuh kKParts): whole 64-column blocks of the
    // 576-wide 16-bit latent, read by one S warpgroup.
    const bool latent = abi::v_in_k(dp, padded_depth_v(c, dp));
    if (t.k_parts == 0) t.k_parts = t.alternate_s != 0 ? 1 : 3;  // default_tuning's "derived"
    if (t.k_parts != 1 && (9 % t.k_parts != 0 || !latent || c.kv_dtype || t.alternate_s != 0))
      throw ConfigError(
          fmt::format("tune: k_parts={}: K stages land in 1, 3 or 9 parts for MLA's 16-bit latent (depth 576, V 512, "
                      "alternate_s=0) on {}; this kernel: depth {}, V {}{}{}",
                      t.k_parts, c.arch, c.depth, value_depth(c), c.kv_dtype ? ", an e4m3 cache" : "",
                      t.alternate_s != 0 ? ", alternate_s=1" : ""));
    if (c.dtype == DType::e4m3 || c.kv_dtype) t.wg_spans = 0;
    if (!c.kv_dtype) {  // an FP8 KV cache's kernel stages O in the Q region, and runs no stream-K
      if (c.pack_gqa && t.persistent == 1) t.persistent = 2;  // the LPT walker visits q heads, not packed groups
      // Stream-K launches one CTA per SM, so the kernel takes the whole SM's registers.
      if (t.persistent == 2) b.ctas_per_sm = 1;
    }
    // The walk's shared memory (derive sized the grid walk's): persistent CTAs stage O in a region
    // of their own where it fits, so the next tile's Q load overlaps the epilogue (abi.h own_o;
    // templates/sm90a/smem_layout.cuh SmemLayout::kOwnO takes it when kSmemBytes holds it), and
    // those at padded depth above 128 gather no pages (abi.h gathers: no page ring).
    const abi::Family f = family(c);
    const int dpv = padded_depth_v(c, dp);
    const bool persistent = t.persistent != 0;
    // Two CTAs per SM (ctas_per_sm) keep two such regions in the SM's shared memory.
    b.smem = abi::smem_bytes(
        f, c.BM, c.BN, dp, dpv, c.num_kv_stages, persistent,
        abi::own_o(f, persistent, c.BM, c.BN, dp, dpv, c.num_kv_stages, smem_per_cta(b.ctas_per_sm, a)));
  }

  bool uses_tma() const override { return true; }
  bool lpt_order() const override { return true; }
  // The CTA's work is built at kernel entry by every thread (templates/sm90a/kernel.cuh).
  bool lists_varlen_tiles() const override { return true; }
  // The built-in causal mask, unpacked, at BM 192 (measured +4-9%). At BM 128 = BN a partial tile
  // costs the same KV tiles at either end, and the shifted diagonal then crosses two KV tiles per
  // Q tile instead of one: 1.5-2% slower at S 4000 (docs/PERF.md run 41 (6)).
  bool bottom_q_tiles(const FA4Config& c) const override {
    return c.mask.kind == Mask::Kind::causal && !c.pack_gqa && c.BM == 192;
  }

  // 'a' targets run on their own family only.
  bool runs_on(const ResolvedConfig&, int sm) const override { return sm == 90; }

  // Pages no TMA box takes (gcd(page_size, BN) not a multiple of 8 rows: page sizes 1, 2, 4, 12,
  // ...) are gathered row by row (abi.h gathers; templates/sm90a/gather.cuh GatherTile).
  int paged_kv_box_rows(const ResolvedConfig& rc, long long page_size) const override {
    const bool persistent = rc.tuning.persistent != 0;
    if (abi::gathers(family(rc.config), persistent, rc.padded_depth))
      return tma_paged_kv_box_rows(rc, page_size, nullptr);
    return tma_paged_kv_box_rows(
        rc, page_size,
        rc.config.dtype == DType::e4m3
            ? "FP8 (e4m3) kernels load no other pages"
            : "persistent kernels at MLA's head dim 576 load no other pages (this kernel's walk: tune persistent=0 "
              "runs the grid walk, which gathers them)");
  }
  // Q in registers for S = Q K^T (templates/sm90a/consumer.cuh QFragments): the 16-bit kernels at
  // kBM 128 and padded depth 128 with the overlap, without a score-mod, where it was measured faster:
  // depth 96 and causal (unmasked or causal), and a sliding window at depth 128. docs/PERF.md runs
  // 49 (4), 50 (H200, ABBA): 16x16x2048 causal +0.9-2.2% per call (6 passes), d96 +0.5-2.2%; unmasked
  // d128 0.99-1.00, so not there. Run 107 (`fa4jit bench`, 1 x 16k, 6 passes): window 4095 at 32/8
  // heads (Mistral) 0.977-0.992x the time, window 1023 (Gemma 3) 0.96-1.03x; d96 under Phi-3's 2047
  // 0.96-1.04x and custom snippet masks (document, 1024-token blocks) 0.99-1.00x, so not those.
  bool q_in_registers(const ResolvedConfig& rc) const override {
    const FA4Config& c = rc.config;
    const bool window128 = c.mask.kind == Mask::Kind::sliding_window && !c.mask.prefix && c.depth == 128 &&
                           c.score_mod.kind == ScoreMod::Kind::identity;
    return c.dtype != DType::e4m3 && !c.kv_dtype && rc.padded_depth == 128 && c.BM == 128 &&
           rc.tuning.intra_wg_overlap != 0 &&
           ((plain_softmax(c) && (c.depth <= 96 || c.mask.kind == Mask::Kind::causal)) || window128);
  }
  // Tiles beside the defaults, for 16-bit Q, K, V with V as wide, where they were measured and are
  // GPU-tested. Packed, a group of at most 64: the unpacked kernel's prefill tile (two consumer
  // warpgroups at head dims 96 and 128, three at 64) over more than 128 packed rows, whose decode
  // tile ran prefill rows 1.1-1.25x slower at d128 (docs/PERF.md run 81) and 1.37-1.46x at d64
  // (gpt-oss's varlen batch, run 89: 64/8 heads 1.711 -> 1.246 ms at BM 192, 1.439 at BM 128; 16/2
  // 0.433 -> 0.296), except a continuous-batching step (uneven, a mean of at most 512 queries), whose
  // decode rows stream their KV caches faster at the decode tile (the step 1-14% slower at BM 128,
  // run 80). Unpacked, a group that never packs: the decode tile (one warpgroup, BN 64, two CTAs per
  // SM) for at most 64 queries, MHA decode 3-10% faster (run 82), and at head dim 128 for a
  // continuous-batching step (serving_step) without a bounded window, whose decode rows then split
  // as long poles and run two CTAs per SM. H200, `fa4jit bench`, d128 causal, 2 passes (docs/PERF.md
  // run 100): Command R 64/64, the zoo's step (48 decode rows over 4.1k-8.7k keys, two chunks of
  // 2048), 3.33-3.36 ms -> 2.48 (BM 128 on the grid walk 3.03, the dynamic walk 3.00); 32/32 heads
  // 1.69-1.71 -> 1.24, and 16 rows + 4 chunks (a mean of 410 queries) 0.84-0.85 -> 0.61-0.65; the
  // uneven prefill batch stays at BM 128 (2.18 ms, BM 64 2.50). Under Phi-3's 2047-key window (d96)
  // the step ran slower at BM 64 (0.54-0.56 -> 0.62 ms): its decode rows' bands are no long poles.
  // A packable group left unpacked keeps the default, the kernel `prewarm --model` builds for it.
  // At head dim 64 under a window of at most kSmallWindowKeys keys per query (gpt-oss: 128) the
  // decode tile, packed or not, whose 64-key tiles over 64 queries cover the band with fewer wasted
  // keys than BM 192's (three tiles per 64 queries against five per 192 at 128 keys). H200, `fa4jit
  // bench`, 1 x 16k, 64/8 heads, sinks (run 88), against BM 192 with the persistent walk: windows of
  // 128 keys 0.475 -> 0.460 ms, 256 0.777 -> 0.567, 512 0.894 -> 0.765, 1024 1.122 -> 1.150 (so not
  // there); at d128 as fast at 128 keys and slower from 256. Packed, the varlen batch under 128 keys:
  // BM 64 0.458 ms, BM 128 0.640 (run 89).
  // Head dim 256 packs at the prefill tile too (BM 128 over its one CTA per SM), where the default
  // packed tile (BM 64) ran the zoo's uneven varlen batch 1.35-1.44x slower. H200, `fa4jit bench`,
  // 2 passes (docs/PERF.md run 97): Gemma 3 4B 8/4 heads under its 1024-key window 0.276 -> 0.192
  // ms (unpacked 0.205), causal 0.58 -> 0.41-0.43 (unpacked the same); Gemma 2 9B 16/8 heads, window
  // 4096 with softcap, 1.24 -> 0.88-0.91 (unpacked 0.99). Head dim 192 (V as wide) was not measured.
  static constexpr int kDecodeBm = 64, kPrefillBm = 128, kPrefillBm64 = 192, kSmallWindowKeys = 512,
                       kPackedPromptWindowKeys = 1024;
  static bool sixteen_bit_qkv(const FA4Config& c) {
    return (c.dtype == DType::bf16 || c.dtype == DType::fp16) && !c.kv_dtype && value_depth(c) == c.depth;
  }
  static bool small_window(const FA4Config& c, const LaunchFacts& f) {
    return c.depth <= 64 && c.mask.kind == Mask::Kind::sliding_window && f.window_keys > 0 &&
           f.window_keys <= kSmallWindowKeys;
  }
  int launch_bm(const FA4Config& c, const LaunchFacts& f, bool never_packs) const override {
    if (!sixteen_bit_qkv(c) || (c.depth > 128 && c.depth != 256)) return 0;
    const bool small_window = Sm90a::small_window(c, f);
    if (!c.pack_gqa) {
      if (c.depth > 128) return 0;
      if (c.depth <= 64) return small_window ? kDecodeBm : 0;
      const bool mha_step = serving_step(f) && c.depth == 128 && f.window_keys == 0;
      return never_packs && (f.max_seqlen_q <= 64 || mha_step) ? kDecodeBm : 0;
    }
    if (c.group > 64 || short_rows(f) || small_window || serving_step(f)) return 0;
    return c.depth <= 64 ? kPrefillBm64 : kPrefillBm;
  }
  // A varlen prefill batch (a mean of more than 512 queries: not a continuous-batching step, whose
  // decode rows would fill one 64-row tile each) under a small window runs unpacked, at the tile's
  // three CTAs per SM (ctas_per_sm), which packed (two: its page-1 decode rows) it does not get.
  // H200, `fa4jit bench`, gpt-oss d64 window 128 + sinks, the zoo's uneven batch (7000 to 100
  // queries; docs/PERF.md run 93): packed 64/8 heads 0.460 ms, unpacked 0.399; 16/2 0.122 -> 0.110.
  // Not by score-mod, which the C API's choice (fa4jit_choose_kernel2) does not know, as launch_bm's
  // unpacked small-window tile: with one (two CTAs per SM) about 4% slower than packed (run 90's
  // unpacked 0.479 ms), no model having one at head dim 64.
  // And a dense launch (one prompt) at head dim 256 under a window of at most kPackedPromptWindowKeys
  // keys packs, at the prefill tile (launch_bm), where K and V are read once per KV head: H200,
  // `fa4jit bench`, Gemma 3 4B (8/4 heads, its 1024-key window), 2 passes (docs/PERF.md run 98): 1 x
  // 16k 0.241 -> 0.227 ms, 1 x 2k 0.0314 -> 0.0301 (the zoo against FA4, back to back: 0.883 ->
  // 0.941, 0.944 -> 0.979). Packed was slower or level elsewhere, 1 x 16k: d128 under Gemma 3 27B's
  // window (32/16) 0.537 -> 0.562 ms, under Mistral's 4096 keys 1.66-1.72 -> 1.70; causal d64
  // (16/2, sinks) and d128 (4/1, 14/2) 0-6% slower. d256 under a wider window (Gemma 2's 4096) was
  // not measured.
  std::optional<bool> packs(const FA4Config& c, const LaunchFacts& f) const override {
    if (!sixteen_bit_qkv(c)) return std::nullopt;
    if (small_window(c, f) && prefill_batch(f)) return false;
    if (c.depth == 256 && f.varlen_batch == 0 && f.window_keys > 0 && f.window_keys <= kPackedPromptWindowKeys &&
        !short_rows(f))
      return true;
    return std::nullopt;
  }
};

}  // namespace

const BackendPolicy& sm90a_policy() {
  static const Sm90a p;
  return p;
}

}  // namespace jit::detail
