// NVRTC: compile one generated source against in-memory headers. RAII over nvrtcProgram.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace jit::detail {

struct CompileOutput {
  std::string cubin;
  std::string ptx;
  std::string log;  // NVRTC log incl. ptxas -v resource lines
  double ms = 0;
};

// Throws CompileError (with the log) when NVRTC refuses the source.
CompileOutput nvrtc_compile(const std::string& source, const std::string& name,
                            const std::vector<std::pair<std::string, std::string>>& headers,
                            const std::vector<std::string>& options);

std::pair<int, int> nvrtc_version();
std::vector<int> nvrtc_supported_archs();

// ptxas resource usage of one entry (default: the attention kernel) parsed from a -Xptxas=-v log;
// `entry` is a name prefix (kernels are named fa4_fwd_<key[0:16]>). All -1 when the log has no
// such entry.
struct ResourceUsage {
  int registers = -1;
  int spill_stores = -1, spill_loads = -1;  // bytes
  int stack_frame = -1;
  int smem_static = -1;
};
ResourceUsage parse_ptxas_log(const std::string& log, const std::string& entry = "fa4_fwd");

}  // namespace jit::detail
