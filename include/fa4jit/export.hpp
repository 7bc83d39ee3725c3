/* FA4JIT_API marks what libfa4jit.so exports: the library is built with -fvisibility=hidden, so
 * everything else (jit::detail, the cache, fmt, nlohmann instances) stays internal. A plain
 * attribute, usable from C and C++ headers alike; harmless in the static library. */
#ifndef FA4JIT_EXPORT_HPP
#define FA4JIT_EXPORT_HPP

#if defined(__GNUC__) || defined(__clang__)
#define FA4JIT_API __attribute__((visibility("default")))
#else
#define FA4JIT_API
#endif

#endif /* FA4JIT_EXPORT_HPP */
