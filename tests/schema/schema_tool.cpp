// Helper of check_schema.py (the ConfigSchema test):
//   schema_tool dump        prints the presets (as written and resolved per arch family), the preset
//                           names and the archs, as JSON, for validation against docs/config.schema.json
//   schema_tool load FILE   reads FILE as a config file (one config, an array, {"configs", "presets"})
//                           with fa4jit's own reader; prints "ok N" or the ConfigError, exits 0 / 1
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "fa4jit/advanced.hpp"
#include "fa4jit/errors.hpp"
#include "generator/bounded_json.hpp"
#include "generator/config_json.hpp"
#include "generator/limits.hpp"
#include "generator/presets.hpp"

namespace {

using nlohmann::json;

json dump() {
  json presets = json::object();
  for (const std::string& name : jit::preset_names()) {
    json list = json::array();
    for (const jit::FA4Config& c : jit::preset(name)) {
      json resolved = json::object();
      for (const char* arch : {"sm_80", "sm_90a", "sm_100a"}) {
        jit::FA4Config a = c;
        a.arch = arch;
        if (jit::supported(a)) resolved[arch] = jit::to_json(jit::resolve(a).config);
      }
      list.push_back({{"config", jit::to_json(c)}, {"resolved", resolved}});
    }
    presets[name] = list;
  }
  return {{"preset_names", jit::preset_names()}, {"archs", jit::supported_archs()}, {"presets", presets}};
}

// The shapes of cli/configs.cpp load_configs, through the library's reader.
int load(const std::string& file) {
  std::ifstream f(file, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  try {
    const json j = jit::detail::parse_bounded_json(ss.str(), jit::detail::kMaxConfigBytes, jit::detail::kMaxJsonDepth);
    int n = 0;
    auto one = [&](const json& c, const std::string& where) {
      jit::detail::config_from_json_at(c, where);
      ++n;
    };
    if (j.is_array()) {
      for (std::size_t i = 0; i < j.size(); ++i) one(j[i], "[" + std::to_string(i) + "]");
    } else if (j.is_object() && (j.contains("configs") || j.contains("presets"))) {
      for (const auto& [k, v] : j.items())
        if (k != "configs" && k != "presets") throw jit::ConfigError("unknown field '" + k + "'");
      if (j.contains("configs")) {
        if (!j["configs"].is_array()) throw jit::ConfigError("configs: expected an array");
        for (std::size_t i = 0; i < j["configs"].size(); ++i)
          one(j["configs"][i], "configs[" + std::to_string(i) + "]");
      }
      if (j.contains("presets")) {
        if (!j["presets"].is_array()) throw jit::ConfigError("presets: expected an array");
        for (const json& p : j["presets"]) {
          if (!p.is_string()) throw jit::ConfigError("presets: expected preset names");
          n += static_cast<int>(jit::preset(p.get<std::string>()).size());
        }
      }
    } else {
      one(j, "");
    }
    std::printf("ok %d\n", n);
    return 0;
  } catch (const std::exception& e) {
    std::printf("error: %s\n", e.what());
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "dump" && argc == 2) {
    std::printf("%s\n", dump().dump(2).c_str());
    return 0;
  }
  if (cmd == "load" && argc == 3) return load(argv[2]);
  std::fprintf(stderr, "usage: schema_tool dump | load FILE\n");
  return 2;
}
