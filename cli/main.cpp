// fa4jit: info | gen | prewarm | run | check | bench | cache. Errors go to stderr; the exit status
// is 0 (done), 1 (the job failed) or 2 (the command line is wrong): cli/commands.hpp.
#include <cstdio>

#include "cli/commands.hpp"
#include "fa4jit/errors.hpp"
#include "fa4jit/version.hpp"

int main(int argc, char** argv) {
  using namespace jit::cli;
  CLI::App app{"fa4jit: runtime-generated FlashAttention-4-class attention kernels", "fa4jit"};
  // Every option shows its default in --help (set before the subcommands, which inherit it).
  app.option_defaults()->always_capture_default();
  app.set_version_flag("--version", "fa4jit " FA4JIT_VERSION_STRING);
  app.require_subcommand(1);
  app.footer("Exit status: 0 done, 1 error (config, compile, cache, GPU, failed check), 2 usage (bad command line).");
  add_info(app);
  add_gen(app);
  add_prewarm(app);
  add_run(app);
  add_check(app);
  add_bench(app);
  add_cache(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // prints help / version (0) or the usage error
    return rc == 0 ? kExitOk : kExitUsage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fa4jit: error: %s\n", e.what());
    return kExitError;
  }
  return kExitOk;
}
