// Advanced: the resolved form of an FA4Config and the per-arch tuning behind it.
//
// Most users need only fa4jit/config.hpp and fa4jit/jit.hpp: a config goes in, a kernel comes out.
// This header is for tools and experiments that look inside: which backend serves an arch, the
// tiles and budgets resolve() derived (Kernel::config() returns them), and the scheduling choices
// (Tuning) with the overrides a tuning sweep passes to resolve() and get_kernel(). These are the
// generator's internals made visible: they change with the kernels, more freely than FA4Config.
#pragma once
#include <optional>
#include <string>

#include "fa4jit/config.hpp"
#include "fa4jit/export.hpp"

namespace jit {

// Which kernel family serves an arch: sm_90a -> hopper, sm_100a/sm_100f/sm_103a -> blackwell,
// every other arch (sm_80 ... sm_120, plain sm_90) -> portable.
enum class Backend { portable, hopper, blackwell };
FA4JIT_API const char* to_string(Backend b);

// Per-arch scheduling choices derived with the config. They are emitted into the generated
// source, so they are part of the cache key. TuningOverrides replace them for tuning sweeps
// (bench/, the CLI's FA4JIT_TUNE); the names are the fields below.
struct Tuning {
  int exp2_emulate_every = 0;  // 0: every exp2 on MUFU; n: one f32 pair in n by FA4's polynomial
  int intra_wg_overlap = 1;    // sm90a: issue QK(n+1) before softmax(n)
  int pingpong = 1;            // sm90a: consumer warpgroup turns: 0 none, 1 around the GEMMs, 2 around the softmax
  int wg_spans = 0;  // sm90a: a consumer warpgroup's P V skips the keys its rows cannot see (default: causal at BM 192)
  // sm90a: 0 grid of one CTA per Q tile (and KV split); 1 one CTA per SM walking the (tile, KV
  // split) pairs (LPT order if masked; packed GQA takes 2); 2 stream-K: one CTA per SM, each
  // streaming an equal share of all tiles' KV tiles. Default: 1 for unpacked unmasked or causal
  // attention without a score-mod at padded depth <= 128, and for 16-bit head dim 128 with a sliding
  // window and / or ALiBi; else 0 (generator/backends/sm90a.cpp); 2 is opt-in.
  int persistent = 0;
  // 1: compile with -lineinfo (source lines for Nsight Compute, `tools/gpu.sh profile`). Off by
  // default: the same SASS, but the cubin carries its PTX and line tables (3-4x the bytes in the
  // cache and the bundles) and NVRTC takes ~5% longer.
  int line_info = 0;
  // sm90a, O split over two warpgroups (V 512: MLA's latent, head dim 512), 16-bit K/V: 1 the two
  // take turns computing S = Q K^T and the softmax, a KV tile each (FlashMLA's schedule; the
  // default for head dim 512 without packed GQA); 0 the first computes every S and the second
  // follows its P (MLA's default).
  int alternate_s = 0;
  // sm90a, MLA's 16-bit latent (one S warpgroup): each K stage lands in this many parts (1, 3 or 9
  // of its nine 64-column blocks), each on its own barrier, and S = Q K^T issues a part's steps once
  // it landed (FlashMLA's fine-grained TMA / GEMM pipelining); 1: the stage whole. Derived: 3 for
  // MLA's latent (1 under alternate_s or an e4m3 cache), 1 elsewhere.
  int k_parts = 1;
  bool operator==(const Tuning& o) const {
    return exp2_emulate_every == o.exp2_emulate_every && intra_wg_overlap == o.intra_wg_overlap &&
           pingpong == o.pingpong && wg_spans == o.wg_spans && persistent == o.persistent && line_info == o.line_info &&
           alternate_s == o.alternate_s && k_parts == o.k_parts;
  }
  bool operator!=(const Tuning& o) const { return !(*this == o); }
};

// Tuning fields to set instead of the derived defaults (unset: derived).
struct TuningOverrides {
  std::optional<int> exp2_emulate_every, intra_wg_overlap, pingpong, wg_spans, persistent, line_info, alternate_s,
      k_parts;
  bool empty() const {
    return !exp2_emulate_every && !intra_wg_overlap && !pingpong && !wg_spans && !persistent && !line_info &&
           !alternate_s && !k_parts;
  }
  bool operator==(const TuningOverrides& o) const {
    return exp2_emulate_every == o.exp2_emulate_every && intra_wg_overlap == o.intra_wg_overlap &&
           pingpong == o.pingpong && wg_spans == o.wg_spans && persistent == o.persistent && line_info == o.line_info &&
           alternate_s == o.alternate_s && k_parts == o.k_parts;
  }
  bool operator!=(const TuningOverrides& o) const { return !(*this == o); }
};

// "exp2_emulate_every=4,pingpong=0" (the FA4JIT_TUNE syntax; empty: none) -> overrides. Throws
// ConfigError naming the item; `origin` starts the message (e.g. "FA4JIT_TUNE").
FA4JIT_API TuningOverrides parse_tune(const std::string& text, const std::string& origin = "tune");
// The overrides in parse_tune's syntax, fields in declaration order ("" when none).
FA4JIT_API std::string to_string(const TuningOverrides& t);

// Inputs of resolve() beyond the config. Nothing is read from the environment.
struct ResolveOptions {
  TuningOverrides tune;
};

// How a launch walks the (Q tile, KV split) work: one CTA per unit, one CTA per SM walking the
// units (longest first when masked), stream-K shares of all KV tiles, or one CTA per SM taking the
// persistent walk's units from a counter as it frees up (sm90a's walkers).
enum class TileWalk { grid, persistent, stream_k, dynamic };

// A config with every field decided, plus the numbers the launch needs.
struct ResolvedConfig {
  FA4Config config;  // all fields set
  Tuning tuning;
  Backend backend;
  int sm = 0;              // 80, 86, 89, 90, 100, 103, 120, ...
  int padded_depth = 0;    // depth rounded up to whole swizzle rows (64 bf16/fp16, 128 e4m3; sm_90a e4m3 d64: 64)
  int padded_depth_v = 0;  // V / O's: padded_depth, or value_depth rounded up to 64 (16-bit only)
  int num_threads = 0;
  int smem_bytes = 0;
  int ctas_per_sm = 1;  // __launch_bounds__ minimum blocks: 2 (decode), 3 (sm_90a's small-window tile) share an SM
  TileWalk walk = TileWalk::grid;
  bool uses_tma = false;   // Q, K, V tiles come through TMA descriptors built at launch
  bool lpt_order = false;  // masked launches may reorder CTAs longest-first (sm80 keeps grid order)
  // Latent KV (MLA's absorbed decode, sm_90a depth 576 / depth_v 512): V is K's first depth_v
  // columns, read from K's rows; the launch's v must be that view of k (same data and strides).
  bool v_in_k = false;
};

// What the automatic kernel choice reads of a launch (choose_kernel): what a config does not hold.
struct LaunchFacts {
  int group = 1;                 // query heads per KV head
  int max_seqlen_q = 0;          // queries per sequence (varlen: the longest, max_seqlen_q)
  int varlen_batch = 0;          // sequences of a varlen launch; 0: not varlen
  long long total_q = 0;         // varlen: the queries of all sequences
  std::optional<bool> pack_gqa;  // the caller's choice; unset: automatic
  // The keys one query sees at most under a sliding-window mask bounded on both sides
  // (window_left + window_right + 1, plus a mask_prefix); 0: no such bound.
  int window_keys = 0;
};

// The automatic choice of a launch's kernel: `config` with pack_gqa and group set (packed GQA for
// decode and speculative rows, and for varlen batches of uneven or short query lengths; a group
// that no backend packs stays unpacked), and, where config.BM is 0 and config.arch's backend runs
// a tile of its own for such a launch (sm_90a: generator/backends/sm90a.cpp launch_bm), that BM;
// with BM 0 a backend may answer for itself where its own tile was measured faster (sm90a.cpp packs).
// config.arch empty: no arch's own tile. Pure: the Python ops and `prewarm --model` choose
// through it, so a prewarmed server compiles nothing. ConfigError for a group or length below 0/1
// (window_keys below 0).
FA4JIT_API FA4Config choose_kernel(FA4Config config, const LaunchFacts& facts);

// Fills defaults for cfg.arch (which must be set), applies options.tune, and validates; throws
// ConfigError naming the field, the value and what is allowed. Pure: the same inputs give the
// same result in every process.
FA4JIT_API ResolvedConfig resolve(const FA4Config& cfg, const ResolveOptions& options = {});

}  // namespace jit
