// Config inputs that cannot crash or silently change a kernel: bounded mask trees and snippets,
// strict JSON types with the JSON path in every error, conflicting fields refused, snippets that
// cannot break out of the function they are pasted into. Each holds for JSON and for C++ configs.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "fa4jit/jit.hpp"
#include "generator/bounded_json.hpp"

namespace {

using jit::FA4Config;
using jit::Mask;
using jit::ScoreMod;
using nlohmann::json;

// Runs f, expects a ConfigError whose message holds every one of `words`; returns the message.
template <class F>
std::string config_error(F&& f, std::initializer_list<std::string> words) {
  try {
    f();
  } catch (const jit::ConfigError& e) {
    const std::string msg = e.what();
    for (const std::string& w : words)
      EXPECT_NE(msg.find(w), std::string::npos) << "'" << w << "' missing from: " << msg;
    return msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a ConfigError: " << e.what();
    return {};
  }
  ADD_FAILURE() << "no ConfigError";
  return {};
}

FA4Config from_text(const std::string& text) { return jit::config_from_json(json::parse(text)); }

FA4Config sm90a(Mask m) {
  FA4Config c;
  c.arch = "sm_90a";
  c.mask = std::move(m);
  return c;
}

// {"mask": {"kind": "all_of", "masks": [ ... {"kind": "causal"} ... ]}} with `levels` masks in a chain.
std::string nested_mask_json(int levels) {
  std::string s = R"({"mask": )";
  for (int i = 1; i < levels; ++i) s += R"({"kind": "all_of", "masks": [)";
  s += R"({"kind": "causal"})";
  for (int i = 1; i < levels; ++i) s += "]}";
  return s + "}";
}

Mask nested_mask(int levels) {
  Mask m = Mask::causal();
  for (int i = 1; i < levels; ++i) m = Mask::all_of({std::move(m)});
  return m;
}

std::string path_at_level(int level) {  // the JSON path of the mask at `level` of nested_mask*
  std::string p = "mask";
  for (int i = 1; i < level; ++i) p += ".masks[0]";
  return p;
}

TEST(ConfigLimits, DeepMaskJsonIsRefusedWithoutExhaustingTheStack) {
  // 30k levels overflowed the stack (and 20k took 1.83 GB) in the recursive reader.
  config_error([] { from_text(nested_mask_json(30000)); }, {path_at_level(17) + ":", "nested deeper than 16"});
  config_error([] { from_text(nested_mask_json(17)); }, {path_at_level(17) + ":", "nested deeper than 16"});
  const FA4Config ok = from_text(nested_mask_json(16));
  EXPECT_EQ(ok.mask, nested_mask(16));
  EXPECT_EQ(jit::config_from_json(jit::to_json(ok)), ok);
}

TEST(ConfigLimits, DeepMaskTreesBuiltInCxxAreRefusedByResolve) {
  EXPECT_NO_THROW(jit::resolve(sm90a(nested_mask(16))));
  config_error([] { jit::resolve(sm90a(nested_mask(17))); }, {path_at_level(17) + ":", "nested deeper than 16"});
  config_error([] { jit::resolve(sm90a(nested_mask(2000))); }, {"nested deeper than 16"});
  config_error([] { jit::to_json(sm90a(nested_mask(2000))); }, {"nested deeper than 16"});
  // Wide trees too: every mask is one more level of the generated type And<A, And<B, ...>>.
  std::vector<Mask> many(63, Mask::causal());  // + the any_of: 64 masks
  EXPECT_NO_THROW(jit::resolve(sm90a(Mask::any_of(many))));
  many.push_back(Mask::causal());
  config_error([&] { jit::resolve(sm90a(Mask::any_of(many))); }, {"mask.masks[63]", "more than 64 masks"});
}

TEST(ConfigLimits, OversizedSnippetsAreRefused) {
  const std::string body = "return true;" + std::string(64 * 1024, ' ');
  config_error([&] { jit::resolve(sm90a(Mask::custom(body))); }, {"mask snippet", "65548 bytes", "65536"});
  FA4Config c = sm90a(Mask::none());
  c.score_mod = ScoreMod::custom("return score;" + std::string(70000, '\n'));
  config_error([&] { jit::resolve(c); }, {"score_mod snippet", "65536"});
  EXPECT_NO_THROW(jit::resolve(sm90a(Mask::custom("return true;" + std::string(64 * 1024 - 12, ' ')))));
}

TEST(ConfigLimits, BoundedJsonParseRefusesDeepAndLargeText) {
  using jit::detail::parse_bounded_json;
  auto nested = [](int n) { return std::string(n, '[') + std::string(n, ']'); };
  EXPECT_NO_THROW(parse_bounded_json(nested(64), 1 << 20, 64));
  EXPECT_THROW(parse_bounded_json(nested(65), 1 << 20, 64), std::length_error);
  EXPECT_THROW(parse_bounded_json(nested(400000), 1 << 20, 64), std::length_error);  // over the size cap
  EXPECT_THROW(parse_bounded_json(nested(200000), 1 << 20, 64), std::length_error);  // under it, too deep
  EXPECT_THROW(parse_bounded_json("{\"a\": ", 1 << 20, 64), json::parse_error);
}

// Issue 19 item 6 / issue 17: every int field is a JSON integer in range, bools are bools, strings
// strings, and the error names the JSON path.
TEST(ConfigJsonStrict, WrongTypesAndRangesNameTheJsonPath) {
  struct Case {
    const char* text;
    std::vector<std::string> words;
  };
  const Case cases[] = {
      {R"({"depth": 128.5})", {"depth:", "expected an integer in 1 .. 1024", "128.5"}},
      {R"({"depth": 128.7})", {"depth:", "expected an integer"}},
      {R"({"depth": true})", {"depth:", "expected an integer", "true"}},
      {R"({"depth": "128"})", {"depth:", "expected an integer", "\"128\""}},
      {R"({"depth": 4294967424})", {"depth:", "expected an integer", "4294967424"}},
      {R"({"depth": 1e10})", {"depth:", "expected an integer"}},
      {R"({"depth": -128})", {"depth:", "expected an integer"}},
      {R"({"depth": null})", {"depth:", "expected an integer", "null"}},
      {R"({"depth": [128]})", {"depth:", "an array"}},
      {R"({"BN": 2147483648})", {"BN:", "0 .. 1024"}},
      {R"({"group": -1})", {"group:", "0 .. 65535"}},
      {R"({"num_kv_stages": 1.5})", {"num_kv_stages:"}},
      {R"({"pack_gqa": 1})", {"pack_gqa:", "expected true or false", "1"}},
      {R"({"pack_gqa": "true"})", {"pack_gqa:", "expected true or false"}},
      {R"({"arch": 90})", {"arch:", "expected a string"}},
      {R"({"arch": "sm_70"})", {"arch", "sm_70", "sm_90a"}},
      {R"({"dtype": 16})", {"dtype:", "expected a string"}},
      {R"({"output_dtype": "fp8"})", {"output_dtype:", "fp8", "bf16"}},
      {R"({"output_dtype": "e4m3"})", {"output_dtype:", "e4m3", "bf16, fp16"}},
      {R"({"output_dtype": "float8_e4m3fn"})", {"output_dtype:", "float8_e4m3fn", "bf16, fp16"}},
      {R"({"dtype": "fp8"})", {"dtype:", "fp8", "bf16, fp16, e4m3"}},
      {R"({"mask": 3})", {"mask:", "expected a mask kind or an object"}},
      {R"({"mask": {"kind": "causal", "top_left": 1}})", {"mask.top_left:", "expected true or false"}},
      {R"({"mask": {"top_left": true}})", {"mask.kind:", "missing"}},
      {R"({"mask": {"kind": "all_of", "masks": ["causal", "none", {"kind": 7}]}})",
       {"mask.masks[2].kind:", "expected a string"}},
      {R"({"mask": {"kind": "all_of", "masks": {"kind": "causal"}}})", {"mask.masks:", "expected an array"}},
      {R"({"mask": {"kind": "custom", "snippet": ["return true;"]}})", {"mask.snippet:", "expected a string"}},
      {R"({"score_mod": {"kind": "custom", "snippet": 3}})", {"score_mod.snippet:", "expected a string"}},
      {R"({"score_mod": {"kind": true}})", {"score_mod.kind:", "expected a string"}},
      {R"({"score_mod": 1})", {"score_mod:", "expected a score-mod kind or an object"}},
      {R"([{"depth": 64}])", {"config:", "expected a JSON object", "an array"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    const std::string msg = config_error([&] { from_text(c.text); }, {});
    for (const std::string& w : c.words)
      EXPECT_NE(msg.find(w), std::string::npos) << "'" << w << "' missing from: " << msg;
  }
  // Integral values are integers however they are written (JSON Schema's "integer" too).
  EXPECT_EQ(from_text(R"({"depth": 128.0})").depth, 128);
  EXPECT_EQ(from_text(R"({"depth": 64, "BN": 0, "group": 65535})").group, 65535);
}

TEST(ConfigJsonStrict, IntRangesHoldForCxxConfigsToo) {
  FA4Config c = sm90a(Mask::none());
  c.BN = 1 << 30;  // 2 * BN overflowed int in the sm100a TMEM check
  config_error([&] { jit::resolve(c); }, {"BN:", "1073741824", "0 .. 1024"});
  c = sm90a(Mask::none());
  c.depth = 2147483647;  // (depth + 63) overflowed before the depth check
  config_error([&] { jit::resolve(c); }, {"depth:", "1 .. 1024"});
  c = sm90a(Mask::none());
  c.num_q_heads = -4;
  config_error([&] { jit::resolve(c); }, {"num_q_heads:", "-4"});
}

// Fields that mean nothing for their kind were ignored; now they are refused, naming the field.
TEST(ConfigConflicts, FieldsTheKindDoesNotUseAreRefused) {
  Mask causal_with_snippet = Mask::causal();
  causal_with_snippet.snippet = "return false;";
  config_error([&] { jit::resolve(sm90a(causal_with_snippet)); }, {"mask.snippet", "only custom masks"});
  Mask none_top_left = Mask::none();
  none_top_left.top_left = true;
  config_error([&] { jit::resolve(sm90a(none_top_left)); }, {"mask.top_left", "means nothing for a none mask"});
  Mask custom_top_left = Mask::custom("return true;");
  custom_top_left.top_left = true;
  config_error([&] { jit::resolve(sm90a(custom_top_left)); }, {"mask.top_left", "custom"});
  Mask all_top_left = Mask::all_of({Mask::causal(true)});
  all_top_left.top_left = true;
  config_error([&] { jit::resolve(sm90a(all_top_left)); }, {"mask.top_left", "all_of"});
  // A prefix widens a band (causal, sliding_window); other kinds refuse it, naming the field.
  for (Mask m : {Mask::none(), Mask::chunked(), Mask::custom("return true;"), Mask::any_of({Mask::causal()})}) {
    m.prefix = true;
    config_error([&] { jit::resolve(sm90a(m)); }, {"mask.prefix", "only causal and sliding_window masks"});
  }
  for (Mask m : {Mask::causal(), Mask::sliding_window(true)}) {
    m.prefix = true;
    EXPECT_NO_THROW(jit::resolve(sm90a(m)));
  }
  config_error([] { from_text(R"({"mask": {"kind": "chunked", "prefix": true}})"); }, {"mask.prefix", "chunked"});
  config_error([] { from_text(R"({"mask": {"kind": "causal", "prefix": 1}})"); },
               {"mask.prefix:", "expected true or false"});
  Mask window_block = Mask::sliding_window();
  window_block.block_snippet = "return SKIP;";
  config_error([&] { jit::resolve(sm90a(window_block)); }, {"mask.block_snippet", "only custom masks"});
  FA4Config sm = sm90a(Mask::none());
  sm.score_mod = ScoreMod::softcap();
  sm.score_mod.snippet = "return score;";
  config_error([&] { jit::resolve(sm); }, {"score_mod.snippet", "only custom score-mods"});
  // One kernel has one causal alignment: masks that disagree cannot both hold.
  config_error(
      [] {
        jit::resolve(sm90a(Mask::all_of({Mask::causal(true), Mask::sliding_window(false)})));
      },
      {"mask.masks[1].top_left", "mask.masks[0] has top_left true"});
  EXPECT_NO_THROW(jit::resolve(
      sm90a(Mask::all_of({Mask::causal(true), Mask::sliding_window(true), Mask::custom("return true;")}))));
  for (const Mask& m : {Mask::causal(true), Mask::sliding_window(true), Mask{Mask::Kind::chunked, true, {}, {}, {}}})
    EXPECT_NO_THROW(jit::resolve(sm90a(m)));

  // From JSON: the same refusals, and even an empty field the kind does not take.
  config_error([] { from_text(R"({"mask": {"kind": "causal", "snippet": "return false;"}})"); },
               {"mask.snippet", "causal"});
  config_error([] { from_text(R"({"mask": {"kind": "none", "snippet": ""}})"); },
               {"mask.snippet", "a none mask does not take"});
  config_error([] { from_text(R"({"mask": {"kind": "none", "top_left": true}})"); }, {"mask.top_left", "none"});
  config_error([] { from_text(R"({"mask": {"kind": "causal", "block_snippet": ""}})"); },
               {"mask.block_snippet", "causal"});
  config_error([] { from_text(R"({"mask": {"kind": "chunked", "masks": []}})"); }, {"mask.masks", "chunked"});
  config_error([] { from_text(R"({"score_mod": {"kind": "alibi", "snippet": "return score;"}})"); },
               {"score_mod.snippet", "alibi"});
  config_error(
      [] { from_text(R"({"mask": {"kind": "any_of", "masks": ["causal", {"kind": "causal", "top_left": true}]}})"); },
      {"mask.masks[1].top_left", "mask.masks[0] has top_left false"});
  config_error([] { from_text(R"({"mask": {"kind": "custom"}})"); }, {"mask.snippet", "an empty body"});
}

// Snippets are pasted verbatim: each of these compiled into something else (or nothing).
TEST(SnippetChecks, SnippetsCannotBreakTheGeneratedFile) {
  struct Case {
    std::string body;
    std::vector<std::string> words;
  };
  const Case cases[] = {
      {"return true; }\nstruct Evil {", {"mask snippet line 1", "unbalanced '}'"}},
      {"bool a = (q_idx > 0;\nreturn a;", {"mask snippet line 1", "'(' is never closed"}},
      {"return true;\n) ;", {"mask snippet line 2", "unbalanced ')'"}},
      {"int a[2] = {0, 1);\nreturn a[0];", {"mask snippet line 1", "')' does not match the '{'"}},
      {"return true;\n#define __syncthreads()\n", {"mask snippet line 2", "preprocessor directive"}},
      {"  #  include <x>\nreturn true;", {"mask snippet line 1", "preprocessor directive"}},
      {"/* c */ #if 0\nreturn true;", {"mask snippet line 1", "preprocessor directive"}},
      {"return true;\n%:define X", {"mask snippet line 2", "preprocessor directive"}},
      {"return true; %>", {"mask snippet line 1", "unbalanced '}'"}},  // the digraph of }
      {"return true; /* the rest of the file", {"mask snippet line 1", "comment is not closed"}},
      {"return true;\nconst char* s = \"abc;\n", {"mask snippet line 2", "string literal is not closed"}},
      {std::string("return true;\nint x = 1;\0 }", 26), {"mask snippet line 2", "NUL byte"}},
      {"return true; // \\", {"mask snippet line 1", "backslash ends the snippet"}},
      {"return true;\n\xff\xfe", {"mask snippet line 2", "not valid UTF-8"}},
      {"return true;\nauto s = R\"x(never closed", {"mask snippet line 2", "raw string"}},
      {"return " + std::string(1000, '(') + "true" + std::string(1000, ')') + ";",
       {"mask snippet line 1", "deeper than 256"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.body.substr(0, 60));
    const std::string msg = config_error([&] { jit::resolve(sm90a(Mask::custom(c.body))); }, {});
    for (const std::string& w : c.words)
      EXPECT_NE(msg.find(w), std::string::npos) << "'" << w << "' missing from: " << msg;
  }
  // A line splice joins lines the way the compiler does: the error is on the line the user wrote.
  config_error([] { jit::resolve(sm90a(Mask::custom("int x = 1; \\\n\n}"))); },
               {"mask snippet line 3", "unbalanced '}'"});
  // Each snippet is named by its field's JSON path.
  config_error(
      [] {
        jit::resolve(sm90a(Mask::all_of({Mask::causal(), Mask::custom("return true;", "return SKIP; }")})));
      },
      {"mask.masks[1] block_snippet line 1", "unbalanced '}'"});
  FA4Config sm = sm90a(Mask::none());
  sm.score_mod = ScoreMod::custom("float s = score;\n#undef max\nreturn s;");
  config_error([&] { jit::resolve(sm); }, {"score_mod snippet line 2", "preprocessor directive"});
  config_error([] { from_text(R"({"mask": {"kind": "custom", "snippet": "return true;\n}"}})"); },
               {"mask snippet line 2", "unbalanced '}'"});
}

TEST(SnippetChecks, OrdinaryCodeIsAccepted) {
  const std::string ok[] = {
      "return true;",
      "{ int a[2] = {0, 1}; return a[q_idx & 1] == 0; }",
      "const char* s = \"}{)(#define\"; char c = '}'; char d = '\\''; return s[0] != c && d != 0;",
      "auto r = R\"x(})\" #define )x\"; return r[0] != 0;",
      "// } ( #define\n/* { ] */ return true; // trailing comment",
      "int n = 1'000'000; float f = 1e+5f, g = .5e-3f; unsigned h = 0x1p-3 > 0; return n > f + g + h;",
      "_Pragma(\"unroll\") for (int i = 0; i < 4; ++i) { if (i == q_idx) return false; }\nreturn true;",
      "auto f = [&](int x) { return x < kv_idx; }; return f(q_idx);",
      "const char* w = u8\"\u00e9}\"; return w[0] != 0 && L'}' != 0;",
      "int x = 1; \\\nreturn x == 1;",
      "return " + std::string(256, '(') + "true" + std::string(256, ')') + ";",
      "std::vector<::fa4::bf16_t>* p = nullptr; return p == nullptr;",  // <:: is < then ::
      "int a<:2:> = <%0, 1%>; return a<:0:> == 0;",                     // digraphs, balanced
  };
  for (const std::string& body : ok) {
    SCOPED_TRACE(body);
    EXPECT_NO_THROW(jit::resolve(sm90a(Mask::custom(body))));
    FA4Config c = sm90a(Mask::none());
    c.score_mod = ScoreMod::custom(body);
    EXPECT_NO_THROW(jit::resolve(c));
  }
}

}  // namespace
