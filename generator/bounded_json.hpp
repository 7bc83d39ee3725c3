// JSON text parsed with a size cap and a nesting cap checked while parsing, so a hostile file
// is refused before it is fully built in memory (or walked recursively by anyone). A key repeated
// in one object is refused too: parsers silently keep one of the values (nlohmann: the last).
#pragma once
#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace jit::detail {

// A key that appears twice in one object; what() names it and the keys of the objects around it.
struct DuplicateKeyError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Throws std::length_error for text over max_bytes or containers nested deeper than
// max_depth, DuplicateKeyError for a repeated key, and nlohmann::json::exception for malformed
// text (parse_error) or a number out of range (out_of_range, e.g. 1e400). `at`, when given,
// receives the keys leading to where parsing stopped ("mask.kind"; empty: top level), so callers
// can name the field along with the file.
nlohmann::json parse_bounded_json(std::string_view text, std::size_t max_bytes, int max_depth,
                                  std::string* at = nullptr);

}  // namespace jit::detail
