// SHA-256 and HMAC-SHA256 for the deployment secret (FA4JIT_CACHE_SECRET), from OpenSSL's
// libcrypto loaded at run time. dlopen rather than a link dependency: only stores with a secret
// need it, and the binaries must start on machines whose libcrypto differs from the build host's
// (or that have none); the three entry points used are the same in OpenSSL 1.1 and 3.x.
#include <dlfcn.h>

#include <fmt/format.h>

#include "cache/internal.hpp"
#include "fa4jit/errors.hpp"

namespace jit::cache::detail {

namespace {

struct EvpMd;  // OpenSSL's EVP_MD, used only through pointers
using EvpSha256Fn = const EvpMd* (*)();
// int EVP_Digest(const void*, size_t, unsigned char* md, unsigned int* size, const EVP_MD*, ENGINE*)
using EvpDigestFn = int (*)(const void*, std::size_t, unsigned char*, unsigned int*, const EvpMd*, void*);
// unsigned char* HMAC(const EVP_MD*, const void* key, int key_len, const unsigned char* d, size_t n,
//                     unsigned char* md, unsigned int* md_len)
using HmacFn = unsigned char* (*)(const EvpMd*, const void*, int, const unsigned char*, std::size_t, unsigned char*,
                                  unsigned int*);

struct LibCrypto {
  void* handle = nullptr;
  EvpSha256Fn sha256 = nullptr;
  EvpDigestFn digest = nullptr;
  HmacFn hmac = nullptr;
  std::string error;  // why it could not be loaded
};

const LibCrypto& libcrypto() {
  static const LibCrypto lib = [] {
    LibCrypto l;
    std::string tried;
    for (const char* name : {"libcrypto.so.3", "libcrypto.so.1.1", "libcrypto.so"}) {
      l.handle = ::dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (l.handle) break;
      const char* e = ::dlerror();
      tried += fmt::format("{}{}", tried.empty() ? "" : "; ", e ? e : name);
    }
    if (!l.handle) {
      l.error = tried;
      return l;
    }
    l.sha256 = reinterpret_cast<EvpSha256Fn>(::dlsym(l.handle, "EVP_sha256"));
    l.digest = reinterpret_cast<EvpDigestFn>(::dlsym(l.handle, "EVP_Digest"));
    l.hmac = reinterpret_cast<HmacFn>(::dlsym(l.handle, "HMAC"));
    if (!l.sha256 || !l.digest || !l.hmac) l.error = "libcrypto lacks EVP_sha256, EVP_Digest or HMAC";
    return l;  // the handle stays open for the life of the process, like libcuda's
  }();
  return lib;
}

const LibCrypto& need() {
  const LibCrypto& l = libcrypto();
  if (!l.error.empty())
    throw CacheError(
        fmt::format("FA4JIT_CACHE_SECRET is set, but OpenSSL's libcrypto (needed for HMAC-SHA256) "
                    "cannot be loaded: {}; install libssl3 (or OpenSSL 1.1) or unset the secret",
                    l.error));
  return l;
}

std::string hex(const unsigned char* p, unsigned n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (unsigned i = 0; i < n; ++i) {
    out[2 * i] = kDigits[p[i] >> 4];
    out[2 * i + 1] = kDigits[p[i] & 15];
  }
  return out;
}

}  // namespace

std::string sha256_hex(std::string_view data) {
  const LibCrypto& l = need();
  unsigned char md[64];
  unsigned n = 0;
  if (l.digest(data.data(), data.size(), md, &n, l.sha256(), nullptr) != 1 || n != 32)
    throw CacheError("libcrypto EVP_Digest(SHA-256) failed");
  return hex(md, n);
}

std::string hmac_sha256_hex(std::string_view secret, std::string_view message) {
  const LibCrypto& l = need();
  unsigned char md[64];
  unsigned n = 0;
  if (!l.hmac(l.sha256(), secret.data(), static_cast<int>(secret.size()),
              reinterpret_cast<const unsigned char*>(message.data()), message.size(), md, &n) ||
      n != 32)
    throw CacheError("libcrypto HMAC(SHA-256) failed");
  return hex(md, n);
}

bool equal_constant_time(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace jit::cache::detail
