// Single-process behaviour: round trip, verification of every kind of damaged entry, sealed
// mode, compile errors, options_from_env, many threads on the same keys.
#include <gtest/gtest.h>

#include <atomic>
#include <functional>

#include "cache/store.hpp"
#include "fa4jit/errors.hpp"
#include "test_util.hpp"

using namespace cachetest;
using jit::cache::Artifact;
using jit::cache::Options;
using jit::cache::Store;

namespace {

Options opts(const fs::path& root) {
  Options o;
  o.roots = {root};
  o.lock_timeout = std::chrono::seconds(5);
  return o;
}

std::function<Artifact()> compiler(const std::string& key, int& calls) {
  return [key, &calls] {
    ++calls;
    return Artifact{cubin_for(key), {{"config", "test"}}, ""};
  };
}

}  // namespace

TEST(CacheStore, PublishLoadRoundTrip) {
  TempDir d;
  Store s(opts(d.path));
  std::string key = key_of(1), cubin = cubin_for(key);
  EXPECT_FALSE(s.load(key));
  s.publish(key, cubin, {{"config", "hdim128"}, {"nvrtc", "13.0"}});
  auto a = s.load(key);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->cubin, cubin);
  EXPECT_EQ(a->meta["config"], "hdim128");
  EXPECT_EQ(a->meta["key"], key);
  EXPECT_EQ(a->meta["cubin_size"], cubin.size());
  EXPECT_EQ(a->meta["cubin_xxh3_128"].get<std::string>().size(), 32u);
  EXPECT_TRUE(a->meta.contains("created"));
  EXPECT_EQ(a->origin, d.path.string());
  EXPECT_TRUE(fs::exists(entry_dir(d.path, key) / "kernel.cubin"));
  EXPECT_TRUE(fs::exists(entry_dir(d.path, key) / "meta.json"));
  EXPECT_EQ(count_entries(d.path / "v1" / "tmp"), 0u);
  auto l = s.list();
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].key, key);
  EXPECT_EQ(l[0].meta["config"], "hdim128");
  // A second Store (another process, in effect) sees the same entry.
  Store s2(opts(d.path));
  auto b = s2.load(key);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->cubin, cubin);
  EXPECT_EQ(s2.stats().hits, 1u);
}

TEST(CacheStore, RejectsMalformedKeys) {
  TempDir d;
  Store s(opts(d.path));
  for (std::string bad : std::vector<std::string>{"", "abc", "../../../../etc/passwd000000000000",
                                                  "0123456789ABCDEF0123456789abcdef", std::string(33, 'a')})
    EXPECT_THROW(s.load(bad), jit::CacheError) << bad;
}

TEST(CacheStore, GetOrCompileCompilesOnceThenHits) {
  TempDir d;
  Store s(opts(d.path));
  std::string key = key_of(2);
  int calls = 0;
  auto a = s.get_or_compile(key, compiler(key, calls), "cfg2");
  EXPECT_EQ(a.origin, "compiled");
  EXPECT_EQ(a.meta["key"], key);
  auto b = s.get_or_compile(key, compiler(key, calls), "cfg2");
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(b.cubin, a.cubin);
  EXPECT_EQ(b.origin, d.path.string());
  EXPECT_EQ(s.stats().compiles, 1u);
  EXPECT_EQ(s.stats().warnings, 0u);
}

// Every kind of damage must be detected, evicted, reported as a miss, and rebuilt.
struct Damage {
  const char* name;
  std::function<void(const fs::path& root, const std::string& key)> apply;
};

class CacheCorruption : public ::testing::TestWithParam<Damage> {};

