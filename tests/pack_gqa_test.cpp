// Packed GQA for any group (issue 53), without a GPU: the packed-row mapping (common/packed_rows.h,
// compiled here by the host compiler exactly as the kernels and the runtime use it), the config
// rules (any group accepted; what stays refused names pack_gqa), the heads one CTA packs, and NVRTC
// compiles of the new kernels for sm_90a, sm_80 and sm_100a without spills or serialized wgmma.
// GPU runs against the float64 reference: tests/gpu_pack_gqa_test.cpp.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>
#include <utility>

#include <fmt/format.h>

#include "common/packed_rows.h"
#include "fa4jit/advanced.hpp"
#include "fa4jit/jit.hpp"
#include "generator/backends/backend.hpp"
#include "runtime/nvrtc.hpp"
#include "runtime/runtime_internal.hpp"
#include "fa4jit/errors.hpp"
#include "tests/support/tune.hpp"

namespace {

using jit::detail::CompileOutput;

// Expects a ConfigError whose message names every one of `words`.
template <class F>
void expect_refused(F&& f, const std::vector<std::string>& words) {
  try {
    f();
    ADD_FAILURE() << "no ConfigError";
  } catch (const jit::ConfigError& e) {
    const std::string msg = e.what();
    for (const std::string& w : words)
      EXPECT_NE(msg.find(w), std::string::npos) << "'" << w << "' missing from: " << msg;
  }
}

// Every real row maps to a distinct (query, head) of the sequence, every pair has exactly one real
// row, padding rows are exactly the span tails, and count() is one past the last real row: for
// every pack 1..64 over 64-row spans (sm90a), 1..128 over 128 (sm100a) and 0 (sm80, dense).
template <int kPack, int kSpan>
void check_rows() {
  using R = fa4::PackedRow<kPack, kSpan>;
  const std::string what = fmt::format("pack {} span {}", kPack, kSpan);
  for (int seqlen_q : {1, 2, 3, 5, 9, 16, 17, 40, 129}) {
    const int rows = R::count(seqlen_q);
    EXPECT_EQ(rows, fa4::packed_row_count(seqlen_q, kPack, kSpan)) << what;
    std::set<std::pair<int, int>> seen;
    int last_real = -1;
    for (int r = 0; r < rows + 2 * (kSpan > 0 ? kSpan : 64); ++r) {
      const R pr = R::of(r);
      ASSERT_GE(pr.head, 0) << what << " row " << r;
      ASSERT_LT(pr.head, kPack) << what << " row " << r;
      const bool padding = kSpan > 0 && r % kSpan >= R::kSpanRows;
      EXPECT_EQ(R::real(r, seqlen_q), r < rows && !padding) << what << " Sq " << seqlen_q << " row " << r;
      if (!R::real(r, seqlen_q)) continue;
      last_real = r;
      ASSERT_LT(pr.q, seqlen_q) << what << " row " << r;
      EXPECT_TRUE(seen.insert({pr.q, pr.head}).second) << what << " row " << r << " repeats a (query, head)";
    }
    EXPECT_EQ(static_cast<int>(seen.size()), seqlen_q * kPack) << what << " Sq " << seqlen_q;
    // count() ends at the last real row, or after the padding of a full last span (the same tiles).
    const int tail = !R::kDense && seqlen_q % R::kSpanQueries == 0 ? kSpan - R::kSpanRows : 0;
    EXPECT_EQ(last_real + 1 + tail, rows) << what << " Sq " << seqlen_q << ": count() past the last real row";
  }
  if constexpr (kSpan > 0) {
    // A span's rows are (query, head) in order from its first query (the TMA box's row order).
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < R::kSpanRows; ++j) {
        const R pr = R::of(i * kSpan + j);
        EXPECT_EQ(pr.q, R::span_query(i * kSpan) + j / kPack) << what;
        EXPECT_EQ(pr.head, j % kPack) << what;
      }
    EXPECT_EQ(R::kSpanRows, fa4::packed_box_rows(kPack, kSpan)) << what;
    EXPECT_EQ(R::kSpanRows, kSpan / kPack * kPack) << what;
  }
  if constexpr (R::kDense)  // the code of every kernel before any-group packing: r / pack, r % pack
    for (int r = 0; r < 300; ++r) {
      EXPECT_EQ(R::of(r).q, r / kPack) << what;
      EXPECT_EQ(R::of(r).head, r % kPack) << what;
    }
}

template <int kSpan, int... kPacks>
void check_all(std::integer_sequence<int, kPacks...>) {
  (check_rows<kPacks + 1, kSpan>(), ...);
}

