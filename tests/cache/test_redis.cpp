// Redis remote tier against a real redis-server on a free loopback port (skipped when
// redis-server is not installed or fa4jit was built without hiredis), plus fake servers that
// refuse or never answer.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "cache/store.hpp"
#include "test_util.hpp"

using namespace cachetest;
using jit::cache::Artifact;
using jit::cache::Options;
using jit::cache::Store;

namespace {

std::string find_redis_server() {
  for (const char* dir : {"/usr/bin", "/usr/local/bin", "/usr/sbin", "/opt/homebrew/bin"}) {
    fs::path p = fs::path(dir) / "redis-server";
    if (::access(p.c_str(), X_OK) == 0) return p.string();
  }
  return {};
}

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

int connect_to(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Minimal RESP client for the test's own commands (SET raw garbage, EXISTS, FLUSHALL).
std::string resp(int port, const std::vector<std::string>& args) {
  int fd = connect_to(port);
  if (fd < 0) return "<no connection>";
  std::string req = fmt::format("*{}\r\n", args.size());
  for (auto& a : args) req += fmt::format("${}\r\n{}\r\n", a.size(), a);
  (void)!::write(fd, req.data(), req.size());
  timeval tv{2, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char buf[4096];
  ssize_t n = ::read(fd, buf, sizeof buf);
  ::close(fd);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "";
}

// Several commands on one connection (e.g. SELECT then EXISTS); returns the raw replies.
std::string resp_pipeline(int port, const std::vector<std::vector<std::string>>& cmds, std::size_t expect_lines) {
  int fd = connect_to(port);
  if (fd < 0) return "<no connection>";
  std::string req;
  for (auto& args : cmds) {
    req += fmt::format("*{}\r\n", args.size());
    for (auto& a : args) req += fmt::format("${}\r\n{}\r\n", a.size(), a);
  }
  (void)!::write(fd, req.data(), req.size());
  timeval tv{2, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string got;
  char buf[4096];
  auto lines = [&] {
    std::size_t n = 0;
    for (std::size_t p = got.find("\r\n"); p != std::string::npos; p = got.find("\r\n", p + 2)) ++n;
    return n;
  };
  while (lines() < expect_lines) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    got.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return got;
}

class CacheRedis : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!FA4JIT_CACHE_TESTS_REDIS) GTEST_SKIP() << "fa4jit_cache built without hiredis: Redis tier not tested";
    server_ = find_redis_server();
    if (server_.empty()) GTEST_SKIP() << "redis-server not installed (apt-get install redis-server): Redis tier not tested";
    port_ = free_port();
    // Redis >= 7 refuses DEBUG unless enabled; older servers do not know the option.
    if (FILE* f = ::popen((server_ + " --version").c_str(), "r")) {
      char buf[256] = {};
      std::string v = std::fgets(buf, sizeof buf, f) ? buf : "";
      ::pclose(f);
      auto at = v.find("v=");
      debug_option_ = at != std::string::npos && std::atoi(v.c_str() + at + 2) >= 7;
    }
    start();
  }
  void start() {
    std::vector<std::string> args = {server_, "--port", std::to_string(port_), "--bind", "127.0.0.1", "--save", "",
                                     "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning",
                                     "--dir", dir_.path.string()};
    if (debug_option_) args.insert(args.end(), {"--enable-debug-command", "local"});
    proc_ = std::make_unique<Proc>(spawn(args));
    auto t0 = std::chrono::steady_clock::now();
    while (seconds_since(t0) < 5) {
      if (resp(port_, {"PING"}).rfind("+PONG", 0) == 0) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    FAIL() << "redis-server did not start on port " << port_;
  }
  void kill_server() { proc_.reset(); }  // SIGKILL + reap
  std::string url() const { return fmt::format("redis://127.0.0.1:{}/0", port_); }
  Options opts(const fs::path& root) const {
    Options o;
    o.roots = {root};
    o.remote_url = url();
    return o;
  }

  TempDir dir_;
  std::string server_;
  int port_ = 0;
  bool debug_option_ = false;
  std::unique_ptr<Proc> proc_;
};

Artifact make(const std::string& k) { return Artifact{cubin_for(k), {{"config", "r"}}, ""}; }

}  // namespace

TEST_F(CacheRedis, RemoteHitIsVerifiedAndMaterialisedLocally) {
  TempDir a, b;
  std::string k = key_of(700);
  {
    Store s(opts(a.path));
    s.get_or_compile(k, [&] { return make(k); }, "cfg");
  }
  EXPECT_EQ(resp(port_, {"EXISTS", "fa4jit:v1:" + k}), ":1\r\n");
  Store s(opts(b.path));
  int calls = 0;
  auto art = s.get_or_compile(
      k,
      [&] {
        ++calls;
        return make(k);
      },
      "cfg");
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(art.origin, "remote");
  EXPECT_EQ(art.cubin, cubin_for(k));
  EXPECT_EQ(s.stats().remote_hits, 1u);
  EXPECT_EQ(s.stats().warnings, 0u);
  // Materialised: a store without the remote tier finds it on local disk.
  Options local;
  local.roots = {b.path};
  Store l(local);
  auto e = l.load(k);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->cubin, cubin_for(k));
  EXPECT_EQ(e->origin, b.path.string());
}

