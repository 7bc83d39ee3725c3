// Real processes on one cache directory: same-key races, SIGKILL during publish (hooked and at
// random moments), a lock held by another process.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "cache/store.hpp"
#include "test_util.hpp"

using namespace cachetest;
using jit::cache::Artifact;
using jit::cache::Options;
using jit::cache::Store;

namespace {
const std::string kWorker = FA4JIT_CACHE_WORKER;

std::map<std::string, int> count_lines(const fs::path& countfile) {
  std::map<std::string, int> n;
  std::ifstream in(countfile);
  std::string key, pid;
  while (in >> key >> pid) n[key]++;
  return n;
}

}  // namespace

TEST(CacheProcesses, EightProcessesSameKeysCompileEachOnce) {
  TempDir d;
  constexpr int kProcs = 8, kKeys = 16;
  fs::path countfile = d.path / "compiles.log";
  fs::path root = d.path / "cache";
  std::vector<Proc> ps;
  for (int p = 0; p < kProcs; ++p)
    ps.push_back(spawn(
        {kWorker, "race", root.string(), countfile.string(), std::to_string(kKeys), "20", std::to_string(p + 1)}));
  for (auto& p : ps) {
    int st = p.wait();
    ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "worker failed, status " << st;
  }
  auto n = count_lines(countfile);
  EXPECT_EQ(n.size(), static_cast<std::size_t>(kKeys));
  for (int i = 0; i < kKeys; ++i) EXPECT_EQ(n[key_of(static_cast<std::uint64_t>(i))], 1) << "key " << i;
  EXPECT_EQ(count_entries(root / "v1" / "tmp"), 0u);
  Store s(one_root(root));
  auto rep = s.verify();
  EXPECT_EQ(rep.checked, static_cast<std::size_t>(kKeys));
  EXPECT_EQ(rep.removed, 0u);
  EXPECT_TRUE(rep.problems.empty());
  for (int i = 0; i < kKeys; ++i) {
    auto a = s.load(key_of(static_cast<std::uint64_t>(i)));
    ASSERT_TRUE(a);
    EXPECT_EQ(a->cubin, cubin_for(key_of(static_cast<std::uint64_t>(i))));
  }
  std::printf("[reliability] same-key race: %d processes x %d keys, compiles per key = 1, entries lost = 0\n", kProcs,
              kKeys);
}

class KillDuringPublish : public ::testing::TestWithParam<const char*> {};

TEST_P(KillDuringPublish, LeavesNothingLoadableAndRecovers) {
  TempDir d;
  std::string key = key_of(50);
  auto p = spawn({kWorker, "publish", d.path.string(), key}, {{"FA4JIT_CACHE_FAULT", GetParam()}});
  int st = p.wait();
  ASSERT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) << "the hook did not fire, status " << st;
  EXPECT_EQ(count_entries(d.path / "v1" / "tmp"), 1u);  // the dead writer's staging dir
  {
    // Never loadable, even before anybody cleans up.
    Options ro = one_root(d.path);
    EnvVar f("FA4JIT_CACHE_FAULT", "readonly");  // read-only: no sweep at construction
    Store r(ro);
    EXPECT_FALSE(r.load(key));
    EXPECT_EQ(r.stats().warnings, 1u);  // only "no writable tier"
  }
  Store s(one_root(d.path));
  EXPECT_EQ(count_entries(d.path / "v1" / "tmp"), 0u);  // swept: its pid is dead
  EXPECT_FALSE(s.load(key));
  EXPECT_EQ(s.stats().warnings, 0u);  // nothing half-visible, so nothing even looked corrupt
  int calls = 0;
  auto a = s.get_or_compile(
      key,
      [&] {
        ++calls;
        return Artifact{cubin_for(key), {}, ""};
      },
      "cfg");
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(a.cubin, cubin_for(key));
  auto rep = s.verify();
  EXPECT_EQ(rep.removed, 0u);
  EXPECT_TRUE(rep.problems.empty());
  EXPECT_EQ(count_entries(d.path / "v1" / "tmp"), 0u);
  EXPECT_EQ(s.load(key)->cubin, cubin_for(key));
}

