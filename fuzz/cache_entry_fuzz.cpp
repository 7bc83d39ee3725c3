// libFuzzer target: the cache entry reader. Every entry a tier serves (a disk entry's meta.json and
// kernel.cubin, a Redis value, an archive member) goes through detail::check_entry_bytes: size caps,
// the meta.json parse, key/size/digest checks, and the MAC when a secret is set. The input is read
// two ways: as a Redis value ("FA4JITR1" | u32 LE meta length | meta.json | cubin, the writer's
// encode_remote), and as a meta.json on its own. Seeds: fuzz/corpus/cache_entry/ (made by the writer).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "cache/internal.hpp"

namespace {

namespace d = jit::cache::detail;

constexpr std::string_view kSomeKey = "0123456789abcdef0123456789abcdef";

// The key the entry claims, when it is a valid one; a reader always checks against the key it
// asked for, so a fixed key exercises the mismatch paths and the claimed key the rest.
std::string claimed_key(std::string_view meta_text) {
  auto meta = nlohmann::json::parse(meta_text, nullptr, /*allow_exceptions=*/false);
  if (!meta.is_object()) return std::string(kSomeKey);
  auto k = meta.find("key");
  if (k == meta.end() || !k->is_string() || !d::valid_key(k->get_ref<const std::string&>()))
    return std::string(kSomeKey);
  return k->get<std::string>();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  // With and without a deployment secret (the MAC check), and a validator that reads the meta.
  static const d::Auth plain;
  static const d::Auth with_secret("fuzzing-secret-0123456789",
                                   [](std::string_view key, const nlohmann::json& meta, std::string_view cubin) {
                                     jit::cache::Verdict v;
                                     if (meta.value("config", nlohmann::json()).is_null() || cubin.size() < key.size())
                                       v.problem = "no config";
                                     return v;
                                   });
  const d::Auth* auth = size > 0 && (data[0] & 1) ? &with_secret : &plain;

  std::string meta_text, cubin;
  if (d::decode_remote(input, meta_text, cubin)) {
    const std::string key = claimed_key(meta_text);
    d::EntryCheck c = d::check_entry_bytes(key, meta_text, cubin, auth);
    if (c.artifact && (c.artifact->cubin != cubin || !c.artifact->meta.is_object())) __builtin_trap();
    d::check_entry_bytes(kSomeKey, meta_text, std::move(cubin), auth);
  }
  d::check_entry_bytes(claimed_key(input), input, std::string(), auth);
  return 0;
}
