// The user example, as written, after including only the public header. It compiles
// here (that is the check); it runs up to the launch where a GPU is present.
#include <fa4jit/jit.hpp>

#include <gtest/gtest.h>

namespace {

TEST(ApiExample, CompilesAsWrittenAndRunsWithoutAGpuUpToTheLaunch) {
  jit::FA4Config cfg;  // fields as in the seeds; 0/unset = derived default for the arch
  cfg.dtype = jit::DType::bf16;
  cfg.depth = 128;
  cfg.num_q_heads = 32;
  cfg.group = 4;
  cfg.mask = jit::Mask::causal();
  cfg.arch = "sm_90a";                 // no GPU here to take the arch from
  auto kernel = jit::get_kernel(cfg);  // generated, compiled, cached; thread-safe
  jit::LaunchArgs args;                // q, k, v, o (+ lse), shapes, strides, scale
  jit::Stream stream = nullptr;
  EXPECT_EQ(kernel->config().backend, jit::Backend::hopper);
  EXPECT_EQ(kernel->key().size(), 32u);
  EXPECT_THROW(kernel->launch(args, stream), jit::LaunchError);  // null tensors: refused before any launch
}

}  // namespace
