#include "generator/bounded_json.hpp"

#include <stdexcept>

#include <fmt/format.h>

namespace jit::detail {

nlohmann::json parse_bounded_json(std::string_view text, std::size_t max_bytes, int max_depth) {
  using json = nlohmann::json;
  if (text.size() > max_bytes)
    throw std::length_error(fmt::format("{} bytes of JSON; at most {} are read", text.size(), max_bytes));
  // nlohmann's parser keeps its own stack on the heap; the callback stops it at the first
  // container past the cap, before the rest of the text is read.
  const json::parser_callback_t limit = [max_depth](int depth, json::parse_event_t event, json&) {
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) && depth >= max_depth)
      throw std::length_error(fmt::format("JSON nested deeper than {} levels", max_depth));
    return true;
  };
  return json::parse(text.begin(), text.end(), limit);
}

}  // namespace jit::detail
