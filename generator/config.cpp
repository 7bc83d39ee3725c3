// FA4Config: factories, per-arch derivation from the hardware budgets, validation.
#include <algorithm>
#include <cstdlib>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "fa4jit/config.hpp"
#include "fa4jit/errors.hpp"
#include "generator/arch.hpp"
#include "generator/config_check.hpp"

namespace jit {

const char* to_string(DType t) { return t == DType::bf16 ? "bf16" : "fp16"; }

DType dtype_from_string(const std::string& s) {
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  if (s == "fp16" || s == "float16" || s == "half") return DType::fp16;
  throw ConfigError(fmt::format("dtype: '{}' is not supported; allowed: bf16, fp16", s));
}

const char* to_string(Backend b) {
  switch (b) {
    case Backend::portable: return "sm80";
    case Backend::hopper: return "sm90a";
    case Backend::blackwell: return "sm100a";
  }
  return "?";
}

Mask Mask::causal(bool top_left) { return Mask{Kind::causal, top_left, {}, {}, {}}; }
Mask Mask::sliding_window(bool top_left) { return Mask{Kind::sliding_window, top_left, {}, {}, {}}; }
Mask Mask::chunked() { return Mask{Kind::chunked, false, {}, {}, {}}; }
Mask Mask::custom(std::string body, std::string block_body) {
  return Mask{Kind::custom, false, std::move(body), {}, std::move(block_body)};
}
Mask Mask::all_of(std::vector<Mask> masks) { return Mask{Kind::all_of, false, {}, std::move(masks), {}}; }
Mask Mask::any_of(std::vector<Mask> masks) { return Mask{Kind::any_of, false, {}, std::move(masks), {}}; }

ScoreMod ScoreMod::softcap() { return ScoreMod{Kind::softcap, {}}; }
ScoreMod ScoreMod::alibi() { return ScoreMod{Kind::alibi, {}}; }
ScoreMod ScoreMod::custom(std::string body) { return ScoreMod{Kind::custom, std::move(body)}; }

namespace {

[[noreturn]] void refuse(const char* field, const std::string& value, const std::string& allowed) {
  throw ConfigError(fmt::format("{}: {} is not allowed; {}", field, value, allowed));
}

// Explicit value, validated against `allowed`, or the derived default.
int pick(const char* field, int explicit_value, int derived, const std::vector<int>& allowed) {
  if (explicit_value == 0) return derived;
  if (std::find(allowed.begin(), allowed.end(), explicit_value) == allowed.end())
    refuse(field, std::to_string(explicit_value), fmt::format("allowed: {}", fmt::join(allowed, ", ")));
  return explicit_value;
}

struct Budget {
  int threads;
  int smem;
  int ctas_per_sm = 1;
};

Budget derive_portable(FA4Config& c, const ArchInfo& a) {
  const int dp = c.padded_depth;
  c.BM = pick("BM", c.BM, 128, {64, 128});
  c.BN = pick("BN", c.BN, dp <= 64 ? 128 : 64, {32, 64, 128});
  c.BK0 = pick("BK0", c.BK0, dp, {dp});
  c.BK1 = pick("BK1", c.BK1, c.BN, {c.BN});
  c.num_qk_stages = pick("num_qk_stages", c.num_qk_stages, 1, {1});
  c.num_mma_stages = pick("num_mma_stages", c.num_mma_stages, 1, {1});
  c.num_kv_stages = pick("num_kv_stages", c.num_kv_stages, 2, {1, 2});
  const int smem = 2 * (c.BM * dp + 2 * c.num_kv_stages * c.BN * dp);
  if (smem > a.max_smem)
    throw ConfigError(fmt::format(
        "BN/BM/num_kv_stages: BM={} BN={} num_kv_stages={} at depth {} need {} bytes of shared memory; {} allows {}",
        c.BM, c.BN, c.num_kv_stages, c.depth, smem, c.arch, a.max_smem));
  return {128, smem};
}

// sm90a BN candidates: the wgmma N values generated for S = Q K^T (dev/gen_mma.py
// NS, minus 256, whose S fragment alone is 128 registers). Multiples of 16 (one k16 step of P V).
constexpr int kHopperBN[] = {64, 80, 96, 112, 128, 176, 192};

// Per consumer thread the overlapped schedule keeps O (Dp/2 floats), S (BN/2) and packed P (BN/4)
// live at once. Largest totals ptxas fits with 0 spills: 196 at 240 registers (d128 BN 176) and 128 at
// 160 (BM 192: d64 BN 128; BN 192 there needs 176 and spills 400 B). Indices, row state, addresses
// and the mask take the rest. Per-element masks (all but none and causal) and position-dependent
// score-mods (ALiBi, snippets) keep ~20 more registers live in the softmax: 176 for their defaults
// (d192 BN 112 and d256 BN 80 spill 8-180 B with them; FA3 too lowers BN for local masks there).
int hopper_fragment_regs(int dp, int bn) { return dp / 2 + bn / 2 + bn / 4; }
int hopper_fragment_budget(int bm, bool heavy_softmax = false) { return bm == 192 ? 128 : heavy_softmax ? 176 : 196; }

Budget derive_hopper(FA4Config& c, const ArchInfo& a) {
  const int dp = c.padded_depth;
  // BM = 64 rows per consumer warpgroup: 2 warpgroups (128), or FA3's 3 (192) at depth 64, where
  // 160 registers per consumer thread still hold the S and O fragments.
  // Packed-GQA decode: one 64-row warpgroup holds 64 / group queries of a KV head; a second
  // warpgroup would mostly compute padding (Sq of 1..16), so BM 64 halves the tensor work.
  const int bm_default = c.pack_gqa ? 64 : dp <= 64 ? 192 : 128;
  std::vector<int> bm_allowed = dp <= 64 ? std::vector<int>{128, 192} : std::vector<int>{128};
  if (c.pack_gqa) bm_allowed.insert(bm_allowed.begin(), 64);
  c.BM = pick("BM", c.BM, bm_default, bm_allowed);
  auto smem_for = [&](int bn, int stages) { return 2 * (c.BM * dp + 2 * stages * bn * dp) + 1024; };
  // BN: every candidate whose fragments fit the consumers' registers and whose tiles fit shared
  // memory with the minimum 2 stages (d192: up to 112, d256: up to 80, FA3's tiles there).
  std::vector<int> bn_allowed;
  for (int bn : kHopperBN)
    if (hopper_fragment_regs(dp, bn) <= hopper_fragment_budget(c.BM) && smem_for(bn, 2) <= a.max_smem)
      bn_allowed.push_back(bn);
  // Default: 128 (BN 176 at d128, FA3's non-causal tile, and 192 at d64 are opt-in), the largest
  // allowed below it at d192 / d256 (112 / 80; 96 / 64 with a heavier softmax); decode (BM 64)
  // streams K/V with BN 64: two CTAs per SM where both fit in shared memory keep twice the loads in flight.
  const bool heavy_softmax = (c.mask.kind != Mask::Kind::none && c.mask.kind != Mask::Kind::causal) ||
                             c.score_mod.kind == ScoreMod::Kind::alibi || c.score_mod.kind == ScoreMod::Kind::custom;
  const int default_budget = hopper_fragment_budget(c.BM, heavy_softmax);
  int bn_default = 64;
  if (c.BM != 64)
    for (int bn : bn_allowed)
      if (bn <= 128 && hopper_fragment_regs(dp, bn) <= default_budget) bn_default = bn;
  if (c.BN != 0 && std::find(bn_allowed.begin(), bn_allowed.end(), c.BN) == bn_allowed.end())
    refuse("BN", std::to_string(c.BN),
           fmt::format("at depth {} (padded {}) with BM {} on {} allowed: {} (S, P and O registers of a consumer "
                       "thread, and shared memory for Q + 2 K/V stages, {} bytes)",
                       c.depth, dp, c.BM, c.arch, fmt::join(bn_allowed, ", "), a.max_smem));
  c.BN = c.BN ? c.BN : bn_default;
  c.BK0 = pick("BK0", c.BK0, dp, {dp});
  c.BK1 = pick("BK1", c.BK1, c.BN, {c.BN});
  c.num_qk_stages = pick("num_qk_stages", c.num_qk_stages, 1, {1});
  c.num_mma_stages = pick("num_mma_stages", c.num_mma_stages, 1, {1});
  c.num_kv_stages = pick("num_kv_stages", c.num_kv_stages, 2, {2, 3, 4});
  const int smem = smem_for(c.BN, c.num_kv_stages);
  if (smem > a.max_smem)
    throw ConfigError(fmt::format("num_kv_stages: {} stages of BN={} at depth {} need {} bytes; {} allows {}",
                                  c.num_kv_stages, c.BN, c.depth, smem, c.arch, a.max_smem));
  // Two CTAs per SM when both fit (each also takes 1 KiB of reserved shared memory per block):
  // decode (BM 64) at padded depth <= 128; deeper heads run one CTA per SM.
  const int ctas = c.BM == 64 && 2 * (smem + 1024) <= a.max_smem + 1024 ? 2 : 1;
  return {128 * (1 + c.BM / 64), smem, ctas};
}

// The seeds' FA4Config: TMEM holds S0, S1 (BN columns each) and O0, O1 (Dp each) in 512
// columns; shared memory holds Q (BM x Dp), the K and V rings, correction scalars, barriers.
Budget derive_blackwell(FA4Config& c, const ArchInfo& a) {
  const int dp = c.padded_depth;
  constexpr int kTmemColumns = 512;
  c.BM = pick("BM", c.BM, 256, {256});
  const int bn_max = std::min(256, (kTmemColumns / 2 - dp) / 16 * 16);
  if (c.BN != 0 && (c.BN % 16 != 0 || c.BN < 64 || 2 * c.BN + 2 * dp > kTmemColumns))
    refuse("BN", std::to_string(c.BN),
           fmt::format("need a multiple of 16, >= 64, with 2*BN + 2*padded_depth <= 512 TMEM columns (max {})", bn_max));
  c.BN = c.BN ? c.BN : bn_max;
  c.num_qk_stages = pick("num_qk_stages", c.num_qk_stages, dp >= 128 ? 2 : 1, {1, 2});
  c.BK0 = pick("BK0", c.BK0, dp / c.num_qk_stages, {dp / c.num_qk_stages});
  c.BK1 = pick("BK1", c.BK1, c.BN, {c.BN});
  c.num_mma_stages = pick("num_mma_stages", c.num_mma_stages, 1, {1});
  const int fixed = 2 * c.BM * dp + c.BM * 4 + 1024;
  const int per_stage = 2 * 2 * c.BN * dp;
  const int fit = (a.max_smem - fixed) / per_stage;
  if (c.num_kv_stages == 0) c.num_kv_stages = std::min(fit, 8);
  if (c.num_kv_stages < 2 || c.num_kv_stages > fit)
    throw ConfigError(fmt::format(
        "num_kv_stages: {} does not fit; BN={} at depth {} allows 2..{} stages in {} bytes of shared memory",
        c.num_kv_stages, c.BN, c.depth, fit, a.max_smem));
  return {512, fixed + c.num_kv_stages * per_stage};
}

Tuning derive_tuning(Backend b, const FA4Config& c) {
  Tuning t;
  // sm90a: persistent CTAs (one per SM walking the tiles; masked: heaviest first) for unmasked and
  // causal attention without a score-mod at padded depth <= 128. docs/PERF.md run 15, per call:
  // unmasked +1-4% over the grid with the split tail (d64 +4%), causal d64 +6%, causal d128 S2048
  // +2%, longer causal d128 rows within the noise. Elsewhere the grid: packed-GQA decode runs two
  // CTAs per SM, and deep heads, other masks and score-mods were not measured (some spill
  // persistent: d256 causal, d64 softcap).
  const bool plain = (c.mask.kind == Mask::Kind::none || c.mask.kind == Mask::Kind::causal) &&
                     c.score_mod.kind == ScoreMod::Kind::identity;
  t.persistent = b == Backend::hopper && !c.pack_gqa && c.padded_depth <= 128 && plain ? 1 : 0;
  // sm90a per-warpgroup P V spans (consumer.cuh, WgKeySpan) for causal attention without a
  // score-mod at kBM 192 (d64), where a warpgroup sees none or half of up to two tiles per Q tile.
  // docs/PERF.md run 17 (H200, ABBA): d64 causal +3%; d128 causal (kBM 128, only the first
  // warpgroup's half tile to gain) -5% at S2048, so off there. With a window ptxas serializes every
  // wgmma (C7515) and causal+softcap d128 spills 12 B.
  t.wg_spans = b == Backend::hopper && c.BM == 192 && c.mask.kind == Mask::Kind::causal &&
                       c.score_mod.kind == ScoreMod::Kind::identity
                   ? 1
                   : 0;
  // FA4 on Blackwell: MUFU did not scale with the tensor cores, so one exp2 pair in 4 goes to
  // the FMA pipe. On Hopper the same split measured 8-13% slower (docs/PERF.md), so none there.
  t.exp2_emulate_every = b == Backend::blackwell ? 4 : 0;
  return t;
}

// FA4JIT_TUNE="exp2_emulate_every=4,pingpong=0": tuning sweeps without a rebuild. The values
// land in the generated source, so the cache keys them like any other input.
void apply_tune_env(Tuning& t) {
  const char* env = std::getenv("FA4JIT_TUNE");
  if (!env || !*env) return;
  std::stringstream ss(env);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const auto eq = item.find('=');
    if (eq == std::string::npos) throw ConfigError(fmt::format("FA4JIT_TUNE: '{}' is not name=value", item));
    const std::string name = item.substr(0, eq);
    int value = 0;
    try {
      value = std::stoi(item.substr(eq + 1));
    } catch (const std::exception&) {
      throw ConfigError(fmt::format("FA4JIT_TUNE: '{}' needs an integer value", item));
    }
    if (name == "exp2_emulate_every") t.exp2_emulate_every = value;
    else if (name == "intra_wg_overlap") t.intra_wg_overlap = value;
    else if (name == "pingpong") t.pingpong = value;
    else if (name == "cross_tile") t.cross_tile = value;
    else if (name == "wg_spans") t.wg_spans = value;
    else if (name == "persistent") t.persistent = value;
    else throw ConfigError(fmt::format("FA4JIT_TUNE: unknown name '{}'; allowed: exp2_emulate_every, intra_wg_overlap, pingpong, cross_tile, wg_spans, persistent", name));
  }
}

}  // namespace

