// prune (LRU), automatic prune, verify, clear, export/import archives.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include "cache/store.hpp"
#include "fa4jit/errors.hpp"
#include "test_util.hpp"

using namespace cachetest;
using jit::cache::Artifact;
using jit::cache::Options;
using jit::cache::Store;

namespace {
void set_mtime(const fs::path& p, std::int64_t unix_s) {
  timespec ts[2] = {{unix_s, 0}, {unix_s, 0}};
  ::utimensat(AT_FDCWD, p.c_str(), ts, 0);
}
std::int64_t now_s() { return static_cast<std::int64_t>(::time(nullptr)); }
}  // namespace

TEST(CacheMaintenance, PruneRemovesLeastRecentlyUsed) {
  TempDir d;
  Store s(one_root(d.path));
  std::vector<std::string> keys;
  for (int i = 0; i < 6; ++i) {
    keys.push_back(key_of(200 + static_cast<std::uint64_t>(i)));
    s.publish(keys.back(), cubin_for(keys.back(), 10000), {});
    set_mtime(entry_dir(d.path, keys.back()), now_s() - 10000 + i * 100);  // 0 oldest ... 5 newest
  }
  ASSERT_TRUE(s.load(keys[0]));  // a hit refreshes the oldest entry's last-use stamp
  std::uint64_t per_entry = s.list().at(0).bytes;
  EXPECT_GT(per_entry, 10000u);
  EXPECT_EQ(s.prune(3 * per_entry + 10), 3u);
  for (int i : {1, 2, 3}) EXPECT_FALSE(fs::exists(entry_dir(d.path, keys[static_cast<std::size_t>(i)]))) << i;
  for (int i : {0, 4, 5}) EXPECT_TRUE(s.load(keys[static_cast<std::size_t>(i)])) << i;
  EXPECT_EQ(s.prune(1ull << 40), 0u);
  EXPECT_EQ(count_entries(d.path / "v1" / "tmp"), 0u);
}

TEST(CacheMaintenance, AutomaticPruneKeepsTheCapAndTheNewest) {
  TempDir d;
  EnvVar iv("FA4JIT_CACHE_PRUNE_INTERVAL_S", "0");  // every publish may prune (default: once a minute)
  Options o = one_root(d.path);
  o.max_bytes = 3 * 11000;
  Store s(o);
  std::string last;
  for (int i = 0; i < 10; ++i) {
    last = key_of(300 + static_cast<std::uint64_t>(i));
    s.publish(last, cubin_for(last, 10000), {});
    set_mtime(entry_dir(d.path, last), now_s() - 1000 + i);
    std::uint64_t total = 0;
    for (auto& e : s.list()) total += e.bytes;
    EXPECT_LE(total, o.max_bytes + 11000) << "after publish " << i;  // at most one entry over, until the next prune
  }
  EXPECT_TRUE(s.load(last));
  EXPECT_LE(s.list().size(), 4u);
}

TEST(CacheMaintenance, VerifyReportsAndRemovesBadEntries) {
  TempDir d;
  std::vector<std::string> keys;
  {
    Store s(one_root(d.path));
    for (int i = 0; i < 5; ++i) {
      keys.push_back(key_of(400 + static_cast<std::uint64_t>(i)));
      s.publish(keys.back(), cubin_for(keys.back()), {});
    }
  }
  fs::resize_file(entry_dir(d.path, keys[1]) / "kernel.cubin", 7);
  fs::remove(entry_dir(d.path, keys[3]) / "meta.json");
  fs::create_directories(d.path / "v1" / "ab" / "not-a-key");
  fs::create_directories(d.path / "v1" / "zz");
  fs::copy(entry_dir(d.path, keys[0]), d.path / "v1" / "zz" / keys[0]);  // a good entry in the wrong shard
  Store s(one_root(d.path));
  auto rep = s.verify();
  EXPECT_EQ(rep.checked, 7u);
  EXPECT_EQ(rep.removed, 4u);
  EXPECT_FALSE(fs::exists(d.path / "v1" / "zz" / keys[0]));
  ASSERT_EQ(rep.problems.size(), 4u);
  std::string all;
  for (auto& p : rep.problems) all += p + "\n";
  EXPECT_NE(all.find(keys[1] + ": cubin size 7"), std::string::npos) << all;
  EXPECT_NE(all.find(keys[3] + ": meta.json missing"), std::string::npos) << all;
  EXPECT_NE(all.find("not-a-key"), std::string::npos) << all;
  auto again = s.verify();
  EXPECT_EQ(again.checked, 3u);
  EXPECT_TRUE(again.problems.empty());
  for (int i : {0, 2, 4}) EXPECT_TRUE(s.load(keys[static_cast<std::size_t>(i)]));
}

