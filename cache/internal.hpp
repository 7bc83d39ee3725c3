// Internal pieces of the kernel cache, shared by the cache/*.cpp files. Not installed.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "cache/store.hpp"

namespace jit::cache::detail {

namespace fs = std::filesystem;

// ---- small POSIX helpers (fs_util.cpp) ---------------------------------------------------

// Owns one file descriptor; closes it exactly once.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd();
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }

 private:
  int fd_ = -1;
};

// Outcome of a filesystem step: errno 0 = fine. Disk errors are values, not exceptions, because
// the cache must degrade (warn and keep the in-memory kernel) rather than fail the caller.
struct IoResult {
  int err = 0;
  std::string what;  // "write /path: No space left on device"
  explicit operator bool() const { return err == 0; }
};

IoResult write_file_durable(const fs::path& path, std::string_view data);  // create, write, fsync
IoResult fsync_dir(const fs::path& dir);
IoResult make_dirs(const fs::path& dir);
// Reads a whole file, refusing anything larger than max_bytes (a corrupt size must not OOM us).
std::optional<std::string> read_file(const fs::path& path, std::uint64_t max_bytes, int* err = nullptr);
// Same, relative to an open directory (dirfd), so that two reads see the same directory inode.
std::optional<std::string> read_file_at(int dirfd, const char* name, std::uint64_t max_bytes, int* err = nullptr);
// Removes a directory tree without std::filesystem::remove_all (which misbehaves on some
// distributed filesystems, see DeepGEMM). Best effort; returns false if something stayed.
bool remove_tree(const fs::path& dir);
std::string random_suffix();  // 16 hex chars, distinct across threads and forks
std::string host_name();      // sanitised for use in file names
std::int64_t now_unix();

// ---- fault injection seam (fs_util.cpp) ----------------------------------------------------
// FA4JIT_CACHE_FAULT is a comma-separated list, read at each use (tests set it in children):
//   readonly            every tier is treated as read-only (tests run as root: chmod stops nothing)
//   readonly:<root>     that tier only
//   enospc              every cache write fails with ENOSPC
//   kill_after_cubin    SIGKILL self after the staged cubin is written (before meta.json)
//   kill_before_rename  SIGKILL self after staging is complete, before the rename
bool fault(std::string_view name, const fs::path& root = {});

// ---- entries (entry.cpp) -------------------------------------------------------------------
bool valid_key(std::string_view key);
std::string xxh3_128_hex(std::string_view data);
nlohmann::json make_meta(std::string_view key, std::string_view cubin, const nlohmann::json& caller_meta);

struct EntryCheck {
  std::optional<Artifact> artifact;  // set when the entry is good
  bool absent = false;               // no entry dir at all: a plain miss
  bool io_error = false;             // could not read, but not proven bad (e.g. ESTALE): no eviction
  std::string problem;               // what was wrong, when not good
};
// Reads and verifies <dir>: meta.json parses and is an object, its key matches, the cubin's size
// and XXH3-128 match what meta.json recorded.
EntryCheck check_entry(const fs::path& dir, std::string_view key);
// Verifies an in-memory (meta, cubin) pair the same way (remote values, archive entries).
std::string check_blob(std::string_view key, const nlohmann::json& meta, std::string_view cubin);

// ---- file lock (file_lock.cpp) -------------------------------------------------------------
// flock() on a lock file that is never deleted (deleting lock files is how FlashInfer's filelock
// produced stale handles on NFS). Only de-duplicates work: callers must stay correct without it.
class FileLock {
 public:
  enum class Result { acquired, timed_out, unavailable };
  FileLock() = default;
  ~FileLock();
  FileLock(FileLock&&) = default;
  FileLock& operator=(FileLock&&) = default;
  // Polls LOCK_EX|LOCK_NB with a growing sleep until `timeout`; zero timeout = a single try.
  Result acquire(const fs::path& lock_file, std::chrono::milliseconds timeout);
  bool held() const { return static_cast<bool>(fd_); }
  void release();

 private:
  Fd fd_;
};

