// One cache root on disk. Publish protocol: stage the entry in a private dir under v1/tmp, fsync
// files and dir, then rename() the whole dir into place. rename is atomic, so readers see either
// a complete entry or nothing; if the target exists another writer won and ours is discarded.
// Nothing here relies on locks or mtimes for correctness (network filesystems break both).
//
// Below the root every step goes through directory fds opened with O_NOFOLLOW (v1, its shards,
// tmp, entries, files): a symlink planted anywhere in the cache is never followed, so cleanup can
// only ever delete names inside the cache, and a link is removed as a link.
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
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

// The names in an open directory (not "." and ".."); the caller's fd stays open and unmoved.
std::vector<std::string> list_names(int dirfd) {
  std::vector<std::string> names;
  int walk_fd = ::dup(dirfd);
  if (walk_fd < 0) return names;
  DIR* d = ::fdopendir(walk_fd);
  if (!d) {
    ::close(walk_fd);
    return names;
  }
  ::rewinddir(d);  // the dup shares the offset with dirfd
  while (dirent* e = ::readdir(d)) {
    std::string_view n(e->d_name);
    if (n != "." && n != "..") names.emplace_back(n);
  }
  ::closedir(d);
  return names;
}

// "uid 1001 (alice)": who owns a directory, as a person reads it.
std::string user_name(uid_t uid) {
  std::vector<char> buf(16384);
  passwd pw{}, *found = nullptr;
  if (::getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) == 0 && found)
    return fmt::format("uid {} ({})", uid, pw.pw_name);
  return fmt::format("uid {}", uid);
}

std::string group_name(gid_t gid) {
  std::vector<char> buf(65536);
  group gr{}, *found = nullptr;
  if (::getgrgid_r(gid, &gr, buf.data(), buf.size(), &found) == 0 && found)
    return fmt::format("gid {} ({})", gid, gr.gr_name);
  return fmt::format("gid {}", gid);
}

// Whether `uid` belongs to `gid` (its primary group or a listed member): the users a shared
// tier's group-writable directories already trust.
bool in_group(uid_t uid, gid_t gid) {
  std::vector<char> pbuf(16384), gbuf(65536);
  passwd pw{}, *pfound = nullptr;
  if (::getpwuid_r(uid, &pw, pbuf.data(), pbuf.size(), &pfound) != 0 || !pfound) return false;
  if (pw.pw_gid == gid) return true;
  group gr{}, *gfound = nullptr;
  if (::getgrgid_r(gid, &gr, gbuf.data(), gbuf.size(), &gfound) != 0 || !gfound) return false;
  for (char** m = gr.gr_mem; *m; ++m)
    if (std::strcmp(*m, pw.pw_name) == 0) return true;
  return false;
}

// Why a directory of a tier lets someone other than this user, root (and, shared, its group)
// decide what it holds; "" when it does not. Anyone who can write a directory on the way to an
// entry can put their own kernel there, sticky bit or not (it only protects existing names).
std::string dir_distrust(const struct stat& st, const fs::path& p, bool shared) {
  const mode_t mode = st.st_mode & 07777;
  if (mode & S_IWOTH)
    return fmt::format("{} is writable by every user (mode {:04o}{})", p.string(), mode,
                       mode & S_ISVTX ? "; the sticky bit does not stop new entries" : "");
  if (st.st_uid != ::geteuid() && st.st_uid != 0 && !(shared && in_group(st.st_uid, st.st_gid)))
    return fmt::format("{} is owned by {}, not by you or root{}", p.string(), user_name(st.st_uid),
                       shared ? fmt::format(" or a member of its group {}", group_name(st.st_gid)) : "");
  if ((mode & S_IWGRP) && !shared)
    return fmt::format(
        "{} is writable by its group {} (mode {:04o}); set FA4JIT_CACHE_SHARED=1 if that group is trusted", p.string(),
        group_name(st.st_gid), mode);
  return {};
}

std::string not_a_dir(const fs::path& p, int err) {
  if (err == ENOTDIR || err == ELOOP)
    return fmt::format("{} is not a directory (a file or a symbolic link)", p.string());
  return fmt::format("{}: {}", p.string(), std::strerror(err));
}
}  // namespace

DiskTier::DiskTier(fs::path root, Warner& warner, const Auth& auth, Modes modes)
    : root_(std::move(root)), warner_(warner), auth_(auth), modes_(modes) {}

