// FA4Config <-> JSON (schema: docs/CONFIG.md). Strict: unknown fields and wrong types are
// ConfigErrors that name the field, so a typo in a prewarm file never silently changes a kernel.
#include <cmath>
#include <cstdint>
#include <set>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "fa4jit/config.hpp"
#include "fa4jit/errors.hpp"
#include "generator/arch.hpp"
#include "generator/config_check.hpp"
#include "generator/config_json.hpp"
#include "generator/limits.hpp"

namespace jit {

using detail::check_structure;
using detail::int_fields;
using detail::IntField;
using detail::json_path;
using nlohmann::json;

namespace {

constexpr std::pair<Mask::Kind, const char*> kMaskKinds[] = {
    {Mask::Kind::none, "none"},       {Mask::Kind::causal, "causal"}, {Mask::Kind::sliding_window, "sliding_window"},
    {Mask::Kind::chunked, "chunked"}, {Mask::Kind::custom, "custom"}, {Mask::Kind::all_of, "all_of"},
    {Mask::Kind::any_of, "any_of"}};
constexpr std::pair<ScoreMod::Kind, const char*> kScoreModKinds[] = {{ScoreMod::Kind::identity, "identity"},
                                                                     {ScoreMod::Kind::softcap, "softcap"},
                                                                     {ScoreMod::Kind::alibi, "alibi"},
                                                                     {ScoreMod::Kind::custom, "custom"}};

template <class Kind, std::size_t N>
const char* kind_name(const std::pair<Kind, const char*> (&table)[N], Kind k) {
  for (const auto& [kind, name] : table)
    if (kind == k) return name;
  return "?";
}

// What a refused value was, for the error: scalars as written (strings cut short), containers by
// type only (dumping one would walk it, however deep).
std::string shown(const json& v) {
  switch (v.type()) {
    case json::value_t::string: {
      const std::string& s = v.get_ref<const std::string&>();
      const auto quoted = [](const std::string& t) {
        return json(t).dump(-1, ' ', false, json::error_handler_t::replace);
      };
      return s.size() <= 40 ? quoted(s) : quoted(s.substr(0, 40)) + "...";
    }
    case json::value_t::boolean:
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
    case json::value_t::number_float:
    case json::value_t::null: return v.dump();
    default: return std::string("an ") + v.type_name();
  }
}

template <class Kind, std::size_t N>
Kind kind_from(const std::pair<Kind, const char*> (&table)[N], const std::string& field, const std::string& s) {
  std::string allowed;
  for (const auto& [kind, name] : table) {
    if (s == name) return kind;
    allowed += (allowed.empty() ? "" : ", ") + std::string(name);
  }
  throw ConfigError(fmt::format("{}: {} is not a known kind; allowed: {}", field, shown(nlohmann::json(s)), allowed));
}

[[noreturn]] void wrong_type(const std::string& path, const char* expected, const json& v) {
  throw ConfigError(fmt::format("{}: expected {}, got {}", path, expected, shown(v)));
}

void reject_unknown(const json& j, const std::string& where, std::initializer_list<const char*> known) {
  const std::set<std::string> names(known.begin(), known.end());
  for (const auto& [k, v] : j.items())
    if (!names.count(k)) throw ConfigError(fmt::format("{}: unknown field '{}'", where, k.substr(0, 64)));
}

std::string get_string(const json& j, const std::string& path) {
  if (!j.is_string()) wrong_type(path, "a string", j);
  return j.get<std::string>();
}

bool get_bool(const json& j, const std::string& path) {
  if (!j.is_boolean()) wrong_type(path, "true or false", j);
  return j.get<bool>();
}

// Integers within [lo, hi]: 128 (or 128.0, which JSON Schema also counts as an integer); never
// 128.5, true, "128" or 4294967424, and never a conversion that could overflow.
int get_int(const json& j, const std::string& path, int lo, int hi) {
  bool ok = false;
  std::int64_t v = 0;
  if (j.is_number_unsigned()) {
    const auto u = j.get<std::uint64_t>();
    ok = u <= static_cast<std::uint64_t>(hi);
    if (ok) v = static_cast<std::int64_t>(u);
  } else if (j.is_number_integer()) {
    v = j.get<std::int64_t>();
    ok = true;
  } else if (j.is_number_float()) {
    const double d = j.get<double>();
    ok = std::isfinite(d) && std::trunc(d) == d && d >= lo && d <= hi;  // compared before the cast
    if (ok) v = static_cast<std::int64_t>(d);
  }
  if (!ok || v < lo || v > hi) wrong_type(path, fmt::format("an integer in {} .. {}", lo, hi).c_str(), j);
  return static_cast<int>(v);
}

// output: O's type, bf16 or fp16 (FP8 kernels write O in 16 bits; resolve() refuses e4m3 too).
DType get_dtype(const json& j, const std::string& path, bool output = false) {
  const std::string s = get_string(j, path);
  const char* allowed = output ? "bf16, fp16 (O is 16-bit, also for e4m3 inputs)" : "bf16, fp16, e4m3";
  DType t;
  try {
    t = dtype_from_string(s);
  } catch (const ConfigError&) {
    throw ConfigError(fmt::format("{}: {} is not supported; allowed: {}", path, shown(j), allowed));
  }
  if (output && t == DType::e4m3)
    throw ConfigError(fmt::format("{}: {} is not supported; allowed: {}", path, shown(j), allowed));
  return t;
}

json mask_to_json(const Mask& m, int level) {
  if (level > detail::kMaxMaskDepth)
    throw ConfigError(fmt::format("mask: masks nested deeper than {} levels", detail::kMaxMaskDepth));
  json j = {{"kind", kind_name(kMaskKinds, m.kind)}};
  if (m.top_left) j["top_left"] = true;
  if (m.prefix) j["prefix"] = true;
  if (m.kind == Mask::Kind::custom) j["snippet"] = m.snippet;
  if (!m.block_snippet.empty()) j["block_snippet"] = m.block_snippet;
  if (!m.children.empty()) {
    j["masks"] = json::array();
    for (const Mask& c : m.children) j["masks"].push_back(mask_to_json(c, level + 1));
  }
  return j;
}

// `level` is checked before anything else, so the recursion stops at kMaxMaskDepth + 1.
Mask mask_from_json(const json& j, const std::string& path, int level) {
  if (level > detail::kMaxMaskDepth)
    throw ConfigError(fmt::format("{}: masks nested deeper than {} levels", path, detail::kMaxMaskDepth));
  if (j.is_string()) return Mask{kind_from(kMaskKinds, path, j.get<std::string>()), false, {}, {}, {}};
  if (!j.is_object()) wrong_type(path, "a mask kind or an object", j);
  reject_unknown(j, path, {"kind", "top_left", "prefix", "snippet", "block_snippet", "masks"});
  if (!j.contains("kind")) throw ConfigError(fmt::format("{}.kind: missing (a mask object needs its kind)", path));
  Mask m;
  m.kind = kind_from(kMaskKinds, path + ".kind", get_string(j.at("kind"), path + ".kind"));
  const std::string kind = kind_name(kMaskKinds, m.kind);
  const bool custom = m.kind == Mask::Kind::custom;
  const bool combinator = m.kind == Mask::Kind::all_of || m.kind == Mask::Kind::any_of;
  // A field the kind does not use is a mistake in the file (check_structure refuses the
  // non-empty ones in C++ configs too; here even an empty one is named).
  for (const auto& [field, used] :
       {std::pair<const char*, bool>{"snippet", custom}, {"block_snippet", custom}, {"masks", combinator}})
    if (j.contains(field) && !used)
      throw ConfigError(fmt::format("{}.{}: a {} mask does not take '{}'", path, field, kind, field));
  if (j.contains("top_left")) m.top_left = get_bool(j.at("top_left"), path + ".top_left");
  if (j.contains("prefix")) m.prefix = get_bool(j.at("prefix"), path + ".prefix");
  if (j.contains("snippet")) m.snippet = get_string(j.at("snippet"), path + ".snippet");
  if (j.contains("block_snippet")) m.block_snippet = get_string(j.at("block_snippet"), path + ".block_snippet");
  if (j.contains("masks")) {
    const json& arr = j.at("masks");
    if (!arr.is_array()) wrong_type(path + ".masks", "an array of masks", arr);
    for (std::size_t i = 0; i < arr.size(); ++i)
      m.children.push_back(mask_from_json(arr[i], fmt::format("{}.masks[{}]", path, i), level + 1));
  }
  return m;
}

}  // namespace

json to_json(const FA4Config& c) {
  json j = {{"dtype", to_string(c.dtype)},
            {"depth", c.depth},
            {"BM", c.BM},
            {"BN", c.BN},
            {"BK0", c.BK0},
            {"num_q_heads", c.num_q_heads},
            {"group", c.group},
            {"num_kv_stages", c.num_kv_stages},
            {"num_qk_stages", c.num_qk_stages},
            {"arch", c.arch},
            {"mask", mask_to_json(c.mask, 1)},
            {"pack_gqa", c.pack_gqa}};
  j["output_dtype"] = c.output_dtype ? json(to_string(*c.output_dtype)) : json(nullptr);
  // Written only when set (an FP8 KV cache): the JSON, and so the cache key, of every other config
  // is the one it was before the field existed.
  if (c.kv_dtype) j["kv_dtype"] = to_string(*c.kv_dtype);
  if (c.depth_v != 0) j["depth_v"] = c.depth_v;  // likewise: only a V head dim of its own
  json sm = {{"kind", kind_name(kScoreModKinds, c.score_mod.kind)}};
  if (c.score_mod.kind == ScoreMod::Kind::custom) sm["snippet"] = c.score_mod.snippet;
  j["score_mod"] = sm;
  return j;
}

namespace detail {

FA4Config config_from_json_at(const json& j, const std::string& prefix) {
  const std::string where = prefix.empty() ? "config" : prefix;
  if (!j.is_object()) wrong_type(where, "a JSON object", j);
  // Fields that took one value only: a file that still sets them is told why they went.
  static constexpr std::pair<const char*, const char*> kRemoved[] = {
      {"padded_depth", "it is the depth rounded up to whole swizzle rows (the resolved config reports it)"},
      {"BK1", "the P.V chunk is always BN"},
      {"num_mma_stages", "every backend runs one MMA stage"},
      {"swizzle_bytes", "the backend derives it from the dtype and depth (128 bytes; 64 for sm_90a e4m3 at depth 64)"},
  };
  for (const auto& [field, why] : kRemoved)
    if (j.contains(field))
      throw ConfigError(
          fmt::format("{}: removed, it accepted one value only ({}); delete the field", json_path(prefix, field), why));
  reject_unknown(j, where,
                 {"dtype", "output_dtype", "kv_dtype", "depth", "depth_v", "BM", "BN", "BK0", "num_q_heads", "group",
                  "num_kv_stages", "num_qk_stages", "arch", "mask", "score_mod", "pack_gqa"});
  auto path = [&](const std::string& field) { return json_path(prefix, field); };
  FA4Config c;
  if (j.contains("dtype")) c.dtype = get_dtype(j.at("dtype"), path("dtype"));
  if (j.contains("output_dtype") && !j.at("output_dtype").is_null())
    c.output_dtype = get_dtype(j.at("output_dtype"), path("output_dtype"), true);
  if (j.contains("kv_dtype") && !j.at("kv_dtype").is_null()) c.kv_dtype = get_dtype(j.at("kv_dtype"), path("kv_dtype"));
  for (const IntField& f : int_fields())
    if (j.contains(f.name)) c.*f.member = get_int(j.at(f.name), path(f.name), f.lo, f.hi);
  if (j.contains("arch")) {
    c.arch = get_string(j.at("arch"), path("arch"));
    try {
      if (!c.arch.empty()) parse_arch(c.arch);  // "" means the current GPU's, decided later
    } catch (const ConfigError& e) {
      throw ConfigError(prefix.empty() ? std::string(e.what()) : fmt::format("{}.{}", prefix, e.what()));
    }
  }
  if (j.contains("pack_gqa")) c.pack_gqa = get_bool(j.at("pack_gqa"), path("pack_gqa"));
  if (j.contains("mask")) c.mask = mask_from_json(j.at("mask"), path("mask"), 1);
  if (j.contains("score_mod")) {
    const json& s = j.at("score_mod");
    const std::string sp = path("score_mod");
    if (s.is_string()) {
      c.score_mod.kind = kind_from(kScoreModKinds, sp, s.get<std::string>());
    } else {
      if (!s.is_object()) wrong_type(sp, "a score-mod kind or an object", s);
      reject_unknown(s, sp, {"kind", "snippet"});
      if (!s.contains("kind"))
        throw ConfigError(fmt::format("{}.kind: missing (a score_mod object needs its kind)", sp));
      c.score_mod.kind = kind_from(kScoreModKinds, sp + ".kind", get_string(s.at("kind"), sp + ".kind"));
      if (s.contains("snippet")) {
        if (c.score_mod.kind != ScoreMod::Kind::custom)
          throw ConfigError(fmt::format("{}.snippet: a {} score-mod does not take 'snippet'", sp,
                                        kind_name(kScoreModKinds, c.score_mod.kind)));
        c.score_mod.snippet = get_string(s.at("snippet"), sp + ".snippet");
      }
    }
  }
  check_structure(c, prefix);
  return c;
}

}  // namespace detail

FA4Config config_from_json(const json& j) { return detail::config_from_json_at(j, ""); }

}  // namespace jit
