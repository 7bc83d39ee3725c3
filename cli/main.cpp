// fa4jit: info | gen | prewarm | run | check | bench | cache. Errors go to stderr, exit non-zero.
#include <cstdio>

#include "cli/commands.hpp"
#include "fa4jit/errors.hpp"

int main(int argc, char** argv) {
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
  return 0;
}
