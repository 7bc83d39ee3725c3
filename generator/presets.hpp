// Named config sets for `fa4jit prewarm --preset NAME` and the main job.
#pragma once
#include <string>
#include <vector>

#include "fa4jit/config.hpp"

namespace jit {

// Configs with an empty arch (the caller picks archs). ConfigError for an unknown name.
std::vector<FA4Config> preset(const std::string& name);
std::vector<std::string> preset_names();

}  // namespace jit
