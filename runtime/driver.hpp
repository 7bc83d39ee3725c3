// The CUDA driver API, loaded with dlopen("libcuda.so.1") + cuGetProcAddress_v2. libcuda is
// never linked, so every fa4jit binary starts (and compiles, caches, prewarms) without a driver.
#pragma once
#include <cuda.h>  // types and enums only

#include <string>

namespace jit::detail {

// An X-macro list, one entry per line (clang-format would pack it unstably).
// clang-format off
#define FA4JIT_DRIVER_FUNCTIONS(X) \
  X(cuInit) \
  X(cuDriverGetVersion) \
  X(cuDeviceGet) \
  X(cuDeviceGetCount) \
  X(cuDeviceGetName) \
  X(cuDeviceGetAttribute) \
  X(cuDevicePrimaryCtxRetain) \
  X(cuDevicePrimaryCtxRelease) \
  X(cuCtxGetCurrent) \
  X(cuCtxSetCurrent) \
  X(cuCtxGetDevice) \
  X(cuCtxSynchronize) \
  X(cuModuleLoadData) \
  X(cuModuleUnload) \
  X(cuModuleGetFunction) \
  X(cuFuncSetAttribute) \
  X(cuFuncGetAttribute) \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor) \
  X(cuLaunchKernelEx) \
  X(cuTensorMapEncodeTiled) \
  X(cuGetErrorName) \
  X(cuGetErrorString) \
  X(cuMemAlloc) \
  X(cuMemFree) \
  X(cuMemcpyHtoD) \
  X(cuMemcpyDtoH) \
  X(cuMemsetD8) \
  X(cuMemsetD32Async) \
  X(cuEventCreate) \
  X(cuEventDestroy) \
  X(cuEventRecord) \
  X(cuEventSynchronize) \
  X(cuEventElapsedTime) \
  X(cuStreamSynchronize) \
  X(cuMemGetInfo) \
  X(cuMemAllocAsync) \
  X(cuMemFreeAsync) \
  X(cuMemPoolCreate) \
  X(cuMemPoolSetAttribute) \
  X(cuMemAllocFromPoolAsync)
// clang-format on

// Aliases first: a member named like the function it points to may not use decltype(&name).
#define FA4JIT_ALIAS(name) using name##_fn = decltype(&name);
FA4JIT_DRIVER_FUNCTIONS(FA4JIT_ALIAS)
#undef FA4JIT_ALIAS

struct DriverApi {
#define FA4JIT_DECLARE(name) name##_fn name = nullptr;
  FA4JIT_DRIVER_FUNCTIONS(FA4JIT_DECLARE)
#undef FA4JIT_DECLARE
  int version = 0;  // cuDriverGetVersion, e.g. 13000
};

// The loaded driver, initialised once. Throws DriverError("no CUDA driver: ...") when
// libcuda.so.1 cannot be loaded or cuInit fails.
const DriverApi& driver();

// Why the driver is unavailable, or empty when it is usable (never throws).
std::string driver_unavailable_reason();

// Throws DriverError naming `what` and the driver's error name/string unless r == CUDA_SUCCESS.
void check(CUresult r, const char* what);

// Makes a context current on the calling thread: the one already current (e.g. PyTorch's),
// else the primary context of device 0. Returns the context's device.
CUdevice ensure_context();

// "sm_90a", "sm_100a", "sm_86", ... for a device (arch-specific variants where a backend uses them).
std::string device_arch(CUdevice dev);
int device_sm(CUdevice dev);  // major*10 + minor
std::string device_name(CUdevice dev);

// Launch planning's device facts, read from the driver once per device and kept (a cache).
struct DeviceLimits {
  int sms = 0;       // multiprocessors
  int l2_bytes = 0;  // L2 cache size
};
const DeviceLimits& device_limits(CUdevice dev);

}  // namespace jit::detail
