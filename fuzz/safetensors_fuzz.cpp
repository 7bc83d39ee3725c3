// libFuzzer: bytes as a safetensors file (`fa4jit run --inputs`). Accepted files must hold what
// their headers claim: each tensor's bytes are its shape's element count times its dtype's size.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "check/safetensors.hpp"
#include "fa4jit/errors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    for (const auto& [name, t] : jit::safetensors::parse(bytes, "fuzz.safetensors")) {
      std::uint64_t n = jit::safetensors::element_size(t.dtype);
      for (const std::int64_t d : t.shape) {
        if (d < 0) __builtin_trap();
        n *= static_cast<std::uint64_t>(d);  // cannot overflow: parse checked it
      }
      if (n != t.bytes.size() || n > size) __builtin_trap();
    }
  } catch (const jit::Error&) {}
  return 0;
}
