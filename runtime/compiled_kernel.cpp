#include "runtime/compiled_kernel.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include <fmt/format.h>

#include "fa4jit/errors.hpp"
#include "generator/backends/backend.hpp"
#include "generator/source.hpp"
#include "runtime/launch_args.hpp"
#include "runtime/tma.hpp"
#include "runtime/workspace.hpp"

namespace jit::detail {

bool runs_on(const ResolvedConfig& rc, int sm) { return policy(rc).runs_on(rc, sm); }

LoadedModule::LoadedModule(const std::string& cubin, const std::string& entry, int smem_bytes, int threads) {
  const DriverApi& d = driver();
  check(d.cuModuleLoadData(&module_, cubin.data()), "cuModuleLoadData");
  try {
    check(d.cuModuleGetFunction(&fn_, module_, entry.c_str()), ("cuModuleGetFunction(" + entry + ")").c_str());
    if (smem_bytes > 0)
      check(d.cuFuncSetAttribute(fn_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem_bytes),
            "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
    if (threads > 0) {
      int n = 0;
      check(d.cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, fn_, threads, static_cast<size_t>(smem_bytes)),
            "cuOccupancyMaxActiveBlocksPerMultiprocessor");
      resident_ctas_ = std::max(1, n);
    }
  } catch (...) {
    d.cuModuleUnload(module_);
    throw;
  }
}

LoadedModule::~LoadedModule() {
  if (module_) driver().cuModuleUnload(module_);  // may fail at process exit; nothing to do then
}

const LoadedModule& ContextModules::current(const std::function<void(CUdevice)>& check_device) const {
  const CUdevice dev = ensure_context();
  CUcontext ctx = nullptr;
  check(driver().cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
  std::lock_guard<std::mutex> lock(mu_);
  auto it = modules_.find(ctx);
  if (it != modules_.end()) return *it->second;
  if (check_device) check_device(dev);
  auto loaded = std::make_unique<LoadedModule>(cubin_, entry_, smem_bytes_, threads_);
  const LoadedModule& m = *loaded;
  modules_.emplace(ctx, std::move(loaded));
  return m;
}

CombineKernel::CombineKernel(std::string key, std::string cubin, std::string origin, bool waits_for_kernel)
    : key_(std::move(key)),
      origin_(std::move(origin)),
      waits_for_kernel_(waits_for_kernel),
      modules_(std::move(cubin), combine_entry_name(key_), 0) {}

CompiledKernel::CompiledKernel(ResolvedConfig config, std::string key, std::string cubin, std::string origin,
                               double compile_ms, CombinePtr combine)
    : config_(std::move(config)),
      key_(std::move(key)),
      origin_(std::move(origin)),
      compile_ms_(compile_ms),
      modules_(std::move(cubin), entry_name(key_), config_.smem_bytes, config_.num_threads),
      combine_(std::move(combine)) {}

int CompiledKernel::num_splits(const LaunchArgs& args) const { return static_cast<int>(plan(args).params.num_splits); }

std::size_t CompiledKernel::workspace_bytes(const LaunchArgs& args) const { return plan(args).workspace.bytes(); }

const LoadedModule& CompiledKernel::module_for_current_context() const {
  return modules_.current([&](CUdevice dev) {
    const int sm = device_sm(dev);
    if (!runs_on(config_, sm))
      throw DriverError(fmt::format(
          "arch mismatch: kernel {} was compiled for {} but the current GPU ({}) is sm_{}; build it for {} or leave "
          "FA4Config::arch empty to use the current GPU",
          key_, config_.config.arch, device_name(dev), sm, device_arch(dev)));
    // With the kernel, as when it shared its module: a split launch never loads a module first
    // (e.g. inside a CUDA graph capture).
    combine_->function();
  });
}

// The automatic split count fills SMs x this many CTA slots. A persistent walk fills every slot its
// kernel is sized for (ctas_per_sm: the 64-row tiles hold two; its grid had launched one CTA per SM,
// docs/PERF.md run 89). The grid walk: the portable kernel as many CTAs as
// the driver's occupancy calculator fits on one SM; its decode (B 8, Hq/Hkv 32/8, 32k keys) ran one
// 4-warp CTA per SM at 2 splits, DRAM 27%, and 4 splits read K/V 1.33x faster on an H100, bf16 and
// e4m3 alike (docs/PERF.md run 31). sm90a's kernels are sized for one or two CTAs per SM
// (ctas_per_sm); FP8 KV caches count both (their converters are latency-bound: 1.33x, run 30), and
// so do paged launches, whose producers are latency-bound too (a page-table read per TMA box, or
// gathered rows: 16-18 GB/s per CTA at page 16 and page 1, where contiguous TMA reads 33; Qwen2.5-7B
// 32 x 32k at 128 CTAs 2.28 TB/s, run 64); contiguous 16-bit K/V one (the same speed at 2, 4 and 8
// splits; more splits only cost combine work).
int CompiledKernel::slots_per_sm(bool paged) const {
  if (config_.walk == TileWalk::persistent || config_.walk == TileWalk::dynamic)
    return std::max(1, config_.ctas_per_sm);
  if (config_.backend == Backend::portable) return module_for_current_context().resident_ctas();
  return config_.config.kv_dtype || paged ? std::max(1, config_.ctas_per_sm) : 1;
}

namespace {

int sm_count() { return device_limits(ensure_context()).sms; }

// (batch, head) pairs per section of the longest-first order: the persistent walk's L2 rule
// (fa4::PersistentWalk::l2_section_heads) on this device's L2. Varlen keys without max_seqlen_k
// have no host-side length: the longest query length stands in.
int lpt_section_heads(const LaunchShape& shape, const LaunchArgs& args, const FA4Config& c) {
  const long long l2 = device_limits(ensure_context()).l2_bytes;
  const long long keys = shape.max_seqlen_k > 0 ? shape.max_seqlen_k : shape.max_seqlen_q;
  const long long kv_heads = std::max<long long>(1, args.k.shape[2]);
  const long long sharing = std::max<long long>(1, shape.grid_heads / kv_heads);
  return fa4::PersistentWalk::l2_section_heads(l2, keys, 1LL * (c.depth + value_depth(c)) * dtype_size(kv_type(c)),
                                               sharing);
}

}  // namespace

LaunchPlan CompiledKernel::plan(const LaunchArgs& args) const {
  LaunchPlan plan;
  LaunchShape shape;
  fa4::FwdParams& p = plan.params;
  p = pack_params(config_, args, &shape);  // throws before anything runs
  plan.uses_tma = config_.uses_tma;
  if (plan.uses_tma) plan.tma = tma_.get(config_, args, p.kv_box_rows);
  if (args.num_splits < 0 || args.num_splits > fa4::kMaxSplits)
    throw LaunchError(
        fmt::format("launch: num_splits is {}: use 0 (automatic) or 1..{}", args.num_splits, fa4::kMaxSplits));

  const FA4Config& c = config_.config;
  const bool masked = c.mask.kind != Mask::Kind::none;
  // Varlen batches with max_seqlen_k are scheduled as equal-length ones (PERF.md run 45).
  const ScheduleModel model = schedule_model(shape, args, c);
  fa4::WalkInput in;
  in.m_blocks = p.num_m_blocks;
  in.heads = shape.grid_heads;
  in.batch = shape.batch;
  // Packed varlen keys have a length only through the caller's max_seqlen_k: without it a varlen
  // decode batch never split (48 rows of 4k-8.7k keys at one KV head read 1.5 TB/s, PERF.md run
  // 84). A split divides each tile's own KV tiles, so the hint sizes the split count, never a range
  // (any int: rounded up in 64 bits).
  in.kv_blocks = model.kv_tiles(c.BN);
  in.keys_known = model.shape.max_seqlen_k != 0;
  in.requested_splits = args.num_splits;
  in.sms = sm_count() * slots_per_sm(args.page_table != nullptr);
  in.equal_tiles = !masked && !c.pack_gqa && !args.cu_seqlens_q;
  in.max_seqlen_q = shape.max_seqlen_q;
  in.bm = c.BM;
  if (config_.lpt_order && masked) in.lpt_heads = lpt_section_heads(model.shape, args, c);
  in.causal_known_lengths = model.causal_known_lengths;
  // Varlen grid launches list each sequence's own tiles (a decode row takes one, not max_seqlen_q /
  // BM); total_q (q's rows) bounds them.
  if (args.cu_seqlens_q && config_.walk == TileWalk::grid && policy(config_).lists_varlen_tiles()) {
    in.varlen_tiles = fa4::GridWalk::varlen_tile_bound(args.q.shape[1], shape.batch, pack_heads(config_),
                                                       pack_span(config_), c.BM, p.num_m_blocks);
    // Long-pole splits (GridWalk::long_pole_split); not with bottom-aligned tiles, whose short
    // tiles leave slots no row writes.
    if (!policy(config_).bottom_q_tiles(c)) {
      const auto poles = fa4::GridWalk::pole_rows(pack_heads(config_), pack_span(config_), c.BM);
      in.pole_qmax = poles.qmax;
      in.pole_head_rows = poles.head_rows;
    }
    in.bn = c.BN;
    in.max_seqlen_k = model.shape.max_seqlen_k;  // the caller's hint for packed varlen keys
    in.value_depth = value_depth(c);
  }
  in.balance = [this, &model](int ctas, int max_heads) { return balanced_lpt_sections(model.shape, ctas, max_heads); };
  const long long tiles = in.tiles();

  fa4::WalkPlan walk;
  switch (config_.walk) {
    case TileWalk::grid: walk = fa4::GridWalk::plan(in, p); break;
    case TileWalk::persistent:
    case TileWalk::dynamic: walk = fa4::PersistentWalk::plan(in, p); break;  // the same units, claimed at run time
    case TileWalk::stream_k: walk = fa4::StreamKWalk::plan(in, p); break;
  }
  std::copy(std::begin(walk.grid), std::end(walk.grid), plan.grid);

  const int splits = walk.splits;
  if (splits > 1) {
    const long long rows = p.partial_rows;
    const long long units = p.split_from + (tiles - p.split_from) * splits;  // CTAs' work items
    if (units > INT32_MAX || rows * splits * (value_depth(c) + 1) > (1LL << 40))
      throw LaunchError(fmt::format("launch: num_splits = {} over {} tiles is too large", splits, tiles));
    const int rows_per_cta = fa4::combine_rows_per_cta(splits);
    plan.combine_grid = static_cast<unsigned>((rows + rows_per_cta - 1) / rows_per_cta);
    plan.workspace = WorkspaceLayout{rows, splits, value_depth(c), config_.walk == TileWalk::stream_k, walk.slots};
  }
  // The dynamic walk claims from a counter where the static order misweighs the tiles (a snippet
  // mask's tile map, a varlen batch modelled at its longest: PERF.md runs 76, 83); elsewhere its
  // producer strides as the persistent walk, with no counter to zero.
  plan.workspace.tile_counter = config_.walk == TileWalk::dynamic && !model.static_order;
  if (plan.workspace.bytes() > 0) {
    if (args.workspace && args.workspace_bytes < plan.workspace.bytes())
      throw LaunchError(fmt::format(
          "launch: workspace_bytes is {}, {} need {} (Kernel::workspace_bytes)", args.workspace_bytes,
          splits > 1 ? fmt::format("{} splits", splits) : std::string("the tile counter"), plan.workspace.bytes()));
    if (args.workspace && reinterpret_cast<std::uintptr_t>(args.workspace) % 16 != 0)
      throw LaunchError("launch: workspace is not 16-byte aligned");
  }
  plan.block = static_cast<unsigned>(config_.num_threads);
  plan.smem_bytes = static_cast<unsigned>(config_.smem_bytes);
  return plan;
}

namespace {

// `dependent`: launched as a programmatic dependent of the stream's previous kernel (it must wait
// for that kernel in griddepcontrol.wait: the combine of combine_waits_for_kernel).
void launch_on(CUfunction fn, const unsigned (&grid)[3], unsigned block, unsigned smem, CUstream stream, void** params,
               bool dependent = false) {
  CUlaunchAttribute attr{};
  attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  attr.value.programmaticStreamSerializationAllowed = 1;
  CUlaunchConfig cfg{};
  cfg.attrs = dependent ? &attr : nullptr;
  cfg.numAttrs = dependent ? 1 : 0;
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

fa4::LptSections CompiledKernel::balanced_lpt_sections(const LaunchShape& shape, int ctas, int max_heads) const {
  const int keys = shape.max_seqlen_k;  // known: plain and paged launches, or varlen with max_seqlen_k
  const int pairs = shape.batch * shape.num_q_heads;
  const std::array<int, 5> key{shape.max_seqlen_q, keys, pairs, ctas, max_heads};
  std::lock_guard<std::mutex> lock(mu_);
  if (lpt_sections_.size() >= 1024) lpt_sections_.clear();  // a bounded memo: each entry costs one simulation
  auto [it, fresh] = lpt_sections_.try_emplace(key);
  if (fresh) {
    const FA4Config& c = config_.config;
    const bool bottom = policy(config_).bottom_q_tiles(c);
    using fa4::PersistentWalk;
    it->second = PersistentWalk::plan_sections(
        PersistentWalk::causal_tile_weights(shape.max_seqlen_q, keys, c.BM, c.BN, c.mask.top_left, bottom), pairs, ctas,
        max_heads);
  }
  return it->second;
}

void CompiledKernel::launch(const LaunchArgs& args, Stream stream) const {
  // plan: every argument checked first (LaunchError before any driver work), then for the portable
  // kernel the module load its split count needs (occupancy); here the same module.
  LaunchPlan p = plan(args);
  enqueue(p, args, stream, module_for_current_context());  // the arch check and the module loads
}

void CompiledKernel::enqueue(LaunchPlan& p, const LaunchArgs& args, Stream stream, const LoadedModule& module) const {
  const CUstream s = static_cast<CUstream>(stream);
  if (p.workspace.bytes() == 0) {
    void* kernel_params[] = {&p.params, &p.tma};
    launch_on(module.function(), p.grid, p.block, p.smem_bytes, s, kernel_params);
    return;
  }
  LaunchWorkspace ws(args, p.workspace.bytes(), s);
  p.workspace.place(ws.get(), p.params);
  if (p.params.tile_counter)  // the dynamic walk claims units from 0 (a memset node under graph capture)
    check(driver().cuMemsetD32Async(reinterpret_cast<CUdeviceptr>(p.params.tile_counter), 0u, 1, s),
          "cuMemsetD32Async(tile counter)");
  void* kernel_params[] = {&p.params, &p.tma};
  launch_on(module.function(), p.grid, p.block, p.smem_bytes, s, kernel_params);
  if (p.params.num_splits <= 1) return;
  const CUfunction combine = combine_->function();  // loaded with the kernel's module
  void* combine_params[] = {&p.params};
  const unsigned combine_grid[3] = {p.combine_grid, 1, 1};
  launch_on(combine, combine_grid, fa4::kCombineThreads, 0, s, combine_params, combine_->waits_for_kernel());
}

}  // namespace jit::detail
