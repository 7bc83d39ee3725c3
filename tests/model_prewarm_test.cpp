// model_kernels() on config.json files of real models (tests/models, copied from the Hub; no
// downloads) and `fa4jit prewarm --model` end to end.
#include <gtest/gtest.h>

#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "fa4jit/advanced.hpp"
#include "fa4jit/errors.hpp"
#include "generator/model.hpp"
#include "tests/support/cli_process.hpp"

namespace {

using jit::DType;
using jit::FA4Config;
using jit::Mask;
using jit::ModelKernel;
using jit::ScoreMod;

nlohmann::json model(const std::string& name) {
  std::ifstream f(std::string(FA4JIT_TEST_MODELS) + "/" + name + ".json");
  EXPECT_TRUE(f.good()) << name;
  return nlohmann::json::parse(f);
}

// The config the Python ops request (python/fa4jit/ops.py _get_kernel): group only when packed.
FA4Config expected(DType dtype, int depth, Mask mask, ScoreMod score = ScoreMod::identity(), int packed_group = 0) {
  FA4Config c;
  c.dtype = dtype;
  c.depth = depth;
  c.mask = std::move(mask);
  c.score_mod = std::move(score);
  c.pack_gqa = packed_group > 0;
  c.group = packed_group;
  return c;
}

// sm_90a's packed prefill tile (jit::choose_kernel): the packed kernel at BM 128 (192 at head dim 64;
// head dims 64, 96, 128 and 256).
FA4Config prefill_tile(DType dtype, int depth, Mask mask, ScoreMod score, int group) {
  FA4Config c = expected(dtype, depth, std::move(mask), std::move(score), group);
  c.BM = depth <= 64 ? 192 : 128;
  return c;
}

std::vector<FA4Config> configs(const std::vector<ModelKernel>& ks) {
  std::vector<FA4Config> out;
  for (const ModelKernel& k : ks) out.push_back(k.config);
  return out;
}

std::string refusal(const nlohmann::json& j, jit::ModelOptions o = {}) {
  try {
    jit::model_kernels(j, o);
  } catch (const jit::ConfigError& e) {
    return e.what();
  }
  return "accepted";
}

TEST(ModelKernels, Llama3PrefillAndPackedDecode) {
  const auto ks = jit::model_kernels(model("llama3_8b"));
  EXPECT_EQ(configs(ks), (std::vector<FA4Config>{expected(DType::bf16, 128, Mask::causal()),
                                                 expected(DType::bf16, 128, Mask::causal(), {}, 4),
                                                 prefill_tile(DType::bf16, 128, Mask::causal(), {}, 4)}));
  EXPECT_EQ(ks[0].use, "prefill: full-attention all layers");
  EXPECT_EQ(ks[1].use, "decode (Sq x 4 <= 128, packed GQA): full-attention all layers");
  EXPECT_EQ(ks[2].use,
            "packed prefill (varlen batches of uneven lengths or short chunks, BM 128): full-attention all layers");
  EXPECT_EQ(ks[0].only_arch, "");
  EXPECT_EQ(ks[1].only_arch, "");
  EXPECT_EQ(ks[2].only_arch, "sm_90a");  // the other backends' packed default is their prefill tile
}

// Multi-head attention (a Llama with 32 query and 32 KV heads, as Llama-2-7B): nothing packs;
// sm_90a decodes at its 64-row tile.
TEST(ModelKernels, MultiHeadAttentionDecodesUnpackedAtTheDecodeTileOnHopper) {
  nlohmann::json mha = model("llama3_8b");
  mha["num_key_value_heads"] = 32;
  const auto ks = jit::model_kernels(mha);
  FA4Config tile = expected(DType::bf16, 128, Mask::causal());
  tile.BM = 64;
  ASSERT_EQ(configs(ks), (std::vector<FA4Config>{expected(DType::bf16, 128, Mask::causal()), tile}));
  EXPECT_EQ(ks[0].use, "prefill and decode: full-attention all layers");
  EXPECT_EQ(ks[1].use, "decode (Sq <= 64, and d128 continuous-batching steps, BM 64): full-attention all layers");
  EXPECT_EQ(ks[0].only_arch, "");
  EXPECT_EQ(ks[1].only_arch, "sm_90a");
  FA4Config c = ks[1].config;
  c.arch = "sm_90a";
  EXPECT_TRUE(jit::supported(c));
}

TEST(ModelKernels, Qwen2GroupOfSevenDecodesPackedAndIgnoresAnUnusedWindow) {
  // 28 / 4 heads: a group of 7 packs too (9 queries per 64-row span and a padding row,
  // templates/common/packed_rows.h), so Python packs its decode as it does a group of 4;
  // use_sliding_window false leaves sliding_window unused.
  const auto ks = jit::model_kernels(model("qwen2_7b"));
  EXPECT_EQ(configs(ks), (std::vector<FA4Config>{expected(DType::bf16, 128, Mask::causal()),
                                                 expected(DType::bf16, 128, Mask::causal(), {}, 7),
                                                 prefill_tile(DType::bf16, 128, Mask::causal(), {}, 7)}));
  EXPECT_EQ(ks[0].use, "prefill: full-attention all layers");
  EXPECT_EQ(ks[1].use, "decode (Sq x 7 <= 128, packed GQA): full-attention all layers");
}

TEST(ModelKernels, Qwen3) {
  EXPECT_EQ(configs(jit::model_kernels(model("qwen3_8b"))),
            (std::vector<FA4Config>{expected(DType::bf16, 128, Mask::causal()),
                                    expected(DType::bf16, 128, Mask::causal(), {}, 4),
                                    prefill_tile(DType::bf16, 128, Mask::causal(), {}, 4)}));
}

TEST(ModelKernels, MistralSlidesEveryLayer) {
  EXPECT_EQ(configs(jit::model_kernels(model("mistral_7b_v01"))),
            (std::vector<FA4Config>{expected(DType::bf16, 128, Mask::sliding_window()),
                                    expected(DType::bf16, 128, Mask::sliding_window(), {}, 4),
                                    prefill_tile(DType::bf16, 128, Mask::sliding_window(), {}, 4)}));
}

TEST(ModelKernels, Gemma2AlternatesLayersWithSoftcapAndNeedsADtypeForItsFloat32Checkpoint) {
  const std::string why = refusal(model("gemma2_9b"));
  EXPECT_NE(why.find("config.json: torch_dtype: 'float32'"), std::string::npos) << why;
  jit::ModelOptions o;
  o.dtype = DType::bf16;
  const auto ks = jit::model_kernels(model("gemma2_9b"), o);
  EXPECT_EQ(configs(ks),
            (std::vector<FA4Config>{expected(DType::bf16, 256, Mask::causal(), ScoreMod::softcap()),
                                    expected(DType::bf16, 256, Mask::causal(), ScoreMod::softcap(), 2),
                                    prefill_tile(DType::bf16, 256, Mask::causal(), ScoreMod::softcap(), 2),
                                    expected(DType::bf16, 256, Mask::sliding_window(), ScoreMod::softcap()),
                                    expected(DType::bf16, 256, Mask::sliding_window(), ScoreMod::softcap(), 2),
                                    prefill_tile(DType::bf16, 256, Mask::sliding_window(), ScoreMod::softcap(), 2)}));
  EXPECT_EQ(ks[0].use, "prefill: full-attention layers 1, 3, 5, 7, 9, 11 (+15 more)");
  EXPECT_EQ(ks[3].use, "prefill: sliding-window layers 0, 2, 4, 6, 8, 10 (+15 more)");
}

TEST(ModelKernels, Gemma3ReadsTheTextConfigAndItsFiveToOnePattern) {
  const auto ks = jit::model_kernels(model("gemma3_4b"));
  EXPECT_EQ(configs(ks), (std::vector<FA4Config>{expected(DType::bf16, 256, Mask::causal()),
                                                 expected(DType::bf16, 256, Mask::causal(), {}, 2),
                                                 prefill_tile(DType::bf16, 256, Mask::causal(), {}, 2),
                                                 expected(DType::bf16, 256, Mask::sliding_window()),
                                                 prefill_tile(DType::bf16, 256, Mask::sliding_window(), {}, 2),
                                                 expected(DType::bf16, 256, Mask::sliding_window(), {}, 2)}));
  EXPECT_EQ(ks[0].use, "prefill: full-attention layers 5, 11, 17, 23, 29");
  // One prompt under the 1024-key window packs at sm_90a's prefill tile (docs/PERF.md run 98), the
  // tile of the varlen batches too (so built once).
  EXPECT_EQ(ks[4].only_arch, "sm_90a");
  EXPECT_EQ(ks[4].use.rfind("prefill (a window of 1024 keys, BM 128): sliding-window layers", 0), 0u) << ks[4].use;
}

TEST(ModelKernels, GptOssFollowsLayerTypesAndNotesItsSinks) {
  // Its config.json states no torch_dtype (transformers would load float32): the caller says.
  EXPECT_NE(refusal(model("gpt_oss_20b")).find("torch_dtype: missing"), std::string::npos);
  jit::ModelOptions o;
  o.dtype = DType::bf16;
  const auto ks = jit::model_kernels(model("gpt_oss_20b"), o);
  // sm_90a only: its packed prefill tile (BM 192 at head dim 64) for the full-attention layers'
  // varlen batches, and for the 128-key window one prompt's 64-row tile, which a varlen batch under
  // that window runs too, unpacked (jit::choose_kernel, which the runtime asks with the window's keys).
  FA4Config window_tile = expected(DType::bf16, 64, Mask::sliding_window());
  window_tile.BM = 64;
  EXPECT_EQ(configs(ks),
            (std::vector<FA4Config>{
                expected(DType::bf16, 64, Mask::causal()), expected(DType::bf16, 64, Mask::causal(), {}, 8),
                prefill_tile(DType::bf16, 64, Mask::causal(), {}, 8), expected(DType::bf16, 64, Mask::sliding_window()),
                window_tile, expected(DType::bf16, 64, Mask::sliding_window(), {}, 8)}));
  for (const auto& k : ks) EXPECT_NE(k.use.find("attention sinks: a launch argument"), std::string::npos) << k.use;
  EXPECT_EQ(ks[2].only_arch, "sm_90a");
  EXPECT_EQ(ks[2].use.rfind("packed prefill (varlen batches of uneven lengths or short chunks, BM 192)", 0), 0u)
      << ks[2].use;
  EXPECT_EQ(ks[4].only_arch, "sm_90a");
  EXPECT_EQ(ks[4].use.rfind("prefill (a window of 128 keys, BM 64): sliding-window layers", 0), 0u) << ks[4].use;
  for (const auto& k : ks)
    if (&k != &ks[2] && &k != &ks[4]) EXPECT_EQ(k.only_arch, "") << k.use;
}

// Families beyond the zoo's: Command R (cohere, MHA: the decode tile), Command R7B / A (cohere2:
// every 4th layer full unless sliding_window_pattern says otherwise), GLM-4 (a group of 16 over 2
// KV heads), StarCoder2 (a window on every layer).
TEST(ModelKernels, CohereGlmAndStarcoder2Families) {
  FA4Config tile = expected(DType::bf16, 128, Mask::causal());
  tile.BM = 64;
  EXPECT_EQ(configs(jit::model_kernels(model("command_r"))),
            (std::vector<FA4Config>{expected(DType::bf16, 128, Mask::causal()), tile}));

  nlohmann::json c2 = model("command_r");
  c2["model_type"] = "cohere2";
  c2["num_hidden_layers"] = 8;
  c2["sliding_window"] = 4096;
  auto ks = jit::model_kernels(c2);
  ASSERT_EQ(ks.size(), 4u);
  EXPECT_EQ(ks[0].config.mask.kind, Mask::Kind::causal);
  EXPECT_EQ(ks[0].use, "prefill and decode: full-attention layers 3, 7");
  EXPECT_EQ(ks[2].config.mask.kind, Mask::Kind::sliding_window);
  EXPECT_EQ(ks[2].use, "prefill and decode: sliding-window layers 0, 1, 2, 4, 5, 6");
  c2["sliding_window_pattern"] = 2;
  EXPECT_EQ(jit::model_kernels(c2)[0].use, "prefill and decode: full-attention layers 1, 3, 5, 7");

  nlohmann::json glm = model("llama3_8b");
  glm["model_type"] = "glm4";
  glm["num_key_value_heads"] = 2;
  EXPECT_EQ(configs(jit::model_kernels(glm)),
            (std::vector<FA4Config>{expected(DType::bf16, 128, Mask::causal()),
                                    expected(DType::bf16, 128, Mask::causal(), {}, 16),
                                    prefill_tile(DType::bf16, 128, Mask::causal(), {}, 16)}));

  nlohmann::json sc2 = model("llama3_8b");
  sc2["model_type"] = "starcoder2";
  sc2["sliding_window"] = 4096;
  ks = jit::model_kernels(sc2);
  ASSERT_FALSE(ks.empty());
  for (const auto& k : ks) EXPECT_EQ(k.config.mask.kind, Mask::Kind::sliding_window) << k.use;
}

TEST(ModelKernels, UnsupportedFeaturesAreNamed) {
  nlohmann::json j = model("llama3_8b");
  j["model_type"] = "bert";
  EXPECT_NE(refusal(j).find("config.json: model_type: 'bert' is not a model fa4jit knows"), std::string::npos);
  j = model("llama3_8b");
  j["num_key_value_heads"] = 5;
  EXPECT_NE(refusal(j).find("num_key_value_heads: 5 does not divide num_attention_heads (32)"), std::string::npos);
  j = model("gpt_oss_20b");
  j["torch_dtype"] = "bfloat16";
  j["layer_types"][3] = "linear_attention";
  EXPECT_NE(refusal(j).find("layer_types[3]: 'linear_attention' has no fa4jit kernel"), std::string::npos);
  j = model("gpt_oss_20b");
  j["torch_dtype"] = "bfloat16";
  j.erase("sliding_window");
  EXPECT_NE(refusal(j).find("sliding_window: layer_types has sliding_attention layers but no window"),
            std::string::npos);
  j = model("llama3_8b");
  j["layer_types"] = nlohmann::json::array();
  for (int i = 0; i < 32; ++i) j["layer_types"].push_back(i == 5 ? "chunked_attention" : "full_attention");
  EXPECT_NE(refusal(j).find("attention_chunk_size: layer_types has chunked_attention layers but no chunk size"),
            std::string::npos)
      << refusal(j);
  j = model("llama3_8b");
  j.erase("torch_dtype");
  EXPECT_NE(refusal(j).find("torch_dtype: missing"), std::string::npos);
  j = model("llama3_8b");
  j["head_dim"] = "128";
  EXPECT_NE(refusal(j).find("head_dim: expected a positive integer"), std::string::npos);
  EXPECT_NE(refusal(nlohmann::json::array()).find("expected an object"), std::string::npos);
}

// Llama 4 (Scout: 40/8 heads, d128): 3 of 4 layers attend within their chunk of attention_chunk_size
// positions (the layers with rope; one NoPE full-attention layer in 4, as transformers'
// Llama4TextConfig derives them without layer_types), causal within it: the mask the ops ask for
// with causal and a chunk_size. Prefill and packed decode for each kind, and every one resolves.
TEST(ModelKernels, Llama4ChunkedLayersTakeTheChunkedCausalMask) {
  const auto ks = jit::model_kernels(model("llama4_scout"), {});
  const Mask chunked = Mask::all_of({Mask::causal(), Mask::chunked()});
  std::vector<std::string> uses;
  for (const ModelKernel& k : ks) {
    uses.push_back(k.use);
    FA4Config c = k.config;
    c.arch = k.only_arch.empty() ? "sm_90a" : k.only_arch;
    std::string why;
    EXPECT_TRUE(jit::supported(c, &why)) << k.use << ": " << why;
  }
  ASSERT_GE(ks.size(), 4u);
  EXPECT_EQ(ks[0].config, expected(DType::bf16, 128, Mask::causal()));
  EXPECT_EQ(ks[0].use, "prefill: full-attention layers 3, 7, 11, 15, 19, 23 (+6 more)");
  const auto first_chunked =
      std::find_if(ks.begin(), ks.end(), [&](const ModelKernel& k) { return k.config.mask == chunked; });
  ASSERT_NE(first_chunked, ks.end()) << fmt::format("{}", fmt::join(uses, "\n"));
  EXPECT_EQ(first_chunked->config, expected(DType::bf16, 128, chunked));
  EXPECT_EQ(first_chunked->use, "prefill: chunked-attention layers 0, 1, 2, 4, 5, 6 (+30 more)");
  EXPECT_TRUE(std::any_of(ks.begin(), ks.end(), [&](const ModelKernel& k) {
    return k.config == expected(DType::bf16, 128, chunked, ScoreMod::identity(), 5);
  })) << "the chunked layers' packed decode (group 40 / 8)";

  // no_rope_layers, where listed, say which layers have rope (the chunked ones).
  nlohmann::json j = model("llama4_scout");
  j["text_config"]["num_hidden_layers"] = 4;
  j["text_config"]["no_rope_layers"] = {1, 0, 0, 1};
  const auto four = jit::model_kernels(j, {});
  EXPECT_EQ(four[0].use, "prefill: full-attention layers 1, 2");
  j["text_config"]["no_rope_layers"] = {1, 0};
  EXPECT_NE(refusal(j).find("no_rope_layers: expected one entry per layer (4)"), std::string::npos) << refusal(j);
}

// Every kernel a listed model needs resolves on sm_90a (d256 included); sm_100a refuses d256.
TEST(ModelKernels, EveryModelKernelResolvesOnHopper) {
  jit::ModelOptions o;
  o.dtype = DType::bf16;
  for (const char* name :
       {"llama3_8b", "qwen2_7b", "qwen3_8b", "mistral_7b_v01", "gemma2_9b", "gemma3_4b", "gpt_oss_20b", "command_r"})
    for (const ModelKernel& k : jit::model_kernels(model(name), o)) {
      FA4Config c = k.config;
      c.arch = "sm_90a";
      EXPECT_TRUE(jit::supported(c)) << name << ": " << k.use;
    }
}

// Phi-3-mini (head dim 96, a 2047-key window on every layer) resolves on every backend, padded to
// 128: sm_90a, the portable kernel (sm_80, sm_90, sm_120) and sm_100a.
TEST(ModelKernels, Phi3MiniResolvesOnEveryBackend) {
  jit::ModelOptions o;
  o.dtype = DType::bf16;
  const auto ks = jit::model_kernels(model("phi3_mini_4k"), o);
  ASSERT_FALSE(ks.empty());
  for (const char* arch : {"sm_90a", "sm_80", "sm_90", "sm_120", "sm_100a"})
    for (const ModelKernel& k : ks) {
      if (!k.only_arch.empty() && k.only_arch != arch) continue;  // sm_90a's own tiles (BM 64 decode)
      FA4Config c = k.config;
      c.arch = arch;
      EXPECT_EQ(c.depth, 96) << k.use;
      EXPECT_EQ(c.mask.kind, Mask::Kind::sliding_window) << k.use;
      ASSERT_TRUE(jit::supported(c)) << arch << ": " << k.use;
      EXPECT_EQ(jit::resolve(c).padded_depth, 128) << arch << ": " << k.use;
    }
}

// An FP8 KV cache (ModelOptions::kv_dtype e4m3): beside each kernel whose keys come from the cache,
// its e4m3 twin, which resolves on sm_90a; MLA's unabsorbed kernel (K and V computed) has none.
TEST(ModelKernels, AnFp8KvCacheAddsTheKernelsThatReadIt) {
  jit::ModelOptions o;
  o.kv_dtype = DType::e4m3;
  const auto ks = jit::model_kernels(model("llama3_8b"), o);
  ASSERT_EQ(ks.size(), 5u);  // prefill, decode, each with its twin; the prefill tile reads 16-bit K/V only
  EXPECT_EQ(ks[4].config, prefill_tile(DType::bf16, 128, Mask::causal(), {}, 4));
  for (std::size_t i = 0; i < 4; i += 2) {
    EXPECT_FALSE(ks[i].config.kv_dtype.has_value()) << ks[i].use;
    FA4Config twin = ks[i].config;
    twin.kv_dtype = DType::e4m3;
    EXPECT_EQ(jit::to_json(ks[i + 1].config), jit::to_json(twin)) << ks[i + 1].use;
    EXPECT_EQ(ks[i + 1].use, ks[i].use + "; over an e4m3 KV cache");
    FA4Config c = ks[i + 1].config;
    c.arch = "sm_90a";
    EXPECT_TRUE(jit::supported(c)) << ks[i + 1].use;
  }
  const auto ds = jit::model_kernels(model("deepseek_v3"), o);
  ASSERT_EQ(ds.size(), 5u);  // Q/K 192 / V 128, then per TP degree the latent decode and its twin
  EXPECT_EQ(ds[0].config.depth, 192);
  EXPECT_FALSE(ds[0].config.kv_dtype.has_value());
  for (std::size_t i : {2u, 4u}) {
    EXPECT_EQ(ds[i].config.depth, 576);
    EXPECT_EQ(ds[i].config.kv_dtype, DType::e4m3);
    FA4Config c = ds[i].config;
    c.arch = "sm_90a";
    EXPECT_TRUE(jit::supported(c)) << ds[i].use;
  }
  o.kv_dtype = DType::bf16;
  try {
    jit::model_kernels(model("llama3_8b"), o);
    ADD_FAILURE() << "kv_dtype bf16 accepted";
  } catch (const jit::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("kv_dtype: bf16"), std::string::npos) << e.what();
  }
}

