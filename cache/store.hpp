// The on-disk kernel cache: content-addressed, immutable entries published atomically.
//
// Layout of a tier root:   <root>/v1/<key[0:2]>/<key>/{kernel.cubin, meta.json}
//                          <root>/v1/locks/<key>.lock   (never deleted)
//                          <root>/v1/tmp/               (private staging dirs)
// Keys are 32 lowercase hex chars (XXH3-128 of the key inputs, computed by the generator).
// meta.json holds the caller's metadata plus what verification needs (cubin size and digest);
// it is written last and is the entry's commit marker.
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
  nlohmann::json meta;  // caller metadata + "cubin_size", "cubin_xxh3_128", "key", "created"
  std::string origin;   // "compiled", or the tier root / "remote" it was read from
};

struct Options {
  // Tiers searched in order; the first writable one receives new entries. Empty: memory only.
  std::vector<std::filesystem::path> roots;
  bool sealed = false;                                 // a miss is a CacheMissError, never a compile
  std::string remote_url;                              // redis://host:port/db, empty: no remote tier
  std::chrono::milliseconds lock_timeout{120000};      // then compile without the lock
  std::uint64_t max_bytes = 0;                         // 0: no size cap
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
  std::vector<std::string> problems;  // "key: what was wrong"
};

// Added: counters for diagnostics and tests (since this Store was constructed).
struct Stats {
  std::uint64_t hits = 0;             // load() found a verified entry (any tier, incl. remote)
  std::uint64_t misses = 0;
  std::uint64_t remote_hits = 0;      // subset of hits: materialised from the remote tier
  std::uint64_t compiles = 0;         // compile() callbacks run by get_or_compile
  std::uint64_t lock_timeouts = 0;    // gave up waiting for the per-key lock, compiled anyway
  std::uint64_t publishes = 0;        // entries written to the writable tier
  std::uint64_t publish_failures = 0; // disk errors (the caller kept its kernel)
  std::uint64_t evictions = 0;        // bad entries removed (load, verify, import)
  std::uint64_t warnings = 0;         // lines written to stderr
};

// Added: result of import_archive().
struct ImportReport {
  std::size_t imported = 0;  // new entries published
  std::size_t present = 0;   // already in a tier
  std::size_t rejected = 0;  // failed verification (digest, size, key, meta)
  std::vector<std::string> problems;
};

// A byte count as FA4JIT_CACHE_MAX_BYTES and `fa4jit cache prune --max-size` take it: digits
// (a decimal fraction allowed) with an optional B, K/KB/KiB, M/MB/MiB or G/GB/GiB suffix (powers
// of 1024). CacheError naming `what` for anything else (negative, nan, inf, overflow, junk).
std::uint64_t parse_size(const std::string& text, std::string_view what);

class Store {
 public:
  explicit Store(Options options);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Options from the environment: FA4JIT_CACHE_PATH (':'-separated tiers), else
  // FA4JIT_CACHE_DIR, else $XDG_CACHE_HOME/fa4jit, else ~/.cache/fa4jit;
  // FA4JIT_SEALED=1; FA4JIT_REMOTE_CACHE; FA4JIT_CACHE_MAX_BYTES.
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
  std::size_t prune(std::uint64_t max_bytes);  // least recently used first; returns entries removed
  std::size_t clear();                      // removes every entry of the writable tier
  const Options& options() const;

  // Added. One-file archive of verified entries (all tiers, first tier wins), keys empty = all;
  // format in docs/CACHE.md. Written atomically (temp file + rename). Returns entries written.
  // Throws CacheError if the file cannot be written or a requested key is not in the cache.
  std::size_t export_archive(const std::filesystem::path& path, const std::vector<std::string>& keys = {});
  // Added. Re-verifies every entry and publishes it into the writable tier. Throws CacheError if
  // the file is not an fa4jit archive or there is no writable tier; a truncated or corrupt entry
  // is reported, not thrown.
  ImportReport import_archive(const std::filesystem::path& path);
  Stats stats() const;  // Added.
  // Added: the tier that receives new entries (empty path: memory only).
  std::filesystem::path writable_root() const;

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace jit::cache
