// run (safetensors in/out), check (one attention against the float64 reference), bench.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <random>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "check/gpu.hpp"
#include "check/safetensors.hpp"
#include "cli/commands.hpp"
#include "cli/run_inputs.hpp"
#include "fa4jit/jit.hpp"
#include "runtime/compiled_kernel.hpp"
#include "runtime/driver.hpp"

namespace jit::cli {

namespace {

// Random normal data of type t into buf (testing::timing_input_bytes).
void upload_random(testing::DeviceBuffer& buf, DType t, std::mt19937& rng) {
  const std::string bytes = testing::timing_input_bytes(t, buf.bytes() / static_cast<std::size_t>(dtype_size(t)), rng);
  buf.upload(bytes.data(), bytes.size());
}

struct ShapeOpts {
  int batch = 2, seqlen = 1024, seqlen_q = 0, seqlen_k = 0, heads = 8, kv_heads = 2;
  std::vector<int> seqlens_q, seqlens_k;  // varlen / seqused_k
  int page_size = 0;                      // paged KV
  int splits = 0;                         // LaunchArgs::num_splits (0: automatic)
  bool pack_gqa = false;
  int window_left = -1, window_right = -1, chunk = 0;
  int mask_prefix = 0;  // LaunchArgs::mask_prefix (a mask with prefix true)
  float softcap = 0;
  bool sinks = false;
  int max_seqlen_k = -1;  // LaunchArgs::max_seqlen_k; -1: the longest of seqlens_k
  int sq() const { return seqlen_q ? seqlen_q : seqlen; }
  int sk() const { return seqlen_k ? seqlen_k : seqlen; }
  int seqlen_k_hint() const {
    if (max_seqlen_k < -1)
      throw ConfigError(
          fmt::format("--max-seqlen-k is {}: -1 (the longest sequence), 0 (none) or a length", max_seqlen_k));
    if (max_seqlen_k >= 0 || seqlens_k.empty()) return std::max(max_seqlen_k, 0);
    return *std::max_element(seqlens_k.begin(), seqlens_k.end());
  }
};

// The case `check` verifies for these options; `bench` launches with its scalars too
// (testing::set_launch_scalars), so the two read every option the same way.
testing::CheckCase check_case(const ShapeOpts& s) {
  testing::CheckCase cc;
  cc.batch = s.seqlens_q.empty() ? s.batch : static_cast<int>(s.seqlens_q.size());
  cc.seqlen_q = s.sq();
  cc.seqlen_k = s.sk();
  cc.num_q_heads = s.heads;
  cc.num_kv_heads = s.kv_heads;
  cc.seqlens_q = s.seqlens_q;
  cc.seqlens_k = s.seqlens_k;
  cc.max_seqlen_k = s.seqlen_k_hint();
  cc.page_size = s.page_size;
  cc.num_splits = s.splits;
  cc.window_left = s.window_left;
  cc.window_right = s.window_right;
  cc.chunk_size = s.chunk;
  cc.mask_prefix = s.mask_prefix;
  cc.softcap = s.softcap;
  cc.with_sinks = s.sinks;
  return cc;
}

// One of --window's two extents: a whole number >= -1, else a usage error naming the flag (std::stoi
// said only "stoi").
int window_extent(const std::vector<std::string>& v, std::size_t i) {
  const std::string text = fmt::format("{}", fmt::join(v, ","));
  int x = 0;
  const std::string& s = v.at(i);
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || x < -1)
    throw CLI::ValidationError("--window", fmt::format("'{}': expected LEFT,RIGHT, two whole numbers of keys "
                                                       "(-1: unbounded), e.g. --window 128,0",
                                                       text));
  return x;
}

void add_shape_options(CLI::App* cmd, ShapeOpts& s) {
  cmd->add_option("--batch", s.batch, "batch size");
  cmd->add_option("--seqlen", s.seqlen, "Sq = Sk");
  cmd->add_option("--seqlen-q", s.seqlen_q, "query length (overrides --seqlen)");
  cmd->add_option("--seqlen-k", s.seqlen_k, "key length (overrides --seqlen)");
  cmd->add_option("--heads", s.heads, "query heads");
  cmd->add_option("--kv-heads", s.kv_heads, "key/value heads");
  cmd->add_option("--seqlens-q", s.seqlens_q, "varlen: per-sequence query lengths (packed q, cu_seqlens_q)")
      ->delimiter(',');
  cmd->add_option("--seqlens-k", s.seqlens_k, "per-sequence key lengths (cu_seqlens_k, or seqused_k when padded/paged)")
      ->delimiter(',');
  cmd->add_option("--max-seqlen-k", s.max_seqlen_k,
                  "the launch's max_seqlen_k hint (-1: the longest of --seqlens-k, as a FlashAttention caller "
                  "passes it; 0: none)");
  cmd->add_option("--page-size", s.page_size, "paged KV: rows per page (pages placed at random)");
  cmd->add_option("--splits", s.splits, "split-KV CTAs per Q tile (0: automatic, 1: none)");
  cmd->add_flag("--pack-gqa", s.pack_gqa, "pack the query heads of a KV head into one tile (sets pack_gqa, group)");
  cmd->add_option(
         "--window",
         [&s](const std::vector<std::string>& v) {
           s.window_left = window_extent(v, 0);
           s.window_right = window_extent(v, 1);
           return true;
         },
         "sliding-window extents LEFT,RIGHT (-1: unbounded)")
      ->expected(2)
      ->delimiter(',')
      ->default_str("-1,-1");
  cmd->add_option("--chunk", s.chunk, "chunk size of chunked masks");
  cmd->add_option("--mask-prefix", s.mask_prefix,
                  "keys below this visible to every query (masks with \"prefix\": true: prefix LM, sink keys)")
      ->check(CLI::Range(0, std::numeric_limits<int>::max()).description("NONNEGATIVE"));
  cmd->add_option("--softcap", s.softcap, "cap of the softcap score-mod");
  cmd->add_flag("--sinks", s.sinks, "random per-head attention sinks");
}

FA4Config one_config(const std::string& file, const std::vector<std::string>& presets, const std::string& arch,
                     const ShapeOpts* shape = nullptr) {
  FA4Config c;
  if (file.empty() && presets.empty()) {  // the main job's default: bf16 d128 causal GQA
    c.mask = Mask::causal();
  } else {
    c = load_configs(file, presets).front();
  }
  if (!arch.empty()) c.arch = arch;
  if (shape && shape->pack_gqa) {
    c.pack_gqa = true;
    c.group = shape->heads / std::max(1, shape->kv_heads);
  }
  return c;
}

// `bench --seqlens-q .. --seqlens-k ..`: a batch of packed sequences (cu_seqlens), as a serving
// engine's prefill; with --page-size the keys sit in a paged cache instead (seqused_k), as in a
// chunked prefill. Empty offsets when neither flag is given. Checked before anything is compiled.
struct PackedBatch {
  std::vector<int> cu_q, cu_k;  // batch + 1 offsets each
  int max_q = 0, max_k = 0;
  double score_pairs = 0;  // sum over sequences of Sq x Sk
  bool empty() const { return cu_q.empty(); }
  int batch() const { return static_cast<int>(cu_q.size()) - 1; }
};

PackedBatch packed_batch(const ShapeOpts& s) {
  PackedBatch p;
  if (s.seqlens_q.empty() && s.seqlens_k.empty()) return p;
  if (s.seqlens_q.size() != s.seqlens_k.size())
    throw ConfigError(
        fmt::format("bench: --seqlens-q has {} lengths and --seqlens-k {}: a varlen bench takes both, one per sequence",
                    s.seqlens_q.size(), s.seqlens_k.size()));
  p.cu_q = p.cu_k = {0};
  for (std::size_t i = 0; i < s.seqlens_q.size(); ++i) {
    const int q = s.seqlens_q[i], k = s.seqlens_k[i];
    if (q < 0 || k < 0)
      throw ConfigError(fmt::format("bench: --seqlens-q / --seqlens-k: sequence {} has length {} / {}", i, q, k));
    p.cu_q.push_back(p.cu_q.back() + q);
    p.cu_k.push_back(p.cu_k.back() + k);
    p.max_q = std::max(p.max_q, q);
    p.max_k = std::max(p.max_k, k);
    p.score_pairs += static_cast<double>(q) * k;
  }
  if (p.cu_q.back() == 0 || p.cu_k.back() == 0)
    throw ConfigError("bench: --seqlens-q / --seqlens-k: every sequence is empty");
  return p;
}

// A kernel built with --arch for another GPU: say so in the CLI's terms before launching.
void require_runs_here(const Kernel& kernel) {
  const CUdevice dev = detail::ensure_context();
  if (!detail::runs_on(kernel.config(), detail::device_sm(dev)))
    throw ConfigError(fmt::format(
        "--arch {}: its kernels do not run on this GPU ({}, {}); pass --arch {} or leave "
        "--arch out",
        kernel.config().config.arch, detail::device_name(dev), detail::device_arch(dev), detail::device_arch(dev)));
}

}  // namespace