using Cli = jit::testing::CliProcessTest;

TEST_F(Cli, PrewarmModelPrintsTheKernelsAsJson) {
  const std::string file = std::string(FA4JIT_TEST_MODELS) + "/gpt_oss_20b.json";
  const auto r = run("prewarm --model " + file + " --dtype bf16 --arch sm_90a,sm_100a --print");
  ASSERT_EQ(r.rc, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out.substr(r.out.find('[')));
  // 4 kernels x 2 archs, and sm_90a's packed prefill tile (BM 192 at head dim 64) and its tile for
  // the 128-key window
  ASSERT_EQ(j.size(), 10u) << r.out;
  EXPECT_EQ(j[0]["config"]["arch"], "sm_90a");
  EXPECT_EQ(j[1]["config"]["arch"], "sm_100a");
  EXPECT_EQ(j[2]["config"]["pack_gqa"], true);
  EXPECT_EQ(j[2]["config"]["group"], 8);
  EXPECT_NE(j[2]["use"].get<std::string>().find("decode"), std::string::npos);
  EXPECT_EQ(j[4]["config"]["arch"], "sm_90a");
  EXPECT_EQ(j[4]["config"]["BM"], 192);
  EXPECT_EQ(j[4]["config"]["pack_gqa"], true);
  EXPECT_EQ(j[7]["config"]["arch"], "sm_90a");
  EXPECT_EQ(j[7]["config"]["BM"], 64);
  EXPECT_EQ(j[7]["config"]["mask"]["kind"], "sliding_window");
  EXPECT_EQ(run("cache ls").out, "") << "--print compiles nothing";
}

