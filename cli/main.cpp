// fa4jit: info | gen | prewarm | run | check | bench | cache. Errors go to stderr; the exit status
// is 0 (done), 1 (the job failed) or 2 (the command line is wrong): cli/commands.hpp.
#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/log.hpp"
#include "cli/commands.hpp"
#include "fa4jit/errors.hpp"
#include "fa4jit/version.hpp"

namespace {

// CLI11 reports `fa4jit frobnicate` as "A subcommand is required": name the word it did not know,
// and the commands it could have been. Only the words before the first option are commands.
std::string unknown_command(const CLI::App& app, int argc, char** argv) {
  const CLI::App* at = &app;
  for (int i = 1; i < argc && argv[i][0] != '-'; ++i) {
    const auto subs = at->get_subcommands([](const CLI::App*) { return true; });
    if (subs.empty()) return {};  // the command's own positional arguments
    const auto it = std::find_if(subs.begin(), subs.end(), [&](const CLI::App* s) { return s->check_name(argv[i]); });
    if (it == subs.end()) {
      std::vector<std::string> names;
      for (const CLI::App* s : subs) names.push_back(s->get_name());
      return fmt::format("unknown command '{}'{}; commands: {}", argv[i],
                         at == &app ? "" : fmt::format(" for 'fa4jit {}'", at->get_name()), fmt::join(names, ", "));
    }
    at = *it;
  }
  return {};
}

// --help and --version still work under a bad FA4JIT_LOG, and `info` reports it with every other
// bad environment value (its "problem:" lines) instead of stopping at the first.
bool checks_log_env_itself(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "-h" || a == "--help" || a == "--version") return true;
  }
  return argc > 1 && std::string_view(argv[1]) == "info";
}

}  // namespace

int main(int argc, char** argv) {
  using namespace jit::cli;
  // Past a file size limit (ulimit -f) the kernel sends SIGXFSZ, whose default action ends the
  // process with no message. Ignored, the write fails with EFBIG and is reported as an error.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"fa4jit: runtime-generated FlashAttention-4-class attention kernels", "fa4jit"};
  // Every option shows its default in --help (set before the subcommands, which inherit it).
  app.option_defaults()->always_capture_default();
  app.set_version_flag("--version", "fa4jit " FA4JIT_VERSION_STRING);
  app.require_subcommand(1);
  app.footer("Exit status: 0 done, 1 error (config, compile, cache, GPU, failed check), 2 usage (bad command line).");
  add_info(app);
  add_gen(app);
  add_prewarm(app);
  add_bundle(app);
  add_run(app);
  add_check(app);
  add_bench(app);
  add_cache(app);
  if (const std::string bad = unknown_command(app, argc, argv); !bad.empty()) {
    std::fprintf(stderr, "fa4jit: error: %s (fa4jit --help lists them)\n", bad.c_str());
    return kExitUsage;
  }
  // Checked before any work, as the library checks it at the first kernel.
  if (const std::string bad = jit::detail::log_env_problem(); !bad.empty() && !checks_log_env_itself(argc, argv)) {
    std::fprintf(stderr, "fa4jit: error: %s\n", bad.c_str());
    return kExitError;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // prints help / version (0) or the usage error
    return rc == 0 ? kExitOk : kExitUsage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fa4jit: error: %s\n", e.what());
    return kExitError;
  }
  // stdout is buffered: a full disk or a file size limit may only show when it is flushed.
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::fprintf(stderr, "fa4jit: error: writing the output failed: %s\n", std::strerror(errno));
    return kExitError;
  }
  return kExitOk;
}
