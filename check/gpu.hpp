// fa4jit_check (not installed): GPU helpers for the tests and for `fa4jit check` / `fa4jit bench`.
// RAII device memory through the dlopen'd driver, one function that runs a kernel on fresh random
// inputs and checks it against the float64 reference, and CUDA-event timing.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "fa4jit/jit.hpp"
#include "check/reference.hpp"

namespace jit::testing {

// Empty when a GPU is usable, else why not (tests skip with this reason).
std::string gpu_unavailable_reason();

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  void* get() const { return reinterpret_cast<void*>(ptr_); }
  std::size_t bytes() const { return bytes_; }
  void upload(const void* src, std::size_t n);
  void download(void* dst, std::size_t n) const;
  void fill_byte(unsigned char b);  // poison

 private:
  std::uintptr_t ptr_ = 0;
  std::size_t bytes_ = 0;
};

struct CheckCase {
  int batch = 1, seqlen_q = 128, seqlen_k = 128, num_q_heads = 2, num_kv_heads = 2;
  int window_left = -1, window_right = -1, chunk_size = 0;
  int mask_prefix = 0;  // LaunchArgs::mask_prefix (a mask with prefix true)
  float softcap = 0;
  bool with_lse = true, with_sinks = false;
  std::uint64_t seed = 0;  // 0: fresh from std::random_device
  // Reference semantics for custom masks / score-mods (built-ins are derived from the config).
  std::function<bool(int, int, int, int)> custom_visible;
  std::function<double(double, int, int, int, int)> custom_score_mod;

  // Layouts. seqlens_q non-empty: varlen queries, packed (1, total, H, D) with cu_seqlens_q (batch =
  // its size). seqlens_k non-empty: per-sequence key counts, through cu_seqlens_k (varlen, unpaged)
  // or seqused_k (padded or paged K). page_size > 0: K/V in randomly placed pages of that size.
  std::vector<int> seqlens_q, seqlens_k;
  int page_size = 0;
  int num_splits = 1;    // LaunchArgs::num_splits (0: automatic)
  int max_seqlen_k = 0;  // LaunchArgs::max_seqlen_k, the caller's hint (any value: correct results)
  // > 0: pass a run-time block mask of these block sizes, computed exactly from the reference mask.
  int block_mask_q = 0, block_mask_k = 0;
  std::array<float, 4> aux_scalar{};     // LaunchArgs::aux_scalar (custom snippets' scalars[i])
  std::array<const void*, 4> aux_ptr{};  // LaunchArgs::aux_ptr (snippets' aux[i]; the test owns the memory)
  // > 0: O rows carry this many poisoned elements after each head's D (head stride D + o_head_pad,
  // a multiple of 8); they must stay poisoned (CheckResult::clobbered). Catches stores past head_dim.
  int o_head_pad = 0;
  // FP8 (e4m3) kernels: random descale_q/k/v per (batch, kv head) drawn from [0.5, 2), applied to the
  // reference's inputs (stored value x descale); FP8 KV caches (kv_dtype e4m3): descale_k/v only;
  // false: null (factor 1). Other kernels ignore it.
  bool descale = true;
  // Q's random normal standard deviation (K and V keep 1): magnitudes far from 1 exercise a
  // kernel's Q conversions (an FP8-KV kernel's bf16 -> fp16, docs/VARIANTS.md).
  float q_stddev = 1.0f;
  // Latent KV (MLA absorbed decode, depth 576 / depth_v 512): one K buffer of `depth` columns and
  // no V allocation; LaunchArgs::v is a view of K's first depth_v columns (k's data pointer and
  // strides, shape[3] = depth_v), in every layout (padded, varlen, paged), and the reference reads
  // V = K[..., :depth_v]. 16-bit K only.
  bool latent_kv = false;
};

// METHOD.md's acceptance of a kernel against the float64 reference, one rule for the GPU tests
// (tests/support/expect.hpp) and `fa4jit check`: ||o - ref|| / ||ref|| within 1e-2 (bf16 inputs),
// 5e-3 (fp16) or kFp8RelL2Tolerance (e4m3), LSE within 2e-2, -inf LSE exactly where the reference
// has it, and no unwritten or clobbered element.
double rel_l2_tolerance(DType dtype);
constexpr double kLseTolerance = 2e-2;  // FP8 too: its scores are exact products of the stored values

