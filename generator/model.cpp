// model_kernels(): a Hugging Face config.json -> the kernels its attention layers launch.
#include "generator/model.hpp"

#include <algorithm>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "fa4jit/advanced.hpp"  // choose_kernel
#include "fa4jit/errors.hpp"

namespace jit {

namespace {

using nlohmann::json;

// How each known family lays out its sliding-window layers when config.json has no
// `layer_types` (transformers' own defaults for that family).
enum class WindowLayout { all, every_other, every_nth_full, from_max_window_layers };

struct Family {
  const char* model_type;
  WindowLayout layout;
  bool sinks;        // learned per-head attention sinks (a launch argument, not a kernel)
  int nth_full = 6;  // every_nth_full without sliding_window_pattern: every nth layer attends fully
};

// Families whose attention is softmax attention over a causal mask, all layers or a window on some
// (rotary variants, QK norms, biases and a scale of their own change the inputs and the launch's
// softmax scale, not the kernel): as transformers runs each.
constexpr Family kFamilies[] = {
    {"llama", WindowLayout::all, false},
    {"mistral", WindowLayout::all, false},
    {"mixtral", WindowLayout::all, false},
    {"phi3", WindowLayout::all, false},
    {"qwen2", WindowLayout::from_max_window_layers, false},
    {"qwen2_moe", WindowLayout::from_max_window_layers, false},
    {"qwen2_vl", WindowLayout::from_max_window_layers, false},  // the language model of Qwen2-VL / 2.5-VL
    {"qwen2_vl_text", WindowLayout::from_max_window_layers, false},
    {"qwen2_5_vl", WindowLayout::from_max_window_layers, false},
    {"qwen2_5_vl_text", WindowLayout::from_max_window_layers, false},
    {"qwen3", WindowLayout::from_max_window_layers, false},
    {"qwen3_moe", WindowLayout::from_max_window_layers, false},
    {"gemma", WindowLayout::all, false},
    {"gemma2", WindowLayout::every_other, false},
    {"gemma3", WindowLayout::every_nth_full, false},
    {"gemma3_text", WindowLayout::every_nth_full, false},
    {"gpt_oss", WindowLayout::all, true},
    {"cohere", WindowLayout::all, false},                 // Command R
    {"cohere2", WindowLayout::every_nth_full, false, 4},  // Command R7B, Command A: 3 of 4 layers slide
    {"glm", WindowLayout::all, false},                    // GLM-4 (-chat-hf)
    {"glm4", WindowLayout::all, false},                   // GLM-4-0414
    {"glm4_moe", WindowLayout::all, false},               // GLM-4.5, 4.6
    {"granite", WindowLayout::all, false},                // its attention_multiplier: the softmax scale
    {"olmo2", WindowLayout::all, false},
    {"starcoder2", WindowLayout::all, false},  // sliding_window on every layer
    // Multi-head latent attention, as transformers runs it (up-projections not absorbed): per head
    // Q/K of qk_nope_head_dim + qk_rope_head_dim (192), V of v_head_dim (128); and as serving
    // engines decode it (absorbed, over the latent cache: kMlaTensorParallel below).
    {"deepseek_v2", WindowLayout::all, false},  // DeepSeek-V2, V2.5, V2-Lite, Coder-V2: as V3's
    {"deepseek_v3", WindowLayout::all, false},
    {"kimi_k2", WindowLayout::all, false},
    {"glm4_moe_lite", WindowLayout::all, false},  // GLM-4.7-Flash: MLA with Q/K and V of 256, latent 512 + 64
    // Chunked local attention on 3 of 4 layers (layer_kinds), full attention on the others.
    {"llama4", WindowLayout::all, false},
    {"llama4_text", WindowLayout::all, false},
};

// MLA absorbed decode (configs with kv_lora_rank): serving engines fold the K and V up-projections
// into Q and O and attend over the latent cache, one KV head of kv_lora_rank + qk_rope_head_dim
// columns (576) whose first kv_lora_rank (512) are V, shared by every query head on the GPU (so the
// group is the heads per GPU, packed). Which heads per GPU depends on the tensor-parallel degree:
// the degrees these models are served at (bench/zoo.py MODELS: one GPU's worth of every head, as
// data-parallel attention runs, and an 8-GPU node), where they leave a head count the latent
// kernel is tested at (8 .. 128: Kimi-K2 at TP 8 leaves 8, DeepSeek-V3 16).
constexpr int kMlaTensorParallel[] = {1, 8};
constexpr int kMlaMinHeads = 8, kMlaMaxHeads = 128;
// An uneven varlen prefill batch (bench/zoo.py VARLEN_LENS: 7000 to 100 queries), whose kernel
// the model's prefill batches take (choose_kernel); its group is the model's.
constexpr LaunchFacts kUnevenPrefillBatch{1, 7000, 8, 16048, std::nullopt};

[[noreturn]] void refuse(const std::string& key, const std::string& why) {
  throw ConfigError(fmt::format("config.json: {}: {}", key, why));
}

bool set(const json& c, const char* key) { return c.contains(key) && !c.at(key).is_null(); }

int positive_int(const json& c, const char* key) {
  if (!c.contains(key)) refuse(key, "missing; fa4jit needs it to size the kernels");
  const json& v = c.at(key);
  if (!v.is_number_integer() || v.get<long long>() <= 0 || v.get<long long>() > (1 << 20))
    refuse(key, fmt::format("expected a positive integer, got {}", v.dump().substr(0, 64)));
  return v.get<int>();
}

DType model_dtype(const json& root, const json& text, const ModelOptions& o) {
  if (o.dtype) return *o.dtype;
  // transformers writes `torch_dtype`, newer versions `dtype`; the text config's wins.
  for (const json* c : {&text, &root})
    for (const char* key : {"dtype", "torch_dtype"}) {
      if (!set(*c, key)) continue;
      const json& v = c->at(key);
      const std::string s = v.is_string() ? v.get<std::string>() : v.dump();
      if (s == "bfloat16") return DType::bf16;
      if (s == "float16") return DType::fp16;
      refuse(key, fmt::format("'{}': fa4jit runs bf16 and fp16; choose the dtype you serve in (CLI: --dtype bf16)",
                              s.substr(0, 64)));
    }
  refuse("torch_dtype", "missing; choose the dtype you serve in (CLI: --dtype bf16)");
}

// What each layer attends to: every key before it, a sliding window of them, or its own chunk of
// attention_chunk_size positions (Llama 4).
enum class LayerKind { full, sliding, chunked };
constexpr LayerKind kLayerKinds[] = {LayerKind::full, LayerKind::sliding, LayerKind::chunked};

// Per layer: its kind, from layer_types; else Llama 4's no_rope_layers (the layers with rope are the
// chunked ones) or one NoPE full layer every no_rope_layer_interval (4), as transformers' Llama4TextConfig
// derives them; else the family's window layout.
std::vector<LayerKind> layer_kinds(const json& c, const Family& f, int layers, bool has_window, bool has_chunk) {
  std::vector<LayerKind> kinds(static_cast<std::size_t>(layers), LayerKind::full);
  if (set(c, "layer_types")) {
    const json& t = c.at("layer_types");
    if (!t.is_array() || static_cast<int>(t.size()) != layers)
      refuse("layer_types", fmt::format("expected one entry per layer ({})", layers));
    for (int i = 0; i < layers; ++i) {
      const json& v = t[static_cast<std::size_t>(i)];
      const std::string s = v.is_string() ? v.get<std::string>() : v.dump();
      LayerKind& k = kinds[static_cast<std::size_t>(i)];
      if (s == "sliding_attention")
        k = LayerKind::sliding;
      else if (s == "chunked_attention")
        k = LayerKind::chunked;
      else if (s != "full_attention")
        refuse(fmt::format("layer_types[{}]", i),
               fmt::format("'{}' has no fa4jit kernel (full_attention, sliding_attention and chunked_attention do)",
                           s.substr(0, 64)));
    }
    const auto any = [&](LayerKind k) { return std::find(kinds.begin(), kinds.end(), k) != kinds.end(); };
    if (any(LayerKind::sliding) && !has_window)
      refuse("sliding_window", "layer_types has sliding_attention layers but no window size is set");
    if (any(LayerKind::chunked) && !has_chunk)
      refuse("attention_chunk_size", "layer_types has chunked_attention layers but no chunk size is set");
    return kinds;
  }
  if (has_chunk) {
    const bool listed =
        set(c, "no_rope_layers") && c.at("no_rope_layers").is_array() && !c.at("no_rope_layers").empty();
    if (listed && static_cast<int>(c.at("no_rope_layers").size()) != layers)
      refuse("no_rope_layers", fmt::format("expected one entry per layer ({})", layers));
    const int interval = set(c, "no_rope_layer_interval") ? positive_int(c, "no_rope_layer_interval") : 4;
    for (int i = 0; i < layers; ++i) {
      const json* v = listed ? &c.at("no_rope_layers")[static_cast<std::size_t>(i)] : nullptr;
      const bool rope =
          v ? (v->is_boolean() ? v->get<bool>() : v->is_number() && v->get<double>() != 0) : (i + 1) % interval != 0;
      kinds[static_cast<std::size_t>(i)] = rope ? LayerKind::chunked : LayerKind::full;
    }
    return kinds;
  }
  if (!has_window) return kinds;
  for (int i = 0; i < layers; ++i) {
    bool s = true;
    switch (f.layout) {
      case WindowLayout::all: break;
      case WindowLayout::every_other: s = i % 2 == 0; break;
      case WindowLayout::every_nth_full: {
        const int n = set(c, "sliding_window_pattern") ? positive_int(c, "sliding_window_pattern") : f.nth_full;
        s = (i + 1) % n != 0;
        break;
      }
      case WindowLayout::from_max_window_layers:
        s = i >= (set(c, "max_window_layers") ? positive_int(c, "max_window_layers") : 0);
        break;
    }
    kinds[static_cast<std::size_t>(i)] = s ? LayerKind::sliding : LayerKind::full;
  }
  return kinds;
}

const char* layer_kind_name(LayerKind k) {
  switch (k) {
    case LayerKind::sliding: return "sliding-window";
    case LayerKind::chunked: return "chunked-attention";
    default: return "full-attention";
  }
}

std::string layer_list(const std::vector<LayerKind>& kinds, LayerKind want) {
  std::vector<int> ids;
  for (std::size_t i = 0; i < kinds.size(); ++i)
    if (kinds[i] == want) ids.push_back(static_cast<int>(i));
  if (ids.size() == kinds.size()) return "all layers";
  const std::size_t shown = std::min<std::size_t>(ids.size(), 6);
  std::string s = fmt::format("layers {}", fmt::join(ids.begin(), ids.begin() + static_cast<long>(shown), ", "));
  if (ids.size() > shown) s += fmt::format(" (+{} more)", ids.size() - shown);
  return s;
}

}  // namespace

std::vector<std::string> known_model_types() {
  std::vector<std::string> out;
  for (const Family& f : kFamilies) out.push_back(f.model_type);
  return out;
}

std::vector<ModelKernel> model_kernels(const json& root, const ModelOptions& options) {
  if (!root.is_object()) throw ConfigError(fmt::format("config.json: expected an object, got {}", root.type_name()));
  // Multimodal models (Gemma 3, ...) keep the language model's attention in text_config.
  const json& c = root.contains("text_config") && root.at("text_config").is_object() ? root.at("text_config") : root;
  std::string model_type;
  for (const json* j : {&c, &root})
    if (model_type.empty() && set(*j, "model_type") && j->at("model_type").is_string())
      model_type = j->at("model_type").get<std::string>();
  const auto family = std::find_if(std::begin(kFamilies), std::end(kFamilies),
                                   [&](const Family& f) { return model_type == f.model_type; });
  if (family == std::end(kFamilies))
    refuse("model_type", fmt::format("'{}' is not a model fa4jit knows the attention of; known: {}",
                                     model_type.substr(0, 64), fmt::join(known_model_types(), ", ")));

  const int heads = positive_int(c, "num_attention_heads");
  const int kv_heads = set(c, "num_key_value_heads") ? positive_int(c, "num_key_value_heads") : heads;
  if (heads % kv_heads != 0)
    refuse("num_key_value_heads", fmt::format("{} does not divide num_attention_heads ({})", kv_heads, heads));
  const int group = heads / kv_heads;
  int depth = 0, depth_v = 0;
  if (set(c, "qk_nope_head_dim") || set(c, "qk_rope_head_dim")) {  // MLA: Q/K carry the rope columns
    depth = positive_int(c, "qk_nope_head_dim") + positive_int(c, "qk_rope_head_dim");
  } else if (set(c, "head_dim")) {
    depth = positive_int(c, "head_dim");
  } else {
    const int hidden = positive_int(c, "hidden_size");
    if (hidden % heads != 0) refuse("hidden_size", fmt::format("{} is not a multiple of num_attention_heads", hidden));
    depth = hidden / heads;
  }
  if (set(c, "v_head_dim")) depth_v = positive_int(c, "v_head_dim");  // FA4Config::depth_v (0: depth)
  // MLA absorbed decode: Q/K the latent and rope columns, V the latent's (kMlaTensorParallel).
  const int latent = set(c, "kv_lora_rank") ? positive_int(c, "kv_lora_rank") : 0;
  const int latent_rope = latent ? positive_int(c, "qk_rope_head_dim") : 0;
  const int layers = positive_int(c, "num_hidden_layers");
  const bool use_window = !c.contains("use_sliding_window") || !c.at("use_sliding_window").is_boolean() ||
                          c.at("use_sliding_window").get<bool>();
  const bool has_window = use_window && set(c, "sliding_window") && positive_int(c, "sliding_window") > 0;
  // transformers' sliding_window W: each query sees itself and the W - 1 keys before it.
  const int window_keys = has_window ? positive_int(c, "sliding_window") : 0;
  // Llama 4: attention_chunk_size (its config class defaults it, so a text config without it has one).
  const bool has_chunk =
      set(c, "attention_chunk_size") ? positive_int(c, "attention_chunk_size") > 0 : model_type.rfind("llama4", 0) == 0;
  const std::vector<LayerKind> kinds = layer_kinds(c, *family, layers, has_window, has_chunk);

  ScoreMod score = ScoreMod::identity();
  if (set(c, "attn_logit_softcapping")) {
    const json& v = c.at("attn_logit_softcapping");
    if (!v.is_number() || v.get<double>() < 0)
      refuse("attn_logit_softcapping", fmt::format("expected a non-negative number, got {}", v.dump().substr(0, 64)));
    if (v.get<double>() > 0) score = ScoreMod::softcap();
  }
  const DType dtype = model_dtype(root, c, options);
  const std::string sinks = family->sinks ? "; attention sinks: a launch argument" : "";
  if (options.kv_dtype && (*options.kv_dtype != DType::e4m3 || dtype == DType::e4m3))
    throw ConfigError(fmt::format("kv_dtype: {} with dtype {}: an FP8 KV cache is e4m3 under a bf16 or fp16 model",
                                  to_string(*options.kv_dtype), to_string(dtype)));

  std::vector<ModelKernel> out;
  // A kernel whose keys come from the KV cache, and its twin over an e4m3 cache (options.kv_dtype).
  auto add_cached = [&](const std::string& use, const FA4Config& k) {
    out.push_back({use, k, {}});
    if (!options.kv_dtype) return;
    FA4Config e = k;
    e.kv_dtype = options.kv_dtype;
    out.push_back({use + "; over an e4m3 KV cache", e, {}});
  };
  for (LayerKind kind : kLayerKinds) {
    if (std::find(kinds.begin(), kinds.end(), kind) == kinds.end()) continue;
    const bool window = kind == LayerKind::sliding;
    FA4Config k;
    k.dtype = dtype;
    k.depth = depth;
    k.depth_v = depth_v == depth ? 0 : depth_v;
    // A chunked layer: causal within its chunk, as the ops ask for causal with a chunk_size.
    k.mask = window                       ? Mask::sliding_window()
             : kind == LayerKind::chunked ? Mask::all_of({Mask::causal(), Mask::chunked()})
                                          : Mask::causal();
    k.score_mod = score;
    const std::string layers_text = fmt::format("{} {}", layer_kind_name(kind), layer_list(kinds, kind));
    // The kernels the runtime's automatic choice (choose_kernel: the Python ops' too) takes for this
    // model's launches: decode rows (one query), then an uneven varlen prefill batch (the zoo's, 7000
    // to 100 queries); prefill of one prompt runs the base kernel.
    LaunchFacts decode_rows;
    decode_rows.group = group;
    decode_rows.max_seqlen_q = 1;
    LaunchFacts prefill_batch = kUnevenPrefillBatch;
    prefill_batch.group = group;
    if (window) prefill_batch.window_keys = window_keys;  // as the runtime's launches state it
    const FA4Config decode = choose_kernel(k, decode_rows);
    const bool packs = decode.pack_gqa;
    // MLA's unabsorbed kernel computes K and V from the latent (no e4m3 twin); others read the cache.
    const auto add = [&](const std::string& use, const FA4Config& kernel) {
      if (latent)
        out.push_back({use, kernel, {}});
      else
        add_cached(use, kernel);
    };
    // An arch's own tile for these launches (BackendPolicy::launch_bm), for that arch only; over
    // 16-bit K/V only, so no e4m3 twin.
    const auto add_arch_tiles = [&](const char* use, const std::string& when, const FA4Config& kernel,
                                    const LaunchFacts& facts) {
      for (const std::string& arch : supported_archs()) {
        FA4Config a = kernel;
        a.arch = arch;
        FA4Config tile = choose_kernel(a, facts);
        if (tile.BM == 0) continue;
        tile.arch.clear();
        // Another launch's tile already (a varlen batch under a small window runs one prompt's).
        if (std::any_of(out.begin(), out.end(),
                        [&](const ModelKernel& m) { return m.config == tile && m.only_arch == arch; }))
          continue;
        out.push_back({fmt::format("{} ({}, BM {}): {}{}", use, when, tile.BM, layers_text, sinks), tile, arch});
      }
    };
    add(fmt::format("prefill{}: {}{}", packs ? "" : " and decode", layers_text, sinks), k);
    if (window) {  // one prompt under the window (a tile of the arch's own where the window is small)
      LaunchFacts prompt;
      prompt.group = group;
      prompt.max_seqlen_q = kUnevenPrefillBatch.max_seqlen_q;
      prompt.total_q = prompt.max_seqlen_q;
      prompt.window_keys = window_keys;
      add_arch_tiles("prefill", fmt::format("a window of {} keys", window_keys), k, prompt);
    }
    if (!packs) {
      add_arch_tiles("decode", "Sq <= 64, and d128 continuous-batching steps", k, decode_rows);
    } else {
      add(fmt::format("decode (Sq x {} <= {}, packed GQA): {}{}", group, std::max(128, group), layers_text, sinks),
          decode);
      add_arch_tiles("packed prefill", "varlen batches of uneven lengths or short chunks", k, prefill_batch);
    }
    if (latent == 0 || kind != LayerKind::full) continue;  // MLA models have no window or chunked layers
    for (int tp : kMlaTensorParallel) {
      const int per_gpu = heads / tp;
      if (heads % tp != 0 || per_gpu < kMlaMinHeads || per_gpu > kMlaMaxHeads) continue;
      FA4Config m;
      m.dtype = dtype;
      m.depth = latent + latent_rope;
      m.depth_v = latent;
      m.mask = Mask::causal();
      m.score_mod = score;
      m.group = per_gpu;  // one KV head: every query head of the GPU
      m.pack_gqa = true;
      add_cached(fmt::format("MLA decode, absorbed (latent KV {} + rope {}), {} heads per GPU (TP {}): {}{}", latent,
                             latent_rope, per_gpu, tp, layers_text, sinks),
                 m);
    }
  }
  return out;
}

}  // namespace jit