fs::path DiskTier::entry_dir(std::string_view key) const {
  return base() / std::string(key.substr(0, 2)) / std::string(key);
}

DiskTier::Listed DiskTier::listed(std::string_view key) const {
  Listed l;
  l.key = std::string(key);
  l.shard = std::string(key.substr(0, 2));
  l.dir = entry_dir(key);
  l.is_dir = true;
  return l;
}

Fd DiskTier::open_base() const {
  Fd r(::open(root_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!r) return Fd();
  return open_dir_at(r.get(), "v1");
}

bool DiskTier::probe_writable(std::string* why) {
  writable_ = false;
  auto no = [&](std::string reason) {
    if (why) *why = std::move(reason);
    return false;
  };
  if (fault("readonly", root_)) return no("FA4JIT_CACHE_FAULT=readonly");
  if (auto r = make_dirs(root_, modes_.layout_dir(), modes_.shared); !r) return no(r.what);
  Fd rootfd(::open(root_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!rootfd) return no(not_a_dir(root_, errno));
  int err = 0;
  Fd v1 = make_dir_at(rootfd.get(), "v1", modes_.layout_dir(), modes_.shared, &err);
  if (!v1) return no(not_a_dir(base(), err));
  Fd tmp = make_dir_at(v1.get(), "tmp", modes_.layout_dir(), modes_.shared, &err);
  if (!tmp) return no(not_a_dir(base() / "tmp", err));
  Fd locks = make_dir_at(v1.get(), "locks", modes_.layout_dir(), modes_.shared, &err);
  if (!locks) return no(not_a_dir(base() / "locks", err));
  const std::string probe = staging_name("probe");
  Fd fd(::openat(tmp.get(), probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd) return no(fmt::format("create {}: {}", (base() / "tmp" / probe).string(), std::strerror(errno)));
  bool ok = ::write(fd.get(), "x", 1) == 1;
  int werr = errno;
  fd = Fd();
  ::unlinkat(tmp.get(), probe.c_str(), 0);
  if (!ok) return no(fmt::format("write {}: {}", (base() / "tmp" / probe).string(), std::strerror(werr)));
  writable_ = true;
  return true;
}

std::string DiskTier::distrust() const {
  Fd rootfd(::open(root_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!rootfd) return {};  // missing (created by us) or not a directory (probe_writable says why)
  struct stat st {};
  if (::fstat(rootfd.get(), &st) != 0) return {};
  if (std::string why = dir_distrust(st, root_, modes_.shared); !why.empty()) return why;
  if (::fstatat(rootfd.get(), "v1", &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode)) return {};
  if (std::string why = dir_distrust(st, base(), modes_.shared); !why.empty()) return why;
  Fd v1 = open_dir_at(rootfd.get(), "v1");
  if (!v1) return {};
  // Shards, tmp and locks: at most 258 fstatat calls, once per Store.
  for (const std::string& name : list_names(v1.get())) {
    if (::fstatat(v1.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode)) continue;
    if (std::string why = dir_distrust(st, base() / name, modes_.shared); !why.empty()) return why;
  }
  return {};
}

void DiskTier::touch(const Listed& l) {
  Fd b = open_base();
  if (!b) return;
  Fd sh = open_dir_at(b.get(), l.shard.c_str());
  struct stat st {};
  if (!sh || ::fstatat(sh.get(), l.key.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return;
  if (now_unix() - static_cast<std::int64_t>(st.st_mtim.tv_sec) < kTouchIntervalS) return;
  // Best effort: LRU order only, never correctness.
  ::utimensat(sh.get(), l.key.c_str(), nullptr, AT_SYMLINK_NOFOLLOW);
}

EntryCheck DiskTier::check(const Listed& l) const {
  EntryCheck r;
  Fd b = open_base();
  if (!b) {
    r.absent = errno == ENOENT;
    r.io_error = !r.absent;
    if (r.io_error) r.problem = not_a_dir(base(), errno);
    return r;
  }
  if (l.shard.empty()) {
    r.problem = "not a cache entry";
    return r;
  }
  Fd sh = open_dir_at(b.get(), l.shard.c_str());
  if (!sh) {
    r.absent = errno == ENOENT;
    r.io_error = !r.absent;  // a stray file or link in place of the shard: verify and clear remove it
    if (r.io_error) r.problem = not_a_dir(base() / l.shard, errno);
    return r;
  }
  return check_entry_at(sh.get(), l.key, l.key, &auth_, root_);
}

nlohmann::json DiskTier::read_meta(const Listed& l) const {
  Fd b = open_base();
  if (!b || l.shard.empty()) return nullptr;
  Fd sh = open_dir_at(b.get(), l.shard.c_str());
  if (!sh) return nullptr;
  Fd ed = open_dir_at(sh.get(), l.key.c_str());
  if (!ed) return nullptr;
  auto text = read_file_at(ed.get(), "meta.json", kMaxMetaBytes);
  if (!text) return nullptr;
  auto j = nlohmann::json::parse(*text, nullptr, false);
  return j.is_discarded() ? nlohmann::json(nullptr) : j;
}

std::optional<Artifact> DiskTier::load(std::string_view key, bool do_touch) {
  const Listed l = listed(key);
  EntryCheck c = check(l);
  if (c.artifact) {
    if (do_touch && writable_) touch(l);
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
    evict(l);
  } else {
    warner_.warn("corrupt:" + std::string(key), fmt::format("cache entry {} in read-only tier {} is bad ({}); ignored",
                                                            key, root_.string(), c.problem));
  }
  return std::nullopt;
}

int DiskTier::evict(const Listed& l, bool bad_entry) {
  // Rename aside first, delete second: a reader never sees a half-deleted entry (ccache's fix for
  // truncated reads), and deletion on a network FS can be slow or fail without harm. rename()
  // moves a symlink itself, and remove_at unlinks it: what it points to is never touched.
  Fd b = open_base();
  if (!b) return errno;
  Fd tmp = open_dir_at(b.get(), "tmp");
  if (!tmp) return errno;
  Fd sh;
  int from = b.get();
  if (!l.shard.empty()) {
    sh = open_dir_at(b.get(), l.shard.c_str());
    if (!sh) return errno;
    from = sh.get();
  }
  const std::string aside = staging_name(fmt::format("evict-{}", valid_key(l.key) ? l.key : std::string("stray")));
  if (::renameat(from, l.key.c_str(), tmp.get(), aside.c_str()) != 0) return errno;  // ENOENT: evicted already
  // Between our check and the rename another process may have evicted the bad entry and published
  // a good one; if that is what we moved, put it back rather than cost everybody a recompile.
  if (bad_entry) {
    EntryCheck again = check_entry_at(tmp.get(), aside, l.key, &auth_, root_);
    if (again.artifact && ::renameat(tmp.get(), aside.c_str(), from, l.key.c_str()) == 0) return EEXIST;
    evicted_++;
  }
  remove_at(tmp.get(), aside.c_str());
  return 0;
}

std::string DiskTier::publish(std::string_view key, std::string_view cubin, const nlohmann::json& full_meta) {
  if (!writable_) return "tier is read-only";
  const Listed target = listed(key);
  // Already there and good (a re-publish, e.g. prewarm over a warm cache): skip the writes.
  if (check(target).artifact) return {};
  Fd b = open_base();
  if (!b) return not_a_dir(base(), errno);
  int err = 0;
  Fd tmp = make_dir_at(b.get(), "tmp", modes_.layout_dir(), modes_.shared, &err);
  if (!tmp) return not_a_dir(base() / "tmp", err);
  const std::string name = staging_name(key);
  const fs::path shown = base() / "tmp" / name;
  Fd stage = make_dir_at(tmp.get(), name.c_str(), modes_.entry_dir(), modes_.shared, &err);
  if (!stage) return io_fail(err, "mkdir", shown).what;
  struct Guard {  // removes our staging dir on every exit path except a successful rename
    int dirfd;
    std::string name;
    ~Guard() {
      if (!name.empty()) remove_at(dirfd, name.c_str());
    }
  } guard{tmp.get(), name};

  if (auto r = write_file_at(stage.get(), "kernel.cubin", cubin, modes_.file(), modes_.shared, shown / "kernel.cubin");
      !r)
    return r.what;
  if (fault("kill_after_cubin")) ::raise(SIGKILL);
  // meta.json last: it is the commit marker that carries the digest of what precedes it.
  if (auto r = write_file_at(stage.get(), "meta.json", full_meta.dump(2) + "\n", modes_.file(), modes_.shared,
                             shown / "meta.json");
      !r)
    return r.what;
  if (auto r = fsync_fd(stage.get(), shown); !r) return r.what;
  if (fault("kill_before_rename")) ::raise(SIGKILL);

  Fd sh = make_dir_at(b.get(), target.shard.c_str(), modes_.layout_dir(), modes_.shared, &err);
  if (!sh && (err == ENOTDIR || err == ELOOP)) {
    // A file or symlink where the shard belongs: move it aside (removed as a link), make the dir.
    evict(Listed{target.shard, "", base() / target.shard, false, 0, 0}, /*bad_entry=*/false);
    sh = make_dir_at(b.get(), target.shard.c_str(), modes_.layout_dir(), modes_.shared, &err);
  }
  if (!sh) return not_a_dir(base() / target.shard, err);
  for (int attempt = 0; attempt < 3; ++attempt) {
    if (::renameat(tmp.get(), name.c_str(), sh.get(), target.key.c_str()) == 0) {
      guard.name.clear();
      fsync_fd(sh.get(), base() / target.shard);  // make the new name durable; failure here is not fatal
      return {};
    }
    err = errno;
    // ENOTDIR: a file or symlink has the entry's name; it is evicted (as a link) like a bad entry.
    if (err != EEXIST && err != ENOTEMPTY && err != ENOTDIR)
      return fmt::format("rename {} -> {}: {}", shown.string(), target.dir.string(), std::strerror(err));
    // Another writer won the race. Entries are content-addressed, so its bytes equal ours, unless
    // the existing entry is bad: then evict it and try once more.
    EntryCheck c = check(target);
    if (c.artifact || c.io_error) return {};
    if (!c.absent) {
      int e = evict(target);
      if (e != 0 && e != ENOENT && e != EEXIST)
        return fmt::format("cannot replace the bad entry {} ({}): {}", target.dir.string(), c.problem,
                           std::strerror(e));
    }
  }
  return {};
}

std::vector<DiskTier::Listed> DiskTier::scan() const {
  std::vector<Listed> out;
  Fd b = open_base();
  if (!b) return out;
  for (const std::string& sname : list_names(b.get())) {
    if (sname.size() != 2) continue;  // tmp/, locks/, prune.stamp
    struct stat st {};
    if (::fstatat(b.get(), sname.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (!S_ISDIR(st.st_mode)) {  // a stray file or symlink where a shard belongs: verify/clear remove it
      out.push_back(
          Listed{sname, "", base() / sname, false, static_cast<std::uint64_t>(st.st_size), st.st_mtim.tv_sec});
      continue;
    }
    Fd sh = open_dir_at(b.get(), sname.c_str());
    if (!sh) continue;
    for (const std::string& ename : list_names(sh.get())) {
      Listed l{ename, sname, base() / sname / ename, false, 0, 0};
      if (::fstatat(sh.get(), ename.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
      l.last_use = st.st_mtim.tv_sec;
      l.is_dir = S_ISDIR(st.st_mode);
      if (!l.is_dir) {
        l.bytes = static_cast<std::uint64_t>(st.st_size);
      } else if (Fd ed = open_dir_at(sh.get(), ename.c_str())) {
        for (const std::string& f : list_names(ed.get())) {
          struct stat fst {};
          if (::fstatat(ed.get(), f.c_str(), &fst, AT_SYMLINK_NOFOLLOW) == 0)
            l.bytes += static_cast<std::uint64_t>(fst.st_size);
        }
      }
      out.push_back(std::move(l));
    }
  }
  return out;
}

std::size_t DiskTier::sweep_tmp(std::chrono::seconds max_age) {
  if (!writable_) return 0;
  Fd b = open_base();
  if (!b) return 0;
  Fd tmp = open_dir_at(b.get(), "tmp");
  if (!tmp) return 0;
  std::size_t removed = 0;
  const std::string me = host_name();
  for (const std::string& name : list_names(tmp.get())) {
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
      if (::fstatat(tmp.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
          now_unix() - st.st_mtim.tv_sec > max_age.count())
        stale = true;
    }
    if (stale && remove_at(tmp.get(), name.c_str())) ++removed;
  }
  return removed;
}

}  // namespace jit::cache::detail
