// The sm100a backend cannot run here (no Blackwell GPU exists for this project), so CI checks
// everything that can be checked without one, for a matrix of variants: NVRTC compiles it, the
// PTX holds the tcgen05/TMA instructions the design is built on, ptxas reports no spills and a
// register budget consistent with the per-role setmaxnreg plan, shared memory fits, and the SASS
// (cuobjdump from the nvidia-cuda-cuobjdump wheel) shows UTCHMMA, LDTM, STTM and UTMALDG.
// Variants (docs/BLACKWELL.md): paged KV and split-KV are run-time paths, so every kernel must
// read FwdParams::page_table / kv_box_rows / o_partial / lse_partial / num_splits; packed GQA
// (pack_gqa, group 4 and 8) must load Q and store O through the 5-D TMA maps; custom masks come
// with and without a block snippet.
// FP8 KV cache (kv_dtype e4m3 under bf16/fp16 Q): the PTX must widen e4m3 pairs
// (cvt.rn.f16x2.e4m3x2) and read descale_k / descale_v, the shared memory must be the formula plus
// the e4m3 ring; the 16-bit kernels must do neither.
// FP8 (dtype e4m3, bf16/fp16 O): both MMAs tcgen05 kind::f8f6f4 (no kind::f16), P rounded to e4m3
// (cvt.rn.satfinite.e4m3x2.f32), descale_q / descale_k / descale_v read, shared memory exactly the
// formula with 1-byte K/V stages at Dp 128; the SASS MMA is UTCQMMA (16-bit kernels: UTCHMMA).
// Depth 192 (Q/K): with V 128 (depth_v, DeepSeek-V3 prefill) and with V 192. Every kernel's MMA
// shapes are read from its instruction descriptors: S = Q K^T is 128 x BN over the Q/K depth, P V
// 128 x V's padded depth; the shared memory is the layout the host derived (d192/v128: 231424 bytes).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <regex>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/params.h"
#include "fa4jit/jit.hpp"
#include "generator/key.hpp"
#include "runtime/nvrtc.hpp"
#include "runtime/runtime_internal.hpp"

namespace fs = std::filesystem;

