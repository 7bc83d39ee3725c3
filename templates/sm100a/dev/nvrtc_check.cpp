// Compiles dev/harness.cu with NVRTC exactly as the runtime does (no toolkit include path,
// -I templates only), to catch what nvcc accepts and NVRTC does not.
// build: g++ -std=c++17 -I/usr/local/cuda/include nvrtc_check.cpp -L/usr/local/cuda/lib64 -lnvrtc -o nvrtc_check
// run:   nvrtc_check HARNESS TEMPLATES_DIR [-DNAME=VALUE ...]   -> prints "ok <ms> <cubin bytes>" or the log
#include <nvrtc.h>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: nvrtc_check HARNESS TEMPLATES_DIR [-D...]\n");
    return 1;
  }
  std::ifstream f(argv[1]);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string src = ss.str(), inc = std::string("-I") + argv[2];
  std::vector<std::string> opts = {"--gpu-architecture=sm_100a", "-std=c++17", inc};
  for (int i = 3; i < argc; ++i) opts.push_back(argv[i]);
  std::vector<const char*> o;
  for (auto& s : opts) o.push_back(s.c_str());
  const auto t0 = std::chrono::steady_clock::now();
  nvrtcProgram prog;
  nvrtcCreateProgram(&prog, src.c_str(), "fa4_sm100a.cu", 0, nullptr, nullptr);
  const nvrtcResult r = nvrtcCompileProgram(prog, static_cast<int>(o.size()), o.data());
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  size_t n = 0;
  nvrtcGetProgramLogSize(prog, &n);
  std::string log(n, '\0');
  nvrtcGetProgramLog(prog, &log[0]);
  if (r != NVRTC_SUCCESS) {
    std::printf("FAIL %s\n%s\n", nvrtcGetErrorString(r), log.c_str());
    return 2;
  }
  nvrtcGetCUBINSize(prog, &n);
  std::printf("ok %.0f %zu\n", ms, n);
  nvrtcDestroyProgram(&prog);
  return 0;
}
