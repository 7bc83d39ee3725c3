#include "runtime/compiled_kernel.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include <fmt/format.h>

#include "fa4jit/errors.hpp"
#include "generator/source.hpp"
#include "runtime/launch_args.hpp"
#include "runtime/tma.hpp"

namespace jit::detail {

// SASS runs on the same major with an equal or newer minor; 'a'/'f' targets need their own family.
bool runs_on(const ResolvedConfig& rc, int sm) {
  switch (rc.backend) {
    case Backend::hopper: return sm == 90;
    case Backend::blackwell: return rc.config.arch == "sm_100f" ? sm / 10 == 10 : sm == rc.sm;
    case Backend::portable: return sm / 10 == rc.sm / 10 && sm % 10 >= rc.sm % 10;
  }
  return false;
}

LoadedModule::LoadedModule(const std::string& cubin, int smem_bytes) {
  const DriverApi& d = driver();
  check(d.cuModuleLoadData(&module_, cubin.data()), "cuModuleLoadData");
  try {
    check(d.cuModuleGetFunction(&fn_, module_, kEntryName), "cuModuleGetFunction");
    check(d.cuModuleGetFunction(&combine_fn_, module_, kCombineEntryName), "cuModuleGetFunction(fa4_combine)");
    check(d.cuFuncSetAttribute(fn_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem_bytes),
          "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
  } catch (...) {
    d.cuModuleUnload(module_);
    throw;
  }
}

LoadedModule::~LoadedModule() {
  if (module_) driver().cuModuleUnload(module_);  // may fail at process exit; nothing to do then
}

CompiledKernel::CompiledKernel(ResolvedConfig config, std::string key, std::string cubin, std::string origin,
                               double compile_ms)
    : config_(std::move(config)),
      key_(std::move(key)),
      cubin_(std::move(cubin)),
      origin_(std::move(origin)),
      compile_ms_(compile_ms) {}

const LoadedModule& CompiledKernel::module_for_current_context() const {
  const CUdevice dev = ensure_context();
  CUcontext ctx = nullptr;
  check(driver().cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
  std::lock_guard<std::mutex> lock(mu_);
  auto it = modules_.find(ctx);
  if (it != modules_.end()) return *it->second;
  const int sm = device_sm(dev);
  if (!runs_on(config_, sm))
    throw DriverError(fmt::format(
        "arch mismatch: kernel {} was compiled for {} but the current GPU ({}) is sm_{}; build it for {} or leave "
        "FA4Config::arch empty to use the current GPU",
        key_, config_.config.arch, device_name(dev), sm, device_arch(dev)));
  auto loaded = std::make_unique<LoadedModule>(cubin_, config_.smem_bytes);
  const LoadedModule& m = *loaded;
  modules_.emplace(ctx, std::move(loaded));
  return m;
}

int choose_num_splits(long long tiles, int kv_blocks, int sms) {
  if (tiles <= 0 || sms <= 0 || tiles >= sms * 8LL / 10 || kv_blocks < 4) return 1;
  const int max_splits = std::min({128, kv_blocks / 2, static_cast<int>(4LL * sms / tiles + 1)});
  auto efficiency = [&](int s) {
    const double waves = static_cast<double>(tiles * s) / sms;
    return waves / std::ceil(waves);
  };
  double best = 0;
  for (int s = 1; s <= max_splits; ++s) best = std::max(best, efficiency(s));
  for (int s = 1; s <= max_splits; ++s)
    if (efficiency(s) >= 0.85 * best) return s;
  return 1;
}

namespace {

int sm_count() {
  int sms = 0;
  check(driver().cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, ensure_context()),
        "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)");
  return sms;
}

}  // namespace

LaunchPlan CompiledKernel::plan(const LaunchArgs& args) const {
  LaunchPlan plan;
  LaunchShape shape;
  fa4::FwdParams& p = plan.params;
  p = pack_params(config_, args, &shape);  // throws before anything runs
  plan.uses_tma = config_.backend != Backend::portable;
  if (plan.uses_tma) plan.tma = tma_.get(config_, args, p.kv_box_rows);
  const bool persistent = config_.tuning.persistent && config_.backend == Backend::hopper;
  plan.grid[0] = static_cast<unsigned>(p.num_m_blocks);
  plan.grid[1] = static_cast<unsigned>(shape.grid_heads);
  plan.grid[2] = static_cast<unsigned>(shape.batch);
  const long long tiles = 1LL * plan.grid[0] * plan.grid[1] * plan.grid[2];

  if (args.num_splits < 0) throw LaunchError(fmt::format("launch: num_splits is {}: use 0 (automatic) or >= 1", args.num_splits));
  if (args.num_splits > 1 && persistent)
    throw LaunchError("launch: num_splits > 1 with a persistent kernel (Tuning::persistent): split launches need the per-tile grid");
  int splits = args.num_splits;
  if (splits == 0)
    splits = persistent || shape.max_seqlen_k == 0
                 ? 1
                 : choose_num_splits(tiles, (shape.max_seqlen_k + config_.config.BN - 1) / config_.config.BN, sm_count());
  const long long rows = p.partial_rows;
  if (splits > 1) {
    if (tiles * splits > INT32_MAX || rows * splits * (config_.config.depth + 1) > (1LL << 40))
      throw LaunchError(fmt::format("launch: num_splits = {} over {} tiles is too large", splits, tiles));
    p.num_splits = splits;
    plan.grid[0] *= static_cast<unsigned>(splits);
    plan.combine_grid = static_cast<unsigned>((rows + fa4::kCombineRowsPerCta - 1) / fa4::kCombineRowsPerCta);
    plan.workspace_bytes = static_cast<std::size_t>(rows) * splits * (config_.config.depth + 1) * sizeof(float);
    if (args.workspace && args.workspace_bytes < plan.workspace_bytes)
      throw LaunchError(fmt::format("launch: workspace_bytes is {}, {} splits need {} (Kernel::workspace_bytes)",
                                    args.workspace_bytes, splits, plan.workspace_bytes));
    if (args.workspace && reinterpret_cast<std::uintptr_t>(args.workspace) % 16 != 0)
      throw LaunchError("launch: workspace is not 16-byte aligned");
  }
  if (persistent) {
    // One CTA per SM walks every (m_block, head, batch) tile.
    plan.grid[0] = static_cast<unsigned>(std::max(1LL, std::min<long long>(sm_count(), tiles)));
    plan.grid[1] = plan.grid[2] = 1;
  }
  plan.block = static_cast<unsigned>(config_.num_threads);
  plan.smem_bytes = static_cast<unsigned>(config_.smem_bytes);
  return plan;
}

namespace {

// Scratch for one split launch: the caller's, or stream-ordered memory freed after the combine.
class SplitWorkspace {
 public:
  SplitWorkspace(const LaunchArgs& args, std::size_t bytes, CUstream stream) : stream_(stream) {
    if (args.workspace) {
      ptr_ = reinterpret_cast<CUdeviceptr>(args.workspace);
    } else {
      check(driver().cuMemAllocAsync(&ptr_, bytes, stream), "cuMemAllocAsync(split-KV workspace)");
      owned_ = true;
    }
  }
  ~SplitWorkspace() {
    if (owned_) driver().cuMemFreeAsync(ptr_, stream_);  // stream-ordered: after the combine
  }
  SplitWorkspace(const SplitWorkspace&) = delete;
  SplitWorkspace& operator=(const SplitWorkspace&) = delete;
  CUdeviceptr get() const { return ptr_; }

 private:
  CUdeviceptr ptr_ = 0;
  CUstream stream_;
  bool owned_ = false;
};

void launch_on(CUfunction fn, const unsigned (&grid)[3], unsigned block, unsigned smem, CUstream stream, void** params) {
  CUlaunchConfig cfg{};
  cfg.gridDimX = grid[0];
  cfg.gridDimY = grid[1];
  cfg.gridDimZ = grid[2];
  cfg.blockDimX = block;
  cfg.blockDimY = cfg.blockDimZ = 1;
  cfg.sharedMemBytes = smem;
  cfg.hStream = stream;
  check(driver().cuLaunchKernelEx(&cfg, fn, params, nullptr), "cuLaunchKernelEx");
}

}  // namespace

void CompiledKernel::launch(const LaunchArgs& args, Stream stream) const {
  LaunchPlan p = plan(args);  // every argument checked first: LaunchError before any driver work
  const LoadedModule& module = module_for_current_context();  // then the arch check and module load
  const CUstream s = static_cast<CUstream>(stream);
  if (p.params.num_splits <= 1) {
    void* kernel_params[] = {&p.params, &p.tma};
    launch_on(module.function(), p.grid, p.block, p.smem_bytes, s, kernel_params);
    return;
  }
  SplitWorkspace ws(args, p.workspace_bytes, s);
  const long long o_floats = 1LL * p.params.partial_rows * p.params.num_splits * config_.config.depth;
  p.params.o_partial = reinterpret_cast<float*>(ws.get());
  p.params.lse_partial = p.params.o_partial + o_floats;
  void* kernel_params[] = {&p.params, &p.tma};
  launch_on(module.function(), p.grid, p.block, p.smem_bytes, s, kernel_params);
  void* combine_params[] = {&p.params};
  const unsigned combine_grid[3] = {p.combine_grid, 1, 1};
  launch_on(module.combine_function(), combine_grid, fa4::kCombineThreads, 0, s, combine_params);
}

}  // namespace jit::detail
