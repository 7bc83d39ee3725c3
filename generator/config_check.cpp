#include "generator/config_check.hpp"

#include <fmt/format.h>

#include "fa4jit/errors.hpp"
#include "generator/limits.hpp"
#include "generator/snippet_check.hpp"

namespace jit::detail {

namespace {

constexpr IntField kIntFields[] = {
    {"depth", 1, 1024, &FA4Config::depth},
    {"depth_v", 0, 1024, &FA4Config::depth_v},
    {"BM", 0, 1024, &FA4Config::BM},
    {"BN", 0, 1024, &FA4Config::BN},
    {"BK0", 0, 1024, &FA4Config::BK0},
    {"num_q_heads", 0, 65535, &FA4Config::num_q_heads},
    {"group", 0, 65535, &FA4Config::group},
    {"num_kv_stages", 0, 64, &FA4Config::num_kv_stages},
    {"num_qk_stages", 0, 64, &FA4Config::num_qk_stages},
};

[[noreturn]] void refuse(const std::string& field, const std::string& value, const std::string& allowed) {
  throw ConfigError(fmt::format("{}: {} is not allowed; {}", field, value, allowed));
}

bool blank(const std::string& s) { return s.find_first_not_of(" \t\r\n\v\f") == std::string::npos; }

const char* kind_name(Mask::Kind k) {
  switch (k) {
    case Mask::Kind::none: return "none";
    case Mask::Kind::causal: return "causal";
    case Mask::Kind::sliding_window: return "sliding_window";
    case Mask::Kind::chunked: return "chunked";
    case Mask::Kind::custom: return "custom";
    case Mask::Kind::all_of: return "all_of";
    case Mask::Kind::any_of: return "any_of";
  }
  return "?";
}

// Masks whose positions follow the causal alignment (templates/common/mask.cuh Ctx::diag_offset).
bool aligned(Mask::Kind k) {
  return k == Mask::Kind::causal || k == Mask::Kind::sliding_window || k == Mask::Kind::chunked;
}

class MaskWalk {
 public:
  // Depth and count are checked before descending, so the walk is bounded whatever the tree.
  void visit(const Mask& m, const std::string& path, int level) {
    if (level > kMaxMaskDepth)
      throw ConfigError(fmt::format("{}: masks nested deeper than {} levels", path, kMaxMaskDepth));
    if (++count_ > kMaxMasks)
      throw ConfigError(fmt::format("{}: more than {} masks in one mask tree", path, kMaxMasks));
    const std::string kind = kind_name(m.kind);
    if (m.kind == Mask::Kind::custom) {
      if (blank(m.snippet))
        refuse(path + ".snippet", "an empty body",
               "a custom mask needs a body returning bool over (b, h, q_idx, kv_idx)");
      check_snippet(m.snippet, path + " snippet");
      if (!m.block_snippet.empty()) check_snippet(m.block_snippet, path + " block_snippet");
    } else {
      if (!m.snippet.empty())
        refuse(path + ".snippet", "a body", fmt::format("only custom masks take a snippet (this one is {})", kind));
      if (!m.block_snippet.empty())
        refuse(path + ".block_snippet", "a body",
               fmt::format("only custom masks take a block snippet (this one is {})", kind));
    }
    if (m.top_left && !aligned(m.kind))
      refuse(path + ".top_left", "true",
             fmt::format("it means nothing for a {} mask; causal, sliding_window and chunked masks align", kind));
    if (m.prefix && m.kind != Mask::Kind::causal && m.kind != Mask::Kind::sliding_window)
      refuse(path + ".prefix", "true",
             fmt::format("only causal and sliding_window masks take a prefix (this one is {})", kind));
    if (aligned(m.kind)) {
      // One kernel has one alignment (FwdParams::mask_flags): masks that disagree cannot both hold.
      if (!first_aligned_.empty() && m.top_left != top_left_)
        refuse(path + ".top_left", m.top_left ? "true" : "false",
               fmt::format("{} has top_left {}, and one kernel aligns all its masks one way", first_aligned_,
                           top_left_ ? "true" : "false"));
      if (first_aligned_.empty()) {
        first_aligned_ = path;
        top_left_ = m.top_left;
      }
    }
    if (m.kind == Mask::Kind::all_of || m.kind == Mask::Kind::any_of) {
      if (m.children.empty()) refuse(path + ".masks", "an empty list", "all_of / any_of take at least one mask");
      for (std::size_t i = 0; i < m.children.size(); ++i)
        visit(m.children[i], fmt::format("{}.masks[{}]", path, i), level + 1);
    } else if (!m.children.empty()) {
      refuse(path + ".masks", "a list", fmt::format("only all_of / any_of masks have children (this one is {})", kind));
    }
  }

 private:
  int count_ = 0;
  std::string first_aligned_;
  bool top_left_ = false;
};

}  // namespace

std::string json_path(const std::string& prefix, const std::string& field) {
  return prefix.empty() ? field : prefix + "." + field;
}

std::span<const IntField> int_fields() { return kIntFields; }

void check_structure(const FA4Config& c, const std::string& prefix) {
  for (const IntField& f : kIntFields) {
    const int v = c.*f.member;
    if (v < f.lo || v > f.hi)
      refuse(json_path(prefix, f.name), std::to_string(v), fmt::format("the range is {} .. {}", f.lo, f.hi));
  }
  MaskWalk().visit(c.mask, json_path(prefix, "mask"), 1);
  const std::string sm = json_path(prefix, "score_mod");
  if (c.score_mod.kind == ScoreMod::Kind::custom) {
    if (blank(c.score_mod.snippet))
      refuse(sm + ".snippet", "an empty body", "a custom score-mod needs a body returning float");
    check_snippet(c.score_mod.snippet, sm + " snippet");
  } else if (!c.score_mod.snippet.empty()) {
    refuse(sm + ".snippet", "a body", "only custom score-mods take a snippet");
  }
}

}  // namespace jit::detail
