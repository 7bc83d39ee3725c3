// User snippets only see their own sequence (issue 19, docs/VARIANTS.md "Snippets"): mask and
// score-mod snippets are called for 0 <= q_idx < Sq and 0 <= kv_idx < Sk of sequence b, block
// snippets with tile bounds clamped to it and never for a tile outside it. Kernels compute whole
// tiles, so the last, partial Q and KV tiles hold rows and keys past the sequence; a snippet that
// indexes a per-position tensor (FlexAttention's document masks and biases) read past it before.
//
// The GPU tests run snippets that count every call outside their sequence into aux[1] and then do
// the real lookups (document ids, per-query and per-key biases) in exactly-sized aux arrays; the
// counter must stay 0 and the output must match the float64 reference, on every backend that runs
// here (`tools/gpu.sh sanitize snippets` runs them under compute-sanitizer memcheck). The compile
// tests build the same kernels for sm_80, sm_90a and sm_100a without a GPU (no spills, no
// serialized wgmma).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "check/gpu.hpp"
#include "fa4jit/jit.hpp"
#include "generator/key.hpp"
#include "runtime/nvrtc.hpp"
#include "runtime/runtime_internal.hpp"
#include "tests/support/expect.hpp"
#include "tests/support/tune.hpp"

namespace {

using jit::FA4Config;
using jit::Mask;
using jit::ScoreMod;
using jit::testing::CheckCase;
using jit::testing::DeviceBuffer;

// aux[2] holds kTableInts ints per sequence b: {Sq, Sk, first query doc id, first key doc id,
// first query bias, first key bias} (offsets into aux[0] ints and aux[3] floats). aux[1] is the
// counter of out-of-range calls.
constexpr int kTableInts = 6;

// A snippet body that counts its call into aux[1] when `out_of_range` holds, then runs `body`;
// `seq` is sequence b's row of the table.
std::string counting(const std::string& out_of_range, const std::string& body) {
  return fmt::format("const int* seq = (const int*)aux[2] + {} * b;\nif ({}) atomicAdd((int*)aux[1], 1);\n{}",
                     kTableInts, out_of_range, body);
}
const std::string kOutsideElement =
    "q_idx < 0 || q_idx >= seq[0] || kv_idx < 0 || kv_idx >= seq[1] || h < 0 || h >= params.num_q_heads";

// Document mask: visible iff query and key belong to the same document.
const std::string kDocMask = counting(
    kOutsideElement, "const int* doc = (const int*)aux[0];\nreturn doc[seq[2] + q_idx] == doc[seq[3] + kv_idx];");
// Its block snippet (document ids ascend along the sequence): reads the ids at the tile's corners.
const std::string kDocBlock = counting(
    "q_lo < 0 || q_lo >= q_hi || q_hi > seq[0] || kv_lo < 0 || kv_lo >= kv_hi || kv_hi > seq[1] || h < 0 || "
    "h >= params.num_q_heads",
    "const int* doc = (const int*)aux[0];\n"
    "const int q0 = doc[seq[2] + q_lo], q1 = doc[seq[2] + q_hi - 1];\n"
    "const int k0 = doc[seq[3] + kv_lo], k1 = doc[seq[3] + kv_hi - 1];\n"
    "if (q1 < k0 || k1 < q0) return SKIP;\n"
    "return q0 == q1 && k0 == k1 && q0 == k0 ? FULL : PARTIAL;");
// Bias score-mod: a per-query and a per-key bias.
const std::string kBiasMod =
    counting(kOutsideElement,
             "const float* bias = (const float*)aux[3];\nreturn score + bias[seq[4] + q_idx] + bias[seq[5] + kv_idx];");

// The issue's reproducer, as a user writes it: one batch, aux[0] = Sq == Sk document ids, aux[1] =
// Sk key biases, both exactly sized (memcheck reported 513 reads past them at d64).
const char* const kPlainDocMask = "const int* doc = (const int*)aux[0]; return doc[q_idx] == doc[kv_idx];";
const char* const kPlainBiasMod = "return score + ((const float*)aux[1])[kv_idx];";

FA4Config config(const std::string& arch, int depth, Mask mask, ScoreMod mod, int packed_group = 0) {
  FA4Config c;
  c.arch = arch;
  c.depth = depth;
  c.mask = std::move(mask);
  c.score_mod = std::move(mod);
  if (packed_group > 0) {
    c.group = packed_group;
    c.pack_gqa = true;
  }
  return c;
}

// The snippet kernels under test: document mask (with and without its block snippet, alone and
// with causal), bias score-mod (alone and with the mask); on sm90a also the persistent tile walker
// (the default only for plain unmasked / causal kernels).
struct SnippetKernel {
  const char* name;
  Mask mask;
  ScoreMod mod;
  const char* tune;  // tuning overrides (sm90a only), or null
};
std::vector<SnippetKernel> snippet_kernels() {
  return {{"doc mask + bias", Mask::custom(kDocMask), ScoreMod::custom(kBiasMod), nullptr},
          {"doc mask + block", Mask::custom(kDocMask, kDocBlock), ScoreMod::identity(), nullptr},
          {"bias only", Mask::none(), ScoreMod::custom(kBiasMod), nullptr},
          {"causal and doc mask + block, bias", Mask::all_of({Mask::causal(), Mask::custom(kDocMask, kDocBlock)}),
           ScoreMod::custom(kBiasMod), nullptr},
          {"doc mask + block, bias, persistent", Mask::custom(kDocMask, kDocBlock), ScoreMod::custom(kBiasMod),
           "persistent=1"},
          // The dynamic walk (units claimed at run time; the default at d128, so d64 here too).
          {"doc mask, dynamic", Mask::custom(kDocMask), ScoreMod::identity(), "persistent=3"},
          // The built-in causal mask: sm90a's kBM 192 kernels (d64) count their Q tiles from the last
          // row, so the first tile's rows above row 0 reach the score-mod (clamped to query 0).
          {"causal, bias", Mask::causal(), ScoreMod::custom(kBiasMod), nullptr}};
}

// Exactly-sized aux arrays for one CheckCase: per sequence, random ascending document ids over its
// queries and over its keys (runs of 1 .. 300 positions, so tiles are skipped, full and partial),
// random biases, the table and the counter. The reference reads the same arrays.
class SnippetAux {
 public:
  SnippetAux(const CheckCase& c, std::uint64_t seed) {
    const int batch = c.seqlens_q.empty() ? c.batch : static_cast<int>(c.seqlens_q.size());
    lq_ = c.seqlens_q.empty() ? std::vector<int>(batch, c.seqlen_q) : c.seqlens_q;
    lk_ = c.seqlens_k.empty() ? std::vector<int>(batch, c.seqlen_k) : c.seqlens_k;
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int> run(1, 300);
    std::uniform_real_distribution<float> bias(-1.0f, 1.0f);
    auto ids = [&](int n) {  // ascending ids, each run a document; queries and keys share the id space
      std::vector<int> out;
      for (int doc = 0; static_cast<int>(out.size()) < n; ++doc)
        out.insert(out.end(), std::min(run(rng), n - static_cast<int>(out.size())), doc);
      return out;
    };
    for (int b = 0; b < batch; ++b) {
      const int docs = static_cast<int>(docs_.size()), biases = static_cast<int>(bias_.size());
      table_.insert(table_.end(), {lq_[b], lk_[b], docs, docs + lq_[b], biases, biases + lq_[b]});
      for (int n : {lq_[b], lk_[b]}) {
        const std::vector<int> d = ids(n);
        docs_.insert(docs_.end(), d.begin(), d.end());
        for (int i = 0; i < n; ++i) bias_.push_back(bias(rng));
      }
    }
    // One allocation per array, exactly as long as its elements (4 bytes, never read, when empty):
    // memcheck sees a read past the last sequence's part, the counter any call outside a sequence.
    docs_dev_ = upload(docs_.data(), docs_.size() * sizeof(int));
    bias_dev_ = upload(bias_.data(), bias_.size() * sizeof(float));
    table_dev_ = upload(table_.data(), table_.size() * sizeof(int));
    counter_ = DeviceBuffer(sizeof(int));
  }

