// A compiled attention kernel and its launch arguments.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "fa4jit/advanced.hpp"
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

struct LaunchArgs {
  Tensor q, k, v, o;           // q, o: (B, Sq, Hq, D); k, v: (B, Sk, Hkv, D)
  float* lse = nullptr;        // optional float32 [B][Hq][Sq], natural log
  float softmax_scale = 0.0f;  // 0: 1/sqrt(head_dim)

  // Mask arguments (ignored by masks that do not use them).
  int window_left = -1, window_right = -1;  // sliding window extents; -1: unbounded
  int chunk_size = 0;                       // chunked masks

  // Score-mod arguments.
  float softcap = 0.0f;
  const float* alibi_slopes = nullptr;   // [Hq] float32; null: standard slopes
  std::array<const void*, 4> aux_ptr{};  // custom snippets read these as aux[i]
  std::array<float, 4> aux_scalar{};     // ... and scalars[i]

  // Variable length: q/k/v/o are (1, total, H, D); cu_seqlens are int32 [B + 1] on the device.
  const int* cu_seqlens_q = nullptr;
  const int* cu_seqlens_k = nullptr;
  const int* seqused_k = nullptr;  // int32 [B]: keys used per sequence
  int batch = 0;                   // varlen: number of sequences
  int max_seqlen_q = 0;            // varlen: longest query sequence
  // Varlen keys and paged caches: the longest key sequence (FlashAttention's max_seqlen_k); 0:
  // unknown. A hint, never read as a length: for varlen batches it picks the CTA schedule (as for
  // an equal-length batch), so any value gives correct results and one below the real longest
  // costs speed only. Plain launches take their key length from k.
  int max_seqlen_k = 0;

  const float* sinks = nullptr;  // float32 [Hq] attention-sink logits

  // FP8 kernels (dtype e4m3), FlashAttention-3's convention: q, k and v hold x / descale, so the
  // kernel computes with descale_q[b][h_kv] * q and so on. float32 [B][Hkv] on the device,
  // contiguous; null: 1. Only FP8 kernels take them (LaunchError otherwise).
  const float* descale_q = nullptr;
  const float* descale_k = nullptr;
  const float* descale_v = nullptr;

  // Paged KV cache: k and v are (num_pages, page_size, Hkv, D) and sequence b's key row r is row
  // r % page_size of page page_table[b * max_pages + r / page_size]. Keys per sequence: seqused_k,
  // or max_pages * page_size. With varlen queries pass cu_seqlens_q only (no cu_seqlens_k).
  const int* page_table = nullptr;  // int32 [batch][max_pages] on the device
  int max_pages = 0;                // page_table's row length

  // Run-time block mask for custom masks (FlexAttention's BlockMask idea): one byte per
  // (batch, q head, q block, k block): 0 = no key visible (the tile is skipped), 1 = every key
  // visible (no per-element mask), 2 = partial. Strides in bytes; 0 broadcasts a dimension.
  struct BlockMask {
    const std::uint8_t* data = nullptr;
    int block_q = 128, block_k = 128;
    std::int64_t batch_stride = 0, head_stride = 0, row_stride = 0;  // row_stride: bytes per q block
  } block_mask;

  // Split-KV (decode): the keys of each Q tile are split across num_splits CTAs and merged by a
  // second kernel. 0: chosen from the SM count when the grid would leave SMs idle; 1: no split;
  // at most 256.
  int num_splits = 0;
  // Scratch for the splits (Kernel::workspace_bytes). Null: taken from a per-device pool that
  // fa4jit keeps, stream-ordered on the launch's stream.
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
};

using Stream = void*;  // a CUstream (0: the legacy default stream)

class FA4JIT_API Kernel {
 public:
  virtual ~Kernel() = default;
  // Checks `args` against the config (throws LaunchError before anything is launched),
  // loads the module on the current device if needed, and launches on `stream`.
  virtual void launch(const LaunchArgs& args, Stream stream = nullptr) const = 0;
  // Splits a launch with `args` would use (after the automatic choice) and the workspace it needs
  // (0 when not split). Needs a GPU when args.num_splits is 0.
  virtual int num_splits(const LaunchArgs& args) const = 0;
  virtual std::size_t workspace_bytes(const LaunchArgs& args) const = 0;

  virtual const ResolvedConfig& config() const = 0;
  virtual const std::string& key() const = 0;  // the cache key (32 hex chars)
  virtual const std::string& cubin() const = 0;
  virtual const std::string& origin() const = 0;  // "compiled", a cache dir, or "memory"
  virtual double compile_ms() const = 0;          // NVRTC time, 0 on a cache hit
};

using KernelPtr = std::shared_ptr<const Kernel>;

// Where build_tile_map writes: one byte per (batch, query head, Q block, KV block), the format of
// LaunchArgs::block_mask (0 no element visible, 1 all visible, 2 partial), in device memory.
struct TileMapOut {
  std::uint8_t* data = nullptr;
  int block_q = 128, block_k = 128;
  // false: the mask does not read b (h), so it is evaluated at b = 0 (h = 0) only and the map has
  // one batch (head); read it with batch_stride (head_stride) 0.
  bool per_batch = true, per_head = true;
  // Byte strides; 0: packed (row = ceil(seqlen_k / block_k) bytes, head = rows x Q blocks, batch =
  // heads x head).
  std::int64_t batch_stride = 0, head_stride = 0, row_stride = 0;
};

// The tile classes of `kernel`'s mask for the launch `args` (the same arguments as the attention
// launch: shapes, aux tensors and scalars, window, chunk), computed exactly by a small generated
// kernel that evaluates the mask (custom snippets included) over every element of every tile, one
// CTA per (Q block, head, batch), enqueued on `stream` (so CUDA graphs capture it with the launch).
// Compiled with NVRTC once per distinct mask and arch per process (memory cache). Dense launches only (no
// varlen or paged). The map is per query head (GQA packing is the attention kernel's business).
// Throws LaunchError for bad arguments, CompileError where a snippet does not compile.
FA4JIT_API void build_tile_map(const Kernel& kernel, const LaunchArgs& args, const TileMapOut& out, Stream stream);
// The same for a config's mask without an attention kernel (only the mask fields matter; arch ""
// is the current GPU's). A custom mask alone gives the classes a block snippet of it may return.
FA4JIT_API void build_tile_map(const FA4Config& config, const LaunchArgs& args, const TileMapOut& out, Stream stream);

}  // namespace jit
