// fa4jit: info | gen | prewarm | run | check | bench | cache. Errors go to stderr; the exit status
// is 0 (done), 1 (the job failed) or 2 (the command line is wrong): cli/commands.hpp.
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>

#include "cli/commands.hpp"
#include "fa4jit/errors.hpp"
#include "fa4jit/version.hpp"

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
