// prewarm: compile a set of configs for a set of archs into the cache, in parallel.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "fa4jit/jit.hpp"
#include "runtime/runtime_internal.hpp"

namespace jit::cli {

namespace {

struct Job {
  FA4Config config;
  std::string status;  // "compiled", "hit", "failed"
  double seconds = 0;
  std::string error;
};

std::string describe(const FA4Config& c) {
  return fmt::format("{} d{} {} mask={} score_mod={}{}", c.arch, c.depth, to_string(c.dtype),
                     to_json(c)["mask"]["kind"].get<std::string>(), to_json(c)["score_mod"]["kind"].get<std::string>(),
                     c.group ? fmt::format(" group={}", c.group) : "");
}

}  // namespace

void add_prewarm(CLI::App& app) {
  auto* cmd = app.add_subcommand("prewarm", "Compile configs for archs into the cache (no GPU needed)");
  struct Opts {
    std::string config, archs;
    std::vector<std::string> presets;
    int jobs = 0;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--config", o->config, "JSON file of configs");
  cmd->add_option("--preset", o->presets, "preset names (repeatable)");
  cmd->add_option("--arch", o->archs, "comma-separated archs, e.g. sm_90a,sm_100a (default: each config's)");
  cmd->add_option("--jobs,-j", o->jobs, "parallel compiles (default: core count)");
  cmd->callback([o] {
    std::vector<Job> jobs;
    const std::vector<std::string> archs = split_list(o->archs);
    for (const FA4Config& c : load_configs(o->config, o->presets)) {
      if (archs.empty()) {
        jobs.push_back({detail::with_arch(c), "", 0, ""});
        continue;
      }
      for (const std::string& a : archs) {
        FA4Config x = c;
        x.arch = a;
        jobs.push_back({x, "", 0, ""});
      }
    }
    for (Job& j : jobs) resolve(j.config);  // refuse bad configs before compiling anything

    const int workers = o->jobs > 0 ? o->jobs : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const bool tty = isatty(fileno(stderr));
    std::atomic<std::size_t> next{0}, done{0};
    std::mutex print_mu;
    const auto t0 = std::chrono::steady_clock::now();
    auto worker = [&] {
      for (std::size_t i = next++; i < jobs.size(); i = next++) {
        Job& job = jobs[i];
        const auto s = std::chrono::steady_clock::now();
        try {
          const KernelPtr k = get_kernel(job.config);
          job.status = k->origin() == "compiled" ? "compiled" : "hit";
        } catch (const std::exception& e) {
          job.status = "failed";
          job.error = e.what();
        }
        job.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - s).count();
        std::lock_guard<std::mutex> lock(print_mu);
        const std::size_t n = ++done;
        const int width = 30, filled = static_cast<int>(width * n / jobs.size());
        const std::string bar = std::string(filled, '#') + std::string(width - filled, '.');
        if (tty) std::fprintf(stderr, "\r\033[K");
        std::fprintf(stderr, "[%s] %zu/%zu %-8s %6.2fs  %s%s", bar.c_str(), n, jobs.size(), job.status.c_str(),
                     job.seconds, describe(job.config).c_str(), tty && n < jobs.size() ? "" : "\n");
        if (job.status == "failed") std::fprintf(stderr, "%s  %s\n", tty ? "\n" : "", job.error.c_str());
      }
    };
    std::vector<std::thread> pool;
    for (int w = 0; w < std::min<int>(workers, static_cast<int>(jobs.size())); ++w) pool.emplace_back(worker);
    for (auto& t : pool) t.join();

    int compiled = 0, hit = 0, failed = 0;
    for (const Job& j : jobs) (j.status == "compiled" ? compiled : j.status == "hit" ? hit : failed)++;
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    fmt::print("prewarm: {} kernels: {} compiled, {} hit, {} failed in {:.2f}s with {} jobs\n", jobs.size(), compiled, hit,
               failed, wall, workers);
    for (const Job& j : jobs)
      if (j.status == "failed") fmt::print(stderr, "failed: {}\n", describe(j.config));
    if (failed) throw Error(fmt::format("{} of {} kernels failed to compile", failed, jobs.size()));
  });
}

}  // namespace jit::cli
