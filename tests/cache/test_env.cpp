// Environment variables and sizes are parsed strictly: what does not parse is a CacheError naming
// the variable, never a silent other meaning ("TRUE" was false, "nan" and "0.5" were 0, "12abc" 12).
#include <gtest/gtest.h>

#include "cache/store.hpp"
#include "fa4jit/errors.hpp"
#include "test_util.hpp"

using namespace cachetest;
using jit::cache::Options;
using jit::cache::parse_size;
using jit::cache::Store;

TEST(CacheEnv, ParseSizeAcceptsWholeBytes) {
  EXPECT_EQ(parse_size("0", "x"), 0u);
  EXPECT_EQ(parse_size("12345", "x"), 12345u);
  EXPECT_EQ(parse_size("1K", "x"), 1024u);
  EXPECT_EQ(parse_size("1KiB", "x"), 1024u);
  EXPECT_EQ(parse_size("2KB", "x"), 2048u);
  EXPECT_EQ(parse_size("512M", "x"), 512ull << 20);
  EXPECT_EQ(parse_size("1g", "x"), 1ull << 30);
  EXPECT_EQ(parse_size("1.5G", "x"), 3ull << 29);
  EXPECT_EQ(parse_size("2T", "x"), 2ull << 40);
  EXPECT_EQ(parse_size("100B", "x"), 100u);
  EXPECT_EQ(parse_size("18446744073709551615", "x"), 18446744073709551615ull);
}

TEST(CacheEnv, ParseSizeRejectsWhatIsNotAByteCount) {
  for (const char* bad : {"",
                          "nan",
                          "inf",
                          "-1",
                          "-0",
                          "0.5",
                          "1.3K",
                          "1e9",
                          "1 G",
                          " 1",
                          "1G ",
                          "+1",
                          "1.",
                          ".5",
                          "1X",
                          "1GB!",
                          "1KiBB",
                          "18446744073709551616",
                          "99999999999999999999T",
                          "0x10",
                          "1,000"}) {
    try {
      parse_size(bad, "FA4JIT_CACHE_MAX_BYTES");
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const jit::CacheError& e) {
      EXPECT_NE(std::string(e.what()).find("FA4JIT_CACHE_MAX_BYTES='"), std::string::npos) << e.what();
    }
  }
}

TEST(CacheEnv, InvalidValuesAreErrorsNamingTheVariable) {
  EnvVar dir("FA4JIT_CACHE_DIR", "/x/y");
  auto expect_error = [](const char* var, const char* value) {
    EnvVar v(var, value);
    try {
      Store::options_from_env();
      ADD_FAILURE() << var << "=" << value << " was accepted";
    } catch (const jit::CacheError& e) {
      EXPECT_NE(std::string(e.what()).find(var), std::string::npos) << e.what();
    }
  };
  for (const char* v : {"nan", "inf", "0.5", "-1", "lots"}) expect_error("FA4JIT_CACHE_MAX_BYTES", v);
  for (const char* v : {"2", "enable", "truee", "y"}) expect_error("FA4JIT_SEALED", v);
  for (const char* v : {"abc", "12abc", "-5", "1.5", " 7"}) expect_error("FA4JIT_CACHE_LOCK_TIMEOUT_MS", v);
  expect_error("FA4JIT_CACHE_SHARED", "group");
  {
    EnvVar t("FA4JIT_SEALED", "TRUE"), l("FA4JIT_CACHE_LOCK_TIMEOUT_MS", "250"), sh("FA4JIT_CACHE_SHARED", "On");
    Options o = Store::options_from_env();
    EXPECT_TRUE(o.sealed);
    EXPECT_EQ(o.lock_timeout.count(), 250);
    EXPECT_TRUE(o.shared);
  }
  {
    EnvVar f("FA4JIT_SEALED", "Off");
    EXPECT_FALSE(Store::options_from_env().sealed);
  }
  // Read where the store is made: an error at construction, not a silent 0.
  TempDir d;
  Options o;
  o.roots = {d.path};
  {
    EnvVar p("FA4JIT_CACHE_PRUNE_INTERVAL_S", "soon");
    EXPECT_THROW(Store{o}, jit::CacheError);
  }
  // The fault seam: a misspelt fault used to inject nothing, silently.
  for (const char* v : {"bogus", "enospc,bogus", "readonly:", "enospc,", "ENOSPC"}) {
    EnvVar f("FA4JIT_CACHE_FAULT", v);
    try {
      Store s(o);
      ADD_FAILURE() << "FA4JIT_CACHE_FAULT=" << v << " was accepted";
    } catch (const jit::CacheError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("FA4JIT_CACHE_FAULT='") + v + "'"), std::string::npos)
          << e.what();
    }
  }
  EnvVar ok("FA4JIT_CACHE_FAULT", "enospc,readonly:/x,kill_before_rename");
  EXPECT_NO_THROW(Store{o});
}

TEST(CacheEnv, NoCacheRootResolvedWarnsMemoryOnlyOnce) {
  EnvVar a("FA4JIT_CACHE_PATH", ""), b("FA4JIT_CACHE_DIR", ""), c("XDG_CACHE_HOME", ""), h("HOME", "");
  Options o = Store::options_from_env();
  EXPECT_TRUE(o.roots.empty());
  testing::internal::CaptureStderr();
  Store s(o);
  std::string k = key_of(950);
  for (int i = 0; i < 3; ++i)
    s.get_or_compile(
        k,
        [&] {
          return jit::cache::Artifact{cubin_for(k), {}, ""};
        },
        "cfg");
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(s.stats().warnings, 1u) << err;
  EXPECT_NE(err.find("memory only"), std::string::npos) << err;
  EXPECT_THROW(s.clear(), jit::CacheError);  // `cache clear` with nothing on disk says so
  {
    EnvVar colon("FA4JIT_CACHE_PATH", "::");  // names no directory either
    Options o2 = Store::options_from_env();
    EXPECT_TRUE(o2.roots.empty());
    EXPECT_TRUE(o2.warn_if_memory_only);
  }
}

TEST(CacheEnv, ShortSecretIsAnError) {
  TempDir d;
  Options o;
  o.roots = {d.path};
  o.secret = "hunter2";
  try {
    Store s(o);
    ADD_FAILURE() << "a 7-byte secret was accepted";
  } catch (const jit::CacheError& e) {
    EXPECT_NE(std::string(e.what()).find("FA4JIT_CACHE_SECRET"), std::string::npos) << e.what();
  }
}
