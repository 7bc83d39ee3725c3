// A compiled attention kernel and its launch arguments.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "fa4jit/advanced.hpp"
#include "fa4jit/export.hpp"
#include "fa4jit/launch_args.hpp"
#include "fa4jit/tensor.hpp"

namespace jit {

// struct LaunchArgs, the arguments of a launch, is generated from the launch table
// (python/fa4jit/launch_table.py, one row per field; tools/gen_launch.py) into the build tree's
// fa4jit/launch_args.hpp: the fields of fa4jit_launch_args (fa4jit/c_api.h) with the same names and
// meanings, block_mask_* as LaunchArgs::BlockMask. Everything the optional features do not use is
// null or zero; window_left / window_right default to -1 (unbounded) and the block mask's blocks to
// 128 x 128.

using Stream = void*;  // a CUstream (0: the legacy default stream)

class FA4JIT_API Kernel {
 public:
  virtual ~Kernel() = default;
  // Checks `args` against the config (throws LaunchError before anything is launched),
  // loads the module on the current device if needed, and launches on `stream`.
  virtual void launch(const LaunchArgs& args, Stream stream = nullptr) const = 0;
  // Splits a launch with `args` would use (after the automatic choice) and the workspace it needs
  // (0 when not split, unless the kernel's walk is TileWalk::dynamic, whose tile counter lives
  // there). Needs a GPU when args.num_splits is 0.
  virtual int num_splits(const LaunchArgs& args) const = 0;
  virtual std::size_t workspace_bytes(const LaunchArgs& args) const = 0;

  virtual const ResolvedConfig& config() const = 0;
  virtual const std::string& key() const = 0;  // the cache key (32 hex chars)
  virtual const std::string& cubin() const = 0;
  virtual const std::string& origin() const = 0;  // "compiled", a cache dir, or "memory"
  virtual double compile_ms() const = 0;          // NVRTC time, 0 on a cache hit
};

using KernelPtr = std::shared_ptr<const Kernel>;

// What choose_kernel (fa4jit/advanced.hpp) reads of a launch, from `args`' shapes (no device
// read): the GQA group (q's heads over k's), max_seqlen_q (varlen: args.max_seqlen_q, else q's
// Sq), the varlen batch (args.batch where cu_seqlens_q is set), q's rows and the window's keys
// (window_left + window_right + 1 + mask_prefix where both extents are bounded: fields only a
// sliding-window kernel reads, so choose_kernel reads them only for one); pack_gqa unset. So
// `choose_kernel(base, launch_facts(args))` is the config the Python ops would launch. Throws
// LaunchError naming the field where q or k has no heads or q's are not a multiple of k's.
FA4JIT_API LaunchFacts launch_facts(const LaunchArgs& args);

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
