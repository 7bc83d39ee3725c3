#include "generator/key.hpp"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "generator/source.hpp"

namespace jit::detail {

namespace {

// Streaming XXH3-128 over length-prefixed fields, so ("ab","c") and ("a","bc") differ.
class Hasher {
 public:
  Hasher() { XXH3_128bits_reset(state_); }
  ~Hasher() { XXH3_freeState(state_); }
  Hasher(const Hasher&) = delete;
  Hasher& operator=(const Hasher&) = delete;
  Hasher& add(std::string_view s) {
    const std::uint64_t n = s.size();
    XXH3_128bits_update(state_, &n, sizeof(n));
    XXH3_128bits_update(state_, s.data(), s.size());
    return *this;
  }
  std::string hex() const {
    const XXH128_hash_t h = XXH3_128bits_digest(state_);
    return fmt::format("{:016x}{:016x}", h.high64, h.low64);
  }

 private:
  XXH3_state_t* state_ = XXH3_createState();
};

}  // namespace

CompileInputs compile_inputs(ResolvedConfig config, std::string nvrtc_version, TuningOverrides tune) {
  CompileInputs in;
  in.config = std::move(config);
  in.tune = std::move(tune);
  in.source = render_source(in.config);
  in.headers = template_headers(in.config.backend);
  in.options = nvrtc_options(in.config);
  in.nvrtc_version = std::move(nvrtc_version);

  static const std::string digests[] = {compute_template_digest(*template_headers(Backend::portable)),
                                        compute_template_digest(*template_headers(Backend::hopper)),
                                        compute_template_digest(*template_headers(Backend::blackwell))};
  in.template_digest = digests[static_cast<int>(in.config.backend)];
  in.key = compute_key(in);
  return in;
}

std::vector<std::string> CompileInputs::compile_options() const {
  std::vector<std::string> all = options;
  for (std::string& o : entry_name_options(key)) all.push_back(std::move(o));
  return all;
}

std::string compute_template_digest(const Headers& headers) {
  Hasher h;
  for (const auto& [name, bytes] : headers) h.add(name).add(bytes);
  return h.hex();
}

std::string hash_key_inputs(std::string_view family, std::string_view template_digest, std::string_view source,
                            std::string_view nvrtc_version, const std::vector<std::string>& options) {
  Hasher key;
  key.add(family).add(std::to_string(kCacheSchema)).add(kGeneratorVersion);
  key.add(template_digest).add(source).add(nvrtc_version);
  for (const std::string& o : options) key.add(o);
  return key.hex();
}

std::string compute_key(const CompileInputs& in) {
  return hash_key_inputs("fa4jit-cache-key", in.template_digest, in.source, in.nvrtc_version, in.options);
}

nlohmann::json describe(const CompileInputs& in) {
  return {{"key", in.key},
          {"schema", kCacheSchema},
          {"generator", kGeneratorVersion},
          {"config", to_json(in.config.config)},
          {"tune", to_string(in.tune)},
          {"backend", to_string(in.config.backend)},
          {"arch", in.config.config.arch},
          {"template_digest", in.template_digest},
          {"nvrtc", in.nvrtc_version},
          {"options", in.options}};
}

}  // namespace jit::detail
