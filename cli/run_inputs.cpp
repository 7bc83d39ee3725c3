#include "cli/run_inputs.hpp"

#include <cstdint>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "fa4jit/errors.hpp"

namespace jit::cli {

const char* safetensors_dtype(DType t) {
  switch (t) {
    case DType::bf16: return "BF16";
    case DType::fp16: return "F16";
    case DType::e4m3: return "F8_E4M3";
  }
  return "?";
}

void check_run_inputs(const std::string& file, const std::map<std::string, safetensors::TensorData>& in,
                      const FA4Config& c) {
  // q in the dtype; k and v in the kv_dtype (e4m3 for an FP8 KV cache) when it is set.
  const DType kv = kv_type(c);
  auto bad = [&](const std::string& why) { return Error(fmt::format("{}: {}", file, why)); };
  for (const char* name : {"q", "k", "v"}) {
    const auto it = in.find(name);
    if (it == in.end()) throw bad(fmt::format("no tensor '{}'", name));
    const auto& t = it->second;
    if (t.shape.size() != 4)
      throw bad(fmt::format("'{}' has shape [{}]; it must be 4-D (batch, seqlen, heads, head_dim)", name,
                            fmt::join(t.shape, ", ")));
    for (int d = 0; d < 4; ++d)
      if (t.shape[d] < 1 || t.shape[d] > INT32_MAX)
        throw bad(fmt::format("'{}' shape[{}] is {}; dims are 1 .. 2^31-1", name, d, t.shape[d]));
    const bool is_q = name[0] == 'q';
    const DType want = is_q ? c.dtype : kv;
    if (t.dtype != safetensors_dtype(want))
      throw bad(fmt::format("'{}' is {}, the config's {} is {} ({})", name, t.dtype,
                            is_q || !c.kv_dtype ? "dtype" : "kv_dtype", to_string(want), safetensors_dtype(want)));
  }
  const auto& q = in.at("q").shape;
  const auto& k = in.at("k").shape;
  const auto& v = in.at("v").shape;
  if (v != k)
    throw bad(fmt::format("'v' has shape [{}] and 'k' [{}]; they must match", fmt::join(v, ", "), fmt::join(k, ", ")));
  if (q[0] != k[0]) throw bad(fmt::format("'k' has batch {} and 'q' {}; they must match", k[0], q[0]));
  if (q[3] != k[3]) throw bad(fmt::format("'k' has head_dim {} and 'q' {}; they must match", k[3], q[3]));
  if (q[2] % k[2] != 0) throw bad(fmt::format("'q' has {} heads, not a multiple of the {} heads of 'k'", q[2], k[2]));
  if (q[0] > 65535 || q[2] > 65535)
    throw bad(fmt::format("'q' has batch {} and {} heads; each must be at most 65535", q[0], q[2]));
  if (c.num_q_heads > 0 && q[2] != c.num_q_heads)
    throw bad(fmt::format("'q' has {} heads, the config's num_q_heads is {}", q[2], c.num_q_heads));
  if (c.group > 0 && q[2] / k[2] != c.group)
    throw bad(fmt::format("'q' / 'k' heads are {} / {} = group {}, the config's group is {}", q[2], k[2], q[2] / k[2],
                          c.group));
  for (const char* name : {"descale_q", "descale_k", "descale_v"}) {
    const auto it = in.find(name);
    if (it == in.end()) continue;
    const auto& t = it->second;
    const bool is_q = name == std::string("descale_q");
    if ((is_q ? c.dtype : kv) != DType::e4m3)
      throw bad(fmt::format("'{}' is given but the config's {} is {}: descale factors are for e4m3 (FP8) inputs", name,
                            is_q || !c.kv_dtype ? "dtype" : "kv_dtype", to_string(is_q ? c.dtype : kv)));
    if (t.dtype != "F32") throw bad(fmt::format("'{}' is {}; descale factors are F32", name, t.dtype));
    if (t.shape != std::vector<std::int64_t>{q[0], k[2]})
      throw bad(fmt::format("'{}' has shape [{}]; expected [{}, {}] (batch, kv_heads)", name, fmt::join(t.shape, ", "),
                            q[0], k[2]));
  }
}

}  // namespace jit::cli
