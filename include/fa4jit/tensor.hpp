// A device tensor view: the type of LaunchArgs' q, k, v and o.
#pragma once
#include <array>
#include <cstdint>

#include "fa4jit/config.hpp"
#include "fa4jit/export.hpp"

namespace jit {

// A device tensor in (batch, seqlen, heads, head_dim) order: shape and strides in elements.
// head_dim must be contiguous (stride 1). PyTorch: t.data_ptr(), t.shape, t.stride().
struct FA4JIT_API Tensor {
  void* data = nullptr;
  DType dtype = DType::bf16;
  std::array<std::int64_t, 4> shape{};
  std::array<std::int64_t, 4> stride{};

  // Contiguous (B, S, H, D) tensor at `data`.
  static Tensor contiguous(void* data, DType dtype, std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t d);
};

}  // namespace jit
