// `fa4jit bundle` and bundle tiers: what an install ships so a fresh machine compiles nothing.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "tests/support/cli_process.hpp"

namespace fs = std::filesystem;

namespace {

using Cli = jit::testing::CliProcessTest;

// Every file under dir with its size: a bundle tier must never change.
std::map<std::string, std::uintmax_t> tree(const fs::path& dir) {
  std::map<std::string, std::uintmax_t> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) out[fs::relative(e.path(), dir).string()] = e.file_size();
  return out;
}

TEST_F(Cli, BundleServesItsKernelsWithCompilesForbiddenAndIsNeverWritten) {
  const fs::path bundle = write("unused", "").parent_path() / "bundle";
  const auto made = run("bundle --preset llama3-8b --preset llama3-8b-decode --arch sm_90a,sm_100a --out " +
                        bundle.string() + " --jobs 2");
  ASSERT_EQ(made.rc, 0) << made.out;
  // d128 bf16 on two archs: one split-KV combine kernel per arch, shared by prefill and decode.
  EXPECT_NE(made.out.find("bundle: 4 kernels and 2 split-KV combine kernels in"), std::string::npos) << made.out;
  std::ifstream mf(bundle / "manifest.json");
  const auto manifest = nlohmann::json::parse(mf);
  ASSERT_EQ(manifest["kernels"].size(), 4u);
  EXPECT_EQ(manifest["kernels"][0]["key"].get<std::string>().size(), 32u);
  ASSERT_EQ(manifest["combine_kernels"].size(), 2u);
  EXPECT_EQ(manifest["combine_kernels"][0]["combine"]["depth"], 128);
  const auto before = tree(bundle);

  // A fresh cache, compiles forbidden, a deployment secret the bundle was never signed with.
  const std::string env = "FA4JIT_BUNDLE_PATH=" + bundle.string() +
                          " FA4JIT_CACHE_DIR=" + (bundle.parent_path() / "fresh").string() +
                          " FA4JIT_COMPILE=forbid FA4JIT_CACHE_SECRET=0123456789abcdef0123456789abcdef";
  auto r = run("prewarm --preset llama3-8b --preset llama3-8b-decode --arch sm_90a,sm_100a", env);
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("4 kernels: 0 compiled, 4 hit, 0 failed"), std::string::npos) << r.out;
  EXPECT_NE(run("info", env).out.find("kernel bundles: " + bundle.string()), std::string::npos);

  // New kernels go to the writable cache, never into the bundle (even where it is writable).
  r = run("prewarm --preset fp16 --arch sm_90a",
          "FA4JIT_BUNDLE_PATH=" + bundle.string() + " FA4JIT_CACHE_DIR=" + (bundle.parent_path() / "fresh").string());
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(tree(bundle), before);

  // A forged cubin in the bundle is refused (and left alone: the tier is read-only).
  const std::string key = manifest["kernels"][0]["key"];
  const fs::path cubin = bundle / "v1" / key.substr(0, 2) / key / "kernel.cubin";
  ASSERT_TRUE(fs::exists(cubin));
  {
    std::fstream f(cubin, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('\x5a');
  }
  r = run("prewarm --preset llama3-8b --arch sm_90a", env);
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("compile policy forbid"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("read-only tier"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(cubin));

  // So is a forged combine kernel: the kernels that need it are refused, naming it.
  const std::string combine_key = manifest["combine_kernels"][1]["key"];
  const std::string combine_arch = manifest["combine_kernels"][1]["arch"];
  const fs::path combine_cubin = bundle / "v1" / combine_key.substr(0, 2) / combine_key / "kernel.cubin";
  {
    std::fstream f(combine_cubin, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('\x5a');
  }
  r = run("prewarm --preset llama3-8b-decode --arch " + combine_arch, env);
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("split-KV combine kernel"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(combine_key), std::string::npos) << r.out;
}

TEST_F(Cli, BundleNeedsArchAndOut) {
  EXPECT_EQ(run("bundle --preset default --out x").rc, 2);
  EXPECT_EQ(run("bundle --preset default --arch sm_90a").rc, 2);
}

}  // namespace
