// TEMPORARY stub until the real store lands (deleted at merge).
#include <cstdlib>
#include "cache/store.hpp"
namespace jit::cache {
struct Store::Impl { Options o; };
Store::Store(Options o) : impl_(new Impl{std::move(o)}) {}
Store::~Store() { delete impl_; }
Options Store::options_from_env() { Options o; if (const char* d = std::getenv("FA4JIT_CACHE_DIR")) o.roots.push_back(d); return o; }
std::optional<Artifact> Store::load(std::string_view) { return std::nullopt; }
void Store::publish(std::string_view, std::string_view, const nlohmann::json&) {}
Artifact Store::get_or_compile(std::string_view, const std::function<Artifact()>& f, std::string_view) { return f(); }
std::vector<EntryInfo> Store::list() const { return {}; }
VerifyReport Store::verify() { return {}; }
std::size_t Store::prune(std::uint64_t) { return 0; }
std::size_t Store::clear() { return 0; }
const Options& Store::options() const { return impl_->o; }
}
