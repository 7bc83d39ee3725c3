// jit::build_tile_map: the generated classifier of a mask (runtime/tile_map.cpp). Without a GPU: its
// source holds the kernel's mask tree and compiles with NVRTC for every backend's arch, snippet errors
// come at the snippet's line, and bad arguments are refused before anything runs. With a GPU the
// classes are checked from Python (tests/python/test_flex_gpu.py, against the traced mask's).
#include <gtest/gtest.h>

#include <cstdint>

#include "fa4jit/errors.hpp"
#include "fa4jit/jit.hpp"
#include "runtime/tile_map.hpp"

namespace {

jit::ResolvedConfig resolved(const jit::Mask& m, const char* arch) {
  jit::FA4Config c;
  c.arch = arch;
  c.mask = m;
  return jit::resolve(c);
}

TEST(TileMap, SourceHoldsTheMaskTreeAndCompilesForEveryBackend) {
  const jit::Mask doc = jit::Mask::custom("const int* d = (const int*)aux[0];\nreturn d[q_idx] == d[kv_idx];");
  const jit::Mask tree = jit::Mask::all_of({jit::Mask::causal(), doc});
  const std::string src = jit::detail::tile_map_source(resolved(tree, "sm_90a"));
  EXPECT_NE(src.find("fa4::mask::And<fa4::mask::Causal, fa4::mask::Custom<UserMask0>>"), std::string::npos) << src;
  EXPECT_NE(src.find("return d[q_idx] == d[kv_idx];"), std::string::npos);
  for (const char* arch : {"sm_80", "sm_90a", "sm_100a"}) {
    EXPECT_FALSE(jit::detail::compile_tile_map(resolved(tree, arch)).empty()) << arch;
    EXPECT_FALSE(jit::detail::compile_tile_map(resolved(jit::Mask::sliding_window(), arch)).empty()) << arch;
  }
}

TEST(TileMap, SnippetErrorsAreAtTheSnippetLine) {
  try {
    jit::detail::compile_tile_map(resolved(jit::Mask::custom("bool a = true;\nreturn a && nope;"), "sm_90a"));
    FAIL() << "compiled";
  } catch (const jit::CompileError& e) {
    const std::string what = e.what();
    EXPECT_TRUE(what.find("mask(2)") != std::string::npos || what.find("mask:2") != std::string::npos) << what;
  }
}

TEST(TileMap, RefusesVarlenAndNullOutputs) {
  jit::FA4Config c;
  c.arch = "sm_90a";
  c.mask = jit::Mask::custom("return q_idx >= kv_idx;");
  jit::LaunchArgs a;
  int cu[2] = {0, 128};
  a.cu_seqlens_q = cu;
  jit::TileMapOut out;
  std::uint8_t byte = 0;
  out.data = &byte;
  EXPECT_THROW(jit::build_tile_map(c, a, out, nullptr), jit::LaunchError);
  a.cu_seqlens_q = nullptr;
  out.data = nullptr;
  EXPECT_THROW(jit::build_tile_map(c, a, out, nullptr), jit::LaunchError);
}

}  // namespace