namespace {

struct Variant {
  jit::FA4Config config;
  std::string name;
};

std::vector<Variant> matrix() {
  using jit::Mask;
  using jit::ScoreMod;
  const std::vector<std::pair<std::string, Mask>> masks = {
      {"none", Mask::none()},
      {"causal", Mask::causal()},
      {"causal_top_left", Mask::causal(true)},
      {"sliding", Mask::sliding_window()},
      {"chunked", Mask::chunked()},
      {"custom", Mask::custom("return (q_idx / 64) == (kv_idx / 64) || kv_idx < 4;")},
      {"causal_and_chunked", Mask::all_of({Mask::causal(), Mask::chunked()})},
      // Block-diagonal plus per-head sink keys, with a block snippet that skips the tiles off
      // the diagonal blocks and past the sinks (the run-time block mask is in every custom kernel).
      {"custom_block",
       Mask::custom("return (q_idx / 64) == (kv_idx / 64) || kv_idx < 4 + h;",
                    "if (kv_lo >= 4 + h && ((kv_hi - 1) / 64 < q_lo / 64 || kv_lo / 64 > (q_hi - 1) / 64))"
                    " return SKIP;\n"
                    "return PARTIAL;")},
  };
  const std::vector<std::pair<std::string, ScoreMod>> mods = {
      {"identity", ScoreMod::identity()},
      {"softcap", ScoreMod::softcap()},
      {"alibi", ScoreMod::alibi()},
      {"custom", ScoreMod::custom("return score - 0.05f * (float)abs(q_idx - kv_idx) + scalars[0];")},
  };
  std::vector<Variant> out;
  auto add = [&](int depth, jit::DType dt, const std::pair<std::string, Mask>& m,
                 const std::pair<std::string, ScoreMod>& s, int group, bool pack = false, bool kv_e4m3 = false,
                 jit::DType out_dt = jit::DType::bf16, int depth_v = 0) {
    jit::FA4Config c;
    c.arch = "sm_100a";
    c.depth = depth;
    c.depth_v = depth_v;
    c.dtype = dt;
    if (kv_e4m3) c.kv_dtype = jit::DType::e4m3;
    if (dt == jit::DType::e4m3) c.output_dtype = out_dt;
    c.mask = m.second;
    c.score_mod = s.second;
    c.group = group;
    c.pack_gqa = pack;
    out.push_back(
        {c, fmt::format("d{}{} {} {} {} group{}{}{}{}", depth, depth_v ? fmt::format("v{}", depth_v) : "",
                        jit::to_string(dt), m.first, s.first, group, pack ? " packed" : "", kv_e4m3 ? " kv_e4m3" : "",
                        dt == jit::DType::e4m3 ? fmt::format(" out_{}", jit::to_string(out_dt)) : "")});
  };
  for (const auto& m : masks)  // every mask x every score-mod at the flagship shape
    for (const auto& s : mods) add(128, jit::DType::bf16, m, s, 1);
  for (int depth : {64, 128})  // depth x dtype x group at the common masks
    for (jit::DType dt : {jit::DType::bf16, jit::DType::fp16})
      for (int group : {1, 4})
        for (int mi : {0, 1}) add(depth, dt, masks[mi], mods[0], group);
  for (const auto& m : masks) add(64, jit::DType::bf16, m, mods[3], 8);  // d64 with snippets, GQA 8
  // Packed GQA (5-D Q/O maps, box rows BM/2 = 128 = whole groups): group 4 and 8, both depths,
  // none / causal / custom with a block snippet (per-head mask and block classes), and snippets.
  for (int group : {4, 8})
    for (int depth : {64, 128})
      for (int mi : {0, 1, 7}) add(depth, jit::DType::bf16, masks[mi], mods[0], group, true);
  add(128, jit::DType::fp16, masks[7], mods[3], 8, true);
  add(64, jit::DType::bf16, masks[1], mods[2], 4, true);  // ALiBi: slope of each packed row's head
  // Depth 96 (Phi-3), padded to 128: none / causal / a window, MHA and packed GQA, and an FP8 KV cache.
  for (int mi : {0, 1, 3}) add(96, jit::DType::bf16, masks[mi], mods[0], 1);
  add(96, jit::DType::fp16, masks[1], mods[0], 4, true);
  add(96, jit::DType::bf16, masks[1], mods[0], 1, false, true);
  add(96, jit::DType::e4m3, masks[1], mods[0], 1);
  // Depth 192: Q/K 192 with V 128 (DeepSeek-V3 prefill: K ring at 192 in 3 chunks, V ring, P V's N,
  // O, the epilogue and the split partials at 128) over the masks, score-mods, fp16, GQA and packed
  // GQA; V 192 (BN 64) at the common masks, snippets and packed.
  for (int mi : {0, 1, 3, 5, 7}) add(192, jit::DType::bf16, masks[mi], mods[0], 1, false, false, jit::DType::bf16, 128);
  for (int si : {1, 2, 3}) add(192, jit::DType::bf16, masks[1], mods[si], 1, false, false, jit::DType::bf16, 128);
  add(192, jit::DType::fp16, masks[1], mods[0], 4, false, false, jit::DType::bf16, 128);
  for (int mi : {0, 1, 7}) add(192, jit::DType::bf16, masks[mi], mods[0], 8, true, false, jit::DType::bf16, 128);
  add(192, jit::DType::fp16, masks[7], mods[3], 8, true, false, jit::DType::bf16, 128);
  for (int mi : {0, 1}) add(192, jit::DType::bf16, masks[mi], mods[0], 1);
  add(192, jit::DType::bf16, masks[7], mods[3], 8);
  add(192, jit::DType::bf16, masks[1], mods[0], 8, true);
  // FP8 KV cache: depth x dtype x none/causal; score-mods (descale_k in the logit multiplier), a
  // block-snippet mask at GQA 8, packed GQA at both depths.
  for (int depth : {64, 128})
    for (jit::DType dt : {jit::DType::bf16, jit::DType::fp16})
      for (int mi : {0, 1}) add(depth, dt, masks[mi], mods[0], 1, false, true);
  add(128, jit::DType::bf16, masks[1], mods[1], 1, false, true);
  add(128, jit::DType::bf16, masks[7], mods[3], 8, false, true);
  add(64, jit::DType::bf16, masks[1], mods[0], 8, true, true);
  add(128, jit::DType::fp16, masks[7], mods[2], 8, true, true);
  // FP8 (dtype e4m3): depth x O type x none/causal; every other mask and score-mod at d128 (the
  // descales in the logit multiplier before a score-mod), a block-snippet mask with snippets at GQA
  // 8, packed GQA at both depths.
  constexpr jit::DType e4m3 = jit::DType::e4m3;
  for (int depth : {64, 128})
    for (jit::DType out_dt : {jit::DType::bf16, jit::DType::fp16})
      for (int mi : {0, 1}) add(depth, e4m3, masks[mi], mods[0], 1, false, false, out_dt);
  for (int mi : {2, 3, 4, 6}) add(128, e4m3, masks[mi], mods[0], 1);
  for (int si : {1, 2, 3}) add(128, e4m3, masks[1], mods[si], 1);
  add(128, e4m3, masks[7], mods[3], 8);
  add(64, e4m3, masks[5], mods[3], 8);
  add(64, e4m3, masks[1], mods[0], 8, true);
  add(128, e4m3, masks[7], mods[2], 4, true, false, jit::DType::fp16);
  // Masks with a prefix (Mask::prefix: prefix LM's causal, a window's sink keys), d128 and d64 GQA 8.
  Mask causal_prefix = Mask::causal(), sliding_prefix = Mask::sliding_window();
  causal_prefix.prefix = sliding_prefix.prefix = true;
  add(128, jit::DType::bf16, {"causal_prefix", causal_prefix}, mods[0], 1);
  add(64, jit::DType::bf16, {"sliding_prefix", sliding_prefix}, mods[0], 8);
  return out;
}

// PTX reads FwdParams field `offset` (ld.param from the __grid_constant__ parameter's address).
bool reads_param(const std::string& ptx, size_t offset) {
  return std::regex_search(ptx, std::regex(fmt::format(R"(ld\.param\.\w+\s+%\w+, \[[^\]]*\+{}\])", offset)));
}

struct Checked {
  std::string name;
  double ms = 0;
  jit::detail::ResourceUsage use;
  std::string failure;  // empty: ok
  std::string cubin;
};

Checked check_one(const Variant& v) {
  Checked r;
  r.name = v.name;
  try {
    const auto in = jit::detail::compile_inputs(v.config);
    const auto out = jit::detail::nvrtc_compile(in.source, "fa4jit.cu", *in.headers, in.compile_options());
    r.ms = out.ms;
    r.use = jit::detail::parse_ptxas_log(out.log);
    r.cubin = out.cubin;
    std::vector<std::string> missing;
    for (const char* needle : {"tcgen05.mma", "tcgen05.ld", "tcgen05.st", "tcgen05.commit", "tcgen05.alloc",
                               "cp.async.bulk.tensor", "setmaxnreg.inc.sync.aligned.u32 192",
                               "setmaxnreg.dec.sync.aligned.u32 80", "setmaxnreg.dec.sync.aligned.u32 48"})
      if (out.ptx.find(needle) == std::string::npos) missing.push_back(needle);
    // The run-time variant paths: paged KV (page-table boxes), split-KV (float32 partials).
    const std::pair<const char*, size_t> fields[] = {{"page_table", offsetof(fa4::FwdParams, page_table)},
                                                     {"kv_box_rows", offsetof(fa4::FwdParams, kv_box_rows)},
                                                     {"o_partial", offsetof(fa4::FwdParams, o_partial)},
                                                     {"lse_partial", offsetof(fa4::FwdParams, lse_partial)},
                                                     {"num_splits", offsetof(fa4::FwdParams, num_splits)}};
    for (const auto& [field, offset] : fields)
      if (!reads_param(out.ptx, offset)) missing.push_back(fmt::format("a read of params.{}", field));
    // Pages no TMA box takes (kv_box_rows 0): the load warp's gather (templates/sm100a/gather.cuh),
    // 16-byte copies each lane signals on the stage's barrier.
    for (const char* needle : {"cp.async.cg.shared.global", "cp.async.mbarrier.arrive.noinc.shared::cta.b64"})
      if (out.ptx.find(needle) == std::string::npos) missing.push_back(needle);
    // FP8 KV cache: the converter warps widen e4m3 pairs and the softmax reads the descales; a
    // 16-bit kernel does neither.
    const bool kv8 = v.config.kv_dtype.has_value();
    const bool widens = out.ptx.find("cvt.rn.f16x2.e4m3x2") != std::string::npos;
    if (kv8 && !widens) missing.push_back("cvt.rn.f16x2.e4m3x2");
    if (!kv8 && widens) r.failure += "a kernel without an FP8 KV cache has cvt.rn.f16x2.e4m3x2; ";
    // FP8 (dtype e4m3): both MMAs kind::f8f6f4 and P rounded to e4m3; every other kernel kind::f16 only.
    const bool fp8 = v.config.dtype == jit::DType::e4m3;
    const char* const kinds[2] = {"tcgen05.mma.cta_group::1.kind::f16", "tcgen05.mma.cta_group::1.kind::f8f6f4"};
    if (out.ptx.find(kinds[fp8]) == std::string::npos) missing.push_back(kinds[fp8]);
    if (out.ptx.find(kinds[!fp8]) != std::string::npos) r.failure += fmt::format("the PTX has {}; ", kinds[!fp8]);
    if (fp8 && out.ptx.find("cvt.rn.satfinite.e4m3x2.f32") == std::string::npos)
      missing.push_back("cvt.rn.satfinite.e4m3x2.f32");
    // The descales: q for FP8 only, k and v for FP8 and FP8 KV caches, none in 16-bit kernels.
    for (const auto& [field, offset, wanted] :
         {std::tuple<const char*, size_t, bool>{"descale_q", offsetof(fa4::FwdParams, descale_q), fp8},
          {"descale_k", offsetof(fa4::FwdParams, descale_k), fp8 || kv8},
          {"descale_v", offsetof(fa4::FwdParams, descale_v), fp8 || kv8}}) {
      const bool reads = reads_param(out.ptx, offset);
      if (wanted && !reads) missing.push_back(fmt::format("a read of params.{}", field));
      if (!wanted && reads) r.failure += fmt::format("the kernel reads params.{}; ", field);
    }
    // The MMAs' shapes (MmaIssuer's instruction descriptors, PTX globals): S = Q K^T is M 128 x N BN,
    // K-major B, over the Q/K padded depth (2 Q tiles x Dp / K-per-MMA unrolled SS MMAs); P V is
    // M 128 x N = V's padded depth (depth_v: 128 at Q/K 192), MN-major B.
    const jit::ResolvedConfig& rc = in.config;
    auto idesc = [&](const char* name) -> long long {
      std::smatch m;
      const std::regex re(fmt::format(R"(MmaIssuer\w*{}E = (\d+);)", name));
      return std::regex_search(out.ptx, m, re) ? std::stoll(m[1]) : -1;
    };
    const long long qk = idesc("kIdescQK"), pv = idesc("kIdescPV");
    auto n_of = [](long long d) { return static_cast<int>((d >> 17) & 0x3f) * 8; };
    auto m_of = [](long long d) { return static_cast<int>((d >> 24) & 0x1f) * 16; };
    if (qk < 0 || pv < 0) {
      missing.push_back("MmaIssuer::kIdescQK / kIdescPV");
    } else {
      if (m_of(qk) != 128 || n_of(qk) != rc.config.BN || ((qk >> 16) & 1) != 0)
        r.failure +=
            fmt::format("S = Q K^T is M {} N {} (want 128 x BN {}, K-major B); ", m_of(qk), n_of(qk), rc.config.BN);
      if (m_of(pv) != 128 || n_of(pv) != rc.padded_depth_v || ((pv >> 16) & 1) != 1)
        r.failure += fmt::format("P V is M {} N {} (want 128 x V's padded depth {}, MN-major B); ", m_of(pv), n_of(pv),
                                 rc.padded_depth_v);
    }
    const std::regex ss_mma(R"(tcgen05\.mma\.cta_group::1\.kind::\w+ \[%r\d+\], %rd)");  // A from smem
    const std::ptrdiff_t ss =
        std::distance(std::sregex_iterator(out.ptx.begin(), out.ptx.end(), ss_mma), std::sregex_iterator());
    if (ss != 2 * rc.padded_depth / (fp8 ? 32 : 16))
      r.failure +=
          fmt::format("{} SS MMAs (S = Q K^T), want 2 Q tiles x {} / {}; ", ss, rc.padded_depth, fp8 ? 32 : 16);
    if (v.config.pack_gqa)
      for (const char* needle :
           {"cp.async.bulk.tensor.5d.shared::cluster.global", "cp.async.bulk.tensor.5d.global.shared::cta"})
        if (out.ptx.find(needle) == std::string::npos) missing.push_back(needle);
    if (!missing.empty()) r.failure += fmt::format("PTX lacks {}; ", fmt::join(missing, ", "));
    if (r.use.spill_stores != 0 || r.use.spill_loads != 0)
      r.failure += fmt::format("spills {}/{} bytes; ", r.use.spill_stores, r.use.spill_loads);
    // setmaxnreg needs a fixed budget at entry: 512 threads x 128 = the whole 64K register file,
    // which the plan splits as 2 softmax WGs x 192 + correction 80 + MMA/load/idle 48 (x 128 threads).
    if (r.use.registers != 128)
      r.failure += fmt::format("{} registers at entry, the plan needs 128; ", r.use.registers);
    if (128 * (192 * 2 + 80 + 48) > 65536) r.failure += "setmaxnreg plan exceeds the register file; ";
    if (kv8) {  // the 16-bit formula plus 2..4 e4m3 slots of BN x Dp bytes (Dp = 128)
      const jit::FA4Config& c = in.config.config;
      const long long dp = in.config.padded_depth;
      const long long base = 2 * (c.BM * dp + 2 * c.num_kv_stages * c.BN * dp) + c.BM * 4 + 1024;
      const long long extra = in.config.smem_bytes - base, slot = c.BN * dp;
      if (dp != 128 || extra % slot != 0 || extra / slot < 2 || extra / slot > 4)
        r.failure += fmt::format("shared memory {} is not the formula {} + 2..4 e4m3 slots of {} (Dp {}); ",
                                 in.config.smem_bytes, base, slot, dp);
    }
    if (fp8) {  // exactly the formula, 1-byte K/V stages: Q regions sized for 16-bit O, K and V rings
      const jit::FA4Config& c = in.config.config;
      const long long dp = in.config.padded_depth;
      const long long formula = 2 * c.BM * dp + 2 * c.num_kv_stages * c.BN * dp + c.BM * 4 + 1024;
      if (dp != 128 || c.num_qk_stages != 1 || in.config.smem_bytes != formula)
        r.failure += fmt::format("shared memory {} is not the e4m3 formula {} (Dp {}, qk stages {}); ",
                                 in.config.smem_bytes, formula, dp, c.num_qk_stages);
    }
    // Depth 192: with V 128 (BN 128) Q 96 KiB, 2 V stages of 32 KiB and the 4 K chunks of 16 KiB that
    // fit beside them; with V 192 (BN 64) Q and 2 whole K / V stages.
    if (v.config.depth == 192) {
      const int want = v.config.depth_v == 128 ? 231424 : 198656;
      if (in.config.smem_bytes != want || in.config.config.BN != (v.config.depth_v == 128 ? 128 : 64))
        r.failure += fmt::format("depth 192 / V {}: shared memory {} (want {}), BN {}; ", v.config.depth_v,
                                 in.config.smem_bytes, want, in.config.config.BN);
    }
    if (in.config.smem_bytes > 232448 || r.use.smem_static > 0)
      r.failure += fmt::format("shared memory {} dynamic + {} static exceeds 227 KiB; ", in.config.smem_bytes,
                               r.use.smem_static);
  } catch (const std::exception& e) {
    r.failure = e.what();
  }
  return r;
}

std::string find_cuobjdump() {
  if (const char* env = std::getenv("FA4JIT_CUOBJDUMP")) return env;
  FILE* p = popen(
      "python3 -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], \"cu13\", \"bin\"))' 2>/dev/null",
      "r");
  char buf[512] = {};
  const bool got = p && fgets(buf, sizeof(buf), p);
  if (p) pclose(p);
  if (got) {
    std::string dir(buf);
    while (!dir.empty() && dir.back() == '\n') dir.pop_back();
    if (fs::exists(fs::path(dir) / "cuobjdump") && fs::exists(fs::path(dir) / "nvdisasm"))
      return (fs::path(dir) / "cuobjdump").string();
  }
  return {};
}

TEST(BlackwellCompile, EveryVariantCompilesWithTheDesignedInstructionsAndBudgets) {
  const std::vector<Variant> variants = matrix();
  std::vector<Checked> results(variants.size());
  std::atomic<size_t> next{0};
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < 2; ++t)
    pool.emplace_back([&] {
      for (size_t i = next++; i < variants.size(); i = next++) results[i] = check_one(variants[i]);
    });
  for (auto& t : pool) t.join();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double max_ms = 0;
  for (const Checked& r : results) {
    EXPECT_TRUE(r.failure.empty()) << r.name << ": " << r.failure;
    max_ms = std::max(max_ms, r.ms);
  }
  std::printf("sm100a compile matrix: %zu variants in %.1f s wall (2 threads), slowest %.0f ms, 0 spills required\n",
              results.size(), wall, max_ms);

