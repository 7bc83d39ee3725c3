// NVRTC compiles every preset for sm_80, sm_90a and sm_100a on this machine (no GPU needed),
// and the binaries contain the instructions each backend is built around.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "fa4jit/jit.hpp"
#include "generator/combine.hpp"
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

// An sm90a kernel that keeps its wgmma pipeline: no spills, and no wgmma that ptxas serializes because
// it cannot pipeline the stage (C7511, C7515).
void expect_sm90a_pipelined(const CompileOutput& out, const std::string& what) {
  EXPECT_EQ(jit::detail::parse_ptxas_log(out.log).spill_stores, 0) << what << "\n" << out.log;
  EXPECT_EQ(out.log.find("are serialized"), std::string::npos) << what << "\n" << out.log;
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
    // P V's N is the real depth, not the padded one (d96: N 96 over V's 128-column rows, Shape::kOWg).
    const std::string pv = fmt::format("wgmma.mma_async.sync.aligned.m64n{}k16.f32.{}", k.depth, ty);
    expect_ptx_has(out.ptx, {qk.c_str(), pv.c_str(), "cp.async.bulk.tensor", "setmaxnreg"}, what);
  }
}

// The dynamic walk (persistent=3, templates/common/persistent_walk.h DynamicTiles) builds at every
// sm90a depth it accepts, beside the d128 snippet kernels that take it by default (GPU-tested at d64
// and d128): the producer claims units with a global atomic add, and no wgmma is serialized.
TEST(Compile, HopperDynamicWalkCompilesAtEveryDepth) {
  for (int depth : {64, 96, 192, 256}) {
    jit::FA4Config c;
    c.arch = "sm_90a";
    c.depth = depth;
    c.depth_v = depth == 192 ? 128 : 0;
    c.mask = jit::Mask::causal();
    const std::string what = fmt::format("sm_90a d{} causal persistent=3", depth);
    CompileOutput out;
    ASSERT_NO_THROW(out = compile(c, jit::testing::tuned("persistent=3"))) << what;
    EXPECT_EQ(out.log.find("are serialized"), std::string::npos) << what << "\n" << out.log;
    expect_ptx_has(out.ptx, {"atom.global.add", "setmaxnreg"}, what);
  }
}