TEST(CacheMaintenance, ClearRemovesEntriesKeepsLocks) {
  TempDir d;
  Store s(one_root(d.path));
  for (int i = 0; i < 4; ++i) {
    std::string k = key_of(500 + static_cast<std::uint64_t>(i));
    s.get_or_compile(
        k,
        [k] {
          return Artifact{cubin_for(k), {}, ""};
        },
        "cfg");
  }
  EXPECT_EQ(s.clear(), 4u);
  EXPECT_TRUE(s.list().empty());
  EXPECT_EQ(count_entries(d.path / "v1" / "locks"), 4u);  // lock files are never deleted
  EXPECT_FALSE(s.load(key_of(500)));
}

TEST(CacheMaintenance, ExportImportRoundTrip) {
  TempDir a, b;
  std::vector<std::string> keys;
  Store src(one_root(a.path));
  for (int i = 0; i < 5; ++i) {
    keys.push_back(key_of(600 + static_cast<std::uint64_t>(i)));
    src.publish(keys.back(), cubin_for(keys.back()), {{"config", fmt::format("c{}", i)}});
  }
  fs::path ar = a.path / "cache.fa4jit";
  EXPECT_EQ(src.export_archive(ar), 5u);
  EXPECT_EQ(src.export_archive(a.path / "two.fa4jit", {keys[0], keys[4]}), 2u);
  EXPECT_THROW(src.export_archive(a.path / "x", {key_of(999)}), jit::CacheError);

  Store dst(one_root(b.path));
  auto r = dst.import_archive(ar);
  EXPECT_EQ(r.imported, 5u);
  EXPECT_EQ(r.rejected, 0u);
  EXPECT_TRUE(r.problems.empty());
  for (int i = 0; i < 5; ++i) {
    auto e = dst.load(keys[static_cast<std::size_t>(i)]);
    ASSERT_TRUE(e);
    EXPECT_EQ(e->cubin, cubin_for(keys[static_cast<std::size_t>(i)]));
    EXPECT_EQ(e->meta["config"], fmt::format("c{}", i));
  }
  EXPECT_EQ(dst.import_archive(ar).present, 5u);

  // A flipped byte inside one cubin: that entry is rejected, the others still import.
  std::string bytes = read_all(ar);
  auto pos = bytes.find(cubin_for(keys[2]).substr(0, 64));
  ASSERT_NE(pos, std::string::npos);
  bytes[pos + 10] ^= 0x40;
  write_all(a.path / "flipped.fa4jit", bytes);
  TempDir c;
  Store dst2(one_root(c.path));
  auto r2 = dst2.import_archive(a.path / "flipped.fa4jit");
  EXPECT_EQ(r2.imported, 4u);
  EXPECT_EQ(r2.rejected, 1u);
  EXPECT_FALSE(dst2.load(keys[2]));

  // Truncated archive: what is complete imports, the truncation is reported.
  write_all(a.path / "short.fa4jit", read_all(ar).substr(0, read_all(ar).size() / 2));
  TempDir e;
  Store dst3(one_root(e.path));
  auto r3 = dst3.import_archive(a.path / "short.fa4jit");
  EXPECT_GE(r3.imported, 1u);
  EXPECT_LT(r3.imported, 5u);
  EXPECT_FALSE(r3.problems.empty());

  write_all(a.path / "junk", "this is not an archive");
  EXPECT_THROW(dst3.import_archive(a.path / "junk"), jit::CacheError);
}