TEST_F(Cli, PrewarmModelWithAnFp8KvCachePrintsTheTwins) {
  const std::string file = std::string(FA4JIT_TEST_MODELS) + "/qwen2_5_7b.json";
  const auto r = run("prewarm --model " + file + " --kv-dtype e4m3 --arch sm_90a --print");
  ASSERT_EQ(r.rc, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out.substr(r.out.find('[')));
  ASSERT_EQ(j.size(), 5u) << r.out;
  EXPECT_EQ(j[1]["config"]["kv_dtype"], "e4m3");
  EXPECT_EQ(j[3]["config"]["kv_dtype"], "e4m3");
  EXPECT_EQ(j[3]["config"]["group"], 7);
  EXPECT_FALSE(j[4]["config"].contains("kv_dtype")) << r.out;  // the packed prefill tile reads 16-bit K/V
  EXPECT_EQ(j[4]["config"]["BM"], 128);
  auto bad = run("prewarm --kv-dtype e4m3 --preset default --print");
  EXPECT_EQ(bad.rc, 2);
  EXPECT_NE(bad.out.find("--kv-dtype"), std::string::npos) << bad.out;
  bad = run("prewarm --model " + file + " --kv-dtype bf16 --print");
  EXPECT_EQ(bad.rc, 2) << bad.out;
}

