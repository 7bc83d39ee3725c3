// FA4Config: everything that shapes one attention kernel binary.
// Fields left at 0 / unset are derived per target arch from the hardware budgets
// (shared memory, TMEM, registers); explicit values are validated (jit::ConfigError).
// The resolved form (every field decided, per-arch tuning, launch numbers) and the tuning
// overrides are in fa4jit/advanced.hpp.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "fa4jit/export.hpp"

namespace jit {

// e4m3: float8 e4m3 ("float8_e4m3fn": no infinities, max 448) for Q, K, V, with float32 descale
// factors per (batch, KV head) at launch (LaunchArgs::descale_q/k/v); O is then bf16 or fp16.
enum class DType { bf16, fp16, e4m3 };

FA4JIT_API const char* to_string(DType t);
FA4JIT_API DType dtype_from_string(const std::string& s);  // "bf16" | "fp16" | "e4m3"; ConfigError otherwise
FA4JIT_API int dtype_size(DType t);                        // bytes per element: 2, 2, 1
struct FA4Config;
FA4JIT_API DType kv_type(const FA4Config& c);    // the K/V storage type: kv_dtype where set, else dtype
FA4JIT_API int value_depth(const FA4Config& c);  // the V / O head dim: depth_v where set, else depth

// Which attention pattern a kernel computes. Window sizes and chunk sizes are launch
// arguments (LaunchArgs), so one binary serves every value.
struct FA4JIT_API Mask {
  enum class Kind { none, causal, sliding_window, chunked, custom, all_of, any_of };
  Kind kind = Kind::none;
  bool top_left = false;       // causal-style alignment when Sq != Sk (default: bottom-right)
  std::string snippet;         // custom: body over (b, h, q_idx, kv_idx) returning bool
  std::vector<Mask> children;  // all_of / any_of
  // custom, optional: body over (b, h, q_lo, q_hi, kv_lo, kv_hi) (half-open ranges of one tile)
  // returning SKIP (no key visible), FULL (every key visible) or PARTIAL (unknown), so sparse
  // masks skip tiles. A wrong claim gives wrong results, like a wrong snippet. See also
  // LaunchArgs::block_mask for a run-time block mask.
  std::string block_snippet;
  // causal / sliding_window: keys [0, LaunchArgs::mask_prefix) are visible to every query too (prefix
  // LM's bidirectional prefix; a window's sink tokens). Off: the plain band, whatever mask_prefix is.
  bool prefix = false;

  static Mask none() { return {}; }
  static Mask causal(bool top_left = false);
  static Mask sliding_window(bool top_left = false);  // extents: LaunchArgs::window_left/right
  static Mask chunked();                              // size: LaunchArgs::chunk_size
  static Mask custom(std::string body, std::string block_body = {});
  static Mask all_of(std::vector<Mask> masks);  // visible iff every mask sees the key
  static Mask any_of(std::vector<Mask> masks);  // visible iff some mask sees the key
  // Written out (not defaulted) so the header stays C++17; compares every field.
  bool operator==(const Mask& o) const {
    return kind == o.kind && top_left == o.top_left && snippet == o.snippet && children == o.children &&
           block_snippet == o.block_snippet && prefix == o.prefix;
  }
  bool operator!=(const Mask& o) const { return !(*this == o); }
};

// Applied to score = softmax_scale * q.k before the softmax.
struct FA4JIT_API ScoreMod {
  enum class Kind { identity, softcap, alibi, custom };
  Kind kind = Kind::identity;
  std::string snippet;  // custom: body over (score, b, h, q_idx, kv_idx) returning float

  static ScoreMod identity() { return {}; }
  static ScoreMod softcap();  // cap: LaunchArgs::softcap
  static ScoreMod alibi();    // slopes: LaunchArgs::alibi_slopes, or the standard ones
  static ScoreMod custom(std::string body);
  bool operator==(const ScoreMod& o) const { return kind == o.kind && snippet == o.snippet; }
  bool operator!=(const ScoreMod& o) const { return !(*this == o); }
};

struct FA4Config {
  DType dtype = DType::bf16;          // Q (and K, V unless kv_dtype says otherwise)
  std::optional<DType> output_dtype;  // O (bf16 or fp16); unset: dtype, or bf16 when dtype is e4m3
  // K, V in memory; unset: dtype. e4m3 with a bf16/fp16 dtype is an FP8 KV cache: the kernel reads
  // e4m3 K/V (LaunchArgs::descale_k/v per (batch, KV head)) and computes in dtype.
  std::optional<DType> kv_dtype;
  int depth = 128;  // head dim of Q and K
  // Head dim of V and O; 0 (or depth): depth. Narrower than depth for DeepSeek-V3-style prefill
  // (Q/K 192, V 128); the backend lists the pairs it serves (docs/CONFIG.md).
  int depth_v = 0;
  int BM = 0, BN = 0, BK0 = 0;  // Q rows per CTA, K/V rows per tile, Q.K^T depth chunk
  int num_q_heads = 0;          // 0: any (checked at launch when set)
  int group = 0;                // num_q_heads / num_kv_heads; 0: any
  int num_kv_stages = 0, num_qk_stages = 0;
  std::string arch;  // "sm_90a", "sm_100a", "sm_80", ...; empty: current GPU
  Mask mask;
  ScoreMod score_mod;
  // Pack the `group` query heads of one KV head into one Q tile (tile row r = query r / group of
  // head r % group), so one K/V read serves the group: for decode and short Sq with GQA.
  // Needs group > 0; tile rows count queries x group, so long prefill is better unpacked.
  bool pack_gqa = false;

  // Every field (a new field must be added here; tests/public_api_test.cpp checks each one).
  bool operator==(const FA4Config& o) const {
    return dtype == o.dtype && output_dtype == o.output_dtype && kv_dtype == o.kv_dtype && depth == o.depth &&
           depth_v == o.depth_v && BM == o.BM && BN == o.BN && BK0 == o.BK0 && num_q_heads == o.num_q_heads &&
           group == o.group && num_kv_stages == o.num_kv_stages && num_qk_stages == o.num_qk_stages && arch == o.arch &&
           mask == o.mask && score_mod == o.score_mod && pack_gqa == o.pack_gqa;
  }
  bool operator!=(const FA4Config& o) const { return !(*this == o); }
};

// Whether cfg resolves for its arch (jit::resolve in fa4jit/advanced.hpp); when not and `why` is set,
// the ConfigError's explanation.
FA4JIT_API bool supported(const FA4Config& cfg, std::string* why = nullptr);

// Archs NVRTC can target here, as accepted in FA4Config::arch.
FA4JIT_API std::vector<std::string> supported_archs();

// JSON round trip (schema in docs/CONFIG.md). from_json rejects unknown fields.
FA4JIT_API nlohmann::json to_json(const FA4Config& cfg);
FA4JIT_API FA4Config config_from_json(const nlohmann::json& j);

}  // namespace jit
