// list / verify / prune / clear, and the rate-limited automatic prune behind Options.max_bytes.
#include <sys/stat.h>
#include <fcntl.h>

#include <algorithm>

#include <fmt/format.h>

#include "cache/store_impl.hpp"
#include "fa4jit/errors.hpp"

namespace jit::cache {

namespace fs = std::filesystem;
using detail::FileLock;

namespace {
// Staging dirs of writers that are not provably dead (other hosts) are swept after this long.
constexpr std::chrono::seconds kStaleTmp{3600};

nlohmann::json read_meta(const fs::path& dir) {
  auto text = detail::read_file(dir / "meta.json", 16u << 20);
  if (!text) return nullptr;
  auto j = nlohmann::json::parse(*text, nullptr, false);
  return j.is_discarded() ? nlohmann::json(nullptr) : j;
}
}  // namespace

std::vector<EntryInfo> Store::list() const {
  std::vector<EntryInfo> out;
  for (auto& t : impl_->tiers) {
    for (auto& l : t->scan()) {
      if (!detail::valid_key(l.key)) continue;
      out.push_back(EntryInfo{l.key, l.dir, l.bytes, read_meta(l.dir)});
    }
  }
  return out;
}

VerifyReport Store::verify(const std::function<std::string(const Artifact&)>& extra) {
  VerifyReport rep;
  for (auto& t : impl_->tiers) {
    std::size_t swept = t->sweep_tmp(kStaleTmp);
    if (swept) rep.problems.push_back(fmt::format("{}/v1/tmp: removed {} staging dir(s) of dead writers", t->root().string(), swept));
    for (auto& l : t->scan()) {
      rep.checked++;
      std::string problem;
      bool misplaced = !detail::valid_key(l.key) || l.dir.parent_path().filename() != l.key.substr(0, 2);
      if (misplaced) {
        problem = "not a cache entry name";
      } else {
        auto c = detail::check_entry(l.dir, l.key);
        if (c.absent) continue;
        if (c.artifact) {
          if (!extra) continue;
          c.problem = extra(*c.artifact);
          if (c.problem.empty()) continue;
        }
        if (c.io_error) {
          rep.problems.push_back(fmt::format("{}: {} (kept: read error, not proven bad)", l.key, c.problem));
          continue;
        }
        problem = c.problem;
      }
      if (t->writable()) {
        // A misplaced dir is removed as is; a bad entry may be put back if it was replaced meanwhile.
        bool gone = t->evict(l.key, l.dir, /*bad_entry=*/!misplaced);
        if (gone) rep.removed++;
        rep.problems.push_back(fmt::format("{}: {} ({})", l.key, problem, gone ? "removed" : "replaced concurrently"));
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
  if (!lock_dir.empty() && lk.acquire(lock_dir / "prune.lock", lock_wait) == FileLock::Result::timed_out) return 0;
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
    if (wtier->evict(e.key, e.dir, /*bad_entry=*/false)) {
      total -= std::min(total, e.bytes);
      ++removed;
    }
  }
  return removed;
}

std::size_t Store::prune(std::uint64_t max_bytes) { return impl_->prune_locked(max_bytes, std::chrono::seconds(10)); }

void Store::Impl::maybe_auto_prune() {
  // Rate-limited twice: per process (steady clock) and across processes (a stamp file's mtime;
  // a wrong mtime on a network FS only makes pruning more or less frequent, never incorrect).
  std::unique_lock lk(prune_mu, std::try_to_lock);
  if (!lk) return;
  auto now = std::chrono::steady_clock::now();
  if (auto_pruned && now - last_auto_prune < std::chrono::seconds(prune_interval_s)) return;
  auto_pruned = true;
  last_auto_prune = now;
  fs::path stamp = wtier->base() / "prune.stamp";
  struct stat st {};
  if (prune_interval_s > 0 && ::stat(stamp.c_str(), &st) == 0 && detail::now_unix() - st.st_mtim.tv_sec < prune_interval_s)
    return;
  detail::Fd fd(::open(stamp.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
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
  if (!t) return removed;
  t->sweep_tmp(kStaleTmp);
  for (auto& e : t->scan())
    if (t->evict(e.key, e.dir, /*bad_entry=*/false)) ++removed;
  return removed;
}

}  // namespace jit::cache
