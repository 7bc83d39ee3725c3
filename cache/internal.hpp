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
#include <istream>
#include <functional>
#include <sys/types.h>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "cache/store.hpp"

namespace jit::cache::detail {

namespace fs = std::filesystem;

// ---- limits ------------------------------------------------------------------------------------
// Far above anything real (cubins are a few MB, meta.json a few KB) and far below what a forged
// size could make us allocate: every read of an entry, archive member or remote value is capped.
constexpr std::uint64_t kMaxCubinBytes = 64ull << 20;
constexpr std::uint64_t kMaxMetaBytes = 4ull << 20;
constexpr std::uint64_t kMaxRemoteValueBytes = 8 + 4 + kMaxMetaBytes + kMaxCubinBytes;
// Staging and layout trees are two levels deep; anything deeper was planted and is left alone.
constexpr int kMaxRemoveDepth = 16;

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
IoResult io_fail(int err, std::string_view op, const fs::path& p);

// Permission bits of what the cache creates, explicit rather than left to the umask (umask 000
// made a world-writable cache; umask 022 locked the other users of a shared one out).
struct Modes {
  bool shared = false;  // FA4JIT_CACHE_SHARED: group members write too
  // root, v1, tmp, locks, shards: group-writable + setgid (group inherited) + sticky (nobody
  // renames or deletes another user's entries) when shared; else never writable by others.
  mode_t layout_dir() const { return shared ? 03775 : 0755; }
  mode_t entry_dir() const { return shared ? 02755 : 0755; }  // immutable once published
  mode_t file() const { return 0644; }
  mode_t lock_file() const { return shared ? 0664 : 0644; }  // NFS flock needs O_RDWR
};

// Every walk below a tier root goes through directory fds and refuses symlinks on every
// component it names (O_NOFOLLOW), so a link planted in the cache is never followed: it is
// read as "not an entry" and removed as a link.

// Opens `name` (one component) in dirfd as a directory; a symlink or a file fails (ENOTDIR/ELOOP).
Fd open_dir_at(int dirfd, const char* name);
// mkdirat (EEXIST is fine) + open_dir_at. In shared mode the mode is set with fchmod on a
// directory we created, so the umask cannot narrow it. err: errno of the failing step.
Fd make_dir_at(int dirfd, const char* name, mode_t mode, bool force_mode, int* err);
// mkdir -p for a user-given path (its symlinks are the user's choice); the last component gets
// `mode`, missing parents 0755 (both narrowed by the umask unless force_mode).
IoResult make_dirs(const fs::path& dir, mode_t mode, bool force_mode);
// create (O_EXCL, never through a link), write, fsync, close. `shown` names it in errors.
IoResult write_file_at(int dirfd, const char* name, std::string_view data, mode_t mode, bool force_mode,
                       const fs::path& shown);
IoResult fsync_fd(int fd, const fs::path& shown);
// Reads a whole regular file relative to an open directory (two reads through one dirfd see the
// same directory inode). Refuses, without blocking: a symlink (ELOOP), anything but a regular
// file such as a FIFO or a device (EINVAL), more than max_bytes (EFBIG).
std::optional<std::string> read_file_at(int dirfd, const char* name, std::uint64_t max_bytes, int* err = nullptr);
std::string read_problem(std::string_view what, int err);  // "kernel.cubin is a symbolic link", ...
// Removes `name` in dirfd: a symlink, file, FIFO... is unlinked (never followed), a directory is
// emptied through fds (fdopendir) and removed. Best effort; false if something stayed.
bool remove_at(int dirfd, const char* name, int depth = 0);
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
// "" when FA4JIT_CACHE_FAULT is unset or lists only the faults above, else the CacheError text:
// a misspelt fault used to inject nothing, silently.
std::string fault_env_problem();

// ---- environment (env.cpp) -------------------------------------------------------------------
// Strict readers of FA4JIT_* variables: unset or empty gives `dflt`; anything that does not
// parse is a CacheError naming the variable and what it accepts.
bool env_bool(const char* name, bool dflt);  // 1/0, true/false, yes/no, on/off (any case)
std::int64_t env_int(const char* name, std::int64_t dflt, std::int64_t lo, std::int64_t hi);  // decimal integer

// ---- authentication (crypto.cpp, entry.cpp) ------------------------------------------------
// SHA-256 and HMAC-SHA256 from libcrypto, dlopen'ed on first use (only stores with a secret use
// it, so binaries carry no libcrypto dependency). CacheError when no libcrypto can be loaded.
std::string sha256_hex(std::string_view data);
std::string hmac_sha256_hex(std::string_view secret, std::string_view message);
bool equal_constant_time(std::string_view a, std::string_view b);

// What is checked beyond integrity: the deployment secret's MAC and the caller's validator.
class Auth {
 public:
  Auth() = default;
  Auth(std::string secret, Validator validate) : secret_(std::move(secret)), validate_(std::move(validate)) {}
  bool has_secret() const { return !secret_.empty(); }
  // Adds "mac" (HMAC-SHA256 of key and cubin under the secret) when there is a secret.
  void sign(std::string_view key, std::string_view cubin, nlohmann::json& meta) const;
  // For an intact entry: a missing or wrong MAC (with a secret), then the validator.
  Verdict check(std::string_view key, const nlohmann::json& meta, std::string_view cubin) const;

