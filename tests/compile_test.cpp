// NVRTC compiles every preset for sm_80, sm_90a and sm_100a on this machine (no GPU needed),
// and the binaries contain the instructions each backend is built around.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "fa4jit/jit.hpp"
#include "generator/key.hpp"
#include "generator/presets.hpp"
#include "runtime/nvrtc.hpp"
#include "runtime/runtime_internal.hpp"
#include "tests/support/tune.hpp"

namespace {

using jit::detail::CompileOutput;

CompileOutput compile(const jit::FA4Config& c, const jit::ResolveOptions& options = {}) {
  const auto in = jit::detail::compile_inputs(c, options);
  return jit::detail::nvrtc_compile(in.source, "fa4jit.cu", *in.headers, in.compile_options());
}

void expect_ptx_has(const std::string& ptx, std::initializer_list<const char*> needles, const std::string& what) {
  for (const char* n : needles) EXPECT_NE(ptx.find(n), std::string::npos) << what << ": PTX lacks " << n;
}

class PresetCompile : public ::testing::TestWithParam<std::string> {};

TEST_P(PresetCompile, EveryPresetCompiles) {
  const std::string arch = GetParam();
  for (const std::string& name : jit::preset_names())
    for (jit::FA4Config c : jit::preset(name)) {
      c.arch = arch;
      const std::string what = fmt::format("{} {} d{}", arch, name, c.depth);
      CompileOutput out;
      ASSERT_NO_THROW(out = compile(c)) << what;
      EXPECT_GT(out.cubin.size(), 1000u) << what;
      const auto use = jit::detail::parse_ptxas_log(out.log);
      EXPECT_EQ(use.spill_stores, 0) << what << "\n" << out.log;
      if (arch == "sm_80") expect_ptx_has(out.ptx, {"mma.sync.aligned.m16n8k16", "ldmatrix", "cp.async"}, what);
      if (arch == "sm_90a") {
        expect_ptx_has(out.ptx, {"wgmma.mma_async", "cp.async.bulk.tensor", "setmaxnreg"}, what);
        // ptxas serializes every wgmma of a kernel whose wgmma stages it cannot pipeline (C7511, C7515).
        EXPECT_EQ(out.log.find("are serialized"), std::string::npos) << what << "\n" << out.log;
      }
      if (arch == "sm_100a")
        expect_ptx_has(out.ptx, {"tcgen05.mma", "tcgen05.ld", "tcgen05.st", "tcgen05.commit", "cp.async.bulk.tensor"},
                       what);
    }
}

INSTANTIATE_TEST_SUITE_P(Archs, PresetCompile, ::testing::Values("sm_80", "sm_90a", "sm_100a"));

// sm90a head dims 96 (padded to 128), 192 and 256: the default tiles compile without spills and run
// S = Q K^T at N = BN over the real depth and O += P V at N = padded depth.
TEST(Compile, HopperDeepHeadsCompileWithoutSpills) {
  struct Case {
    int depth;
    jit::DType dtype;
    bool causal, packed;
  };
  for (const Case& k : {Case{96, jit::DType::bf16, true, false}, Case{192, jit::DType::fp16, false, false},
                        Case{256, jit::DType::bf16, true, false}, Case{256, jit::DType::fp16, true, true}}) {
    jit::FA4Config c;
    c.arch = "sm_90a";
    c.depth = k.depth;
    c.dtype = k.dtype;
    c.mask = k.causal ? jit::Mask::causal() : jit::Mask::none();
    c.group = k.packed ? 8 : 0;
    c.pack_gqa = k.packed;
    const jit::ResolvedConfig r = jit::resolve(c);
    const std::string what = fmt::format("sm_90a d{} {} BM {} BN {}{}", k.depth, jit::to_string(k.dtype), r.config.BM,
                                         r.config.BN, k.packed ? " packed" : "");
    CompileOutput out;
    ASSERT_NO_THROW(out = compile(c)) << what;
    const auto use = jit::detail::parse_ptxas_log(out.log);
    EXPECT_EQ(use.spill_stores, 0) << what << "\n" << out.log;
    EXPECT_EQ(use.stack_frame, 0) << what << "\n" << out.log;
    const char* ty = k.dtype == jit::DType::bf16 ? "bf16" : "f16";
    const std::string qk = fmt::format("wgmma.mma_async.sync.aligned.m64n{}k16.f32.{}", r.config.BN, ty);
    const std::string pv = fmt::format("wgmma.mma_async.sync.aligned.m64n{}k16.f32.{}", r.padded_depth, ty);
    expect_ptx_has(out.ptx, {qk.c_str(), pv.c_str(), "cp.async.bulk.tensor", "setmaxnreg"}, what);
  }
}

// sm90a per-warpgroup P V spans (Tuning::wg_spans, WgKeySpan: a consumer warpgroup's P V runs over
// half of a KV tile or none of it where its rows see no more): on by default for causal kBM 192
// (d64), off elsewhere (d128 measured slower, docs/PERF.md run 17). Forced on, every head depth and
// tile shape of causal attention keeps the wgmma pipeline and spills nothing.
TEST(Compile, HopperWarpgroupSpansKeepTheWgmmaPipeline) {
  auto causal = [](int depth) {
    jit::FA4Config c;
    c.arch = "sm_90a";
    c.depth = depth;
    c.mask = jit::Mask::causal();
    return c;
  };
  EXPECT_EQ(jit::resolve(causal(64)).tuning.wg_spans, 1);
  EXPECT_EQ(jit::resolve(causal(128)).tuning.wg_spans, 0);
  jit::FA4Config capped = causal(64);
  capped.score_mod = jit::ScoreMod::softcap();
  EXPECT_EQ(jit::resolve(capped).tuning.wg_spans, 0);
  jit::FA4Config window = causal(64);
  window.mask = jit::Mask::sliding_window();
  EXPECT_EQ(jit::resolve(window).tuning.wg_spans, 0);

  const jit::ResolveOptions on = jit::testing::tuned("wg_spans=1");
  struct Case {
    int depth;
    jit::DType dtype;
    bool packed;
  };
  for (const Case& k :
       {Case{64, jit::DType::fp16, false}, Case{96, jit::DType::bf16, false}, Case{128, jit::DType::bf16, false},
        Case{192, jit::DType::bf16, false}, Case{256, jit::DType::bf16, false}, Case{128, jit::DType::bf16, true}}) {
    jit::FA4Config c = causal(k.depth);
    c.dtype = k.dtype;
    c.group = k.packed ? 8 : 0;
    c.pack_gqa = k.packed;
    const jit::ResolvedConfig r = jit::resolve(c, on);
    const std::string what = fmt::format("causal d{} {} BM {} BN {}{}", k.depth, jit::to_string(k.dtype), r.config.BM,
                                         r.config.BN, k.packed ? " packed" : "");
    ASSERT_EQ(r.tuning.wg_spans, 1) << what;
    const CompileOutput out = compile(c, on);
    const auto use = jit::detail::parse_ptxas_log(out.log);
    EXPECT_EQ(use.spill_stores, 0) << what << "\n" << out.log;
    EXPECT_EQ(out.log.find("are serialized"), std::string::npos) << what << "\n" << out.log;
  }
}

TEST(Compile, PortableBackendCompilesForEveryArch) {
  for (const char* arch : {"sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"}) {
    jit::FA4Config c;
    c.arch = arch;
    c.depth = 128;
    c.mask = jit::Mask::causal();
    EXPECT_NO_THROW(compile(c)) << arch;
  }
}

TEST(Compile, SnippetErrorsPointAtTheSnippetLine) {
  for (const char* arch : {"sm_80", "sm_90a", "sm_100a"}) {
    jit::FA4Config c;
    c.arch = arch;
    c.score_mod = jit::ScoreMod::custom("float s2 = score * 2.0f;\nreturn s2 + undefined_thing;");
    try {
      compile(c);
      FAIL() << arch << ": a broken snippet compiled";
    } catch (const jit::CompileError& e) {
      EXPECT_NE(e.log().find("score_mod(2)"), std::string::npos) << arch << ": " << e.log();
      EXPECT_NE(e.log().find("undefined_thing"), std::string::npos) << e.log();
    }
  }
}

TEST(Compile, CustomMaskSnippetCompilesAndErrorsPointAtIt) {
  jit::FA4Config c;
  c.arch = "sm_90a";
  c.mask = jit::Mask::all_of({jit::Mask::causal(), jit::Mask::custom("return (q_idx - kv_idx) % 2 == 0;")});
  EXPECT_NO_THROW(compile(c));
  c.mask = jit::Mask::custom("bool near = q_idx - kv_idx < 4;\nreturn near && undefined_flag;");
  try {
    compile(c);
    FAIL() << "a broken mask snippet compiled";
  } catch (const jit::CompileError& e) {
    EXPECT_NE(e.log().find("mask(2)"), std::string::npos) << e.log();
  }
}

}  // namespace
