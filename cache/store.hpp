// The on-disk kernel cache: content-addressed, immutable entries published atomically.
//
// Layout of a tier root:   <root>/v1/<key[0:2]>/<key>/{kernel.cubin, meta.json}
//                          <root>/v1/locks/<key>.lock   (never deleted)
//                          <root>/v1/tmp/               (private staging dirs)
// Keys are 32 lowercase hex chars (XXH3-128 of the key inputs, computed by the generator).
// meta.json holds the caller's metadata plus what verification needs (cubin size and digest,
// and an HMAC with a deployment secret); it is written last and is the entry's commit marker.
// Who may write a cache and what is checked before an entry is served: docs/CACHE.md.
#pragma once
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace jit::cache {

struct Artifact {
  std::string cubin;
  nlohmann::json meta;  // caller metadata + "cubin_size", "cubin_xxh3_128", "key", "created" (+ "mac")
  std::string origin;   // "compiled", or the tier root / "remote" it was read from
  // get_or_compile after a compile: where the new entry went ("<tier root>", "memory", plus
  // " + <remote>" when a remote tier was also given it), for the compile's log line.
  std::string written{};
};

// What Options::validate says about an entry that is intact (its size and digest match).
struct Verdict {
  std::string problem;   // empty: the entry is what its key says it is
  bool foreign = false;  // made by another build, so it cannot be judged here: never served,
                         // but verify() keeps it (another version sharing the cache may use it)
};
// Checks an intact entry against its key before it is served from any tier (disk, remote,
// archive import, verify). The runtime recomputes the key from the entry's recorded inputs and
// looks for the key-derived kernel names in the cubin (runtime/cache_auth.cpp).
using Validator = std::function<Verdict(std::string_view key, const nlohmann::json& meta, std::string_view cubin)>;

struct Options {
  // Tiers searched in order; the first writable one receives new entries. Empty: memory only.
  std::vector<std::filesystem::path> roots;
  // Where kernels go when no root is trusted and writable because a root is not trusted
  // (docs/CACHE.md "Trust"): a directory of this user's own. options_from_env() sets the user's
  // default cache ($XDG_CACHE_HOME/fa4jit, else ~/.cache/fa4jit). Empty: memory only then.
  std::filesystem::path private_root;
  // Read-only tiers shipped with an install (`fa4jit bundle`; FA4JIT_BUNDLE_PATH), searched after
  // `roots`: never written, evicted or pruned. Their entries pass the same digest and validator
  // checks as any tier's, but need no MAC under `secret`: whoever can write an install's bundle can
  // replace the library itself (docs/CACHE.md). Paths that do not exist are skipped.
  std::vector<std::filesystem::path> bundles;
  bool sealed = false;                             // a miss is a CacheMissError, never a compile
  std::string remote_url;                          // redis://host:port/db, empty: no remote tier
  std::chrono::milliseconds lock_timeout{120000};  // then compile without the lock
  std::uint64_t max_bytes = 0;                     // 0: no size cap
  // Deployment secret (FA4JIT_CACHE_SECRET, at least 16 bytes): every entry carries an
  // HMAC-SHA256 of (key, cubin) under it, and entries without a valid one are never served,
  // from any tier. Needs libcrypto (OpenSSL 3 or 1.1), loaded at run time only when set.
  std::string secret;
  // Several users share the cache (FA4JIT_CACHE_SHARED=1): layout dirs are created
  // group-writable, setgid and sticky whatever the umask; entries and files stay owner-only writable.
  bool shared = false;
  Validator validate;  // empty: integrity checks only
  // Set by options_from_env(): roots that resolve to nothing are then worth a warning (an
  // explicitly empty `roots` is a deliberate memory-only store).
  bool warn_if_memory_only = false;
  bool bundles_from_env = false;  // FA4JIT_BUNDLE_PATH was set (even empty: no bundles)
};

struct EntryInfo {
  std::string key;
  std::filesystem::path dir;
  std::uint64_t bytes = 0;
  nlohmann::json meta;
};

struct VerifyReport {
  std::size_t checked = 0;
  std::size_t removed = 0;
  std::size_t foreign = 0;            // intact entries of another build (Verdict::foreign): kept
  std::vector<std::string> problems;  // "key: what was wrong"
};

// Counters for diagnostics and tests (since this Store was constructed).
struct Stats {
  std::uint64_t hits = 0;  // load() found a verified entry (any tier, incl. remote)
  std::uint64_t misses = 0;
  std::uint64_t remote_hits = 0;       // subset of hits: materialised from the remote tier
  std::uint64_t compiles = 0;          // compile() callbacks run by get_or_compile
  std::uint64_t lock_timeouts = 0;     // gave up waiting for the per-key lock, compiled anyway
  std::uint64_t publishes = 0;         // entries written to the writable tier
  std::uint64_t publish_failures = 0;  // disk errors (the caller kept its kernel)
  std::uint64_t evictions = 0;         // bad entries removed (load, verify, import)
  std::uint64_t warnings = 0;          // lines written to stderr
};

// Result of import_archive().
struct ImportReport {
  std::size_t imported = 0;  // new entries published
  std::size_t present = 0;   // already in a tier
  std::size_t rejected = 0;  // failed verification (digest, size, key, meta)
  std::vector<std::string> problems;
};

class Store {
 public:
  explicit Store(Options options);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Options from the environment: FA4JIT_CACHE_PATH (':'-separated tiers), else
  // FA4JIT_CACHE_DIR, else $XDG_CACHE_HOME/fa4jit, else ~/.cache/fa4jit;
  // FA4JIT_SEALED, FA4JIT_REMOTE_CACHE, FA4JIT_CACHE_MAX_BYTES, FA4JIT_CACHE_LOCK_TIMEOUT_MS,
  // FA4JIT_CACHE_SECRET, FA4JIT_CACHE_SHARED. A value that does not parse is a CacheError
  // naming the variable (never a silent default).
  static Options options_from_env();

  // A verified entry, or nullopt. A corrupt or mismatched entry is evicted (where writable)
  // and reported as a miss; it is never returned.
  std::optional<Artifact> load(std::string_view key);

  // Atomic publish into the first writable tier (and the remote tier). Disk errors become one
  // warning on stderr, never an exception: the caller keeps its in-memory kernel.
  void publish(std::string_view key, std::string_view cubin, const nlohmann::json& meta);

  // load(); on a miss take the per-key lock (bounded wait), load() again, then compile() and
  // publish. `what` names the config in errors (sealed-mode misses, compile failures).
  Artifact get_or_compile(std::string_view key, const std::function<Artifact()>& compile, std::string_view what);

  std::vector<EntryInfo> list() const;
  // Checks every entry of every tier (hash, meta.json, key) and removes bad ones from writable
  // tiers. `extra` may add a check of a sound entry (e.g. loading it on a GPU): a non-empty
  // string names the problem and the entry is treated as bad.
  VerifyReport verify(const std::function<std::string(const Artifact&)>& extra = {});
  // Least recently used first; returns entries removed. CacheError without a writable tier.
  std::size_t prune(std::uint64_t max_bytes);
  // Removes every entry of the writable tier (and the memory tier). CacheError when there is no
  // writable tier (unless the store is memory-only by choice) or an entry could not be removed.
  std::size_t clear();
  const Options& options() const;

  // One-file archive of verified entries (all tiers, first tier wins), keys empty = all;
  // format in docs/CACHE.md. Written atomically (temp file + rename). Returns entries written.
  // Throws CacheError if the file cannot be written or a requested key is not in the cache.
  std::size_t export_archive(const std::filesystem::path& path, const std::vector<std::string>& keys = {});
  // Re-verifies every entry and publishes it into the writable tier. Throws CacheError if
  // the file is not an fa4jit archive or there is no writable tier; a truncated or corrupt entry
  // is reported, not thrown.
  ImportReport import_archive(const std::filesystem::path& path);
  Stats stats() const;
  // The tier that receives new entries (empty path: memory only).
  std::filesystem::path writable_root() const;
  // Why the latest failed write of an entry failed ("write <path>: No space left on device");
  // empty when none failed. Stats::publish_failures counts them.
  std::string last_write_error() const;

 private:
  struct Impl;
  Impl* impl_;
};

// A byte count: digits with an optional decimal fraction and a binary-multiple suffix
// (K, M, G, T, optionally followed by B or iB; k/m/g/t too), e.g. "4096", "512M", "1.5GiB".
// Negative numbers, nan, inf, fractions of a byte, overflow and anything else are a
// CacheError naming `what` (the variable or flag the text came from).
std::uint64_t parse_size(std::string_view text, std::string_view what);

}  // namespace jit::cache
