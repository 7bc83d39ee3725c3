// libFuzzer target: the cache archive reader (cache/archive.cpp, `fa4jit cache import`). The input
// is an archive file ("FA4JITAR1\n", 'E' | u64 meta_len | u64 cubin_len | meta.json | cubin ...,
// 'Z' | u64 count); every complete member is verified as import does. Member lengths are forged
// freely here: the reader must neither crash nor allocate more than the bytes present (plus one
// read chunk). Seeds: fuzz/corpus/cache_archive/ (made by Store::export_archive).
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "cache/internal.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace d = jit::cache::detail;
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  std::size_t handed_out = 0;
  const d::ArchiveScan scan = d::read_archive(in, [&](std::string&& meta_text, std::string&& cubin) {
    ++handed_out;
    if (meta_text.size() > d::kMaxMetaBytes || cubin.size() > d::kMaxCubinBytes) __builtin_trap();
    auto meta = nlohmann::json::parse(meta_text, nullptr, /*allow_exceptions=*/false);
    std::string key = "0123456789abcdef0123456789abcdef";
    if (meta.is_object())
      if (auto k = meta.find("key");
          k != meta.end() && k->is_string() && d::valid_key(k->get_ref<const std::string&>()))
        key = k->get<std::string>();
    d::check_entry_bytes(key, meta_text, std::move(cubin), nullptr);
  });
  if (scan.entries != handed_out || (!scan.magic && handed_out != 0)) __builtin_trap();
  return 0;
}
