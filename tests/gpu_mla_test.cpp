// MLA absorbed decode ("latent KV", DeepSeek-V3 / Kimi-K2 serving; issue 56): Q and K 576 wide
// (512 latent + 64 rope columns), V the first 512 columns of the same K rows (LaunchArgs::v a view
// of k: k's data pointer and strides, shape[3] = 512), one KV head and H query heads packed into
// the tile (group = H). The GPU tests check the kernel against the float64 reference on fresh
// random inputs with O and LSE poisoned (CheckCase::latent_kv: one K buffer, no V allocation) and
// that a v which is not k's prefix is refused before anything runs. They skip without a GPU, and
// on a GPU none of whose archs serves the pair (sm_90a does; the portable backend and sm_100a do
// not this round). The reference's latent V is checked here on the CPU.
#include <gtest/gtest.h>

#include <algorithm>

#include <cmath>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "fa4jit/jit.hpp"
#include "check/gpu.hpp"
#include "check/reference.hpp"
#include "tests/support/expect.hpp"
#include "tests/support/tune.hpp"

namespace {

using jit::DType;
using jit::testing::CheckCase;

constexpr int kLatent = 512, kRope = 64, kDepth = kLatent + kRope;

// The reference's latent V (Problem::v_from_k) is K's first depth_v columns: the same answer, to
// the bit, as the problem with V copied out of K into a tensor of its own. Uneven lengths and a
// causal mask with empty rows, so every path of the reference row runs.
TEST(MlaReference, LatentValuesAreTheKeysFirstColumns) {
  const int B = 2, Sq = 3, Sk = 37, Hq = 4, Hkv = 1, D = 24, Dv = 16;
  std::mt19937 rng(56);
  std::normal_distribution<float> dist;
  jit::testing::Problem latent;
  latent.batch = B;
  latent.seqlen_q = Sq;
  latent.seqlen_k = Sk;
  latent.num_q_heads = Hq;
  latent.num_kv_heads = Hkv;
  latent.depth = D;
  latent.depth_v = Dv;
  latent.seqlens_k = {Sk, 2};  // the second sequence: 2 keys for 3 queries (query 0 sees none)
  latent.q.resize(static_cast<std::size_t>(B) * Sq * Hq * D);
  latent.k.resize(static_cast<std::size_t>(B) * Sk * Hkv * D);
  for (float& x : latent.q) x = dist(rng);
  for (float& x : latent.k) x = dist(rng);
  const std::vector<int> lens = latent.seqlens_k;
  latent.visible = [lens](int b, int, int q, int k) { return k <= q + lens[b] - Sq; };  // causal, bottom-right
  latent.v_from_k = true;

  jit::testing::Problem copied = latent;
  copied.v_from_k = false;
  for (std::size_t row = 0; row < static_cast<std::size_t>(B) * Sk * Hkv; ++row)
    copied.v.insert(copied.v.end(), latent.k.begin() + row * D, latent.k.begin() + row * D + Dv);

  const auto a = jit::testing::reference_attention(latent), b = jit::testing::reference_attention(copied);
  ASSERT_EQ(a.o.size(), static_cast<std::size_t>(B) * Sq * Hq * Dv);
  EXPECT_EQ(a.o, b.o);
  EXPECT_EQ(a.lse, b.lse);
  // Not vacuous: V's columns are K's, not zeros, and the empty row is -inf / 0.
  double norm = 0;
  for (double x : a.o) norm += x * x;
  EXPECT_GT(norm, 0.0);
  EXPECT_TRUE(std::isinf(a.lse[(1 * Hq + 0) * Sq + 0]) && a.lse[(1 * Hq + 0) * Sq + 0] < 0);

  jit::testing::Problem wider = latent;
  wider.depth_v = D + 8;  // V cannot be wider than the K rows it is read from
  EXPECT_THROW(jit::testing::reference_attention(wider), std::invalid_argument);
}

// The MLA decode kernel of `heads` query heads over one KV head: causal (bottom-right), the group's
// heads packed, tiles derived (BM 64, BN 64).
jit::FA4Config mla_config(const std::string& arch, int heads, DType dtype = DType::bf16, bool fp8_cache = false) {
  jit::FA4Config c;
  c.arch = arch;
  c.dtype = dtype;
  if (fp8_cache) c.kv_dtype = DType::e4m3;
  c.depth = kDepth;
  c.depth_v = kLatent;
  c.mask = jit::Mask::causal();
  c.group = heads;
  c.pack_gqa = true;
  return c;
}

// This GPU's archs that run MLA decode: sm_90a on Hopper (it must resolve: a refusal fails the
// test at get_kernel), any other only where its backend serves the pair. Empty: skip.
std::vector<std::string> mla_archs() {
  std::vector<std::string> out;
  for (const std::string& arch : jit::testing::runnable_archs())
    if (arch == "sm_90a" || jit::supported(mla_config(arch, 16))) out.push_back(arch);
  return out;
}

#define SKIP_WITHOUT_MLA_ARCH(archs)                                                                                 \
  do {                                                                                                               \
    SKIP_WITHOUT_GPU();                                                                                              \
    archs = mla_archs();                                                                                             \
    if (archs.empty())                                                                                               \
      GTEST_SKIP() << "MLA decode (depth 576, depth_v 512) runs on sm_90a; this GPU (" << jit::current_device_arch() \
                   << ") has no arch that serves it";                                                                \
  } while (0)

// One decode problem: `seqlens_k` keys per sequence (so the batch's seqused_k differ), one KV
// head, `heads` query heads, V = K's first 512 columns.
CheckCase mla_case(int heads, int sq, std::vector<int> seqlens_k, int page_size, int num_splits = 1) {
  CheckCase c;
  c.batch = static_cast<int>(seqlens_k.size());
  c.seqlen_q = sq;
  c.seqlens_k = std::move(seqlens_k);
  c.num_q_heads = heads;
  c.num_kv_heads = 1;
  c.page_size = page_size;
  c.num_splits = num_splits;
  c.latent_kv = true;
  return c;
}

struct MlaCase {
  std::string name;
  CheckCase c;
};

// Per head count: Sq 1 (decode) and Sq 4 (speculative / MTP decode, causal bottom-right), in padded
// K with seqused_k, pages of 16 and of 64 (sequences shorter than, equal to and across pages) and of
// 1 (SGLang's; rows sm_90a gathers, as no TMA box takes them), and KV split 3 and 4 ways. A sequence with fewer keys
// than queries has rows that see no key (O 0, LSE -inf); one of a single key has a one-key softmax.
std::vector<MlaCase> mla_cases(int heads) {
  std::vector<MlaCase> v;
  auto add = [&](const std::string& name, CheckCase c) { v.push_back({name, std::move(c)}); };
  for (int sq : {1, 4}) {
    const std::string s = fmt::format("Sq{}", sq);
    CheckCase padded = mla_case(heads, sq, {1000, 1, 377}, 0);
    padded.o_head_pad = 8;  // O rows padded with poison past their 512 columns: no store past them
    add(s + " unpaged, seqused_k", padded);
    add(s + " paged 16", mla_case(heads, sq, {300, sq == 1 ? 1 : 3, 65}, 16));
    add(s + " paged 64", mla_case(heads, sq, {700, 64, sq == 1 ? 1 : 2}, 64));
    add(s + " paged 1 (gathered rows)", mla_case(heads, sq, {333, 1, 64 + sq}, 1));
  }
  add("Sq4 paged 1, split-KV 3", mla_case(heads, 4, {1500, 200}, 1, 3));
  add("Sq1 paged 64, split-KV 4", mla_case(heads, 1, {3000, 1500}, 64, 4));
  add("Sq4 paged 16, split-KV 3", mla_case(heads, 4, {2100, 900}, 16, 3));
  add("Sq4 unpaged, split-KV 3", mla_case(heads, 4, {2500, 700, 3}, 0, 3));
  return v;
}

TEST(GpuMla, LatentDecodeMatchesReference) {
  std::vector<std::string> archs;
  SKIP_WITHOUT_MLA_ARCH(archs);
  for (const std::string& arch : archs)
    for (int heads : {8, 16, 128}) {  // Kimi-K2 at TP 8, DeepSeek-V3 at TP 8 and 1
      const jit::FA4Config cfg = mla_config(arch, heads);
      jit::KernelPtr kernel;
      try {
        kernel = jit::get_kernel(cfg, jit::testing::env_tune());
      } catch (const std::exception& e) {
        ADD_FAILURE() << arch << " H" << heads << ": " << e.what();
        continue;
      }
      const jit::FA4Config& kc = kernel->config().config;
      EXPECT_EQ(kc.BM, 64) << arch << " H" << heads;
      EXPECT_EQ(kc.BN, 64) << arch << " H" << heads;
      EXPECT_EQ(kernel->config().padded_depth_v, kLatent) << arch;
      for (const MlaCase& m : mla_cases(heads)) {
        const std::string what = fmt::format("{} d576/v512 H{}/1 {}", arch, heads, m.name);
        try {  // every case reports, rather than the first failure ending the test
          jit::testing::report_and_expect("GpuMla", what, "bf16", jit::testing::run_and_check(*kernel, m.c));
        } catch (const std::exception& e) {
          ADD_FAILURE() << what << ": " << e.what();
        }
      }
    }
}

// The alternating schedule (Tuning::alternate_s, shared_p.cuh Baton: the two O-split warpgroups
// take turns computing S and the softmax): every case above, walks of odd and even tile counts
// (a last tile of either warpgroup), at 8, 16 and 128 heads.
TEST(GpuMla, AlternatingSMatchesReference) {
  std::vector<std::string> archs;
  SKIP_WITHOUT_MLA_ARCH(archs);
  if (std::find(archs.begin(), archs.end(), "sm_90a") == archs.end()) GTEST_SKIP() << "alternate_s is sm_90a's";
  const jit::ResolveOptions alternate{jit::parse_tune("alternate_s=1")};
  for (int heads : {8, 16, 128}) {
    const jit::KernelPtr kernel = jit::get_kernel(mla_config("sm_90a", heads), alternate);
    ASSERT_EQ(kernel->config().tuning.alternate_s, 1);
    std::vector<MlaCase> cases = mla_cases(heads);
    cases.push_back({"Sq1 unpaged, 1 to 4 KV tiles", mla_case(heads, 1, {64, 128, 192, 256, 65}, 0)});
    for (const MlaCase& m : cases) {
      const std::string what = fmt::format("sm_90a d576/v512 H{}/1 alternate_s {}", heads, m.name);
      try {
        jit::testing::report_and_expect("GpuMla", what, "bf16", jit::testing::run_and_check(*kernel, m.c));
      } catch (const std::exception& e) {
        ADD_FAILURE() << what << ": " << e.what();
      }
    }
  }
}

// K stages in parts (Tuning::k_parts, shape.cuh kKParts: S = Q K^T issues each part of the 576
// columns once it landed; the partner waits for every part): every case above at each value the
// default does not take, at 16 and 128 heads. Gathered pages (page 1) land whole and wait no part.
TEST(GpuMla, KStagesInPartsMatchReference) {
  std::vector<std::string> archs;
  SKIP_WITHOUT_MLA_ARCH(archs);
  if (std::find(archs.begin(), archs.end(), "sm_90a") == archs.end()) GTEST_SKIP() << "k_parts is sm_90a's";
  const int derived = jit::resolve(mla_config("sm_90a", 16)).tuning.k_parts;
  for (int parts : {1, 3, 9}) {
    if (parts == derived) continue;  // LatentDecodeMatchesReference runs it
    for (int heads : {16, 128}) {
      const jit::KernelPtr kernel =
          jit::get_kernel(mla_config("sm_90a", heads), {jit::parse_tune(fmt::format("k_parts={}", parts))});
      ASSERT_EQ(kernel->config().tuning.k_parts, parts);
      for (const MlaCase& m : mla_cases(heads)) {
        const std::string what = fmt::format("sm_90a d576/v512 H{}/1 k_parts {} {}", heads, parts, m.name);
        try {
          jit::testing::report_and_expect("GpuMla", what, "bf16", jit::testing::run_and_check(*kernel, m.c));
        } catch (const std::exception& e) {
          ADD_FAILURE() << what << ": " << e.what();
        }
      }
    }
  }
}

// fp16 (a model served in fp16, `prewarm --model --dtype fp16`): one paged decode and one split
// speculative decode per head count.
TEST(GpuMla, LatentDecodeInFp16MatchesReference) {
  std::vector<std::string> archs;
  SKIP_WITHOUT_MLA_ARCH(archs);
  for (const std::string& arch : archs)
    for (int heads : {16, 128}) {
      const std::vector<MlaCase> cases = {{"Sq1 paged 64", mla_case(heads, 1, {700, 64, 1}, 64)},
                                          {"Sq4 paged 64, split-KV 3", mla_case(heads, 4, {2100, 5}, 64, 3)}};
      for (const MlaCase& m : cases) {
        const std::string what = fmt::format("{} d576/v512 fp16 H{}/1 {}", arch, heads, m.name);
        try {
          const auto kernel = jit::get_kernel(mla_config(arch, heads, DType::fp16), jit::testing::env_tune());
          jit::testing::report_and_expect("GpuMla", what, "fp16", jit::testing::run_and_check(*kernel, m.c));
        } catch (const std::exception& e) {
          ADD_FAILURE() << what << ": " << e.what();
        }
      }
    }
}

// An e4m3 latent cache under bf16 / fp16 queries (FlashMLA's FP8 KV cache; kv_dtype e4m3): the
// converter warps turn each 64-byte-row e4m3 K stage into the 16-bit stage S and P V read, BN 32.
// Random e4m3 latent rows, with and without per-sequence factors (descale_k = descale_v: one cache;
// the reference reads the dequantised rows); TMA pages of 16 and 64, gathered pages of 1 and 3 (the
// producer warp's cp.async into the 64-byte e4m3 rows), unpaged, split-KV.
TEST(GpuMla, LatentDecodeOverAnFp8CacheMatchesReference) {
  std::vector<std::string> archs;
  SKIP_WITHOUT_MLA_ARCH(archs);
  for (const std::string& arch : archs)
    for (DType dtype : {DType::bf16, DType::fp16})
      for (int heads : {16, 128}) {
        std::vector<MlaCase> cases = {
            {"Sq1 paged 64", mla_case(heads, 1, {700, 64, 1}, 64)},
            {"Sq4 paged 16, split-KV 3", mla_case(heads, 4, {2100, 3, 90}, 16, 3)},
            {"Sq4 unpaged, seqused_k", mla_case(heads, 4, {1000, 1, 377}, 0)},
            {"Sq1 paged 64, split-KV 4", mla_case(heads, 1, {3000, 1500}, 64, 4)},
            {"Sq4 paged 1 (gathered rows), split-KV 3", mla_case(heads, 4, {1500, 3, 200}, 1, 3)},
            {"Sq1 paged 3 (gathered rows)", mla_case(heads, 1, {700, 64, 1}, 3)}};
        for (MlaCase& m : cases) {
          for (bool descale : {true, false}) {
            m.c.descale = descale;
            const std::string what = fmt::format("{} d576/v512 {} over e4m3 H{}/1 {}{}", arch, jit::to_string(dtype),
                                                 heads, m.name, descale ? ", descale" : "");
            try {
              const auto kernel = jit::get_kernel(mla_config(arch, heads, dtype, true), jit::testing::env_tune());
              EXPECT_EQ(kernel->config().config.BN, 32) << what;
              jit::testing::report_and_expect("GpuMla", what, jit::to_string(dtype),
                                              jit::testing::run_and_check(*kernel, m.c));
            } catch (const std::exception& e) {
              ADD_FAILURE() << what << ": " << e.what();
            }
          }
        }
      }
}

// Long-pole splits (GridWalk::long_pole_split) over the latent cache: chunked prefill beside decode
// and MTP rows in one varlen call (paged 64; the mask causal, bottom-right). At 16 heads a 64-row
// tile holds 4 queries, so the rows of 1-4 queries split into pieces of their own keys (the
// automatic choice) and the 5- and 40-query ones run whole; over a bf16 and an e4m3 latent cache
// (its converters walk the same pieces).
TEST(GpuMla, LongPoleSplitsMatchReference) {
  std::vector<std::string> archs;
  SKIP_WITHOUT_MLA_ARCH(archs);
  for (const std::string& arch : archs)
    for (bool fp8_cache : {false, true}) {
      CheckCase c = mla_case(16, 40, {3000, 2500, 1800, 2900, 700, 1200, 3000, 100}, 64, 0);
      c.seqlens_q = {1, 4, 1, 3, 40, 5, 1, 2};
      c.max_seqlen_k = 3000;
      const std::string what = fmt::format("{} d576/v512 H16/1 mixed varlen{}", arch, fp8_cache ? " over e4m3" : "");
      try {
        const auto kernel = jit::get_kernel(mla_config(arch, 16, DType::bf16, fp8_cache), jit::testing::env_tune());
        const jit::testing::CheckResult r = jit::testing::run_and_check(*kernel, c);
        jit::testing::report_and_expect("GpuMla", what, "bf16", r);
        if (arch == "sm_90a") EXPECT_GT(r.splits, 1) << what << ": the short rows' long poles were not split";
      } catch (const std::exception& e) {
        ADD_FAILURE() << what << ": " << e.what();
      }
    }
}

// The kernel reads V from K's shared-memory stage, so a v that is not k's first 512 columns (k's
// data pointer and strides) is refused with a LaunchError naming v, before anything runs (O keeps
// its poison); k's prefix view launches.
TEST(GpuMla, ValueThatIsNotTheKeyPrefixIsRefused) {
  std::vector<std::string> archs;
  SKIP_WITHOUT_MLA_ARCH(archs);
  const int B = 2, Sk = 128, H = 16;
  const std::size_t k_elems = static_cast<std::size_t>(B) * Sk * kDepth,
                    o_elems = static_cast<std::size_t>(B) * H * kLatent;
  jit::testing::DeviceBuffer q(static_cast<std::size_t>(B) * H * kDepth * 2), k(k_elems * 2), other_k(k_elems * 2),
      v(static_cast<std::size_t>(B) * Sk * kLatent * 2), o(o_elems * 2);
  q.fill_byte(0);
  k.fill_byte(0);
  other_k.fill_byte(0);
  v.fill_byte(0);
  const unsigned char poison = 0x5a;
  for (const std::string& arch : archs) {
    const auto kernel = jit::get_kernel(mla_config(arch, H), jit::testing::env_tune());
    o.fill_byte(poison);
    jit::LaunchArgs a;
    a.q = jit::Tensor::contiguous(q.get(), DType::bf16, B, 1, H, kDepth);
    a.k = jit::Tensor::contiguous(k.get(), DType::bf16, B, Sk, 1, kDepth);
    a.o = jit::Tensor::contiguous(o.get(), DType::bf16, B, 1, H, kLatent);
    const jit::Tensor prefix = [&] {
      jit::Tensor t = a.k;
      t.shape[3] = kLatent;
      return t;
    }();
    jit::Tensor own = jit::Tensor::contiguous(v.get(), DType::bf16, B, Sk, 1, kLatent);  // a V buffer of its own
    jit::Tensor shifted = prefix;  // k's columns 64..575: k's strides, another start
    shifted.data = static_cast<char*>(k.get()) + 2 * kRope;
    jit::Tensor repacked =
        jit::Tensor::contiguous(k.get(), DType::bf16, B, Sk, 1, kLatent);  // k's pointer, V's strides
    jit::Tensor elsewhere = prefix;                                        // another K buffer's prefix
    elsewhere.data = other_k.get();
    const std::regex names_v(R"((^|[^A-Za-z0-9_])v([^A-Za-z0-9_]|$))");
    for (const auto& [name, bad] : std::vector<std::pair<std::string, jit::Tensor>>{
             {"own buffer", own}, {"shifted", shifted}, {"repacked", repacked}, {"another k", elsewhere}}) {
      a.v = bad;
      try {
        kernel->launch(a);
        ADD_FAILURE() << arch << " " << name << ": a v that is not k's prefix launched";
      } catch (const jit::LaunchError& e) {
        EXPECT_TRUE(std::regex_search(std::string(e.what()), names_v)) << arch << " " << name << ": " << e.what();
      }
    }
    std::vector<unsigned char> host(o.bytes());
    o.download(host.data(), host.size());
    for (unsigned char b : host) ASSERT_EQ(b, poison) << arch << ": a refused launch wrote O";
    a.v = prefix;
    EXPECT_NO_THROW(kernel->launch(a)) << arch << ": k's 512-column prefix is the V the kernel takes";
    std::vector<unsigned char> after(o.bytes());  // a synchronous copy: waits for the launch
    o.download(after.data(), after.size());
    EXPECT_NE(after, host) << arch << ": the accepted launch wrote no O";
  }
}

}  // namespace