TEST_F(Cli, PrewarmModelCompilesThenHits) {
  const std::string file = std::string(FA4JIT_TEST_MODELS) + "/llama3_8b.json";
  const auto first = run("prewarm --model " + file + " --arch sm_90a --jobs 2");
  EXPECT_EQ(first.rc, 0) << first.out;
  EXPECT_NE(first.out.find("3 kernels: 3 compiled, 0 hit, 0 failed"), std::string::npos) << first.out;
  EXPECT_NE(first.out.find("(decode (Sq x 4 <= 128, packed GQA): full-attention all layers)"), std::string::npos)
      << first.out;
  const auto second = run("prewarm --model " + file + " --arch sm_90a");
  EXPECT_NE(second.out.find("3 kernels: 0 compiled, 3 hit, 0 failed"), std::string::npos) << second.out;
  // sm_100a has no packed prefill tile of its own: prefill and decode only.
  const auto blackwell = run("prewarm --model " + file + " --arch sm_100a --print");
  ASSERT_EQ(blackwell.rc, 0) << blackwell.out;
  EXPECT_EQ(nlohmann::json::parse(blackwell.out.substr(blackwell.out.find('['))).size(), 2u) << blackwell.out;
}

TEST_F(Cli, PrewarmModelRefusalsNameTheFileKeyAndArch) {
  const std::string dir = std::string(FA4JIT_TEST_MODELS) + "/";
  auto r = run("prewarm --model " + dir + "gemma2_9b.json --arch sm_90a --print");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find("--model " + dir + "gemma2_9b.json: config.json: torch_dtype: 'float32'"), std::string::npos)
      << r.out;
  r = run("prewarm --model " + dir + "gemma2_9b.json --dtype bf16 --arch sm_100a --print");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find("prefill: full-attention layers 1, 3, 5, 7, 9, 11 (+15 more) on sm_100a: depth: 256"),
            std::string::npos)
      << r.out;
  // The portable backend runs d256 (BM 64).
  EXPECT_EQ(run("prewarm --model " + dir + "gemma2_9b.json --dtype bf16 --arch sm_80 --print").rc, 0);
  r = run("prewarm --dtype bf16 --arch sm_90a --print");
  EXPECT_EQ(r.rc, 2) << r.out;  // --dtype without --model: a usage error
}

}  // namespace