// sm90a's O split over two warpgroups (a V 512 wide, abi.h o_split): head dim 512 (BN 32: two K
// and two V stages beside its 64 KiB Q) for each mask kind, a score-mod and packed GQA decode, and
// MLA's latent 576 / 512, also over an e4m3 latent cache (fp16 MMAs under a bf16 Q; BN 32).
// 384 threads, 0 spills, no serialized wgmma; S = Q K^T at N = BN, P V at N = 256 (each
// warpgroup's half of O), the partner's P V an SS wgmma reading P from shared memory.
TEST(Compile, HopperSplitOCompilesWithoutSpills) {
  struct Case {
    int depth, depth_v;
    jit::Mask mask;
    jit::ScoreMod mod;
    int group;
    bool kv_fp8 = false;
  };
  const jit::Mask swa = jit::Mask::sliding_window(), snippet = jit::Mask::custom("return (q_idx - kv_idx) % 2 == 0;");
  for (const Case& k :
       {Case{512, 0, jit::Mask::none(), jit::ScoreMod::identity(), 0},
        Case{512, 0, jit::Mask::causal(), jit::ScoreMod::identity(), 0},
        Case{512, 0, swa, jit::ScoreMod::identity(), 0}, Case{512, 0, snippet, jit::ScoreMod::softcap(), 0},
        Case{512, 0, jit::Mask::causal(), jit::ScoreMod::identity(), 8},
        Case{576, 512, jit::Mask::causal(), jit::ScoreMod::identity(), 128},
        Case{576, 512, jit::Mask::causal(), jit::ScoreMod::identity(), 128, true},
        Case{576, 512, jit::Mask::none(), jit::ScoreMod::identity(), 16, true}}) {
    jit::FA4Config c;
    c.arch = "sm_90a";
    c.depth = k.depth;
    c.depth_v = k.depth_v;
    c.mask = k.mask;
    c.score_mod = k.mod;
    c.group = k.group;
    c.pack_gqa = k.group > 0;
    if (k.kv_fp8) c.kv_dtype = jit::DType::e4m3;
    for (int alternate : {0, 1}) {
      // Without alternating S an O split runs the grid walk (head dim 512's plain kernels are persistent).
      const jit::ResolveOptions tune{
          jit::parse_tune(fmt::format("alternate_s={}{}", alternate, alternate ? "" : ",persistent=0"))};
      if (alternate && (k.kv_fp8 || k.mask.kind == jit::Mask::Kind::custom)) {  // 16-bit K/V, built-in masks
        EXPECT_THROW(jit::resolve(c, tune), jit::ConfigError);
        continue;
      }
      const jit::ResolvedConfig r = jit::resolve(c, tune);
      const std::string what =
          fmt::format("sm_90a d{}/{} mask {} mod {} group {}{} BM {} BN {} alternate_s {}", k.depth, k.depth_v,
                      static_cast<int>(k.mask.kind), static_cast<int>(k.mod.kind), k.group, k.kv_fp8 ? " e4m3 KV" : "",
                      r.config.BM, r.config.BN, alternate);
      EXPECT_EQ(r.config.BM, 64) << what;
      EXPECT_EQ(r.config.BN, k.depth == 512 || k.kv_fp8 ? 32 : 64) << what;
      EXPECT_EQ(r.num_threads, 384) << what;
      CompileOutput out;
      ASSERT_NO_THROW(out = compile(c, tune)) << what;
      const auto use = jit::detail::parse_ptxas_log(out.log);
      EXPECT_EQ(use.spill_stores, 0) << what << "\n" << out.log;
      EXPECT_EQ(use.stack_frame, 0) << what << "\n" << out.log;
      EXPECT_EQ(out.log.find("are serialized"), std::string::npos) << what << "\n" << out.log;
      // No wgmma wait of ptxas's own (C7517): one inside a branch whose warps may differ (alternating
      // S's O correction, consumer.cuh follow_baton) is undefined in PTX, and synccheck flags it.
      EXPECT_EQ(out.log.find("warpgroup.wait is injected"), std::string::npos) << what << "\n" << out.log;
      const char* ty = k.kv_fp8 ? "f16" : "bf16";  // e4m3 -> fp16 is one instruction a pair (shape.cuh MmaElement)
      const std::string qk = fmt::format("wgmma.mma_async.sync.aligned.m64n{}k16.f32.{}", r.config.BN, ty);
      const std::string pv = fmt::format("wgmma.mma_async.sync.aligned.m64n256k16.f32.{}", ty);
      expect_ptx_has(out.ptx, {qk.c_str(), pv.c_str(), "cp.async.bulk.tensor", "setmaxnreg"}, what);
      if (k.kv_fp8) expect_ptx_has(out.ptx, {"cvt.rn.f16x2.e4m3x2"}, what);
    }
  }
}

// MLA's K stages in parts (Tuning::k_parts): the wgmma of S = Q K^T stay one pipelined chain
// across the parts' barrier waits (no serialized wgmma, no spills), and each part beyond the first
// adds its own expect_tx (the producer arms every part of every K stage it fills).
TEST(Compile, HopperMlaKStagesInPartsStayPipelined) {
  jit::FA4Config c;
  c.arch = "sm_90a";
  c.depth = 576;
  c.depth_v = 512;
  c.mask = jit::Mask::causal();
  c.group = 128;
  c.pack_gqa = true;
  std::size_t arms[3] = {};
  const int parts[3] = {1, 3, 9};
  for (int i = 0; i < 3; ++i) {
    const std::string what = fmt::format("sm_90a d576/v512 k_parts {}", parts[i]);
    CompileOutput out;
    ASSERT_NO_THROW(out = compile(c, jit::testing::tuned(fmt::format("k_parts={}", parts[i])))) << what;
    expect_sm90a_pipelined(out, what);
    for (std::size_t at = out.ptx.find("mbarrier.arrive.expect_tx"); at != std::string::npos;
         at = out.ptx.find("mbarrier.arrive.expect_tx", at + 1))
      ++arms[i];
  }
  EXPECT_LT(arms[0], arms[1]);
  EXPECT_LT(arms[1], arms[2]);
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
    expect_sm90a_pipelined(compile(c, on), what);
  }
}

