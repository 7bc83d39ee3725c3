// Filesystem safety of a cache that others can write to: planted symlinks are never followed
// (a victim's files outside the cache survive every cleanup), FIFOs, devices and huge files in
// an entry never block or allocate, explicit permission modes whatever the umask, and clear/prune
// on a read-only tier are errors.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "cache/store.hpp"
#include "fa4jit/errors.hpp"
#include "test_util.hpp"

using namespace cachetest;
using jit::cache::Options;
using jit::cache::Store;

namespace {

// A symlink whose own mtime is two hours old: staging leftovers that old are swept.
void old_symlink(const fs::path& target, const fs::path& link) {
  fs::create_symlink(target, link);
  timespec t[2];
  t[0].tv_sec = t[1].tv_sec = ::time(nullptr) - 7200;
  t[0].tv_nsec = t[1].tv_nsec = 0;
  ASSERT_EQ(::utimensat(AT_FDCWD, link.c_str(), t, AT_SYMLINK_NOFOLLOW), 0);
}

void age(const fs::path& p) {
  timespec t[2];
  t[0].tv_sec = t[1].tv_sec = ::time(nullptr) - 7200;
  t[0].tv_nsec = t[1].tv_nsec = 0;
  ::utimensat(AT_FDCWD, p.c_str(), t, AT_SYMLINK_NOFOLLOW);
}

bool has_symlink_below(const fs::path& dir) {
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_symlink()) return true;
  return false;
}

// Another user's files: a second cache root with a real entry, and a plain directory.
struct Victim {
  TempDir dir;
  std::string key = key_of(900);
  Victim() {
    Store v(one_root(cache()));
    v.publish(key, cubin_for(key), {{"owner", "victim"}});
    fs::create_directories(home());
    write_all(home() / "precious.txt", "keep me");
    fs::create_directories(home() / "sub");
    write_all(home() / "sub" / "notes.txt", "and me");
    age(home() / "precious.txt");  // old enough to look like a stale staging leftover
    age(home() / "sub");
  }
  fs::path cache() const { return dir.path / "cache"; }
  fs::path home() const { return dir.path / "home"; }
  void expect_intact(const std::string& after) const {
    EXPECT_EQ(read_all(home() / "precious.txt"), "keep me") << "after " << after;
    EXPECT_EQ(read_all(home() / "sub" / "notes.txt"), "and me") << "after " << after;
    EXPECT_EQ(read_all(entry_dir(cache(), key) / "kernel.cubin"), cubin_for(key)) << "after " << after;
    EXPECT_TRUE(fs::exists(entry_dir(cache(), key) / "meta.json")) << "after " << after;
  }
};

}  // namespace