ResolvedConfig resolve(const FA4Config& input) {
  detail::check_structure(input);  // before the copy: bounds the mask tree every later walk recurses over
  FA4Config c = input;
  if (c.arch.empty()) refuse("arch", "empty", "set it (e.g. sm_90a) or call get_kernel, which uses the current GPU");
  const ArchInfo arch = parse_arch(c.arch);  // throws ConfigError for unknown archs

  if (!c.output_dtype) c.output_dtype = c.dtype;
  const std::vector<int> depths = supported_depths(arch.backend);
  if (std::find(depths.begin(), depths.end(), c.depth) == depths.end())
    refuse("depth", std::to_string(c.depth),
           fmt::format("the {} backend supports {}", to_string(arch.backend), fmt::join(depths, ", ")));
  const int dp_default = (c.depth + 63) / 64 * 64;
  c.padded_depth = pick("padded_depth", c.padded_depth, dp_default, {dp_default});
  c.swizzle_bytes = pick("swizzle_bytes", c.swizzle_bytes, 128, {128});
  if (c.num_q_heads > 0 && c.group > 0 && c.num_q_heads % c.group != 0)
    refuse("group", std::to_string(c.group), fmt::format("it must divide num_q_heads ({})", c.num_q_heads));
  if (c.pack_gqa && c.group <= 0)
    refuse("pack_gqa", "true with group = 0", "packing GQA heads needs the group (num_q_heads / num_kv_heads) set");

  Budget b{};
  switch (arch.backend) {
    case Backend::portable: b = derive_portable(c, arch); break;
    case Backend::hopper: b = derive_hopper(c, arch); break;
    case Backend::blackwell: b = derive_blackwell(c, arch); break;
  }
  if (c.pack_gqa && arch.backend != Backend::portable) {
    // TMA backends load a consumer's Q rows as one box of whole (query, group) row sets.
    const int box_rows = arch.backend == Backend::hopper ? 64 : c.BM / 2;
    if (box_rows % c.group != 0)
      refuse("pack_gqa", fmt::format("true with group = {}", c.group),
             fmt::format("the {} backend packs groups that divide {} rows", to_string(arch.backend), box_rows));
  }
  Tuning tuning = derive_tuning(arch.backend, c);
  apply_tune_env(tuning);
  if (tuning.persistent < 0 || tuning.persistent > 2)
    throw ConfigError(fmt::format("FA4JIT_TUNE: persistent={} (0: grid, 1: persistent tiles, 2: stream-K)", tuning.persistent));
  if (arch.backend != Backend::hopper) tuning.persistent = 0;  // sm90a's schedulers only
  if (c.pack_gqa && tuning.persistent == 1) tuning.persistent = 2;  // the LPT walker visits q heads, not packed groups
  // Stream-K launches one CTA per SM, so the kernel takes the whole SM's registers.
  if (tuning.persistent == 2) b.ctas_per_sm = 1;
  // Persistent sm90a CTAs stage O in a region of their own where it fits, so the next tile's Q
  // load overlaps the epilogue (templates/sm90a/layout.cuh SmemLayout::kOwnO takes it when the
  // bytes are there).
  const int own_o_bytes = 2 * c.BM * c.padded_depth;
  if (arch.backend == Backend::hopper && tuning.persistent != 0 && b.smem + own_o_bytes <= arch.max_smem)
    b.smem += own_o_bytes;
  ResolvedConfig rc{c, tuning, arch.backend, arch.sm, b.threads, b.smem, b.ctas_per_sm};
  rc.walk = tuning.persistent == 1 ? TileWalk::persistent : tuning.persistent == 2 ? TileWalk::stream_k : TileWalk::grid;
  rc.uses_tma = arch.backend != Backend::portable;
  // sm80 decodes its tile from fresh special-register reads to stay within 255 registers
  // (templates/sm80/kernel.cuh cta_tile), so it keeps grid order.
  rc.lpt_order = arch.backend != Backend::portable;
  return rc;
}

bool supported(const FA4Config& cfg, std::string* why) {
  try {
    resolve(cfg);
    return true;
  } catch (const ConfigError& e) {
    if (why) *why = e.what();
    return false;
  }
}

}  // namespace jit
