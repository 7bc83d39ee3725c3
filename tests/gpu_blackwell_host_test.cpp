// The host side of an sm100a launch, run on whatever GPU is here (Hopper in our lab): argument
// checks, tensor maps with the sm100a boxes, grid/threads/shared memory, everything up to the
// driver's launch call. The real launch must then refuse cleanly (arch mismatch).
#include <gtest/gtest.h>

#include <cstring>

#include "fa4jit/jit.hpp"
#include "runtime/compiled_kernel.hpp"
#include "check/gpu.hpp"

namespace {

TEST(GpuBlackwellHost, LaunchPlanIsBuiltUpToTheDriverCall) {
  const std::string why = jit::testing::gpu_unavailable_reason();
  if (!why.empty()) GTEST_SKIP() << "needs a CUDA driver and GPU (tensor maps are encoded by the driver): " << why;
  for (int depth : {64, 128}) {
    jit::FA4Config cfg;
    cfg.arch = "sm_100a";
    cfg.depth = depth;
    cfg.mask = jit::Mask::causal();
    const auto kernel = jit::get_kernel(cfg);
    const auto* compiled = dynamic_cast<const jit::detail::CompiledKernel*>(kernel.get());
    ASSERT_NE(compiled, nullptr);
    const int B = 2, S = 1000, Sk = 4096, H = 8, Hkv = 2;
    jit::testing::DeviceBuffer q(B * S * H * depth * 2), k(B * Sk * Hkv * depth * 2), v(B * Sk * Hkv * depth * 2),
        o(B * S * H * depth * 2);
    jit::LaunchArgs a;
    a.q = jit::Tensor::contiguous(q.get(), jit::DType::bf16, B, S, H, depth);
    a.k = jit::Tensor::contiguous(k.get(), jit::DType::bf16, B, Sk, Hkv, depth);
    a.v = jit::Tensor::contiguous(v.get(), jit::DType::bf16, B, Sk, Hkv, depth);
    a.o = jit::Tensor::contiguous(o.get(), jit::DType::bf16, B, S, H, depth);
    // 4 x 8 x 2 = 64 tiles leave most SMs idle: the automatic choice splits the keys. 4096 keys, so
    // that a split saves GridWalk::kMinSavedKvTiles (1000 keys at BN 128 are 8 KV tiles: no split).
    const auto split = compiled->plan(a);
    EXPECT_GT(split.params.num_splits, 1);
    EXPECT_EQ(split.grid[0], (S + 255) / 256u * split.params.num_splits);
    EXPECT_GT(split.combine_grid, 0u);
    EXPECT_EQ(split.workspace.bytes(), std::size_t(B) * H * S * split.params.num_splits * (depth + 1) * 4);
    a.num_splits = 1;
    const auto plan = compiled->plan(a);
    EXPECT_EQ(plan.grid[0], (S + 255) / 256u);
    EXPECT_EQ(plan.grid[1], static_cast<unsigned>(H));
    EXPECT_EQ(plan.grid[2], static_cast<unsigned>(B));
    EXPECT_EQ(plan.block, 512u);
    EXPECT_EQ(plan.smem_bytes, depth == 128 ? 198656u : 231424u);
    EXPECT_TRUE(plan.uses_tma);
    EXPECT_EQ(plan.params.group, 4);
    const fa4::TmaDesc zero{};
    for (const fa4::TmaDesc* d : {&plan.tma.q, &plan.tma.k, &plan.tma.v, &plan.tma.o})
      EXPECT_NE(std::memcmp(d, &zero, sizeof(zero)), 0) << "a tensor map was not encoded";
    // Same pointers and shapes: the maps are reused, not re-encoded.
    const auto again = compiled->plan(a);
    EXPECT_EQ(std::memcmp(&again.tma, &plan.tma, sizeof(plan.tma)), 0);
    if (jit::current_device_arch() != "sm_100a") EXPECT_THROW(kernel->launch(a), jit::DriverError);
  }
}

}  // namespace
