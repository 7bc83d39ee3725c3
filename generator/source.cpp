#include "generator/source.hpp"

#include <algorithm>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "generator/backends/backend.hpp"
#include "generator/embedded.hpp"

namespace jit::detail {

namespace {

const char* backend_dir(Backend b) { return to_string(b); }  // "sm80", "sm90a", "sm100a"

const char* element_type(DType t) {
  switch (t) {
    case DType::bf16: return "fa4::bf16_t";
    case DType::fp16: return "fa4::half_t";
    case DType::e4m3: return "fa4::e4m3_t";
  }
  return "?";
}

// Counts lines as it writes, so snippets can be bracketed with exact #line directives:
// NVRTC then reports an error inside a snippet at the snippet's own line number.
class SourceWriter {
 public:
  void line(const std::string& s) {
    out_ << s << '\n';
    ++lines_;
  }
  void snippet(const std::string& file, const std::string& body) {
    line(fmt::format("#line 1 \"{}\"", file));
    std::string text = body;
    if (text.empty() || text.back() != '\n') text += '\n';
    out_ << text;
    lines_ += static_cast<int>(std::count(text.begin(), text.end(), '\n'));
    line(fmt::format("#line {} \"{}\"", lines_ + 2, kSourceName));  // the line after this one
  }
  std::string str() const { return out_.str(); }

