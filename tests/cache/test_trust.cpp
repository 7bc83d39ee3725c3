// Who may write a tier decides what kernels a process runs, so a tier is trusted only when every
// directory from its root to the entries is owned by this user or root and writable by no one
// else (docs/CACHE.md "Trust"). An untrusted tier is read as a miss with one warning, nothing is
// written there, and kernels are compiled into the user's private tier. The two-user test runs
// with real users (useradd) where the tests run as root, as in CI.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

#include "cache/store.hpp"
#include "test_util.hpp"

using namespace cachetest;
using jit::cache::Artifact;
using jit::cache::Options;
using jit::cache::Store;

namespace {

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// A tier holding one genuine entry for `key`, written by this user.
void seed(const fs::path& root, const std::string& key) {
  Store w(one_root(root));
  w.publish(key, cubin_for(key), {{"config", "seed"}});
  ASSERT_TRUE(fs::exists(entry_dir(root, key) / "meta.json"));
}

// What a store on `root` with `private_root` does with `key`, and what it said on stderr.
struct Outcome {
  bool served = false;  // load() found the entry in root
  std::string origin;   // of get_or_compile's result
  int compiles = 0;
  std::uint64_t warnings = 0;
  std::string err;
};

Outcome use(const Options& o, const std::string& key) {
  Outcome r;
  testing::internal::CaptureStderr();
  {
    Store s(o);
    r.served = s.load(key).has_value();
    const Artifact a = s.get_or_compile(
        key,
        [&] {
          return ++r.compiles, Artifact{cubin_for(key), {{"config", "mine"}}, ""};
        },
        "cfg");
    r.origin = a.origin;
    r.warnings = s.stats().warnings;
  }
  r.err = testing::internal::GetCapturedStderr();
  return r;
}

Options with_private(const fs::path& root, const fs::path& mine) {
  Options o = one_root(root);
  o.private_root = mine;
  return o;
}

struct Damage {
  const char* name;
  const char* dir;  // below the root: "", "v1", "shard", "v1/tmp", "v1/locks"
  mode_t mode;      // chmod'ed to this, or 0: chown'ed to another uid instead
};

fs::path damaged(const fs::path& root, const std::string& key, const Damage& d) {
  const std::string dir = d.dir;
  if (dir == "shard") return root / "v1" / key.substr(0, 2);
  return dir.empty() ? root : root / dir;
}

class UntrustedDir : public ::testing::TestWithParam<Damage> {};

}  // namespace

