// Tiers and write failures: a read-only prebuilt tier in front of a writable one, no writable
// tier at all, a full disk (fault seam and a real RLIMIT_FSIZE in a child process).
#include <gtest/gtest.h>
#include <sys/resource.h>

#include "cache/store.hpp"
#include "fa4jit/errors.hpp"
#include "test_util.hpp"

using namespace cachetest;
using jit::cache::Artifact;
using jit::cache::Options;
using jit::cache::Store;

namespace {
Artifact make(const std::string& key) { return Artifact{cubin_for(key), {{"config", "t"}}, ""}; }
}  // namespace

TEST(CacheTiers, ReadOnlyPrebuiltThenWritableUserTier) {
  TempDir prebuilt, user;
  std::string shipped = key_of(10), bad = key_of(11), fresh = key_of(12);
  {
    Options o;
    o.roots = {prebuilt.path};
    Store w(o);
    w.publish(shipped, cubin_for(shipped), {{"config", "shipped"}});
    w.publish(bad, cubin_for(bad), {});
  }
  fs::resize_file(entry_dir(prebuilt.path, bad) / "kernel.cubin", 10);  // damaged in the prebuilt tier

  // Tests run as root, where permission bits stop nothing: the fault seam marks the tier read-only.
  EnvVar f("FA4JIT_CACHE_FAULT", "readonly:" + prebuilt.path.string());
  Options o;
  o.roots = {prebuilt.path, user.path};
  Store s(o);
  EXPECT_EQ(s.writable_root(), user.path);
  auto a = s.load(shipped);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->origin, prebuilt.path.string());

  int calls = 0;
  auto compile = [&](const std::string& k) {
    return [&, k] {
      ++calls;
      return make(k);
    };
  };
  EXPECT_EQ(s.get_or_compile(fresh, compile(fresh), "fresh").cubin, cubin_for(fresh));
  EXPECT_TRUE(fs::exists(entry_dir(user.path, fresh) / "meta.json"));
  EXPECT_FALSE(fs::exists(entry_dir(prebuilt.path, fresh)));

  // The damaged prebuilt entry is ignored (not deleted: the tier is read-only), rebuilt in the user tier.
  EXPECT_EQ(s.get_or_compile(bad, compile(bad), "bad").cubin, cubin_for(bad));
  EXPECT_TRUE(fs::exists(entry_dir(prebuilt.path, bad)));
  EXPECT_EQ(calls, 2);
  auto b = s.load(bad);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->origin, user.path.string());
  auto rep = s.verify();
  EXPECT_EQ(rep.removed, 0u);
  ASSERT_EQ(rep.problems.size(), 1u);
  EXPECT_NE(rep.problems[0].find("read-only"), std::string::npos) << rep.problems[0];
}

TEST(CacheTiers, NoWritableTierIsMemoryOnlyWithOneWarning) {
  TempDir d;
  EnvVar f("FA4JIT_CACHE_FAULT", "readonly");
  Options o;
  o.roots = {d.path / "a", d.path / "b"};
  testing::internal::CaptureStderr();
  Store s(o);
  int calls = 0;
  for (int i = 0; i < 5; ++i) {
    std::string k = key_of(20 + static_cast<std::uint64_t>(i));
    s.get_or_compile(
        k,
        [&, k] {
          ++calls;
          return make(k);
        },
        "cfg");
    auto a = s.load(k);
    ASSERT_TRUE(a);
    EXPECT_EQ(a->origin, "memory");
  }
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(calls, 5);
  EXPECT_EQ(s.stats().warnings, 1u) << err;
  EXPECT_NE(err.find("memory only"), std::string::npos) << err;
  EXPECT_TRUE(s.writable_root().empty());
  EXPECT_TRUE(s.list().empty());
}

TEST(CacheTiers, DiskFullFaultKeepsKernelAndWarnsOnce) {
  TempDir d;
  Options o;
  o.roots = {d.path};
  Store s(o);
  EnvVar f("FA4JIT_CACHE_FAULT", "enospc");  // after construction: the disk fills up mid-run
  testing::internal::CaptureStderr();
  for (int i = 0; i < 5; ++i) {
    std::string k = key_of(30 + static_cast<std::uint64_t>(i));
    EXPECT_EQ(s.get_or_compile(
                   k, [k] { return make(k); }, "cfg")
                  .cubin,
              cubin_for(k));
    EXPECT_TRUE(s.load(k));  // served from memory
  }
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(s.stats().publish_failures, 5u);
  EXPECT_EQ(s.stats().warnings, 1u) << err;
  EXPECT_NE(err.find("No space left"), std::string::npos) << err;
  EXPECT_TRUE(s.list().empty());
  EXPECT_EQ(count_entries(d.path / "v1" / "tmp"), 0u);
}

TEST(CacheTiers, RealFileSizeLimitInChildProcess) {
  // RLIMIT_FSIZE makes write() fail with EFBIG for real (no seam); SIGXFSZ is ignored as a
  // process that wants to survive would do. Done in a forked child to keep the limit out of here.
  TempDir d;
  std::string k = key_of(40);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) try {
      ::signal(SIGXFSZ, SIG_IGN);
      rlimit rl{4096, 4096};
      ::setrlimit(RLIMIT_FSIZE, &rl);
      Options o;
      o.roots = {d.path};
      Store s(o);
      auto a = s.get_or_compile(
          k,
          [&] {
            return Artifact{cubin_for(k, 64 * 1024), {}, ""};
          },
          "cfg");
      auto st = s.stats();
      auto again = s.load(k);
      bool ok = a.cubin == cubin_for(k, 64 * 1024) && st.publish_failures == 1 && st.warnings == 1 && again &&
                again->origin == "memory";
      if (!ok)
        std::fprintf(stderr, "child: bytes ok %d, publish_failures %llu, warnings %llu, origin %s\n",
                     a.cubin == cubin_for(k, 64 * 1024), static_cast<unsigned long long>(st.publish_failures),
                     static_cast<unsigned long long>(st.warnings), again ? again->origin.c_str() : "(miss)");
      ::_exit(ok ? 0 : 1);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: exception %s\n", e.what());
      ::_exit(2);
    }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << "child died with signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  Options o;
  o.roots = {d.path};
  Store s(o);
  EXPECT_FALSE(s.load(k));  // nothing partial became visible
  EXPECT_TRUE(s.list().empty());
  EXPECT_EQ(count_entries(d.path / "v1" / "tmp"), 0u);
}