// sm90a kernels that gather pages no TMA box takes (gather.cuh GatherTile): the packed decode kernels
// and the persistent walks at head dim 256 (four gathering warps), d128 prefill and DeepSeek's
// (192, 128) on its dynamic walk (the producer warp alone) copy rows by cp.async, arrive on the
// stages' full barriers from the copies (cp.async.mbarrier.arrive.noinc: no lane waits for its own
// copies), and their consumers fence to the async proxy before the wgmma reads a gathered stage
// (consumer.cuh KvLanded); nothing spills, at the producers' 56 and 24 registers.
TEST(Compile, HopperGatheringKernelsArriveFromTheirCopies) {
  struct Case {
    int depth, depth_v, group;
  };
  for (const Case k : {Case{128, 0, 0}, Case{128, 0, 4}, Case{128, 0, 7}, Case{256, 0, 0}, Case{192, 128, 0}}) {
    jit::FA4Config c;
    c.arch = "sm_90a";
    c.depth = k.depth;
    c.depth_v = k.depth_v;
    c.mask = jit::Mask::causal();
    c.group = k.group;
    c.pack_gqa = k.group > 0;
    const std::string what = fmt::format("sm_90a d{}/{} causal {}", k.depth, k.depth_v ? k.depth_v : k.depth,
                                         k.group ? fmt::format("packed group {}", k.group) : "prefill");
    CompileOutput out;
    ASSERT_NO_THROW(out = compile(c)) << what;
    expect_ptx_has(out.ptx,
                   {"cp.async.cg.shared.global", "cp.async.mbarrier.arrive.noinc.shared::cta.b64",
                    "fence.proxy.async.shared::cta"},
                   what);
    expect_sm90a_pipelined(out, what);
  }
}

// sm90a K/V loads (TMA boxes, and the rows gathered where no box takes a page) carry an L2 eviction
// hint exactly in the decode kernels and MLA's (load.cuh kv_l2_hint), which read each KV head's keys
// once, and keeps them spill-free; prefill's tiles re-read theirs from L2, and a decode kernel whose
// walk classifies tiles (a block snippet) has no registers for the policy.
// The decode kernels' lean producer (sm90a load.cuh lean_producer: 56 registers) holds two KV tiles'
// page numbers (PageQueue: kBN / 8 each, 32 at kBN 128) beside its TMA state: every head dim it
// serves, the wide tile and an FP8 KV cache's kernel compile without spills.
TEST(Compile, HopperLeanDecodeProducersHoldTwoTilesOfPagesWithoutSpills) {
  struct Case {
    int depth, group, bn;
    jit::Mask mask;
    bool fp8_kv;
  };
  const Case cases[] = {{64, 4, 0, jit::Mask::sliding_window(), false}, {128, 7, 0, jit::Mask::causal(), false},
                        {128, 8, 128, jit::Mask::causal(), false},      {192, 6, 0, jit::Mask::causal(), false},
                        {256, 8, 0, jit::Mask::causal(), false},        {128, 7, 0, jit::Mask::causal(), true}};
  for (const Case& k : cases) {
    jit::FA4Config c;
    c.arch = "sm_90a";
    c.depth = k.depth;
    c.group = k.group;
    c.pack_gqa = true;
    c.mask = k.mask;
    c.BN = k.bn;
    if (k.fp8_kv) c.kv_dtype = jit::DType::e4m3;
    const std::string what = fmt::format("d{} group {} BN {}{}", k.depth, k.group, k.bn, k.fp8_kv ? " e4m3 KV" : "");
    CompileOutput out;
    ASSERT_NO_THROW(out = compile(c)) << what;
    EXPECT_NE(out.ptx.find("setmaxnreg.dec.sync.aligned.u32 56"), std::string::npos) << what;  // the decode producer
    expect_sm90a_pipelined(out, what);
  }
}

