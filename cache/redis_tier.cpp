// Optional Redis remote tier (hiredis). Entries are immutable and content-addressed, so the
// protocol is just GET and SET NX. Every failure degrades to a miss: bounded connect and command
// timeouts, one warning per Store, and a back-off so a dead server costs nothing per call
// (Inductor drops its client silently; Triton asks the remote on every call).
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "cache/internal.hpp"

#ifdef FA4JIT_HAVE_HIREDIS
#include <dlfcn.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <poll.h>
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

bool decode_remote(std::string_view v, std::string& meta_text, std::string& cubin) {
  if (v.size() > kMaxRemoteValueBytes) return false;
  if (v.size() < kMagic.size() + 4 || v.substr(0, kMagic.size()) != kMagic) return false;
  std::uint32_t n = 0;
  for (int i = 0; i < 4; ++i)
    n |= static_cast<std::uint32_t>(static_cast<unsigned char>(v[kMagic.size() + i])) << (8 * i);
  std::size_t off = kMagic.size() + 4;
  if (n > v.size() - off || n > kMaxMetaBytes || v.size() - off - n > kMaxCubinBytes) return false;
  meta_text.assign(v.substr(off, n));
  cubin.assign(v.substr(off + n));
  return true;
}

#ifdef FA4JIT_HAVE_HIREDIS
namespace {

using Clock = std::chrono::steady_clock;

// libhiredis is loaded at run time, as libcuda (runtime/driver.cpp) and libcrypto (crypto.cpp)
// are: only a store with a redis:// URL needs it, so libfa4jit carries no NEEDED entry for it and
// starts on machines without it. The struct layouts (redisContext, redisReader, redisReply) are the
// header's, so only the library of the header's SONAME is loaded.
#define FA4JIT_HIREDIS_STR2(x) #x
#define FA4JIT_HIREDIS_STR(x) FA4JIT_HIREDIS_STR2(x)
#ifdef HIREDIS_SONAME
constexpr const char* kHiredisSoname = "libhiredis.so." FA4JIT_HIREDIS_STR(HIREDIS_SONAME);
#else
constexpr const char* kHiredisSoname = "libhiredis.so." FA4JIT_HIREDIS_STR(HIREDIS_MAJOR);
#endif

struct Hiredis {
  decltype(&::redisConnectWithTimeout) connect_with_timeout = nullptr;
  decltype(&::redisFree) free_context = nullptr;
  decltype(&::freeReplyObject) free_reply = nullptr;
  decltype(&::redisAppendCommandArgv) append_command_argv = nullptr;
  decltype(&::redisBufferWrite) buffer_write = nullptr;
  decltype(&::redisBufferRead) buffer_read = nullptr;
  decltype(&::redisGetReplyFromReader) get_reply_from_reader = nullptr;
  std::string error;  // why it could not be loaded
};

const Hiredis& hiredis() {
  static const Hiredis lib = [] {
    Hiredis h;
    void* handle = ::dlopen(kHiredisSoname, RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const char* e = ::dlerror();
      h.error = e ? e : kHiredisSoname;
      return h;
    }
    std::string missing;
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(handle, name));
      if (!fn) missing += fmt::format("{}{}", missing.empty() ? "" : ", ", name);
    };
    sym(h.connect_with_timeout, "redisConnectWithTimeout");
    sym(h.free_context, "redisFree");
    sym(h.free_reply, "freeReplyObject");
    sym(h.append_command_argv, "redisAppendCommandArgv");
    sym(h.buffer_write, "redisBufferWrite");
    sym(h.buffer_read, "redisBufferRead");
    sym(h.get_reply_from_reader, "redisGetReplyFromReader");
    if (!missing.empty()) h.error = fmt::format("{} lacks {}", kHiredisSoname, missing);
    return h;  // the handle stays open for the life of the process, like libcuda's
  }();
  return lib;
}

long env_ms(const char* name, long dflt) { return static_cast<long>(env_int(name, dflt, 0, 3600L * 1000)); }

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
  void operator()(redisReply* r) const { hiredis().free_reply(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;
struct CtxDeleter {
  void operator()(redisContext* c) const { hiredis().free_context(c); }
};

timeval to_tv(long ms) { return timeval{ms / 1000, static_cast<suseconds_t>((ms % 1000) * 1000)}; }

// Waits until fd is ready for `events` or the deadline passes (false). An error or hang-up counts
// as ready: the read or write that follows reports it.
bool wait_fd(int fd, short events, Clock::time_point deadline) {
  while (true) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 60000)));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return true;
  }
}