namespace {

// DeepSeek-V3 and Kimi-K2 (MLA as transformers runs it, up-projections not absorbed): one causal
// kernel with Q/K 128 + 64 rope columns and V 128, for prefill and decode (one KV head per query
// head, so nothing packs). Each resolves on sm_90a.
TEST(ModelKernels, DeepSeekStyleLatentAttentionRunsQk192AndV128) {
  for (const char* name : {"deepseek_v3", "kimi_k2"}) {
    const auto ks = jit::model_kernels(model(name), {});
    ASSERT_GE(ks.size(), 1u) << name;
    FA4Config want = expected(DType::bf16, 192, Mask::causal());
    want.depth_v = 128;
    EXPECT_EQ(ks[0].config, want) << name;
    EXPECT_EQ(ks[0].use, "prefill and decode: full-attention all layers") << name;
    FA4Config c = ks[0].config;
    c.arch = "sm_90a";
    std::string why;
    EXPECT_TRUE(jit::supported(c, &why)) << name << ": " << why;
  }
  // DeepSeek-V2-Lite (no q_lora_rank): the same pair; GLM-4.7-Flash: Q/K 192 + 64 and V 256, one depth.
  const auto lite = jit::model_kernels(model("deepseek_v2_lite"), {});
  FA4Config want = expected(DType::bf16, 192, Mask::causal());
  want.depth_v = 128;
  EXPECT_EQ(lite.at(0).config, want);
  const auto glm = jit::model_kernels(model("glm4_7_flash"), {});
  EXPECT_EQ(glm.at(0).config, expected(DType::bf16, 256, Mask::causal()));
  for (const auto* ks : {&lite, &glm})
    for (const ModelKernel& k : *ks) {
      FA4Config c = k.config;
      c.arch = "sm_90a";
      std::string why;
      EXPECT_TRUE(jit::supported(c, &why)) << k.use << ": " << why;
    }

  nlohmann::json j = model("deepseek_v3");
  j["qk_rope_head_dim"] = 0;
  EXPECT_NE(refusal(j).find("qk_rope_head_dim"), std::string::npos);
}

// The MLA decode kernel serving engines run (up-projections absorbed, attention over the latent
// cache): Q/K kv_lora_rank + qk_rope_head_dim = 576, V kv_lora_rank = 512 (K's first columns), one
// KV head for every query head on the GPU, so group = heads per GPU, packed; causal, the model's
// dtype. One per tensor-parallel degree 1 and 8 that leaves 8 .. 128 heads: DeepSeek-V3 128 and
// 16, Kimi-K2 64 and 8. These are the derived configs, before
// resolve(): resolving them (jit::supported on sm_90a) needs the sm90a latent kernel (issue 56),
// which this test does not assume.
TEST(ModelKernels, LatentAttentionModelsDeriveAbsorbedDecodePerTensorParallelDegree) {
  struct Want {
    const char* name;
    std::vector<int> heads_per_gpu;
    std::vector<int> tp;
  };
  // DeepSeek-V2-Lite's 16 heads leave 2 a GPU at TP 8, GLM-4.7-Flash's 20 do not divide by 8.
  for (const Want& w : {Want{"deepseek_v3", {128, 16}, {1, 8}}, Want{"kimi_k2", {64, 8}, {1, 8}},
                        Want{"deepseek_v2_lite", {16}, {1}}, Want{"glm4_7_flash", {20}, {1}}}) {
    const auto ks = jit::model_kernels(model(w.name), {});
    ASSERT_EQ(ks.size(), 1 + w.heads_per_gpu.size()) << w.name;
    for (std::size_t i = 0; i < w.heads_per_gpu.size(); ++i) {
      const ModelKernel& k = ks[1 + i];
      const int heads = w.heads_per_gpu[i];
      FA4Config want = expected(DType::bf16, 512 + 64, Mask::causal(), ScoreMod::identity(), heads);
      want.depth_v = 512;
      EXPECT_EQ(k.config, want) << w.name << " " << k.use;
      EXPECT_EQ(k.config.depth, 576) << w.name;
      EXPECT_EQ(k.config.depth_v, 512) << w.name;
      EXPECT_EQ(jit::value_depth(k.config), 512) << w.name;
      EXPECT_EQ(k.config.group, heads) << w.name;
      EXPECT_EQ(heads / k.config.group, 1) << w.name << ": one KV head";
      EXPECT_TRUE(k.config.pack_gqa) << w.name;
      EXPECT_EQ(k.config.num_q_heads, 0) << w.name << ": any head count of that group (checked at launch)";
      EXPECT_TRUE(k.config.arch.empty()) << w.name;
      EXPECT_EQ(k.use, fmt::format("MLA decode, absorbed (latent KV 512 + rope 64), {} heads per GPU (TP {}): "
                                   "full-attention all layers",
                                   heads, w.tp[i]))
          << w.name;
    }
  }

  // The model's dtype (or --dtype) and latent width; fewer heads leave fewer TP degrees.
  jit::ModelOptions fp16;
  fp16.dtype = DType::fp16;
  const auto half = jit::model_kernels(model("deepseek_v3"), fp16);
  ASSERT_EQ(half.size(), 3u);
  EXPECT_EQ(half[1].config.dtype, DType::fp16);
  EXPECT_EQ(half[2].config.dtype, DType::fp16);
  nlohmann::json j = model("deepseek_v3");
  j["kv_lora_rank"] = 256;
  j["num_attention_heads"] = 16;
  j["num_key_value_heads"] = 16;
  const auto small = jit::model_kernels(j, {});
  ASSERT_EQ(small.size(), 2u);  // TP 8 would leave 2 heads: no latent kernel
  EXPECT_EQ(small[1].config.depth, 256 + 64);
  EXPECT_EQ(small[1].config.depth_v, 256);
  EXPECT_EQ(small[1].config.group, 16);

  // Without kv_lora_rank (MLA-shaped heads, no latent cache): the unabsorbed kernel only.
  j = model("deepseek_v3");
  j.erase("kv_lora_rank");
  EXPECT_EQ(jit::model_kernels(j, {}).size(), 1u);
  j = model("deepseek_v3");
  j["kv_lora_rank"] = "512";
  EXPECT_NE(refusal(j).find("config.json: kv_lora_rank: expected a positive integer"), std::string::npos) << refusal(j);
}

// `prewarm --model` lists the latent decode kernels (--print without --arch resolves nothing), and
// on an arch without the latent kernel (sm_100a, this round) the refusal names the kernel's use.
TEST_F(Cli, PrewarmModelListsTheLatentDecodeKernels) {
  const std::string file = std::string(FA4JIT_TEST_MODELS) + "/deepseek_v3.json";
  auto r = run("prewarm --model " + file + " --print");
  ASSERT_EQ(r.rc, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out.substr(r.out.find('[')));
  ASSERT_EQ(j.size(), 3u) << r.out;
  EXPECT_EQ(j[0]["config"]["depth"], 192);
  for (int i : {1, 2}) {
    EXPECT_EQ(j[i]["config"]["depth"], 576) << r.out;
    EXPECT_EQ(j[i]["config"]["depth_v"], 512) << r.out;
    EXPECT_EQ(j[i]["config"]["pack_gqa"], true) << r.out;
  }
  EXPECT_EQ(j[1]["config"]["group"], 128);
  EXPECT_EQ(j[2]["config"]["group"], 16);
  EXPECT_NE(j[2]["use"].get<std::string>().find("16 heads per GPU (TP 8)"), std::string::npos) << r.out;
  r = run("prewarm --model " + file + " --arch sm_100a --print");
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("--model " + file +
                       ": MLA decode, absorbed (latent KV 512 + rope 64), 128 heads per GPU (TP 1): full-attention all "
                       "layers on sm_100a: "),
            std::string::npos)
      << r.out;
  EXPECT_EQ(run("cache ls").out, "") << "--print compiles nothing";
}

}  // namespace
