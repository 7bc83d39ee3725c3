// FA4Config <-> JSON (schema: docs/CONFIG.md). Strict: unknown fields and wrong types are
// ConfigErrors that name the field, so a typo in a prewarm file never silently changes a kernel.
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "fa4jit/config.hpp"
#include "fa4jit/errors.hpp"

namespace jit {

namespace {

using nlohmann::json;

constexpr std::pair<Mask::Kind, const char*> kMaskKinds[] = {
    {Mask::Kind::none, "none"},     {Mask::Kind::causal, "causal"}, {Mask::Kind::sliding_window, "sliding_window"},
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

template <class Kind, std::size_t N>
Kind kind_from(const std::pair<Kind, const char*> (&table)[N], const std::string& field, const std::string& s) {
  std::string allowed;
  for (const auto& [kind, name] : table) {
    if (s == name) return kind;
    allowed += (allowed.empty() ? "" : ", ") + std::string(name);
  }
  throw ConfigError(fmt::format("{}: '{}' is not a known kind; allowed: {}", field, s, allowed));
}

void reject_unknown(const json& j, const std::string& where, std::initializer_list<const char*> known) {
  const std::set<std::string> names(known.begin(), known.end());
  for (const auto& [k, v] : j.items())
    if (!names.count(k)) throw ConfigError(fmt::format("{}: unknown field '{}'", where, k));
}

template <class T>
T get(const json& j, const std::string& field, const std::string& where) {
  try {
    return j.at(field).get<T>();
  } catch (const json::exception& e) {
    throw ConfigError(fmt::format("{}{}: {}", where.empty() ? "" : where + ".", field, e.what()));
  }
}

json mask_to_json(const Mask& m) {
  json j = {{"kind", kind_name(kMaskKinds, m.kind)}};
  if (m.top_left) j["top_left"] = true;
  if (m.kind == Mask::Kind::custom) j["snippet"] = m.snippet;
  if (!m.block_snippet.empty()) j["block_snippet"] = m.block_snippet;
  if (!m.children.empty()) {
    j["masks"] = json::array();
    for (const Mask& c : m.children) j["masks"].push_back(mask_to_json(c));
  }
  return j;
}

Mask mask_from_json(const json& j, const std::string& where) {
  if (j.is_string()) return Mask{kind_from(kMaskKinds, where, j.get<std::string>()), false, {}, {}, {}};
  if (!j.is_object()) throw ConfigError(where + ": expected a string or an object");
  reject_unknown(j, where, {"kind", "top_left", "snippet", "block_snippet", "masks"});
  Mask m;
  m.kind = kind_from(kMaskKinds, where + ".kind", get<std::string>(j, "kind", where));
  if (j.contains("top_left")) m.top_left = get<bool>(j, "top_left", where);
  if (j.contains("snippet")) m.snippet = get<std::string>(j, "snippet", where);
  if (j.contains("block_snippet")) m.block_snippet = get<std::string>(j, "block_snippet", where);
  if (j.contains("masks")) {
    const json& arr = j.at("masks");
    if (!arr.is_array()) throw ConfigError(where + ".masks: expected an array");
    for (std::size_t i = 0; i < arr.size(); ++i) m.children.push_back(mask_from_json(arr[i], fmt::format("{}.masks[{}]", where, i)));
  }
  return m;
}

}  // namespace

json to_json(const FA4Config& c) {
  json j = {{"dtype", to_string(c.dtype)},
            {"depth", c.depth},
            {"padded_depth", c.padded_depth},
            {"BM", c.BM},
            {"BN", c.BN},
            {"BK0", c.BK0},
            {"BK1", c.BK1},
            {"num_q_heads", c.num_q_heads},
            {"group", c.group},
            {"num_kv_stages", c.num_kv_stages},
            {"num_qk_stages", c.num_qk_stages},
            {"num_mma_stages", c.num_mma_stages},
            {"swizzle_bytes", c.swizzle_bytes},
            {"arch", c.arch},
            {"mask", mask_to_json(c.mask)},
            {"pack_gqa", c.pack_gqa}};
  j["output_dtype"] = c.output_dtype ? json(to_string(*c.output_dtype)) : json(nullptr);
  json sm = {{"kind", kind_name(kScoreModKinds, c.score_mod.kind)}};
  if (c.score_mod.kind == ScoreMod::Kind::custom) sm["snippet"] = c.score_mod.snippet;
  j["score_mod"] = sm;
  return j;
}

FA4Config config_from_json(const json& j) {
  if (!j.is_object()) throw ConfigError("config: expected a JSON object");
  reject_unknown(j, "config",
                 {"dtype", "output_dtype", "depth", "padded_depth", "BM", "BN", "BK0", "BK1", "num_q_heads", "group",
                  "num_kv_stages", "num_qk_stages", "num_mma_stages", "swizzle_bytes", "arch", "mask", "score_mod",
                  "pack_gqa"});
  FA4Config c;
  if (j.contains("dtype")) c.dtype = dtype_from_string(get<std::string>(j, "dtype", ""));
  if (j.contains("output_dtype") && !j.at("output_dtype").is_null())
    c.output_dtype = dtype_from_string(get<std::string>(j, "output_dtype", ""));
  struct IntField {
    const char* name;
    int* dst;
  };
  for (const IntField& f : {IntField{"depth", &c.depth}, IntField{"padded_depth", &c.padded_depth},
                            IntField{"BM", &c.BM}, IntField{"BN", &c.BN}, IntField{"BK0", &c.BK0},
                            IntField{"BK1", &c.BK1}, IntField{"num_q_heads", &c.num_q_heads},
                            IntField{"group", &c.group}, IntField{"num_kv_stages", &c.num_kv_stages},
                            IntField{"num_qk_stages", &c.num_qk_stages},
                            IntField{"num_mma_stages", &c.num_mma_stages},
                            IntField{"swizzle_bytes", &c.swizzle_bytes}})
    if (j.contains(f.name)) *f.dst = get<int>(j, f.name, "");
  if (j.contains("arch")) c.arch = get<std::string>(j, "arch", "");
  if (j.contains("pack_gqa")) c.pack_gqa = get<bool>(j, "pack_gqa", "");
  if (j.contains("mask")) c.mask = mask_from_json(j.at("mask"), "mask");
  if (j.contains("score_mod")) {
    const json& s = j.at("score_mod");
    if (s.is_string()) {
      c.score_mod.kind = kind_from(kScoreModKinds, "score_mod", s.get<std::string>());
    } else {
      if (!s.is_object()) throw ConfigError("score_mod: expected a string or an object");
      reject_unknown(s, "score_mod", {"kind", "snippet"});
      c.score_mod.kind = kind_from(kScoreModKinds, "score_mod.kind", get<std::string>(s, "kind", "score_mod"));
      if (s.contains("snippet")) c.score_mod.snippet = get<std::string>(s, "snippet", "score_mod");
    }
  }
  return c;
}

}  // namespace jit
