// Per-key advisory lock with a bounded wait. flock() has no timeout, so we poll LOCK_NB with a
// growing sleep (1 ms .. 50 ms): cheap, thread-safe (no SIGALRM), and a holder that died releases
// the lock with its fd, so there is no stale-lock state to clean up.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

#include "cache/internal.hpp"

namespace jit::cache::detail {

FileLock::~FileLock() { release(); }

void FileLock::release() {
  if (fd_) {
    ::flock(fd_.get(), LOCK_UN);
    fd_ = Fd();  // closes
  }
}

FileLock::Result FileLock::acquire(const fs::path& lock_file, std::chrono::milliseconds timeout, mode_t mode) {
  release();
  // O_CREAT without O_EXCL: every process opens the same inode; the file is never unlinked.
  // O_NOFOLLOW: a symlink planted in place of a lock file is not opened (nor created through):
  // the caller then goes on without the lock, which costs at most a duplicate compile.
  auto open_lock = [&](int flags) {
    int fd = ::open(lock_file.c_str(), flags | O_CREAT | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd >= 0 && (mode & 020)) ::fchmod(fd, mode);  // shared: group members open it O_RDWR too
    return Fd(fd);
  };
  Fd fd = open_lock(O_RDWR);
  if (!fd && errno == ENOENT) {
    make_dirs(lock_file.parent_path(), 0755, false);
    fd = open_lock(O_RDWR);
  }
  // Another user's lock file in a shared cache made before group-writable modes: flock() needs
  // only a read-only fd on local filesystems.
  if (!fd && errno == EACCES) fd = open_lock(O_RDONLY);
  if (!fd) return Result::unavailable;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  auto nap = std::chrono::milliseconds(1);
  while (true) {
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) == 0) {
      fd_ = std::move(fd);
      return Result::acquired;
    }
    if (errno == EINTR) continue;
    // ENOLCK/EOPNOTSUPP: a filesystem without locks (some NFS mounts). Go on without it.
    if (errno != EWOULDBLOCK) return Result::unavailable;
    auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return Result::timed_out;
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(nap, deadline - now));
    nap = std::min(nap * 2, std::chrono::milliseconds(50));
  }
}

}  // namespace jit::cache::detail
