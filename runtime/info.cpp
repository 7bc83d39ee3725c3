#include <cstdlib>
#include <filesystem>
#include <string>

#include <fmt/format.h>

#include "fa4jit/jit.hpp"
#include "base/log.hpp"
#include "runtime/driver.hpp"
#include "runtime/nvrtc.hpp"
#include "runtime/runtime_internal.hpp"

namespace jit {

Tensor Tensor::contiguous(void* data, DType dtype, std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t d) {
  return Tensor{data, dtype, {b, s, h, d}, {s * h * d, h * d, d, 1}};
}

RuntimeInfo runtime_info() {
  RuntimeInfo info;
  info.version = FA4JIT_VERSION_STRING;
  std::tie(info.nvrtc_major, info.nvrtc_minor) = detail::nvrtc_version();
  for (int a : detail::nvrtc_supported_archs()) info.nvrtc_archs.push_back(fmt::format("sm_{}", a));
  const std::string why = detail::driver_unavailable_reason();
  if (why.empty()) {
    const detail::DriverApi& d = detail::driver();
    info.driver = fmt::format("{}.{}", d.version / 1000, d.version % 1000 / 10);
    int count = 0;
    d.cuDeviceGetCount(&count);
    for (int i = 0; i < count; ++i) {
      CUdevice dev = 0;
      d.cuDeviceGet(&dev, i);
      info.gpus.push_back(fmt::format("{}: {} ({})", i, detail::device_name(dev), detail::device_arch(dev)));
    }
  } else {
    info.driver = why;
  }
  // The process's store: what get_kernel uses (constructing it probes which tier is writable). A
  // cache variable that does not parse fails every get_kernel, but here it is reported, with any
  // other refused value, so one `fa4jit info` shows them all.
  try {
    cache::Store& store = detail::disk_cache();
    const cache::Options& opt = store.options();
    for (const auto& root : opt.roots) info.cache_roots.push_back(root.string());
    for (const auto& b : opt.bundles)
      if (std::error_code ec; std::filesystem::is_directory(b, ec)) info.bundles.push_back(b.string());
    info.cache_writable = store.writable_root().string();
    info.sealed = opt.sealed;
    info.remote_cache = opt.remote_url;
    info.cache_max_bytes = opt.max_bytes;
  } catch (const std::exception& e) {
    info.problems.push_back(e.what());
  }
  try {
    info.compile_policy = to_string(compile_policy());
  } catch (const ConfigError& e) {
    info.compile_policy = e.what();
    info.problems.push_back(e.what());
  }
  // FA4JIT_LOG falls back to warn for log lines and fails the first kernel (base/log.cpp).
  if (std::string bad = detail::log_env_problem(); !bad.empty()) info.problems.push_back(std::move(bad));
#ifdef FA4JIT_HAVE_HIREDIS
  info.redis_built = true;
#endif
  info.log_level = log_level();
  info.stats = stats();
  return info;
}

}  // namespace jit
