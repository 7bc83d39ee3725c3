// The policy lookup and the pieces the backends share.
#include "generator/backends/backend.hpp"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "fa4jit/errors.hpp"

namespace jit::detail {

const BackendPolicy& policy(Backend b) {
  switch (b) {
    case Backend::portable: return sm80_policy();
    case Backend::hopper: return sm90a_policy();
    case Backend::blackwell: return sm100a_policy();
  }
  throw ConfigError(fmt::format("backend: {} is not a backend", static_cast<int>(b)));
}

void refuse(const char* field, const std::string& value, const std::string& allowed) {
  throw ConfigError(fmt::format("{}: {} is not allowed; {}", field, value, allowed));
}

int pick(const char* field, int explicit_value, int derived, const std::vector<int>& allowed) {
  if (explicit_value == 0) return derived;
  if (std::find(allowed.begin(), allowed.end(), explicit_value) == allowed.end())
    refuse(field, std::to_string(explicit_value), fmt::format("allowed: {}", fmt::join(allowed, ", ")));
  return explicit_value;
}

int tma_paged_kv_box_rows(const ResolvedConfig& rc, long long page_size, const char* tma_only) {
  const int bn = rc.config.BN;
  const int rows = static_cast<int>(std::gcd(page_size, static_cast<long long>(bn)));
  if (rows % 8 == 0) return rows;
  if (!tma_only) return 0;
  throw LaunchError(
      fmt::format("launch: k.shape[1] (page_size) is {}: with BN = {} the {} backend loads pages by TMA boxes of "
                  "gcd(page_size, BN) rows, which must be a multiple of 8, and {} (use page sizes that are "
                  "multiples of 8)",
                  page_size, bn, to_string(rc.backend), tma_only));
}

}  // namespace jit::detail
