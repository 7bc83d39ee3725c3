// Where an installed fa4jit keeps its kernel bundle: found from the file this code was loaded
// from (libfa4jit.so, or the executable the static library is linked into), so a moved prefix,
// a wheel in any virtualenv and a build tree (which has no bundle) all work without configuration.
#include <dlfcn.h>

#include <filesystem>
#include <system_error>

#include "runtime/runtime_internal.hpp"

namespace jit::detail {

std::vector<std::filesystem::path> installed_bundles() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&installed_bundles), &info) == 0 || !info.dli_fname) return {};
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::canonical(info.dli_fname, ec);
  if (ec) return {};
  std::vector<std::filesystem::path> out;
  for (const char* rel : {FA4JIT_BUNDLE_FROM_LIBDIR, FA4JIT_BUNDLE_FROM_BINDIR}) {
    const std::filesystem::path dir = (self.parent_path() / rel).lexically_normal();
    if (std::filesystem::is_directory(dir, ec) && (out.empty() || out.back() != dir)) out.push_back(dir);
  }
  return out;
}

}  // namespace jit::detail
