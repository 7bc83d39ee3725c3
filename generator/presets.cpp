#include "generator/presets.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "fa4jit/errors.hpp"

namespace jit {

namespace {

FA4Config make(int depth, Mask mask, int num_q_heads = 0, int group = 0, DType dtype = DType::bf16) {
  FA4Config c;
  c.dtype = dtype;
  c.depth = depth;
  c.num_q_heads = num_q_heads;
  c.group = group;
  c.mask = std::move(mask);
  return c;
}

}  // namespace

std::vector<std::string> preset_names() {
  return {"default", "llama3-8b", "llama3-70b", "llama3-8b-decode", "llama3-70b-decode", "fp16"};
}

std::vector<FA4Config> preset(const std::string& name) {
  if (name == "default")  // head dims 64/128, no mask and causal, any head count
    return {make(64, Mask::none()), make(64, Mask::causal()), make(128, Mask::none()), make(128, Mask::causal())};
  if (name == "llama3-8b") return {make(128, Mask::causal(), 32, 4)};
  if (name == "llama3-70b") return {make(128, Mask::causal(), 64, 8)};
  // Decode (Sq 1..16 against a long cache, split-KV): the group's query heads share one tile.
  if (name == "llama3-8b-decode" || name == "llama3-70b-decode") {
    FA4Config c = name == "llama3-8b-decode" ? make(128, Mask::causal(), 32, 4) : make(128, Mask::causal(), 64, 8);
    c.pack_gqa = true;
    return {c};
  }
  if (name == "fp16") return {make(64, Mask::none(), 0, 0, DType::fp16), make(128, Mask::causal(), 0, 0, DType::fp16)};
  throw ConfigError(fmt::format("preset: '{}' is not known; allowed: {}", name, fmt::join(preset_names(), ", ")));
}

}  // namespace jit