void add_run(CLI::App& app) {
  auto* cmd = app.add_subcommand("run", "Run one attention on q, k, v from a safetensors file; write o and lse");
  struct Opts {
    std::string config, inputs, output, arch;
    float scale = 0;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--config", o->config, "JSON config file")->required();
  cmd->add_option("--inputs", o->inputs,
                  "safetensors with q, k, v in (batch, seqlen, heads, head_dim); FP8 configs: F8_E4M3 q, k, v and "
                  "optional F32 descale_q, descale_k, descale_v of shape (batch, kv_heads)")
      ->required();
  cmd->add_option("--output", o->output, "safetensors to write o and lse to")->required();
  cmd->add_option("--arch", o->arch, "target arch (default: the config's, else the GPU's)")
      ->transform(arch_validator(false));
  cmd->add_option("--scale", o->scale, "softmax scale (default 1/sqrt(head_dim))");
  cmd->callback([o] {
    FA4Config c = one_config(o->config, {}, o->arch);
    const auto in = safetensors::read(o->inputs);
    check_run_inputs(o->inputs, in, c);  // before anything is compiled
    const auto& q = in.at("q");
    const auto& k = in.at("k");
    const auto& v = in.at("v");
    if (c.depth != q.shape[3]) c.depth = static_cast<int>(q.shape[3]);
    const KernelPtr kernel = get_kernel(with_cli_arch(c), cli_resolve_options());
    require_runs_here(*kernel);
    const DType out_t = *kernel->config().config.output_dtype;
    // FP8 in, 16-bit out; O is V's width (depth_v).
    const std::size_t o_bytes = q.bytes.size() / q.shape[3] * v.shape[3] / dtype_size(c.dtype) * dtype_size(out_t);
    testing::DeviceBuffer dq(q.bytes.size()), dk(k.bytes.size()), dv(v.bytes.size()), dout(o_bytes);
    const std::size_t lse_n = static_cast<std::size_t>(q.shape[0] * q.shape[2] * q.shape[1]);
    testing::DeviceBuffer dlse(lse_n * 4);
    dq.upload(q.bytes.data(), q.bytes.size());
    dk.upload(k.bytes.data(), k.bytes.size());
    dv.upload(v.bytes.data(), v.bytes.size());
    // FP8: optional float32 [B, Hkv] descale_q / descale_k / descale_v (check_run_inputs checked them).
    testing::DeviceBuffer ddescale[3];
    const float* descale[3] = {nullptr, nullptr, nullptr};
    const char* descale_names[3] = {"descale_q", "descale_k", "descale_v"};
    for (int i = 0; i < 3; ++i)
      if (const auto it = in.find(descale_names[i]); it != in.end()) {
        ddescale[i] = testing::DeviceBuffer(it->second.bytes.size());
        ddescale[i].upload(it->second.bytes.data(), it->second.bytes.size());
        descale[i] = static_cast<const float*>(ddescale[i].get());
      }
    LaunchArgs a;
    a.q = Tensor::contiguous(dq.get(), c.dtype, q.shape[0], q.shape[1], q.shape[2], q.shape[3]);
    const DType kv_t = kv_type(c);
    a.k = Tensor::contiguous(dk.get(), kv_t, k.shape[0], k.shape[1], k.shape[2], k.shape[3]);
    a.v = Tensor::contiguous(dv.get(), kv_t, v.shape[0], v.shape[1], v.shape[2], v.shape[3]);
    a.o = Tensor::contiguous(dout.get(), out_t, q.shape[0], q.shape[1], q.shape[2], v.shape[3]);
    a.lse = static_cast<float*>(dlse.get());
    a.softmax_scale = o->scale;
    a.descale_q = descale[0];
    a.descale_k = descale[1];
    a.descale_v = descale[2];
    kernel->launch(a);
    detail::check(detail::driver().cuCtxSynchronize(), "kernel execution");
    std::map<std::string, safetensors::TensorData> out;
    out["o"] = {safetensors_dtype(out_t), q.shape, std::string(o_bytes, '\0')};
    out["lse"] = {"F32", {q.shape[0], q.shape[2], q.shape[1]}, std::string(lse_n * 4, '\0')};
    dout.download(out["o"].bytes.data(), out["o"].bytes.size());
    dlse.download(out["lse"].bytes.data(), out["lse"].bytes.size());
    safetensors::write(o->output, out);
    fmt::print("run: wrote o {} and lse to {} (kernel {}, {})\n", to_string(out_t), o->output, kernel->key(),
               kernel->origin());
  });
}

void add_check(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("check", "Run one attention on random inputs and check it against a float64 reference");
  struct Opts {
    std::string config, arch;
    std::vector<std::string> presets;
    ShapeOpts shape;
    bool require_gpu = false;
    bool no_descale = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--config", o->config, "JSON config file (default: bf16 d128 causal)");
  cmd->add_option("--preset", o->presets, "preset name");
  cmd->add_option("--arch", o->arch, "target arch (default: the config's, else the GPU's)")
      ->transform(arch_validator(false));
  cmd->add_flag("--require-gpu", o->require_gpu, "fail instead of skipping when there is no GPU");
  cmd->add_flag("--no-descale", o->no_descale,
                "FP8 configs (dtype or kv_dtype e4m3): launch without descale factors (factor 1) instead of random "
                "ones in [0.5, 2)");
  add_shape_options(cmd, o->shape);
  cmd->callback([o] {
    const FA4Config c = one_config(o->config, o->presets, o->arch, &o->shape);
    // The reference knows the built-ins only; a snippet's meaning is the caller's code.
    const std::function<bool(const Mask&)> has_custom = [&](const Mask& m) {
      return m.kind == Mask::Kind::custom || std::any_of(m.children.begin(), m.children.end(), has_custom);
    };
    if (has_custom(c.mask) || c.score_mod.kind == ScoreMod::Kind::custom)
      throw ConfigError(
          "check: custom mask / score-mod snippets have no reference semantics here; "
          "tests/gpu_variants_test.cpp and tests/gpu_features_test.cpp check snippets");
    validate_config(c);        // before the GPU check: the same answer with or without a GPU
    o->shape.seqlen_k_hint();  // refuses a bad --max-seqlen-k, GPU or not
    const std::string why = testing::gpu_unavailable_reason();
    if (!why.empty()) {
      if (o->require_gpu) throw DriverError("check needs a GPU: " + why);
      fmt::print("check: skipped, no GPU here ({})\n", why);
      return;
    }
    const KernelPtr kernel = get_kernel(c, cli_resolve_options());
    require_runs_here(*kernel);
    testing::CheckCase cc = check_case(o->shape);
    cc.descale = !o->no_descale;
    cc.latent_kv = kernel->config().v_in_k;  // MLA: V is K's prefix (one K buffer)
    const auto r = testing::run_and_check(*kernel, cc);
    const bool ok = r.passes();
    const FA4Config& kc = kernel->config().config;
    // The dtypes, and for FP8 whether descale factors were passed, then the measured errors against
    // the tolerance they are judged by.
    const std::string descaled = cc.descale ? " descale" : " no-descale";
    const std::string dtypes = kc.dtype == DType::e4m3
                                   ? fmt::format("e4m3->{}{}", to_string(*kc.output_dtype), descaled)
                               : kc.kv_dtype ? fmt::format("{} e4m3-kv{}", to_string(kc.dtype), descaled)
                                             : std::string(to_string(kc.dtype));
    fmt::print("check: {} {} {} B={} Sq={} Sk={} H={}/{} D={}{}{}{}: {} (rel_l2 tolerance {:.0e}) -> {}\n", kc.arch,
               to_string(kernel->config().backend), dtypes, cc.batch, cc.seqlen_q, cc.seqlen_k, cc.num_q_heads,
               cc.num_kv_heads, kc.depth, cc.seqlens_q.empty() ? "" : " varlen",
               cc.page_size ? fmt::format(" page {}", cc.page_size) : "", c.pack_gqa ? " packed" : "", r.describe(),
               testing::rel_l2_tolerance(r.dtype), ok ? "PASS" : "FAIL");
    if (!ok) throw Error("check failed: the kernel does not match the float64 reference");
  });
}

void add_bench(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "Time one config on random inputs (CUDA events, median)");
  struct Opts {
    std::string config, arch;
    std::vector<std::string> presets;
    ShapeOpts shape;
    int iters = 30, warmup = 5;
    bool json = false;
    bool kv_heads_major = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--config", o->config, "JSON config file");
  cmd->add_option("--preset", o->presets, "preset name");
  cmd->add_option("--arch", o->arch, "target arch (default: the config's, else the GPU's)")
      ->transform(arch_validator(false));
  cmd->add_option("--iters", o->iters, "timed launches");
  cmd->add_option("--warmup", o->warmup, "untimed launches first");
  cmd->add_flag("--json", o->json, "print one JSON object");
  cmd->add_flag("--kv-bhsd", o->kv_heads_major, "K/V stored (batch, heads, seqlen, dim) like PyTorch SDPA's inputs");
  add_shape_options(cmd, o->shape);
  cmd->callback([o] {
    using clock = std::chrono::steady_clock;
    const PackedBatch packed = packed_batch(o->shape);  // before anything is compiled
    if (!packed.empty() && o->kv_heads_major)
      throw ConfigError("bench: --kv-bhsd with --seqlens-q / --seqlens-k: packed varlen K/V are (total, heads, dim)");
    o->shape.seqlen_k_hint();  // refuses a bad --max-seqlen-k before anything is compiled
    const auto t_start = clock::now();
    const FA4Config c = one_config(o->config, o->presets, o->arch, &o->shape);
    const KernelPtr kernel = get_kernel(with_cli_arch(c), cli_resolve_options());
    const double get_kernel_ms = std::chrono::duration<double, std::milli>(clock::now() - t_start).count();
    require_runs_here(*kernel);  // creates the context, as the buffers below would before any timing
    const FA4Config& rc = kernel->config().config;
    const bool varlen = !packed.empty();
    const int B = varlen ? packed.batch() : o->shape.batch, H = o->shape.heads, Hkv = o->shape.kv_heads, D = rc.depth;
    const int Dv = value_depth(rc);  // V and O (depth_v)
    // Varlen: Sq / Sk are the longest sequences, the tensors hold the totals.
    const int Sq = varlen ? packed.max_q : o->shape.sq();
    const int Sk = varlen ? packed.max_k : o->shape.sk();
    const std::size_t rows_q = varlen ? packed.cu_q.back() : static_cast<std::size_t>(B) * Sq;
    const std::size_t rows_k = varlen ? packed.cu_k.back() : static_cast<std::size_t>(B) * Sk;
    const int page = o->shape.page_size;
    const int pages_per_seq = page ? (Sk + page - 1) / page : 0, num_pages = B * pages_per_seq;
    const std::size_t nq = rows_q * H * D;
    const std::size_t k_rows = page ? static_cast<std::size_t>(num_pages) * page : rows_k;
    const std::size_t nk = k_rows * Hkv * D, nv = k_rows * Hkv * Dv, no = rows_q * H * Dv;
    const DType kv_t = kv_type(rc);  // e4m3 for an FP8 KV cache
    const std::size_t in_size = static_cast<std::size_t>(dtype_size(rc.dtype));
    const std::size_t kv_size = static_cast<std::size_t>(dtype_size(kv_t));
    const std::size_t out_size = static_cast<std::size_t>(dtype_size(*rc.output_dtype));
    testing::DeviceBuffer dq(nq * in_size), dk(nk * kv_size), dv(nv * kv_size), dout(no * out_size),
        dlse(rows_q * H * 4);
    testing::DeviceBuffer dtable(std::max(num_pages, 1) * 4);
    std::mt19937 rng(std::random_device{}());
    if (page) {  // pages in random order, as a serving cache leaves them
      std::vector<int> table(num_pages);
      for (int i = 0; i < num_pages; ++i) table[i] = i;
      std::shuffle(table.begin(), table.end(), rng);
      dtable.upload(table.data(), table.size() * 4);
    }
    upload_random(dq, rc.dtype, rng);  // zeros run faster than real inputs
    for (auto* buf : {&dk, &dv}) upload_random(*buf, kv_t, rng);
    // FP8: descale factors as a quantised model passes them (ones: the values do not change the time).
    const bool fp8 = rc.dtype == DType::e4m3, fp8_kv = kv_t == DType::e4m3;
    testing::DeviceBuffer ddescale(static_cast<std::size_t>(B) * Hkv * 4);
    if (fp8_kv) {
      const std::vector<float> ones(static_cast<std::size_t>(B) * Hkv, 1.0f);
      ddescale.upload(ones.data(), ones.size() * 4);
    }
    LaunchArgs a;
    a.q = Tensor::contiguous(dq.get(), rc.dtype, B, Sq, H, D);
    testing::DeviceBuffer dcu_q(varlen ? (B + 1) * 4 : 4), dcu_k(varlen ? (B + 1) * 4 : 4);
    if (varlen) {  // packed (1, total, H, D) tensors, as flash_attn_varlen_func takes them
      dcu_q.upload(packed.cu_q.data(), packed.cu_q.size() * 4);
      a.q = Tensor::contiguous(dq.get(), rc.dtype, 1, static_cast<std::int64_t>(rows_q), H, D);
      a.cu_seqlens_q = static_cast<const int*>(dcu_q.get());
      a.batch = B;
      a.max_seqlen_q = Sq;
    }
    if (page) {
      a.k = Tensor::contiguous(dk.get(), kv_t, num_pages, page, Hkv, D);
      a.v = Tensor::contiguous(dv.get(), kv_t, num_pages, page, Hkv, Dv);
      a.page_table = static_cast<const int*>(dtable.get());
      a.max_pages = pages_per_seq;  // every sequence holds Sk keys: max_pages * page >= Sk
    } else if (varlen) {
      dcu_k.upload(packed.cu_k.data(), packed.cu_k.size() * 4);
      a.k = Tensor::contiguous(dk.get(), kv_t, 1, static_cast<std::int64_t>(rows_k), Hkv, D);
      a.v = Tensor::contiguous(dv.get(), kv_t, 1, static_cast<std::int64_t>(rows_k), Hkv, Dv);
      a.cu_seqlens_k = static_cast<const int*>(dcu_k.get());
    } else {
      a.k = Tensor::contiguous(dk.get(), kv_t, B, Sk, Hkv, D);
      a.v = Tensor::contiguous(dv.get(), kv_t, B, Sk, Hkv, Dv);
      if (o->kv_heads_major)  // each head's rows contiguous: (B, H, S, D) memory seen as (B, S, H, D)
        for (Tensor* t : {&a.k, &a.v}) {
          const std::int64_t d = t->shape[3];
          t->stride = {static_cast<std::int64_t>(Hkv) * Sk * d, d, static_cast<std::int64_t>(Sk) * d, 1};
        }
    }
    if (kernel->config().v_in_k) {  // MLA's latent KV: V is K's first Dv columns (the kernel reads V from K's rows)
      a.v = a.k;
      a.v.shape[3] = Dv;
    }
    testing::DeviceBuffer dused(B * 4);
    if (page && (varlen || pages_per_seq * page != Sk)) {  // keys per sequence in its pages
      const std::vector<int> used = varlen ? o->shape.seqlens_k : std::vector<int>(B, Sk);
      dused.upload(used.data(), used.size() * 4);
      a.seqused_k = static_cast<const int*>(dused.get());
    }
    a.o = Tensor::contiguous(dout.get(), *rc.output_dtype, a.q.shape[0], a.q.shape[1], H, Dv);
    a.lse = static_cast<float*>(dlse.get());
    testing::set_launch_scalars(a, check_case(o->shape));  // the scalars `check` launches with
    testing::DeviceBuffer dsinks(static_cast<std::size_t>(H) * 4);
    if (o->shape.sinks) {  // random per-head sink logits, as `check --sinks`
      std::normal_distribution<float> normal;
      std::vector<float> sinks(static_cast<std::size_t>(H));
      for (float& x : sinks) x = normal(rng);
      dsinks.upload(sinks.data(), sinks.size() * 4);
      a.sinks = static_cast<const float*>(dsinks.get());
    }
    if (fp8) a.descale_q = static_cast<const float*>(ddescale.get());
    if (fp8_kv) a.descale_k = a.descale_v = static_cast<const float*>(ddescale.get());
    // First launch includes the module load: with get_kernel it is the cost of a cold start.
    const auto t_launch = clock::now();
    kernel->launch(a);
    detail::check(detail::driver().cuCtxSynchronize(), "first launch");
    const double first_launch_ms = std::chrono::duration<double, std::milli>(clock::now() - t_launch).count();
    const double ms = testing::time_kernel_ms(*kernel, a, o->warmup, o->iters);
    const double ms_stream = testing::time_kernel_stream_ms(*kernel, a, 0, o->iters);
    const double host_us = testing::host_launch_us(*kernel, a, o->iters);
    const bool causal = rc.mask.kind == Mask::Kind::causal;
    const double pairs = varlen ? packed.score_pairs : static_cast<double>(B) * Sq * Sk;
    const double flops = 2.0 * pairs * H * (D + Dv) * (causal ? 0.5 : 1.0);
    const double tflops = flops / (ms * 1e-3) / 1e12;
    const double kv_bytes =  // K and V read once (latent KV: K's rows only): the decode roofline
        static_cast<double>(rows_k) * Hkv * (kernel->config().v_in_k ? D : D + Dv) * kv_size;
    const double kv_tbps = kv_bytes / (ms * 1e-3) / 1e12;
    nlohmann::json j = {{"arch", rc.arch},
                        {"backend", to_string(kernel->config().backend)},
                        {"dtype", to_string(rc.dtype)},
                        {"kv_dtype", to_string(kv_t)},
                        {"output_dtype", to_string(*rc.output_dtype)},
                        {"B", B},
                        {"H", H},
                        {"Hkv", Hkv},
                        {"Sq", Sq},
                        {"Sk", Sk},
                        {"D", D},
                        {"causal", causal},
                        {"mask", to_json(rc)["mask"]["kind"]},
                        {"ms", ms},
                        {"tflops", tflops},
                        {"iters", o->iters},
                        {"BN", rc.BN},
                        {"num_kv_stages", rc.num_kv_stages},
                        {"BM", rc.BM},
                        {"origin", kernel->origin()},
                        {"get_kernel_ms", get_kernel_ms},
                        {"first_launch_ms", first_launch_ms},
                        {"compile_ms", kernel->compile_ms()},
                        {"kv_TBps", kv_tbps},
                        {"page_size", page},
                        {"pack_gqa", rc.pack_gqa},
                        {"num_splits", kernel->num_splits(a)},
                        {"kv_bhsd", o->kv_heads_major},
                        {"ms_stream", ms_stream},
                        {"host_launch_us", host_us},
                        {"kv_TBps_stream", kv_bytes / (ms_stream * 1e-3) / 1e12},
                        {"varlen", varlen},
                        {"max_seqlen_k", a.max_seqlen_k},
                        {"window", {a.window_left, a.window_right}},
                        {"chunk", a.chunk_size},
                        {"mask_prefix", a.mask_prefix}};
    if (o->json)
      fmt::print("{}\n", j.dump());
    else
      fmt::print("bench: {} {} B={} H={}/{} Sq={} Sk={}{} D={} {}: {:.3f} ms, {:.1f} TFLOP/s, K+V {:.2f} TB/s\n",
                 rc.arch, to_string(kernel->config().backend), B, H, Hkv, Sq, Sk, varlen ? " (longest, varlen)" : "", D,
                 causal ? "causal" : "", ms, tflops, kv_tbps);
  });
}

}  // namespace jit::cli
