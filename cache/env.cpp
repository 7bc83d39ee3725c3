// Strict parsing of the cache's environment variables and sizes. A value that does not parse is
// a CacheError naming the variable: "TRUE", "nan", "0.5" or "12abc" used to turn silently into
// false, 0 or 12, which changed what the cache did without a word.
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <limits>

#include <fmt/format.h>

#include "cache/internal.hpp"
#include "fa4jit/errors.hpp"

namespace jit::cache {

std::uint64_t parse_size(std::string_view text, std::string_view what) {
  auto bad = [&](std::string_view why) {
    return CacheError(
        fmt::format("{}='{}' is not a size: {} (bytes as digits, optionally with a fraction and a "
                    "K/M/G/T suffix in powers of 1024, e.g. 4096, 512M, 1.5G)",
                    what, text, why));
  };
  std::size_t i = 0;
  unsigned __int128 whole = 0, frac = 0, frac_scale = 1;
  // Far beyond u64, and small enough that the value shifted by a suffix (<< 40) fits in 128 bits.
  constexpr unsigned __int128 kLimit = static_cast<unsigned __int128>(1) << 80;
  auto digit = [&](std::size_t at) { return at < text.size() && text[at] >= '0' && text[at] <= '9'; };
  if (!digit(0)) throw bad(text.empty() ? "empty" : "it must start with a digit");
  while (digit(i)) {
    whole = whole * 10 + static_cast<unsigned>(text[i++] - '0');
    if (whole > kLimit) throw bad("too large");
  }
  if (i < text.size() && text[i] == '.') {
    ++i;
    if (!digit(i)) throw bad("no digits after the decimal point");
    while (digit(i)) {
      if (frac_scale > kLimit) throw bad("too many decimals");
      frac = frac * 10 + static_cast<unsigned>(text[i++] - '0');
      frac_scale *= 10;
    }
  }
  const std::string_view suffix = text.substr(i);
  unsigned shift = 0;
  if (!suffix.empty() && suffix != "B") {
    switch (std::toupper(static_cast<unsigned char>(suffix[0]))) {
      case 'K': shift = 10; break;
      case 'M': shift = 20; break;
      case 'G': shift = 30; break;
      case 'T': shift = 40; break;
      default: throw bad(fmt::format("unknown suffix '{}'", suffix));
    }
    const std::string_view rest = suffix.substr(1);
    if (!rest.empty() && rest != "B" && rest != "iB") throw bad(fmt::format("unknown suffix '{}'", suffix));
  }
  const unsigned __int128 scaled_frac = (frac << shift);
  if (scaled_frac % frac_scale != 0) throw bad("not a whole number of bytes");
  const unsigned __int128 bytes = (whole << shift) + scaled_frac / frac_scale;
  if (bytes > std::numeric_limits<std::uint64_t>::max()) throw bad("too large");
  return static_cast<std::uint64_t>(bytes);
}

namespace detail {

bool env_bool(const char* name, bool dflt) {
  const char* v = std::getenv(name);
  if (!v || !*v) return dflt;
  std::string s(v);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (s == "1" || s == "true" || s == "yes" || s == "on") return true;
  if (s == "0" || s == "false" || s == "no" || s == "off") return false;
  throw CacheError(fmt::format("{}='{}' is not a boolean: use 1/0, true/false, yes/no or on/off", name, v));
}

std::int64_t env_int(const char* name, std::int64_t dflt, std::int64_t lo, std::int64_t hi) {
  const char* v = std::getenv(name);
  if (!v || !*v) return dflt;
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v, &end, 10);
  const bool digits_only = *v == '-' || (*v >= '0' && *v <= '9');  // strtoll also skips spaces and '+'
  if (!digits_only || *end != 0 || errno == ERANGE || x < lo || x > hi)
    throw CacheError(fmt::format("{}='{}' is not an integer in [{}, {}]", name, v, lo, hi));
  return x;
}

}  // namespace detail
}  // namespace jit::cache