TEST(Compile, HopperDecodeKvLoadsEvictFirst) {
  const char* hinted =
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint";
  jit::FA4Config mla;
  mla.arch = "sm_90a";
  mla.depth = 576;
  mla.depth_v = 512;
  mla.group = 128;
  mla.pack_gqa = true;
  struct Case {
    std::string what;
    jit::FA4Config config;
    bool hint;
  };
  std::vector<Case> cases = {{"llama3-8b-decode", jit::preset("llama3-8b-decode").front(), true},
                             {"llama3-8b prefill", jit::preset("llama3-8b").front(), false},
                             {"mla d576/v512", mla, true}};
  jit::FA4Config blocks = cases[0].config;
  blocks.mask = jit::Mask::custom("const int* doc = (const int*)aux[0]; return doc[q_idx] == doc[kv_idx];",
                                  "const int* doc = (const int*)aux[0];\n"
                                  "return doc[q_hi - 1] < doc[kv_lo] || doc[kv_hi - 1] < doc[q_lo] ? SKIP : PARTIAL;");
  cases.push_back({"llama3-8b-decode, block snippet", blocks, false});
  for (Case& k : cases) {
    k.config.arch = "sm_90a";
    CompileOutput out;
    ASSERT_NO_THROW(out = compile(k.config)) << k.what;
    EXPECT_EQ(out.ptx.find(hinted) != std::string::npos, k.hint) << k.what;
    EXPECT_EQ(out.ptx.find("cp.async.cg.shared.global.L2::cache_hint") != std::string::npos, k.hint) << k.what;
    if (k.hint) expect_sm90a_pipelined(out, k.what);  // the policy's register pair spills nothing
  }
}

// Split-KV on sm_90+: every attention kernel lets its combine launch early
// (griddepcontrol.launch_dependents at the entry), and the combine compiled for such an arch waits
// for the attention grid (griddepcontrol.wait) before it reads a partial: the host launches it as a
// programmatic dependent exactly then (combine_waits_for_kernel). sm_80's combine has no wait and is
// launched plainly. The combine (8 warps, a row over up to 8 of them) spills nowhere, up to MLA's 512.
TEST(Compile, SplitCombineWaitsForItsKernelOnSm90AndLater) {
  for (const char* arch : {"sm_80", "sm_90a", "sm_100a"}) {
    jit::FA4Config c;
    c.arch = arch;
    c.depth = 128;
    const bool waits = std::string(arch) != "sm_80";
    const std::string what = arch;
    CompileOutput out;
    ASSERT_NO_THROW(out = compile(c)) << what;
    EXPECT_EQ(out.ptx.find("griddepcontrol.launch_dependents") != std::string::npos, waits) << what;

    for (int depth : {128, 512}) {
      if (depth == 512 && what != "sm_90a") continue;  // MLA's 512-wide O: sm90a's
      jit::detail::CombineSpec spec{arch, jit::DType::bf16, depth};
      EXPECT_EQ(jit::detail::combine_waits_for_kernel(spec), waits) << what;
      const auto in = jit::detail::combine_inputs(spec, "test");
      CompileOutput co;
      ASSERT_NO_THROW(co = jit::detail::nvrtc_compile(in.source, jit::detail::kCombineSourceName, *in.headers,
                                                      in.compile_options()))
          << what << " combine d" << depth;
      EXPECT_EQ(co.ptx.find("griddepcontrol.wait") != std::string::npos, waits) << what << " combine d" << depth;
      const auto use = jit::detail::parse_ptxas_log(co.log, "fa4_combine");
      EXPECT_EQ(use.spill_stores, 0) << what << " combine d" << depth << "\n" << co.log;
      EXPECT_EQ(use.spill_loads, 0) << what << " combine d" << depth;
    }
  }
}

