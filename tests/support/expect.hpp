// GoogleTest side of the GPU tests: the skip when no GPU is usable, and the reference check with
// each failed condition reported on its own (the rule is CheckResult::passes, check/gpu.hpp).
#pragma once
#include <cstdio>
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

// Prints one "<suite> | <what> | <dtypes> | rel_l2 .. | max_abs .. | lse_max_abs .." line (always: the
// measured errors are the data behind a tolerance, e.g. the FP8 tests'), then applies the rule.
inline void report_and_expect(const char* suite, const std::string& what, const std::string& dtypes,
                              const CheckResult& r) {
  std::printf("%s | %-90s | %s | rel_l2 %.3e | max_abs %.3e | lse_max_abs %.3e\n", suite, what.c_str(), dtypes.c_str(),
              r.rel_l2, r.max_abs, r.lse_max_abs);
  std::fflush(stdout);
  expect_matches(r, what);
}

}  // namespace jit::testing
