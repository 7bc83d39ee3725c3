// What the verbs share: config files and presets, --arch and size values, the arch to build for.
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cache/store.hpp"
#include "cli/commands.hpp"
#include "fa4jit/errors.hpp"
#include "fa4jit/jit.hpp"
#include "generator/bounded_json.hpp"
#include "generator/config_json.hpp"
#include "generator/limits.hpp"
#include "generator/presets.hpp"

namespace jit::cli {

namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

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
    throw ConfigError(
        fmt::format("{}: larger than {} bytes; config files are at most that", file, detail::kMaxConfigBytes));
  return text;
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
          return fmt::format("'{}' is not a size: bytes, or a number with a K, M or G suffix (KB/KiB ...: 1024s)",
                             value);
        }
      },
      "SIZE", "size");
}

FA4Config with_cli_arch(FA4Config c) {
  if (!c.arch.empty()) return c;
  try {
    c.arch = current_device_arch();
  } catch (const DriverError& e) {
    throw ConfigError(
        fmt::format("--arch: not given (and the config sets none), and there is no GPU to take it from "
                    "({}); pass --arch, e.g. --arch sm_90a; allowed: {}",
                    e.what(), fmt::join(supported_archs(), ", ")));
  }
  return c;
}

ResolveOptions cli_resolve_options() {
  const char* env = std::getenv("FA4JIT_TUNE");
  return ResolveOptions{parse_tune(env ? env : "", "FA4JIT_TUNE")};
}

void validate_config(const FA4Config& c) {
  const ResolveOptions options = cli_resolve_options();
  if (!c.arch.empty()) {
    resolve(c, options);
    return;
  }
  try {
    FA4Config x = c;
    x.arch = current_device_arch();
    resolve(x, options);
    return;
  } catch (const DriverError&) {}
  // No GPU: fine if some arch takes it; otherwise each distinct reason, with the archs giving it.
  std::vector<std::pair<std::string, std::vector<std::string>>> reasons;
  for (const std::string& a : supported_archs()) {
    FA4Config x = c;
    x.arch = a;
    std::string why;
    try {
      resolve(x, options);
      return;
    } catch (const ConfigError& e) {
      why = e.what();
    }
    auto it = std::find_if(reasons.begin(), reasons.end(), [&](const auto& r) { return r.first == why; });
    if (it == reasons.end())
      reasons.push_back({why, {a}});
    else
      it->second.push_back(a);
  }
  std::vector<std::string> parts;
  for (const auto& [why, archs] : reasons) parts.push_back(fmt::format("{} [{}]", why, fmt::join(archs, " ")));
  throw ConfigError(fmt::format("no arch accepts this config: {}", fmt::join(parts, "; ")));
}

nlohmann::json read_json_file(const std::string& file) {
  const std::string text = read_config_text(file);
  std::string at;  // the keys leading to where parsing stopped
  try {
    return detail::parse_bounded_json(text, detail::kMaxConfigBytes, detail::kMaxJsonDepth, &at);
  } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for 1e400
    throw ConfigError(
        fmt::format("{}: not valid JSON{}: {}", file, at.empty() ? "" : fmt::format(" in field '{}'", at), e.what()));
  } catch (const std::exception& e) {  // too large, too deep, a duplicate key
    throw ConfigError(fmt::format("{}: {}", file, e.what()));
  }
}

std::vector<FA4Config> load_configs(const std::string& config_file, const std::vector<std::string>& presets) {
  std::vector<FA4Config> out;
  std::vector<std::string> preset_list = presets;
  if (!config_file.empty()) {
    const nlohmann::json j = read_json_file(config_file);
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
        if (!configs.is_array())
          fail(fmt::format("configs: expected an array of configs, got {}", configs.type_name()));
        for (std::size_t i = 0; i < configs.size(); ++i) add(configs[i], fmt::format("configs[{}]", i));
      }
      if (j.contains("presets")) {
        const auto& names = j.at("presets");
        if (!names.is_array())
          fail(fmt::format("presets: expected an array of preset names, got {}", names.type_name()));
        for (std::size_t i = 0; i < names.size(); ++i) {
          if (!names[i].is_string())
            fail(fmt::format("presets[{}]: expected a preset name, got {}", i, names[i].type_name()));
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
