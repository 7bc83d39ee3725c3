// The Kernel behind get_kernel: a cubin plus, per CUDA context, its loaded module.
#pragma once
#include <array>
#include <map>
#include <memory>
#include <mutex>

#include "common/segments.h"
#include "fa4jit/kernel.hpp"
#include "runtime/driver.hpp"
#include "runtime/tma.hpp"
#include "runtime/workspace.hpp"

namespace jit::detail {

struct LaunchShape;  // runtime/launch_args.hpp

// Can a cubin built for `rc` run on a device of compute capability `sm` (major*10 + minor)?
bool runs_on(const ResolvedConfig& rc, int sm);

// One cuModuleLoadData result; unloaded with the kernel.
class LoadedModule {
 public:
  // Looks up the kernels by the names derived from `key` (entry_name): a cubin of another key
  // does not load.
  LoadedModule(const std::string& cubin, int smem_bytes, const std::string& key);
  ~LoadedModule();
  LoadedModule(const LoadedModule&) = delete;
  LoadedModule& operator=(const LoadedModule&) = delete;
  CUfunction function() const { return fn_; }
  CUfunction combine_function() const { return combine_fn_; }

 private:
  CUmodule module_ = nullptr;
  CUfunction fn_ = nullptr;
  CUfunction combine_fn_ = nullptr;
};

// Everything a launch passes to the driver, computed before any driver launch call.
struct LaunchPlan {
  fa4::FwdParams params{};
  fa4::TmaDescs tma{};
  bool uses_tma = false;
  unsigned grid[3] = {1, 1, 1};
  unsigned block = 0;
  unsigned smem_bytes = 0;
  // Split-KV: params.num_splits > 1 adds fa4_combine over combine_grid CTAs, and needs
  // split.bytes() of scratch (o_partial, lse_partial, then stream-K's split_count) unless the
  // caller passed some.
  unsigned combine_grid = 0;
  SplitLayout split;  // split.bytes() of workspace (0 rows when not split)
};

// Split count for a launch of `tiles` CTAs over `kv_blocks` KV tiles each, on `slots` CTA slots:
// 1 when the grid already fills 80% of them, else the fewest splits whose slot fill is within 95%
// of the best (FlashAttention's wave rule), each split keeping at least two KV tiles. The caller
// passes the SM count even for 2-CTA-per-SM decode kernels: on an H200, 128 CTAs (one per SM)
// read K/V at 4.27 TB/s and 256 at 4.03 (B 8 x Sk 32768: 2 vs 4 splits; B 1 x Sk 131072: 16
// splits 3.99 TB/s, 32 splits 3.64).
int choose_num_splits(long long tiles, int kv_blocks, int slots);

// Split tail of a persistent unmasked launch (PersistentTiles) of `tiles` equal Q tiles with
// `kv_blocks` KV tiles each on `sms` CTAs: the whole rounds run whole tiles, and the last round's
// r = tiles % sms tiles, which would keep sms - r SMs idle for a whole tile's time (3% of a
// 31-round launch), run as `splits` KV splits each, as many as one round holds (splits * r <= sms)
// with no split left empty. splits 1: no tail (no partial last round, or it is nearly full).
struct SplitTail {
  long long from = 0;  // first split tile
  int splits = 1;
};
SplitTail plan_split_tail(long long tiles, int kv_blocks, int sms);

// Stream-K geometry (Tuning::persistent = 2, common/segments.h) for `tiles` Q tiles of `kv_blocks`
// KV tiles on `sms` SMs. `requested` is LaunchArgs::num_splits: 0 picks one unit per KV tile when
// each (batch, head) has a single Q tile (decode: K/V bytes balanced over the SMs), else whole tiles;
// n > 0 cuts each tile into n units. `slots` is the partial slots per row (1: no partials, no combine).
struct StreamKPlan {
  fa4::UnitSplit units;
  int ctas = 1;
  int slots = 1;
};
StreamKPlan plan_stream_k(long long tiles, int kv_blocks, int m_blocks, int requested, int sms);

class CompiledKernel final : public Kernel {
 public:
  CompiledKernel(ResolvedConfig config, std::string key, std::string cubin, std::string origin, double compile_ms);

  void launch(const LaunchArgs& args, Stream stream) const override;
  int num_splits(const LaunchArgs& args) const override { return static_cast<int>(plan(args).params.num_splits); }
  std::size_t workspace_bytes(const LaunchArgs& args) const override { return plan(args).split.bytes(); }
  // Checks args and builds params, TMA maps (needs a driver, any GPU) and launch geometry.
  LaunchPlan plan(const LaunchArgs& args) const;
  const ResolvedConfig& config() const override { return config_; }
  const std::string& key() const override { return key_; }
  const std::string& cubin() const override { return cubin_; }
  const std::string& origin() const override { return origin_; }
  double compile_ms() const override { return compile_ms_; }

 private:
  const LoadedModule& module_for_current_context() const;  // loads on first use per context

  ResolvedConfig config_;
  std::string key_, cubin_, origin_;
  double compile_ms_;
  mutable std::mutex mu_;
  mutable std::map<CUcontext, std::unique_ptr<LoadedModule>> modules_;
  mutable TmaDescCache tma_;
  // Persistent causal launches: section size per (max_seqlen_q, keys, pairs, CTAs, L2 bound), chosen
  // once by simulating the walk (runtime/lpt_order.hpp); guarded by mu_.
  int balanced_lpt_heads(const LaunchShape& shape, int ctas, int max_heads) const;
  mutable std::map<std::array<int, 5>, int> lpt_heads_;
};

}  // namespace jit::detail