// sm90a Q in registers (Config::kQInRegs, S = Q K^T as an RS wgmma): where it was measured faster
// (d96; causal d128, persistent or grid; a d128 sliding window), not elsewhere (docs/PERF.md runs 50,
// 107). On, the PTX has no SS Q K^T left (an SS wgmma's A operand is a descriptor, "}, %rd"; RS's is
// registers, "}, {"), and nothing spills or serializes.
TEST(Compile, HopperQInRegistersWhereMeasured) {
  struct Case {
    int depth;
    jit::DType dtype;
    jit::Mask mask;
    jit::ScoreMod mod;
    const char* tune;
    bool on;
  };
  const Case cases[] = {
      {96, jit::DType::bf16, jit::Mask::none(), jit::ScoreMod::identity(), "", true},
      {128, jit::DType::fp16, jit::Mask::causal(), jit::ScoreMod::identity(), "persistent=0", true},
      {96, jit::DType::bf16, jit::Mask::causal(), jit::ScoreMod::identity(), "", true},
      {128, jit::DType::bf16, jit::Mask::causal(), jit::ScoreMod::identity(), "", true},
      {128, jit::DType::bf16, jit::Mask::none(), jit::ScoreMod::identity(), "", false},
      {128, jit::DType::bf16, jit::Mask::sliding_window(), jit::ScoreMod::identity(), "", true},
      {128, jit::DType::bf16, jit::Mask::sliding_window(), jit::ScoreMod::softcap(), "", false},
      {128, jit::DType::bf16, jit::Mask::causal(), jit::ScoreMod::softcap(), "", false},
      {128, jit::DType::bf16, jit::Mask::causal(), jit::ScoreMod::identity(), "intra_wg_overlap=0", false},
      {64, jit::DType::bf16, jit::Mask::causal(), jit::ScoreMod::identity(), "", false},
      {128, jit::DType::e4m3, jit::Mask::causal(), jit::ScoreMod::identity(), "", false},
  };
  for (const Case& k : cases) {
    jit::FA4Config c;
    c.arch = "sm_90a";
    c.depth = k.depth;
    c.dtype = k.dtype;
    c.mask = k.mask;
    c.score_mod = k.mod;
    const jit::ResolveOptions options = jit::testing::tuned(k.tune);
    const std::string what = fmt::format("d{} {} {} {} [{}]", k.depth, jit::to_string(k.dtype),
                                         jit::to_json(c)["mask"].dump(), jit::to_json(c)["score_mod"].dump(), k.tune);
    const auto in = jit::detail::compile_inputs(c, options);
    EXPECT_EQ(in.source.find("kQInRegs = 1") != std::string::npos, k.on) << what;
    if (k.dtype == jit::DType::e4m3) continue;  // its wgmma are k32 SS / RS by design (Fp8Host tests)
    const CompileOutput out = compile(c, options);
    expect_sm90a_pipelined(out, what);
    bool ss = false;
    for (std::size_t at = out.ptx.find("wgmma.mma_async"); at != std::string::npos && !ss;
         at = out.ptx.find("wgmma.mma_async", at + 1)) {
      const std::size_t close = out.ptx.find('}', at);
      ss = out.ptx.compare(close, 6, "}, %rd") == 0;
    }
    EXPECT_EQ(ss, !k.on) << what << ": an SS wgmma (Q K^T from shared memory) is " << (ss ? "" : "not ")
                         << "in the PTX";
  }
}