  // Points c's aux arrays and reference at these arrays and zeroes the counter.
  void bind(CheckCase& c) {
    const int zero = 0;
    counter_.upload(&zero, sizeof(int));
    c.aux_ptr = {docs_dev_.get(), counter_.get(), table_dev_.get(), bias_dev_.get()};
    c.custom_visible = [this](int b, int, int q, int k) { return doc_q(b, q) == doc_k(b, k); };
    c.custom_score_mod = [this](double s, int b, int, int q, int k) {
      return s + bias_[table_[b * kTableInts + 4] + q] + bias_[table_[b * kTableInts + 5] + k];
    };
  }
  int out_of_range_calls() const {
    int n = -1;
    counter_.download(&n, sizeof(int));
    return n;
  }
  int doc_q(int b, int q) const { return docs_.at(table_[b * kTableInts + 2] + q); }
  int doc_k(int b, int k) const { return docs_.at(table_[b * kTableInts + 3] + k); }

 private:
  static DeviceBuffer upload(const void* src, std::size_t bytes) {
    DeviceBuffer d(std::max<std::size_t>(bytes, 4));
    if (bytes > 0) d.upload(src, bytes);
    return d;
  }
  std::vector<int> lq_, lk_, docs_, table_;
  std::vector<float> bias_;
  DeviceBuffer docs_dev_, bias_dev_, table_dev_, counter_;
};

CheckCase heads(int hq, int hkv) {
  CheckCase c;
  c.num_q_heads = hq;
  c.num_kv_heads = hkv;
  return c;
}

// Tile-crossing shapes (no length a multiple of BM 192 / 128 / 64 or BN), Sq != Sk both ways,
// varlen with empty and short sequences, paged K/V with seqused_k, KV splits.
std::vector<std::pair<std::string, CheckCase>> prefill_cases() {
  std::vector<std::pair<std::string, CheckCase>> out;
  CheckCase a = heads(2, 2);
  a.seqlen_q = a.seqlen_k = 1000;
  out.emplace_back("Sq = Sk = 1000", a);
  CheckCase b = heads(4, 2);
  b.batch = 2;
  b.seqlen_q = 130;
  b.seqlen_k = 77;
  out.emplace_back("B 2 Sq 130 Sk 77", b);
  CheckCase c = heads(2, 1);
  c.seqlen_q = 77;
  c.seqlen_k = 1000;
  out.emplace_back("Sq 77 Sk 1000", c);
  CheckCase v = heads(4, 2);
  v.seqlens_q = {0, 1, 130, 77, 1000, 5};
  v.seqlens_k = {5, 0, 77, 200, 1000, 1};
  out.emplace_back("varlen", v);
  CheckCase p = heads(4, 2);
  p.batch = 3;
  p.seqlen_q = 77;
  p.seqlens_k = {1000, 1, 130};
  p.page_size = 64;
  out.emplace_back("paged seqused_k", p);
  p.page_size = 3;  // no TMA box takes it: gathered rows
  out.emplace_back("paged 3 seqused_k", p);
  CheckCase u = heads(2, 2);
  u.batch = 2;
  u.seqlen_q = 130;
  u.seqlen_k = 400;
  u.seqlens_k = {400, 77};  // padded K, seqused_k
  out.emplace_back("seqused_k", u);
  CheckCase s = heads(2, 2);
  s.seqlen_q = 130;
  s.seqlen_k = 1000;
  s.num_splits = 3;
  out.emplace_back("splits 3", s);
  return out;
}

// Built-in parts of a combined mask, for the reference (the doc mask comes from SnippetAux).
void add_causal(CheckCase& c) {
  const auto doc = c.custom_visible;
  const int batch = c.seqlens_q.empty() ? c.batch : static_cast<int>(c.seqlens_q.size());
  std::vector<int> off(batch);
  for (int b = 0; b < batch; ++b) {
    const int sq = c.seqlens_q.empty() ? c.seqlen_q : c.seqlens_q[b];
    const int sk = c.seqlens_k.empty() ? c.seqlen_k : c.seqlens_k[b];
    off[b] = sk - sq;  // bottom-right
  }
  c.custom_visible = [doc, off](int b, int h, int q, int k) { return k <= q + off[b] && doc(b, h, q, k); };
}

// Runs c on fresh aux arrays: no snippet call outside its sequence, and the reference result.
void expect_in_sequence(const jit::Kernel& kernel, CheckCase c, std::uint64_t seed, const std::string& what) {
  SnippetAux aux(c, seed);
  aux.bind(c);
  const FA4Config& cfg = kernel.config().config;
  if (cfg.mask.kind == Mask::Kind::none || cfg.mask.kind == Mask::Kind::causal) c.custom_visible = {};
  if (cfg.mask.kind == Mask::Kind::all_of) add_causal(c);
  if (cfg.score_mod.kind == ScoreMod::Kind::identity) c.custom_score_mod = {};
  const auto r = jit::testing::run_and_check(kernel, c);
  EXPECT_EQ(aux.out_of_range_calls(), 0) << what << ": snippets called outside their sequence";
  jit::testing::expect_matches(r, what);
}

TEST(GpuSnippetBounds, PrefillSnippetsSeeOnlyTheSequence) {
  SKIP_WITHOUT_GPU();
  for (const std::string& arch : jit::testing::runnable_archs())
    for (int depth : {64, 128})
      for (const SnippetKernel& k : snippet_kernels()) {
        if (k.tune && arch != "sm_90a") continue;
        const auto kernel =
            jit::get_kernel(config(arch, depth, k.mask, k.mod), jit::testing::tuned(k.tune ? k.tune : ""));
        if (k.tune) EXPECT_EQ(kernel->config().tuning.persistent, std::atoi(std::strchr(k.tune, '=') + 1)) << k.name;
        const auto& rc = kernel->config().config;
        std::uint64_t seed = 0x19;
        for (const auto& [name, c] : prefill_cases())
          expect_in_sequence(*kernel, c, seed++,
                             fmt::format("{} d{} BM {} BN {} {}: {}", arch, depth, rc.BM, rc.BN, k.name, name));
      }
}

// Packed GQA: tile row r is (query r / group, head r % group); rows past Sq * group must not reach
// the snippets (decode: most of a tile's rows are such padding).
TEST(GpuSnippetBounds, PackedGqaSnippetsSeeOnlyTheSequence) {
  SKIP_WITHOUT_GPU();
  for (const std::string& arch : jit::testing::runnable_archs())
    for (int depth : {64, 128})
      for (int group : {4, 8}) {
        const auto kernel =
            jit::get_kernel(config(arch, depth, Mask::custom(kDocMask, kDocBlock), ScoreMod::custom(kBiasMod), group));
        const auto& rc = kernel->config().config;
        const std::string k = fmt::format("{} d{} BM {} BN {} packed group {}", arch, depth, rc.BM, rc.BN, group);
        for (int sq : {1, 3, 16})
          for (int sk : {77, 1000}) {
            CheckCase c = heads(2 * group, 2);
            c.batch = 2;
            c.seqlen_q = sq;
            c.seqlen_k = sk;
            c.num_splits = sq == 1 ? 0 : 1;  // automatic splits for single-token decode
            expect_in_sequence(*kernel, c, 0x19 + sq * 31 + sk, fmt::format("{} Sq {} Sk {}", k, sq, sk));
          }
        CheckCase v = heads(group, 1);  // packed varlen over pages, an empty sequence included
        v.seqlens_q = {3, 0, 16, 1};
        v.seqlens_k = {90, 20, 600, 1};
        v.page_size = 64;
        expect_in_sequence(*kernel, v, 0x1919, k + " varlen paged");
      }
}

// The issue's reproducer with plain snippets (no counter): the output is right either way; under
// compute-sanitizer memcheck (`tools/gpu.sh sanitize snippets`) the reads must stay in the arrays.
TEST(GpuSnippetBounds, IssueReproducerReadsOnlyTheAuxArrays) {
  SKIP_WITHOUT_GPU();
  constexpr int S = 1000;
  std::vector<int> doc(S);
  std::vector<float> bias(S);
  for (int i = 0; i < S; ++i) {
    doc[i] = i / 150;
    bias[i] = 0.25f * static_cast<float>((i * 37) % 11) - 1.0f;
  }
  DeviceBuffer ddoc(S * sizeof(int)), dbias(S * sizeof(float));
  ddoc.upload(doc.data(), S * sizeof(int));
  dbias.upload(bias.data(), S * sizeof(float));
  for (const std::string& arch : jit::testing::runnable_archs())
    for (int depth : {64, 128}) {
      const auto kernel =
          jit::get_kernel(config(arch, depth, Mask::custom(kPlainDocMask), ScoreMod::custom(kPlainBiasMod)));
      CheckCase c = heads(2, 2);
      c.seqlen_q = c.seqlen_k = S;
      c.aux_ptr = {ddoc.get(), dbias.get(), nullptr, nullptr};
      c.custom_visible = [&doc](int, int, int q, int k) { return doc[q] == doc[k]; };
      c.custom_score_mod = [&bias](double s, int, int, int, int k) { return s + bias[k]; };
      jit::testing::expect_matches(jit::testing::run_and_check(*kernel, c),
                                   fmt::format("{} d{} BM {} reproducer", arch, depth, kernel->config().config.BM));
    }
}

// Without a GPU (CI): the snippet kernels compile for every backend.
jit::detail::CompileOutput compile(const FA4Config& c) {
  const auto in = jit::detail::compile_inputs(c);
  if (c.score_mod.kind == ScoreMod::Kind::custom)
    EXPECT_NE(in.source.find("using ScoreMod = fa4::score_mod::Custom<UserScoreMod>;"), std::string::npos);
  return jit::detail::nvrtc_compile(in.source, "fa4jit.cu", *in.headers, in.compile_options());
}

std::string describe(const FA4Config& c) {
  const jit::ResolvedConfig r = jit::resolve(c);
  return fmt::format("{} d{} BM {} BN {}{} mask {} score_mod {}", c.arch, c.depth, r.config.BM, r.config.BN,
                     c.pack_gqa ? " packed" : "", jit::to_json(c)["mask"].dump(), jit::to_json(c)["score_mod"].dump());
}

// The issue's snippets as users write them (a document mask with and without a block snippet, a
// per-key bias) keep sm90a's wgmma pipeline and, where the kernel has registers to spare, spill
// nothing. Not asserted spill-free (ptxas at the register cap with per-element loads in the
// snippets; measured in the issue-19 report): the document mask with the bias at sm90a d64 (BM 192,
// 128 registers: it spilled before the bounds checks too) and d128 (24 bytes, outside the KV loop),
// sm80 d64 (255 registers, spilled before too), and sm80 d128 (255 registers): its document mask
// with the bias, and 40-44 bytes for the two block-snippet cases. Those two were read wrongly
// until 2026-11-25: this test compiled without the kernel-name options, so the log's first entry
// section, the combine kernel's (0 bytes), was parsed; they spilled the same before that. Since
// mask::Custom evaluates the snippet branch-free (docs/PERF.md run 69: a partial tile's aux loads
// fall from two per element to one per row and column), the causal + document all_of at sm90a d128
// spills 24 bytes: one value, reloaded in the KV loop (it spilled nothing before, with 128 loads
// per tile instead of 34). Since docs/PERF.md run 76 the sm90a d128 snippet-mask kernels take the
// dynamic walk, whose producer warpgroup (24 registers) spills the walk's state (68 bytes in the
// flex document kernel; its consumers spill nothing).
TEST(SnippetBoundsCompile, IssueSnippetsCompileWithoutSpills) {
  const char* const doc_block =
      "const int* doc = (const int*)aux[0];\n"
      "return doc[q_hi - 1] < doc[kv_lo] || doc[kv_hi - 1] < doc[q_lo] ? SKIP : PARTIAL;";
  struct Case {
    Mask mask;
    ScoreMod mod;
    int packed_group;
    bool spills_sm90a_d64, spills_sm90a_d128, spills_sm80_d64, spills_sm80_d128;
  };
  const Case cases[] = {
      {Mask::custom(kPlainDocMask), ScoreMod::custom(kPlainBiasMod), 0, true, true, true, true},
      {Mask::none(), ScoreMod::custom(kPlainBiasMod), 0, false, false, true, false},
      {Mask::all_of({Mask::causal(), Mask::custom(kPlainDocMask, doc_block)}), ScoreMod::identity(), 0, false, true,
       true, true},
      {Mask::custom(kPlainDocMask, doc_block), ScoreMod::custom(kPlainBiasMod), 8, false, false, true, true},
  };
  for (const std::string arch : {"sm_80", "sm_90a", "sm_100a"})
    for (int depth : {64, 128})
      for (const Case& k : cases) {
        const FA4Config c = config(arch, depth, k.mask, k.mod, k.packed_group);
        const std::string what = describe(c);
        try {
          const auto out = compile(c);
          const auto use = jit::detail::parse_ptxas_log(out.log);
          EXPECT_GT(use.registers, 0) << what << "\n" << out.log;
          if (arch == "sm_90a") EXPECT_EQ(out.log.find("are serialized"), std::string::npos) << what << "\n" << out.log;
          const bool may_spill = arch == "sm_90a"  ? (depth == 64 ? k.spills_sm90a_d64 : k.spills_sm90a_d128)
                                 : arch == "sm_80" ? (depth == 64 ? k.spills_sm80_d64 : k.spills_sm80_d128)
                                                   : false;
          if (!may_spill) EXPECT_EQ(use.spill_stores, 0) << what << "\n" << out.log;
        } catch (const jit::Error& e) {
          ADD_FAILURE() << what << ": " << e.what();
        }
      }
}

// sm90a packed decode under a document mask, with and without its block snippet, at groups 2, 4
// and 6 (a tile covers that many heads): the gathering warps (56 registers, pages no TMA box takes) walk the
// tiles through mask::Custom::classify, whose loop over the tile's heads, unrolled at 2 and 4 heads,
// spilled them 12-52 bytes; it is kept rolled (one head per pass) and they spill nothing.
TEST(SnippetBoundsCompile, PackedDecodeDocumentMasksSpillNothing) {
  const char* const doc_block =
      "const int* doc = (const int*)aux[0];\n"
      "return doc[q_hi - 1] < doc[kv_lo] || doc[kv_hi - 1] < doc[q_lo] ? SKIP : PARTIAL;";
  for (int group : {2, 4, 6})
    for (const Mask& m : {Mask::custom(kPlainDocMask), Mask::custom(kPlainDocMask, doc_block)}) {
      const FA4Config c = config("sm_90a", 128, m, ScoreMod::identity(), group);
      const std::string what = describe(c);
      try {
        const auto use = jit::detail::parse_ptxas_log(compile(c).log);
        EXPECT_GT(use.registers, 0) << what;
        EXPECT_EQ(use.spill_stores, 0) << what;
      } catch (const jit::Error& e) {
        ADD_FAILURE() << what << ": " << e.what();
      }
    }
}

// mask::Custom evaluates the snippet branch-free on positions clamped into the sequence, so a
// document mask's row-only and column-only loads (doc[q_idx], doc[kv_idx]) are issued once per row
// and column of a thread's tile, not twice per element (docs/PERF.md run 69: 1.18x faster). sm90a
// d128, BN 128: a consumer thread holds 2 rows x 32 columns of a tile, so its masked-tile code reads
// 2 + 32 ids where per-element evaluation read 128. The kernel has two copies of the element loop,
// each in two forms: tiles inside the sequence evaluate the snippet on unclamped positions, so
// their key ids load at immediate offsets from one address per column pair (docs/PERF.md run 75),
// and edge tiles clamp. PTX, against the same kernel with a mask that reads nothing: at most
// 4 x 34 more global loads (256 before run 69), and at least 2 x 32 more at immediate offsets
// (none before run 75).
TEST(SnippetBoundsCompile, DocumentMaskLoadsOncePerRowAndColumn) {
  struct Loads {
    int all = 0, at_offsets = 0;
  };
  const auto global_loads = [](const Mask& m) {
    const std::string ptx = compile(config("sm_90a", 128, m, ScoreMod::identity())).ptx;
    Loads n;
    for (size_t at = ptx.find("ld.global"); at != std::string::npos; at = ptx.find("ld.global", at + 1)) {
      ++n.all;
      const std::string line = ptx.substr(at, ptx.find('\n', at) - at);
      if (line.find('+') != std::string::npos) ++n.at_offsets;  // [%rd+4]
    }
    return n;
  };
  const Loads pure = global_loads(Mask::custom("return q_idx >= kv_idx;"));
  const Loads doc = global_loads(
      Mask::custom("const int* doc = (const int*)aux[0]; return doc[q_idx] == doc[kv_idx] && q_idx >= kv_idx;"));
  EXPECT_GT(doc.all, pure.all);
  EXPECT_LE(doc.all - pure.all, 4 * (2 + 32))
      << "document mask: " << doc.all << " global loads, causal snippet: " << pure.all;
  EXPECT_GE(doc.at_offsets - pure.at_offsets, 2 * 32)
      << "document mask: " << doc.at_offsets << " loads at immediate offsets, causal snippet: " << pure.at_offsets;
}

// The counting snippets of the GPU tests above (they compile on the GPU machine for sm_90a and
// sm_80) build for sm_100a too, which no GPU here runs.
TEST(SnippetBoundsCompile, CountingSnippetsCompileForBlackwell) {
  std::vector<FA4Config> configs;
  for (int depth : {64, 128}) {
    for (const SnippetKernel& k : snippet_kernels())
      if (!k.tune) configs.push_back(config("sm_100a", depth, k.mask, k.mod));
    configs.push_back(config("sm_100a", depth, Mask::custom(kDocMask, kDocBlock), ScoreMod::custom(kBiasMod), 8));
  }
  for (const FA4Config& c : configs) {
    const std::string what = describe(c);
    try {
      const auto out = compile(c);
      EXPECT_GT(jit::detail::parse_ptxas_log(out.log).registers, 0) << what << "\n" << out.log;
      EXPECT_NE(out.ptx.find("tcgen05.mma"), std::string::npos) << what;
    } catch (const jit::Error& e) {
      ADD_FAILURE() << what << ": " << e.what();
    }
  }
}

}  // namespace
