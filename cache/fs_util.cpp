// POSIX helpers for the cache: durable writes, bounded reads, tree removal, fault injection.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>
#include <thread>

#include <fmt/format.h>

#include "base/log.hpp"
#include "cache/internal.hpp"

namespace jit::cache::detail {

Fd::~Fd() {
  if (fd_ >= 0) ::close(fd_);
}

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.release();
  }
  return *this;
}

IoResult io_fail(int err, std::string_view op, const fs::path& p) {
  return IoResult{err, fmt::format("{} {}: {}", op, p.string(), std::strerror(err))};
}

std::string fault_env_problem() {
  const char* env = std::getenv("FA4JIT_CACHE_FAULT");
  if (!env || !*env) return {};
  std::string_view list(env);
  while (true) {
    const auto comma = list.find(',');
    const std::string_view item = list.substr(0, comma);
    const bool known = item == "readonly" || item == "enospc" || item == "kill_after_cubin" ||
                       item == "kill_before_rename" || (item.size() > 9 && item.substr(0, 9) == "readonly:");
    if (!known)
      return fmt::format(
          "FA4JIT_CACHE_FAULT='{}': '{}' is not a fault; a comma-separated list of readonly, readonly:<root>, "
          "enospc, kill_after_cubin, kill_before_rename (a test seam; unset it)",
          env, item);
    if (comma == std::string_view::npos) return {};
    list.remove_prefix(comma + 1);
  }
}

bool fault(std::string_view name, const fs::path& root) {
  const char* env = std::getenv("FA4JIT_CACHE_FAULT");
  if (!env || !*env) return false;
  std::string_view list(env);
  while (!list.empty()) {
    auto comma = list.find(',');
    std::string_view item = list.substr(0, comma);
    list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
    if (item == name) return true;
    if (!root.empty() && item.size() > name.size() + 1 && item.substr(0, name.size()) == name &&
        item[name.size()] == ':') {
      std::error_code ec;
      fs::path a = fs::weakly_canonical(fs::path(item.substr(name.size() + 1)), ec);
      fs::path b = fs::weakly_canonical(root, ec);
      if (a == b) return true;
    }
  }
  return false;
}

