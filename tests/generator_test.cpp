// Generator: deterministic source, key stability and sensitivity, snippets under #line.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <set>

#include <nlohmann/json.hpp>

#include "fa4jit/jit.hpp"
#include "generator/key.hpp"
#include "generator/source.hpp"
#include "runtime/runtime_internal.hpp"

namespace {

jit::FA4Config base() {
  jit::FA4Config c;
  c.arch = "sm_90a";
  c.depth = 128;
  return c;
}

TEST(Generator, SourceIsDeterministic) {
  auto c = base();
  c.mask = jit::Mask::causal();
  c.score_mod = jit::ScoreMod::custom("return score + 1.0f;");
  EXPECT_EQ(jit::generate_source(c), jit::generate_source(c));
  EXPECT_EQ(jit::cache_key(c), jit::cache_key(c));
  auto d = c;
  d.depth = 64;
  EXPECT_NE(jit::generate_source(c), jit::generate_source(d));
}

TEST(Generator, SourceIsTheThinLayerOverTemplates) {
  auto c = base();
  c.mask = jit::Mask::causal();
  const std::string src = jit::generate_source(c);
  EXPECT_NE(src.find("#include \"sm90a/kernel.cuh\""), std::string::npos);
  EXPECT_NE(src.find("using Mask = fa4::mask::Causal;"), std::string::npos);
  EXPECT_NE(src.find("static constexpr int kBN = 128;"), std::string::npos);
  EXPECT_NE(src.find("extern \"C\" __global__"), std::string::npos);
  EXPECT_LT(std::count(src.begin(), src.end(), '\n'), 60) << "the generated layer should stay thin";
}

TEST(Generator, SnippetsSitUnderLineDirectives) {
  auto c = base();
  c.score_mod = jit::ScoreMod::custom("float t = score;\nreturn t * 2.0f;");
  const std::string src = jit::generate_source(c);
  const auto at = src.find("#line 1 \"score_mod\"\nfloat t = score;\nreturn t * 2.0f;\n#line ");
  ASSERT_NE(at, std::string::npos) << src;
  // The directive after the snippet restores the real line number of the next line.
  const auto restore = src.find("#line ", at + 10);
  const int claimed = std::stoi(src.substr(restore + 6));
  const int actual = static_cast<int>(std::count(src.begin(), src.begin() + restore, '\n')) + 2;
  EXPECT_EQ(claimed, actual);
}

TEST(CacheKey, EveryConfigFieldChangesTheKey) {
  const std::vector<std::function<void(jit::FA4Config&)>> changes = {
      [](auto& c) { c.dtype = jit::DType::fp16; },
      [](auto& c) { c.dtype = jit::DType::e4m3; },
      [](auto& c) { c.output_dtype = jit::DType::fp16; },
      [](auto& c) {
        c.dtype = jit::DType::e4m3;
        c.output_dtype = jit::DType::fp16;
      },
      [](auto& c) { c.depth = 64; },
      [](auto& c) { c.BN = 64; },
      [](auto& c) { c.num_q_heads = 32; },
      [](auto& c) { c.group = 4; },
      [](auto& c) { c.num_kv_stages = 3; },
      [](auto& c) { c.arch = "sm_90"; },
      [](auto& c) { c.arch = "sm_100a"; },
      [](auto& c) { c.mask = jit::Mask::causal(); },
      [](auto& c) { c.mask = jit::Mask::causal(true); },
      [](auto& c) { c.mask = jit::Mask::custom("return true;"); },
      [](auto& c) { c.mask = jit::Mask::custom("return  true;"); },
      [](auto& c) { c.score_mod = jit::ScoreMod::softcap(); },
      [](auto& c) { c.score_mod = jit::ScoreMod::custom("return score;"); },
      [](auto& c) { c.score_mod = jit::ScoreMod::custom("return score ;"); },
  };
  std::set<std::string> keys = {jit::cache_key(base())};
  for (const auto& change : changes) {
    auto c = base();
    change(c);
    EXPECT_TRUE(keys.insert(jit::cache_key(c)).second) << jit::to_json(c).dump();
  }
}

TEST(CacheKey, ToolchainTemplatesAndOptionsChangeTheKey) {
  const auto in = jit::detail::compile_inputs(base());
  EXPECT_EQ(in.key.size(), 32u);
  EXPECT_EQ(jit::detail::compute_key(in), in.key);
  auto t = in;
  auto edited = *t.headers;
  edited.front().second += " ";
  t.template_digest = jit::detail::compute_template_digest(edited);
  EXPECT_NE(jit::detail::compute_key(t), in.key);
  auto v = in;
  v.nvrtc_version = "13.1";
  EXPECT_NE(jit::detail::compute_key(v), in.key);
  auto o = in;
  o.options.push_back("-G");
  EXPECT_NE(jit::detail::compute_key(o), in.key);
}

// Kernels are built without -lineinfo (a smaller cubin, a faster compile) unless Tuning::line_info
// asks for it; the option is keyed and recorded like every override.
TEST(CacheKey, LineInfoIsAnOptInOverride) {
  const auto plain = jit::detail::compile_inputs(base());
  const auto lines = jit::detail::compile_inputs(base(), jit::ResolveOptions{jit::parse_tune("line_info=1")});
  const auto has = [](const jit::detail::CompileInputs& in) {
    return std::count(in.options.begin(), in.options.end(), "-lineinfo");
  };
  EXPECT_EQ(has(plain), 0);
  EXPECT_EQ(has(lines), 1);
  EXPECT_NE(plain.key, lines.key);
  EXPECT_EQ(jit::to_string(lines.tune), "line_info=1");
  EXPECT_EQ(plain.source, lines.source);  // only the options differ
}

TEST(CacheKey, EquivalentConfigsShareAKey) {
  auto explicit_defaults = base();
  explicit_defaults.BN = 128;
  explicit_defaults.num_kv_stages = 2;
  explicit_defaults.output_dtype = jit::DType::bf16;
  EXPECT_EQ(jit::cache_key(base()), jit::cache_key(explicit_defaults));
}

TEST(Generator, TemplatesAreEmbeddedPerBackend) {
  for (auto b : {jit::Backend::portable, jit::Backend::hopper, jit::Backend::blackwell}) {
    const auto& headers = jit::detail::template_headers(b);
    bool has_kernel = false, has_common = false;
    for (const auto& [name, bytes] : *headers) {
      has_kernel |= name == std::string(jit::to_string(b)) + "/kernel.cuh";
      has_common |= name == "common/prelude.cuh";
      EXPECT_FALSE(bytes.empty()) << name;
    }
    EXPECT_TRUE(has_kernel) << jit::to_string(b);
    EXPECT_TRUE(has_common) << jit::to_string(b);
  }
}

}  // namespace
