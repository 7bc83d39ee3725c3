// prewarm: compile a set of configs for a set of archs into the cache, in parallel.
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "fa4jit/errors.hpp"
#include "fa4jit/jit.hpp"
#include "generator/model.hpp"
#include "generator/presets.hpp"
#include "runtime/runtime_internal.hpp"

namespace jit::cli {

namespace {

struct Job {
  FA4Config config;
  std::string use;     // --model: which layers and phase need it
  std::string status;  // "compiled", "hit", "missing" (sealed mode), "failed"
  double seconds = 0;
  std::string error;
  bool in_memory_only = false;  // served by the store's memory fallback: not on disk
};

// "sm_90a d128 bf16 mask=causal score_mod=identity group=4 packed"; an FP8 KV cache: "bf16+e4m3 KV".
std::string describe(const FA4Config& c) {
  const std::string dtypes =
      c.kv_dtype ? fmt::format("{}+{} KV", to_string(c.dtype), to_string(*c.kv_dtype)) : to_string(c.dtype);
  return fmt::format("{} d{} {} mask={} score_mod={}{}{}", c.arch, c.depth, dtypes,
                     to_json(c)["mask"]["kind"].get<std::string>(), to_json(c)["score_mod"]["kind"].get<std::string>(),
                     c.group ? fmt::format(" group={}", c.group) : "", c.pack_gqa ? " packed" : "");
}

std::string describe(const Job& j) {
  return j.use.empty() ? describe(j.config) : describe(j.config) + "  (" + j.use + ")";
}

// --model: the kernels of a Hugging Face config.json, refusals named with the file.
std::vector<ModelKernel> kernels_of_model(const std::string& file, const std::string& dtype,
                                          const std::string& kv_dtype) {
  ModelOptions o;
  if (!dtype.empty()) o.dtype = dtype_from_string(dtype);
  if (!kv_dtype.empty()) o.kv_dtype = dtype_from_string(kv_dtype);
  try {
    return model_kernels(read_json_file(file), o);
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format("--model {}: {}", file, e.what()));
  }
}

// What prewarm and bundle build: configs, presets and/or a model's kernels, times archs.
struct Selection {
  std::string config, archs, model, dtype, kv_dtype;
  std::vector<std::string> presets;
  int jobs = 0;
};

void add_selection_options(CLI::App* cmd, Selection& o) {
  cmd->add_option("--config", o.config, "JSON file of configs");
  cmd->add_option("--preset", o.presets, "preset names (repeatable; with no --config, --preset or --model: default)");
  cmd->add_option("--model", o.model,
                  "a Hugging Face config.json: the prefill and decode kernels of its attention layers");
  cmd->add_option("--dtype", o.dtype, "with --model: bf16 or fp16 instead of the model's torch_dtype")
      ->check(CLI::IsMember({"bf16", "fp16"}));
  cmd->add_option("--kv-dtype", o.kv_dtype,
                  "with --model: e4m3 for a model served over an FP8 KV cache (adds the kernels that read it)")
      ->check(CLI::IsMember({"e4m3"}));
  cmd->add_option("--jobs,-j", o.jobs, "parallel compiles (0: core count)")->check(CLI::NonNegativeNumber);
}

// Every (config, arch) job, each resolved: bad configs are refused before anything compiles.
// `need_arch` false leaves configs without an arch as they are (--print lists them so).
std::vector<Job> collect_jobs(const Selection& o, bool need_arch) {
  if (!o.dtype.empty() && o.model.empty()) throw CLI::ValidationError("--dtype", "only with --model");
  if (!o.kv_dtype.empty() && o.model.empty()) throw CLI::ValidationError("--kv-dtype", "only with --model");
  std::vector<Job> jobs;
  const std::vector<std::string> archs = split_list(o.archs);
  // only_arch (a model's kernel of one arch, ModelKernel::only_arch): that arch's job only, none for
  // the others; without --arch, the arch itself when none is needed, else the GPU's if it matches.
  auto add = [&](const FA4Config& c, const std::string& use, const std::string& only_arch = "") {
    if (archs.empty()) {
      FA4Config x = !need_arch && c.arch.empty() ? c : with_cli_arch(c);
      if (!only_arch.empty()) {
        if (!need_arch) x.arch = only_arch;
        if (x.arch != only_arch) return;
      }
      jobs.push_back({x, use, "", 0, "", false});
      return;
    }
    for (const std::string& a : archs) {
      if (!only_arch.empty() && a != only_arch) continue;
      FA4Config x = c;
      x.arch = a;
      jobs.push_back({x, use, "", 0, "", false});
    }
  };
  std::vector<std::string> presets = o.presets;
  if (o.config.empty() && presets.empty() && o.model.empty()) presets.push_back("default");
  if (!o.config.empty() || !presets.empty())
    for (const FA4Config& c : load_configs(o.config, presets)) add(c, "");
  if (!o.model.empty())
    for (const ModelKernel& k : kernels_of_model(o.model, o.dtype, o.kv_dtype)) add(k.config, k.use, k.only_arch);
  for (Job& j : jobs) {  // a model's refusal says which layers need the kernel
    if (j.config.arch.empty()) continue;
    try {
      resolve(j.config, cli_resolve_options());
    } catch (const ConfigError& e) {
      if (j.use.empty()) throw;
      throw ConfigError(fmt::format("--model {}: {} on {}: {}", o.model, j.use, j.config.arch, e.what()));
    }
  }
  return jobs;
}

int worker_count(const Selection& o) {
  return o.jobs > 0 ? o.jobs : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// Runs `work` on every job from `workers` threads with a progress line per job; work sets the
// job's status ("compiled", "hit", "missing", "failed") and error.
void run_jobs(std::vector<Job>& jobs, int workers, const std::function<void(Job&)>& work) {
  const bool tty = isatty(fileno(stderr));
  std::atomic<std::size_t> next{0}, done{0};
  std::mutex print_mu;
  auto worker = [&] {
    for (std::size_t i = next++; i < jobs.size(); i = next++) {
      Job& job = jobs[i];
      const auto s = std::chrono::steady_clock::now();
      try {
        work(job);
      } catch (const CacheMissError& e) {
        job.status = "missing";  // sealed mode or compile policy forbid: nothing is compiled
        job.error = e.what();
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
                   job.seconds, describe(job).c_str(), tty && n < jobs.size() ? "" : "\n");
      if (!job.error.empty()) std::fprintf(stderr, "%s  %s\n", tty ? "\n" : "", job.error.c_str());
    }
  };
  std::vector<std::thread> pool;
  for (int w = 0; w < std::min<int>(workers, static_cast<int>(jobs.size())); ++w) pool.emplace_back(worker);
  for (auto& t : pool) t.join();
}

}  // namespace

void add_prewarm(CLI::App& app) {
  auto* cmd = app.add_subcommand("prewarm", "Compile configs for archs into the cache (no GPU needed)");
  struct Opts {
    Selection sel;
    bool print = false;
  };
  auto o = std::make_shared<Opts>();
  add_selection_options(cmd, o->sel);
  cmd->add_option("--arch", o->sel.archs,
                  "comma-separated archs, e.g. sm_90a,sm_100a (default: each config's, else the GPU's)")
      ->transform(arch_validator(true));
  cmd->add_flag("--print", o->print, "list the kernels as JSON ([{\"use\", \"config\"}]) and compile nothing");
  cmd->callback([o] {
    std::vector<Job> jobs = collect_jobs(o->sel, !o->print);
    if (o->print) {
      nlohmann::json list = nlohmann::json::array();
      for (const Job& j : jobs) list.push_back({{"use", j.use}, {"config", to_json(j.config)}});
      fmt::print("{}\n", list.dump(2));
      return;
    }
    cache::Store& store = detail::disk_cache();
    const std::uint64_t publish_failures_before = store.stats().publish_failures;
    const int workers = worker_count(o->sel);
    const auto t0 = std::chrono::steady_clock::now();
    const ResolveOptions options = cli_resolve_options();
    run_jobs(jobs, workers, [&](Job& job) {
      const KernelPtr k = get_kernel(job.config, options);
      job.status = k->origin() == "compiled" ? "compiled" : "hit";
      job.in_memory_only = k->origin() == "memory";
    });

    int compiled = 0, hit = 0, failed = 0, missing = 0, memory_only = 0;
    for (const Job& j : jobs) {
      (j.status == "compiled" ? compiled : j.status == "hit" ? hit : j.status == "missing" ? missing : failed)++;
      memory_only += j.in_memory_only;
    }
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const bool no_compiles = store.options().sealed || missing > 0;
    fmt::print("prewarm: {} kernels: {} compiled, {} hit, {} failed{} in {:.2f}s with {} jobs\n", jobs.size(), compiled,
               hit, failed, no_compiles ? fmt::format(", {} missing (sealed)", missing) : "", wall, workers);
    for (const Job& j : jobs) {
      if (j.status == "failed") fmt::print(stderr, "failed: {}\n", describe(j));
      if (j.status == "missing") fmt::print(stderr, "missing: {}: not in cache (sealed)\n", describe(j));
    }
    if (failed) throw Error(fmt::format("{} of {} kernels failed to compile", failed, jobs.size()));
    if (missing)
      throw CacheMissError(
          fmt::format("{} of {} kernels are not in the cache, and this process compiles nothing "
                      "(FA4JIT_SEALED=1 or FA4JIT_COMPILE=forbid); prewarm them where compiles are "
                      "allowed",
                      missing, jobs.size()));
    // A prewarm exists to leave kernels on disk: kernels kept in memory only are a failure.
    const std::string root = store.writable_root().string();
    if (root.empty() && (compiled > 0 || memory_only > 0)) {
      std::vector<std::string> roots;
      for (const auto& r : store.options().roots) roots.push_back(r.string());
      throw CacheError(
          fmt::format("nothing was persisted: no writable cache directory among [{}]; set "
                      "FA4JIT_CACHE_DIR to a writable directory",
                      fmt::join(roots, ", ")));
    }
    // Entries, not kernels: each kernel comes with its split-KV combine kernel (an entry of its
    // own), so counting failed writes as kernels said "2 of 1 kernels".
    if (const std::uint64_t lost = store.stats().publish_failures - publish_failures_before; lost > 0) {
      const std::string why = store.last_write_error();
      throw CacheError(
          fmt::format("could not write {} cache entr{} for {} kernel{} (a kernel and its split-KV "
                      "combine kernel are entries of their own) to {}: {}{}",
                      lost, lost == 1 ? "y" : "ies", jobs.size(), jobs.size() == 1 ? "" : "s", root, why,
                      why.find(std::strerror(ENOSPC)) != std::string::npos ? " (the disk is full)" : ""));
    }
  });
}

void add_bundle(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "bundle", "Write configs x archs into a directory as a read-only kernel bundle (what an install ships)");
  struct Opts {
    Selection sel;
    std::string out;
  };
  auto o = std::make_shared<Opts>();
  add_selection_options(cmd, o->sel);
  cmd->add_option("--arch", o->sel.archs, "comma-separated archs, e.g. sm_80,sm_90a,sm_100a")
      ->required()
      ->transform(arch_validator(true));
  cmd->add_option("--out", o->out, "the bundle directory (created; kernels already there are kept)")->required();
  cmd->footer("With no --config, --preset or --model: every preset.");
  cmd->callback([o] {
    Selection sel = o->sel;
    if (sel.config.empty() && sel.presets.empty() && sel.model.empty()) sel.presets = preset_names();
    std::vector<Job> jobs = collect_jobs(sel, true);
    // Kernels come through the user's cache (a hit costs nothing), then are published into the
    // bundle, whose store checks them like any tier.
    cache::Options bo;
    bo.roots = {o->out};
    bo.validate = detail::check_cache_entry;
    cache::Store bundle(bo);
    if (bundle.writable_root().empty()) throw CacheError(fmt::format("--out {}: not a writable directory", o->out));
    std::vector<std::string> keys(jobs.size());
    std::mutex combine_mu;
    std::map<std::string, nlohmann::json> combines;  // key -> spec: the split-KV combine kernels, once each
    auto ship = [&](const std::string& key, cache::Artifact art) {
      art.meta.erase("mac");  // the user's deployment secret means nothing to the bundle's readers
      bundle.publish(key, art.cubin, art.meta);
      return art.origin == "compiled";
    };
    auto ship_kernel = [&](const detail::CompileInputs& in) {
      const std::string what = to_json(in.config.config).dump();
      return ship(in.key, detail::disk_cache().get_or_compile(
                              in.key, [&] { return detail::compile_artifact(in); }, what));
    };
    run_jobs(jobs, worker_count(sel), [&](Job& job) {
      const auto i = static_cast<std::size_t>(&job - jobs.data());
      const detail::CompileInputs in = detail::compile_inputs(job.config, cli_resolve_options());
      keys[i] = in.key;
      const bool compiled = ship_kernel(in);
      const detail::CombineInputs ci = detail::combine_inputs(in.config);
      {
        std::lock_guard<std::mutex> lock(combine_mu);
        if (!combines.emplace(ci.key, detail::to_json(ci.spec)).second) {
          job.status = compiled ? "compiled" : "hit";
          return;
        }
      }
      const std::string cwhat = "split-KV combine kernel " + detail::to_json(ci.spec).dump();
      const bool combine_compiled = ship(ci.key, detail::disk_cache().get_or_compile(
                                                     ci.key, [&] { return detail::compile_artifact(ci); }, cwhat));
      job.status = compiled || combine_compiled ? "compiled" : "hit";
    });
    int failed = 0;
    for (const Job& j : jobs) failed += j.status != "compiled" && j.status != "hit";
    if (failed) throw Error(fmt::format("{} of {} kernels failed", failed, jobs.size()));
    if (const std::uint64_t lost = bundle.stats().publish_failures; lost > 0)
      throw CacheError(fmt::format("--out {}: could not write {} entr{}: {}", o->out, lost, lost == 1 ? "y" : "ies",
                                   bundle.last_write_error()));

    // Read back through a bundle tier, as an install reads it: every entry must verify.
    cache::Options ro;
    ro.bundles = {o->out};
    ro.validate = detail::check_cache_entry;
    cache::Store check(ro);
    nlohmann::json manifest = {{"fa4jit", FA4JIT_VERSION_STRING},
                               {"kernels", nlohmann::json::array()},
                               {"combine_kernels", nlohmann::json::array()}};
    std::size_t kernels = 0;
    for (std::size_t i = 0; i < jobs.size(); ++i) {
      if (!check.load(keys[i]))
        throw CacheError(fmt::format("--out {}: kernel {} does not verify after writing", o->out, keys[i]));
      manifest["kernels"].push_back(
          {{"key", keys[i]}, {"arch", jobs[i].config.arch}, {"use", jobs[i].use}, {"config", to_json(jobs[i].config)}});
      ++kernels;
    }
    for (const auto& [key, spec] : combines) {
      if (!check.load(key))
        throw CacheError(fmt::format("--out {}: combine kernel {} does not verify after writing", o->out, key));
      manifest["combine_kernels"].push_back({{"key", key}, {"arch", spec.at("arch")}, {"combine", spec}});
    }
    // The manifest says what the bundle holds (for people and packaging); lookups use only keys.
    std::ofstream(std::filesystem::path(o->out) / "manifest.json") << manifest.dump(2) << "\n";
    fmt::print("bundle: {} kernels and {} split-KV combine kernels in {}\n", kernels, combines.size(), o->out);
  });
}

}  // namespace jit::cli
