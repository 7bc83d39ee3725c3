// FA4Config: factories, per-arch derivation from the hardware budgets, validation.
#include <algorithm>
#include <charconv>
#include <iterator>
#include <optional>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "fa4jit/advanced.hpp"
#include "fa4jit/errors.hpp"
#include "generator/arch.hpp"
#include "generator/backends/backend.hpp"
#include "generator/config_check.hpp"

namespace jit {

const char* to_string(DType t) {
  switch (t) {
    case DType::bf16: return "bf16";
    case DType::fp16: return "fp16";
    case DType::e4m3: return "e4m3";
  }
  return "?";
}

DType dtype_from_string(const std::string& s) {
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  if (s == "fp16" || s == "float16" || s == "half") return DType::fp16;
  if (s == "e4m3" || s == "float8_e4m3fn" || s == "fp8_e4m3") return DType::e4m3;
  throw ConfigError(fmt::format("dtype: '{}' is not supported; allowed: bf16, fp16, e4m3", s));
}

int dtype_size(DType t) { return t == DType::e4m3 ? 1 : 2; }
DType kv_type(const FA4Config& c) { return c.kv_dtype.value_or(c.dtype); }
int value_depth(const FA4Config& c) { return c.depth_v != 0 ? c.depth_v : c.depth; }

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

// The override names, in Tuning's order (parse_tune, to_string), and the values each takes: a
// value outside them used to reach the generated source (exp2_emulate_every=-3 compiled a kernel
// under a key of its own).
struct TuneField {
  const char* name;
  std::optional<int> TuningOverrides::*override;
  int Tuning::*value;
  int lo, hi;
  const char* means;
};
constexpr TuneField kTuneFields[] = {
    {"exp2_emulate_every", &TuningOverrides::exp2_emulate_every, &Tuning::exp2_emulate_every, 0, 64,
     "0: every exp2 on MUFU; n: one pair in n by polynomial"},
    {"intra_wg_overlap", &TuningOverrides::intra_wg_overlap, &Tuning::intra_wg_overlap, 0, 1, "0 or 1"},
    {"pingpong", &TuningOverrides::pingpong, &Tuning::pingpong, 0, 2,
     "0 none, 1 around the GEMMs, 2 around the softmax"},
    {"wg_spans", &TuningOverrides::wg_spans, &Tuning::wg_spans, 0, 1, "0 or 1"},
    {"persistent", &TuningOverrides::persistent, &Tuning::persistent, 0, 3,
     "0 grid, 1 persistent tiles, 2 stream-K, 3 persistent tiles claimed at run time"},
    {"line_info", &TuningOverrides::line_info, &Tuning::line_info, 0, 1, "0 or 1"},
    {"alternate_s", &TuningOverrides::alternate_s, &Tuning::alternate_s, 0, 1, "0 or 1"},
    {"k_parts", &TuningOverrides::k_parts, &Tuning::k_parts, 1, 9, "1, 3 or 9 parts of each K stage"},
};

}  // namespace

// "exp2_emulate_every=4,pingpong=0": tuning sweeps without a rebuild. The values land in the
// generated source, so the cache keys them like any other input.
TuningOverrides parse_tune(const std::string& text, const std::string& origin) {
  TuningOverrides t;
  if (text.empty()) return t;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const auto eq = item.find('=');
    if (eq == std::string::npos) throw ConfigError(fmt::format("{}: '{}' is not name=value", origin, item));
    const std::string name = item.substr(0, eq);
    const auto f = std::find_if(std::begin(kTuneFields), std::end(kTuneFields),
                                [&](const TuneField& x) { return name == x.name; });
    if (f == std::end(kTuneFields)) {
      std::string allowed;
      for (const TuneField& x : kTuneFields) allowed += fmt::format("{}{}", allowed.empty() ? "" : ", ", x.name);
      throw ConfigError(fmt::format("{}: unknown name '{}'; allowed: {}", origin, name, allowed));
    }
    // Whole decimal digits only: stoi took " 4", "+4" and "4abc" as 4.
    const std::string_view digits = std::string_view(item).substr(eq + 1);
    int value = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size())
      throw ConfigError(fmt::format("{}: '{}' needs an integer value", origin, item));
    if (value < f->lo || value > f->hi)
      throw ConfigError(
          fmt::format("{}: '{}' is out of range: {} takes {} .. {} ({})", origin, item, name, f->lo, f->hi, f->means));
    t.*f->override = value;
  }
  return t;
}

std::string to_string(const TuningOverrides& t) {
  std::string out;
  for (const TuneField& f : kTuneFields)
    if (const std::optional<int>& v = t.*f.override) out += fmt::format("{}{}={}", out.empty() ? "" : ",", f.name, *v);
  return out;
}

