// The C API (include/fa4jit/c_api.h) over the C++ API: exceptions become status codes plus a
// thread-local message, JSON strings carry configs, and handles own a KernelPtr.
#include "fa4jit/c_api.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "fa4jit/jit.hpp"
#include "fa4jit/log.hpp"
#include "fa4jit/version.hpp"
#include "generator/bounded_json.hpp"
#include "generator/kernel_choice.hpp"
#include "generator/limits.hpp"
#include "generator/model.hpp"
#include "runtime/driver.hpp"
#include "runtime/runtime_internal.hpp"

struct fa4jit_kernel {
  jit::KernelPtr kernel;
};

namespace {

using nlohmann::json;

struct LastError {
  std::string message;
  int32_t code = FA4JIT_OK;
  int32_t driver_result = 0;
};

LastError& last_error() {
  thread_local LastError e;
  return e;
}

int32_t fail(int32_t code, const std::string& message, int32_t driver_result = 0) {
  LastError& e = last_error();
  e.code = code;
  e.driver_result = driver_result;
  try {
    e.message = message;
  } catch (...) {
    e.message.clear();  // out of memory while reporting: keep the code
  }
  return code;
}

// The status, message and CUresult of an exception (most derived types first).
struct Classified {
  int32_t code = FA4JIT_ERROR;
  std::string message;
  int32_t driver_result = 0;
};

Classified classify(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const jit::CacheMissError& e) {
    return {FA4JIT_CACHE_MISS_ERROR, e.what()};
  } catch (const jit::CacheError& e) {
    return {FA4JIT_CACHE_ERROR, e.what()};
  } catch (const jit::CompileError& e) {
    return {FA4JIT_COMPILE_ERROR, e.what()};
  } catch (const jit::ConfigError& e) {
    return {FA4JIT_CONFIG_ERROR, e.what()};
  } catch (const jit::DriverError& e) {
    return {FA4JIT_DRIVER_ERROR, e.what(), e.code()};
  } catch (const jit::LaunchError& e) {
    return {FA4JIT_LAUNCH_ERROR, e.what()};
  } catch (const jit::Error& e) {
    return {FA4JIT_ERROR, e.what()};
  } catch (const json::exception& e) {
    return {FA4JIT_CONFIG_ERROR, std::string("config JSON: ") + e.what()};
  } catch (const std::bad_alloc&) {
    return {FA4JIT_ERROR, "out of host memory"};
  } catch (const std::exception& e) {
    return {FA4JIT_ERROR, e.what()};
  } catch (...) {
    return {FA4JIT_ERROR, "unknown error"};
  }
}

int32_t fail_current() {
  try {
    const Classified c = classify(std::current_exception());
    return fail(c.code, c.message, c.driver_result);
  } catch (...) {
    return fail(FA4JIT_ERROR, "");  // out of memory while classifying
  }
}

// Runs f, turning any exception into a status; clears nothing on success (errno-style).
template <class F>
int32_t guarded(F&& f) {
  try {
    f();
    return FA4JIT_OK;
  } catch (...) {
    return fail_current();
  }
}

int32_t invalid(const char* what) { return fail(FA4JIT_INVALID_ARGUMENT, what); }

char* dup_string(const std::string& s) {
  char* p = static_cast<char*>(std::malloc(s.size() + 1));
  if (!p) throw std::bad_alloc();
  std::memcpy(p, s.c_str(), s.size() + 1);
  return p;
}

jit::FA4Config parse_config(const char* config_json, const char* arch) {
  if (!config_json) throw jit::ConfigError("config_json is NULL");
  jit::FA4Config c = jit::config_from_json(json::parse(config_json));
  if (arch && *arch) c.arch = arch;
  return c;
}

json resolved_json(const jit::ResolvedConfig& rc) {
  const jit::Tuning& t = rc.tuning;
  return json{{"config", jit::to_json(rc.config)},
              {"backend", jit::to_string(rc.backend)},
              {"sm", rc.sm},
              {"padded_depth", rc.padded_depth},
              {"padded_depth_v", rc.padded_depth_v},  // V's and O's (depth_v)
              {"v_in_k", rc.v_in_k},                  // latent KV: pass v as k's first depth_v columns
              {"num_threads", rc.num_threads},
              {"smem_bytes", rc.smem_bytes},
              {"ctas_per_sm", rc.ctas_per_sm},
              {"tuning",
               {{"exp2_emulate_every", t.exp2_emulate_every},
                {"intra_wg_overlap", t.intra_wg_overlap},
                {"pingpong", t.pingpong},
                {"wg_spans", t.wg_spans},
                {"persistent", t.persistent},
                {"line_info", t.line_info}}}};
}

