/* fa4jit C API: a versioned, plain-C interface to the fa4jit runtime (docs/C_API.md).
 *
 * For callers that cannot use the C++ API (jit.hpp): Python through ctypes/cffi, Rust, Go, or a
 * C++ program built with another standard library. The fa4jit Python package is built on it.
 *
 *   fa4jit_kernel* k = NULL;
 *   if (fa4jit_kernel_get("{\"depth\": 128, \"mask\": \"causal\"}", NULL, &k) != FA4JIT_OK)
 *     fprintf(stderr, "%s\n", fa4jit_last_error());
 *   fa4jit_launch_args a;
 *   fa4jit_launch_args_init(&a);            // sets a.size and the defaults
 *   a.q = ...; a.k = ...; a.v = ...; a.o = ...;
 *   fa4jit_launch(k, &a, stream);           // a CUstream; NULL: the legacy default stream
 *   fa4jit_kernel_release(k);
 *
 * Rules:
 * - Every function that can fail returns an fa4jit_status (FA4JIT_OK = 0). On failure the calling
 *   thread's fa4jit_last_error() holds the message and fa4jit_last_error_code() the status; both
 *   stay until the thread's next failing call. Nothing throws across this interface.
 * - Strings returned through `char** out` are allocated by fa4jit: release them with fa4jit_free().
 * - Compatibility: FA4JIT_C_API_VERSION grows when functions or struct fields are added, or the
 *   JSON exchanged changes (2: configs lost padded_depth, BK1, num_mma_stages and swizzle_bytes,
 *   which took one value only; resolved configs report "padded_depth" beside "config"; 3: FP8,
 *   FA4JIT_E4M3 and fa4jit_launch_args' descale_q / descale_k / descale_v; 4: the config field
 *   "kv_dtype", an FP8 KV cache; 5: fa4jit_launch_args' max_seqlen_k; 6: fa4jit_set_log_callback, fa4jit_set_log_level,
 *   fa4jit_get_log_level, and runtime info's "cache_writable", "log_level" and "problems"; 7:
 *   fa4jit_tile_map; 8: fa4jit_launch_args' page_descale, an e4m3 latent cache's per-page factors; 9:
 *   fa4jit_model_configs_with; 10: fa4jit_launch_args' mask_prefix and the mask field "prefix"; 11:
 *   fa4jit_choose_kernel; 12: fa4jit_choose_kernel2, the choice with the launch's window). Structs
 *   passed in carry their `size` (set by the *_init function of the header the caller compiled
 *   against); fields are only ever appended, and fields past a caller's `size` take their defaults,
 *   so a program built against an older header keeps working with a newer library. Existing
 *   functions, enum values and field offsets never change: the version only grows (a program
 *   checks fa4jit_c_api_version() >= the version whose functions it calls).
 * - Configs are JSON strings in the schema of docs/CONFIG.md (the same as the CLI's files).
 */
#ifndef FA4JIT_C_API_H
#define FA4JIT_C_API_H

#include <stddef.h>
#include <stdint.h>

/* Exported from libfa4jit.so whatever the library's default symbol visibility is. */
#if defined(_WIN32)
#define FA4JIT_C_EXPORT
#else
#define FA4JIT_C_EXPORT __attribute__((visibility("default")))
#endif

#define FA4JIT_C_API_VERSION 12

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes; the error kinds mirror the C++ exceptions of fa4jit/errors.hpp. */
typedef enum fa4jit_status {
  FA4JIT_OK = 0,
  FA4JIT_ERROR = 1,            /* jit::Error or another failure not listed below */
  FA4JIT_CONFIG_ERROR = 2,     /* jit::ConfigError: names the field, value and what is allowed */
  FA4JIT_COMPILE_ERROR = 3,    /* jit::CompileError: the message carries the NVRTC log */
  FA4JIT_CACHE_ERROR = 4,      /* jit::CacheError */
  FA4JIT_CACHE_MISS_ERROR = 5, /* jit::CacheMissError (FA4JIT_SEALED=1, or compile policy forbid) */
  FA4JIT_DRIVER_ERROR = 6,     /* jit::DriverError: no driver/GPU, arch mismatch, out of memory */
  FA4JIT_LAUNCH_ERROR = 7,     /* jit::LaunchError: shapes, strides, dtypes, alignment */
  FA4JIT_INVALID_ARGUMENT = 8  /* misuse of this C API: a null pointer, a struct size too small */
} fa4jit_status;

