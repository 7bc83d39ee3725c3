// Shared device math measured on the GPU: FA4's polynomial exp2 (used by sm100a and, as a
// tuning option, sm90a) against exp2 in float64. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "fa4jit/jit.hpp"
#include "generator/source.hpp"
#include "runtime/driver.hpp"
#include "runtime/nvrtc.hpp"
#include "tests/support/expect.hpp"
#include "check/gpu.hpp"

namespace {

using jit::detail::check;
using jit::detail::driver;

const char* kProbe = R"(
#include "common/softmax.cuh"
extern "C" __global__ void probe(const float* x, float* poly, float* mufu, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    poly[i] = fa4::softmax::exp2_poly3(x[i]);
    mufu[i] = fa4::exp2_approx(x[i]);
  }
}
)";

TEST(GpuMath, Exp2PolynomialMatchesItsErrorModel) {
  SKIP_WITHOUT_GPU();
  const CUdevice dev = jit::detail::ensure_context();
  const std::string arch = "sm_" + std::to_string(jit::detail::device_sm(dev));
  const auto out =
      jit::detail::nvrtc_compile(kProbe, "probe.cu", *jit::detail::template_headers(jit::Backend::portable),
                                 {"--gpu-architecture=" + arch, "-std=c++17", "-default-device"});
  CUmodule mod;
  CUfunction fn;
  check(driver().cuModuleLoadData(&mod, out.cubin.data()), "cuModuleLoadData");
  check(driver().cuModuleGetFunction(&fn, mod, "probe"), "cuModuleGetFunction");

  // Dense over the softmax range [-126, 0] (and a little past both ends), plus -inf.
  std::vector<float> x;
  for (int i = 0; i <= 1 << 20; ++i) x.push_back(-126.0f * i / (1 << 20));
  for (float v : {0.5f, 3.0f, 8.0f, -127.5f, -200.0f, -INFINITY}) x.push_back(v);
  const int n = static_cast<int>(x.size());
  jit::testing::DeviceBuffer dx(n * 4), dp(n * 4), dm(n * 4);
  dx.upload(x.data(), n * 4);
  void* ptrs[] = {dx.get(), dp.get(), dm.get()};
  void* params[] = {&ptrs[0], &ptrs[1], &ptrs[2], const_cast<int*>(&n)};
  CUlaunchConfig cfg{};
  cfg.gridDimX = (n + 255) / 256;
  cfg.gridDimY = cfg.gridDimZ = 1;
  cfg.blockDimX = 256;
  cfg.blockDimY = cfg.blockDimZ = 1;
  check(driver().cuLaunchKernelEx(&cfg, fn, params, nullptr), "cuLaunchKernelEx");
  check(driver().cuCtxSynchronize(), "probe");
  std::vector<float> poly(n), mufu(n);
  dp.download(poly.data(), n * 4);
  dm.download(mufu.data(), n * 4);
  driver().cuModuleUnload(mod);

  double max_rel = 0, max_rel_mufu = 0;
  for (int i = 0; i < n; ++i) {
    if (!(x[i] >= -126.0f && x[i] <= 8.0f)) continue;
    const double ref = std::exp2(static_cast<double>(x[i]));
    max_rel = std::max(max_rel, std::fabs(poly[i] / ref - 1.0));
    max_rel_mufu = std::max(max_rel_mufu, std::fabs(mufu[i] / ref - 1.0));
  }
  // Degree-3 minimax on [0, 1): 8.76e-5 in exact arithmetic; fp32 evaluation adds a few ulp.
  EXPECT_LE(max_rel, 1.0e-4) << "exp2_poly3 max relative error";
  std::printf("exp2_poly3 max relative error %.3e (ex2.approx %.3e) over %d points in [-126, 8]\n", max_rel,
              max_rel_mufu, n);
  EXPECT_EQ(poly[n - 1], 0.0f) << "exp2_poly3(-inf) must be 0";
  EXPECT_EQ(poly[n - 2], 0.0f) << "exp2_poly3(-200) must be 0";
}

}  // namespace
