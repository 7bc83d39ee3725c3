// LaunchArgs -> FwdParams, after checking every argument against the kernel's config.
#pragma once
#include "common/params.h"
#include "fa4jit/kernel.hpp"

namespace jit::detail {

struct LaunchShape {
  int batch = 0, max_seqlen_q = 0, num_q_heads = 0;
  int max_seqlen_k = 0;  // 0: unknown (varlen keys)
  int grid_heads = 0;    // q heads, or KV heads when GQA heads are packed
};

// Throws LaunchError naming the argument, the value and what the kernel expects.
fa4::FwdParams pack_params(const ResolvedConfig& rc, const LaunchArgs& a, LaunchShape* shape);

}  // namespace jit::detail