ResolvedConfig resolve(const FA4Config& input, const ResolveOptions& options) {
  using detail::pick;
  using detail::refuse;
  detail::check_structure(input);  // before the copy: bounds the mask tree every later walk recurses over
  FA4Config c = input;
  if (c.arch.empty()) refuse("arch", "empty", "set it (e.g. sm_90a) or call get_kernel, which uses the current GPU");
  const ArchInfo arch = parse_arch(c.arch);  // throws ConfigError for unknown archs
  const detail::BackendPolicy& backend = detail::policy(arch.backend);

  if (!c.output_dtype) c.output_dtype = c.dtype == DType::e4m3 ? DType::bf16 : c.dtype;
  if (*c.output_dtype == DType::e4m3) refuse("output_dtype", "e4m3", "bf16 or fp16 (FP8 kernels write O in 16 bits)");
  // kv_dtype: unset, or the dtype itself (normalized to unset, so the key is the plain kernel's), or
  // e4m3 under a 16-bit dtype (FP8 KV cache).
  if (c.kv_dtype == c.dtype) c.kv_dtype.reset();
  if (c.kv_dtype && !(*c.kv_dtype == DType::e4m3 && c.dtype != DType::e4m3))
    refuse("kv_dtype", fmt::format("{} with dtype {}", to_string(*c.kv_dtype), to_string(c.dtype)),
           "unset, the dtype, or e4m3 with a bf16/fp16 dtype (an FP8 KV cache)");
  const std::vector<int> depths = backend.depths();
  if (std::find(depths.begin(), depths.end(), c.depth) == depths.end())
    refuse("depth", std::to_string(c.depth),
           fmt::format("the {} backend supports {}", to_string(arch.backend), fmt::join(depths, ", ")));
  // depth_v: 0 and the depth itself are one config (normalized to 0, so the key is the plain
  // kernel's); a narrower V is a pair the backend serves, 16-bit only.
  if (c.depth_v == c.depth) c.depth_v = 0;
  if (c.depth_v != 0) {
    const std::vector<int> dvs = backend.depths_v(c.depth);
    if (std::find(dvs.begin(), dvs.end(), c.depth_v) == dvs.end())
      refuse("depth_v", std::to_string(c.depth_v),
             dvs.empty() ? fmt::format("the {} backend runs depth {} with depth_v = depth only",
                                       to_string(arch.backend), c.depth)
                         : fmt::format("the {} backend runs depth {} with depth_v {} or the depth",
                                       to_string(arch.backend), c.depth, fmt::join(dvs, ", ")));
    if (c.dtype == DType::e4m3 || (c.kv_dtype && !backend.kv_fp8_depth_v(c.depth, c.depth_v)))
      refuse("depth_v", fmt::format("{} with {} {}", c.depth_v, c.kv_dtype ? "kv_dtype" : "dtype", "e4m3"),
             c.kv_dtype ? fmt::format("a V head dim other than the depth runs with 16-bit Q, K and V (bf16, fp16), "
                                      "or over an e4m3 latent cache on sm_90a (depth 576, depth_v 512)")
                        : std::string("a V head dim other than the depth runs with 16-bit Q, K and V (bf16, fp16)"));
  }
  // Rows padded to whole swizzle rows: 128 bytes (64 bf16/fp16 elements, 128 e4m3 ones; an FP8 KV
  // cache pads to its e4m3 rows on the TMA backends), or the backend's narrower rows (sm90a: 64-byte
  // e4m3 rows at depth 64).
  const int kv_bytes = backend.uses_tma() ? dtype_size(kv_type(c)) : 2;  // plain loads: no atoms
  const int atom = backend.swizzle_row_bytes(c) / std::min(dtype_size(c.dtype), kv_bytes);
  const int dp = (c.depth + atom - 1) / atom * atom;
  if (c.num_q_heads > 0 && c.group > 0 && c.num_q_heads % c.group != 0)
    refuse("group", std::to_string(c.group), fmt::format("it must divide num_q_heads ({})", c.num_q_heads));
  if (c.pack_gqa && c.group <= 0)
    refuse("pack_gqa", "true with group = 0", "packing GQA heads needs the group (num_q_heads / num_kv_heads) set");
  // One query head per KV head leaves nothing to pack; the sm_90a kernel built for it stopped at its
  // first launch (an illegal instruction) instead.
  if (c.pack_gqa && c.group == 1)
    refuse("pack_gqa", "true with group = 1",
           "one query head per KV head has no heads to pack: leave pack_gqa false (as Python's pack_gqa does)");

  detail::Budget b = backend.derive(c, dp, arch);
  // TMA backends load a consumer's Q rows as one box of whole (query, head) row sets, so a group
  // larger than the box is packed in equal slices (detail::pack_heads).
  if (const int box_rows = backend.q_box_rows(c); c.pack_gqa && c.group > 1 && detail::pack_heads(c, box_rows) == 1)
    refuse("pack_gqa", fmt::format("true with group = {}", c.group),
           fmt::format("the {} backend packs groups of up to {} heads, or larger groups in equal slices of "
                       "2..{} heads; {} has no such divisor",
                       to_string(arch.backend), box_rows, box_rows, c.group));
  Tuning tuning = backend.default_tuning(c, dp, b);
  for (const TuneField& f : kTuneFields)
    if (const std::optional<int>& v = options.tune.*f.override) tuning.*f.value = *v;
  if (tuning.persistent < 0 || tuning.persistent > 3)
    throw ConfigError(fmt::format(
        "tune: persistent={} (0: grid, 1: persistent tiles, 2: stream-K, 3: persistent tiles claimed at run time)",
        tuning.persistent));
  backend.settle(tuning, b, c, dp, arch);
  ResolvedConfig rc{c,         tuning, arch.backend, arch.sm, dp, detail::padded_depth_v(c, dp),
                    b.threads, b.smem, b.ctas_per_sm};
  rc.walk = tuning.persistent == 1   ? TileWalk::persistent
            : tuning.persistent == 2 ? TileWalk::stream_k
            : tuning.persistent == 3 ? TileWalk::dynamic
                                     : TileWalk::grid;
  rc.uses_tma = backend.uses_tma();
  rc.lpt_order = backend.lpt_order();
  rc.v_in_k = backend.v_in_k(rc);
  return rc;
}

namespace detail {

int pack_heads(const FA4Config& c, int span) {
  if (!c.pack_gqa || c.group <= 1) return 1;
  if (span <= 0 || c.group <= span) return c.group;
  for (int p = span; p > 1; --p)
    if (c.group % p == 0) return p;
  return 1;
}

}  // namespace detail

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
