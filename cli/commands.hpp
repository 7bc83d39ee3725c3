// fa4jit command line: one file per verb, registered on a CLI11 app by main.cpp.
#pragma once
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json_fwd.hpp>

#include "fa4jit/advanced.hpp"
#include "fa4jit/config.hpp"

namespace jit::cli {

// Exit statuses (README, "Command line"): scripts tell a failed job from a mistyped command.
constexpr int kExitOk = 0;     // done (check: passed, or skipped without a GPU)
constexpr int kExitError = 1;  // bad config, compile failure, cache or GPU error, failed check
constexpr int kExitUsage = 2;  // unknown subcommand or option, missing or malformed flag value

// Configs named on the command line: a JSON file (an object, an array of objects, or
// {"configs": [...], "presets": [...]}) and/or preset names.
std::vector<FA4Config> load_configs(const std::string& config_file, const std::vector<std::string>& presets);

// A JSON file read with the config files' caps (size, nesting); ConfigError naming the file.
nlohmann::json read_json_file(const std::string& file);

std::vector<std::string> split_list(const std::string& csv);  // "a, b" -> {"a", "b"} (trimmed, no empties)

// --arch: one arch (`many` false) or a comma-separated list, trimmed ("sm_90a, sm_100a" is
// stored as "sm_90a,sm_100a") and each one checked against supported_archs(); a bad value is a
// usage error naming --arch and listing the allowed archs. Both validators rewrite the value, so
// they go in ->transform(), not ->check().
CLI::Validator arch_validator(bool many);
// --max-size: the sizes FA4JIT_CACHE_MAX_BYTES takes (1G, 512M, 4096, ...), stored as bytes.
CLI::Validator size_validator();

// c with its arch filled from the current GPU when empty; without a GPU, a ConfigError that
// tells the CLI user to pass --arch.
FA4Config with_cli_arch(FA4Config c);

// FA4JIT_TUNE="name=value,..." (tuning sweeps; fa4jit/advanced.hpp TuningOverrides) as resolve
// options: the CLI reads the environment, the library never does. ConfigError naming the item.
ResolveOptions cli_resolve_options();

// Refuses (ConfigError) a config its arch does not accept or, with no arch set and no GPU to take
// one from, that no supported arch accepts: the same answer with or without a GPU.
void validate_config(const FA4Config& c);

void add_info(CLI::App& app);
void add_gen(CLI::App& app);
void add_prewarm(CLI::App& app);
void add_bundle(CLI::App& app);
void add_run(CLI::App& app);
void add_check(CLI::App& app);
void add_bench(CLI::App& app);
void add_cache(CLI::App& app);

}  // namespace jit::cli
