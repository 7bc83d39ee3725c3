// Optional Redis remote tier (hiredis). Entries are immutable and content-addressed, so the
// protocol is just GET and SET NX. Every failure degrades to a miss: bounded connect and command
// timeouts, one warning per Store, and a back-off so a dead server costs nothing per call
// (Inductor drops its client silently; Triton asks the remote on every call).
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "cache/internal.hpp"

#ifdef FA4JIT_HAVE_HIREDIS
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <signal.h>
#include <sys/time.h>
#include <unistd.h>
#endif

namespace jit::cache::detail {

namespace {
constexpr std::string_view kMagic = "FA4JITR1";

}  // namespace

std::string encode_remote(const nlohmann::json& meta, std::string_view cubin) {
  std::string m = meta.dump();
  std::string out(kMagic);
  std::uint32_t n = static_cast<std::uint32_t>(m.size());
  for (int i = 0; i < 4; ++i) out += static_cast<char>((n >> (8 * i)) & 0xff);
  out += m;
  out.append(cubin);
  return out;
}

bool decode_remote(std::string_view v, nlohmann::json& meta, std::string& cubin) {
  if (v.size() < kMagic.size() + 4 || v.substr(0, kMagic.size()) != kMagic) return false;
  std::uint32_t n = 0;
  for (int i = 0; i < 4; ++i) n |= static_cast<std::uint32_t>(static_cast<unsigned char>(v[kMagic.size() + i])) << (8 * i);
  std::size_t off = kMagic.size() + 4;
  if (n > v.size() - off) return false;
  meta = nlohmann::json::parse(v.substr(off, n), nullptr, false);
  if (meta.is_discarded()) return false;
  cubin.assign(v.substr(off + n));
  return true;
}

#ifdef FA4JIT_HAVE_HIREDIS
namespace {

long env_ms(const char* name, long dflt) {
  const char* v = std::getenv(name);
  if (!v || !*v) return dflt;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  return (end && *end == 0 && x >= 0) ? x : dflt;
}

struct Url {
  std::string host = "127.0.0.1";
  int port = 6379;
  int db = 0;
  std::string password;
};

std::optional<Url> parse_url(std::string_view s) {
  constexpr std::string_view scheme = "redis://";
  if (s.substr(0, scheme.size()) != scheme) return std::nullopt;
  s.remove_prefix(scheme.size());
  Url u;
  if (auto at = s.find('@'); at != std::string_view::npos) {
    std::string_view cred = s.substr(0, at);
    if (auto colon = cred.find(':'); colon != std::string_view::npos) cred.remove_prefix(colon + 1);
    u.password = std::string(cred);
    s.remove_prefix(at + 1);
  }
  std::string_view hostport = s.substr(0, s.find('/'));
  if (auto slash = s.find('/'); slash != std::string_view::npos && slash + 1 < s.size()) {
    std::string dbs(s.substr(slash + 1));
    char* end = nullptr;
    long db = std::strtol(dbs.c_str(), &end, 10);
    if (*end != 0 || db < 0) return std::nullopt;
    u.db = static_cast<int>(db);
  }
  if (auto colon = hostport.rfind(':'); colon != std::string_view::npos) {
    std::string ps(hostport.substr(colon + 1));
    char* end = nullptr;
    long port = std::strtol(ps.c_str(), &end, 10);
    if (*end != 0 || port <= 0 || port > 65535) return std::nullopt;
    u.port = static_cast<int>(port);
    hostport = hostport.substr(0, colon);
  }
  if (!hostport.empty()) u.host = std::string(hostport);
  return u;
}

// hiredis write()s to the socket: a server that went away would kill us with SIGPIPE. Block it
// on this thread for the duration of the call and swallow what it raised, without touching the
// process-wide disposition the application may rely on.
class SigpipeGuard {
 public:
  SigpipeGuard() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set_, &old_);
  }
  ~SigpipeGuard() {
    if (!was_pending_) {
      sigset_t pending;
      sigpending(&pending);
      if (sigismember(&pending, SIGPIPE)) {
        timespec zero{0, 0};
        sigtimedwait(&set_, nullptr, &zero);
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }

 private:
  sigset_t set_{}, old_{};
  bool was_pending_ = false;
};

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;
struct CtxDeleter {
  void operator()(redisContext* c) const { redisFree(c); }
};

timeval to_tv(long ms) { return timeval{ms / 1000, static_cast<suseconds_t>((ms % 1000) * 1000)}; }

class RedisTier final : public RemoteTier {
 public:
  RedisTier(std::string url, Url u, Warner& w)
      : url_(std::move(url)),
        u_(std::move(u)),
        warner_(w),
        connect_ms_(env_ms("FA4JIT_REMOTE_CONNECT_TIMEOUT_MS", 200)),
        command_ms_(env_ms("FA4JIT_REMOTE_TIMEOUT_MS", 1000)),
        backoff_min_(env_ms("FA4JIT_REMOTE_BACKOFF_MS", 5000)),
        ttl_s_(env_ms("FA4JIT_REMOTE_TTL_S", 0)),
        backoff_(backoff_min_) {}

  std::string describe() const override { return url_; }

  std::optional<std::string> get(std::string_view key) override {
    std::string rkey = redis_key(key);
    std::optional<std::string> out;
    with_connection([&](redisContext* c) {
      Reply r(static_cast<redisReply*>(redisCommand(c, "GET %b", rkey.data(), rkey.size())));
      if (!r) return fail(fmt::format("GET failed: {}", c->errstr));
      if (r->type == REDIS_REPLY_STRING) out = std::string(r->str, r->len);
      else if (r->type == REDIS_REPLY_ERROR) warner_.warn("remote-reply", fmt::format("remote cache {}: GET answered '{}'", url_, std::string(r->str, r->len)));
      ok();
    });
    return out;
  }

  void put_nx(std::string_view key, std::string_view value) override {
    std::string rkey = redis_key(key);
    with_connection([&](redisContext* c) {
      Reply r(static_cast<redisReply*>(
          ttl_s_ > 0 ? redisCommand(c, "SET %b %b NX EX %ld", rkey.data(), rkey.size(), value.data(), value.size(), ttl_s_)
                     : redisCommand(c, "SET %b %b NX", rkey.data(), rkey.size(), value.data(), value.size())));
      if (!r) return fail(fmt::format("SET failed: {}", c->errstr));
      if (r->type == REDIS_REPLY_ERROR) warner_.warn("remote-reply", fmt::format("remote cache {}: SET answered '{}'", url_, std::string(r->str, r->len)));
      ok();
    });
  }

 private:
  static std::string redis_key(std::string_view key) { return fmt::format("fa4jit:v1:{}", key); }

  template <class F>
  void with_connection(F&& f) {
    // Cheap early exit while backing off: a dead server must not cost a connect per kernel.
    if (std::chrono::steady_clock::now().time_since_epoch().count() < backoff_until_.load()) return;
    // One connection, one command at a time. Waiting longer than one command timeout for it
    // means the server is slow: give up (a miss) instead of queueing behind it.
    std::unique_lock lk(mu_, std::defer_lock);
    if (!lk.try_lock_for(std::chrono::milliseconds(command_ms_ + connect_ms_))) return;
    if (std::chrono::steady_clock::now().time_since_epoch().count() < backoff_until_.load()) return;
    SigpipeGuard guard;
    // After fork() the child shares the parent's socket: replies could interleave. Drop it (the
    // close only affects the child's copy of the fd) and connect afresh.
    if (ctx_ && ctx_pid_ != ::getpid()) ctx_.reset();
    if (!ctx_ && !connect()) return;
    f(ctx_.get());
  }

  bool connect() {
    std::unique_ptr<redisContext, CtxDeleter> c(redisConnectWithTimeout(u_.host.c_str(), u_.port, to_tv(connect_ms_)));
    if (!c) return fail("cannot allocate a connection"), false;
    if (c->err) return fail(fmt::format("connect: {}", c->errstr)), false;
    if (redisSetTimeout(c.get(), to_tv(command_ms_)) != REDIS_OK) return fail("cannot set the command timeout"), false;
    auto simple = [&](Reply r, const char* what) {
      if (!r) return fail(fmt::format("{}: {}", what, c->errstr)), false;
      if (r->type == REDIS_REPLY_ERROR) return fail(fmt::format("{}: {}", what, std::string(r->str, r->len))), false;
      return true;
    };
    if (!u_.password.empty() &&
        !simple(Reply(static_cast<redisReply*>(redisCommand(c.get(), "AUTH %s", u_.password.c_str()))), "AUTH"))
      return false;
    if (u_.db != 0 && !simple(Reply(static_cast<redisReply*>(redisCommand(c.get(), "SELECT %d", u_.db))), "SELECT"))
      return false;
    ctx_ = std::move(c);
    ctx_pid_ = ::getpid();
    return true;
  }

  void ok() { backoff_ = std::chrono::milliseconds(backoff_min_); }

  void fail(const std::string& why) {
    ctx_.reset();  // a timed-out connection may still deliver the old reply: never reuse it
    auto until = std::chrono::steady_clock::now() + backoff_;
    backoff_until_.store(until.time_since_epoch().count());
    warner_.warn("remote", fmt::format("remote cache {} unavailable ({}); treating it as a miss, retrying after {} ms",
                                       url_, why, backoff_.count()));
    backoff_ = std::min(backoff_ * 2, std::chrono::milliseconds(300000));
  }

  std::string url_;
  Url u_;
  Warner& warner_;
  long connect_ms_, command_ms_, backoff_min_, ttl_s_;
  TimedMutex mu_;
  std::unique_ptr<redisContext, CtxDeleter> ctx_;
  pid_t ctx_pid_ = 0;
  std::chrono::milliseconds backoff_;
  std::atomic<std::int64_t> backoff_until_{0};
};

}  // namespace

std::unique_ptr<RemoteTier> make_remote(const std::string& url, Warner& warner) {
  if (url.empty()) return nullptr;
  auto u = parse_url(url);
  if (!u) {
    warner.warn("remote", fmt::format("remote cache URL '{}' is not redis://host:port/db; remote tier disabled", url));
    return nullptr;
  }
  return std::make_unique<RedisTier>(url, std::move(*u), warner);
}

#else  // no hiredis

std::unique_ptr<RemoteTier> make_remote(const std::string& url, Warner& warner) {
  if (!url.empty())
    warner.warn("remote", fmt::format("fa4jit was built without hiredis; remote cache {} is disabled", url));
  return nullptr;
}

#endif

}  // namespace jit::cache::detail
