// Helpers shared by the cache tests and the worker executable: temp dirs, keys, deterministic
// "cubins", process spawning.
#pragma once
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "cache/store.hpp"

extern char** environ;

namespace cachetest {

namespace fs = std::filesystem;

inline std::uint64_t mix(std::uint64_t x) {  // splitmix64
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

inline std::string key_of(std::uint64_t i) { return fmt::format("{:016x}{:016x}", mix(i), mix(i + 0x1234567)); }

// Deterministic bytes for a key, sized 1..64 KiB depending on the key (or a fixed size).
inline std::string cubin_for(const std::string& key, std::size_t size = 0) {
  if (size == 0) size = 1024 + (mix(std::hash<std::string>{}(key)) % (63 * 1024));
  std::string out(size, '\0');
  std::uint64_t s = std::hash<std::string>{}(key);
  for (std::size_t i = 0; i < size; i += 8) {
    s = mix(s);
    for (std::size_t j = 0; j < 8 && i + j < size; ++j) out[i + j] = static_cast<char>(s >> (8 * j));
  }
  return out;
}

struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "fa4jit-cache-test-XXXXXX").string();
    char* p = ::mkdtemp(tmpl.data());
    if (!p) std::abort();
    path = p;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

// Scoped environment variable.
struct EnvVar {
  std::string name;
  std::optional<std::string> old;
  EnvVar(std::string n, const std::string& value) : name(std::move(n)) {
    if (const char* o = std::getenv(name.c_str())) old = o;
    ::setenv(name.c_str(), value.c_str(), 1);
  }
  ~EnvVar() {
    if (old)
      ::setenv(name.c_str(), old->c_str(), 1);
    else
      ::unsetenv(name.c_str());
  }
};

inline std::size_t count_entries(const fs::path& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return 0;
  return static_cast<std::size_t>(std::distance(fs::directory_iterator(dir, ec), fs::directory_iterator()));
}

inline std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void write_all(const fs::path& p, const std::string& data) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << data;
}

// A child process, started with posix_spawn; optional pipe for its stdout.
struct Proc {
  pid_t pid = -1;
  int out_fd = -1;
  ~Proc() {
    if (out_fd >= 0) ::close(out_fd);
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
  Proc() = default;
  Proc(Proc&& o) noexcept : pid(o.pid), out_fd(o.out_fd) { o.pid = -1, o.out_fd = -1; }
  int wait() {  // raw wait status
    int st = 0;
    ::waitpid(pid, &st, 0);
    pid = -1;
    return st;
  }
  // Reads stdout until `token` appears or the timeout passes.
  bool wait_for_output(const std::string& token, std::chrono::milliseconds timeout) {
    std::string got;
    auto deadline = std::chrono::steady_clock::now() + timeout;
    ::fcntl(out_fd, F_SETFL, O_NONBLOCK);
    while (std::chrono::steady_clock::now() < deadline) {
      char buf[256];
      ssize_t n = ::read(out_fd, buf, sizeof buf);
      if (n > 0) got.append(buf, static_cast<std::size_t>(n));
      if (got.find(token) != std::string::npos) return true;
      if (n == 0) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return false;
  }
};

// capture_stdout: Proc::out_fd reads the child's stdout (and its stderr too with merge_stderr).
inline Proc spawn(const std::vector<std::string>& args, const std::map<std::string, std::string>& env = {},
                  bool capture_stdout = false, bool merge_stderr = false) {
  std::vector<std::string> envs;
  for (char** e = environ; *e; ++e) {
    std::string s(*e);
    std::string name = s.substr(0, s.find('='));
    if (!env.count(name)) envs.push_back(s);
  }
  for (auto& [k, v] : env) envs.push_back(k + "=" + v);
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (auto& e : envs) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  int pipefd[2] = {-1, -1};
  if (capture_stdout) {
    if (::pipe2(pipefd, O_CLOEXEC) != 0) std::abort();
    posix_spawn_file_actions_adddup2(&fa, pipefd[1], 1);
    if (merge_stderr) posix_spawn_file_actions_adddup2(&fa, pipefd[1], 2);
  }
  Proc p;
  if (posix_spawn(&p.pid, args[0].c_str(), &fa, nullptr, argv.data(), envp.data()) != 0) p.pid = -1;
  posix_spawn_file_actions_destroy(&fa);
  if (capture_stdout) {
    ::close(pipefd[1]);
    p.out_fd = pipefd[0];
  }
  return p;
}

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Options of a store with the one tier `root`.
inline jit::cache::Options one_root(const fs::path& root) {
  jit::cache::Options o;
  o.roots = {root};
  return o;
}

// Where the disk tier keeps `key`'s entry (docs/CACHE.md: v1/<first two hex>/<key>/).
inline fs::path entry_dir(const fs::path& root, const std::string& key) { return root / "v1" / key.substr(0, 2) / key; }

}  // namespace cachetest