// ---- timed mutex -----------------------------------------------------------------------------
// std::timed_mutex::try_lock_until maps to pthread_mutex_clocklock, which ThreadSanitizer (GCC 12)
// does not intercept: every unlock is then reported as a bogus error. A mutex + condvar does the
// same job and keeps TSan runs of the whole runtime clean.
class TimedMutex {
 public:
  bool try_lock() {
    std::lock_guard lk(m_);
    if (busy_) return false;
    busy_ = true;
    return true;
  }
  bool try_lock_until(std::chrono::steady_clock::time_point deadline) {
    std::unique_lock lk(m_);
    if (!cv_.wait_until(lk, deadline, [&] { return !busy_; })) return false;
    busy_ = true;
    return true;
  }
  bool try_lock_for(std::chrono::milliseconds d) { return try_lock_until(std::chrono::steady_clock::now() + d); }
  void lock() {
    std::unique_lock lk(m_);
    cv_.wait(lk, [&] { return !busy_; });
    busy_ = true;
  }
  void unlock() {
    {
      std::lock_guard lk(m_);
      busy_ = false;
    }
    cv_.notify_one();
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  bool busy_ = false;
};

// ---- warnings -------------------------------------------------------------------------------
// One warning per category per Store (a process normally holds one Store): a broken cache dir
// must not flood the log with one line per kernel.
class Warner {
 public:
  void warn(const std::string& category, const std::string& message);
  std::uint64_t count() const { return count_.load(); }

 private:
  std::mutex mu_;
  std::set<std::string> seen_;
  std::atomic<std::uint64_t> count_{0};
};

// ---- disk tier (disk_tier.cpp) -------------------------------------------------------------
class DiskTier {
 public:
  DiskTier(fs::path root, Warner& warner);
  const fs::path& root() const { return root_; }
  fs::path base() const { return root_ / "v1"; }
  fs::path entry_dir(std::string_view key) const;
  fs::path lock_file(std::string_view key) const;
  bool writable() const { return writable_; }
  // Tries to create the layout and a probe file: permission bits say nothing to root or on
  // many network filesystems, so only an actual write proves writability.
  bool probe_writable();

  // A verified entry or nullopt; a bad entry is evicted when this tier is writable.
  std::optional<Artifact> load(std::string_view key, bool touch);
  // Stage, fsync, rename. Returns "" on success (or when another writer won), else the error.
  std::string publish(std::string_view key, std::string_view cubin, const nlohmann::json& full_meta);
  // Moves the entry out of the visible namespace (rename is atomic), then deletes it. For a bad
  // entry (bad_entry=true) a concurrently re-published good one is put back instead.
  bool evict(std::string_view key, const fs::path& dir, bool bad_entry = true);
  std::uint64_t evicted() const { return evicted_.load(); }

  struct Listed {
    std::string key;
    fs::path dir;
    std::uint64_t bytes = 0;
    std::int64_t last_use = 0;  // entry dir mtime, refreshed on hits (rate-limited)
  };
  std::vector<Listed> scan() const;
  // Removes staging dirs left by killed writers: dead pid on this host, or older than max_age.
  std::size_t sweep_tmp(std::chrono::seconds max_age);

 private:
  void touch(const fs::path& dir);
  fs::path root_;
  Warner& warner_;
  bool writable_ = false;
  std::atomic<std::uint64_t> evicted_{0};
};

// ---- remote tier (redis_tier.cpp) ----------------------------------------------------------
class RemoteTier {
 public:
  virtual ~RemoteTier() = default;
  // Raw value or nullopt (miss, error, backoff). Never throws, every call is time-bounded.
  virtual std::optional<std::string> get(std::string_view key) = 0;
  virtual void put_nx(std::string_view key, std::string_view value) = 0;
  virtual std::string describe() const = 0;
};
// nullptr when url is empty, unparsable or hiredis is not compiled in (with one warning).
std::unique_ptr<RemoteTier> make_remote(const std::string& url, Warner& warner);
// Remote value format: "FA4JITR1" | u32 LE meta length | meta JSON | cubin bytes.
std::string encode_remote(const nlohmann::json& meta, std::string_view cubin);
bool decode_remote(std::string_view value, nlohmann::json& meta, std::string& cubin);

}  // namespace jit::cache::detail
