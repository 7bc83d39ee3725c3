// Target archs: which backend serves them, what NVRTC calls them, their shared-memory budget.
#pragma once
#include <string>
#include <vector>

#include "fa4jit/advanced.hpp"

namespace jit {

struct ArchInfo {
  std::string name;  // as written in FA4Config::arch, e.g. "sm_90a"
  int sm = 0;        // 90
  Backend backend = Backend::portable;
  int max_smem = 0;  // dynamic shared memory one block may use, bytes
};

ArchInfo parse_arch(const std::string& arch);  // ConfigError for archs we do not target

}  // namespace jit
