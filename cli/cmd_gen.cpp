#include <cerrno>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "fa4jit/jit.hpp"
#include "generator/key.hpp"
#include "runtime/runtime_internal.hpp"
#include "runtime/nvrtc.hpp"

namespace jit::cli {

namespace {

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw Error(fmt::format("--cubin {}: cannot open for writing: {}", path, std::strerror(errno)));
  f << bytes;
  f.close();  // buffered bytes land here: EFBIG / ENOSPC show now
  if (!f) throw Error(fmt::format("--cubin {}: write failed: {}", path, std::strerror(errno)));
}

}  // namespace

void add_gen(CLI::App& app) {
  auto* cmd = app.add_subcommand("gen", "Print the generated CUDA source (or PTX) of one config");
  struct Opts {
    std::string config, arch;
    std::vector<std::string> presets;
    bool ptx = false, key = false, log = false;
    std::string cubin;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--config", o->config, "JSON file with one config (the first one is used)");
  cmd->add_option("--preset", o->presets, "a preset name (its first config is used)");
  cmd->add_option("--arch", o->arch, "target arch (default: the config's, else the GPU's)")
      ->transform(arch_validator(false));
  cmd->add_flag("--ptx", o->ptx, "compile with NVRTC and print the PTX instead");
  cmd->add_flag("--key", o->key, "print the cache key instead");
  cmd->add_flag("--log", o->log, "compile and print the NVRTC log (ptxas registers, spills)");
  cmd->add_option("--cubin", o->cubin, "compile and write the cubin to this file (for cuobjdump -sass)");
  cmd->callback([o] {
    FA4Config c = load_configs(o->config, o->presets).front();
    if (!o->arch.empty()) c.arch = o->arch;
    const auto in = detail::compile_inputs(with_cli_arch(c), cli_resolve_options());
    if (o->key) {
      fmt::print("{}\n", in.key);
    } else if (o->ptx || o->log || !o->cubin.empty()) {
      const auto out = detail::nvrtc_compile(in.source, "fa4jit.cu", *in.headers, in.compile_options());
      if (!o->cubin.empty()) write_file(o->cubin, out.cubin);
      if (o->ptx || o->log) fmt::print("{}\n", o->log ? out.log : out.ptx);
    } else {
      fmt::print("{}", in.source);
    }
  });
}

}  // namespace jit::cli