TEST(CacheFsSafety, PlantedSymlinksAreRemovedAsLinksNeverFollowed) {
  Victim victim;
  TempDir shared;  // a cache others can write to: they planted links to the victim's files
  std::string ka = key_of(901), kb = key_of(902);
  ASSERT_NE(ka.substr(0, 2), victim.key.substr(0, 2));
  ASSERT_NE(kb.substr(0, 2), victim.key.substr(0, 2));
  { Store init(one_root(shared.path)); }
  const fs::path v1 = shared.path / "v1";
  old_symlink(victim.home(), v1 / "tmp" / "evil-home");
  old_symlink(entry_dir(victim.cache(), victim.key), v1 / "tmp" / "evil-entry");
  old_symlink(victim.cache() / "v1" / victim.key.substr(0, 2), v1 / "tmp" / "evil-shard");
  fs::create_directories(v1 / ka.substr(0, 2));
  fs::create_symlink(victim.home(), entry_dir(shared.path, ka));                                      // an entry dir
  fs::create_symlink(victim.cache() / "v1" / victim.key.substr(0, 2), v1 / victim.key.substr(0, 2));  // a shard
  fs::create_directories(entry_dir(shared.path, kb));  // a real entry dir whose cubin is a link
  fs::create_symlink(victim.home() / "precious.txt", entry_dir(shared.path, kb) / "kernel.cubin");
  write_all(entry_dir(shared.path, kb) / "meta.json", "{}");
  // A real stale staging dir still gets swept.
  fs::create_directories(v1 / "tmp" / "stale-staging" / "x");
  write_all(v1 / "tmp" / "stale-staging" / "x" / "f", "old");
  age(v1 / "tmp" / "stale-staging");

  Store s(one_root(shared.path));  // construction sweeps v1/tmp
  victim.expect_intact("Store construction (sweep_tmp)");
  EXPECT_FALSE(fs::exists(v1 / "tmp" / "stale-staging"));
  EXPECT_FALSE(fs::is_symlink(v1 / "tmp" / "evil-home"));  // removed as a link
  EXPECT_FALSE(s.load(ka));
  EXPECT_FALSE(s.load(kb));
  EXPECT_FALSE(s.load(victim.key));
  victim.expect_intact("load + evict");
  s.verify();
  victim.expect_intact("verify");
  s.get_or_compile(
      ka,
      [&] {
        return jit::cache::Artifact{cubin_for(ka), {}, ""};
      },
      "cfg");
  // Publishing into the shard that is a link replaces the link by a real shard dir.
  s.get_or_compile(
      victim.key,
      [&] {
        return jit::cache::Artifact{cubin_for(victim.key), {}, ""};
      },
      "cfg");
  EXPECT_FALSE(fs::is_symlink(v1 / victim.key.substr(0, 2)));
  EXPECT_EQ(s.load(victim.key)->origin, shared.path.string());
  victim.expect_intact("publish over a symlinked shard");
  s.prune(0);
  victim.expect_intact("prune");
  s.clear();
  victim.expect_intact("clear");
  EXPECT_FALSE(has_symlink_below(shared.path)) << "planted links are removed";
  EXPECT_TRUE(s.list().empty());

  // The victim's own cache is untouched and clean.
  Store v(one_root(victim.cache()));
  auto a = v.load(victim.key);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->cubin, cubin_for(victim.key));
  EXPECT_TRUE(v.verify().problems.empty());
}

TEST(CacheFsSafety, LayoutDirReplacedByASymlinkIsRefusedNotSwept) {
  Victim victim;
  TempDir shared;
  fs::create_directories(shared.path / "v1");
  fs::create_symlink(victim.home(), shared.path / "v1" / "tmp");  // v1/tmp -> the victim's home
  testing::internal::CaptureStderr();
  Store s(one_root(shared.path));
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(s.writable_root().empty());
  EXPECT_NE(err.find("not a directory"), std::string::npos) << err;
  std::string k = key_of(905);
  EXPECT_EQ(s.get_or_compile(
                 k,
                 [&] {
                   return jit::cache::Artifact{cubin_for(k), {}, ""};
                 },
                 "cfg")
                .cubin,
            cubin_for(k));
  EXPECT_THROW(s.clear(), jit::CacheError);
  victim.expect_intact("a store over a symlinked v1/tmp");
  EXPECT_TRUE(fs::is_symlink(shared.path / "v1" / "tmp"));
}

TEST(CacheFsSafety, FifosDevicesAndHugeFilesNeverBlockOrAllocate) {
  TempDir d;
  std::vector<std::string> keys = {key_of(910), key_of(911), key_of(912), key_of(913)};
  {
    Store w(one_root(d.path));
    for (auto& k : keys) w.publish(k, cubin_for(k), {});
  }
  fs::remove(entry_dir(d.path, keys[0]) / "meta.json");
  ASSERT_EQ(::mkfifo((entry_dir(d.path, keys[0]) / "meta.json").c_str(), 0644), 0);  // hung prewarm/verify
  fs::remove(entry_dir(d.path, keys[1]) / "kernel.cubin");
  fs::create_symlink("/dev/zero", entry_dir(d.path, keys[1]) / "kernel.cubin");  // read 1 GiB
  fs::remove(entry_dir(d.path, keys[2]) / "kernel.cubin");
  ASSERT_EQ(::mkfifo((entry_dir(d.path, keys[2]) / "kernel.cubin").c_str(), 0644), 0);
  fs::resize_file(entry_dir(d.path, keys[3]) / "kernel.cubin", (64ull << 20) + 1);  // sparse, over the cap

  // In a child: a hang must fail this test, not hold the suite.
  const fs::path report = d.path / "report.txt";
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::string out;
    Store s(one_root(d.path));
    for (auto& p : s.verify().problems) out += p + "\n";
    bool rebuilt = true;
    for (auto& k : keys)
      rebuilt = s.get_or_compile(
                     k,
                     [&] {
                       return jit::cache::Artifact{cubin_for(k), {}, ""};
                     },
                     "cfg")
                        .cubin == cubin_for(k) &&
                rebuilt;
    out += rebuilt ? "rebuilt\n" : "wrong bytes\n";
    write_all(report, out);
    ::_exit(0);
  }
  auto t0 = std::chrono::steady_clock::now();
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (seconds_since(t0) > 20) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      FAIL() << "verify/get_or_compile hung on a FIFO or a device in a cache entry";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_LT(seconds_since(t0), 5.0);
  std::string rep = read_all(report);
  EXPECT_NE(rep.find(keys[0] + ": meta.json is not a regular file (removed)"), std::string::npos) << rep;
  EXPECT_NE(rep.find(keys[1] + ": kernel.cubin is a symbolic link (removed)"), std::string::npos) << rep;
  EXPECT_NE(rep.find(keys[2] + ": kernel.cubin is not a regular file (removed)"), std::string::npos) << rep;
  EXPECT_NE(rep.find(keys[3] + ": kernel.cubin too large (removed)"), std::string::npos) << rep;
  EXPECT_NE(rep.find("rebuilt"), std::string::npos) << rep;
}