/* FA4JIT_E4M3 (since C API version 3): float8 e4m3 (e4m3fn) q, k, v of a config with "dtype": "e4m3";
 * o is then bf16 or fp16 (the config's output_dtype). Also k and v alone (an FP8 KV cache) of a
 * config with "dtype": "bf16" / "fp16" and "kv_dtype": "e4m3": q and o are then of the dtype, and
 * only descale_k / descale_v may be set (descale_q is a FA4JIT_LAUNCH_ERROR). */
typedef enum fa4jit_dtype { FA4JIT_BF16 = 0, FA4JIT_FP16 = 1, FA4JIT_E4M3 = 2 } fa4jit_dtype;

/* A device tensor in (batch, seqlen, heads, head_dim) order; shape and strides in elements, and
 * stride[3] (head_dim) must be 1; the other strides are multiples of 16 bytes (8 elements of a
 * 16-bit type, 16 of e4m3). PyTorch: t.data_ptr(), t.shape, t.stride(). */
typedef struct fa4jit_tensor {
  void* data;
  int32_t dtype; /* fa4jit_dtype */
  int32_t reserved_;
  int64_t shape[4];
  int64_t stride[4];
} fa4jit_tensor;

/* struct fa4jit_launch_args: the fields of jit::LaunchArgs (fa4jit/kernel.hpp), same names and
 * meanings, plus `size` and `device`, generated from the launch table (python/fa4jit/launch_table.py,
 * one row per field, appended only) into fa4jit/c_launch_args.h, installed beside this header. Fill
 * it with fa4jit_launch_args_init() first. Pointers are device pointers. */
#include "fa4jit/c_launch_args.h"

typedef struct fa4jit_kernel fa4jit_kernel; /* a compiled kernel; cheap to keep and reuse */

/* FA4JIT_C_API_VERSION of the loaded library (compare with the header's). */
FA4JIT_C_EXPORT uint32_t fa4jit_c_api_version(void);
/* The library version, "0.1.0". Static storage. */
FA4JIT_C_EXPORT const char* fa4jit_version(void);

/* The calling thread's last failure: message (never NULL; "" when none), status and, for a driver
 * error, the CUresult (0 otherwise). */
FA4JIT_C_EXPORT const char* fa4jit_last_error(void);
FA4JIT_C_EXPORT int32_t fa4jit_last_error_code(void);
FA4JIT_C_EXPORT int32_t fa4jit_last_driver_result(void);

/* Releases a string returned by this API (NULL is fine). */
FA4JIT_C_EXPORT void fa4jit_free(char* s);

/* The kernel for a JSON config, generated, compiled and cached (memory, then disk) like
 * jit::get_kernel. `arch` ("sm_90a", ...) overrides the config's "arch" when not NULL or "";
 * with neither, the current GPU's arch. The handle stays valid until fa4jit_kernel_release, and
 * launches through it do no config, source or cache work. */
FA4JIT_C_EXPORT int32_t fa4jit_kernel_get(const char* config_json, const char* arch, fa4jit_kernel** out);
FA4JIT_C_EXPORT void fa4jit_kernel_release(fa4jit_kernel* kernel);
/* {"key", "origin", "compile_ms", "config" (every field resolved), "backend", "tuning",
 * "num_threads", "smem_bytes", "sm"} as JSON. */
FA4JIT_C_EXPORT int32_t fa4jit_kernel_info(const fa4jit_kernel* kernel, char** out_json);

/* Sets args->size and every field to its default (zeros; window -1/-1; block mask 128x128;
 * device -1). */
FA4JIT_C_EXPORT void fa4jit_launch_args_init(fa4jit_launch_args* args);

/* Checks every argument (FA4JIT_LAUNCH_ERROR before anything runs) and launches on `stream`
 * (a CUstream; NULL: the legacy default stream). Asynchronous: no synchronization, and no
 * allocation when fa4jit_workspace_bytes is 0 or args->workspace is given (safe under CUDA graph
 * capture). */
FA4JIT_C_EXPORT int32_t fa4jit_launch(const fa4jit_kernel* kernel, const fa4jit_launch_args* args, void* stream);
/* Splits a launch with `args` would use after the automatic choice, and the workspace bytes it
 * needs (0 when not split, except for kernels on the dynamic walk, whose tile counter lives
 * there). Need a GPU when args->num_splits is 0. */