INSTANTIATE_TEST_SUITE_P(Hooks, KillDuringPublish, ::testing::Values("kill_after_cubin", "kill_before_rename"));

TEST(CacheProcesses, RandomSigkillsNeverExposeBadEntries) {
  // Rounds of 8 racing workers where half are SIGKILLed at random moments (mid-compile,
  // mid-write, mid-rename, holding the lock). Survivors check every byte they get; afterwards no
  // committed entry may be bad and every key must be buildable.
  TempDir d;
  fs::path root = d.path / "cache", countfile = d.path / "compiles.log";
  // FA4JIT_CACHE_STRESS_ROUNDS / _PROCS / _KEYS scale it up for a soak run (defaults keep it ~1 s).
  auto env_int = [](const char* n, int d) {
    const char* v = std::getenv(n);
    return v && *v ? std::max(1, std::atoi(v)) : d;
  };
  const int kRounds = env_int("FA4JIT_CACHE_STRESS_ROUNDS", 4), kProcs = env_int("FA4JIT_CACHE_STRESS_PROCS", 8),
            kKeys = env_int("FA4JIT_CACHE_STRESS_KEYS", 16);
  std::mt19937 rng(12345);
  int kills = 0, survivors = 0;
  for (int round = 0; round < kRounds; ++round) {
    {
      Store c(one_root(root));
      c.clear();  // every round starts cold so kills land in publishes
    }
    std::vector<Proc> ps;
    for (int p = 0; p < kProcs; ++p)
      ps.push_back(spawn({kWorker, "race", root.string(), countfile.string(), std::to_string(kKeys), "8",
                          std::to_string(round * 100 + p + 1)}));
    std::vector<int> delays;
    for (int p = 0; p < kProcs / 2; ++p)
      delays.push_back(std::uniform_int_distribution<int>(2, std::max(80, kKeys * 5))(rng));
    std::sort(delays.begin(), delays.end());
    auto t0 = std::chrono::steady_clock::now();
    for (int p = 0; p < kProcs / 2; ++p) {
      std::this_thread::sleep_until(t0 + std::chrono::milliseconds(delays[static_cast<std::size_t>(p)]));
      ::kill(ps[static_cast<std::size_t>(p * 2)].pid, SIGKILL);
    }
    for (auto& p : ps) {
      int st = p.wait();
      if (WIFSIGNALED(st)) {
        ++kills;
        continue;
      }
      ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0)
          << "a surviving worker saw wrong bytes (1) or a bad entry (3): " << st;
      ++survivors;
    }
    Store s(one_root(root));
    auto rep = s.verify();
    EXPECT_EQ(rep.removed, 0u) << "a committed entry was bad";
    for (auto& pr : rep.problems) EXPECT_NE(pr.find("staging"), std::string::npos) << pr;
    EXPECT_EQ(count_entries(root / "v1" / "tmp"), 0u);
    // Survivors built every key; all of them load with the right bytes.
    for (int i = 0; i < kKeys; ++i) {
      auto a = s.load(key_of(static_cast<std::uint64_t>(i)));
      ASSERT_TRUE(a) << "key " << i << " lost in round " << round;
      EXPECT_EQ(a->cubin, cubin_for(key_of(static_cast<std::uint64_t>(i))));
    }
  }
  std::printf(
      "[reliability] random SIGKILL: %d rounds x %d processes x %d keys, %d processes killed, %d survived, "
      "bad entries loaded = 0, entries lost = 0\n",
      kRounds, kProcs, kKeys, kills, survivors);
}

TEST(CacheProcesses, HeldLockTimesOutThenCompilesAlone) {
  TempDir d;
  std::string key = key_of(60);
  auto holder = spawn({kWorker, "hold", d.path.string(), key, "5000"}, {}, /*capture_stdout=*/true);
  ASSERT_TRUE(holder.wait_for_output("locked", std::chrono::seconds(5)));
  Options o = one_root(d.path);
  o.lock_timeout = std::chrono::milliseconds(300);
  Store s(o);
  int calls = 0;
  auto t0 = std::chrono::steady_clock::now();
  auto a = s.get_or_compile(
      key,
      [&] {
        ++calls;
        return Artifact{cubin_for(key), {}, ""};
      },
      "cfg");
  double dt = seconds_since(t0);
  EXPECT_EQ(calls, 1);
  EXPECT_GE(dt, 0.29);
  EXPECT_LT(dt, 2.0);
  EXPECT_EQ(s.stats().lock_timeouts, 1u);
  EXPECT_EQ(s.stats().warnings, 1u);
  EXPECT_TRUE(s.load(key));  // published even without the lock
}

