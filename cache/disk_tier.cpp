// One cache root on disk. Publish protocol: stage the entry in a private dir under v1/tmp, fsync
// files and dir, then rename() the whole dir into place. rename is atomic, so readers see either
// a complete entry or nothing; if the target exists another writer won and ours is discarded.
// Nothing here relies on locks or mtimes for correctness (network filesystems break both).
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "cache/internal.hpp"

namespace jit::cache::detail {

namespace {
// Last-use stamps are refreshed at most this often per entry: a hit costs one stat(), not a write.
constexpr std::int64_t kTouchIntervalS = 60;

// Staging names are <tag>.<host>.<pid>.<random> so a sweeper can tell a dead writer's leftovers.
std::string staging_name(std::string_view tag) {
  return fmt::format("{}.{}.{}.{}", tag, host_name(), ::getpid(), random_suffix());
}
}  // namespace

DiskTier::DiskTier(fs::path root, Warner& warner) : root_(std::move(root)), warner_(warner) {}

fs::path DiskTier::entry_dir(std::string_view key) const {
  return base() / std::string(key.substr(0, 2)) / std::string(key);
}

fs::path DiskTier::lock_file(std::string_view key) const { return base() / "locks" / (std::string(key) + ".lock"); }

bool DiskTier::probe_writable() {
  writable_ = false;
  if (fault("readonly", root_)) return false;
  if (!make_dirs(base() / "tmp") || !make_dirs(base() / "locks")) return false;
  fs::path probe = base() / "tmp" / staging_name("probe");
  Fd fd(::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (!fd) return false;
  bool ok = ::write(fd.get(), "x", 1) == 1;
  fd = Fd();
  ::unlink(probe.c_str());
  writable_ = ok;
  return ok;
}

void DiskTier::touch(const fs::path& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return;
  if (now_unix() - static_cast<std::int64_t>(st.st_mtim.tv_sec) < kTouchIntervalS) return;
  ::utimensat(AT_FDCWD, dir.c_str(), nullptr, 0);  // best effort: LRU order only, never correctness
}

std::optional<Artifact> DiskTier::load(std::string_view key, bool do_touch) {
  fs::path dir = entry_dir(key);
  EntryCheck c = check_entry(dir, key);
  if (c.artifact) {
    if (do_touch && writable_) touch(dir);
    c.artifact->origin = root_.string();
    return std::move(c.artifact);
  }
  if (c.absent) return std::nullopt;
  if (c.io_error) {
    warner_.warn("io:" + root_.string(), fmt::format("cannot read cache entry {} in {}: {}; treated as a miss", key,
                                                     root_.string(), c.problem));
    return std::nullopt;
  }
  if (writable_) {
    warner_.warn("corrupt:" + std::string(key), fmt::format("cache entry {} in {} is bad ({}); evicted, will rebuild",
                                                            key, root_.string(), c.problem));
    evict(key, dir);
  } else {
    warner_.warn("corrupt:" + std::string(key),
                 fmt::format("cache entry {} in read-only tier {} is bad ({}); ignored", key, root_.string(), c.problem));
  }
  return std::nullopt;
}

bool DiskTier::evict(std::string_view key, const fs::path& dir, bool bad_entry) {
  // Rename aside first, delete second: a reader never sees a half-deleted entry (ccache's fix for
  // truncated reads), and deletion on a network FS can be slow or fail without harm.
  fs::path aside = base() / "tmp" / staging_name(fmt::format("evict-{}", key));
  if (::rename(dir.c_str(), aside.c_str()) != 0) return false;  // ENOENT: somebody else evicted it
  // Between our check and the rename another process may have evicted the bad entry and published
  // a good one; if that is what we moved, put it back rather than cost everybody a recompile.
  if (bad_entry) {
    EntryCheck again = check_entry(aside, key);
    if (again.artifact && ::rename(aside.c_str(), dir.c_str()) == 0) return false;
    evicted_++;
  }
  remove_tree(aside);
  return true;
}

std::string DiskTier::publish(std::string_view key, std::string_view cubin, const nlohmann::json& full_meta) {
  if (!writable_) return "tier is read-only";
  fs::path target = entry_dir(key);
  // Already there and good (a re-publish, e.g. prewarm over a warm cache): skip the writes.
  if (check_entry(target, key).artifact) return {};
  fs::path tmp = base() / "tmp" / staging_name(key);
  if (auto r = make_dirs(tmp); !r) return r.what;
  struct Guard {  // removes our staging dir on every exit path except a successful rename
    fs::path p;
    ~Guard() {
      if (!p.empty()) remove_tree(p);
    }
  } guard{tmp};

  if (auto r = write_file_durable(tmp / "kernel.cubin", cubin); !r) return r.what;
  if (fault("kill_after_cubin")) ::raise(SIGKILL);
  // meta.json last: it is the commit marker that carries the digest of what precedes it.
  if (auto r = write_file_durable(tmp / "meta.json", full_meta.dump(2) + "\n"); !r) return r.what;
  if (auto r = fsync_dir(tmp); !r) return r.what;
  if (fault("kill_before_rename")) ::raise(SIGKILL);

  if (auto r = make_dirs(target.parent_path()); !r) return r.what;
  for (int attempt = 0; attempt < 3; ++attempt) {
    if (::rename(tmp.c_str(), target.c_str()) == 0) {
      guard.p.clear();
      fsync_dir(target.parent_path());  // make the new name durable; failure here is not fatal
      return {};
    }
    int err = errno;
    if (err != EEXIST && err != ENOTEMPTY) return fmt::format("rename {} -> {}: {}", tmp.string(), target.string(), std::strerror(err));
    // Another writer won the race. Entries are content-addressed, so its bytes equal ours, unless
    // the existing entry is corrupt: then evict it and try once more.
    EntryCheck c = check_entry(target, key);
    if (c.artifact || c.io_error) return {};
    if (!c.absent) evict(key, target);
  }
  return {};
}

std::vector<DiskTier::Listed> DiskTier::scan() const {
  std::vector<Listed> out;
  std::error_code ec;
  for (fs::directory_iterator shard(base(), ec), end; !ec && shard != end; shard.increment(ec)) {
    std::string sname = shard->path().filename().string();
    if (sname.size() != 2 || !shard->is_directory(ec)) continue;  // skips tmp/ and locks/
    std::error_code ec2;
    for (fs::directory_iterator e(shard->path(), ec2), end2; !ec2 && e != end2; e.increment(ec2)) {
      Listed l;
      l.key = e->path().filename().string();
      l.dir = e->path();
      struct stat st {};
      if (::stat(l.dir.c_str(), &st) != 0) continue;
      l.last_use = st.st_mtim.tv_sec;
      std::error_code ec3;
      if (S_ISDIR(st.st_mode)) {
        for (fs::directory_iterator f(l.dir, ec3), end3; !ec3 && f != end3; f.increment(ec3)) {
          std::error_code ec4;
          auto sz = f->file_size(ec4);
          if (!ec4) l.bytes += sz;
        }
      } else {
        l.bytes = static_cast<std::uint64_t>(st.st_size);
      }
      out.push_back(std::move(l));
    }
  }
  return out;
}

std::size_t DiskTier::sweep_tmp(std::chrono::seconds max_age) {
  if (!writable_) return 0;
  std::size_t removed = 0;
  std::string me = host_name();
  std::error_code ec;
  for (fs::directory_iterator e(base() / "tmp", ec), end; !ec && e != end; e.increment(ec)) {
    std::string name = e->path().filename().string();
    // <tag>.<host>.<pid>.<random>
    auto r = name.rfind('.');
    auto p = r == std::string::npos || r == 0 ? std::string::npos : name.rfind('.', r - 1);
    auto h = p == std::string::npos || p == 0 ? std::string::npos : name.rfind('.', p - 1);
    bool stale = false;
    if (h != std::string::npos) {
      std::string host = name.substr(h + 1, p - h - 1);
      long pid = std::strtol(name.c_str() + p + 1, nullptr, 10);
      if (host == me && pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) stale = true;
    }
    if (!stale) {
      struct stat st {};
      if (::lstat(e->path().c_str(), &st) == 0 && now_unix() - st.st_mtim.tv_sec > max_age.count()) stale = true;
    }
    if (stale && remove_tree(e->path())) ++removed;
  }
  return removed;
}

}  // namespace jit::cache::detail
