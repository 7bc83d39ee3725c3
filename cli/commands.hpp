// fa4jit command line: one file per verb, registered on a CLI11 app by main.cpp.
#pragma once
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "fa4jit/config.hpp"

namespace jit::cli {

// Configs named on the command line: a JSON file (an object, an array of objects, or
// {"configs": [...], "presets": [...]}) and/or preset names.
std::vector<FA4Config> load_configs(const std::string& config_file, const std::vector<std::string>& presets);

std::vector<std::string> split_list(const std::string& csv);  // "a,b" -> {"a", "b"}

void add_info(CLI::App& app);
void add_gen(CLI::App& app);
void add_prewarm(CLI::App& app);
void add_run(CLI::App& app);
void add_check(CLI::App& app);
void add_bench(CLI::App& app);
void add_cache(CLI::App& app);

}  // namespace jit::cli
