// JSON text parsed with a size cap and a nesting cap checked while parsing, so a hostile file
// is refused before it is fully built in memory (or walked recursively by anyone).
#pragma once
#include <cstddef>
#include <string_view>

#include <nlohmann/json.hpp>

namespace jit::detail {

// Throws std::length_error for text over max_bytes or containers nested deeper than
// max_depth, nlohmann::json::parse_error for malformed text. Callers add the file name.
nlohmann::json parse_bounded_json(std::string_view text, std::size_t max_bytes, int max_depth);

}  // namespace jit::detail
