// config_from_json with the JSON path of the config in its file, for error messages.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "fa4jit/config.hpp"

namespace jit::detail {

// As jit::config_from_json; errors name fields under `prefix` (e.g. "configs[2].mask.kind").
FA4Config config_from_json_at(const nlohmann::json& j, const std::string& prefix);

}  // namespace jit::detail