FA4JIT_C_EXPORT int32_t fa4jit_num_splits(const fa4jit_kernel* kernel, const fa4jit_launch_args* args, int32_t* out);
FA4JIT_C_EXPORT int32_t fa4jit_workspace_bytes(const fa4jit_kernel* kernel, const fa4jit_launch_args* args,
                                               uint64_t* out);

/* The tile classes of a config's mask (JSON; `arch` as in fa4jit_kernel_get) for a dense launch with
 * `args` (jit::build_tile_map; no attention kernel is compiled, only the mask's classifier): one
 * byte per (batch, q head, block_q x block_k tile), 0 no element visible, 1 all, 2 partial, packed
 * into device memory `out` (batch, heads, ceil(seqlen_q / block_q), ceil(seqlen_k / block_k));
 * per_batch / per_head 0: the mask reads no b / h, one batch / head is evaluated and stored.
 * Enqueued on `stream`; the generated kernel compiles once per mask per process. */
FA4JIT_C_EXPORT int32_t fa4jit_tile_map(const char* config_json, const char* arch, const fa4jit_launch_args* args,
                                        uint8_t* out, int32_t block_q, int32_t block_k, int32_t per_batch,
                                        int32_t per_head, void* stream);

/* jit::generate_source / jit::cache_key for a JSON config (`arch` as in fa4jit_kernel_get). */
FA4JIT_C_EXPORT int32_t fa4jit_generate_source(const char* config_json, const char* arch, char** out);
FA4JIT_C_EXPORT int32_t fa4jit_cache_key(const char* config_json, const char* arch, char** out);
/* The config with every field derived and validated, as JSON (ConfigError otherwise). */
FA4JIT_C_EXPORT int32_t fa4jit_resolve_config(const char* config_json, const char* arch, char** out_json);

/* Compiles configs into the cache for archs; no GPU needed when archs (or each config's arch) are
 * given. `configs_json`: one config object or an array of them. `archs`: comma-separated
 * ("sm_90a,sm_100a"); NULL or "": each config's own arch, else the current GPU's. Every config is
 * validated before anything is compiled. `jobs` parallel compiles (0: the core count; negative:
 * FA4JIT_INVALID_ARGUMENT). `out_report` (required: NULL is FA4JIT_INVALID_ARGUMENT) receives a
 * JSON array with one entry per kernel: {"arch", "key", "status": "compiled" | "hit" | "failed",
 * "seconds", "error"}. Fails (FA4JIT_COMPILE_ERROR or the kind of the first failure) when any
 * kernel failed; the report is filled in either case. */
FA4JIT_C_EXPORT int32_t fa4jit_prewarm(const char* configs_json, const char* archs, int32_t jobs, char** out_report);

/* The kernels a Hugging Face model's attention layers launch (`fa4jit prewarm --model`): from the
 * text of its config.json, a JSON array of {"use", "config"} (configs without an arch; a kernel of
 * one arch only, one of sm_90a's own tiles, adds "only_arch": build it for that arch alone). `dtype`:
 * NULL or "" for the model's torch_dtype, else "bf16" / "fp16" / "e4m3". FA4JIT_CONFIG_ERROR names the key
 * of a feature fa4jit has no kernel for. Since C API version 2. */
FA4JIT_C_EXPORT int32_t fa4jit_model_configs(const char* hf_config_json, const char* dtype, char** out_json);
/* fa4jit_model_configs with its options as a JSON object (NULL or "" for none): "dtype" (as above)
 * and "kv_dtype" ("e4m3": the model is served over an FP8 KV cache; beside each kernel whose keys
 * come from the cache, its twin with "kv_dtype": "e4m3"). Other keys are refused, naming the key.
 * Since C API version 9. */
FA4JIT_C_EXPORT int32_t fa4jit_model_configs_with(const char* hf_config_json, const char* options_json,
                                                  char** out_json);

/* The automatic kernel choice for a launch (jit::choose_kernel, docs/C_API.md): for a config of
 * `dtype` ("bf16" / "fp16" / "e4m3") with K and V of `kv_dtype` (NULL or "": dtype's), head dims
 * `depth` and `depth_v` (0: depth), on `arch` (NULL or "": no arch's own tile), and a launch of
 * `group` query heads per KV head, `max_seqlen_q` queries per sequence (varlen: the longest),
 * `varlen_batch` sequences (0: not varlen) of `total_q` queries in all, `pack_gqa` -1 (automatic),
 * 0 or 1: writes whether the kernel packs GQA (*pack_out 1: the config's "pack_gqa" true and
 * "group" the launch's) and its "BM" (*bm_out; 0: leave it to the backend's default). No JSON and
 * no allocation: the Python ops call it per launch shape. Since C API version 11. */
