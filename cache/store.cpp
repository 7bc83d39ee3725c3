// Store: tiers in order (memory fallback, disk tiers, remote), the get_or_compile protocol and
// options_from_env(). Correctness comes from atomic publish + verify-on-load; locks only save work.
#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cache/store_impl.hpp"
#include "fa4jit/errors.hpp"

namespace jit::cache {

namespace fs = std::filesystem;
using detail::DiskTier;
using detail::FileLock;

void require_key(std::string_view key) {
  if (!detail::valid_key(key))
    throw CacheError(fmt::format("cache key '{}' is not 32 lowercase hex characters (an XXH3-128 digest)", key));
}

Store::Impl::Impl(Options o) : opt(std::move(o)), auth(opt.secret, opt.validate), bundle_auth("", opt.validate) {
  if (std::string bad = detail::fault_env_problem(); !bad.empty()) throw CacheError(bad);
  if (!opt.secret.empty()) {
    // A short secret can be guessed offline from any one signed entry.
    if (opt.secret.size() < 16)
      throw CacheError(
          fmt::format("FA4JIT_CACHE_SECRET is {} bytes long; use at least 16 random bytes (e.g. "
                      "`openssl rand -hex 32`)",
                      opt.secret.size()));
    detail::sha256_hex("");  // loads libcrypto now: a CacheError here, not at the first entry
  }
  const detail::Modes modes{opt.shared};
  std::vector<std::string> names, why_not;
  std::vector<std::pair<fs::path, std::string>> untrusted;  // root, why
  auto add_root = [&](const fs::path& root) {
    auto t = std::make_unique<DiskTier>(root, warner, auth, modes);
    // Trust first: an untrusted tier is neither read nor written (not even probed).
    if (std::string why = t->distrust(); !why.empty()) {
      untrusted.emplace_back(root, std::move(why));
      return;
    }
    // Writability is probed by writing, not by permission bits (root ignores them, NFS lies).
    std::string why;
    if (t->probe_writable(&why)) {
      if (!wtier) wtier = t.get();
    } else {
      why_not.push_back(why);
    }
    names.push_back(root.string());
    tiers.push_back(std::move(t));
  };
  for (const auto& root : opt.roots)
    if (!root.empty()) add_root(root);
  // Nothing trusted to write to because a root was refused: this user's own directory instead.
  const bool private_is_a_root = std::find(opt.roots.begin(), opt.roots.end(), opt.private_root) != opt.roots.end();
  if (!wtier && !untrusted.empty() && !opt.private_root.empty() && !private_is_a_root) add_root(opt.private_root);
  warn_untrusted(untrusted);
  // Bundles after the writable roots: a kernel compiled into the user's cache (a newer build of the
  // same key cannot differ: the key covers every input) is found first either way.
  for (const auto& root : opt.bundles) {
    std::error_code ec;
    if (root.empty() || !fs::is_directory(root, ec)) continue;
    tiers.push_back(std::make_unique<DiskTier>(root, warner, bundle_auth, modes));  // never probed: read-only
  }
  // An untrusted root already said where kernels go; a trusted one that is not writable says why here.
  if (!wtier && !names.empty())
    warner.warn("no-writable-tier",
                fmt::format("no writable cache directory among [{}] ({}); compiled kernels are kept in memory only "
                            "(set FA4JIT_CACHE_DIR to a writable directory; a cache shared between users needs "
                            "FA4JIT_CACHE_SHARED=1, docs/CACHE.md)",
                            fmt::join(names, ", "), fmt::join(why_not, "; ")));
  if (names.empty() && untrusted.empty() && opt.warn_if_memory_only)
    warner.warn("no-root",
                "no cache directory: FA4JIT_CACHE_PATH, FA4JIT_CACHE_DIR, XDG_CACHE_HOME (absolute) and "
                "HOME name none; compiled kernels are kept in memory only (set FA4JIT_CACHE_DIR)");
  // Leftovers of writers killed mid-publish: cheap (tmp/ is normally empty), and only dead pids of
  // this host's pid namespace or hour-old dirs are touched.
  if (wtier) wtier->sweep_tmp(std::chrono::hours(1));
  if (const char* ld = std::getenv("FA4JIT_CACHE_LOCK_DIR"); ld && *ld)
    lock_dir = ld;
  else if (wtier)
    lock_dir = wtier->base() / "locks";
  prune_interval_s = detail::env_int("FA4JIT_CACHE_PRUNE_INTERVAL_S", 60, 0, std::int64_t{1} << 40);
  remote = detail::make_remote(opt.remote_url, warner);
}

void Store::Impl::warn_untrusted(const std::vector<std::pair<fs::path, std::string>>& untrusted) {
  const std::string where =
      wtier ? fmt::format("kernels are compiled into {} instead", wtier->root().string())
            : std::string("compiled kernels are kept in memory only (set FA4JIT_CACHE_DIR to a directory of your own)");
  for (const auto& [root, why] : untrusted)
    warner.warn("untrusted:" + root.string(),
                fmt::format("cache directory {} is not trusted: {}. Whoever can write it could choose the kernels "
                            "this process runs, so its entries are not used and nothing is written there; {}. A "
                            "cache is trusted when every directory from its root to its entries is owned by you or "
                            "root and writable by no one else (FA4JIT_CACHE_SHARED=1: its group too; docs/CACHE.md)",
                            root.string(), why, where));
}

std::string Store::Impl::no_writable_tier(std::string_view op) const {
  std::vector<std::string> names;
  for (const auto& t : tiers) names.push_back(t->root().string());
  return fmt::format("cache {}: no writable cache tier among [{}] (read-only or not a directory); nothing was removed",
                     op, fmt::join(names, ", "));
}

std::string Store::Impl::check_remote(std::string_view key, std::string_view value, Artifact& out) const {
  std::string meta_text, cubin;
  if (!detail::decode_remote(value, meta_text, cubin)) return "not an fa4jit cache value, or over the size caps";
  detail::EntryCheck c = detail::check_entry_bytes(key, meta_text, std::move(cubin), &auth);
  if (!c.artifact) return c.problem;
  out = std::move(*c.artifact);
  out.origin = "remote";
  return {};
}

fs::path Store::Impl::lock_path(std::string_view key) const {
  return lock_dir.empty() ? fs::path{} : lock_dir / (std::string(key) + ".lock");
}

std::optional<Artifact> Store::Impl::load_local(std::string_view key) {
  {
    std::lock_guard lk(mem_mu);
    if (auto it = mem.find(std::string(key)); it != mem.end()) return it->second;
  }
  for (auto& t : tiers) {
    if (auto a = t->load(key, /*touch=*/true)) return a;
  }
  return std::nullopt;
}

std::string Store::Impl::publish_full(std::string_view key, std::string_view cubin, const nlohmann::json& full,
                                      bool to_remote) {
  bool on_disk = false;
  if (wtier) {
    std::string err = wtier->publish(key, cubin, full);
    if (err.empty()) {
      on_disk = true;
      n.publishes++;
    } else {
      n.publish_failures++;
      {
        std::lock_guard lk(write_error_mu);
        last_write_error = err;
      }
      warner.warn("write", fmt::format("cannot write cache entry {} to {} ({}); keeping the kernel in memory only", key,
                                       wtier->root().string(), err));
    }
  }
  if (!on_disk) {
    std::lock_guard lk(mem_mu);
    mem.emplace(std::string(key), Artifact{std::string(cubin), full, "memory"});
  }
  std::string written = on_disk ? wtier->root().string() : std::string("memory");
  if (to_remote && remote) {
    remote->put_nx(key, detail::encode_remote(full, cubin));
    written += " + " + remote->describe();
  }
  if (on_disk && opt.max_bytes > 0) maybe_auto_prune();
  return written;
}

Store::Store(Options options) : impl_(new Impl(std::move(options))) {}
Store::~Store() { delete impl_; }
const Options& Store::options() const { return impl_->opt; }
fs::path Store::writable_root() const { return impl_->wtier ? impl_->wtier->root() : fs::path{}; }
std::string Store::last_write_error() const {
  std::lock_guard lk(impl_->write_error_mu);
  return impl_->last_write_error;
}

Stats Store::stats() const {
  const auto& n = impl_->n;
  std::uint64_t evicted = n.evictions;
  for (auto& t : impl_->tiers) evicted += t->evicted();
  return Stats{n.hits,      n.misses,           n.remote_hits, n.compiles,           n.lock_timeouts,
               n.publishes, n.publish_failures, evicted,       impl_->warner.count()};
}

std::optional<Artifact> Store::load(std::string_view key) {
  require_key(key);
  if (auto a = impl_->load_local(key)) {
    impl_->n.hits++;
    return a;
  }
  if (impl_->remote) {
    if (auto v = impl_->remote->get(key)) {
      Artifact a;
      // Verified exactly like a disk entry (digest, MAC with a secret, validator) before it is
      // served or written anywhere: an unverified remote value never reaches local disk.
      std::string problem = impl_->check_remote(key, *v, a);
      if (problem.empty()) {
        // Materialise locally so the next process on this host does not ask the network.
        impl_->publish_full(key, a.cubin, a.meta, /*to_remote=*/false);
        impl_->n.hits++;
        impl_->n.remote_hits++;
        return a;
      }
      impl_->warner.warn("remote-bad", fmt::format("remote cache {} returned a bad value for {} ({}); ignored",
                                                   impl_->remote->describe(), key, problem));
    }
  }
  impl_->n.misses++;
  return std::nullopt;
}

void Store::publish(std::string_view key, std::string_view cubin, const nlohmann::json& meta) {
  require_key(key);
  nlohmann::json full = detail::make_meta(key, cubin, meta);
  impl_->auth.sign(key, cubin, full);
  impl_->publish_full(key, cubin, full, /*to_remote=*/true);
}

Artifact Store::get_or_compile(std::string_view key, const std::function<Artifact()>& compile, std::string_view what) {
  if (auto a = load(key)) return std::move(*a);
  auto& im = *impl_;
  if (im.opt.sealed) {
    std::vector<std::string> where;
    for (auto& t : im.tiers) where.push_back(t->root().string());
    if (im.remote) where.push_back(im.remote->describe());
    throw CacheMissError(fmt::format(
        "kernel cache miss in sealed mode (FA4JIT_SEALED=1): {} (key {}) is in none of the cache tiers [{}]; "
        "prebuild it (fa4jit prewarm) or unset FA4JIT_SEALED",
        what, key, fmt::join(where, ", ")));
  }

  // Bounded wait for whoever is compiling this key already (thread here, or another process),
  // then look again. After the timeout we compile ourselves: a stuck or slow holder must not
  // stall us forever (FlashInfer #972), and duplicate work is harmless with atomic publish.
  auto deadline = std::chrono::steady_clock::now() + im.opt.lock_timeout;
  std::shared_ptr<detail::TimedMutex> local;
  {
    std::lock_guard lk(im.inflight_mu);
    auto& slot = im.inflight[std::string(key)];
    if (!slot) slot = std::make_shared<detail::TimedMutex>();
    local = slot;
  }
  std::unique_lock local_lock(*local, std::defer_lock);
  bool waited = !local_lock.try_lock();
  bool timed_out = waited && !local_lock.try_lock_until(deadline);
  FileLock flock;
  // After an in-process timeout our own thread holds the flock: trying it would only wait again.
  if (!timed_out && !im.lock_dir.empty()) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    timed_out = flock.acquire(im.lock_path(key), std::max(left, std::chrono::milliseconds(0)),
                              detail::Modes{im.opt.shared}.lock_file()) == FileLock::Result::timed_out;
    waited = true;  // another process may have published between our load() and the lock
  }
  if (timed_out) {
    im.n.lock_timeouts++;
    im.warner.warn("lock-timeout", fmt::format("waited {} ms for the cache lock of {} ({}); compiling without it",
                                               im.opt.lock_timeout.count(), what, key));
  }
  if (waited) {
    if (auto a = im.load_local(key)) {  // the holder published it while we waited
      im.n.hits++;
      return std::move(*a);
    }
  }