 private:
  std::string secret_;
  Validator validate_;
};

// ---- entries (entry.cpp) -------------------------------------------------------------------
bool valid_key(std::string_view key);
std::string xxh3_128_hex(std::string_view data);
nlohmann::json make_meta(std::string_view key, std::string_view cubin, const nlohmann::json& caller_meta);

struct EntryCheck {
  std::optional<Artifact> artifact;  // set when the entry is good
  bool absent = false;               // no entry dir at all: a plain miss
  bool io_error = false;             // could not read, but not proven bad (e.g. ESTALE): no eviction
  bool foreign = false;              // intact, made by another build (Verdict::foreign)
  std::string problem;               // what was wrong, when not good
};
// Verifies an in-memory (meta, cubin) pair: meta is an object, its key matches, the cubin's size
// and XXH3-128 match what it records.
std::string check_blob(std::string_view key, const nlohmann::json& meta, std::string_view cubin);
// The whole check of an entry's bytes (meta.json text and cubin), as every reader does it: size
// caps, parse, check_blob, then auth (if given). Pure: the fuzzers drive it.
EntryCheck check_entry_bytes(std::string_view key, std::string_view meta_text, std::string cubin, const Auth* auth);
// Reads and verifies the entry dir `name` inside parent_fd (a shard, or tmp/ for an entry
// moved aside) without following symlinks: check_entry_bytes on its two files, both read
// through one dirfd. `origin` becomes Artifact::origin (the tier root).
EntryCheck check_entry_at(int parent_fd, const std::string& name, std::string_view key, const Auth* auth,
                          const fs::path& origin);

// ---- archive (archive.cpp) -----------------------------------------------------------------
// Reads an archive stream ("FA4JITAR1\n", entries, trailer), handing each complete entry's
// (meta.json text, cubin) to on_entry. Member lengths are capped and read in chunks, so a forged
// length costs no more memory than the bytes actually present. Pure: the fuzzer drives it.
struct ArchiveScan {
  bool magic = false;                 // false: not an fa4jit archive, nothing else was read
  std::size_t entries = 0;            // complete entries handed out
  std::vector<std::string> problems;  // truncation, bad header, trailer count mismatch
};
ArchiveScan read_archive(std::istream& in,
                         const std::function<void(std::string&& meta_text, std::string&& cubin)>& on_entry);
std::string archive_magic();

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
  // The lock file is created with `mode` and never opened through a symlink.
  Result acquire(const fs::path& lock_file, std::chrono::milliseconds timeout, mode_t mode = 0644);
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
  DiskTier(fs::path root, Warner& warner, const Auth& auth, Modes modes);
  const fs::path& root() const { return root_; }
  fs::path base() const { return root_ / "v1"; }
  fs::path entry_dir(std::string_view key) const;
  bool writable() const { return writable_; }
  const Modes& modes() const { return modes_; }
  // Tries to create the layout and a probe file: permission bits say nothing to root or on
  // many network filesystems, so only an actual write proves writability. `why`: the failure.
  bool probe_writable(std::string* why = nullptr);
  // The root (its own symlinks are the user's choice), then v1 without following a link.
  Fd open_base() const;
  // Why this tier cannot be trusted, or "" (docs/CACHE.md "Trust"): every directory from the
  // root down to the entries (root, v1, shards, tmp, locks, whatever else is a directory in v1)
  // must be owned by this user or root and writable by no one else; a shared tier (Modes.shared)
  // also trusts its group, never every user. A sticky bit does not help: whoever may create a
  // name there may create an entry. Directories that do not exist yet are ours once created.
  // Checked once, before anything is read or written: a trusted directory can only be changed by
  // this user or root, so it stays trusted.
  std::string distrust() const;

  // A verified entry or nullopt; a bad entry is evicted when this tier is writable.
  std::optional<Artifact> load(std::string_view key, bool touch);
  // Stage, fsync, rename. Returns "" on success (or when another writer won), else the error.
  std::string publish(std::string_view key, std::string_view cubin, const nlohmann::json& full_meta);

  // One name found under v1/<shard>/ (or a stray non-directory in v1/ itself: shard empty).
  struct Listed {
    std::string key;    // the entry's file name (a key, when it is a real entry)
    std::string shard;  // "ab"; empty for a stray name directly in v1/
    fs::path dir;
    bool is_dir = false;  // a real directory (never a symlink)
    std::uint64_t bytes = 0;
    std::int64_t last_use = 0;  // entry dir mtime, refreshed on hits (rate-limited)
  };
  std::vector<Listed> scan() const;
  EntryCheck check(const Listed& l) const;
  nlohmann::json read_meta(const Listed& l) const;  // null when absent or unreadable

  // Moves the name out of the visible namespace (rename is atomic), then deletes it (a symlink
  // as a link). For a bad entry (bad_entry=true) a concurrently re-published good one is put
  // back instead. Returns 0 when removed, else the errno (ENOENT: somebody else removed it,
  // EEXIST: put back, EPERM/EACCES: not ours to remove in a sticky shared dir).
  int evict(const Listed& l, bool bad_entry = true);
  std::uint64_t evicted() const { return evicted_.load(); }
  Listed listed(std::string_view key) const;  // the Listed of a key's entry dir
  // Removes staging dirs left by killed writers: dead pid on this host, or older than max_age.
  std::size_t sweep_tmp(std::chrono::seconds max_age);

 private:
  void touch(const Listed& l);
  fs::path root_;
  Warner& warner_;
  const Auth& auth_;
  Modes modes_;
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
// Remote value format: "FA4JITR1" | u32 LE meta length | meta JSON | cubin bytes. decode_remote
// gives the meta.json text and the cubin (false: not that format, or over the size caps).
std::string encode_remote(const nlohmann::json& meta, std::string_view cubin);
bool decode_remote(std::string_view value, std::string& meta_text, std::string& cubin);

}  // namespace jit::cache::detail