// FP8 (e4m3 inputs). The reference runs on the dequantised inputs (stored e4m3 value x descale), so
// input quantisation is not measured; what remains is the kernel's own rounding. Besides the bf16 /
// fp16 O store (2^-9 / 2^-12 relative), the kernel rounds P (the softmax probabilities, scaled into
// e4m3's normal range) to e4m3 before P V: 3 mantissa bits, a relative error of up to 2^-4 per
// element (RMS about 2^-4 / sqrt(3) = 3.6e-2 at the bottom of a binade, less above). Those errors
// are independent across the keys a row sums over, and with zero-mean V the row's O is as small as
// its error sum, so O's relative L2 error is about the per-element RMS: 1e-2 .. 3e-2 on random
// normal inputs. 0.05 leaves room for that and still fails a kernel that drops a tile, ignores a
// descale factor d (a head's O off by |1 - d|, 0.4 on average over [0.5, 2)) or skips the P scaling
// (small P values, e4m3 subnormals, lose most of their bits). To be tightened to the values measured
// on the GPU (tests/gpu_fp8_test.cpp prints each case's rel L2).
constexpr double kFp8RelL2Tolerance = 5e-2;

struct CheckResult {
  DType dtype = DType::bf16;  // the kernel's input dtype: it sets the rel L2 tolerance
  double rel_l2 = 0;          // ||o - ref|| / ||ref||
  double max_abs = 0;         // max |o - ref|
  double lse_max_abs = 0;     // over rows with a finite reference LSE
  std::size_t unwritten = 0;  // poisoned (NaN) elements left in O or LSE
  std::size_t clobbered = 0;  // O padding elements (CheckCase::o_head_pad) that were written
  std::size_t lse_inf_mismatch = 0;
  std::uint64_t seed = 0;
  int splits = 1;  // KV splits the launch ran (Kernel::num_splits: the automatic choice resolved)
  std::string describe() const;
  bool passes() const;  // the acceptance rule above
};

// Archs whose kernels run on the current GPU: the portable backend's arch, plus sm_90a on Hopper.
std::vector<std::string> runnable_archs();

// Standard ALiBi slope of head h (Press et al.), as the Alibi score-mod computes it.
double alibi_slope(int h, int num_heads);

// Random inputs (seeded), poisoned O/LSE, launch, synchronise, compare.
CheckResult run_and_check(const Kernel& kernel, const CheckCase& c);

// The case's launch scalars into `a`: window extents, chunk, key prefix, softcap cap, splits and the
// max_seqlen_k hint. run_and_check and `fa4jit bench` both set them here, so a bench row times the
// launch `check` verifies (bench once dropped the window: docs/PERF.md run 87).
void set_launch_scalars(LaunchArgs& a, const CheckCase& c);

// n random normal elements of type t as bytes (dtype_size(t) each: host::to_bits, little-endian), for
// timing runs: 2^22 independent draws, repeated from a random start per block of 2^20 elements. A
// kernel sees values as varied as independent draws (zeros would run faster), for the cost of a
// copy: drawing each element of a 32k-key decode cache's K (2^28 bf16) took 8.1 s, this 0.42 s.
std::string timing_input_bytes(DType t, std::size_t n, std::mt19937& rng);

// Median milliseconds of `iters` launches timed with CUDA events after `warmup` launches.
double time_kernel_ms(const Kernel& kernel, const LaunchArgs& args, int warmup, int iters);
// Mean of `iters` back-to-back launches between one pair of events: the device time per call once
// the host keeps ahead of the GPU (excludes the per-call host cost that time_kernel_ms includes).
double time_kernel_stream_ms(const Kernel& kernel, const LaunchArgs& args, int warmup, int iters);
// Host microseconds per launch() (argument checks, plan, descriptors, workspace, driver launches),
// mean of `iters` launches queued without waiting: the part of time_kernel_ms that the GPU spends
// idle before the kernel starts, where the stream is otherwise empty.
double host_launch_us(const Kernel& kernel, const LaunchArgs& args, int iters);

}  // namespace jit::testing
