#include "runtime/driver.hpp"

#include <dlfcn.h>

#include <map>
#include <mutex>

#include <fmt/format.h>

#include "fa4jit/errors.hpp"

namespace jit::detail {

namespace {

struct Loaded {
  DriverApi api;
  std::string error;  // empty when usable
};

Loaded load() {
  Loaded l;
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);  // never closed: kernels outlive callers
  if (!h) {
    l.error = fmt::format("no CUDA driver: dlopen(libcuda.so.1) failed: {}", dlerror());
    return l;
  }
  using GetProc = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  auto get_proc = reinterpret_cast<GetProc>(dlsym(h, "cuGetProcAddress_v2"));
  if (!get_proc) {
    l.error = "no usable CUDA driver: cuGetProcAddress_v2 is missing (driver older than CUDA 12)";
    return l;
  }
  CUdriverProcAddressQueryResult q;
#define FA4JIT_LOAD(name)                                                                               \
  if (get_proc(#name, reinterpret_cast<void**>(&l.api.name), 12000, CU_GET_PROC_ADDRESS_DEFAULT, &q) != \
          CUDA_SUCCESS ||                                                                               \
      q != CU_GET_PROC_ADDRESS_SUCCESS) {                                                               \
    l.error = "no usable CUDA driver: cannot resolve " #name;                                           \
    return l;                                                                                           \
  }
  FA4JIT_DRIVER_FUNCTIONS(FA4JIT_LOAD)
#undef FA4JIT_LOAD
  const CUresult r = l.api.cuInit(0);
  if (r != CUDA_SUCCESS) {
    const char* name = "?";
    l.api.cuGetErrorName(r, &name);
    l.error = r == CUDA_ERROR_NO_DEVICE ? std::string("no CUDA GPU: cuInit reported CUDA_ERROR_NO_DEVICE")
                                        : fmt::format("CUDA driver unusable: cuInit failed with {}", name);
    return l;
  }
  l.api.cuDriverGetVersion(&l.api.version);
  return l;
}

const Loaded& loaded() {
  static const Loaded l = load();
  return l;
}

}  // namespace

const DriverApi& driver() {
  const Loaded& l = loaded();
  if (!l.error.empty()) throw DriverError(l.error);
  return l.api;
}

std::string driver_unavailable_reason() { return loaded().error; }

void check(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return;
  const DriverApi& d = loaded().api;
  const char* name = "?";
  const char* text = "?";
  if (d.cuGetErrorName) d.cuGetErrorName(r, &name);
  if (d.cuGetErrorString) d.cuGetErrorString(r, &text);
  throw DriverError(fmt::format("{} failed: {} ({})", what, name, text), static_cast<int>(r));
}

CUdevice ensure_context() {
  const DriverApi& d = driver();
  CUcontext ctx = nullptr;
  check(d.cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
  CUdevice dev = 0;
  if (!ctx) {
    int count = 0;
    check(d.cuDeviceGetCount(&count), "cuDeviceGetCount");
    if (count == 0) throw DriverError("no CUDA GPU: the driver reports 0 devices");
    check(d.cuDeviceGet(&dev, 0), "cuDeviceGet");
    check(d.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");  // kept for the process
    check(d.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  }
  check(d.cuCtxGetDevice(&dev), "cuCtxGetDevice");
  return dev;
}

int device_sm(CUdevice dev) {
  const DriverApi& d = driver();
  int major = 0, minor = 0;
  check(d.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), "cuDeviceGetAttribute");
  check(d.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev), "cuDeviceGetAttribute");
  return major * 10 + minor;
}

std::string device_arch(CUdevice dev) {
  const int sm = device_sm(dev);
  if (sm == 90) return "sm_90a";
  if (sm == 100) return "sm_100a";
  if (sm == 103) return "sm_103a";
  return fmt::format("sm_{}", sm);
}

const DeviceLimits& device_limits(CUdevice dev) {
  static std::mutex mu;
  static std::map<CUdevice, DeviceLimits> known;
  std::lock_guard<std::mutex> lock(mu);
  auto it = known.find(dev);
  if (it != known.end()) return it->second;
  DeviceLimits l;
  check(driver().cuDeviceGetAttribute(&l.sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev),
        "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)");
  check(driver().cuDeviceGetAttribute(&l.l2_bytes, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, dev),
        "cuDeviceGetAttribute(L2_CACHE_SIZE)");
  return known.emplace(dev, l).first->second;  // std::map: references stay valid as it grows
}

std::string device_name(CUdevice dev) {
  char name[256] = {};
  check(driver().cuDeviceGetName(name, sizeof(name), dev), "cuDeviceGetName");
  return name;
}

}  // namespace jit::detail