// O's correction between the overlapped step's two GEMM issues (consumer.cuh, kv_mainloop's
// kCorrectO): in the kernels where it was measured faster (two consumer warpgroups, no P V spans;
// docs/PERF.md run 51), and nowhere else. Its trace in the PTX: a
// wgmma.commit_group (S = Q K^T) followed by a wgmma.fence (O rewritten) before the next wgmma.
TEST(Compile, HopperCorrectsOBetweenTheGemmIssuesWhereMeasured) {
  struct Case {
    int depth;
    jit::Mask mask;
    const char* tune;
    bool on;
  };
  const Case cases[] = {
      {128, jit::Mask::none(), "", true},
      {96, jit::Mask::none(), "", true},
      {256, jit::Mask::none(), "", true},
      {128, jit::Mask::causal(), "", true},
      {64, jit::Mask::none(), "", false},                     // kBM 192, eager rescale (-3-6%)
      {128, jit::Mask::causal(), "wg_spans=1", false},        // spans: serialized wgmma
      {128, jit::Mask::none(), "intra_wg_overlap=0", false},  // no overlapped step
  };
  for (const Case& k : cases) {
    jit::FA4Config c;
    c.arch = "sm_90a";
    c.depth = k.depth;
    c.mask = k.mask;
    const jit::ResolveOptions options = jit::testing::tuned(k.tune);
    const std::string what = fmt::format("d{} {} [{}]", k.depth, jit::to_json(c)["mask"].dump(), k.tune);
    const CompileOutput out = compile(c, options);
    expect_sm90a_pipelined(out, what);
    int between = 0;  // commit_group immediately followed (among wgmma instructions) by a fence
    std::string prev;
    for (std::size_t at = out.ptx.find("wgmma."); at != std::string::npos; at = out.ptx.find("wgmma.", at + 1)) {
      const std::size_t end = out.ptx.find_first_of(". ;", at + 6);
      const std::string op = out.ptx.substr(at + 6, end - at - 6);
      if (prev == "commit_group" && op == "fence") ++between;
      prev = op;
    }
    EXPECT_EQ(between, k.on ? 1 : 0) << what;
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

// Head dims 192, 256 and 512 on the portable backend, and 192 with a 128-wide V (DeepSeek-V3
// prefill), at their default tiles: no spills or stack on sm_80 and on plain sm_90 (which the portable
// backend serves on Hopper), and for 512 on the 99 KiB sm_86, for each built-in mask kind and a snippet
// mask (paged and varlen K/V, split-KV partials and packed GQA are run-time paths of the same cubin).
// The PTX has exactly the MMAs, ldmatrix and stores of the tile: per warp and KV tile, S = Q K^T over
// the Q/K depth and O += P V over the warp's share of V's padded depth only; the epilogue stores V's
// columns (16-byte O chunks, float2 split partials). Depth 512 splits O's columns over two warps per
// 16 rows (8 warps at BM 64; BM 32 on sm_86: 2 row warps, 4 in all), each with half the P V and stores.
TEST(Compile, PortableDeepHeadsCompileWithoutSpills) {
  using jit::Mask;
  struct Case {
    const char* arch;
    int depth, depth_v;
    Mask mask;
  };
  const Mask swa = Mask::sliding_window(), snippet = Mask::custom("return (q_idx - kv_idx) % 2 == 0;");
  std::vector<Case> cases;
  for (const char* arch : {"sm_80", "sm_90"})
    for (const Mask& m : {Mask::none(), Mask::causal(), swa, snippet}) cases.push_back({arch, 192, 128, m});
  cases.insert(cases.end(), {{"sm_80", 192, 0, Mask::causal()},
                             {"sm_80", 192, 0, swa},
                             {"sm_90", 192, 0, Mask::none()},
                             {"sm_90", 192, 0, snippet},
                             {"sm_80", 256, 0, Mask::causal()},
                             {"sm_80", 256, 0, snippet},
                             {"sm_90", 256, 0, Mask::none()},
                             {"sm_90", 256, 0, swa}});
  for (const char* arch : {"sm_80", "sm_86", "sm_90"})
    for (const Mask& m : {Mask::none(), Mask::causal(), swa, snippet}) cases.push_back({arch, 512, 0, m});
  auto count = [](const std::string& text, const std::string& needle) {
    int n = 0;
    for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
    return n;
  };
  for (const Case& k : cases) {
    jit::FA4Config c;
    c.arch = k.arch;
    c.depth = k.depth;
    c.depth_v = k.depth_v;
    c.mask = k.mask;
    const jit::ResolvedConfig r = jit::resolve(c);
    ASSERT_EQ(r.backend, jit::Backend::portable);
    const int bm = r.config.BM, bn = r.config.BN, dp = r.padded_depth, dpv = r.padded_depth_v;
    const int dv = k.depth_v ? k.depth_v : k.depth;
    const std::string what =
        fmt::format("{} d{}/{} mask {} BM {} BN {}", k.arch, k.depth, dv, static_cast<int>(k.mask.kind), bm, bn);
    CompileOutput out;
    ASSERT_NO_THROW(out = compile(c)) << what;
    const auto use = jit::detail::parse_ptxas_log(out.log);
    EXPECT_EQ(use.spill_stores, 0) << what << "\n" << out.log;
    EXPECT_EQ(use.stack_frame, 0) << what << "\n" << out.log;
    const int o_split = dv == 512 ? 2 : 1;    // warps sharing 16 rows, each with dv / o_split columns of O
    const int row_warps = bm == 32 ? 2 : 4;   // warps over the rows of one O slice
    const int m_tiles = bm / row_warps / 16;  // 16-row blocks per warp
    const int ov = dpv / o_split;             // a warp's O columns
    EXPECT_EQ(r.num_threads, 32 * row_warps * o_split) << what;
    EXPECT_NE(out.ptx.find(fmt::format(".maxntid {}, 1, 1", r.num_threads)), std::string::npos) << what;
    EXPECT_EQ(count(out.ptx, "mma.sync.aligned.m16n8k16"), m_tiles * (bn / 8 * dp / 16 + ov / 8 * bn / 16)) << what;
    EXPECT_EQ(count(out.ptx, "ldmatrix.sync.aligned.m8n8.x4.shared"), dp / 16 * (m_tiles + bn / 16)) << what;  // Q, K
    EXPECT_EQ(count(out.ptx, "ldmatrix.sync.aligned.m8n8.x4.trans"), bn / 16 * ov / 16) << what;               // V
    EXPECT_EQ(count(out.ptx, "st.global.v2.f32"), m_tiles * 2 * dv / o_split / 8) << what;          // partial O
    EXPECT_EQ(count(out.ptx, "st.global.v4.b32"), bm / row_warps * dv / o_split / 8 / 32) << what;  // O
  }
  // Depth 512 with score-mods and packed GQA (per-row heads and positions live in the softmax beside
  // the split O) on each of its tiles: no spills or stack either.
  struct Modded {
    const char* arch;
    Mask mask;
    jit::ScoreMod mod;
    int group;  // > 0: packed GQA
  };
  for (const Modded& k :
       {Modded{"sm_80", Mask::causal(), jit::ScoreMod::alibi(), 8},
        Modded{"sm_86", swa, jit::ScoreMod::custom("return score - 0.01f * (float)(q_idx - kv_idx);"), 0},
        Modded{"sm_90", snippet, jit::ScoreMod::softcap(), 4}}) {
    jit::FA4Config c;
    c.arch = k.arch;
    c.depth = 512;
    c.mask = k.mask;
    c.score_mod = k.mod;
    c.group = k.group;
    c.pack_gqa = k.group > 0;
    const std::string what = fmt::format("{} d512 mask {} mod {} group {}", k.arch, static_cast<int>(k.mask.kind),
                                         static_cast<int>(k.mod.kind), k.group);
    CompileOutput out;
    ASSERT_NO_THROW(out = compile(c)) << what;
    const auto use = jit::detail::parse_ptxas_log(out.log);
    EXPECT_EQ(use.spill_stores, 0) << what << "\n" << out.log;
    EXPECT_EQ(use.stack_frame, 0) << what << "\n" << out.log;
  }
}

// FP8 KV cache on the portable backend ("kv_dtype": "e4m3" under bf16/fp16 Q): K/V tiles land by
// cp.async in e4m3 staging stages and are converted into the 16-bit stage the mma.sync code reads
// (templates/sm80 E4m3Tile::convert, e4m3x2_to). On sm_80 the conversion is e4m3x2_to's software
// path (a float32 multiply by 2^120 = 0f7B800000); from sm_89 on it is cvt.rn.f16x2.e4m3x2. Every
// config here compiles without spills or stack. (At the default tiles, the sliding-window d128 and
// d64 kernels spill 40 and 8 bytes on sm_80, as the 16-bit ones do; so they run BN 32 / BM 64 here.)
TEST(Compile, PortableFp8KvCacheCompilesWithoutSpills) {
  using jit::DType;
  using jit::Mask;
  using jit::ScoreMod;
  struct Case {
    DType dtype;
    int depth;
    Mask mask;
    ScoreMod mod;
    int group;           // > 0: packed GQA
    int BM, BN, stages;  // 0: the default
  };
  const std::vector<Case> cases = {
      {DType::bf16, 128, Mask::causal(), ScoreMod::identity(), 0, 0, 0, 0},
      {DType::fp16, 128, Mask::none(), ScoreMod::identity(), 0, 0, 0, 0},
      {DType::fp16, 64, Mask::none(), ScoreMod::identity(), 0, 0, 0, 0},
      {DType::bf16, 64, Mask::causal(), ScoreMod::identity(), 0, 0, 0, 0},
      {DType::bf16, 128, Mask::causal(), ScoreMod::softcap(), 0, 0, 0, 0},
      {DType::fp16, 64, Mask::none(), ScoreMod::softcap(), 0, 0, 0, 0},
      {DType::bf16, 128, Mask::causal(), ScoreMod::identity(), 8, 0, 0, 0},
      {DType::bf16, 128, Mask::none(), ScoreMod::softcap(), 8, 0, 0, 0},
      {DType::bf16, 128, Mask::none(), ScoreMod::identity(), 4, 0, 0, 0},
      {DType::fp16, 64, Mask::none(), ScoreMod::identity(), 4, 0, 0, 0},
      {DType::fp16, 64, Mask::causal(), ScoreMod::identity(), 8, 0, 0, 0},
      {DType::fp16, 128, Mask::sliding_window(), ScoreMod::identity(), 0, 0, 32, 0},
      {DType::bf16, 128, Mask::sliding_window(), ScoreMod::identity(), 0, 64, 0, 0},
      {DType::fp16, 64, Mask::sliding_window(), ScoreMod::identity(), 0, 0, 64, 0},
      {DType::bf16, 128, Mask::none(), ScoreMod::identity(), 0, 0, 32, 0},
      {DType::bf16, 128, Mask::none(), ScoreMod::identity(), 0, 64, 128, 0},
      {DType::bf16, 64, Mask::none(), ScoreMod::identity(), 0, 64, 32, 0},
      {DType::bf16, 128, Mask::causal(), ScoreMod::identity(), 0, 0, 0, 3},
  };
  for (const Case& k : cases) {
    jit::FA4Config c;
    c.arch = "sm_80";
    c.dtype = k.dtype;
    c.kv_dtype = DType::e4m3;
    c.depth = k.depth;
    c.mask = k.mask;
    c.score_mod = k.mod;
    c.group = k.group;
    c.pack_gqa = k.group > 0;
    c.BM = k.BM;
    c.BN = k.BN;
    c.num_kv_stages = k.stages;
    const jit::ResolvedConfig r = jit::resolve(c);
    const int dp = r.padded_depth, bm = r.config.BM, bn = r.config.BN, s = r.config.num_kv_stages;
    const std::string what =
        fmt::format("sm_80 kv e4m3 {} d{} mask {} mod {} group {} BM {} BN {} stages {}", jit::to_string(k.dtype),
                    k.depth, static_cast<int>(k.mask.kind), static_cast<int>(k.mod.kind), k.group, bm, bn, s);
    // Q tile, one 16-bit K and V stage, the e4m3 K and V rings.
    EXPECT_EQ(r.smem_bytes, 2 * (bm * dp + 2 * bn * dp) + 2 * s * bn * dp) << what;
    CompileOutput out;
    ASSERT_NO_THROW(out = compile(c)) << what;
    const auto use = jit::detail::parse_ptxas_log(out.log);
    EXPECT_EQ(use.spill_stores, 0) << what << "\n" << out.log;
    EXPECT_EQ(use.stack_frame, 0) << what << "\n" << out.log;
    expect_ptx_has(out.ptx,
                   {"cp.async.cg.shared.global", "ldmatrix", "mma.sync.aligned.m16n8k16", "mul.rn.f32", "0f7B800000"},
                   what);
  }

  // From sm_89 on the conversion is the hardware cvt; the 16-bit kernels have no conversion.
  for (const char* arch : {"sm_89", "sm_90", "sm_120"}) {
    jit::FA4Config c;
    c.arch = arch;
    c.kv_dtype = DType::e4m3;
    c.mask = Mask::causal();
    expect_ptx_has(compile(c).ptx, {"cvt.rn.f16x2.e4m3x2", "mma.sync.aligned.m16n8k16"}, arch);
  }
  jit::FA4Config plain;
  plain.arch = "sm_80";
  plain.mask = Mask::causal();
  EXPECT_EQ(compile(plain).ptx.find("0f7B800000"), std::string::npos);

  // The e4m3 ring needs two stages at least; the refusal names the field.
  jit::FA4Config one_stage;
  one_stage.arch = "sm_80";
  one_stage.kv_dtype = DType::e4m3;
  one_stage.num_kv_stages = 1;
  try {
    jit::resolve(one_stage);
    FAIL() << "num_kv_stages 1 resolved for an FP8 KV cache";
  } catch (const jit::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("num_kv_stages"), std::string::npos) << e.what();
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
