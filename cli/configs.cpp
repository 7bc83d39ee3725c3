#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "fa4jit/errors.hpp"
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

std::vector<FA4Config> load_configs(const std::string& config_file, const std::vector<std::string>& presets) {
  std::vector<FA4Config> out;
  std::vector<std::string> preset_list = presets;
  if (!config_file.empty()) {
    std::ifstream f(config_file);
    if (!f) throw ConfigError(fmt::format("{}: cannot open", config_file));
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(f);
    } catch (const std::exception& e) {
      throw ConfigError(fmt::format("{}: not valid JSON: {}", config_file, e.what()));
    }
    auto add = [&](const nlohmann::json& c, const std::string& where) {
      try {
        out.push_back(config_from_json(c));
      } catch (const ConfigError& e) {
        throw ConfigError(fmt::format("{} {}: {}", config_file, where, e.what()));
      }
    };
    if (j.is_array()) {
      for (std::size_t i = 0; i < j.size(); ++i) add(j[i], fmt::format("[{}]", i));
    } else if (j.is_object() && (j.contains("configs") || j.contains("presets"))) {
      for (const auto& [k, v] : j.items())
        if (k != "configs" && k != "presets") throw ConfigError(fmt::format("{}: unknown field '{}'", config_file, k));
      if (j.contains("configs"))
        for (std::size_t i = 0; i < j["configs"].size(); ++i) add(j["configs"][i], fmt::format("configs[{}]", i));
      if (j.contains("presets"))
        for (const auto& p : j["presets"]) preset_list.push_back(p.get<std::string>());
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
