#include "runtime/nvrtc.hpp"

#include <pthread.h>

#include <chrono>
#include <exception>
#include <functional>
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

// NVRTC's front end recurses over the source (nested expressions, template arguments); a snippet
// of 100k nested parentheses overflowed a default 8 MiB thread stack and ended the whole process.
// Each compile runs on a thread of its own with this much stack: address space reserved, pages
// committed only as NVRTC touches them. (Snippets are also capped at kMaxSnippetNesting.)
constexpr std::size_t kCompileStackBytes = std::size_t{256} << 20;

class ThreadAttr {
 public:
  ThreadAttr() { ok_ = pthread_attr_init(&attr_) == 0; }
  ~ThreadAttr() {
    if (ok_) pthread_attr_destroy(&attr_);
  }
  ThreadAttr(const ThreadAttr&) = delete;
  ThreadAttr& operator=(const ThreadAttr&) = delete;
  bool set_stack(std::size_t bytes) { return ok_ && pthread_attr_setstacksize(&attr_, bytes) == 0; }
  const pthread_attr_t* get() const { return &attr_; }

 private:
  pthread_attr_t attr_{};
  bool ok_ = false;
};

// Runs `fn` on a thread with kCompileStackBytes of stack and waits for it; its exception is
// rethrown here. Where no such thread can be made (address space limits), runs it inline.
void run_on_large_stack(const std::function<void()>& fn) {
  std::exception_ptr error;
  std::function<void()> task = [&] {
    try {
      fn();
    } catch (...) {
      error = std::current_exception();
    }
  };
  ThreadAttr attr;
  pthread_t thread{};
  auto trampoline = [](void* p) -> void* {
    (*static_cast<std::function<void()>*>(p))();
    return nullptr;
  };
  if (!attr.set_stack(kCompileStackBytes) || pthread_create(&thread, attr.get(), trampoline, &task) != 0) {
    task();
  } else {
    pthread_join(thread, nullptr);
  }
  if (error) std::rethrow_exception(error);
}

CompileOutput compile_here(const std::string& source, const std::string& name,
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

}  // namespace

CompileOutput nvrtc_compile(const std::string& source, const std::string& name,
                            const std::vector<std::pair<std::string, std::string>>& headers,
                            const std::vector<std::string>& options) {
  CompileOutput out;
  run_on_large_stack([&] { out = compile_here(source, name, headers, options); });
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
  // Only the entry's own section (up to the next entry's): a prefix, so that "fa4_fwd" also finds
  // the key-derived fa4_fwd_<key[0:16]>. A log without that entry (a source compiled without the
  // name options names its kernel FA4JIT_FWD_NAME) has no usage of it: all -1, never another
  // entry's figures (until generator 2 a module also held fa4_combine, listed first).
  ResourceUsage u;
  const std::string head = "Compiling entry function '" + entry;
  const auto at = full_log.find(head);
  if (at == std::string::npos) return u;
  const auto next = full_log.find("Compiling entry function", at + head.size());
  const std::string log = full_log.substr(at, next == std::string::npos ? std::string::npos : next - at);
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
