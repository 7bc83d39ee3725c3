// One-file archive of cache entries, for shipping a prebuilt cache or seeding CI hosts.
// Format (all integers little-endian), documented in docs/CACHE.md:
//   "FA4JITAR1\n"
//   per entry: 'E', u64 meta_len, u64 cubin_len, meta.json bytes, cubin bytes
//   trailer:   'Z', u64 entry_count
// A tiny custom format instead of tar: no extra dependency, and import re-verifies every entry
// against the digest in its meta anyway, so the container needs no checksums of its own.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fstream>
#include <set>

#include <fmt/format.h>

#include "cache/store_impl.hpp"
#include "fa4jit/errors.hpp"

namespace jit::cache {

namespace fs = std::filesystem;

namespace {
constexpr std::string_view kMagic = "FA4JITAR1\n";
constexpr std::uint64_t kMaxMeta = 16ull << 20;
constexpr std::uint64_t kMaxCubin = 1ull << 30;

void put_u64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}

bool get_u64(std::istream& in, std::uint64_t& v) {
  unsigned char b[8];
  if (!in.read(reinterpret_cast<char*>(b), 8)) return false;
  v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(b[i]) << (8 * i);
  return true;
}
}  // namespace

std::size_t Store::export_archive(const fs::path& path, const std::vector<std::string>& keys) {
  auto& im = *impl_;
  std::vector<std::string> wanted = keys;
  if (wanted.empty()) {
    std::set<std::string> seen;
    for (auto& t : im.tiers)
      for (auto& l : t->scan())
        if (detail::valid_key(l.key) && seen.insert(l.key).second) wanted.push_back(l.key);
    std::lock_guard lk(im.mem_mu);
    for (auto& [k, a] : im.mem)
      if (seen.insert(k).second) wanted.push_back(k);
  }
  // Streamed to a temp file next to the target, fsynced, then renamed: a reader never sees a
  // half-written archive, and a large cache is never held in memory at once.
  fs::path tmp = path;
  tmp += fmt::format(".tmp.{}", detail::random_suffix());
  detail::Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (!fd) throw CacheError(fmt::format("export: cannot create {}: {}", tmp.string(), std::strerror(errno)));
  struct Unlink {  // removes the temp file on every failure path
    fs::path p;
    ~Unlink() {
      if (!p.empty()) ::unlink(p.c_str());
    }
  } cleanup{tmp};
  auto put = [&](std::string_view data) {
    if (detail::fault("enospc")) throw CacheError(fmt::format("export: write {}: {}", tmp.string(), std::strerror(ENOSPC)));
    while (!data.empty()) {
      ssize_t n = ::write(fd.get(), data.data(), data.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw CacheError(fmt::format("export: write {}: {}", tmp.string(), std::strerror(errno)));
      data.remove_prefix(static_cast<std::size_t>(n));
    }
  };
  put(kMagic);
  std::size_t count = 0;
  for (const auto& key : wanted) {
    require_key(key);
    auto a = im.load_local(key);  // verified; bad entries are evicted, not exported
    if (!a) {
      if (!keys.empty()) throw CacheError(fmt::format("export: key {} is not in the cache", key));
      continue;
    }
    std::string meta = a->meta.dump();
    std::string head(1, 'E');
    put_u64(head, meta.size());
    put_u64(head, a->cubin.size());
    put(head);
    put(meta);
    put(a->cubin);
    ++count;
  }
  std::string tail(1, 'Z');
  put_u64(tail, count);
  put(tail);
  if (::fsync(fd.get()) != 0 || ::close(fd.release()) != 0)
    throw CacheError(fmt::format("export: flush {}: {}", tmp.string(), std::strerror(errno)));
  if (::rename(tmp.c_str(), path.c_str()) != 0)
    throw CacheError(fmt::format("export: rename to {}: {}", path.string(), std::strerror(errno)));
  cleanup.p.clear();
  return count;
}

ImportReport Store::import_archive(const fs::path& path) {
  auto& im = *impl_;
  if (!im.wtier) throw CacheError(fmt::format("import {}: no writable cache tier", path.string()));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CacheError(fmt::format("import: cannot open {}", path.string()));
  std::string magic(kMagic.size(), '\0');
  if (!in.read(magic.data(), static_cast<std::streamsize>(magic.size())) || magic != kMagic)
    throw CacheError(fmt::format("import: {} is not an fa4jit cache archive", path.string()));

  ImportReport rep;
  std::size_t index = 0;
  while (true) {
    char tag = 0;
    if (!in.get(tag)) {
      rep.problems.push_back(fmt::format("archive truncated after {} entries (no trailer)", index));
      break;
    }
    if (tag == 'Z') {
      std::uint64_t n = 0;
      if (!get_u64(in, n) || n != index)
        rep.problems.push_back(fmt::format("archive trailer says {} entries, read {}", n, index));
      break;
    }
    std::uint64_t mlen = 0, clen = 0;
    if (tag != 'E' || !get_u64(in, mlen) || !get_u64(in, clen) || mlen > kMaxMeta || clen > kMaxCubin) {
      rep.problems.push_back(fmt::format("entry {}: bad header; stopping", index));
      break;
    }
    std::string meta_text(mlen, '\0'), cubin(clen, '\0');
    if (!in.read(meta_text.data(), static_cast<std::streamsize>(mlen)) ||
        !in.read(cubin.data(), static_cast<std::streamsize>(clen))) {
      rep.problems.push_back(fmt::format("entry {}: truncated; stopping", index));
      break;
    }
    ++index;
    auto meta = nlohmann::json::parse(meta_text, nullptr, false);
    std::string key = meta.is_object() && meta.contains("key") && meta["key"].is_string() ? meta["key"].get<std::string>() : "";
    std::string problem = meta.is_discarded()          ? "meta does not parse"
                          : !detail::valid_key(key)    ? "meta has no valid key"
                                                       : detail::check_blob(key, meta, cubin);
    if (!problem.empty()) {
      rep.rejected++;
      rep.problems.push_back(fmt::format("entry {} ({}): {}", index - 1, key.empty() ? "?" : key, problem));
      continue;
    }
    if (im.load_local(key)) {
      rep.present++;
      continue;
    }
    if (std::string err = im.wtier->publish(key, cubin, meta); !err.empty()) {
      rep.problems.push_back(fmt::format("{}: {}", key, err));
      im.warner.warn("write", fmt::format("import: cannot write cache entry {}: {}", key, err));
      continue;
    }
    im.n.publishes++;
    rep.imported++;
  }
  return rep;
}

}  // namespace jit::cache
