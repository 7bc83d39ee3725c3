// Dev check: compiles dev/harness.cu through NVRTC (no toolkit include path, like the runtime)
// and prints the ptxas resource line. Build and run from the repository root:
//   g++ -std=c++17 -I/usr/local/cuda/include templates/sm80/dev/nvrtc_check.cpp \
//       -L/usr/local/cuda/lib64 -lnvrtc -o /tmp/nvrtc_check
//   /tmp/nvrtc_check sm_90 -DFA4_DEPTH=64 -DFA4_MASK=None
// FA4_SRC=file compiles that file instead (e.g. `fa4jit gen --config c.json` output) against the
// working tree's templates, with the runtime's NVRTC options.
#include <nvrtc.h>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 2) { std::fprintf(stderr, "usage: nvrtc_check sm_XX [-DNAME=VALUE]...\n"); return 1; }
  const char* path = std::getenv("FA4_SRC");
  std::ifstream f(path ? path : "templates/sm80/dev/harness.cu");
  if (!f) { std::fprintf(stderr, "cannot read %s\n", path ? path : "templates/sm80/dev/harness.cu"); return 1; }
  std::stringstream ss; ss << f.rdbuf();
  const std::string src = ss.str();
  std::vector<std::string> opts = {std::string("--gpu-architecture=") + argv[1], "-std=c++17", "-Itemplates",
                                   "-Xptxas=-v"};
  if (path)  // runtime/nvrtc.cpp's options (generated sources need -default-device)
    for (const char* o : {"-default-device", "--use_fast_math", "-DNDEBUG", "-lineinfo"}) opts.push_back(o);
  for (int i = 2; i < argc; ++i) opts.push_back(argv[i]);
  std::vector<const char*> copts;
  for (auto& o : opts) copts.push_back(o.c_str());
  nvrtcProgram prog;
  nvrtcCreateProgram(&prog, src.c_str(), "harness.cu", 0, nullptr, nullptr);
  const nvrtcResult r = nvrtcCompileProgram(prog, (int)copts.size(), copts.data());
  size_t n = 0; nvrtcGetProgramLogSize(prog, &n);
  std::string log(n, '\0'); nvrtcGetProgramLog(prog, &log[0]);
  size_t cubin = 0; if (r == NVRTC_SUCCESS) nvrtcGetCUBINSize(prog, &cubin);
  std::printf("%s: %s, cubin %zu bytes\n%s\n", argv[1], nvrtcGetErrorString(r), cubin, log.c_str());
  nvrtcDestroyProgram(&prog);
  return r == NVRTC_SUCCESS ? 0 : 2;
}
