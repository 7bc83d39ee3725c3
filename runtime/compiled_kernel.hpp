// The Kernel behind get_kernel: a cubin plus, per CUDA context, its loaded module.
#pragma once
#include <array>
#include <functional>
#include <map>
#include <memory>
#include <mutex>

#include "common/grid_walk.h"
#include "common/persistent_walk.h"
#include "common/stream_k_walk.h"
#include "fa4jit/kernel.hpp"
#include "runtime/driver.hpp"
#include "runtime/tma.hpp"
#include "runtime/workspace.hpp"

namespace jit::detail {

struct LaunchShape;  // runtime/launch_args.hpp

// Can a cubin built for `rc` run on a device of compute capability `sm` (major*10 + minor)?
bool runs_on(const ResolvedConfig& rc, int sm);

// One cuModuleLoadData result and its one kernel; unloaded with it.
class LoadedModule {
 public:
  // Looks the kernel up by `entry`, a name derived from the cubin's key (entry_name,
  // combine_entry_name): a cubin of another key does not load. smem_bytes > 0 raises the
  // kernel's dynamic shared memory limit to it; threads > 0 asks the driver how many CTAs of that
  // size one SM holds at once (resident_ctas; else 1).
  LoadedModule(const std::string& cubin, const std::string& entry, int smem_bytes = 0, int threads = 0);
  ~LoadedModule();
  LoadedModule(const LoadedModule&) = delete;
  LoadedModule& operator=(const LoadedModule&) = delete;
  CUfunction function() const { return fn_; }
  int resident_ctas() const { return resident_ctas_; }

 private:
  CUmodule module_ = nullptr;
  CUfunction fn_ = nullptr;
  int resident_ctas_ = 1;
};

// A cubin's modules, one per CUDA context, loaded on first use in each.
class ContextModules {
 public:
  ContextModules(std::string cubin, std::string entry, int smem_bytes, int threads = 0)
      : cubin_(std::move(cubin)), entry_(std::move(entry)), smem_bytes_(smem_bytes), threads_(threads) {}
  // The current context's module; `check` runs (e.g. the arch test) before a first load.
  const LoadedModule& current(const std::function<void(CUdevice)>& check = {}) const;
  const std::string& cubin() const { return cubin_; }

 private:
  std::string cubin_, entry_;
  int smem_bytes_, threads_;
  mutable std::mutex mu_;
  mutable std::map<CUcontext, std::unique_ptr<LoadedModule>> modules_;
};

// The split-KV combine kernel of one (arch, output dtype, head dim) (generator/combine.hpp),
// shared by the attention kernels with that triple.
class CombineKernel {
 public:
  // waits_for_kernel: compiled to wait for its attention kernel (combine_waits_for_kernel), so it
  // is launched as that kernel's programmatic dependent.
  CombineKernel(std::string key, std::string cubin, std::string origin, bool waits_for_kernel);
  const std::string& key() const { return key_; }
  const std::string& origin() const { return origin_; }
  bool waits_for_kernel() const { return waits_for_kernel_; }
  CUfunction function() const { return modules_.current().function(); }  // the current context's

 private:
  std::string key_, origin_;
  bool waits_for_kernel_;
  ContextModules modules_;
};
using CombinePtr = std::shared_ptr<const CombineKernel>;

// Everything a launch passes to the driver, computed before any driver launch call.
struct LaunchPlan {
  fa4::FwdParams params{};
  fa4::TmaDescs tma{};
  bool uses_tma = false;
  unsigned grid[3] = {1, 1, 1};
  unsigned block = 0;
  unsigned smem_bytes = 0;
  // Split-KV: params.num_splits > 1 adds fa4_combine over combine_grid CTAs, and needs
  // workspace.bytes() of scratch (o_partial, lse_partial, then stream-K's split_count, and the
  // dynamic walk's tile counter, which it alone needs unsplit) unless the caller passed some.
  unsigned combine_grid = 0;
  WorkspaceLayout workspace;  // 0 rows when not split; 0 bytes when neither split nor dynamic
};

class CompiledKernel;
using CompiledKernelPtr = std::shared_ptr<const CompiledKernel>;

class CompiledKernel final : public Kernel {
 public:
  CompiledKernel(ResolvedConfig config, std::string key, std::string cubin, std::string origin, double compile_ms,
                 CombinePtr combine);

  void launch(const LaunchArgs& args, Stream stream) const override;
  int num_splits(const LaunchArgs& args) const override;
  std::size_t workspace_bytes(const LaunchArgs& args) const override;
  // Checks args and builds params, TMA maps (needs a driver, any GPU) and launch geometry.
  LaunchPlan plan(const LaunchArgs& args) const;
  const ResolvedConfig& config() const override { return config_; }
  const std::string& key() const override { return key_; }
  const std::string& cubin() const override { return modules_.cubin(); }
  const CombinePtr& combine() const { return combine_; }
  const std::string& origin() const override { return origin_; }
  double compile_ms() const override { return compile_ms_; }

 private:
  // Loads on first use per context, with the combine kernel's module: a later split launch
  // loads nothing (e.g. inside a CUDA graph capture).
  const LoadedModule& module_for_current_context() const;
  // p: this kernel's plan; module: this kernel's module in the current context.
  void enqueue(LaunchPlan& p, const LaunchArgs& args, Stream stream, const LoadedModule& module) const;
  int slots_per_sm(bool paged) const;  // CTA slots per SM the walk and the automatic split count fill

  ResolvedConfig config_;
  std::string key_, origin_;
  double compile_ms_;
  ContextModules modules_;
  CombinePtr combine_;
  mutable std::mutex mu_;  // lpt_sections_
  mutable TmaDescCache tma_;
  // Persistent causal launches: sections per (max_seqlen_q, keys, pairs, CTAs, L2 bound), chosen
  // once by simulating the walk (fa4::PersistentWalk::plan_sections); guarded by mu_.
  fa4::LptSections balanced_lpt_sections(const LaunchShape& shape, int ctas, int max_heads) const;
  mutable std::map<std::array<int, 5>, fa4::LptSections> lpt_sections_;
};

}  // namespace jit::detail