jit::Tensor to_tensor(const fa4jit_tensor& t, const char* name) {
  jit::Tensor r;
  switch (t.dtype) {
    case FA4JIT_BF16: r.dtype = jit::DType::bf16; break;
    case FA4JIT_FP16: r.dtype = jit::DType::fp16; break;
    case FA4JIT_E4M3: r.dtype = jit::DType::e4m3; break;
    default:
      throw jit::LaunchError(fmt::format(
          "launch: {}.dtype is {}: use FA4JIT_BF16 (0), FA4JIT_FP16 (1) or FA4JIT_E4M3 (2)", name, t.dtype));
  }
  r.data = t.data;
  for (int i = 0; i < 4; ++i) {
    r.shape[i] = t.shape[i];
    r.stride[i] = t.stride[i];
  }
  return r;
}

// The caller's struct, fields past its `size` at their defaults (it may be older than ours).
bool read_args(const fa4jit_launch_args* in, fa4jit_launch_args* out) {
  fa4jit_launch_args_init(out);
  if (!in || in->size < offsetof(fa4jit_launch_args, workspace_bytes) + sizeof(uint64_t)) return false;
  std::memcpy(static_cast<void*>(out), in, std::min<std::size_t>(in->size, sizeof(fa4jit_launch_args)));
  out->size = sizeof(fa4jit_launch_args);
  return true;
}

// to_launch_args (every field of the launch table copied to jit::LaunchArgs) and
// launch_args_defaults, generated from python/fa4jit/launch_table.py by tools/gen_launch.py.
#include "launch_copy.inc"

// Primary contexts retained once per device and kept for the process (PyTorch uses the same ones).
constexpr int kMaxDevices = 256;
std::array<std::atomic<CUcontext>, kMaxDevices> g_primary{};

// The driver's handle of device ordinal `device`; DriverError when there is no such device.
CUdevice device_handle(int device) {
  const jit::detail::DriverApi& d = jit::detail::driver();
  int count = 0;
  jit::detail::check(d.cuDeviceGetCount(&count), "cuDeviceGetCount");
  if (device >= count)
    throw jit::DriverError(fmt::format("device {}: the driver reports {} CUDA device(s)", device, count));
  CUdevice dev = 0;
  jit::detail::check(d.cuDeviceGet(&dev, device), "cuDeviceGet");
  return dev;
}

CUcontext primary_context(int device) {
  if (device >= kMaxDevices) throw jit::LaunchError(fmt::format("launch: device {} is out of range", device));
  CUcontext ctx = g_primary[device].load(std::memory_order_acquire);
  if (ctx) return ctx;
  const jit::detail::DriverApi& d = jit::detail::driver();
  const CUdevice dev = device_handle(device);
  jit::detail::check(d.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  CUcontext expected = nullptr;
  if (!g_primary[device].compare_exchange_strong(expected, ctx)) {
    d.cuDevicePrimaryCtxRelease(dev);  // another thread retained it first
    return expected;
  }
  return ctx;
}

// Makes `device`'s primary context current for one call and restores the previous one after it,
// so a caller's notion of the current device (PyTorch's) is left as it was.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    if (device < 0) return;
    const jit::detail::DriverApi& d = jit::detail::driver();
    const CUcontext want = primary_context(device);
    jit::detail::check(d.cuCtxGetCurrent(&previous_), "cuCtxGetCurrent");
    if (previous_ == want) return;
    jit::detail::check(d.cuCtxSetCurrent(want), "cuCtxSetCurrent");
    switched_ = true;
  }
  ~DeviceScope() {
    if (switched_) jit::detail::driver().cuCtxSetCurrent(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  CUcontext previous_ = nullptr;
  bool switched_ = false;
};

std::vector<std::string> split_archs(const char* archs) {
  std::vector<std::string> out;
  if (!archs) return out;
  std::string cur;
  auto flush = [&] {
    const auto b = cur.find_first_not_of(" \t");
    if (b != std::string::npos) out.push_back(cur.substr(b, cur.find_last_not_of(" \t") - b + 1));
    cur.clear();
  };
  for (const char* p = archs; *p; ++p) {
    if (*p == ',')
      flush();
    else
      cur += *p;
  }
  flush();
  return out;
}

}  // namespace

