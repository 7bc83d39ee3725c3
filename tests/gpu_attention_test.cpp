// GPU correctness: every backend that runs on this GPU against the float64 reference, on
// fresh random inputs with poisoned outputs. Skips (with the reason) without a GPU.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "fa4jit/jit.hpp"
#include "tests/support/expect.hpp"
#include "tests/support/tune.hpp"
#include "check/gpu.hpp"

namespace {

using jit::testing::CheckCase;
using jit::testing::run_and_check;

struct Shape {
  int sq, sk;
};

void expect_matches(const jit::Kernel& kernel, const CheckCase& c, const std::string& what) {
  jit::testing::expect_matches(run_and_check(kernel, c), what);
}

// The matrix: {D 64, 128} x {none, causal} x {MHA, GQA 4:1} x {Sq = Sk in 1, 17, 128,
// 1000, 4096; Sq != Sk}, for one arch (the portable backend via sm_90, the Hopper one via sm_90a).
void run_matrix(const std::string& arch) {
  const Shape shapes[] = {{1, 1},   {17, 17},   {128, 128}, {1000, 1000}, {4096, 4096},
                          {1, 300}, {113, 203}, {1000, 17}, {256, 4096},  {4096, 1}};
  for (int depth : {64, 128})
    for (bool causal : {false, true})
      for (int group : {1, 4}) {
        jit::FA4Config cfg;
        cfg.arch = arch;
        cfg.depth = depth;
        cfg.group = group;
        cfg.mask = causal ? jit::Mask::causal() : jit::Mask::none();
        const auto kernel = jit::get_kernel(cfg, jit::testing::env_tune());
        for (const Shape& s : shapes) {
          CheckCase c;
          const bool big = s.sq >= 1000 || s.sk >= 1000;
          c.batch = big ? 1 : 2;
          c.num_kv_heads = 2;
          c.num_q_heads = 2 * group;
          c.seqlen_q = s.sq;
          c.seqlen_k = s.sk;
          expect_matches(*kernel, c,
                         fmt::format("{} d{} {} group {} Sq {} Sk {}", arch, depth, causal ? "causal" : "none", group,
                                     s.sq, s.sk));
        }
      }
}

TEST(GpuAttention, PortableBackendMatchesReference) {
  SKIP_WITHOUT_GPU();
  const std::string dev = jit::current_device_arch();
  // The portable backend runs on the GPU's plain arch (sm_90 on Hopper, sm_100 on Blackwell).
  const std::string plain = dev.back() == 'a' ? dev.substr(0, dev.size() - 1) : dev;
  run_matrix(plain);
}

// The portable backend's head dims 96 (Phi-3: padded to 128, the loads zero-fill columns 96..127
// and the epilogue clips them), 192 and 256 (BM 64) and 192 with a 128-wide V (BM 128, BN 32;
// V ring, P V, O and the split partials 128 wide) on the GPU's plain arch: none and causal, MHA and
// GQA 4:1, odd lengths and Sq != Sk, and with O rows padded by 32 poisoned elements that must stay
// untouched (stores past V's head dim). Then varlen, paged K/V (page 48: pages end inside a tile)
// and split-KV (float32 partials of V's width into the combine) on each depth's causal kernel.
// Head dim 512 (O split over two warps per 16 rows) at the default tile and at the 99 KiB parts'
// (BM 32, BN 16: 2 row warps) and sm_80's (BM 64, BN 16), which run here as explicit tiles.
TEST(GpuAttention, PortableDeepHeadsMatchReference) {
  SKIP_WITHOUT_GPU();
  const std::string dev = jit::current_device_arch();
  const std::string plain = dev.back() == 'a' ? dev.substr(0, dev.size() - 1) : dev;
  const Shape shapes[] = {{1, 1}, {17, 17}, {300, 300}, {113, 203}, {1, 300}, {1000, 17}};
  struct Depths {
    int depth, depth_v;
    int bm = 0, bn = 0;  // 0: the default
  };
  for (const Depths& d : {Depths{96, 0}, Depths{192, 0}, Depths{256, 0}, Depths{192, 128}, Depths{512, 0},
                          Depths{512, 0, 32, 16}, Depths{512, 0, 64, 16}})
    for (bool causal : {false, true}) {
      jit::FA4Config cfg;
      cfg.arch = plain;
      cfg.depth = d.depth;
      cfg.depth_v = d.depth_v;
      cfg.BM = d.bm;
      cfg.BN = d.bn;
      cfg.mask = causal ? jit::Mask::causal() : jit::Mask::none();
      const auto kernel = jit::get_kernel(cfg, jit::testing::env_tune());
      ASSERT_EQ(kernel->config().backend, jit::Backend::portable);
      const std::string name =
          fmt::format("{} d{}/{} {} BM {} BN {}", plain, d.depth, d.depth_v ? d.depth_v : d.depth,
                      causal ? "causal" : "none", kernel->config().config.BM, kernel->config().config.BN);
      int i = 0;
      for (const Shape& s : shapes) {
        CheckCase c;
        const bool gqa = i++ % 2 == 1;
        c.batch = 2;
        c.num_kv_heads = 2;
        c.num_q_heads = gqa ? 8 : 2;
        c.seqlen_q = s.sq;
        c.seqlen_k = s.sk;
        c.o_head_pad = 32;
        expect_matches(*kernel, c, fmt::format("{} {} Sq {} Sk {}", name, gqa ? "GQA 4:1" : "MHA", s.sq, s.sk));
      }
      if (!causal) continue;
      CheckCase v;  // varlen queries and keys, an empty sequence included
      v.num_q_heads = 4;
      v.seqlens_q = {17, 0, 300, 1};
      v.seqlens_k = {40, 5, 300, 129};
      expect_matches(*kernel, v, name + " varlen");
      CheckCase paged;
      paged.batch = 3;
      paged.num_q_heads = 8;
      paged.seqlen_q = 33;
      paged.seqlens_k = {1000, 64, 517};
      paged.page_size = 48;
      expect_matches(*kernel, paged, name + " paged 48");
      for (int splits : {3, 9}) {
        CheckCase split;
        split.num_q_heads = 8;
        split.seqlen_q = splits == 3 ? 3 : 130;
        split.seqlen_k = splits == 3 ? 3000 : 200;  // 9 splits of 200 keys: empty splits too
        split.num_splits = splits;
        split.with_sinks = splits == 3;
        expect_matches(*kernel, split, fmt::format("{} splits {}", name, splits));
      }
    }
}

TEST(GpuAttention, HopperBackendMatchesReference) {
  SKIP_WITHOUT_GPU();
  if (jit::current_device_arch() != "sm_90a") GTEST_SKIP() << "needs an sm_90 GPU";
  run_matrix("sm_90a");
}

TEST(GpuAttention, Fp16AndCustomScoreModMatchReference) {
  SKIP_WITHOUT_GPU();
  jit::FA4Config cfg;  // arch empty: the GPU's default backend
  cfg.dtype = jit::DType::fp16;
  cfg.depth = 128;
  cfg.mask = jit::Mask::causal();
  cfg.score_mod = jit::ScoreMod::custom("return score - 0.01f * (float)(q_idx - kv_idx);");
  const auto kernel = jit::get_kernel(cfg, jit::testing::env_tune());
  CheckCase c;
  c.seqlen_q = 333;
  c.seqlen_k = 517;
  c.num_q_heads = 4;
  c.num_kv_heads = 1;
  c.custom_score_mod = [](double s, int, int, int q, int k) { return s - 0.01 * (q - k); };
  expect_matches(*kernel, c, "fp16 custom score-mod causal, MQA");
}

TEST(GpuAttention, ArchMismatchIsAClearError) {
  SKIP_WITHOUT_GPU();
  jit::FA4Config cfg;
  cfg.arch = jit::current_device_arch() == "sm_100a" ? "sm_90a" : "sm_100a";
  const auto kernel = jit::get_kernel(cfg, jit::testing::env_tune());
  CheckCase c;
  try {
    run_and_check(*kernel, c);
    FAIL() << "a kernel for another arch launched";
  } catch (const jit::DriverError& e) {
    EXPECT_NE(std::string(e.what()).find("arch mismatch"), std::string::npos) << e.what();
  }
}

TEST(GpuAttention, LaunchRejectsMismatchedArgumentsBeforeRunning) {
  SKIP_WITHOUT_GPU();
  jit::FA4Config cfg;
  cfg.depth = 128;
  cfg.group = 4;
  const auto kernel = jit::get_kernel(cfg, jit::testing::env_tune());
  jit::testing::DeviceBuffer q(2 * 128 * 8 * 128 * 2), k(2 * 128 * 2 * 128 * 2), o(2 * 128 * 8 * 128 * 2);
  o.fill_byte(0x5a);
  jit::LaunchArgs a;
  a.q = jit::Tensor::contiguous(q.get(), jit::DType::bf16, 2, 128, 8, 128);
  a.k = jit::Tensor::contiguous(k.get(), jit::DType::bf16, 2, 128, 2, 128);
  a.v = a.k;
  a.o = jit::Tensor::contiguous(o.get(), jit::DType::bf16, 2, 128, 8, 128);
  a.k.shape[2] = 4;  // group 2, the kernel wants 4
  a.v = a.k;
  EXPECT_THROW(kernel->launch(a), jit::LaunchError);
  a.k.shape[2] = 2;
  a.v = a.k;
  a.o.dtype = jit::DType::fp16;
  EXPECT_THROW(kernel->launch(a), jit::LaunchError);
  std::vector<unsigned char> host(o.bytes());
  o.download(host.data(), host.size());
  for (unsigned char b : host) ASSERT_EQ(b, 0x5a) << "a refused launch wrote output";
}

}  // namespace

