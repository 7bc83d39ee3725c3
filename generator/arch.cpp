#include "generator/arch.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "fa4jit/errors.hpp"

namespace jit {

namespace {

struct KnownArch {
  const char* name;
  int sm;
  Backend backend;
  int max_smem;
};

// Shared memory per block (opt-in maximum) from the CUDA programming guide's tables.
constexpr KnownArch kArchs[] = {
    {"sm_80", 80, Backend::portable, 166912},     {"sm_86", 86, Backend::portable, 101376},
    {"sm_87", 87, Backend::portable, 166912},     {"sm_89", 89, Backend::portable, 101376},
    {"sm_90", 90, Backend::portable, 232448},     {"sm_90a", 90, Backend::hopper, 232448},
    {"sm_100", 100, Backend::portable, 232448},   {"sm_100a", 100, Backend::blackwell, 232448},
    {"sm_100f", 100, Backend::blackwell, 232448}, {"sm_103a", 103, Backend::blackwell, 232448},
    {"sm_120", 120, Backend::portable, 101376},   {"sm_121", 121, Backend::portable, 101376},
};

}  // namespace

ArchInfo parse_arch(const std::string& arch) {
  for (const KnownArch& a : kArchs)
    if (arch == a.name) return ArchInfo{a.name, a.sm, a.backend, a.max_smem};
  std::vector<std::string> names;
  for (const KnownArch& a : kArchs) names.emplace_back(a.name);
  throw ConfigError(fmt::format("arch: '{}' is not supported; allowed: {}", arch, fmt::join(names, ", ")));
}

std::vector<std::string> supported_archs() {
  std::vector<std::string> names;
  for (const KnownArch& a : kArchs) names.emplace_back(a.name);
  return names;
}

}  // namespace jit