TEST_F(CacheRedis, DatabaseNumberFromUrlIsUsed) {
  TempDir a;
  Options o;
  o.roots = {a.path};
  o.remote_url = fmt::format("redis://127.0.0.1:{}/3", port_);
  Store s(o);
  std::string k = key_of(705);
  s.get_or_compile(k, [&] { return make(k); }, "cfg");
  EXPECT_EQ(resp(port_, {"EXISTS", "fa4jit:v1:" + k}), ":0\r\n");  // not in db 0
  EXPECT_EQ(resp_pipeline(port_, {{"SELECT", "3"}, {"EXISTS", "fa4jit:v1:" + k}}, 2), "+OK\r\n:1\r\n");
  EXPECT_EQ(s.stats().warnings, 0u);
}

TEST_F(CacheRedis, GarbageValuesAreRejected) {
  TempDir a, b;
  std::string k1 = key_of(710), k2 = key_of(711), k3 = key_of(712), other = key_of(713);
  resp(port_, {"SET", "fa4jit:v1:" + k1, "definitely not a cache value"});
  {
    // A well-formed value whose cubin was altered (digest mismatch), and a valid value of another key.
    Store w(opts(a.path));
    w.publish(other, cubin_for(other), {});
  }
  std::string good = resp(port_, {"GET", "fa4jit:v1:" + other});
  ASSERT_EQ(good[0], '$');
  std::string value = good.substr(good.find("\r\n") + 2);
  value.resize(value.size() - 2);
  std::string flipped = value;
  flipped.back() ^= 1;
  resp(port_, {"SET", "fa4jit:v1:" + k2, flipped});
  resp(port_, {"SET", "fa4jit:v1:" + k3, value});  // right format, wrong key inside
  Store s(opts(b.path));
  for (auto& k : {k1, k2, k3}) {
    EXPECT_FALSE(s.load(k)) << k;
    int calls = 0;
    EXPECT_EQ(s.get_or_compile(
                   k,
                   [&] {
                     ++calls;
                     return make(k);
                   },
                   "cfg")
                  .cubin,
              cubin_for(k));
    EXPECT_EQ(calls, 1);
  }
  EXPECT_EQ(s.stats().remote_hits, 0u);
  EXPECT_EQ(s.stats().warnings, 1u);  // one warning for all bad remote values
}

TEST_F(CacheRedis, ServerKilledMidRunMeansMissesOneWarningNoHang) {
  TempDir a;
  Store s(opts(a.path));
  std::string k0 = key_of(720);
  s.get_or_compile(k0, [&] { return make(k0); }, "cfg");
  EXPECT_EQ(s.stats().warnings, 0u);
  kill_server();
  testing::internal::CaptureStderr();
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 1; i <= 20; ++i) {
    std::string k = key_of(720 + static_cast<std::uint64_t>(i));
    auto t1 = std::chrono::steady_clock::now();
    EXPECT_EQ(s.get_or_compile(k, [&] { return make(k); }, "cfg").cubin, cubin_for(k));
    EXPECT_LT(seconds_since(t1), 1.5) << "call " << i;
  }
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_LT(seconds_since(t0), 10.0);  // 20 compiles + fsynced publishes; no call waits on Redis
  EXPECT_EQ(s.stats().warnings, 1u) << err;
  EXPECT_NE(err.find("remote cache"), std::string::npos) << err;
  EXPECT_EQ(s.stats().compiles, 21u);
  EXPECT_EQ(s.list().size(), 21u);  // the local tier keeps working
}

