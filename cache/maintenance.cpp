// list / verify / prune / clear, and the rate-limited automatic prune behind Options.max_bytes.
#include <sys/stat.h>
#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "cache/store_impl.hpp"
#include "fa4jit/errors.hpp"

namespace jit::cache {

namespace fs = std::filesystem;
using detail::FileLock;

namespace {
// Staging dirs of writers that are not provably dead (other hosts) are swept after this long.
constexpr std::chrono::seconds kStaleTmp{3600};

bool is_entry(const detail::DiskTier::Listed& l) {
  return l.is_dir && detail::valid_key(l.key) && l.shard == l.key.substr(0, 2);
}
}  // namespace

std::vector<EntryInfo> Store::list() const {
  std::vector<EntryInfo> out;
  for (auto& t : impl_->tiers) {
    for (auto& l : t->scan()) {
      if (!is_entry(l)) continue;
      out.push_back(EntryInfo{l.key, l.dir, l.bytes, t->read_meta(l)});
    }
  }
  return out;
}

VerifyReport Store::verify(const std::function<std::string(const Artifact&)>& extra) {
  VerifyReport rep;
  for (auto& t : impl_->tiers) {
    std::size_t swept = t->sweep_tmp(kStaleTmp);
    if (swept)
      rep.problems.push_back(
          fmt::format("{}/v1/tmp: removed {} staging dir(s) of dead writers", t->root().string(), swept));
    for (auto& l : t->scan()) {
      rep.checked++;
      std::string problem;
      const bool misplaced = !is_entry(l);
      if (misplaced) {
        problem = l.is_dir ? "not a cache entry name" : "not a directory (a file or a symbolic link)";
      } else {
        auto c = t->check(l);
        if (c.absent) continue;
        if (c.artifact) {
          if (!extra) continue;
          c.problem = extra(*c.artifact);
          if (c.problem.empty()) continue;
        }
        if (c.foreign) {  // another build's entry: consistent, just not checkable here
          rep.foreign++;
          continue;
        }
        if (c.io_error) {
          rep.problems.push_back(fmt::format("{}: {} (kept: read error, not proven bad)", l.key, c.problem));
          continue;
        }
        problem = c.problem;
      }
      if (t->writable()) {
        // A misplaced name is removed as is (a symlink as a link); a bad entry may be put back if
        // it was replaced meanwhile.
        const int err = t->evict(l, /*bad_entry=*/!misplaced);
        if (err == 0) rep.removed++;
        rep.problems.push_back(fmt::format("{}: {} ({})", l.dir.string(), problem,
                                           err == 0 ? "removed"
                                           : err == EEXIST || err == ENOENT
                                               ? "replaced concurrently"
                                               : fmt::format("not removed: {}", std::strerror(err))));
      } else {
        rep.problems.push_back(fmt::format("{}: {} (read-only tier {}, kept)", l.key, problem, t->root().string()));
      }
    }
  }
  return rep;
}

std::size_t Store::Impl::prune_locked(std::uint64_t max_bytes, std::chrono::milliseconds lock_wait) {
  if (!wtier) return 0;
  // One pruner at a time per tier; entries stay correct without it (eviction is rename-aside),
  // the lock only avoids two processes deleting twice as much as needed.
  FileLock lk;
  if (!lock_dir.empty() && lk.acquire(lock_dir / "prune.lock", lock_wait, detail::Modes{opt.shared}.lock_file()) ==
                               FileLock::Result::timed_out)
    return 0;
  wtier->sweep_tmp(kStaleTmp);
  auto entries = wtier->scan();
  std::uint64_t total = 0;
  for (auto& e : entries) total += e.bytes;
  if (total <= max_bytes) return 0;
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    return a.last_use != b.last_use ? a.last_use < b.last_use : a.key < b.key;
  });
  std::size_t removed = 0;
  for (auto& e : entries) {
    if (total <= max_bytes) break;
    if (wtier->evict(e, /*bad_entry=*/false) == 0) {
      total -= std::min(total, e.bytes);
      ++removed;
    }
  }
  return removed;
}

std::size_t Store::prune(std::uint64_t max_bytes) {
  if (!impl_->wtier) throw CacheError(impl_->no_writable_tier("prune"));
  return impl_->prune_locked(max_bytes, std::chrono::seconds(10));
}

void Store::Impl::maybe_auto_prune() {
  // Rate-limited twice: per process (steady clock) and across processes (a stamp file's mtime;
  // a wrong mtime on a network FS only makes pruning more or less frequent, never incorrect).
  std::unique_lock lk(prune_mu, std::try_to_lock);
  if (!lk) return;
  auto now = std::chrono::steady_clock::now();
  if (auto_pruned && now - last_auto_prune < std::chrono::seconds(prune_interval_s)) return;
  auto_pruned = true;
  last_auto_prune = now;
  detail::Fd base = wtier->open_base();
  if (!base) return;
  struct stat st {};
  if (prune_interval_s > 0 && ::fstatat(base.get(), "prune.stamp", &st, AT_SYMLINK_NOFOLLOW) == 0 &&
      detail::now_unix() - st.st_mtim.tv_sec < prune_interval_s)
    return;
  detail::Fd fd(::openat(base.get(), "prune.stamp", O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (fd) ::futimens(fd.get(), nullptr);
  prune_locked(opt.max_bytes, std::chrono::milliseconds(0));
}

std::size_t Store::clear() {
  std::size_t removed = 0;
  {
    std::lock_guard lk(impl_->mem_mu);
    removed += impl_->mem.size();
    impl_->mem.clear();
  }
  auto* t = impl_->wtier;
  if (!t) {
    if (impl_->tiers.empty() && !impl_->opt.warn_if_memory_only) return removed;  // memory-only by choice
    throw CacheError(impl_->no_writable_tier("clear"));
  }
  t->sweep_tmp(kStaleTmp);
  std::size_t failed = 0;
  std::string first;
  for (auto& e : t->scan()) {
    const int err = t->evict(e, /*bad_entry=*/false);
    if (err == 0)
      ++removed;
    else if (err != ENOENT) {  // ENOENT: removed by somebody else meanwhile
      if (failed++ == 0) first = fmt::format("{}: {}", e.dir.string(), std::strerror(err));
    }
  }
  if (failed)
    throw CacheError(
        fmt::format("clear: removed {} entries of {}, but {} could not be removed (first: {}); in a "
                    "shared cache only an entry's owner may remove it",
                    removed, t->root().string(), failed, first));
  return removed;
}

}  // namespace jit::cache
