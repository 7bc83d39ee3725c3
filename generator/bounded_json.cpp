#include "generator/bounded_json.hpp"

#include <set>
#include <vector>

#include <fmt/format.h>

namespace jit::detail {

namespace {

// The open objects while parsing: the keys seen in each (duplicates) and the latest one (where).
struct Objects {
  struct Frame {
    std::set<std::string> seen;
    std::string key;
  };
  std::vector<Frame> open;

  std::string path() const {
    std::string out;
    for (const Frame& f : open)
      if (!f.key.empty()) out += (out.empty() ? "" : ".") + f.key;
    return out;
  }
  void key(const std::string& k) {
    Frame& f = open.back();
    f.key = k;
    if (!f.seen.insert(k).second)
      throw DuplicateKeyError(fmt::format("duplicate key \"{}\"{}; each key may appear once in an object",
                                          path().substr(0, 256), open.size() > 1 ? "" : " at the top level"));
  }
};

}  // namespace

nlohmann::json parse_bounded_json(std::string_view text, std::size_t max_bytes, int max_depth, std::string* at) {
  using json = nlohmann::json;
  if (text.size() > max_bytes)
    throw std::length_error(fmt::format("{} bytes of JSON; at most {} are read", text.size(), max_bytes));
  Objects objects;
  // nlohmann's parser keeps its own stack on the heap; the callback stops it at the first
  // container past the cap, before the rest of the text is read.
  const json::parser_callback_t check = [max_depth, &objects](int depth, json::parse_event_t event, json& parsed) {
    using E = json::parse_event_t;
    if ((event == E::object_start || event == E::array_start) && depth >= max_depth)
      throw std::length_error(fmt::format("JSON nested deeper than {} levels", max_depth));
    if (event == E::object_start) objects.open.emplace_back();
    if (event == E::object_end) objects.open.pop_back();
    if (event == E::key) objects.key(parsed.get_ref<const std::string&>());
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), check);
  } catch (...) {
    if (at) *at = objects.path();
    throw;
  }
}

}  // namespace jit::detail