// A reply we will not buffer: GET answers a bulk string (or nil or an error), never an array; and
// nothing longer than the biggest value we would accept (a hostile or broken server must not make
// us allocate without bound).
std::string unacceptable(const redisContext* c) {
  const redisReader* r = c->reader;
  const std::size_t buffered = r->len - r->pos;
  if (buffered > kMaxRemoteValueBytes + 64)
    return fmt::format("reply larger than the {} byte cap on a cache value", kMaxRemoteValueBytes);
  // Before hiredis starts parsing a reply (ridx -1) its first bytes are still in the buffer:
  // refuse an array, and a bulk string whose announced length is over the cap, before reading it.
  if (r->ridx != -1 || buffered == 0) return {};
  const char* p = r->buf + r->pos;
  if (*p == '*') return "unexpected array reply";
  if (*p == '$') {
    unsigned long long n = 0;
    std::size_t i = 1;
    for (; i < buffered && i < 24 && p[i] >= '0' && p[i] <= '9'; ++i) n = n * 10 + static_cast<unsigned>(p[i] - '0');
    if (i < buffered && p[i] == '\r' && n > kMaxRemoteValueBytes)
      return fmt::format("reply of {} bytes is over the {} byte cap on a cache value", n, kMaxRemoteValueBytes);
  }
  return {};
}

class RedisTier final : public RemoteTier {
 public:
  RedisTier(std::string url, Url u, Warner& w)
      : url_(std::move(url)),
        u_(std::move(u)),
        warner_(w),
        connect_ms_(env_ms("FA4JIT_REMOTE_CONNECT_TIMEOUT_MS", 200)),
        command_ms_(env_ms("FA4JIT_REMOTE_TIMEOUT_MS", 1000)),
        backoff_min_(env_ms("FA4JIT_REMOTE_BACKOFF_MS", 5000)),
        ttl_s_(static_cast<long>(env_int("FA4JIT_REMOTE_TTL_S", 0, 0, 1L << 31))),
        backoff_(backoff_min_) {}

  std::string describe() const override { return url_; }

  std::optional<std::string> get(std::string_view key) override {
    std::string rkey = redis_key(key);
    std::optional<std::string> out;
    with_connection([&](redisContext* c, Clock::time_point deadline) {
      Reply r = command(c, deadline, {"GET", rkey});
      if (!r) return;
      if (r->type == REDIS_REPLY_STRING)
        out = std::string(r->str, r->len);
      else if (r->type == REDIS_REPLY_ERROR)
        warner_.warn("remote-reply",
                     fmt::format("remote cache {}: GET answered '{}'", url_, std::string(r->str, r->len)));
      ok();
    });
    return out;
  }

  void put_nx(std::string_view key, std::string_view value) override {
    if (value.size() > kMaxRemoteValueBytes) return;  // no reader would accept it
    std::string rkey = redis_key(key);
    const std::string ttl = std::to_string(ttl_s_);
    with_connection([&](redisContext* c, Clock::time_point deadline) {
      Reply r = ttl_s_ > 0 ? command(c, deadline, {"SET", rkey, value, "NX", "EX", ttl})
                           : command(c, deadline, {"SET", rkey, value, "NX"});
      if (!r) return;
      if (r->type == REDIS_REPLY_ERROR)
        warner_.warn("remote-reply",
                     fmt::format("remote cache {}: SET answered '{}'", url_, std::string(r->str, r->len)));
      ok();
    });
  }

 private:
  static std::string redis_key(std::string_view key) { return fmt::format("fa4jit:v1:{}", key); }

