// Entry format and verification: meta.json (the commit marker) records the key, the cubin size
// and its XXH3-128 (and, with a deployment secret, an HMAC-SHA256 of key and cubin); an entry is
// used only if all of them match what is on disk and the caller's validator accepts it.
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
constexpr std::string_view kMacPrefix = "hmac-sha256:";

// What the MAC covers: the key and the cubin (through its SHA-256), so a valid entry cannot be
// moved under another key or given another cubin. The rest of meta.json is descriptive.
std::string mac_message(std::string_view key, std::string_view cubin) {
  return fmt::format("fa4jit-cache-mac-1\n{}\n{}", key, sha256_hex(cubin));
}
}  // namespace

void Auth::sign(std::string_view key, std::string_view cubin, nlohmann::json& meta) const {
  if (has_secret()) meta["mac"] = std::string(kMacPrefix) + hmac_sha256_hex(secret_, mac_message(key, cubin));
}

Verdict Auth::check(std::string_view key, const nlohmann::json& meta, std::string_view cubin) const {
  if (has_secret()) {
    auto m = meta.find("mac");
    if (m == meta.end() || !m->is_string())
      return {"no MAC (FA4JIT_CACHE_SECRET is set: unsigned entries are not used)"};
    const std::string expected = std::string(kMacPrefix) + hmac_sha256_hex(secret_, mac_message(key, cubin));
    if (!equal_constant_time(m->get_ref<const std::string&>(), expected))
      return {"MAC does not match (written without this FA4JIT_CACHE_SECRET, or forged)"};
  }
  return validate_ ? validate_(key, meta, cubin) : Verdict{};
}

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

EntryCheck check_entry_bytes(std::string_view key, std::string_view meta_text, std::string cubin, const Auth* auth) {
  EntryCheck r;
  auto bad = [&](std::string problem) {
    r.problem = std::move(problem);
    return r;
  };
  if (meta_text.size() > kMaxMetaBytes) return bad("meta.json too large");
  if (cubin.size() > kMaxCubinBytes) return bad("kernel.cubin too large");
  nlohmann::json meta = nlohmann::json::parse(meta_text, nullptr, /*allow_exceptions=*/false);
  if (meta.is_discarded()) return bad("meta.json does not parse");
  if (auto p = check_blob(key, meta, cubin); !p.empty()) return bad(std::move(p));
  if (auth) {
    Verdict v = auth->check(key, meta, cubin);
    if (!v.problem.empty()) {
      r.problem = std::move(v.problem);
      r.foreign = v.foreign;
      return r;
    }
  }
  r.artifact = Artifact{std::move(cubin), std::move(meta), ""};
  return r;
}

namespace {

// One attempt. Both files are read through one directory fd: a concurrent rename (publish,
// evict, prune) can then never pair the meta.json of one entry with the cubin of another.
EntryCheck check_once(int parent_fd, const std::string& name, std::string_view key, const Auth* auth, bool& moved) {
  EntryCheck r;
  moved = false;
  Fd dfd = open_dir_at(parent_fd, name.c_str());
  if (!dfd) {
    int e = errno;
    if (e == ENOENT)
      r.absent = true;
    else if (e == ENOTDIR || e == ELOOP)
      r.problem = "entry is not a directory (a file or a symbolic link)";
    else {
      r.io_error = true;
      r.problem = fmt::format("opening entry dir: {}", std::strerror(e));
    }
    return r;
  }
  // Anything wrong below is real only if `name` still names the inode we read: otherwise the
  // entry was evicted or replaced under us (a race, not corruption) and the caller looks again.
  auto still_here = [&] {
    struct stat a {
    }, b{};
    return ::fstat(dfd.get(), &a) == 0 && ::fstatat(parent_fd, name.c_str(), &b, AT_SYMLINK_NOFOLLOW) == 0 &&
           a.st_ino == b.st_ino && a.st_dev == b.st_dev;
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
  // An error that proves nothing about the entry (EIO, ESTALE, EACCES) is not a reason to evict.
  auto proves_bad = [](int e) { return e == ENOENT || e == ELOOP || e == EINVAL || e == EFBIG; };
  int err = 0;
  // meta.json first: it is the commit marker.
  auto meta_text = read_file_at(dfd.get(), "meta.json", kMaxMetaBytes, &err);
  if (!meta_text) return fail(read_problem("meta.json", err), !proves_bad(err));
  auto cubin = read_file_at(dfd.get(), "kernel.cubin", kMaxCubinBytes, &err);
  if (!cubin) return fail(read_problem("kernel.cubin", err), !proves_bad(err));
  EntryCheck c = check_entry_bytes(key, *meta_text, std::move(*cubin), auth);
  if (!c.artifact) {
    bool foreign = c.foreign;
    EntryCheck f = fail(std::move(c.problem));
    f.foreign = foreign && !moved;
    return f;
  }
  return c;
}

}  // namespace

EntryCheck check_entry_at(int parent_fd, const std::string& name, std::string_view key, const Auth* auth,
                          const fs::path& origin) {
  bool moved = false;
  for (int attempt = 0; attempt < 3; ++attempt) {
    EntryCheck r = check_once(parent_fd, name, key, auth, moved);
    if (!moved) {
      if (r.artifact) r.artifact->origin = origin.string();
      return r;
    }
  }
  EntryCheck busy;  // replaced three times while we read: give up this time, it is not corrupt
  busy.io_error = true;
  busy.problem = "entry kept changing while being read";
  return busy;
}

}  // namespace jit::cache::detail
