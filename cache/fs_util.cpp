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

static IoResult io_fail(int err, std::string_view op, const fs::path& p) {
  return IoResult{err, fmt::format("{} {}: {}", op, p.string(), std::strerror(err))};
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

IoResult write_file_durable(const fs::path& path, std::string_view data) {
  if (fault("enospc")) return io_fail(ENOSPC, "write", path);
  Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (!fd) return io_fail(errno, "create", path);
  const char* p = data.data();
  std::size_t left = data.size();
  while (left > 0) {
    ssize_t n = ::write(fd.get(), p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return io_fail(errno, "write", path);  // ENOSPC, EDQUOT, EFBIG (RLIMIT_FSIZE), EIO
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  // fsync before the rename that publishes: otherwise a crash can leave a renamed entry whose
  // data blocks never reached the disk (zero-filled cubin after reboot).
  if (::fsync(fd.get()) != 0) return io_fail(errno, "fsync", path);
  int raw = fd.release();
  if (::close(raw) != 0) return io_fail(errno, "close", path);  // NFS reports write errors here
  return {};
}

IoResult fsync_dir(const fs::path& dir) {
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) return io_fail(errno, "open dir", dir);
  // Some filesystems refuse fsync on a directory (EINVAL); that is not a write failure.
  if (::fsync(fd.get()) != 0 && errno != EINVAL && errno != EROFS) return io_fail(errno, "fsync dir", dir);
  return {};
}

IoResult make_dirs(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return IoResult{ec.value() ? ec.value() : EIO, fmt::format("mkdir {}: {}", dir.string(), ec.message())};
  return {};
}

std::optional<std::string> read_file(const fs::path& path, std::uint64_t max_bytes, int* err) {
  return read_file_at(AT_FDCWD, path.c_str(), max_bytes, err);
}

std::optional<std::string> read_file_at(int dirfd, const char* name, std::uint64_t max_bytes, int* err) {
  auto fail = [&](int e) -> std::optional<std::string> {
    if (err) *err = e;
    return std::nullopt;
  };
  Fd fd(::openat(dirfd, name, O_RDONLY | O_CLOEXEC));
  if (!fd) return fail(errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return fail(errno);
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

bool remove_tree(const fs::path& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return errno == ENOENT || ::unlink(dir.c_str()) == 0;
  struct Closer {
    DIR* d;
    ~Closer() { ::closedir(d); }
  } closer{d};
  bool ok = true;
  while (dirent* e = ::readdir(d)) {
    std::string_view name(e->d_name);
    if (name == "." || name == "..") continue;
    fs::path child = dir / e->d_name;
    struct stat st {};
    if (::lstat(child.c_str(), &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) ok = remove_tree(child) && ok;
    else if (::unlink(child.c_str()) != 0 && errno != ENOENT) ok = false;
  }
  if (::rmdir(dir.c_str()) != 0 && errno != ENOENT) ok = false;
  return ok;
}

std::string random_suffix() {
  // Seeded per thread from random_device + pid + thread id: a forked child re-seeds because its
  // thread_local is re-created lazily only if it was never used; mix the pid in at each call.
  thread_local std::mt19937_64 rng{std::random_device{}() ^ (std::hash<std::thread::id>{}(std::this_thread::get_id()) << 1)};
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