IoResult write_file_at(int dirfd, const char* name, std::string_view data, mode_t mode, bool force_mode,
                       const fs::path& shown) {
  if (fault("enospc")) return io_fail(ENOSPC, "write", shown);
  // O_EXCL never follows a symlink: a planted link makes this fail rather than write through it.
  Fd fd(::openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
  if (!fd) return io_fail(errno, "create", shown);
  if (force_mode && ::fchmod(fd.get(), mode) != 0) return io_fail(errno, "chmod", shown);
  const char* p = data.data();
  std::size_t left = data.size();
  while (left > 0) {
    ssize_t n = ::write(fd.get(), p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return io_fail(errno, "write", shown);  // ENOSPC, EDQUOT, EFBIG (RLIMIT_FSIZE), EIO
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  // fsync before the rename that publishes: otherwise a crash can leave a renamed entry whose
  // data blocks never reached the disk (zero-filled cubin after reboot).
  if (::fsync(fd.get()) != 0) return io_fail(errno, "fsync", shown);
  int raw = fd.release();
  if (::close(raw) != 0) return io_fail(errno, "close", shown);  // NFS reports write errors here
  return {};
}

IoResult fsync_fd(int fd, const fs::path& shown) {
  // Some filesystems refuse fsync on a directory (EINVAL); that is not a write failure.
  if (::fsync(fd) != 0 && errno != EINVAL && errno != EROFS) return io_fail(errno, "fsync dir", shown);
  return {};
}

Fd open_dir_at(int dirfd, const char* name) {
  return Fd(::openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
}

Fd make_dir_at(int dirfd, const char* name, mode_t mode, bool force_mode, int* err) {
  bool created = ::mkdirat(dirfd, name, mode) == 0;
  if (!created && errno != EEXIST) {
    if (err) *err = errno;
    return Fd();
  }
  Fd fd = open_dir_at(dirfd, name);
  if (!fd) {
    if (err) *err = errno;  // ENOTDIR/ELOOP: a file or a symlink sits where a directory belongs
    return Fd();
  }
  // Only a directory we just made: another user's may not be chmod'ed, and need not be.
  if (created && force_mode) ::fchmod(fd.get(), mode);
  if (err) *err = 0;
  return fd;
}

IoResult make_dirs(const fs::path& dir, mode_t mode, bool force_mode) {
  std::error_code ec;
  fs::path abs = fs::absolute(dir, ec).lexically_normal();
  if (ec || dir.empty()) return io_fail(ec ? ec.value() : ENOENT, "mkdir", dir);
  if (abs.filename().empty()) abs = abs.parent_path();  // "a/b/" -> "a/b"
  fs::path built;
  for (const auto& part : abs) {
    built /= part;
    if (part == abs.root_path()) continue;
    const bool last = built == abs;
    const mode_t m = last ? mode : 0755;
    if (::mkdir(built.c_str(), m) == 0) {
      if (last && force_mode) ::chmod(built.c_str(), m);
    } else if (errno != EEXIST) {
      return io_fail(errno, "mkdir", built);
    }
  }
  struct stat st {};
  if (::stat(abs.c_str(), &st) != 0) return io_fail(errno, "stat", abs);
  if (!S_ISDIR(st.st_mode)) return io_fail(ENOTDIR, "mkdir", abs);
  return {};
}

std::optional<std::string> read_file_at(int dirfd, const char* name, std::uint64_t max_bytes, int* err) {
  auto fail = [&](int e) -> std::optional<std::string> {
    if (err) *err = e;
    return std::nullopt;
  };
  // O_NONBLOCK: opening a FIFO (or a tty) must not wait for a writer; O_NOFOLLOW: a link to
  // /dev/zero or to another user's file is refused, not read.
  Fd fd(::openat(dirfd, name, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return fail(errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return fail(errno);
  if (!S_ISREG(st.st_mode)) return fail(EINVAL);
  if (static_cast<std::uint64_t>(st.st_size) > max_bytes) return fail(EFBIG);
  std::string out;
  out.resize(static_cast<std::size_t>(st.st_size));
  std::size_t got = 0;
  while (true) {
    if (got == out.size()) out.resize(out.size() + 4096);  // the file may have grown: keep reading
    ssize_t n = ::read(fd.get(), out.data() + got, out.size() - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail(errno);
    }
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
    if (got > max_bytes) return fail(EFBIG);
  }
  out.resize(got);
  if (err) *err = 0;
  return out;
}

std::string read_problem(std::string_view what, int err) {
  switch (err) {
    case ENOENT: return fmt::format("{} missing", what);
    case ELOOP: return fmt::format("{} is a symbolic link", what);
    case EINVAL: return fmt::format("{} is not a regular file", what);
    case EFBIG: return fmt::format("{} too large", what);
    default: return fmt::format("reading {}: {}", what, std::strerror(err));
  }
}

bool remove_at(int dirfd, const char* name, int depth) {
  struct stat st {};
  if (::fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return errno == ENOENT;
  if (!S_ISDIR(st.st_mode)) return ::unlinkat(dirfd, name, 0) == 0 || errno == ENOENT;
  if (depth >= kMaxRemoveDepth) return false;
  Fd sub = open_dir_at(dirfd, name);
  if (!sub) {
    // Replaced by a link or a file since the fstatat: remove that name, follow nothing.
    if (errno == ENOTDIR || errno == ELOOP) return ::unlinkat(dirfd, name, 0) == 0 || errno == ENOENT;
    return errno == ENOENT;
  }
  bool ok = true;
  {
    // fdopendir takes its own fd (it is closed with the DIR); `sub` stays for unlinkat.
    int walk_fd = ::dup(sub.get());
    DIR* d = walk_fd >= 0 ? ::fdopendir(walk_fd) : nullptr;
    if (!d) {
      if (walk_fd >= 0) ::close(walk_fd);
      return false;
    }
    struct Closer {
      DIR* d;
      ~Closer() { ::closedir(d); }
    } closer{d};
    std::vector<std::string> names;  // collected first: unlinking while readdir runs may skip names
    while (dirent* e = ::readdir(d)) {
      std::string_view n(e->d_name);
      if (n != "." && n != "..") names.emplace_back(n);
    }
    for (const auto& n : names) ok = remove_at(sub.get(), n.c_str(), depth + 1) && ok;
  }
  if (::unlinkat(dirfd, name, AT_REMOVEDIR) != 0 && errno != ENOENT) ok = false;
  return ok;
}

std::string random_suffix() {
  // Seeded per thread from random_device + pid + thread id: a forked child re-seeds because its
  // thread_local is re-created lazily only if it was never used; mix the pid in at each call.
  thread_local std::mt19937_64 rng{std::random_device{}() ^
                                   (std::hash<std::thread::id>{}(std::this_thread::get_id()) << 1)};
  std::uint64_t v = rng() ^ (static_cast<std::uint64_t>(::getpid()) * 0x9E3779B97F4A7C15ull) ^
                    static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  return fmt::format("{:016x}", v);
}

std::string host_name() {
  // Host name plus the pid-namespace inode: containers with host networking share a host name but
  // not pids, and a sweeper must only judge pids of its own namespace.
  static const std::string id = [] {
    char buf[256] = {};
    std::string h;
    if (::gethostname(buf, sizeof buf - 1) == 0)
      for (char* c = buf; *c; ++c) h += (std::isalnum(static_cast<unsigned char>(*c)) || *c == '-') ? *c : '_';
    if (h.empty()) h = "host";
    struct stat st {};
    if (::stat("/proc/self/ns/pid", &st) == 0) h += fmt::format("_{}", static_cast<unsigned long long>(st.st_ino));
    return h;
  }();
  return id;
}

std::int64_t now_unix() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void Warner::warn(const std::string& category, const std::string& message) {
  {
    std::lock_guard lk(mu_);
    if (!seen_.insert(category).second) return;
  }
  count_.fetch_add(1);
  // To the log sink (stderr by default, FA4JIT_LOG / jit::set_log_sink); never throws.
  jit::detail::log(LogLevel::warn, "cache: " + message);
}

}  // namespace jit::cache::detail
