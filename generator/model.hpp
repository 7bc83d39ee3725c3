// The kernels one Hugging Face model needs, read from its config.json: `fa4jit prewarm --model`.
// The configs are exactly those the Python ops and the transformers backend request for that
// model: both choose through jit::choose_kernel (generator/kernel_choice.cpp; prefill unpacked
// without a group; decode with the group's query heads packed for any group that packs; on sm_90a,
// varlen prefill batches of uneven lengths packed at the prefill tile and unpacked decode at the
// decode tile, BackendPolicy::launch_bm), so a serving process warmed with them compiles nothing.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "fa4jit/config.hpp"

namespace jit {

struct ModelKernel {
  std::string use;   // e.g. "prefill: sliding-window layers 0, 2, 4 (+18)"
  FA4Config config;  // arch empty: the caller picks archs
  // Non-empty: a kernel of this arch only (sm_90a's packed prefill tile, BM 128, and unpacked decode
  // tile, BM 64: the other backends refuse them or already run them as their default); prewarm
  // builds it for that arch alone.
  std::string only_arch;
};

struct ModelOptions {
  std::optional<DType> dtype;  // overrides the model's torch_dtype (needed when that is float32)
  // e4m3: the model is served over an FP8 KV cache (vLLM's kv_cache_dtype fp8, SGLang's
  // fp8_e4m3), so beside each kernel whose keys come from the cache comes its twin with
  // kv_dtype e4m3 (chunked prefill and decode over the cache; the 16-bit one stays for prefill
  // over fresh K/V). MLA's unabsorbed kernel (Q/K 192, V 128) computes its K and V, so only its
  // absorbed decode over the latent cache gets the twin.
  std::optional<DType> kv_dtype;
};

// Throws ConfigError naming the key (as `config.json: <key>`) for a feature fa4jit cannot serve
// (chunked local-attention layers, float32, an unknown model_type, ...) instead of leaving it out:
// a missing kernel would compile in serving. Models with multi-head latent attention (kv_lora_rank:
// DeepSeek-V3, Kimi-K2) get the unabsorbed kernel (Q/K 192, V 128: prefill, and transformers'
// decode) and the absorbed decode over the latent cache (Q/K 576, V its first 512 columns, one KV
// head, packed) at the heads per GPU of tensor-parallel degrees 1 and 8 (generator/model.cpp).
// options.kv_dtype other than e4m3 (or with an e4m3 dtype) is a ConfigError naming kv_dtype.
std::vector<ModelKernel> model_kernels(const nlohmann::json& hf_config, const ModelOptions& options = {});

// The model types model_kernels() knows the attention of.
std::vector<std::string> known_model_types();

}  // namespace jit