  // One deadline for the whole call: waiting for the connection, connecting and every command.
  // hiredis' own timeout is per read(), so a server dripping a byte at a time held a lookup for
  // 40 s; here the socket is non-blocking and every wait is a poll() against the deadline.
  template <class F>
  void with_connection(F&& f) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(connect_ms_ + command_ms_);
    // Cheap early exit while backing off: a dead server must not cost a connect per kernel.
    if (Clock::now().time_since_epoch().count() < backoff_until_.load()) return;
    // One connection, one command at a time. Not getting it before the deadline means the server
    // is slow: give up (a miss) instead of queueing behind it.
    std::unique_lock lk(mu_, std::defer_lock);
    if (!lk.try_lock_until(deadline)) return;
    if (Clock::now().time_since_epoch().count() < backoff_until_.load()) return;
    SigpipeGuard guard;
    // After fork() the child shares the parent's socket: replies could interleave. Drop it (the
    // close only affects the child's copy of the fd) and connect afresh.
    if (ctx_ && ctx_pid_ != ::getpid()) ctx_.reset();
    if (!ctx_ && !connect(deadline)) return;
    f(ctx_.get(), deadline);
  }

  // Sends one command and reads its reply, all before `deadline`; nullptr (after fail()) otherwise.
  Reply command(redisContext* c, Clock::time_point deadline, std::initializer_list<std::string_view> args) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    for (std::string_view a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    const char* name = argv.front();
    auto failed = [&](std::string why) {
      fail(fmt::format("{}: {}", std::string(name, lens.front()), why));
      return Reply();
    };
    if (hiredis().append_command_argv(c, static_cast<int>(argv.size()), argv.data(), lens.data()) != REDIS_OK)
      return failed(c->errstr);
    for (int done = 0; !done;) {
      if (hiredis().buffer_write(c, &done) != REDIS_OK) return failed(c->errstr);
      if (!done && !wait_fd(c->fd, POLLOUT, deadline)) return failed("timed out sending");
    }
    while (true) {
      if (std::string bad = unacceptable(c); !bad.empty()) return failed(bad);
      void* reply = nullptr;
      if (hiredis().get_reply_from_reader(c, &reply) != REDIS_OK) return failed(c->errstr);
      if (reply) return Reply(static_cast<redisReply*>(reply));
      if (!wait_fd(c->fd, POLLIN, deadline))
        return failed(fmt::format("no complete reply within {} ms", connect_ms_ + command_ms_));
      if (hiredis().buffer_read(c) != REDIS_OK) return failed(c->errstr);
    }
  }

  bool connect(Clock::time_point deadline) {
    const long left = static_cast<long>(std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count());
    if (left <= 0) return false;
    std::unique_ptr<redisContext, CtxDeleter> c(
        hiredis().connect_with_timeout(u_.host.c_str(), u_.port, to_tv(std::min(connect_ms_, left))));
    if (!c) return fail("cannot allocate a connection"), false;
    if (c->err) return fail(fmt::format("connect: {}", c->errstr)), false;
    // From here on hiredis runs non-blocking (its documented mode without REDIS_BLOCK) and
    // command() does the waiting, so no single read() can outlive the deadline.
    const int fl = ::fcntl(c->fd, F_GETFL);
    if (fl < 0 || ::fcntl(c->fd, F_SETFL, fl | O_NONBLOCK) != 0)
      return fail("cannot make the socket non-blocking"), false;
    c->flags &= ~REDIS_BLOCK;
    auto simple = [&](Reply r, const char* what) {
      if (!r) return false;  // command() has reported it
      if (r->type != REDIS_REPLY_ERROR) return true;
      fail(fmt::format("{}: {}", what, std::string(r->str, r->len)));
      return false;
    };
    if (!u_.password.empty() && !simple(command(c.get(), deadline, {"AUTH", u_.password}), "AUTH")) return false;
    const std::string db = std::to_string(u_.db);
    if (u_.db != 0 && !simple(command(c.get(), deadline, {"SELECT", db}), "SELECT")) return false;
    ctx_ = std::move(c);
    ctx_pid_ = ::getpid();
    return true;
  }

  void ok() { backoff_ = std::chrono::milliseconds(backoff_min_); }

  void fail(const std::string& why) {
    ctx_.reset();  // a timed-out connection may still deliver the old reply: never reuse it
    auto until = Clock::now() + backoff_;
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
  if (const std::string& why = hiredis().error; !why.empty()) {
    warner.warn("remote", fmt::format("remote cache {} needs {} (hiredis), which cannot be loaded ({}); remote tier "
                                      "disabled (install libhiredis)",
                                      url, kHiredisSoname, why));
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
