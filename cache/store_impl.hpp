// Store::Impl, shared by store.cpp, maintenance.cpp and archive.cpp.
#pragma once
#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "cache/internal.hpp"

namespace jit::cache {

struct Store::Impl {
  explicit Impl(Options o);

  Options opt;
  detail::Warner warner;
  detail::Auth auth;         // the secret's MAC and opt.validate, for every tier but bundles
  detail::Auth bundle_auth;  // opt.validate only: for the read-only bundle tiers
  std::vector<std::unique_ptr<detail::DiskTier>> tiers;
  detail::DiskTier* wtier = nullptr;  // first writable tier, receives new entries
  std::unique_ptr<detail::RemoteTier> remote;
  std::filesystem::path lock_dir;  // FA4JIT_CACHE_LOCK_DIR (node-local) or <wtier>/v1/locks

  // Memory tier: used only when an entry could not be written to disk (no writable tier, disk
  // full), so load() stays consistent with publish() within this process.
  std::mutex mem_mu;
  std::unordered_map<std::string, Artifact> mem;

  // In-process de-duplication of same-key compiles (flock alone does not help when there is no
  // writable tier). One timed mutex per key ever compiled here: a few bytes per kernel.
  std::mutex inflight_mu;
  std::unordered_map<std::string, std::shared_ptr<detail::TimedMutex>> inflight;

  std::mutex write_error_mu;
  std::string last_write_error;  // of the latest failed publish: "write <path>: No space left on device"

  std::mutex prune_mu;
  std::chrono::steady_clock::time_point last_auto_prune{};
  bool auto_pruned = false;
  std::int64_t prune_interval_s = 60;

  struct Counters {
    std::atomic<std::uint64_t> hits{0}, misses{0}, remote_hits{0}, compiles{0}, lock_timeouts{0}, publishes{0},
        publish_failures{0}, evictions{0};
  } n;

  std::optional<Artifact> load_local(std::string_view key);
  // Writes an entry whose meta is already complete; never throws for disk errors. Returns where
  // it went (Artifact::written): the tier root or "memory", plus " + <remote>" when sent there.
  std::string publish_full(std::string_view key, std::string_view cubin, const nlohmann::json& full, bool to_remote);
  void maybe_auto_prune();
  std::size_t prune_locked(std::uint64_t max_bytes, std::chrono::milliseconds lock_wait);
  std::filesystem::path lock_path(std::string_view key) const;
  // Checks a remote value; "" when it may be served (and written to disk).
  std::string check_remote(std::string_view key, std::string_view value, Artifact& out) const;
  std::string no_writable_tier(std::string_view op) const;  // the CacheError message
  // One warning per untrusted root, saying why and where kernels go instead.
  void warn_untrusted(const std::vector<std::pair<std::filesystem::path, std::string>>& untrusted);
};

void require_key(std::string_view key);  // throws CacheError on anything but 32 lowercase hex

}  // namespace jit::cache
