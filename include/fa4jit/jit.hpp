// fa4jit: runtime-generated FlashAttention-4-class attention kernels.
//
//   jit::FA4Config cfg;
//   cfg.dtype = jit::DType::bf16; cfg.depth = 128; cfg.num_q_heads = 32; cfg.group = 4;
//   cfg.mask = jit::Mask::causal();
//   auto kernel = jit::get_kernel(cfg);   // generated, compiled, cached; thread-safe
//   kernel->launch(args, stream);
#pragma once
#include <string>
#include <vector>

#include "fa4jit/config.hpp"
#include "fa4jit/errors.hpp"
#include "fa4jit/kernel.hpp"

namespace jit {

// Generates, compiles (NVRTC) and caches (memory, then disk) the kernel for `config`.
// An empty config.arch means the current CUDA device's arch. Many threads asking for one
// config share one compile. Works without a GPU when config.arch is set.
KernelPtr get_kernel(const FA4Config& config);

// The CUDA source get_kernel compiles for `config` (deterministic: same config, same bytes).
std::string generate_source(const FA4Config& config);

// The cache key get_kernel uses for `config`.
std::string cache_key(const FA4Config& config);

// The arch string of the current device ("sm_90a" for Hopper, "sm_100a" for Blackwell,
// "sm_80" ...). Throws DriverError without a driver or GPU.
std::string current_device_arch();

struct RuntimeInfo {
  std::string version;
  int nvrtc_major = 0, nvrtc_minor = 0;
  std::vector<std::string> nvrtc_archs;
  std::string driver;          // "13.0", or why there is none
  std::vector<std::string> gpus;
  std::vector<std::string> cache_roots;
};
RuntimeInfo runtime_info();

}  // namespace jit
