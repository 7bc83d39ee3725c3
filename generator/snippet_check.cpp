#include "generator/snippet_check.hpp"

#include <algorithm>
#include <cctype>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "fa4jit/errors.hpp"
#include "generator/limits.hpp"

namespace jit::detail {

namespace {

// The snippet after translation phase 2 (backslash-newline removed), with each character's
// line in the snippet as written, so errors point at the line the user sees.
struct Spliced {
  std::string text;
  std::vector<int> line;
};

Spliced splice(const std::string& body) {
  Spliced s;
  s.text.reserve(body.size());
  s.line.reserve(body.size());
  int line = 1;
  for (std::size_t i = 0; i < body.size(); ++i) {
    // Only the exact "\\\n": where a compiler might also splice "\\ \n" or "\\\r\n", leaving
    // them apart here sees more brackets and literals than the compiler, never fewer.
    if (body[i] == '\\' && i + 1 < body.size() && body[i + 1] == '\n') {
      ++i;
      ++line;
      continue;
    }
    s.text.push_back(body[i]);
    s.line.push_back(line);
    if (body[i] == '\n') ++line;
  }
  return s;
}

bool ident_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == '$'; }
bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$'; }

class Checker {
 public:
  Checker(const std::string& what, Spliced s) : what_(what), s_(std::move(s)) {}

  void run() {
    const std::string& t = s_.text;
    bool line_start = true;  // only whitespace (and comments) so far on this line
    std::size_t i = 0;
    while (i < t.size()) {
      const char c = t[i];
      const char n = i + 1 < t.size() ? t[i + 1] : '\0';
      if (c == '\n') {
        line_start = true;
        ++i;
        continue;
      }
      if (c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f') {
        ++i;
        continue;
      }
      if (c == '/' && n == '/') {
        while (i < t.size() && t[i] != '\n') ++i;
        continue;
      }
      if (c == '/' && n == '*') {
        const std::size_t end = t.find("*/", i + 2);
        if (end == std::string::npos)
          fail(i, "a /* comment is not closed (it would swallow the generated code after the snippet)");
        i = end + 2;
        continue;
      }
      const bool directive = c == '#' || (c == '%' && n == ':');  // %: is the digraph of #
      if (directive && line_start)
        fail(i,
             "preprocessor directives are not allowed in snippets (a #define or #if would apply to the "
             "generated code after the snippet; for `#pragma unroll` write `_Pragma(\"unroll\")`)");
      line_start = false;
      if (ident_start(c)) {
        const std::size_t b = i;
        while (i < t.size() && ident_char(t[i])) ++i;
        const std::string_view id(t.data() + b, i - b);
        if (i < t.size() && t[i] == '"' && (id == "R" || id == "LR" || id == "uR" || id == "UR" || id == "u8R")) {
          raw_string(i);
        } else if (i < t.size() && (t[i] == '"' || t[i] == '\'') &&
                   (id == "L" || id == "u" || id == "U" || id == "u8")) {
          quoted(i);
        }
        continue;
      }
      if (std::isdigit(static_cast<unsigned char>(c)) || (c == '.' && std::isdigit(static_cast<unsigned char>(n)))) {
        number(i);
        continue;
      }
      if (c == '"' || c == '\'') {
        quoted(i);
        continue;
      }
      // Digraphs: <% %> <: :> are { } [ ]. "<::" not followed by ':' or '>' is '<' then "::".
      if (c == '<' && n == '%') {
        open('{', i);
        i += 2;
        continue;
      }
      if (c == '%' && n == '>') {
        close('}', i);
        i += 2;
        continue;
      }
      if (c == '<' && n == ':') {
        const char n2 = i + 2 < t.size() ? t[i + 2] : '\0';
        const char n3 = i + 3 < t.size() ? t[i + 3] : '\0';
        if (!(n2 == ':' && n3 != ':' && n3 != '>')) {
          open('[', i);
          i += 2;
          continue;
        }
      }
      if (c == ':' && n == '>') {
        close(']', i);
        i += 2;
        continue;
      }
      if (c == '(' || c == '[' || c == '{') open(c, i);
      if (c == ')' || c == ']' || c == '}') close(c, i);
      ++i;
    }
    if (!stack_.empty()) fail(stack_.back().pos, fmt::format("'{}' is never closed", stack_.back().c));
  }

 private:
  struct Open {
    char c;
    std::size_t pos;
  };

  [[noreturn]] void fail(std::size_t pos, const std::string& why) const {
    const int line = s_.line.empty() ? 1 : s_.line[std::min(pos, s_.line.size() - 1)];
    throw ConfigError(fmt::format("{} line {}: {}", what_, line, why));
  }

  void open(char c, std::size_t pos) {
    if (static_cast<int>(stack_.size()) >= kMaxSnippetNesting)
      fail(pos, fmt::format("brackets nested deeper than {} levels", kMaxSnippetNesting));
    stack_.push_back({c, pos});
  }

