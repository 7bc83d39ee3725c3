// What the verbs share: config files and presets, --arch and size values, the arch to build for.
#include <algorithm>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cache/store.hpp"
#include "cli/commands.hpp"
#include "fa4jit/errors.hpp"
#include "fa4jit/jit.hpp"
#include "generator/presets.hpp"

namespace jit::cli {

namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

}  // namespace

std::vector<std::string> split_list(const std::string& csv) {
  std::vector<std::string> out;
  std::stringstream ss(csv);
  std::string item;
  while (std::getline(ss, item, ','))
    if (std::string t = trim(item); !t.empty()) out.push_back(t);
  return out;
}

CLI::Validator arch_validator(bool many) {
  return CLI::Validator(
      [many](std::string& value) -> std::string {
        const std::vector<std::string> archs = split_list(value);
        const std::vector<std::string> known = supported_archs();
        if (archs.empty()) return fmt::format("no arch given; allowed: {}", fmt::join(known, ", "));
        if (!many && archs.size() > 1)
          return fmt::format("'{}': one arch here (prewarm takes a list); allowed: {}", value, fmt::join(known, ", "));
        for (const std::string& a : archs)
          if (std::find(known.begin(), known.end(), a) == known.end())
            return fmt::format("'{}' is not supported; allowed: {}", a, fmt::join(known, ", "));
        value = fmt::format("{}", fmt::join(archs, ","));
        return {};
      },
      many ? "ARCH[,ARCH...]" : "ARCH", "arch");
}

CLI::Validator size_validator() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        try {
          value = std::to_string(cache::parse_size(value, "size"));
          return {};
        } catch (const Error&) {
          return fmt::format("'{}' is not a size: bytes, or a number with a K, M or G suffix (KB/KiB ...: 1024s)", value);
        }
      },
      "SIZE", "size");
}

FA4Config with_cli_arch(FA4Config c) {
  if (!c.arch.empty()) return c;
  try {
    c.arch = current_device_arch();
  } catch (const DriverError& e) {
    throw ConfigError(fmt::format("--arch: not given (and the config sets none), and there is no GPU to take it from "
                                  "({}); pass --arch, e.g. --arch sm_90a; allowed: {}",
                                  e.what(), fmt::join(supported_archs(), ", ")));
  }
  return c;
}

void validate_config(const FA4Config& c) {
  if (!c.arch.empty()) {
    resolve(c);
    return;
  }
  try {
    FA4Config x = c;
    x.arch = current_device_arch();
    resolve(x);
    return;
  } catch (const DriverError&) {
  }
  // No GPU: fine if some arch takes it; otherwise each distinct reason, with the archs giving it.
  std::vector<std::pair<std::string, std::vector<std::string>>> reasons;
  for (const std::string& a : supported_archs()) {
    FA4Config x = c;
    x.arch = a;
    std::string why;
    if (supported(x, &why)) return;
    auto it = std::find_if(reasons.begin(), reasons.end(), [&](const auto& r) { return r.first == why; });
    if (it == reasons.end()) reasons.push_back({why, {a}});
    else it->second.push_back(a);
  }
  std::vector<std::string> parts;
  for (const auto& [why, archs] : reasons) parts.push_back(fmt::format("{} [{}]", why, fmt::join(archs, " ")));
  throw ConfigError(fmt::format("no arch accepts this config: {}", fmt::join(parts, "; ")));
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