FA4JIT_C_EXPORT int32_t fa4jit_choose_kernel(const char* arch, const char* dtype, const char* kv_dtype, int32_t depth,
                                             int32_t depth_v, int32_t group, int32_t max_seqlen_q, int32_t varlen_batch,
                                             int64_t total_q, int32_t pack_gqa, int32_t* pack_out, int32_t* bm_out);

/* fa4jit_choose_kernel for a launch that may run a sliding-window kernel: its `window_left`,
 * `window_right` (-1: unbounded) and `mask_prefix` (0: none), as fa4jit_launch_args holds them. Where
 * both extents are bounded the choice is a sliding-window kernel's, whose tile may follow the
 * window's width (sm_90a: a small window runs the 64-row tile); otherwise the same as
 * fa4jit_choose_kernel. Since C API version 12. */
FA4JIT_C_EXPORT int32_t fa4jit_choose_kernel2(const char* arch, const char* dtype, const char* kv_dtype, int32_t depth,
                                              int32_t depth_v, int32_t group, int32_t max_seqlen_q,
                                              int32_t varlen_batch, int64_t total_q, int32_t window_left,
                                              int32_t window_right, int32_t mask_prefix, int32_t pack_gqa,
                                              int32_t* pack_out, int32_t* bm_out);

/* jit::runtime_info() as JSON: {"version", "c_api_version", "nvrtc", "nvrtc_archs", "driver",
 * "gpus", "cache_roots", "bundles", "compile_policy", "cache_writable", "log_level", "problems",
 * "stats": {"compiles", "memory_hits", "disk_hits", "remote_hits", "failures", "forbidden",
 * "compile_ms"}}. Works without a driver or GPU. "problems" (since version 6) lists the environment
 * values that were refused (each names its variable): the call still succeeds, so every one of
 * them is reported at once. */
FA4JIT_C_EXPORT int32_t fa4jit_runtime_info(char** out_json);
/* jit::set_compile_policy: "allow", "warn" (compile and log the config) or "forbid" (a kernel in no
 * cache tier fails with FA4JIT_CACHE_MISS_ERROR before compiling). Since C API version 2. */
FA4JIT_C_EXPORT int32_t fa4jit_set_compile_policy(const char* policy);
/* Since C API version 6. Where the library's messages go (jit::set_log_sink, fa4jit/log.hpp):
 * cache warnings, and one FA4JIT_LOG_INFO line per kernel compiled (the kernel, its arch, seconds,
 * the cache tier written). `fn(level, message, user)` receives each message at or above the log
 * level, without a trailing newline; it is called from whichever thread logs, possibly several at
 * once and while the library holds a cache lock: it must return promptly and must not call back
 * into fa4jit_kernel_get. NULL restores the default, stderr. The level starts from FA4JIT_LOG
 * (error, warn, info or debug; warn when unset or unknown). */
typedef enum fa4jit_log_level {
  FA4JIT_LOG_ERROR = 0,
  FA4JIT_LOG_WARN = 1,
  FA4JIT_LOG_INFO = 2,
  FA4JIT_LOG_DEBUG = 3
} fa4jit_log_level;
typedef void (*fa4jit_log_fn)(int32_t level, const char* message, void* user);
FA4JIT_C_EXPORT void fa4jit_set_log_callback(fa4jit_log_fn fn, void* user);
/* Messages at `level` (fa4jit_log_level) and more severe ones are delivered; FA4JIT_INVALID_ARGUMENT
 * for a value outside 0..3. */
FA4JIT_C_EXPORT int32_t fa4jit_set_log_level(int32_t level);
FA4JIT_C_EXPORT int32_t fa4jit_get_log_level(void);

/* The arch string of CUDA device `device` ("sm_90a" on Hopper, "sm_100a" on B200, "sm_86" ...),
 * the arch kernels for it are built for. */
FA4JIT_C_EXPORT int32_t fa4jit_device_arch(int32_t device, char** out);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FA4JIT_C_API_H */