TEST_P(UntrustedDir, IsAMissWithOneWarningAndKernelsGoToThePrivateTier) {
  const Damage& dmg = GetParam();
  if (dmg.mode == 0 && ::geteuid() != 0) GTEST_SKIP() << "chown to another user needs root";
  TempDir d;
  const fs::path root = d.path / "cache", mine = d.path / "mine";
  const std::string key = key_of(1001);
  seed(root, key);
  const fs::path bad = damaged(root, key, dmg);
  if (dmg.mode)
    ASSERT_EQ(::chmod(bad.c_str(), dmg.mode), 0) << bad;
  else
    ASSERT_EQ(::chown(bad.c_str(), 4242, static_cast<gid_t>(-1)), 0) << bad;

  const Outcome r = use(with_private(root, mine), key);
  EXPECT_FALSE(r.served) << dmg.name;
  EXPECT_EQ(r.compiles, 1);
  EXPECT_EQ(r.origin, "compiled");
  EXPECT_EQ(r.warnings, 1u) << r.err;
  EXPECT_EQ(count_of(r.err, "warning:"), 1u) << r.err;
  EXPECT_NE(r.err.find("cache directory " + root.string() + " is not trusted: " + bad.string()), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find(dmg.mode ? "writable by" : "is owned by uid 4242, not by you or root"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("kernels are compiled into " + mine.string()), std::string::npos) << r.err;
  // Compiled into the private tier; the untrusted one is neither written nor cleaned.
  EXPECT_EQ(read_all(entry_dir(mine, key) / "kernel.cubin"), cubin_for(key));
  EXPECT_TRUE(fs::exists(entry_dir(root, key) / "meta.json"));
  EXPECT_EQ(count_entries(root / "v1" / "tmp"), 0u);
  // The next process finds it in the private tier: a hit, no compile, the same one warning.
  const Outcome again = use(with_private(root, mine), key);
  EXPECT_EQ(again.compiles, 0);
  EXPECT_EQ(again.origin, mine.string());
  EXPECT_EQ(again.warnings, 1u) << again.err;
}

INSTANTIATE_TEST_SUITE_P(
    Dirs, UntrustedDir,
    ::testing::Values(Damage{"RootStickyWorldWritable", "", 01777}, Damage{"RootWorldWritable", "", 0777},
                      Damage{"V1StickyWorldWritable", "v1", 01777}, Damage{"ShardWorldWritable", "shard", 0777},
                      Damage{"ShardGroupWritable", "shard", 0775}, Damage{"TmpWorldWritable", "v1/tmp", 01777},
                      Damage{"LocksGroupWritable", "v1/locks", 0770}, Damage{"RootOwnedByAnother", "", 0},
                      Damage{"V1OwnedByAnother", "v1", 0}, Damage{"ShardOwnedByAnother", "shard", 0}),
    [](const ::testing::TestParamInfo<Damage>& i) { return std::string(i.param.name); });

TEST(CacheTrust, WithoutAPrivateTierKernelsStayInMemoryWithOneWarning) {
  TempDir d;
  const std::string key = key_of(1002);
  seed(d.path, key);
  ASSERT_EQ(::chmod(d.path.c_str(), 01777), 0);  // like /tmp: anyone may add an entry
  const Outcome r = use(one_root(d.path), key);
  EXPECT_FALSE(r.served);
  EXPECT_EQ(r.origin, "compiled");
  EXPECT_EQ(r.warnings, 1u) << r.err;
  EXPECT_NE(r.err.find("writable by every user (mode 1777; the sticky bit does not stop new entries)"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("kept in memory only"), std::string::npos) << r.err;
}

TEST(CacheTrust, ASharedTierTrustsItsGroupButNeverEveryUser) {
  TempDir d;
  const fs::path root = d.path / "shared", mine = d.path / "mine";
  const std::string key = key_of(1003);
  Options o = with_private(root, mine);
  o.shared = true;
  {
    Store w(o);  // layout 03775: group-writable, setgid, sticky
    w.publish(key, cubin_for(key), {});
  }
  Outcome r = use(o, key);
  EXPECT_TRUE(r.served);
  EXPECT_EQ(r.warnings, 0u) << r.err;
  // The same group-writable tree without FA4JIT_CACHE_SHARED: the group is not trusted.
  r = use(with_private(root, mine), key);
  EXPECT_FALSE(r.served);
  EXPECT_NE(r.err.find("writable by its group"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("FA4JIT_CACHE_SHARED=1"), std::string::npos) << r.err;
  // Shared or not, a directory every user can write is refused.
  const fs::path shard = root / "v1" / key.substr(0, 2);
  ASSERT_EQ(::chmod(shard.c_str(), 03777), 0);
  fs::remove_all(mine);
  r = use(o, key);
  EXPECT_FALSE(r.served);
  EXPECT_EQ(r.warnings, 1u) << r.err;
  EXPECT_NE(r.err.find(shard.string() + " is writable by every user"), std::string::npos) << r.err;
}

// ---- two real users --------------------------------------------------------------------------

namespace {

std::string useradd_path() {
  for (const char* p : {"/usr/sbin/useradd", "/sbin/useradd", "/usr/bin/useradd"})
    if (::access(p, X_OK) == 0) return p;
  return {};
}

// Runs a command, stdout and stderr together; the raw wait status in *status.
std::string run(const std::vector<std::string>& args, int* status) {
  Proc p = spawn(args, {}, /*capture_stdout=*/true);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(p.out_fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<std::size_t>(n));
  *status = p.wait();
  return out;
}

// A system user made for the test with useradd and removed with userdel afterwards.
struct TestUser {
  std::string name, why_not;
  uid_t uid = 0;
  gid_t gid = 0;
  bool created = false;
  explicit TestUser(std::string n) : name(std::move(n)) {
    int st = 0;
    const std::string out =
        run({useradd_path(), "--system", "--no-create-home", "--user-group", "--shell", "/bin/false", name}, &st);
    created = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    // 9: the user exists already (a previous run that was killed): use it.
    if (!created && !(WIFEXITED(st) && WEXITSTATUS(st) == 9)) {
      why_not = fmt::format("useradd {} failed ({}): {}", name, st, out);
      return;
    }
    std::vector<char> buf(16384);
    passwd pw{}, *found = nullptr;
    if (::getpwnam_r(name.c_str(), &pw, buf.data(), buf.size(), &found) != 0 || !found) {
      why_not = "user " + name + " not found after useradd";
      return;
    }
    uid = pw.pw_uid;
    gid = pw.pw_gid;
  }
  ~TestUser() {
    if (!created) return;
    int st = 0;
    for (const char* p : {"/usr/sbin/userdel", "/sbin/userdel"})
      if (::access(p, X_OK) == 0) {
        run({p, name}, &st);
        break;
      }
  }
  TestUser(const TestUser&) = delete;
  TestUser& operator=(const TestUser&) = delete;
};

// Runs args as `u` (no supplementary groups), stdout and stderr together.
std::string run_as(const TestUser& u, const std::vector<std::string>& args, int* status) {
  std::vector<char*> argv, envp;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::string path = "PATH=/usr/bin:/bin";
  envp = {path.data(), nullptr};
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return "pipe failed";
  const pid_t pid = ::fork();
  if (pid == 0) {  // only async-signal-safe calls until execve
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    if (::setgroups(0, nullptr) != 0 || ::setgid(u.gid) != 0 || ::setuid(u.uid) != 0) ::_exit(126);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  ::waitpid(pid, status, 0);
  return out;
}

uid_t owner(const fs::path& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0 ? st.st_uid : static_cast<uid_t>(-1);
}

}  // namespace

// The probe's attack: in a world-writable sticky directory (like /tmp), user X creates v1 (1777)
// and a shard (0777) holding an entry for key A whose cubin is another kernel (size and digest
// consistent: that needs no secret). User Y must not be served it: a miss, one warning, and A
// compiled into Y's own cache.
TEST(CacheTrust, TwoUsersAnotherUsersEntryInAStickyDirIsNeverServed) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to add two users (CI runs the tests as root)";
  if (useradd_path().empty()) GTEST_SKIP() << "useradd is not installed";
  TestUser x("fa4jit-test-x"), y("fa4jit-test-y");
  if (!x.why_not.empty()) GTEST_SKIP() << x.why_not;
  if (!y.why_not.empty()) GTEST_SKIP() << y.why_not;

  TempDir d;
  ASSERT_EQ(::chmod(d.path.c_str(), 0755), 0);
  const std::string key = key_of(1004);
  const std::string other = cubin_for(key_of(1005));  // X's kernel, to be served under A
  {
    Store src(one_root(d.path / "src"));
    src.publish(key, other, {{"config", "x"}});
  }
  const fs::path shared = d.path / "shared", v1 = shared / "v1", shard = v1 / key.substr(0, 2);
  fs::create_directory(shared);
  ASSERT_EQ(::chmod(shared.c_str(), 01777), 0);
  int st = 0;
  std::string out = run_as(x,
                           {"/bin/sh", "-c",
                            fmt::format("mkdir -m 1777 '{}' && mkdir -m 0777 '{}' && cp -R '{}' '{}/'", v1.string(),
                                        shard.string(), entry_dir(d.path / "src", key).string(), shard.string())},
                           &st);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << out;
  ASSERT_EQ(owner(entry_dir(shared, key) / "kernel.cubin"), x.uid);

  // Y runs from a copy of the worker (the build tree may be out of Y's reach), with a cache of its own.
  const fs::path bin = d.path / "fa4jit_cache_worker", mine = d.path / "y-cache";
  fs::copy_file(FA4JIT_CACHE_WORKER, bin);
  ASSERT_EQ(::chmod(bin.c_str(), 0755), 0);
  fs::create_directory(mine);
  ASSERT_EQ(::chown(mine.c_str(), y.uid, y.gid), 0);
  ASSERT_EQ(::chmod(mine.c_str(), 0700), 0);

  out = run_as(y, {bin.string(), "trust", shared.string(), mine.string(), key}, &st);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "Y was served X's kernel (exit 1) or failed: " << st << "\n"
                                                     << out;
  EXPECT_NE(out.find("origin=compiled"), std::string::npos) << out;
  EXPECT_EQ(count_of(out, "warning:"), 1u) << out;
  EXPECT_NE(out.find("cache directory " + shared.string() + " is not trusted"), std::string::npos) << out;
  EXPECT_NE(out.find("kernels are compiled into " + mine.string()), std::string::npos) << out;
  EXPECT_EQ(owner(entry_dir(mine, key) / "kernel.cubin"), y.uid);
  EXPECT_EQ(read_all(entry_dir(mine, key) / "kernel.cubin"), cubin_for(key));
  EXPECT_EQ(read_all(entry_dir(shared, key) / "kernel.cubin"), other);  // X's entry: not Y's to remove
}