TEST(PackGqa, PackedRowsMapEveryQueryHeadPairOnce) {
  check_all<64>(std::make_integer_sequence<int, 64>{});
  check_all<128>(std::make_integer_sequence<int, 128>{});
  check_all<0>(std::make_integer_sequence<int, 20>{});
  // Padding appears exactly where the pack does not divide the span.
  EXPECT_TRUE((fa4::PackedRow<8, 64>::kDense));
  EXPECT_FALSE((fa4::PackedRow<7, 64>::kDense));
  EXPECT_EQ((fa4::PackedRow<7, 64>::kSpanRows), 63);
  EXPECT_EQ((fa4::PackedRow<12, 64>::kSpanRows), 60);
  EXPECT_EQ((fa4::PackedRow<48, 64>::kSpanRows), 48);
  EXPECT_EQ((fa4::PackedRow<7, 64>::count(16)), 64 + 7 * 7);  // 9 queries in span 0, 7 in span 1
}

jit::FA4Config packed(const std::string& arch, int group, int depth = 128) {
  jit::FA4Config c;
  c.arch = arch;
  c.depth = depth;
  c.mask = jit::Mask::causal();
  c.group = group;
  c.pack_gqa = true;
  return c;
}

TEST(PackGqa, EveryGroupIsAcceptedAndLargeGroupsPackInSlices) {
  for (const char* arch : {"sm_80", "sm_90a", "sm_100a"})
    for (int g = 1; g <= 128; ++g) {
      const jit::FA4Config c = packed(arch, g);
      const int span = std::string(arch) == "sm_80" ? 0 : std::string(arch) == "sm_90a" ? 64 : 128;
      const int pack = jit::detail::pack_heads(c, span);
      if (pack == 1) {  // one head (nothing to pack), or a prime group above the span: nothing to slice it into
        expect_refused([&] { jit::resolve(c); }, {"pack_gqa", fmt::format("group = {}", g)});
        continue;
      }
      const jit::ResolvedConfig r = jit::resolve(c);
      EXPECT_EQ(jit::detail::pack_heads(r), pack) << arch << " group " << g;
      EXPECT_EQ(g % pack, 0) << arch << " group " << g;
      if (span == 0 || g <= span)
        EXPECT_EQ(pack, g) << arch << " group " << g;
      else
        EXPECT_LE(pack, span) << arch << " group " << g;
      if (pack < g && std::string(arch) == "sm_90a") EXPECT_EQ(r.tuning.persistent, 0) << "group " << g;
    }
  // The largest slice: MQA-style groups of 128 and 96 run as 2 slices of 64 and 48 on sm90a.
  EXPECT_EQ(jit::detail::pack_heads(packed("sm_90a", 128), 64), 64);
  EXPECT_EQ(jit::detail::pack_heads(packed("sm_90a", 96), 64), 48);
  EXPECT_EQ(jit::detail::pack_heads(packed("sm_90a", 67), 64), 1);
  // Sliced groups run the grid walk: a persistent walk is refused, naming the tuning.
  expect_refused([&] { jit::resolve(packed("sm_90a", 128), jit::testing::tuned("persistent=2")); },
                 {"persistent=2", "group 128", "grid"});
}

CompileOutput compile(const jit::FA4Config& c) {
  const auto in = jit::detail::compile_inputs(c, {});
  return jit::detail::nvrtc_compile(in.source, "fa4jit.cu", *in.headers, in.compile_options());
}

void expect_clean(const CompileOutput& out, const std::string& what) {
  EXPECT_GT(out.cubin.size(), 1000u) << what;
  EXPECT_EQ(jit::detail::parse_ptxas_log(out.log).spill_stores, 0) << what << "\n" << out.log;
  EXPECT_EQ(out.log.find("are serialized"), std::string::npos) << what << "\n" << out.log;
}

// The new kernels: padded spans (3, 7, 12, 48) and slices (96, 128), causal and unmasked, 16-bit
// and over an FP8 KV cache (sm90a, sm80), compile clean for every backend. Every source writes
// kPackSlices: the group's slices where sliced, else 1.
TEST(PackGqa, AnyGroupKernelsCompileWithoutSpills) {
  for (const char* arch : {"sm_90a", "sm_80", "sm_100a"})
    for (int g : {3, 7, 12, 48, 96, 128}) {
      for (bool fp8_kv : {false, true}) {
        if (fp8_kv && (std::string(arch) == "sm_100a" || (g != 7 && g != 12))) continue;
        jit::FA4Config c = packed(arch, g);
        if (fp8_kv) c.kv_dtype = jit::DType::e4m3;
        if (g == 48) c.mask = jit::Mask::none();
        const std::string what = fmt::format("{} group {}{}", arch, g, fp8_kv ? " e4m3 KV" : "");
        const auto in = jit::detail::compile_inputs(c, {});
        const bool sliced = std::string(arch) != "sm_80" && jit::detail::pack_heads(jit::resolve(c)) < g;
        EXPECT_EQ(in.source.find("kPackSlices = 1;") == std::string::npos, sliced) << what;
        CompileOutput out;
        ASSERT_NO_THROW(out = compile(c)) << what;
        expect_clean(out, what);
      }
    }
}

}  // namespace
