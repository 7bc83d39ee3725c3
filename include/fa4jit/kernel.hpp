// A compiled attention kernel and its launch arguments.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "fa4jit/config.hpp"

namespace jit {

// A device tensor in (batch, seqlen, heads, head_dim) order: shape and strides in elements.
// head_dim must be contiguous (stride 1). PyTorch: t.data_ptr(), t.shape, t.stride().
struct Tensor {
  void* data = nullptr;
  DType dtype = DType::bf16;
  std::array<std::int64_t, 4> shape{};
  std::array<std::int64_t, 4> stride{};

  // Contiguous (B, S, H, D) tensor at `data`.
  static Tensor contiguous(void* data, DType dtype, std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t d);
};

struct LaunchArgs {
  Tensor q, k, v, o;     // q, o: (B, Sq, Hq, D); k, v: (B, Sk, Hkv, D)
  float* lse = nullptr;  // optional float32 [B][Hq][Sq], natural log
  float softmax_scale = 0.0f;  // 0: 1/sqrt(head_dim)

  // Mask arguments (ignored by masks that do not use them).
  int window_left = -1, window_right = -1;  // sliding window extents; -1: unbounded
  int chunk_size = 0;                       // chunked masks

  // Score-mod arguments.
  float softcap = 0.0f;
  const float* alibi_slopes = nullptr;       // [Hq] float32; null: standard slopes
  std::array<const void*, 4> aux_ptr{};      // custom snippets read these as aux[i]
  std::array<float, 4> aux_scalar{};         // ... and scalars[i]

  // Variable length: q/k/v/o are (1, total, H, D); cu_seqlens are int32 [B + 1] on the device.
  const int* cu_seqlens_q = nullptr;
  const int* cu_seqlens_k = nullptr;
  const int* seqused_k = nullptr;  // int32 [B]: keys used per sequence
  int batch = 0;                   // varlen: number of sequences
  int max_seqlen_q = 0;            // varlen: longest query sequence

  const float* sinks = nullptr;    // float32 [Hq] attention-sink logits
};

using Stream = void*;  // a CUstream (0: the legacy default stream)

class Kernel {
 public:
  virtual ~Kernel() = default;
  // Checks `args` against the config (throws LaunchError before anything is launched),
  // loads the module on the current device if needed, and launches on `stream`.
  virtual void launch(const LaunchArgs& args, Stream stream = nullptr) const = 0;

  virtual const ResolvedConfig& config() const = 0;
  virtual const std::string& key() const = 0;    // the cache key (32 hex chars)
  virtual const std::string& cubin() const = 0;
  virtual const std::string& origin() const = 0; // "compiled", a cache dir, or "memory"
  virtual double compile_ms() const = 0;         // NVRTC time, 0 on a cache hit
};

using KernelPtr = std::shared_ptr<const Kernel>;

}  // namespace jit
