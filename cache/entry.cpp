// Entry format and verification: meta.json (the commit marker) records the key, the cubin size
// and its XXH3-128; an entry is used only if all of them match what is on disk.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#define XXH_INLINE_ALL  // header-only: binaries carry no libxxhash dependency
#include <xxhash.h>

#include "cache/internal.hpp"

namespace jit::cache::detail {

namespace {
// A cubin larger than this is certainly corrupt metadata; refuse before allocating.
constexpr std::uint64_t kMaxCubin = 1ull << 30;
constexpr std::uint64_t kMaxMeta = 16ull << 20;
}  // namespace

bool valid_key(std::string_view key) {
  // Also the path-safety check: a key becomes a directory name.
  if (key.size() != 32) return false;
  for (char c : key)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

std::string xxh3_128_hex(std::string_view data) {
  XXH128_hash_t h = XXH3_128bits(data.data(), data.size());
  return fmt::format("{:016x}{:016x}", h.high64, h.low64);
}

nlohmann::json make_meta(std::string_view key, std::string_view cubin, const nlohmann::json& caller_meta) {
  nlohmann::json m = caller_meta.is_object() ? caller_meta : nlohmann::json::object();
  if (!caller_meta.is_null() && !caller_meta.is_object()) m["caller_meta"] = caller_meta;
  m["key"] = std::string(key);
  m["cubin_size"] = cubin.size();
  m["cubin_xxh3_128"] = xxh3_128_hex(cubin);
  if (!m.contains("created")) m["created"] = now_unix();
  m["cache_format"] = 1;
  return m;
}

std::string check_blob(std::string_view key, const nlohmann::json& meta, std::string_view cubin) {
  if (!meta.is_object()) return "meta.json is not an object";
  auto k = meta.find("key");
  if (k == meta.end() || !k->is_string()) return "meta.json has no key";
  if (k->get<std::string>() != key) return fmt::format("key mismatch (meta.json says {})", k->get<std::string>());
  auto sz = meta.find("cubin_size");
  if (sz == meta.end() || !sz->is_number_unsigned()) return "meta.json has no cubin_size";
  if (sz->get<std::uint64_t>() != cubin.size())
    return fmt::format("cubin size {} != {} recorded in meta.json", cubin.size(), sz->get<std::uint64_t>());
  auto dg = meta.find("cubin_xxh3_128");
  if (dg == meta.end() || !dg->is_string()) return "meta.json has no cubin_xxh3_128";
  std::string actual = xxh3_128_hex(cubin);
  if (dg->get<std::string>() != actual)
    return fmt::format("cubin digest {} != {} recorded in meta.json", actual, dg->get<std::string>());
  return {};
}

namespace {

// One attempt. Both files are read through one directory fd: a concurrent rename (publish,
// evict, prune) can then never pair the meta.json of one entry with the cubin of another.
EntryCheck check_once(const fs::path& dir, std::string_view key, bool& moved) {
  EntryCheck r;
  moved = false;
  Fd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dfd) {
    int e = errno;
    if (e == ENOENT) r.absent = true;
    else if (e == ENOTDIR) r.problem = "entry is not a directory";
    else {
      r.io_error = true;
      r.problem = fmt::format("opening entry dir: {}", std::strerror(e));
    }
    return r;
  }
  // Anything wrong below is real only if `dir` still names the inode we read: otherwise the entry
  // was evicted or replaced under us (a race, not corruption) and the caller looks again.
  auto still_here = [&] {
    struct stat a {}, b {};
    return ::fstat(dfd.get(), &a) == 0 && ::stat(dir.c_str(), &b) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev;
  };
  auto fail = [&](std::string problem, bool io = false) {
    if (!still_here()) {
      moved = true;
      return r;
    }
    r.problem = std::move(problem);
    r.io_error = io;
    return r;
  };
  int err = 0;
  // meta.json first: it is the commit marker, and it bounds how much cubin we are willing to read.
  auto meta_text = read_file_at(dfd.get(), "meta.json", kMaxMeta, &err);
  if (!meta_text) {
    if (err == ENOENT) return fail("meta.json missing");
    if (err == EFBIG) return fail("meta.json too large");
    return fail(fmt::format("reading meta.json: {}", std::strerror(err)), /*io=*/true);
  }
  nlohmann::json meta = nlohmann::json::parse(*meta_text, nullptr, /*allow_exceptions=*/false);
  if (meta.is_discarded()) return fail("meta.json does not parse");
  if (!meta.is_object()) return fail("meta.json is not an object");
  auto cubin = read_file_at(dfd.get(), "kernel.cubin", kMaxCubin, &err);
  if (!cubin) {
    if (err == ENOENT) return fail("kernel.cubin missing");
    if (err == EFBIG) return fail("kernel.cubin too large");
    return fail(fmt::format("reading kernel.cubin: {}", std::strerror(err)), /*io=*/true);
  }
  if (auto p = check_blob(key, meta, *cubin); !p.empty()) return fail(p);
  r.artifact = Artifact{std::move(*cubin), std::move(meta), dir.parent_path().parent_path().parent_path().string()};
  return r;
}

}  // namespace

EntryCheck check_entry(const fs::path& dir, std::string_view key) {
  bool moved = false;
  for (int attempt = 0; attempt < 3; ++attempt) {
    EntryCheck r = check_once(dir, key, moved);
    if (!moved) return r;
  }
  EntryCheck busy;  // replaced three times while we read: give up this time, it is not corrupt
  busy.io_error = true;
  busy.problem = "entry kept changing while being read";
  return busy;
}

}  // namespace jit::cache::detail