namespace {

// One sm90a tile shape against the reference, none and causal, GQA 4:1, shapes chosen so the
// last Q and KV tiles cross the sequence ends at odd offsets.
void run_hopper_tile(int depth, int bm, int bn, std::initializer_list<Shape> shapes) {
  if (jit::current_device_arch() != "sm_90a") GTEST_SKIP() << "needs an sm_90 GPU";
  for (bool causal : {false, true}) {
    jit::FA4Config cfg;
    cfg.arch = "sm_90a";
    cfg.depth = depth;
    cfg.BM = bm;
    cfg.BN = bn;
    cfg.mask = causal ? jit::Mask::causal() : jit::Mask::none();
    const auto kernel = jit::get_kernel(cfg, jit::testing::env_tune());
    for (const Shape& s : shapes) {
      CheckCase c;
      c.batch = 2;
      c.num_q_heads = 8;
      c.num_kv_heads = 2;
      c.seqlen_q = s.sq;
      c.seqlen_k = s.sk;
      expect_matches(
          *kernel, c,
          fmt::format("BM{} BN{} d{} {} Sq {} Sk {}", bm, bn, depth, causal ? "causal" : "none", s.sq, s.sk));
    }
  }
}

// FA3's 192-row tiles at head dim 64: three consumer warpgroups.
TEST(GpuAttention, HopperThreeConsumerWarpgroupsMatchReference) {
  SKIP_WITHOUT_GPU();
  run_hopper_tile(64, 192, 128, {{1, 1}, {191, 191}, {193, 400}, {1000, 1000}, {577, 3000}});
}

// Head dims 96 (padded to 128: TMA zero-fills columns 96..127, the epilogue clips them), 192 (BN 112)
// and 256 (BN 80) at their default tiles: none and causal, bf16 and fp16, MHA and GQA 4:1, odd lengths
// and Sq != Sk. O rows carry 32 poisoned elements past head_dim that must stay untouched.
TEST(GpuAttention, HopperDeepHeadsMatchReference) {
  SKIP_WITHOUT_GPU();
  if (jit::current_device_arch() != "sm_90a") GTEST_SKIP() << "needs an sm_90 GPU";
  const Shape shapes[] = {{1, 1}, {17, 17}, {128, 128}, {1, 300}, {113, 203}, {1000, 17}, {1000, 1000}, {256, 2049}};
  for (int depth : {96, 192, 256})
    for (jit::DType dtype : {jit::DType::bf16, jit::DType::fp16})
      for (bool causal : {false, true}) {
        jit::FA4Config cfg;
        cfg.arch = "sm_90a";
        cfg.depth = depth;
        cfg.dtype = dtype;
        cfg.mask = causal ? jit::Mask::causal() : jit::Mask::none();
        const auto kernel = jit::get_kernel(cfg, jit::testing::env_tune());
        int i = 0;
        for (const Shape& s : shapes) {
          CheckCase c;
          const bool gqa = i++ % 2 == 0;
          c.batch = s.sq >= 1000 || s.sk >= 1000 ? 1 : 2;
          c.num_kv_heads = 2;
          c.num_q_heads = gqa ? 8 : 2;
          c.seqlen_q = s.sq;
          c.seqlen_k = s.sk;
          c.o_head_pad = 32;
          expect_matches(
              *kernel, c,
              fmt::format("sm_90a d{} {} {} BN {} {} Sq {} Sk {}", depth, jit::to_string(dtype),
                          causal ? "causal" : "none", kernel->config().config.BN, gqa ? "GQA 4:1" : "MHA", s.sq, s.sk));
        }
      }
}

// The BN values the deep heads brought (80, 96, 112) are accepted at head dims 64 and 128 too.
TEST(GpuAttention, HopperDeepHeadTilesAtSmallDepthsMatchReference) {
  SKIP_WITHOUT_GPU();
  run_hopper_tile(128, 128, 96, {{1, 1}, {129, 300}, {1000, 1000}});
  run_hopper_tile(128, 128, 112, {{17, 17}, {577, 3000}});
  run_hopper_tile(64, 128, 80, {{1, 1}, {193, 400}, {1000, 1000}});
}

// FA3's 128x176 tile at head dim 128: a last tile that crosses seqlen_k off any power of two.
TEST(GpuAttention, HopperBN176MatchesReference) {
  SKIP_WITHOUT_GPU();
  run_hopper_tile(128, 128, 176, {{1, 176}, {130, 177}, {300, 352}, {1000, 1000}, {129, 4096}});
}

}  // namespace