TEST_F(CacheRedis, RecoversAfterBackoff) {
  TempDir a;
  EnvVar bo("FA4JIT_REMOTE_BACKOFF_MS", "200");
  Store s(opts(a.path));
  kill_server();
  std::string k1 = key_of(740), k2 = key_of(741);
  s.get_or_compile(k1, [&] { return make(k1); }, "cfg");  // SET fails: warning, back off
  start();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  s.get_or_compile(k2, [&] { return make(k2); }, "cfg");
  EXPECT_EQ(resp(port_, {"EXISTS", "fa4jit:v1:" + k2}), ":1\r\n");
  EXPECT_EQ(s.stats().warnings, 1u);
}

TEST_F(CacheRedis, BlockedServerIsBoundedByCommandTimeout) {
  // DEBUG SLEEP blocks the real server for 2 s: our GET must give up after the 1 s timeout.
  TempDir a;
  Store s(opts(a.path));
  std::string k0 = key_of(750), k1 = key_of(751);
  s.get_or_compile(k0, [&] { return make(k0); }, "cfg");  // connection established
  std::thread sleeper([&] { resp(port_, {"DEBUG", "SLEEP", "2"}); });
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(s.load(k1));
  double dt = seconds_since(t0);
  EXPECT_GE(dt, 0.8);
  EXPECT_LT(dt, 1.6);
  auto t1 = std::chrono::steady_clock::now();
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(s.load(key_of(752 + static_cast<std::uint64_t>(i))));
  EXPECT_LT(seconds_since(t1), 0.2);  // backing off
  EXPECT_EQ(s.stats().warnings, 1u);
  sleeper.join();
}

TEST(CacheRedisFake, ServerThatNeverAnswersIsBoundedByTimeout) {
  if (!FA4JIT_CACHE_TESTS_REDIS) GTEST_SKIP() << "fa4jit_cache built without hiredis";
  // A listener that accepts connections (kernel backlog) but never replies.
  int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(lfd, 16), 0);
  socklen_t len = sizeof addr;
  ::getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len);
  TempDir d;
  Options o;
  o.roots = {d.path};
  o.remote_url = fmt::format("redis://127.0.0.1:{}/0", ntohs(addr.sin_port));
  Store s(o);
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(s.load(key_of(730)));
  double first = seconds_since(t0);
  EXPECT_GE(first, 0.9);  // the 1 s command timeout, not a hang
  EXPECT_LT(first, 1.6);
  auto t1 = std::chrono::steady_clock::now();
  for (int i = 0; i < 20; ++i) EXPECT_FALSE(s.load(key_of(731 + static_cast<std::uint64_t>(i))));
  EXPECT_LT(seconds_since(t1), 0.3);  // backing off: no more waiting on the dead server
  std::string k = key_of(760);
  EXPECT_EQ(s.get_or_compile(k, [&] { return make(k); }, "cfg").cubin, cubin_for(k));
  EXPECT_EQ(s.stats().warnings, 1u);
  ::close(lfd);
}

TEST(CacheRedisFake, NothingListeningAndBadUrls) {
  TempDir d;
  Options o;
  o.roots = {d.path};
  o.remote_url = fmt::format("redis://127.0.0.1:{}/0", free_port());
  Store s(o);
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(s.load(key_of(760 + static_cast<std::uint64_t>(i))));
  EXPECT_LT(seconds_since(t0), 0.5);
  EXPECT_EQ(s.stats().warnings, 1u);  // "unavailable", or "built without hiredis"
  for (std::string bad : {"http://x", "redis://host:notaport/0", "redis://h:1/x"}) {
    Options b;
    b.roots = {d.path};
    b.remote_url = bad;
    Store sb(b);
    EXPECT_EQ(sb.stats().warnings, 1u) << bad;
    EXPECT_FALSE(sb.load(key_of(770)));
  }
}
