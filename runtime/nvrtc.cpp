#include "runtime/nvrtc.hpp"

#include <chrono>
#include <regex>

#include <fmt/format.h>
#include <nvrtc.h>

#include "fa4jit/errors.hpp"

namespace jit::detail {

namespace {

class Program {
 public:
  Program(const std::string& source, const std::string& name, const std::vector<const char*>& header_bytes,
          const std::vector<const char*>& header_names) {
    check(nvrtcCreateProgram(&prog_, source.c_str(), name.c_str(), static_cast<int>(header_bytes.size()),
                             header_bytes.data(), header_names.data()),
          "nvrtcCreateProgram");
  }
  ~Program() { nvrtcDestroyProgram(&prog_); }
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;
  nvrtcProgram get() const { return prog_; }

  static void check(nvrtcResult r, const char* what) {
    if (r != NVRTC_SUCCESS) throw CompileError(fmt::format("{} failed: {}", what, nvrtcGetErrorString(r)), "");
  }

 private:
  nvrtcProgram prog_ = nullptr;
};

std::string read_log(nvrtcProgram p) {
  size_t n = 0;
  nvrtcGetProgramLogSize(p, &n);
  std::string log(n, '\0');
  if (n) nvrtcGetProgramLog(p, log.data());
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

}  // namespace

CompileOutput nvrtc_compile(const std::string& source, const std::string& name,
                            const std::vector<std::pair<std::string, std::string>>& headers,
                            const std::vector<std::string>& options) {
  std::vector<const char*> bytes, names, opts;
  for (const auto& [n, b] : headers) {
    names.push_back(n.c_str());
    bytes.push_back(b.c_str());
  }
  for (const std::string& o : options) opts.push_back(o.c_str());

  const auto t0 = std::chrono::steady_clock::now();
  Program prog(source, name, bytes, names);
  const nvrtcResult r = nvrtcCompileProgram(prog.get(), static_cast<int>(opts.size()), opts.data());
  CompileOutput out;
  out.log = read_log(prog.get());
  if (r != NVRTC_SUCCESS)
    throw CompileError(fmt::format("NVRTC could not compile {} ({})", name, nvrtcGetErrorString(r)), out.log);
  size_t n = 0;
  Program::check(nvrtcGetCUBINSize(prog.get(), &n), "nvrtcGetCUBINSize");
  out.cubin.resize(n);
  Program::check(nvrtcGetCUBIN(prog.get(), out.cubin.data()), "nvrtcGetCUBIN");
  Program::check(nvrtcGetPTXSize(prog.get(), &n), "nvrtcGetPTXSize");
  out.ptx.resize(n);
  Program::check(nvrtcGetPTX(prog.get(), out.ptx.data()), "nvrtcGetPTX");
  if (!out.ptx.empty() && out.ptx.back() == '\0') out.ptx.pop_back();
  out.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (out.cubin.empty()) throw CompileError(fmt::format("NVRTC produced no cubin for {}", name), out.log);
  return out;
}

std::pair<int, int> nvrtc_version() {
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  return {major, minor};
}

std::vector<int> nvrtc_supported_archs() {
  int n = 0;
  nvrtcGetNumSupportedArchs(&n);
  std::vector<int> archs(n);
  if (n) nvrtcGetSupportedArchs(archs.data());
  return archs;
}

ResourceUsage parse_ptxas_log(const std::string& full_log, const std::string& entry) {
  // Only the entry's own section: a module holds fa4_fwd and fa4_combine. A prefix, so that
  // "fa4_fwd" also finds the key-derived fa4_fwd_<key[0:16]>.
  std::string log = full_log;
  const std::string head = "Compiling entry function '" + entry;
  if (const auto at = full_log.find(head); at != std::string::npos) {
    const auto next = full_log.find("Compiling entry function", at + head.size());
    log = full_log.substr(at, next == std::string::npos ? std::string::npos : next - at);
  }
  ResourceUsage u;
  std::smatch m;
  if (std::regex_search(log, m, std::regex(R"(Used (\d+) registers)"))) u.registers = std::stoi(m[1]);
  if (std::regex_search(log, m, std::regex(R"((\d+) bytes spill stores, (\d+) bytes spill loads)"))) {
    u.spill_stores = std::stoi(m[1]);
    u.spill_loads = std::stoi(m[2]);
  }
  if (std::regex_search(log, m, std::regex(R"((\d+) bytes stack frame)"))) u.stack_frame = std::stoi(m[1]);
  if (std::regex_search(log, m, std::regex(R"((\d+) bytes smem)"))) u.smem_static = std::stoi(m[1]);
  return u;
}

}  // namespace jit::detail
