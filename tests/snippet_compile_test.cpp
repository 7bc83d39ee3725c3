// Snippets that NVRTC cannot survive are refused before it sees them, and NVRTC runs on a stack
// that deep (but allowed) sources fit in: one bad config must not end a prewarm batch or the host.
#include <gtest/gtest.h>

#include <pthread.h>

#include <cstdlib>
#include <string>

#include "fa4jit/jit.hpp"
#include "generator/key.hpp"
#include "runtime/nvrtc.hpp"
#include "runtime/runtime_internal.hpp"

namespace {

std::string parens(int n, const std::string& inner) { return std::string(n, '(') + inner + std::string(n, ')'); }

jit::FA4Config custom_mask(const std::string& body) {
  jit::FA4Config c;
  c.arch = "sm_80";
  c.mask = jit::Mask::custom(body);
  return c;
}

// Runs fn on a new thread with an 8 MiB stack (the default of prewarm's std::thread workers).
template <class F>
void on_8mib_thread(F fn) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, std::size_t{8} << 20);
  pthread_t t;
  auto run = [](void* p) -> void* {
    (*static_cast<F*>(p))();
    return nullptr;
  };
  ASSERT_EQ(pthread_create(&t, &attr, run, &fn), 0);
  pthread_join(t, nullptr);
  pthread_attr_destroy(&attr);
}

// NVRTC's front end takes ~2.3 KB of stack per nesting level: 20k levels overflowed an 8 MiB
// thread stack (SIGSEGV). nvrtc_compile runs each compile on a 256 MiB stack of its own.
TEST(NvrtcStack, DeeplyNestedSourceCompilesFromAnOrdinaryThread) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        int rc = 1;
        on_8mib_thread([&] {
          const std::string src =
              "extern \"C\" __global__ void k(int* p) { int x = p[0]; p[1] = " + parens(20000, "x") + "; }\n";
          try {
            rc = jit::detail::nvrtc_compile(src, "deep.cu", {}, {"--gpu-architecture=sm_80"}).cubin.empty() ? 2 : 0;
          } catch (...) {
            rc = 3;
          }
        });
        std::_Exit(rc);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(SnippetLimits, HundredThousandParenthesesAreAConfigErrorAndTheProcessSurvives) {
  // 100k levels (200 KB) crashed NVRTC on a prewarm worker; now refused by size, and 30k (60 KB,
  // under the size cap) by nesting, both before anything is generated or compiled.
  EXPECT_THROW(jit::detail::compile_inputs(custom_mask("return " + parens(100000, "true") + ";")), jit::ConfigError);
  try {
    jit::detail::compile_inputs(custom_mask("return " + parens(30000, "true") + ";"));
    FAIL() << "no ConfigError";
  } catch (const jit::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("mask snippet line 1: brackets nested deeper than 256"), std::string::npos)
        << e.what();
  }
}

TEST(SnippetLimits, DeepButAllowedSnippetCompiles) {
  const auto in = jit::detail::compile_inputs(custom_mask("return " + parens(255, "q_idx >= kv_idx") + ";"));
  const auto out = jit::detail::nvrtc_compile(in.source, "fa4jit.cu", *in.headers, in.options);
  EXPECT_GT(out.cubin.size(), 1000u);
}

}  // namespace