 private:
  std::ostringstream out_;
  int lines_ = 0;
};

// Emits user mask structs (depth-first) and returns the C++ type of the mask tree.
std::string emit_mask(SourceWriter& w, const Mask& m, int& counter) {
  switch (m.kind) {
    case Mask::Kind::none: return "fa4::mask::None";
    case Mask::Kind::causal: return m.prefix ? "fa4::mask::Prefixed<fa4::mask::Causal>" : "fa4::mask::Causal";
    case Mask::Kind::sliding_window:
      return m.prefix ? "fa4::mask::Prefixed<fa4::mask::SlidingWindow>" : "fa4::mask::SlidingWindow";
    case Mask::Kind::chunked: return "fa4::mask::Chunked";
    case Mask::Kind::custom: {
      // The user's struct carries the snippets; fa4::mask::Custom adds the tile classification.
      const int id = counter++;
      const std::string name = fmt::format("UserMask{}", id);
      w.line(fmt::format("struct {} {{", name));
      w.line("  __device__ __forceinline__ static bool eval(int b, int h, int q_idx, int kv_idx,");
      w.line("                                              const fa4::FwdParams& params) {");
      w.line("    const void* const* aux = params.aux_ptr; const float* scalars = params.aux_scalar;");
      w.line("    (void)b; (void)h; (void)q_idx; (void)kv_idx; (void)aux; (void)scalars;");
      w.snippet(id == 0 ? "mask" : fmt::format("mask{}", id), m.snippet);
      w.line("  }");
      w.line("  __device__ __forceinline__ static int block(int b, int h, int q_lo, int q_hi, int kv_lo, int kv_hi,");
      w.line("                                             const fa4::FwdParams& params) {");
      w.line("    const void* const* aux = params.aux_ptr; const float* scalars = params.aux_scalar;");
      w.line("    constexpr int SKIP = fa4::mask::kSkip, FULL = fa4::mask::kFull, PARTIAL = fa4::mask::kPartial;");
      w.line("    (void)b; (void)h; (void)q_lo; (void)q_hi; (void)kv_lo; (void)kv_hi; (void)aux; (void)scalars;");
      w.line("    (void)SKIP; (void)FULL;");
      if (m.block_snippet.find_first_not_of(" \t\r\n") == std::string::npos)
        w.line("    return PARTIAL;");
      else
        w.snippet(id == 0 ? "block_mask" : fmt::format("block_mask{}", id), m.block_snippet);
      w.line("  }");
      w.line("};");
      return fmt::format("fa4::mask::Custom<{}>", name);
    }
    case Mask::Kind::all_of:
    case Mask::Kind::any_of: {
      const char* op = m.kind == Mask::Kind::all_of ? "fa4::mask::And" : "fa4::mask::Or";
      std::vector<std::string> types;
      for (const Mask& c : m.children) types.push_back(emit_mask(w, c, counter));
      std::string t = types.back();
      for (int i = static_cast<int>(types.size()) - 2; i >= 0; --i) t = fmt::format("{}<{}, {}>", op, types[i], t);
      return t;
    }
  }
  return "fa4::mask::None";
}

std::string emit_score_mod(SourceWriter& w, const ScoreMod& s) {
  switch (s.kind) {
    case ScoreMod::Kind::identity: return "fa4::score_mod::Identity";
    case ScoreMod::Kind::softcap: return "fa4::score_mod::Softcap";
    case ScoreMod::Kind::alibi: return "fa4::score_mod::Alibi";
    case ScoreMod::Kind::custom:
      // The user's struct carries the snippet; fa4::score_mod::Custom keeps it inside the sequence.
      w.line("struct UserScoreMod {");
      w.line("  __device__ __forceinline__ static float eval(float score, int b, int h, int q_idx, int kv_idx,");
      w.line("                                               const fa4::FwdParams& params) {");
      w.line("    const void* const* aux = params.aux_ptr; const float* scalars = params.aux_scalar;");
      w.line("    (void)b; (void)h; (void)q_idx; (void)kv_idx; (void)aux; (void)scalars;");
      w.snippet("score_mod", s.snippet);
      w.line("  }");
      w.line("};");
      return "fa4::score_mod::Custom<UserScoreMod>";
  }
  return "fa4::score_mod::Identity";
}

}  // namespace

std::string render_mask_decls(const Mask& m, std::string* type) {
  SourceWriter w;
  int counter = 0;
  *type = emit_mask(w, m, counter);
  return w.str();
}

int mask_flags(const Mask& m) {
  if (m.top_left) return 1;
  for (const Mask& c : m.children)
    if (mask_flags(c)) return 1;
  return 0;
}

std::string render_source(const ResolvedConfig& rc) {
  const FA4Config& c = rc.config;
  const bool tma = rc.backend != Backend::portable;
  SourceWriter w;
  w.line(fmt::format("// Generated by fa4jit ({}). Backend {}, arch {}. Compile with -DFA4JIT_FWD_NAME=<name>.",
                     kGeneratorVersion, to_string(rc.backend), c.arch));
  w.line(fmt::format("// config: {}", to_json(c).dump()));
  for (const char* h : {"prelude", "sequence", "mask", "score_mod", "softmax", "combine"})
    w.line(fmt::format("#include \"common/{}.cuh\"", h));
  w.line("namespace fa4 {");
  w.line("namespace gen {");
  w.line("struct Config {");
  w.line(fmt::format("  using Element = {};", element_type(c.dtype)));
  w.line(fmt::format("  using OutElement = {};", element_type(*c.output_dtype)));
  // K/V storage: e4m3 for an FP8 KV cache under a 16-bit Element, else Element.
  w.line(fmt::format("  using KVElement = {};", element_type(kv_type(c))));
  // Every member, for every backend: the templates read them without detecting absent ones.
  const int pack = detail::pack_heads(rc);
  const std::pair<const char*, int> constants[] = {
      {"kDepth", c.depth},
      {"kPaddedDepth", rc.padded_depth},
      {"kDepthV", value_depth(c)},  // V and O (FA4Config::depth_v)
      {"kPaddedDepthV", rc.padded_depth_v},
      {"kBM", c.BM},
      {"kBN", c.BN},
      {"kBK0", c.BK0},
      {"kNumKVStages", c.num_kv_stages},
      {"kNumQKStages", c.num_qk_stages},
      {"kSwizzleBytes",
       detail::policy(rc).swizzle_row_bytes(c)},  // Q/K/V smem rows and TMA boxes (128; sm90a e4m3 d64: 64)
      {"kNumThreads", rc.num_threads},
      {"kSmemBytes", rc.smem_bytes},
      {"kArch", rc.sm},
      {"kExp2EmulateEvery", rc.tuning.exp2_emulate_every},
      {"kIntraWGOverlap", rc.tuning.intra_wg_overlap},
      {"kPingPong", rc.tuning.pingpong},
      {"kWgSpans", rc.tuning.wg_spans},
      {"kPersistent", rc.tuning.persistent},
      {"kAlternateS", rc.tuning.alternate_s},                  // sm90a: O-split warpgroups take turns computing S
      {"kKParts", rc.tuning.k_parts},                          // sm90a: MLA's K stages land in parts
      {"kPack", pack},                                         // GQA packing: query heads per CTA (PackedRow)
      {"kBottomTiles", detail::policy(rc).bottom_q_tiles(c)},  // Q tiles end at the last row (sm90a)
      {"kCtasPerSm", rc.ctas_per_sm},
      {"kQInRegs", detail::policy(rc).q_in_registers(rc)},  // S = Q K^T takes Q from registers (sm90a)
      // Groups packed in slices (detail::pack_heads below the group): the slices of a group, else 1.
      {"kPackSlices", c.pack_gqa && pack > 1 && pack < c.group ? c.group / pack : 1},
  };
  for (const auto& [name, value] : constants) w.line(fmt::format("  static constexpr int {} = {};", name, value));
  w.line("};");
  int counter = 0;
  const std::string mask_type = emit_mask(w, c.mask, counter);
  const std::string score_mod_type = emit_score_mod(w, c.score_mod);
  w.line(fmt::format("using Mask = {};", mask_type));
  w.line(fmt::format("using ScoreMod = {};", score_mod_type));
  w.line("}  // namespace gen");
  w.line("}  // namespace fa4");
  w.line(fmt::format("#include \"{}/kernel.cuh\"", backend_dir(rc.backend)));
  // Kernel names: key-derived, given as -D options (entry_name_options). No #ifndef fallback
  // here: extra lines would shift the line info of everything below.
  w.line("extern \"C\" __global__ void __launch_bounds__(fa4::gen::Config::kNumThreads, fa4::gen::Config::kCtasPerSm)");
  w.line(fmt::format("FA4JIT_FWD_NAME(const __grid_constant__ fa4::FwdParams params{}) {{",
                     tma ? ", const __grid_constant__ fa4::TmaDescs tma" : ""));
  w.line("  fa4::launch_dependents();  // a split launch's combine may start (common/prelude.cuh)");
  w.line(fmt::format("  fa4::{}::attention_fwd<fa4::gen::Config, fa4::gen::Mask, fa4::gen::ScoreMod>(params{});",
                     backend_dir(rc.backend), tma ? ", tma" : ""));
  w.line("}");
  // Split-KV launches merge the partials with a combine kernel compiled on its own (combine.hpp).
  return w.str();
}

namespace {

std::shared_ptr<const Headers> collect_headers(Backend backend) {
  const std::string own = std::string(backend_dir(backend)) + "/";
  auto out = std::make_shared<Headers>();
  for (const EmbeddedFile& f : embedded_templates()) {
    if (f.path.starts_with("common/") || f.path.starts_with(own))
      out->emplace_back(std::string(f.path), std::string(f.bytes));
  }
  return out;  // embedded_templates() is sorted
}

}  // namespace

const std::shared_ptr<const Headers>& template_headers(Backend backend) {
  static const std::shared_ptr<const Headers> all[] = {
      collect_headers(Backend::portable), collect_headers(Backend::hopper), collect_headers(Backend::blackwell)};
  return all[static_cast<int>(backend)];
}

std::string entry_name(std::string_view key) { return fmt::format("{}_{}", kEntryName, key.substr(0, 16)); }

std::string combine_entry_name(std::string_view key) {
  return fmt::format("{}_{}", kCombineEntryName, key.substr(0, 16));
}

std::vector<std::string> entry_name_options(std::string_view key) { return {"-DFA4JIT_FWD_NAME=" + entry_name(key)}; }

std::vector<std::string> nvrtc_options(const ResolvedConfig& rc) {
  std::vector<std::string> o = {"--gpu-architecture=" + rc.config.arch,
                                "-std=c++17",
                                "-default-device",
                                "--use_fast_math",
                                "-DNDEBUG",
                                "-Xptxas=-v"};
  if (rc.tuning.line_info) o.push_back("-lineinfo");  // Tuning::line_info: profiling builds only
  return o;
}

}  // namespace jit::detail
