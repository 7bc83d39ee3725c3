// Compiles a generated-layer source (dev/harness.cu) through NVRTC exactly like the runtime:
// no toolkit include path, only -I templates. Prints the log (ptxas -v lines with -Xptxas=-v).
// build: g++ -std=c++17 -I/usr/local/cuda/include templates/sm90a/dev/nvrtc_check.cpp \
//          -L/usr/local/cuda/lib64 -lnvrtc -o /tmp/nvrtc_check
// run:   /tmp/nvrtc_check templates/sm90a/dev/harness.cu -arch=sm_90a -std=c++17 -I templates -Xptxas=-v [-D...]
#include <nvrtc.h>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>
int main(int argc, char** argv) {
  std::ifstream f(argv[1]); std::stringstream ss; ss << f.rdbuf(); std::string src = ss.str();
  nvrtcProgram prog; nvrtcCreateProgram(&prog, src.c_str(), "gen.cu", 0, nullptr, nullptr);
  std::vector<const char*> opts; for (int i = 2; i < argc; ++i) opts.push_back(argv[i]);
  nvrtcResult r = nvrtcCompileProgram(prog, opts.size(), opts.data());
  size_t n; nvrtcGetProgramLogSize(prog, &n); std::string log(n, '\0'); nvrtcGetProgramLog(prog, &log[0]);
  printf("%s\n%s\n", nvrtcGetErrorString(r), log.c_str());
  if (r == NVRTC_SUCCESS) { nvrtcGetCUBINSize(prog, &n); printf("cubin %zu bytes\n", n); }
  return r != NVRTC_SUCCESS;
}
