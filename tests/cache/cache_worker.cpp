// Worker process for the multi-process cache tests.
//   race <root> <countfile> <nkeys> <sleep_ms> <seed>   get_or_compile every key in a shuffled
//        order; a compile appends "<key> <pid>" to countfile (O_APPEND), sleeps, returns
//        cubin_for(key). Exit 0 iff every returned cubin is correct and nothing looked corrupt
//        (1: wrong bytes, 3: an entry was evicted); prints "compiles=N hits=M".
//   hammer <root> <nkeys> <ms>                          random get_or_compile for <ms>; exit 1 on a wrong byte
//   publish <root> <key>                                  publish cubin_for(key) (fault hooks via env)
//   hold <root> <key> <ms>                                flock the key's lock file, print "locked", sleep
//   trust <root> <private_root> <key>                     get_or_compile the key from a store whose private
//        tier is private_root; prints "origin=<where it came from>"; exit 0 iff the bytes are cubin_for(key)
#include <sys/file.h>

#include <algorithm>
#include <iostream>
#include <numeric>
#include <random>

#include "cache/store.hpp"
#include "test_util.hpp"

using namespace cachetest;

int main(int argc, char** argv) {
  std::vector<std::string> a(argv, argv + argc);
  if (a.size() >= 7 && a[1] == "race") {
    jit::cache::Options o;
    o.roots = {a[2]};
    o.lock_timeout = std::chrono::seconds(30);
    jit::cache::Store store(o);
    int nkeys = std::stoi(a[4]), sleep_ms = std::stoi(a[5]);
    std::vector<int> order(static_cast<std::size_t>(nkeys));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937(static_cast<unsigned>(std::stoul(a[6]))));
    int bad = 0;
    for (int i : order) {
      std::string key = key_of(static_cast<std::uint64_t>(i));
      auto art = store.get_or_compile(
          key,
          [&] {
            int fd = ::open(a[3].c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
            std::string line = fmt::format("{} {}\n", key, ::getpid());
            if (fd >= 0) {
              (void)!::write(fd, line.data(), line.size());
              ::close(fd);
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
            return jit::cache::Artifact{cubin_for(key), {{"config", fmt::format("cfg{}", i)}}, ""};
          },
          fmt::format("cfg{}", i));
      if (art.cubin != cubin_for(key)) {
        std::cerr << "worker " << ::getpid() << ": WRONG BYTES for " << key << " from " << art.origin << "\n";
        ++bad;
      }
    }
    auto s = store.stats();
    std::cout << "compiles=" << s.compiles << " hits=" << s.hits << std::endl;
    if (bad) return 1;
    // Entries are committed whole or not at all: a racing reader must never find one that looks
    // corrupt (that would be a false eviction, i.e. a lost entry).
    if (s.evictions) {
      std::cerr << "worker " << ::getpid() << ": evicted " << s.evictions << " entries\n";
      return 3;
    }
    return 0;
  }
  if (a.size() >= 5 && a[1] == "hammer") {
    // hammer <root> <nkeys> <ms>: get_or_compile random keys for <ms>, checking every byte.
    jit::cache::Options o;
    o.roots = {a[2]};
    o.lock_timeout = std::chrono::seconds(10);
    jit::cache::Store store(o);
    int nkeys = std::stoi(a[3]);
    std::mt19937 rng(static_cast<unsigned>(::getpid()));
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(std::stoi(a[4]));
    long calls = 0;
    while (std::chrono::steady_clock::now() < until) {
      std::string key = key_of(static_cast<std::uint64_t>(rng() % static_cast<unsigned>(nkeys)));
      auto art = store.get_or_compile(
          key,
          [&] {
            return jit::cache::Artifact{cubin_for(key), {}, ""};
          },
          "hammer");
      ++calls;
      if (art.cubin != cubin_for(key)) {
        std::cerr << "worker " << ::getpid() << ": WRONG BYTES for " << key << " from " << art.origin << "\n";
        return 1;
      }
    }
    auto s = store.stats();
    std::cout << "calls=" << calls << " compiles=" << s.compiles << " evictions=" << s.evictions << std::endl;
    return 0;
  }
  if (a.size() >= 4 && a[1] == "publish") {
    jit::cache::Options o;
    o.roots = {a[2]};
    jit::cache::Store store(o);
    store.publish(a[3], cubin_for(a[3]), {{"config", "published"}});
    return 0;
  }
  if (a.size() >= 5 && a[1] == "hold") {
    fs::path lock = fs::path(a[2]) / "v1" / "locks" / (a[3] + ".lock");
    fs::create_directories(lock.parent_path());
    int fd = ::open(lock.c_str(), O_RDWR | O_CREAT, 0666);
    if (fd < 0 || ::flock(fd, LOCK_EX) != 0) return 2;
    std::cout << "locked" << std::endl;
    std::this_thread::sleep_for(std::chrono::milliseconds(std::stoi(a[4])));
    return 0;
  }
  if (a.size() >= 5 && a[1] == "trust") {
    jit::cache::Options o;
    o.roots = {a[2]};
    o.private_root = a[3];
    jit::cache::Store store(o);
    const std::string& key = a[4];
    auto art = store.get_or_compile(
        key,
        [&] {
          return jit::cache::Artifact{cubin_for(key), {{"config", "trust"}}, ""};
        },
        "trust");
    std::cout << "origin=" << art.origin << std::endl;
    return art.cubin == cubin_for(key) ? 0 : 1;
  }
  std::cerr << "usage: see cache_worker.cpp\n";
  return 2;
}
