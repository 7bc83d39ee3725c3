#include "runtime/workspace.hpp"

#include <cstdint>
#include <map>
#include <mutex>

namespace jit::detail {

namespace {
// Freed workspace the pool keeps mapped. A decode step needs rows * splits * (depth + 1) floats
// (about 0.5 MiB for 32 heads x 33 splits); 256 MiB covers any sane mix and bounds what idles.
constexpr std::uint64_t kKeepReservedBytes = 256ull << 20;
}  // namespace

CUmemoryPool workspace_pool(CUdevice dev) {
  static std::mutex mu;
  static std::map<CUdevice, CUmemoryPool> pools;  // never destroyed: the driver may be gone at exit
  std::lock_guard<std::mutex> lock(mu);
  auto it = pools.find(dev);
  if (it != pools.end()) return it->second;
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = dev;
  CUmemoryPool pool = nullptr;
  check(driver().cuMemPoolCreate(&pool, &props), "cuMemPoolCreate(split-KV workspace)");
  std::uint64_t keep = kKeepReservedBytes;
  check(driver().cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep),
        "cuMemPoolSetAttribute(RELEASE_THRESHOLD)");
  pools.emplace(dev, pool);
  return pool;
}

namespace {
std::size_t partial_bytes(const WorkspaceLayout& l) {
  static_assert(sizeof(float) == sizeof(int), "split_count shares the float-sized slots");
  const int count_arrays = l.slots ? 2 : l.segment_counts ? 1 : 0;
  return static_cast<std::size_t>(l.rows) * (1LL * l.splits * (l.depth + 1) + count_arrays) * sizeof(float);
}
}  // namespace

std::size_t WorkspaceLayout::counter_offset() const { return (partial_bytes(*this) + 15) / 16 * 16; }

std::size_t WorkspaceLayout::bytes() const { return tile_counter ? counter_offset() + 16 : partial_bytes(*this); }

void WorkspaceLayout::place(CUdeviceptr base, fa4::FwdParams& p) const {
  if (rows > 0) {
    p.o_partial = reinterpret_cast<float*>(base);
    p.lse_partial = p.o_partial + rows * splits * depth;
    p.split_count = segment_counts || slots ? reinterpret_cast<int*>(p.lse_partial + rows * splits) : nullptr;
    p.split_row = slots ? p.split_count + rows : nullptr;
  }
  p.tile_counter = tile_counter ? reinterpret_cast<int*>(base + counter_offset()) : nullptr;
}

LaunchWorkspace::LaunchWorkspace(const LaunchArgs& args, std::size_t bytes, CUstream stream) : stream_(stream) {
  if (args.workspace) {
    ptr_ = reinterpret_cast<CUdeviceptr>(args.workspace);
    return;
  }
  check(driver().cuMemAllocFromPoolAsync(&ptr_, bytes, workspace_pool(ensure_context()), stream),
        "cuMemAllocFromPoolAsync(split-KV workspace)");
  owned_ = true;
}

LaunchWorkspace::~LaunchWorkspace() {
  if (owned_) driver().cuMemFreeAsync(ptr_, stream_);
}

}  // namespace jit::detail