extern "C" {

uint32_t fa4jit_c_api_version(void) { return FA4JIT_C_API_VERSION; }

const char* fa4jit_version(void) { return FA4JIT_VERSION_STRING; }

const char* fa4jit_last_error(void) { return last_error().message.c_str(); }
int32_t fa4jit_last_error_code(void) { return last_error().code; }
int32_t fa4jit_last_driver_result(void) { return last_error().driver_result; }

void fa4jit_free(char* s) { std::free(s); }

int32_t fa4jit_kernel_get(const char* config_json, const char* arch, fa4jit_kernel** out) {
  if (!out) return invalid("fa4jit_kernel_get: out is NULL");
  *out = nullptr;
  return guarded([&] {
    jit::KernelPtr k = jit::get_kernel(parse_config(config_json, arch));
    *out = new fa4jit_kernel{std::move(k)};
  });
}

void fa4jit_kernel_release(fa4jit_kernel* kernel) { delete kernel; }

int32_t fa4jit_kernel_info(const fa4jit_kernel* kernel, char** out_json) {
  if (!kernel || !out_json) return invalid("fa4jit_kernel_info: kernel or out_json is NULL");
  *out_json = nullptr;
  return guarded([&] {
    const jit::Kernel& k = *kernel->kernel;
    json j = resolved_json(k.config());
    j["key"] = k.key();
    j["origin"] = k.origin();
    j["compile_ms"] = k.compile_ms();
    j["cubin_bytes"] = k.cubin().size();
    *out_json = dup_string(j.dump());
  });
}

void fa4jit_launch_args_init(fa4jit_launch_args* args) {
  if (!args) return;
  launch_args_defaults(args);
  args->size = sizeof(fa4jit_launch_args);
}

int32_t fa4jit_launch(const fa4jit_kernel* kernel, const fa4jit_launch_args* args, void* stream) {
  fa4jit_launch_args a;
  if (!kernel) return invalid("fa4jit_launch: kernel is NULL");
  if (!read_args(args, &a))
    return invalid("fa4jit_launch: args is NULL or args->size is too small (use fa4jit_launch_args_init)");
  return guarded([&] {
    const jit::LaunchArgs la = to_launch_args(a);  // LaunchError for bad dtypes before the device switch
    DeviceScope scope(a.device);
    kernel->kernel->launch(la, stream);
  });
}

int32_t fa4jit_num_splits(const fa4jit_kernel* kernel, const fa4jit_launch_args* args, int32_t* out) {
  fa4jit_launch_args a;
  if (!kernel || !out) return invalid("fa4jit_num_splits: kernel or out is NULL");
  if (!read_args(args, &a)) return invalid("fa4jit_num_splits: args is NULL or args->size is too small");
  return guarded([&] {
    const jit::LaunchArgs la = to_launch_args(a);
    DeviceScope scope(a.device);
    *out = kernel->kernel->num_splits(la);
  });
}

int32_t fa4jit_workspace_bytes(const fa4jit_kernel* kernel, const fa4jit_launch_args* args, uint64_t* out) {
  fa4jit_launch_args a;
  if (!kernel || !out) return invalid("fa4jit_workspace_bytes: kernel or out is NULL");
  if (!read_args(args, &a)) return invalid("fa4jit_workspace_bytes: args is NULL or args->size is too small");
  return guarded([&] {
    const jit::LaunchArgs la = to_launch_args(a);
    DeviceScope scope(a.device);
    *out = kernel->kernel->workspace_bytes(la);
  });
}

int32_t fa4jit_tile_map(const char* config_json, const char* arch, const fa4jit_launch_args* args, uint8_t* out,
                        int32_t block_q, int32_t block_k, int32_t per_batch, int32_t per_head, void* stream) {
  fa4jit_launch_args a;
  if (!out) return invalid("fa4jit_tile_map: out is NULL");
  if (!read_args(args, &a)) return invalid("fa4jit_tile_map: args is NULL or args->size is too small");
  return guarded([&] {
    const jit::LaunchArgs la = to_launch_args(a);
    jit::TileMapOut o;
    o.data = out;
    o.block_q = block_q;
    o.block_k = block_k;
    o.per_batch = per_batch != 0;
    o.per_head = per_head != 0;
    const jit::FA4Config config = parse_config(config_json, arch);
    DeviceScope scope(a.device);
    jit::build_tile_map(config, la, o, stream);
  });
}

int32_t fa4jit_generate_source(const char* config_json, const char* arch, char** out) {
  if (!out) return invalid("fa4jit_generate_source: out is NULL");
  *out = nullptr;
  return guarded([&] { *out = dup_string(jit::generate_source(parse_config(config_json, arch))); });
}

int32_t fa4jit_cache_key(const char* config_json, const char* arch, char** out) {
  if (!out) return invalid("fa4jit_cache_key: out is NULL");
  *out = nullptr;
  return guarded([&] { *out = dup_string(jit::cache_key(parse_config(config_json, arch))); });
}

int32_t fa4jit_resolve_config(const char* config_json, const char* arch, char** out_json) {
  if (!out_json) return invalid("fa4jit_resolve_config: out_json is NULL");
  *out_json = nullptr;
  return guarded([&] {
    const jit::ResolvedConfig rc = jit::resolve(jit::detail::with_arch(parse_config(config_json, arch)));
    *out_json = dup_string(resolved_json(rc).dump());
  });
}

int32_t fa4jit_prewarm(const char* configs_json, const char* archs, int32_t jobs, char** out_report) {
  // Like every out pointer of the API, the report is required: a NULL one used to drop it silently.
  if (!out_report) return invalid("fa4jit_prewarm: out_report is NULL");
  *out_report = nullptr;
  if (!configs_json) return invalid("fa4jit_prewarm: configs_json is NULL");
  if (jobs < 0) return invalid("fa4jit_prewarm: jobs is negative; 0 (the core count) or a positive count");
  struct Job {
    jit::FA4Config config;
    std::size_t index = 0;  // in configs_json
    std::string key, status = "failed", error;
    double seconds = 0;
    std::exception_ptr failure;
  };
  std::vector<Job> work;
  int32_t rc = guarded([&] {
    const json parsed = json::parse(configs_json);
    std::vector<json> items;
    if (parsed.is_array())
      items.assign(parsed.begin(), parsed.end());
    else
      items.push_back(parsed);
    const std::vector<std::string> arch_list = split_archs(archs);
    for (std::size_t i = 0; i < items.size(); ++i) {
      jit::FA4Config c;
      try {
        c = jit::config_from_json(items[i]);
      } catch (const jit::ConfigError& e) {
        throw jit::ConfigError(fmt::format("configs[{}]: {}", i, e.what()));
      }
      if (arch_list.empty()) c.arch = jit::detail::with_arch(c).arch;
      for (std::size_t a = 0; a < std::max<std::size_t>(1, arch_list.size()); ++a) {
        Job& job = work.emplace_back();
        job.config = c;
        job.index = i;
        if (!arch_list.empty()) job.config.arch = arch_list[a];
      }
    }
    for (Job& j : work) {  // refuse bad configs before compiling anything
      try {
        jit::resolve(j.config);
      } catch (const jit::ConfigError& e) {
        throw jit::ConfigError(fmt::format("configs[{}] ({}): {}", j.index, j.config.arch, e.what()));
      }
    }
  });
  if (rc != FA4JIT_OK) return rc;

  const int workers =
      std::max(1, std::min<int>(jobs > 0 ? jobs : static_cast<int>(std::max(1u, std::thread::hardware_concurrency())),
                                static_cast<int>(work.size())));
  std::atomic<std::size_t> next{0};
  auto worker = [&] {
    for (std::size_t i = next++; i < work.size(); i = next++) {
      Job& job = work[i];
      const auto t0 = std::chrono::steady_clock::now();
      try {
        const jit::KernelPtr k = jit::get_kernel(job.config);
        job.key = k->key();
        job.status = k->origin() == "compiled" ? "compiled" : "hit";
      } catch (const std::exception& e) {
        job.error = e.what();
        job.failure = std::current_exception();
      } catch (...) {
        job.error = "unknown error";
        job.failure = std::current_exception();
      }
      job.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
  };
  rc = guarded([&] {
    std::vector<std::thread> pool;
    for (int w = 1; w < workers; ++w) pool.emplace_back(worker);
    worker();
    for (std::thread& t : pool) t.join();
  });
  if (rc != FA4JIT_OK) return rc;

  std::size_t failed = 0;
  const Job* first_failure = nullptr;
  for (const Job& j : work)
    if (j.failure && !failed++) first_failure = &j;
  rc = guarded([&] {
    json report = json::array();
    for (const Job& j : work)
      report.push_back(
          {{"arch", j.config.arch}, {"key", j.key}, {"status", j.status}, {"seconds", j.seconds}, {"error", j.error}});
    *out_report = dup_string(report.dump());
  });
  if (rc != FA4JIT_OK) return rc;
  if (first_failure)
    return fail(classify(first_failure->failure).code,
                fmt::format("prewarm: {} of {} kernels failed; first ({}): {}", failed, work.size(),
                            first_failure->config.arch, first_failure->error));
  return FA4JIT_OK;
}

int32_t fa4jit_runtime_info(char** out_json) {
  if (!out_json) return invalid("fa4jit_runtime_info: out_json is NULL");
  *out_json = nullptr;
  return guarded([&] {
    const jit::RuntimeInfo info = jit::runtime_info();
    const json j = {{"version", info.version},
                    {"c_api_version", FA4JIT_C_API_VERSION},
                    {"nvrtc", fmt::format("{}.{}", info.nvrtc_major, info.nvrtc_minor)},
                    {"nvrtc_archs", info.nvrtc_archs},
                    {"supported_archs", jit::supported_archs()},
                    {"driver", info.driver},
                    {"gpus", info.gpus},
                    {"cache_roots", info.cache_roots},
                    {"bundles", info.bundles},
                    {"compile_policy", info.compile_policy},
                    {"cache_writable", info.cache_writable},
                    {"log_level", jit::to_string(info.log_level)},
                    {"problems", info.problems},
                    {"stats",
                     {{"compiles", info.stats.compiles},
                      {"memory_hits", info.stats.memory_hits},
                      {"disk_hits", info.stats.disk_hits},
                      {"remote_hits", info.stats.remote_hits},
                      {"failures", info.stats.failures},
                      {"forbidden", info.stats.forbidden},
                      {"compile_ms", info.stats.compile_ms}}}};
    *out_json = dup_string(j.dump());
  });
}

namespace {

// fa4jit_model_configs(_with): the model's kernels as [{"use", "config"}] (+ "only_arch").
void model_configs_json(const char* hf_config_json, const jit::ModelOptions& o, char** out_json) {
  nlohmann::json j;
  try {
    j = jit::detail::parse_bounded_json(hf_config_json, jit::detail::kMaxConfigBytes, jit::detail::kMaxJsonDepth);
  } catch (const std::exception& e) {
    throw jit::ConfigError(fmt::format("config.json: {}", e.what()));
  }
  json out = json::array();
  for (const jit::ModelKernel& k : jit::model_kernels(j, o)) {
    json e = {{"use", k.use}, {"config", jit::to_json(k.config)}};
    if (!k.only_arch.empty()) e["only_arch"] = k.only_arch;
    out.push_back(std::move(e));
  }
  *out_json = dup_string(out.dump());
}

}  // namespace

int32_t fa4jit_model_configs(const char* hf_config_json, const char* dtype, char** out_json) {
  if (!hf_config_json || !out_json) return invalid("fa4jit_model_configs: hf_config_json or out_json is NULL");
  *out_json = nullptr;
  return guarded([&] {
    jit::ModelOptions o;
    if (dtype && *dtype) o.dtype = jit::dtype_from_string(dtype);
    model_configs_json(hf_config_json, o, out_json);
  });
}

int32_t fa4jit_choose_kernel(const char* arch, const char* dtype, const char* kv_dtype, int32_t depth, int32_t depth_v,
                             int32_t group, int32_t max_seqlen_q, int32_t varlen_batch, int64_t total_q,
                             int32_t pack_gqa, int32_t* pack_out, int32_t* bm_out) {
  return fa4jit_choose_kernel2(arch, dtype, kv_dtype, depth, depth_v, group, max_seqlen_q, varlen_batch, total_q, -1,
                               -1, 0, pack_gqa, pack_out, bm_out);
}

int32_t fa4jit_choose_kernel2(const char* arch, const char* dtype, const char* kv_dtype, int32_t depth, int32_t depth_v,
                              int32_t group, int32_t max_seqlen_q, int32_t varlen_batch, int64_t total_q,
                              int32_t window_left, int32_t window_right, int32_t mask_prefix, int32_t pack_gqa,
                              int32_t* pack_out, int32_t* bm_out) {
  if (!dtype || !pack_out || !bm_out) return invalid("fa4jit_choose_kernel: dtype, pack_out or bm_out is NULL");
  if (pack_gqa < -1 || pack_gqa > 1)
    return invalid(fmt::format("fa4jit_choose_kernel: pack_gqa is {}: -1 (automatic), 0 or 1", pack_gqa).c_str());
  return guarded([&] {
    jit::FA4Config c;
    c.arch = arch ? arch : "";
    c.dtype = jit::dtype_from_string(dtype);
    if (kv_dtype && *kv_dtype) {
      const jit::DType kv = jit::dtype_from_string(kv_dtype);
      if (kv != c.dtype) c.kv_dtype = kv;
    }
    c.depth = depth;
    c.depth_v = depth_v == depth ? 0 : depth_v;
    jit::LaunchFacts f;
    f.group = group;
    f.max_seqlen_q = max_seqlen_q;
    f.varlen_batch = varlen_batch;
    f.total_q = total_q;
    if (pack_gqa >= 0) f.pack_gqa = pack_gqa == 1;
    // Bounded extents are a sliding-window launch's (the only kernel that reads them).
    f.window_keys = jit::detail::window_keys(window_left, window_right, mask_prefix);
    if (f.window_keys > 0) c.mask = jit::Mask::sliding_window();
    const jit::FA4Config chosen = jit::choose_kernel(c, f);
    *pack_out = chosen.pack_gqa ? 1 : 0;
    *bm_out = chosen.BM;
  });
}

int32_t fa4jit_model_configs_with(const char* hf_config_json, const char* options_json, char** out_json) {
  if (!hf_config_json || !out_json) return invalid("fa4jit_model_configs_with: hf_config_json or out_json is NULL");
  *out_json = nullptr;
  return guarded([&] {
    jit::ModelOptions o;
    if (options_json && *options_json) {
      nlohmann::json opts;
      try {
        opts = jit::detail::parse_bounded_json(options_json, jit::detail::kMaxConfigBytes, jit::detail::kMaxJsonDepth);
      } catch (const std::exception& e) {
        throw jit::ConfigError(fmt::format("options: {}", e.what()));
      }
      if (!opts.is_object())
        throw jit::ConfigError(fmt::format("options: expected an object, got {}", opts.type_name()));
      for (const auto& [key, value] : opts.items()) {
        if (key != "dtype" && key != "kv_dtype")
          throw jit::ConfigError(fmt::format("options: unknown key '{}' (dtype, kv_dtype)", key.substr(0, 64)));
        if (value.is_null()) continue;
        if (!value.is_string()) throw jit::ConfigError(fmt::format("options: {}: expected a string", key));
        try {
          (key == "dtype" ? o.dtype : o.kv_dtype) = jit::dtype_from_string(value.get<std::string>());
        } catch (const jit::ConfigError& e) {
          throw jit::ConfigError(fmt::format("options: {}: {}", key, e.what()));
        }
      }
    }
    model_configs_json(hf_config_json, o, out_json);
  });
}

int32_t fa4jit_set_compile_policy(const char* policy) {
  if (!policy) return invalid("fa4jit_set_compile_policy: policy is NULL");
  return guarded([&] { jit::set_compile_policy(jit::compile_policy_from_string(policy)); });
}

void fa4jit_set_log_callback(fa4jit_log_fn fn, void* user) {
  if (!fn) {
    jit::set_log_sink({});
    return;
  }
  // The message is copied into a NUL-terminated string for C; the sink already drops exceptions.
  jit::set_log_sink([fn, user](jit::LogLevel level, std::string_view message) {
    const std::string text(message);
    fn(static_cast<int32_t>(level), text.c_str(), user);
  });
}

int32_t fa4jit_set_log_level(int32_t level) {
  if (level < FA4JIT_LOG_ERROR || level > FA4JIT_LOG_DEBUG)
    return fail(
        FA4JIT_INVALID_ARGUMENT,
        fmt::format("fa4jit_set_log_level: level {} is not FA4JIT_LOG_ERROR (0) .. FA4JIT_LOG_DEBUG (3)", level));
  jit::set_log_level(static_cast<jit::LogLevel>(level));
  return FA4JIT_OK;
}

int32_t fa4jit_get_log_level(void) { return static_cast<int32_t>(jit::log_level()); }

int32_t fa4jit_device_arch(int32_t device, char** out) {
  if (!out) return invalid("fa4jit_device_arch: out is NULL");
  *out = nullptr;
  if (device < 0) return invalid("fa4jit_device_arch: device must be >= 0");
  return guarded([&] { *out = dup_string(jit::detail::device_arch(device_handle(device))); });
}

}  // extern "C"