TEST_P(CacheCorruption, DetectedEvictedRebuilt) {
  TempDir d;
  std::string key = key_of(3);
  {
    Store s(opts(d.path));
    s.publish(key, cubin_for(key), {{"config", "x"}});
    s.publish(key_of(4), cubin_for(key_of(4)), {{"config", "y"}});
  }
  GetParam().apply(d.path, key);
  Store s(opts(d.path));
  EXPECT_FALSE(s.load(key)) << GetParam().name;
  EXPECT_FALSE(fs::exists(entry_dir(d.path, key))) << "bad entry not evicted: " << GetParam().name;
  EXPECT_EQ(s.stats().evictions, 1u);
  EXPECT_EQ(s.stats().warnings, 1u);
  int calls = 0;
  auto a = s.get_or_compile(key, compiler(key, calls), "cfg3");
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(a.cubin, cubin_for(key));
  auto b = s.load(key);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->cubin, cubin_for(key));
  EXPECT_TRUE(s.load(key_of(4)));  // the neighbour is untouched
  EXPECT_EQ(count_entries(d.path / "v1" / "tmp"), 0u);
}

INSTANTIATE_TEST_SUITE_P(
    AllKinds, CacheCorruption,
    ::testing::Values(
        Damage{"truncated", [](const fs::path& r, const std::string& k) {
                 fs::resize_file(entry_dir(r, k) / "kernel.cubin", 100);
               }},
        Damage{"zeroed", [](const fs::path& r, const std::string& k) {
                 auto p = entry_dir(r, k) / "kernel.cubin";
                 write_all(p, std::string(fs::file_size(p), '\0'));
               }},
        Damage{"one_bit_flipped", [](const fs::path& r, const std::string& k) {
                 auto p = entry_dir(r, k) / "kernel.cubin";
                 std::string c = read_all(p);
                 c[c.size() / 2] ^= 1;
                 write_all(p, c);
               }},
        Damage{"swapped_cubin", [](const fs::path& r, const std::string& k) {
                 fs::copy_file(entry_dir(r, key_of(4)) / "kernel.cubin", entry_dir(r, k) / "kernel.cubin",
                               fs::copy_options::overwrite_existing);
               }},
        Damage{"appended", [](const fs::path& r, const std::string& k) {
                 std::ofstream(entry_dir(r, k) / "kernel.cubin", std::ios::app) << "junk";
               }},
        Damage{"cubin_missing", [](const fs::path& r, const std::string& k) {
                 fs::remove(entry_dir(r, k) / "kernel.cubin");
               }},
        Damage{"meta_missing", [](const fs::path& r, const std::string& k) {
                 fs::remove(entry_dir(r, k) / "meta.json");
               }},
        Damage{"meta_broken", [](const fs::path& r, const std::string& k) {
                 auto p = entry_dir(r, k) / "meta.json";
                 std::string m = read_all(p);
                 write_all(p, m.substr(0, m.size() / 2));
               }},
        Damage{"meta_empty", [](const fs::path& r, const std::string& k) {
                 write_all(entry_dir(r, k) / "meta.json", "");
               }},
        Damage{"meta_not_object", [](const fs::path& r, const std::string& k) {
                 write_all(entry_dir(r, k) / "meta.json", "[1,2,3]");
               }},
        Damage{"meta_without_digest", [](const fs::path& r, const std::string& k) {
                 write_all(entry_dir(r, k) / "meta.json", fmt::format(R"({{"key":"{}","cubin_size":{}}})", k,
                                                                      fs::file_size(entry_dir(r, k) / "kernel.cubin")));
               }},
        Damage{"key_mismatch_whole_entry_swapped", [](const fs::path& r, const std::string& k) {
                 // A complete, internally consistent entry of another key sitting under this key.
                 fs::remove_all(entry_dir(r, k));
                 fs::copy(entry_dir(r, key_of(4)), entry_dir(r, k));
               }}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(CacheStore, SealedMissNamesConfigAndKey) {
  TempDir d;
  std::string key = key_of(5);
  Options o = opts(d.path);
  o.sealed = true;
  Store s(o);
  int calls = 0;
  try {
    s.get_or_compile(key, compiler(key, calls), "fwd hdim=128 causal bf16 sm_100a");
    FAIL() << "expected CacheMissError";
  } catch (const jit::CacheMissError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("fwd hdim=128 causal bf16 sm_100a"), std::string::npos) << msg;
    EXPECT_NE(msg.find(key), std::string::npos) << msg;
    EXPECT_NE(msg.find("FA4JIT_SEALED"), std::string::npos) << msg;
  }
  EXPECT_EQ(calls, 0);
  // A prebuilt entry is served in sealed mode.
  {
    Store w(opts(d.path));
    w.publish(key, cubin_for(key), {});
  }
  EXPECT_EQ(s.get_or_compile(key, compiler(key, calls), "cfg").cubin, cubin_for(key));
  EXPECT_EQ(calls, 0);
}

TEST(CacheStore, CompileFailurePropagatesAndReleasesLock) {
  TempDir d;
  Store s(opts(d.path));
  std::string key = key_of(6);
  auto failing = []() -> Artifact { throw std::runtime_error("nvrtc said no"); };
  try {
    s.get_or_compile(key, failing, "cfg-broken");
    FAIL();
  } catch (const jit::Error& e) {
    EXPECT_NE(std::string(e.what()).find("cfg-broken"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("nvrtc said no"), std::string::npos);
  }
  auto t0 = std::chrono::steady_clock::now();
  int calls = 0;
  s.get_or_compile(key, compiler(key, calls), "cfg");  // would wait 5 s if the lock had leaked
  EXPECT_EQ(calls, 1);
  EXPECT_LT(seconds_since(t0), 1.0);
  EXPECT_EQ(count_entries(d.path / "v1" / "tmp"), 0u);
}

TEST(CacheStore, OptionsFromEnv) {
  EnvVar a("FA4JIT_CACHE_PATH", "/opt/prebuilt::/home/u/c"), b("FA4JIT_SEALED", "1"),
      c("FA4JIT_REMOTE_CACHE", "redis://10.0.0.1:6380/2"), m("FA4JIT_CACHE_MAX_BYTES", "2G");
  Options o = Store::options_from_env();
  ASSERT_EQ(o.roots.size(), 2u);
  EXPECT_EQ(o.roots[0], "/opt/prebuilt");
  EXPECT_EQ(o.roots[1], "/home/u/c");
  EXPECT_TRUE(o.sealed);
  EXPECT_EQ(o.remote_url, "redis://10.0.0.1:6380/2");
  EXPECT_EQ(o.max_bytes, 2ull << 30);
  {
    EnvVar p("FA4JIT_CACHE_PATH", ""), dir("FA4JIT_CACHE_DIR", "/x/y"), s("FA4JIT_SEALED", "0"),
        mm("FA4JIT_CACHE_MAX_BYTES", "12345");
    Options o2 = Store::options_from_env();
    ASSERT_EQ(o2.roots.size(), 1u);
    EXPECT_EQ(o2.roots[0], "/x/y");
    EXPECT_FALSE(o2.sealed);
    EXPECT_EQ(o2.max_bytes, 12345u);
    EnvVar dd("FA4JIT_CACHE_DIR", ""), x("XDG_CACHE_HOME", "/xdg");
    EXPECT_EQ(Store::options_from_env().roots.at(0), "/xdg/fa4jit");
    EnvVar xx("XDG_CACHE_HOME", ""), h("HOME", "/home/z");
    EXPECT_EQ(Store::options_from_env().roots.at(0), "/home/z/.cache/fa4jit");
    EnvVar bad("FA4JIT_CACHE_MAX_BYTES", "lots");
    EXPECT_THROW(Store::options_from_env(), jit::CacheError);
  }
}

TEST(CacheStore, MemoryOnlyWhenNoRoots) {
  Store s(Options{});
  std::string key = key_of(7);
  int calls = 0;
  s.get_or_compile(key, compiler(key, calls), "cfg");
  auto a = s.load(key);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->origin, "memory");
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(s.stats().warnings, 0u);  // no roots is a deliberate choice, not a problem
}

TEST(CacheStore, ManyThreadsSameKeysCompileOnce) {
  TempDir d;
  Store s(opts(d.path));
  constexpr int kThreads = 8, kKeys = 16;
  std::atomic<int> compiles[kKeys] = {};
  std::atomic<int> wrong{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([&, t] {
      for (int j = 0; j < kKeys; ++j) {
        int i = (j + t * 5) % kKeys;
        std::string key = key_of(100 + static_cast<std::uint64_t>(i));
        auto a = s.get_or_compile(
            key,
            [&, key, i] {
              compiles[i]++;
              std::this_thread::sleep_for(std::chrono::milliseconds(5));
              return Artifact{cubin_for(key), {}, ""};
            },
            "cfg");
        if (a.cubin != cubin_for(key)) wrong++;
      }
    });
  for (auto& t : ts) t.join();
  for (int i = 0; i < kKeys; ++i) EXPECT_EQ(compiles[i].load(), 1) << "key " << i;
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(count_entries(d.path / "v1" / "tmp"), 0u);
}

TEST(CacheStore, MemoryOnlyThreadsShareOneCompile) {
  Store s(Options{});  // no disk tier, so no flock: the in-process per-key wait must de-duplicate
  std::atomic<int> compiles{0};
  std::string key = key_of(8);
  std::vector<std::thread> ts;
  for (int t = 0; t < 8; ++t)
    ts.emplace_back([&] {
      auto a = s.get_or_compile(
          key,
          [&] {
            compiles++;
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
            return Artifact{cubin_for(key), {}, ""};
          },
          "cfg");
      EXPECT_EQ(a.cubin, cubin_for(key));
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(compiles.load(), 1);
}

TEST(CacheStore, LockDirCanLiveElsewhere) {
  // FA4JIT_CACHE_LOCK_DIR: node-local locks for a cache on a network filesystem.
  TempDir d, locks;
  EnvVar e("FA4JIT_CACHE_LOCK_DIR", locks.path.string());
  Store s(opts(d.path));
  std::string key = key_of(9);
  int calls = 0;
  s.get_or_compile(key, compiler(key, calls), "cfg");
  EXPECT_TRUE(fs::exists(locks.path / (key + ".lock")));
  EXPECT_FALSE(fs::exists(d.path / "v1" / "locks" / (key + ".lock")));
}

TEST(CacheStore, SlowCompileInAnotherThreadTimesOutOnce) {
  TempDir d;
  Options o = opts(d.path);
  o.lock_timeout = std::chrono::milliseconds(200);
  Store s(o);
  std::string key = key_of(11);
  std::atomic<int> compiles{0};
  auto slow = [&] {
    compiles++;
    std::this_thread::sleep_for(std::chrono::milliseconds(800));
    return Artifact{cubin_for(key), {}, ""};
  };
  std::thread a([&] { s.get_or_compile(key, slow, "cfg"); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto t0 = std::chrono::steady_clock::now();
  auto b = s.get_or_compile(
      key,
      [&] {
        compiles++;
        return Artifact{cubin_for(key), {}, ""};
      },
      "cfg");
  double dt = seconds_since(t0);
  a.join();
  EXPECT_EQ(b.cubin, cubin_for(key));
  EXPECT_GE(dt, 0.15);
  EXPECT_LT(dt, 0.6);  // did not wait for the 800 ms compile
  EXPECT_EQ(compiles.load(), 2);
  EXPECT_EQ(s.stats().lock_timeouts, 1u);
  EXPECT_EQ(s.stats().warnings, 1u);
  EXPECT_EQ(s.load(key)->cubin, cubin_for(key));
  EXPECT_EQ(count_entries(d.path / "v1" / "tmp"), 0u);
}
