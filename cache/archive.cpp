// One-file archive of cache entries, for shipping a prebuilt cache or seeding CI hosts.
// Format (all integers little-endian), documented in docs/CACHE.md:
//   "FA4JITAR1\n"
//   per entry: 'E', u64 meta_len, u64 cubin_len, meta.json bytes, cubin bytes
//   trailer:   'Z', u64 entry_count
// A tiny custom format instead of tar: no extra dependency, and import re-verifies every entry
// against the digest in its meta anyway, so the container needs no checksums of its own.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <fstream>
#include <set>

#include <fmt/format.h>

#include "cache/store_impl.hpp"
#include "fa4jit/errors.hpp"

namespace jit::cache {

namespace fs = std::filesystem;

namespace {
constexpr std::string_view kMagic = "FA4JITAR1\n";

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

// Reads exactly n bytes in chunks: memory grows with the bytes actually there, not with a length
// field that may be forged (a 10-byte file claiming a 60 MB member allocates 1 MB, not 60).
bool read_exact(std::istream& in, std::uint64_t n, std::string& out) {
  constexpr std::uint64_t kChunk = 1u << 20;
  out.clear();
  while (out.size() < n) {
    const std::size_t step = static_cast<std::size_t>(std::min<std::uint64_t>(kChunk, n - out.size()));
    const std::size_t at = out.size();
    out.resize(at + step);
    if (!in.read(out.data() + at, static_cast<std::streamsize>(step))) return false;
  }
  return true;
}
}  // namespace

namespace detail {

std::string archive_magic() { return std::string(kMagic); }

ArchiveScan read_archive(std::istream& in, const std::function<void(std::string&&, std::string&&)>& on_entry) {
  ArchiveScan scan;
  std::string magic(kMagic.size(), '\0');
  if (!in.read(magic.data(), static_cast<std::streamsize>(magic.size())) || magic != kMagic) return scan;
  scan.magic = true;
  std::string meta_text, cubin;
  while (true) {
    char tag = 0;
    if (!in.get(tag)) {
      scan.problems.push_back(fmt::format("archive truncated after {} entries (no trailer)", scan.entries));
      break;
    }
    if (tag == 'Z') {
      std::uint64_t n = 0;
      if (!get_u64(in, n) || n != scan.entries)
        scan.problems.push_back(fmt::format("archive trailer says {} entries, read {}", n, scan.entries));
      break;
    }
    std::uint64_t mlen = 0, clen = 0;
    if (tag != 'E' || !get_u64(in, mlen) || !get_u64(in, clen)) {
      scan.problems.push_back(fmt::format("entry {}: bad header; stopping", scan.entries));
      break;
    }
    if (mlen > kMaxMetaBytes || clen > kMaxCubinBytes) {
      scan.problems.push_back(
          fmt::format("entry {}: its header claims {} bytes of meta.json and {} of cubin, over "
                      "the caps ({} and {}); stopping",
                      scan.entries, mlen, clen, kMaxMetaBytes, kMaxCubinBytes));
      break;
    }
    if (!read_exact(in, mlen, meta_text) || !read_exact(in, clen, cubin)) {
      scan.problems.push_back(fmt::format("entry {}: truncated; stopping", scan.entries));
      break;
    }
    ++scan.entries;
    on_entry(std::move(meta_text), std::move(cubin));
  }
  return scan;
}

}  // namespace detail

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
    if (detail::fault("enospc"))
      throw CacheError(fmt::format("export: write {}: {}", tmp.string(), std::strerror(ENOSPC)));
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
  // A regular file only: a FIFO or a device would block or never end.
  detail::Fd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  struct stat st {};
  if (!fd || ::fstat(fd.get(), &st) != 0)
    throw CacheError(fmt::format("import: cannot open {}: {}", path.string(), std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) throw CacheError(fmt::format("import: {} is not a regular file", path.string()));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CacheError(fmt::format("import: cannot open {}", path.string()));

  ImportReport rep;
  std::size_t index = 0;
  const detail::ArchiveScan scan = detail::read_archive(in, [&](std::string&& meta_text, std::string&& cubin) {
    const std::size_t at = index++;
    auto meta = nlohmann::json::parse(meta_text, nullptr, false);
    std::string key =
        meta.is_object() && meta.contains("key") && meta["key"].is_string() ? meta["key"].get<std::string>() : "";
    if (!detail::valid_key(key)) {
      rep.rejected++;
      rep.problems.push_back(
          fmt::format("entry {} (?): {}", at, meta.is_discarded() ? "meta does not parse" : "meta has no valid key"));
      return;
    }
    detail::EntryCheck c = detail::check_entry_bytes(key, meta_text, std::move(cubin), &im.auth);
    if (!c.artifact) {
      rep.rejected++;
      rep.problems.push_back(fmt::format("entry {} ({}): {}", at, key, c.problem));
      return;
    }
    if (im.load_local(key)) {
      rep.present++;
      return;
    }
    if (std::string err = im.wtier->publish(key, c.artifact->cubin, c.artifact->meta); !err.empty()) {
      rep.problems.push_back(fmt::format("{}: {}", key, err));
      im.warner.warn("write", fmt::format("import: cannot write cache entry {}: {}", key, err));
      return;
    }
    im.n.publishes++;
    rep.imported++;
  });
  if (!scan.magic) throw CacheError(fmt::format("import: {} is not an fa4jit cache archive", path.string()));
  rep.problems.insert(rep.problems.end(), scan.problems.begin(), scan.problems.end());
  return rep;
}

}  // namespace jit::cache