  Artifact art;
  try {
    art = compile();
  } catch (const jit::Error&) {
    throw;
  } catch (const std::exception& e) {
    throw jit::Error(fmt::format("compiling {} (key {}) failed: {}", what, key, e.what()));
  }
  im.n.compiles++;
  nlohmann::json full = detail::make_meta(key, art.cubin, art.meta);
  im.auth.sign(key, art.cubin, full);
  // A fresh kernel that its own validator refuses would be evicted and rebuilt on every load:
  // keep it in memory and say why, once.
  if (Verdict v = im.auth.check(key, full, art.cubin); !v.problem.empty()) {
    im.warner.warn("self-check", fmt::format("the kernel just compiled for {} (key {}) fails its own cache check ({}); "
                                             "kept in memory, not cached",
                                             what, key, v.problem));
    std::lock_guard lk(im.mem_mu);
    im.mem.emplace(std::string(key), Artifact{art.cubin, full, "memory"});
    art.written = "memory";
  } else {
    art.written = im.publish_full(key, art.cubin, full, /*to_remote=*/true);  // before the lock is released
  }
  art.meta = std::move(full);
  art.origin = "compiled";
  return art;
}

namespace {

// "a:b::c" -> {a, b, c}: PATH-style lists, empty parts skipped.
std::vector<fs::path> path_list(const std::string& p) {
  std::vector<fs::path> out;
  std::size_t start = 0;
  while (start <= p.size()) {
    const std::size_t colon = p.find(':', start);
    std::string part = p.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    if (!part.empty()) out.emplace_back(std::move(part));
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return out;
}

}  // namespace

Options Store::options_from_env() {
  Options o;
  auto env = [](const char* n) -> std::string {
    const char* v = std::getenv(n);
    return v ? std::string(v) : std::string();
  };
  if (std::string x = env("XDG_CACHE_HOME"); !x.empty() && x[0] == '/') {  // XDG: relative = ignore
    o.private_root = fs::path(x) / "fa4jit";
  } else if (std::string h = env("HOME"); !h.empty()) {
    o.private_root = fs::path(h) / ".cache" / "fa4jit";
  }
  if (std::string p = env("FA4JIT_CACHE_PATH"); !p.empty()) {
    o.roots = path_list(p);
  } else if (std::string d = env("FA4JIT_CACHE_DIR"); !d.empty()) {
    o.roots.emplace_back(d);
  } else if (!o.private_root.empty()) {
    o.roots.push_back(o.private_root);
  }
  if (const char* b = std::getenv("FA4JIT_BUNDLE_PATH")) {
    o.bundles = path_list(b);
    o.bundles_from_env = true;
  }
  o.warn_if_memory_only = true;
  o.sealed = detail::env_bool("FA4JIT_SEALED", false);
  o.remote_url = env("FA4JIT_REMOTE_CACHE");
  if (std::string m = env("FA4JIT_CACHE_MAX_BYTES"); !m.empty()) o.max_bytes = parse_size(m, "FA4JIT_CACHE_MAX_BYTES");
  o.lock_timeout = std::chrono::milliseconds(
      detail::env_int("FA4JIT_CACHE_LOCK_TIMEOUT_MS", o.lock_timeout.count(), 0, 24ll * 3600 * 1000));
  o.secret = env("FA4JIT_CACHE_SECRET");
  o.shared = detail::env_bool("FA4JIT_CACHE_SHARED", false);
  return o;
}

}  // namespace jit::cache
