// One host-side home per backend: every choice that differs between the sm80, sm90a and sm100a
// kernel families (supported depths, derived tiles and budgets, default tuning, tile walk, TMA
// boxes, which GPUs run the cubin). generator/config.cpp resolves what is common and asks the
// backend's policy for the rest; the runtime asks it too, so it tests no Backend value itself.
#pragma once
#include <optional>
#include <vector>

#include "fa4jit/config.hpp"
#include "generator/arch.hpp"

namespace jit::detail {

// What a kernel needs from the SM: threads per CTA, dynamic shared memory, and the CTAs per SM
// its __launch_bounds__ promise.
struct Budget {
  int threads = 0;
  int smem = 0;
  int ctas_per_sm = 1;
};

class BackendPolicy {
 public:
  virtual ~BackendPolicy() = default;

  virtual Backend backend() const = 0;
  // Head dims (FA4Config::depth) this backend's templates serve.
  virtual std::vector<int> depths() const = 0;
  // V head dims (FA4Config::depth_v) other than `depth` this backend serves with Q/K head dim
  // `depth` (16-bit only); empty: V as wide as Q and K.
  virtual std::vector<int> depths_v(int /*depth*/) const { return {}; }
  // Of those (depth, depth_v) pairs, the ones an FP8 KV cache (kv_dtype e4m3) also runs.
  virtual bool kv_fp8_depth_v(int /*depth*/, int /*depth_v*/) const { return false; }
  // Latent KV (MLA's absorbed attention, ResolvedConfig::v_in_k): V is the first depth_v columns of
  // K's rows, which the kernel reads from K's stage; the launch passes v as that view of k.
  virtual bool v_in_k(const ResolvedConfig&) const { return false; }
  // Bytes of the swizzled shared-memory row the depth is padded to (in the narrower of Q's and
  // K/V's element types): 128 (SW128), unless the backend keeps narrower rows for this config.
  virtual int swizzle_row_bytes(const FA4Config&) const { return 128; }
  // Fills the tile fields left at 0 (BM, BN, BK0, stages) from the arch's budgets and
  // validates the explicit ones (ConfigError naming the field). `dp`: the padded depth.
  virtual Budget derive(FA4Config& c, int dp, const ArchInfo& arch) const = 0;
  // Rows of one TMA box of a consumer's Q (and O) tile; 0 when Q does not come through TMA.
  // Packed GQA: the span of PackedRow (templates/common/packed_rows.h): a box holds the whole
  // (query, head) row sets that fit, the rest of the span is padding.
  virtual int q_box_rows(const FA4Config& c) const = 0;
  // The measured per-arch scheduling defaults before any override (Tuning's comments), for the
  // budget derive() gave the tile (some defaults are its CTAs per SM's).
  virtual Tuning default_tuning(const FA4Config& c, int dp, const Budget& b) const = 0;
  // After the overrides: the tuning this backend can run, and the budget that tuning takes
  // (tile walks that change the shared memory or CTAs per SM).
  virtual void settle(Tuning& t, Budget& b, const FA4Config& c, int dp, const ArchInfo& arch) const = 0;
  // Whether Q, K, V come through TMA descriptors built at launch.
  virtual bool uses_tma() const = 0;
  // Whether masked launches may reorder CTAs longest-first.
  virtual bool lpt_order() const = 0;
  // Whether the grid walk's varlen launches list every sequence's Q tiles in grid x instead of
  // sizing each sequence by the longest (FwdParams::varlen_tiles; TileWork::locate_varlen, whose
  // warp scan needs the CTA's work built by converged warps).
  virtual bool lists_varlen_tiles() const { return false; }
  // Whether the kernel's Q tiles end at the last query row (a partial tile first, not last):
  // emitted as Config::kBottomTiles (templates/sm90a/shape.cuh), and the host's model of tile costs.
  virtual bool bottom_q_tiles(const FA4Config&) const { return false; }
  // Whether a cubin built for `rc` runs on a device of compute capability `sm` (major*10 + minor).
  virtual bool runs_on(const ResolvedConfig& rc, int sm) const = 0;
  // Rows of one K/V load box for a paged launch with `page_size` rows per page, or 0 where the
  // kernel gathers the rows itself (sm90a: cp.async, FwdParams::kv_box_rows 0); LaunchError when
  // this backend cannot load such pages. Unpaged launches load BN rows.
  virtual int paged_kv_box_rows(const ResolvedConfig& rc, long long page_size) const = 0;
  // sm90a: S = Q K^T with Q in registers (Config::kQInRegs).
  virtual bool q_in_registers(const ResolvedConfig&) const { return false; }
  // The BM of a launch's kernel where this backend runs a tile of its own beside its default (0:
  // the default). `c`: the config as choose_kernel leaves it (pack_gqa and group decided, BM 0);
  // `f`: the launch; never_packs: the launch's group is one no backend packs (MHA, or a prime group
  // above 64), so its decode rows run unpacked.
  virtual int launch_bm(const FA4Config& /*c*/, const LaunchFacts& /*f*/, bool /*never_packs*/) const { return 0; }
  // This backend's own answer to whether a launch packs GQA, where it was measured to differ from
  // the automatic rule (kernel_choice.cpp auto_pack) at a tile of its own (launch_bm then picks
  // it); nullopt: the rule's. `c`: the config as choose_kernel receives it (BM 0).
  virtual std::optional<bool> packs(const FA4Config& /*c*/, const LaunchFacts& /*f*/) const { return std::nullopt; }
};

// V's and O's padded depth: `dp` (Q's and K's), or for a narrower 16-bit V its depth in whole
// 64-element (128-byte) rows.
inline int padded_depth_v(const FA4Config& c, int dp) { return c.depth_v == 0 ? dp : (c.depth_v + 63) / 64 * 64; }

// The policy of a backend (one static instance each).
const BackendPolicy& policy(Backend b);
inline const BackendPolicy& policy(const ResolvedConfig& rc) { return policy(rc.backend); }

// Packed GQA (FA4Config::pack_gqa): the query heads one CTA packs, 1 when unpacked. The group when
// it fits a Q box of `span` rows (span 0: no box, any group), else the largest divisor of the group
// that does: the group's heads run as equal slices, one CTA (and one K/V read) each. 1 means the
// group cannot be sliced (a prime above the span); resolve() refuses that.
int pack_heads(const FA4Config& c, int span);
// The same for a resolved config, and PackedRow's span (templates/common/packed_rows.h) of its backend.
inline int pack_span(const ResolvedConfig& rc) { return rc.config.pack_gqa ? policy(rc).q_box_rows(rc.config) : 0; }
inline int pack_heads(const ResolvedConfig& rc) { return pack_heads(rc.config, pack_span(rc)); }

// Shared by the policies: an explicit value validated against `allowed`, or the derived default.
int pick(const char* field, int explicit_value, int derived, const std::vector<int>& allowed);
[[noreturn]] void refuse(const char* field, const std::string& value, const std::string& allowed);

// The TMA backends' paged rule: pages load by boxes of gcd(page_size, BN) rows, a multiple of 8
// (whole swizzle periods); other page sizes are gathered (0), or refused where the kernel loads
// pages by TMA only (tma_only: why, for the error).
int tma_paged_kv_box_rows(const ResolvedConfig& rc, long long page_size, const char* tma_only);

const BackendPolicy& sm80_policy();
const BackendPolicy& sm90a_policy();
const BackendPolicy& sm100a_policy();

}  // namespace jit::detail
