#include "runtime/compiled_kernel.hpp"

#include <algorithm>

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

CUfunction CompiledKernel::function_for_current_context() const {
  const CUdevice dev = ensure_context();
  CUcontext ctx = nullptr;
  check(driver().cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
  std::lock_guard<std::mutex> lock(mu_);
  auto it = modules_.find(ctx);
  if (it != modules_.end()) return it->second->function();
  const int sm = device_sm(dev);
  if (!runs_on(config_, sm))
    throw DriverError(fmt::format(
        "arch mismatch: kernel {} was compiled for {} but the current GPU ({}) is sm_{}; build it for {} or leave "
        "FA4Config::arch empty to use the current GPU",
        key_, config_.config.arch, device_name(dev), sm, device_arch(dev)));
  auto loaded = std::make_unique<LoadedModule>(cubin_, config_.smem_bytes);
  const CUfunction fn = loaded->function();
  modules_.emplace(ctx, std::move(loaded));
  return fn;
}

LaunchPlan CompiledKernel::plan(const LaunchArgs& args) const {
  LaunchPlan plan;
  LaunchShape shape;
  plan.params = pack_params(config_, args, &shape);  // throws before anything runs
  plan.uses_tma = config_.backend != Backend::portable;
  if (plan.uses_tma) plan.tma = tma_.get(config_, args);
  plan.grid[0] = static_cast<unsigned>(plan.params.num_m_blocks);
  plan.grid[1] = static_cast<unsigned>(shape.num_q_heads);
  plan.grid[2] = static_cast<unsigned>(shape.batch);
  if (config_.tuning.persistent && config_.backend == Backend::hopper) {
    // One CTA per SM walks every (m_block, head, batch) tile.
    const long long tiles = 1LL * plan.grid[0] * plan.grid[1] * plan.grid[2];
    int sms = 0;
    check(driver().cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, ensure_context()),
          "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)");
    plan.grid[0] = static_cast<unsigned>(std::max(1LL, std::min<long long>(sms, tiles)));
    plan.grid[1] = plan.grid[2] = 1;
  }
  plan.block = static_cast<unsigned>(config_.num_threads);
  plan.smem_bytes = static_cast<unsigned>(config_.smem_bytes);
  return plan;
}

void CompiledKernel::launch(const LaunchArgs& args, Stream stream) const {
  LaunchPlan p = plan(args);  // every argument checked first: LaunchError before any driver work
  const CUfunction fn = function_for_current_context();  // then the arch check and module load
  void* kernel_params[] = {&p.params, &p.tma};
  CUlaunchConfig cfg{};
  cfg.gridDimX = p.grid[0];
  cfg.gridDimY = p.grid[1];
  cfg.gridDimZ = p.grid[2];
  cfg.blockDimX = p.block;
  cfg.blockDimY = cfg.blockDimZ = 1;
  cfg.sharedMemBytes = p.smem_bytes;
  cfg.hStream = static_cast<CUstream>(stream);
  check(driver().cuLaunchKernelEx(&cfg, fn, kernel_params, nullptr), "cuLaunchKernelEx");
}

}  // namespace jit::detail
