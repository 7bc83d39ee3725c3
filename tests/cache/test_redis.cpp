// Redis remote tier against a real redis-server on a free loopback port (skipped when
// redis-server is not installed or fa4jit was built without hiredis), plus fake servers that
// refuse or never answer.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <functional>

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
    if (server_.empty())
      GTEST_SKIP() << "redis-server not installed (apt-get install redis-server): Redis tier not tested";
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
    std::vector<std::string> args = {
        server_,           "--port", std::to_string(port_), "--bind", "127.0.0.1",  "--save",  "",
        "--appendonly",    "no",     "--daemonize",         "no",     "--loglevel", "warning", "--dir",
        dir_.path.string()};
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

// A loopback server that answers the first command of each connection with `reply(fd, stop)`.
// Bounded: it stops when the test ends (destructor) and every behaviour checks `stop`.
class FakeServer {
 public:
  using Reply = std::function<void(int fd, const std::atomic<bool>& stop)>;
  explicit FakeServer(Reply reply) : reply_(std::move(reply)) {
    lfd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(lfd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(lfd_, 16);
    socklen_t len = sizeof a;
    ::getsockname(lfd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeServer() {
    stop_ = true;
    thread_.join();
    ::close(lfd_);
  }
  int port() const { return port_; }
  std::string url() const { return fmt::format("redis://127.0.0.1:{}/0", port_); }

 private:
  void serve() {
    while (!stop_) {
      pollfd p{lfd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      int fd = ::accept(lfd_, nullptr, nullptr);
      if (fd < 0) continue;
      char buf[4096];
      pollfd q{fd, POLLIN, 0};
      if (::poll(&q, 1, 2000) > 0 && ::read(fd, buf, sizeof buf) > 0) reply_(fd, stop_);
      ::close(fd);
    }
  }
  Reply reply_;
  int lfd_ = -1, port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// send() without SIGPIPE: the client under test may hang up mid-reply (that is the point).
bool send_all(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k <= 0) return false;
    p += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

// Sleeps up to `ms` in small steps; false when asked to stop.
bool nap(int ms, const std::atomic<bool>& stop) {
  for (int i = 0; i < ms / 10; ++i) {
    if (stop) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return !stop;
}

// The remote value format (cache/redis_tier.cpp): "FA4JITR1" | u32 LE meta length | meta | cubin.
std::string remote_value(const std::string& meta, const std::string& cubin) {
  std::string v = "FA4JITR1";
  for (int i = 0; i < 4; ++i) v += static_cast<char>((meta.size() >> (8 * i)) & 0xff);
  return v + meta + cubin;
}

}  // namespace

TEST_F(CacheRedis, RemoteHitIsVerifiedAndMaterialisedLocally) {
  TempDir a, b;
  std::string k = key_of(700);
  {
    Store s(opts(a.path));
    s.get_or_compile(
        k, [&] { return make(k); }, "cfg");
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
  s.get_or_compile(
      k, [&] { return make(k); }, "cfg");
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
  s.get_or_compile(
      k0, [&] { return make(k0); }, "cfg");
  EXPECT_EQ(s.stats().warnings, 0u);
  kill_server();
  testing::internal::CaptureStderr();
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 1; i <= 20; ++i) {
    std::string k = key_of(720 + static_cast<std::uint64_t>(i));
    auto t1 = std::chrono::steady_clock::now();
    EXPECT_EQ(s.get_or_compile(
                   k, [&] { return make(k); }, "cfg")
                  .cubin,
              cubin_for(k));
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
  s.get_or_compile(
      k1, [&] { return make(k1); }, "cfg");  // SET fails: warning, back off
  start();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  s.get_or_compile(
      k2, [&] { return make(k2); }, "cfg");
  EXPECT_EQ(resp(port_, {"EXISTS", "fa4jit:v1:" + k2}), ":1\r\n");
  EXPECT_EQ(s.stats().warnings, 1u);
}

TEST_F(CacheRedis, BlockedServerIsBoundedByCommandTimeout) {
  // DEBUG SLEEP blocks the real server for 2 s: our GET must give up after the 1 s timeout.
  TempDir a;
  Store s(opts(a.path));
  std::string k0 = key_of(750), k1 = key_of(751);
  s.get_or_compile(
      k0, [&] { return make(k0); }, "cfg");  // connection established
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
  EXPECT_EQ(s.get_or_compile(
                 k, [&] { return make(k); }, "cfg")
                .cubin,
            cubin_for(k));
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

TEST(CacheRedisFake, DrippingServerIsBoundedByOneDeadlinePerCall) {
  if (!FA4JIT_CACHE_TESTS_REDIS) GTEST_SKIP() << "fa4jit_cache built without hiredis";
  // One byte every 0.5 s: each read() sees data within hiredis' 1 s per-read timeout, so only a
  // deadline for the whole command stops it (it used to hold a lookup for as long as it dripped).
  FakeServer server([](int fd, const std::atomic<bool>& stop) {
    const std::string reply = "$10\r\n0123456789\r\n";
    for (char c : reply) {
      if (!send_all(fd, &c, 1) || !nap(500, stop)) return;
    }
  });
  TempDir d;
  Options o;
  o.roots = {d.path};
  o.remote_url = server.url();
  testing::internal::CaptureStderr();
  Store s(o);
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(s.load(key_of(780)));
  const double dt = seconds_since(t0);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_GE(dt, 1.1);  // connect (200 ms) + command (1000 ms) budget, spent waiting
  EXPECT_LT(dt, 1.5) << "a dripping server held the lookup past the ~1.2 s deadline";
  EXPECT_NE(err.find("no complete reply within 1200 ms"), std::string::npos) << err;
  EXPECT_EQ(s.stats().warnings, 1u) << err;
}

TEST(CacheRedisFake, OversizedReplyIsCappedNotBuffered) {
  if (!FA4JIT_CACHE_TESTS_REDIS) GTEST_SKIP() << "fa4jit_cache built without hiredis";
  // Claims 3 GB, sends 160 MiB as fast as it can, then keeps the reply alive a byte at a time:
  // refused on the announced length, before the data is read.
  FakeServer server([](int fd, const std::atomic<bool>& stop) {
    std::string head = "$3000000000\r\n";
    if (!send_all(fd, head.data(), head.size())) return;
    std::string chunk(1 << 20, '\0');
    for (int i = 0; i < 160 && !stop; ++i)
      if (!send_all(fd, chunk.data(), chunk.size())) return;
    for (int i = 0; i < 60 && nap(100, stop); ++i)
      if (!send_all(fd, "x", 1)) return;
  });
  TempDir d;
  Options o;
  o.roots = {d.path};
  o.remote_url = server.url();
  testing::internal::CaptureStderr();
  Store s(o);
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(s.load(key_of(781)));
  const double dt = seconds_since(t0);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_LT(dt, 1.0) << err;
  EXPECT_NE(err.find("byte cap on a cache value"), std::string::npos) << err;
}

TEST_F(CacheRedis, ForgedValuesAreRejectedAndNeverWrittenLocally) {
  // Another writer of the Redis server (no secret) copies B's signed value under key A, and
  // stores an unsigned value under C. With the deployment secret neither is served, nor written
  // to the local tier, where it would outlive a FLUSHALL.
  const std::string secret = "0123456789abcdef-deployment-secret";
  TempDir a, b;
  std::string ka = key_of(790), kb = key_of(791), kc = key_of(792);
  {
    Options w = opts(a.path);
    w.secret = secret;
    Store s(w);
    s.publish(kb, cubin_for(kb), {{"config", "b"}});
  }
  std::string good = resp(port_, {"GET", "fa4jit:v1:" + kb});
  ASSERT_EQ(good[0], '$');
  std::string value = good.substr(good.find("\r\n") + 2);
  value.resize(value.size() - 2);
  std::size_t meta_len = 0;  // resp() reads one 4 KiB chunk: the meta is in it, the cubin is not
  for (int i = 0; i < 4; ++i) meta_len |= static_cast<std::size_t>(static_cast<unsigned char>(value[8 + i])) << (8 * i);
  auto meta = nlohmann::json::parse(value.substr(12, meta_len));
  ASSERT_TRUE(meta.contains("mac"));
  meta["key"] = ka;  // the forger edits the key; size and digest still match B's cubin
  resp(port_, {"SET", "fa4jit:v1:" + ka, remote_value(meta.dump(), cubin_for(kb))});
  {
    Options u = opts(a.path);  // no secret: an unsigned, self-consistent value
    Store s(u);
    s.publish(kc, cubin_for(kc), {{"config", "c"}});
  }
  Options o = opts(b.path);
  o.secret = secret;
  testing::internal::CaptureStderr();
  Store s(o);
  EXPECT_FALSE(s.load(ka));
  EXPECT_FALSE(s.load(kc));
  auto hit = s.load(kb);  // the genuine signed value is served
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->origin, "remote");
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("MAC does not match"), std::string::npos) << err;
  EXPECT_EQ(s.stats().remote_hits, 1u);
  resp(port_, {"FLUSHALL"});
  Options local;
  local.roots = {b.path};
  Store l(local);
  EXPECT_FALSE(l.load(ka));
  EXPECT_FALSE(l.load(kc));
  EXPECT_TRUE(l.load(kb));

  // Without a secret the caller's validator decides (the runtime's recomputes the key): the
  // forged value is refused before anything is written.
  resp(port_, {"SET", "fa4jit:v1:" + ka, remote_value(meta.dump(), cubin_for(kb))});
  TempDir c;
  Options v = opts(c.path);
  v.validate = [](std::string_view key, const nlohmann::json& m, std::string_view) {
    return m.value("config", "") == (key == key_of(790) ? "a" : "b") ? jit::cache::Verdict{}
                                                                     : jit::cache::Verdict{"config is not this key's"};
  };
  Store sv(v);
  EXPECT_FALSE(sv.load(ka));
  EXPECT_TRUE(fs::is_empty(c.path / "v1" / "tmp"));
  EXPECT_TRUE(sv.list().empty());
}
