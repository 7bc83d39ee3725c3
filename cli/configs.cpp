#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "fa4jit/errors.hpp"
#include "generator/bounded_json.hpp"
#include "generator/config_json.hpp"
#include "generator/limits.hpp"
#include "generator/presets.hpp"

namespace jit::cli {

std::vector<std::string> split_list(const std::string& csv) {
  std::vector<std::string> out;
  std::stringstream ss(csv);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

namespace {

// At most kMaxConfigBytes, checked while reading: a huge file, /dev/zero or a pipe that never
// ends is refused after 1 MiB instead of being read whole.
std::string read_config_text(const std::string& file) {
  std::ifstream f(file, std::ios::binary);
  if (!f) throw ConfigError(fmt::format("{}: cannot open", file));
  std::string text(detail::kMaxConfigBytes + 1, '\0');
  f.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (f.bad()) throw ConfigError(fmt::format("{}: cannot read", file));
  text.resize(static_cast<std::size_t>(f.gcount()));
  if (text.size() > detail::kMaxConfigBytes)
    throw ConfigError(fmt::format("{}: larger than {} bytes; config files are at most that", file, detail::kMaxConfigBytes));
  return text;
}

}  // namespace

std::vector<FA4Config> load_configs(const std::string& config_file, const std::vector<std::string>& presets) {
  std::vector<FA4Config> out;
  std::vector<std::string> preset_list = presets;
  if (!config_file.empty()) {
    const std::string text = read_config_text(config_file);
    nlohmann::json j;
    try {
      j = detail::parse_bounded_json(text, detail::kMaxConfigBytes, detail::kMaxJsonDepth);
    } catch (const nlohmann::json::parse_error& e) {
      throw ConfigError(fmt::format("{}: not valid JSON: {}", config_file, e.what()));
    } catch (const std::length_error& e) {
      throw ConfigError(fmt::format("{}: {}", config_file, e.what()));
    }
    auto add = [&](const nlohmann::json& c, const std::string& where) {
      try {
        out.push_back(detail::config_from_json_at(c, where));
      } catch (const ConfigError& e) {
        throw ConfigError(fmt::format("{}: {}", config_file, e.what()));
      }
    };
    auto fail = [&](const std::string& what) { throw ConfigError(fmt::format("{}: {}", config_file, what)); };
    if (j.is_array()) {
      for (std::size_t i = 0; i < j.size(); ++i) add(j[i], fmt::format("[{}]", i));
    } else if (j.is_object() && (j.contains("configs") || j.contains("presets"))) {
      for (const auto& [k, v] : j.items())
        if (k != "configs" && k != "presets") fail(fmt::format("unknown field '{}'", k.substr(0, 64)));
      if (j.contains("configs")) {
        const auto& configs = j.at("configs");
        if (!configs.is_array()) fail(fmt::format("configs: expected an array of configs, got {}", configs.type_name()));
        for (std::size_t i = 0; i < configs.size(); ++i) add(configs[i], fmt::format("configs[{}]", i));
      }
      if (j.contains("presets")) {
        const auto& names = j.at("presets");
        if (!names.is_array()) fail(fmt::format("presets: expected an array of preset names, got {}", names.type_name()));
        for (std::size_t i = 0; i < names.size(); ++i) {
          if (!names[i].is_string()) fail(fmt::format("presets[{}]: expected a preset name, got {}", i, names[i].type_name()));
          preset_list.push_back(names[i].get<std::string>());
        }
      }
    } else {
      add(j, "");
    }
  }
  for (const std::string& p : preset_list)
    for (const FA4Config& c : preset(p)) out.push_back(c);
  if (out.empty()) throw ConfigError("no configs: pass --config FILE and/or --preset NAME");
  return out;
}

}  // namespace jit::cli