TEST(CacheProcesses, WaiterPicksUpTheHoldersEntry) {
  // Process A compiles a key slowly while holding the lock; B asks for the same key, waits on the
  // lock, then finds A's entry and compiles nothing.
  TempDir d;
  fs::path countfile = d.path / "compiles.log";
  auto a = spawn({kWorker, "race", d.path.string(), countfile.string(), "1", "700", "1"});
  auto t0 = std::chrono::steady_clock::now();
  while (count_lines(countfile).empty() && seconds_since(t0) < 5)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_FALSE(count_lines(countfile).empty());
  Store s(one_root(d.path));
  int calls = 0;
  std::string key = key_of(0);
  auto art = s.get_or_compile(
      key,
      [&] {
        ++calls;
        return Artifact{cubin_for(key), {}, ""};
      },
      "cfg");
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(art.cubin, cubin_for(key));
  int st = a.wait();
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

TEST(CacheProcesses, TamperingWhileReadingNeverYieldsWrongBytes) {
  // 4 processes load/compile random keys in a loop while this process damages entries in place
  // (truncate, flip a byte, zero, delete meta.json) under their feet. Verification on load must
  // turn every damaged read into a miss + rebuild: no process may ever receive a wrong byte.
  TempDir d;
  fs::path root = d.path / "cache";
  constexpr int kKeys = 12, kProcs = 4, kMillis = 2500;
  std::vector<Proc> ps;
  for (int p = 0; p < kProcs; ++p)
    ps.push_back(spawn({kWorker, "hammer", root.string(), std::to_string(kKeys), std::to_string(kMillis)}, {}, true));
  std::mt19937 rng(7);
  int damaged = 0;
  auto t0 = std::chrono::steady_clock::now();
  while (seconds_since(t0) < kMillis / 1000.0 - 0.2) {
    std::string key = key_of(rng() % kKeys);
    fs::path dir = root / "v1" / key.substr(0, 2) / key;
    std::error_code ec;
    switch (rng() % 4) {
      case 0: fs::resize_file(dir / "kernel.cubin", 17, ec); break;
      case 1: {
        int fd = ::open((dir / "kernel.cubin").c_str(), O_WRONLY);
        if (fd >= 0) {
          char c = 0x5a;
          (void)!::pwrite(fd, &c, 1, 100);
          ::close(fd);
        } else {
          ec = std::error_code(errno, std::generic_category());
        }
        break;
      }
      case 2: {
        int fd = ::open((dir / "meta.json").c_str(), O_WRONLY | O_TRUNC);
        if (fd >= 0)
          ::close(fd);
        else
          ec = std::error_code(errno, std::generic_category());
        break;
      }
      default: fs::remove(dir / "meta.json", ec); break;
    }
    if (!ec) ++damaged;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  long calls = 0, evictions = 0;
  for (auto& p : ps) {
    int st = p.wait();
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "a process received wrong bytes, status " << st;
    char buf[512] = {};
    ssize_t n = ::read(p.out_fd, buf, sizeof buf - 1);
    long c = 0, comp = 0, ev = 0;
    if (n > 0 && std::sscanf(buf, "calls=%ld compiles=%ld evictions=%ld", &c, &comp, &ev) == 3)
      calls += c, evictions += ev;
  }
  EXPECT_GT(damaged, 50);
  EXPECT_GT(evictions, 0);
  std::printf(
      "[reliability] tampering: %d processes x %d keys for %d ms, %ld get_or_compile calls, %d entries "
      "damaged in place, %ld evictions, wrong bytes returned = 0\n",
      kProcs, kKeys, kMillis, calls, damaged, evictions);
}
