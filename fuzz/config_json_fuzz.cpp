// libFuzzer: config JSON text through everything a prewarm file goes through before NVRTC: the
// bounded parse, the strict field reader, the structure and snippet checks, resolve() for one
// arch of each backend and the source renderer. Accepted configs must round-trip through to_json.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "fa4jit/advanced.hpp"
#include "fa4jit/errors.hpp"
#include "generator/bounded_json.hpp"
#include "generator/limits.hpp"
#include "generator/source.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  nlohmann::json j;
  try {
    j = jit::detail::parse_bounded_json(text, jit::detail::kMaxConfigBytes, jit::detail::kMaxJsonDepth);
  } catch (const std::exception&) {
    return 0;  // malformed or over a limit: refused before any config code runs
  }
  jit::FA4Config c;
  try {
    c = jit::config_from_json(j);
  } catch (const jit::ConfigError&) {
    return 0;  // any other exception type escapes and is reported as a crash
  }
  if (!(jit::config_from_json(jit::to_json(c)) == c)) __builtin_trap();
  for (const char* arch : {"sm_80", "sm_90a", "sm_100a"}) {
    jit::FA4Config a = c;
    a.arch = arch;
    try {
      const jit::ResolvedConfig rc = jit::resolve(a);
      if (jit::detail::render_source(rc).empty()) __builtin_trap();
    } catch (const jit::ConfigError&) {}
  }
  return 0;
}
