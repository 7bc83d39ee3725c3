// `fa4jit run`: the q, k, v of a safetensors file checked against each other and the config
// before anything is compiled, cached or launched.
#pragma once
#include <map>
#include <string>

#include "check/safetensors.hpp"
#include "fa4jit/config.hpp"

namespace jit::cli {

// The safetensors dtype of a DType: "BF16", "F16", "F8_E4M3".
const char* safetensors_dtype(DType t);

// Throws Error naming the file and the tensor: missing, not 4-D (batch, seqlen, heads, head_dim),
// a dim < 1 or > 2^31-1, a dtype other than the config's, k and v shapes that differ, batch or
// head_dim that differ from q's, q heads not a multiple of k heads, heads or batch > 65535, or
// counts that contradict the config's num_q_heads / group. FP8 (e4m3) configs take optional
// descale_q / descale_k / descale_v: F32 of shape [batch, kv_heads]; other configs refuse them.
void check_run_inputs(const std::string& file, const std::map<std::string, safetensors::TensorData>& in,
                      const FA4Config& c);

}  // namespace jit::cli
