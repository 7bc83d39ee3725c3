// fa4jit: info | gen | prewarm | run | check | bench | cache. Errors go to stderr, exit non-zero.
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>

#include "cli/commands.hpp"
#include "fa4jit/errors.hpp"

int main(int argc, char** argv) {
  // Past a file size limit (ulimit -f) the kernel sends SIGXFSZ, whose default action ends the
  // process with no message. Ignored, the write fails with EFBIG and is reported as an error.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"fa4jit: runtime-generated FlashAttention-4-class attention kernels"};
  app.require_subcommand(1);
  jit::cli::add_info(app);
  jit::cli::add_gen(app);
  jit::cli::add_prewarm(app);
  jit::cli::add_run(app);
  jit::cli::add_check(app);
  jit::cli::add_bench(app);
  jit::cli::add_cache(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const jit::Error& e) {
    std::fprintf(stderr, "fa4jit: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fa4jit: error: %s\n", e.what());
    return 1;
  }
  // stdout is buffered: a full disk or a file size limit may only show when it is flushed.
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::fprintf(stderr, "fa4jit: error: writing the output failed: %s\n", std::strerror(errno));
    return 1;
  }
  return 0;
}
