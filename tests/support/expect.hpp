// GoogleTest side of the GPU tests: the skip when no GPU is usable, and the reference check with
// each failed condition reported on its own (the rule is CheckResult::passes, check/gpu.hpp).
#pragma once
#include <string>

#include <gtest/gtest.h>

#include "check/gpu.hpp"

#define SKIP_WITHOUT_GPU()                                          \
  do {                                                              \
    const std::string why = jit::testing::gpu_unavailable_reason(); \
    if (!why.empty()) GTEST_SKIP() << "needs a CUDA GPU: " << why;  \
  } while (0)

namespace jit::testing {

inline void expect_matches(const CheckResult& r, const std::string& what) {
  EXPECT_EQ(r.unwritten, 0u) << what << ": " << r.describe();
  EXPECT_EQ(r.clobbered, 0u) << what << ": " << r.describe();
  EXPECT_LE(r.rel_l2, rel_l2_tolerance(r.dtype)) << what << ": " << r.describe();
  EXPECT_EQ(r.lse_inf_mismatch, 0u) << what << ": " << r.describe();
  EXPECT_LE(r.lse_max_abs, kLseTolerance) << what << ": " << r.describe();
}

}  // namespace jit::testing