  void close(char c, std::size_t pos) {
    const char want = c == ')' ? '(' : c == ']' ? '[' : '{';
    if (stack_.empty())
      fail(pos, fmt::format("unbalanced '{}': nothing in the snippet is open (it would close the generated code "
                            "around the snippet)",
                            c));
    if (stack_.back().c != want)
      fail(pos, fmt::format("'{}' does not match the '{}' opened on line {}", c, stack_.back().c,
                            s_.line[stack_.back().pos]));
    stack_.pop_back();
  }

  // A pp-number: digits, letters, '.', digit separators (1'000) and exponent signs (1e+5, 0x1p-3).
  void number(std::size_t& i) const {
    const std::string& t = s_.text;
    while (i < t.size()) {
      const char c = t[i];
      if ((c == '+' || c == '-') && (t[i - 1] == 'e' || t[i - 1] == 'E' || t[i - 1] == 'p' || t[i - 1] == 'P')) {
        ++i;
      } else if (c == '\'' && i + 1 < t.size() && ident_char(t[i + 1])) {
        i += 2;
      } else if (ident_char(c) || c == '.') {
        ++i;
      } else {
        break;
      }
    }
  }

  // "..." or '...' starting at t[i]; backslash escapes; a line end inside is an error.
  void quoted(std::size_t& i) const {
    const std::string& t = s_.text;
    const char q = t[i];
    const std::size_t start = i++;
    while (i < t.size() && t[i] != q) {
      if (t[i] == '\n') break;
      i += t[i] == '\\' ? 2 : 1;
    }
    if (i >= t.size() || t[i] != q)
      fail(start,
           q == '"' ? "a string literal is not closed on its line" : "a character literal is not closed on its line");
    ++i;
  }

  // R"delim( ... )delim" starting at the quote t[i].
  void raw_string(std::size_t& i) const {
    const std::string& t = s_.text;
    const std::size_t start = i;
    const std::size_t paren = t.find('(', i + 1);
    if (paren == std::string::npos || paren - i - 1 > 16)
      fail(start, "a raw string literal has no '(' after its delimiter");
    const std::string end = ")" + t.substr(i + 1, paren - i - 1) + "\"";
    const std::size_t at = t.find(end, paren + 1);
    if (at == std::string::npos) fail(start, "a raw string literal is not closed");
    i = at + end.size();
  }

  std::string what_;
  Spliced s_;
  std::vector<Open> stack_;
};

// Offset of the first byte that is not well-formed UTF-8 (RFC 3629: no overlongs, no surrogates),
// or npos. The config travels as JSON (the generated source's header, the cache's meta.json).
std::size_t invalid_utf8(const std::string& s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    int len = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (b < 0x80)
      len = 1;
    else if (b >= 0xC2 && b <= 0xDF)
      len = 2;
    else if (b == 0xE0)
      len = 3, lo = 0xA0;
    else if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF)
      len = 3;
    else if (b == 0xED)
      len = 3, hi = 0x9F;
    else if (b == 0xF0)
      len = 4, lo = 0x90;
    else if (b >= 0xF1 && b <= 0xF3)
      len = 4;
    else if (b == 0xF4)
      len = 4, hi = 0x8F;
    else
      return i;
    if (i + static_cast<std::size_t>(len) > s.size()) return i;
    for (int k = 1; k < len; ++k) {
      const auto c = static_cast<unsigned char>(s[i + static_cast<std::size_t>(k)]);
      if (k == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xBF)) return i;
    }
    i += static_cast<std::size_t>(len);
  }
  return std::string::npos;
}

long line_at(const std::string& body, std::size_t pos) {
  return 1 + std::count(body.begin(), body.begin() + static_cast<std::ptrdiff_t>(pos), '\n');
}

}  // namespace

void check_snippet(const std::string& body, const std::string& what) {
  if (body.size() > kMaxSnippetBytes)
    throw ConfigError(fmt::format("{}: {} bytes; a snippet may hold at most {}", what, body.size(), kMaxSnippetBytes));
  if (const auto nul = body.find('\0'); nul != std::string::npos)
    throw ConfigError(
        fmt::format("{} line {}: a NUL byte (the compiler would stop reading there)", what, line_at(body, nul)));
  if (const auto bad = invalid_utf8(body); bad != std::string::npos)
    throw ConfigError(fmt::format("{} line {}: not valid UTF-8", what, line_at(body, bad)));
  const auto last = body.find_last_not_of(" \t\r\n\v\f");
  if (last != std::string::npos && body[last] == '\\')
    throw ConfigError(
        fmt::format("{} line {}: a backslash ends the snippet (it would join the generated line after it)", what,
                    line_at(body, last)));
  Checker(what, splice(body)).run();
}

}  // namespace jit::detail