TEST(CacheFsSafety, ModesAreExplicitNotTheUmask) {
  TempDir d;
  struct Umask {
    mode_t old;
    explicit Umask(mode_t m) : old(::umask(m)) {}
    ~Umask() { ::umask(old); }
  };
  auto mode = [](const fs::path& p) {
    struct stat st {};
    EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
    return st.st_mode & 07777;
  };
  std::string k = key_of(920);
  {
    Umask u(0);  // used to make a world-writable cache
    Store s(one_root(d.path / "private"));
    s.get_or_compile(
        k,
        [&] {
          return jit::cache::Artifact{cubin_for(k), {}, ""};
        },
        "cfg");
  }
  const fs::path p = d.path / "private";
  for (const fs::path& dir :
       {p, p / "v1", p / "v1" / "tmp", p / "v1" / "locks", p / "v1" / k.substr(0, 2), entry_dir(p, k)})
    EXPECT_EQ(mode(dir), 0755u) << dir;
  for (const char* f : {"kernel.cubin", "meta.json"}) EXPECT_EQ(mode(entry_dir(p, k) / f), 0644u) << f;
  EXPECT_EQ(mode(p / "v1" / "locks" / (k + ".lock")), 0644u);

  {
    Umask u(022);  // used to lock the group out of a shared cache
    Options o = one_root(d.path / "shared");
    o.shared = true;
    Store s(o);
    s.get_or_compile(
        k,
        [&] {
          return jit::cache::Artifact{cubin_for(k), {}, ""};
        },
        "cfg");
  }
  const fs::path q = d.path / "shared";
  for (const fs::path& dir : {q, q / "v1", q / "v1" / "tmp", q / "v1" / "locks", q / "v1" / k.substr(0, 2)})
    EXPECT_EQ(mode(dir), 03775u) << dir;     // group-writable, setgid, sticky
  EXPECT_EQ(mode(entry_dir(q, k)), 02755u);  // entries stay their writer's
  for (const char* f : {"kernel.cubin", "meta.json"}) EXPECT_EQ(mode(entry_dir(q, k) / f), 0644u) << f;
  EXPECT_EQ(mode(q / "v1" / "locks" / (k + ".lock")), 0664u);
}

TEST(CacheFsSafety, ClearAndPruneOnAReadOnlyTierAreErrors) {
  TempDir d;
  std::string k = key_of(930);
  {
    Store w(one_root(d.path));
    w.publish(k, cubin_for(k), {});
  }
  EnvVar f("FA4JIT_CACHE_FAULT", "readonly");
  Store s(one_root(d.path));
  EXPECT_THROW(s.clear(), jit::CacheError);
  EXPECT_THROW(s.prune(0), jit::CacheError);
  EXPECT_TRUE(s.load(k));        // nothing was removed
  Store memory_only(Options{});  // no roots by choice: clearing memory is all there is to do
  EXPECT_EQ(memory_only.clear(), 0u);
}