  const std::string cuobjdump = find_cuobjdump();
  if (cuobjdump.empty()) GTEST_SKIP() << "cuobjdump not found (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)";
  // d128 none identity; d64 block-snippet mask with snippets at GQA 8; a packed kernel (5-D TMA load and
  // store); FP8 KV cache and FP8 kernels; depth 192 with V 128 and with V 192.
  auto index_of = [&](const std::string& name) {
    for (size_t i = 0; i < variants.size(); ++i)
      if (variants[i].name == name) return i;
    ADD_FAILURE() << "no variant " << name;
    return size_t{0};
  };
  for (size_t i :
       {size_t{0}, index_of("d64 bf16 custom_block custom group8"),
        index_of("d128 fp16 custom_block custom group8 packed"), index_of("d128 bf16 causal identity group1 kv_e4m3"),
        index_of("d128 e4m3 causal identity group1 out_bf16"),
        index_of("d64 e4m3 causal identity group8 packed out_bf16"), index_of("d192v128 bf16 causal identity group1"),
        index_of("d192 bf16 custom_block custom group8")}) {
    const fs::path cubin = fs::temp_directory_path() / fmt::format("fa4jit_sm100a_{}.cubin", i);
    std::ofstream(cubin, std::ios::binary) << results[i].cubin;
    const std::string cmd = fmt::format("PATH=\"{}:$PATH\" '{}' -sass '{}' 2>&1",
                                        fs::path(cuobjdump).parent_path().string(), cuobjdump, cubin.string());
    FILE* p = popen(cmd.c_str(), "r");
    std::string sass;
    char buf[4096];
    while (size_t n = fread(buf, 1, sizeof(buf), p)) sass.append(buf, n);
    pclose(p);
    fs::remove(cubin);
    // The MMA: UTCHMMA (kind::f16), UTCQMMA (kind::f8f6f4); never the other one.
    const bool fp8 = variants[i].config.dtype == jit::DType::e4m3;
    const char* const mmas[2] = {"UTCHMMA", "UTCQMMA"};
    EXPECT_EQ(sass.find(mmas[!fp8]), std::string::npos) << results[i].name << ": SASS has " << mmas[!fp8];
    for (const char* op : {mmas[fp8], "LDTM", "STTM", "UTMALDG", "UTCBAR"})
      EXPECT_NE(sass.find(op), std::string::npos) << results[i].name << ": SASS lacks " << op;
    if (fp8)  // P rounded to e4m3, four per register
      EXPECT_NE(sass.find("F2FP.SATFINITE.E4M3.F32.PACK_AB_MERGE_C"), std::string::npos)
          << results[i].name << ": SASS lacks F2FP.SATFINITE.E4M3.F32";
    if (variants[i].config.pack_gqa)
      for (const char* op : {"UTMALDG.5D", "UTMASTG.5D"})
        EXPECT_NE(sass.find(op), std::string::npos) << results[i].name << ": SASS lacks " << op;
    if (variants[i].config.kv_dtype)  // e4m3 pairs widened by the converter warps
      EXPECT_NE(sass.find("F2FP.F16.E4M3.UNPACK_B"), std::string::npos)
          << results[i].name << ": SASS lacks F2FP.F16.E4M3";
    EXPECT_FALSE(std::regex_search(sass, std::regex(R"(\b(STL|LDL)\b)")))
        << results[i].name << ": local memory in SASS";
  }
}

}  // namespace
