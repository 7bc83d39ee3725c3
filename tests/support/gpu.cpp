#include "tests/support/gpu.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include <fmt/format.h>

#include "runtime/driver.hpp"
#include "runtime/host_numeric.hpp"

namespace jit::testing {

using detail::check;
using detail::driver;

std::string gpu_unavailable_reason() {
  std::string why = detail::driver_unavailable_reason();
  if (!why.empty()) return why;
  int n = 0;
  if (driver().cuDeviceGetCount(&n) != CUDA_SUCCESS || n == 0) return "no CUDA GPU";
  return {};
}

DeviceBuffer::DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
  detail::ensure_context();
  CUdeviceptr p = 0;
  check(driver().cuMemAlloc(&p, std::max<std::size_t>(bytes, 16)), "cuMemAlloc");
  ptr_ = p;
}
DeviceBuffer::~DeviceBuffer() {
  if (ptr_) driver().cuMemFree(ptr_);
}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  std::swap(ptr_, o.ptr_);
  std::swap(bytes_, o.bytes_);
  return *this;
}
void DeviceBuffer::upload(const void* src, std::size_t n) { check(driver().cuMemcpyHtoD(ptr_, src, n), "cuMemcpyHtoD"); }
void DeviceBuffer::download(void* dst, std::size_t n) const { check(driver().cuMemcpyDtoH(dst, ptr_, n), "cuMemcpyDtoH"); }
void DeviceBuffer::fill_byte(unsigned char b) { check(driver().cuMemsetD8(ptr_, b, bytes_), "cuMemsetD8"); }

std::string CheckResult::describe() const {
  return fmt::format("rel_l2={:.3e} max_abs={:.3e} lse_max_abs={:.3e} unwritten={} lse_inf_mismatch={} seed={}", rel_l2,
                     max_abs, lse_max_abs, unwritten, lse_inf_mismatch, seed);
}

namespace {

// Random normal values rounded to the kernel's type; returns device bits and host floats.
std::vector<float> random_tensor(std::mt19937_64& rng, std::size_t n, DType t, std::vector<std::uint16_t>& bits) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> f(n);
  bits.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    bits[i] = host::to_bits(t, dist(rng));
    f[i] = host::from_bits(t, bits[i]);
  }
  return f;
}

}  // namespace

double alibi_slope(int h, int num_heads) {
  int n = 1;
  while (n * 2 <= num_heads) n *= 2;
  if (h < n) return std::exp2(-8.0 * (h + 1) / n);
  return std::exp2(-4.0 * (2 * (h - n) + 1) / n);
}

CheckResult run_and_check(const Kernel& kernel, const CheckCase& c) {
  const FA4Config& cfg = kernel.config().config;
  const DType t = cfg.dtype, to = *cfg.output_dtype;
  const int D = cfg.depth;
  CheckResult res;
  res.seed = c.seed ? c.seed : (static_cast<std::uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  std::mt19937_64 rng(res.seed);

  Problem p;
  p.batch = c.batch;
  p.seqlen_q = c.seqlen_q;
  p.seqlen_k = c.seqlen_k;
  p.num_q_heads = c.num_q_heads;
  p.num_kv_heads = c.num_kv_heads;
  p.depth = D;
  const std::size_t nq = static_cast<std::size_t>(c.batch) * c.seqlen_q * c.num_q_heads * D;
  const std::size_t nk = static_cast<std::size_t>(c.batch) * c.seqlen_k * c.num_kv_heads * D;
  std::vector<std::uint16_t> qb, kb, vb;
  p.q = random_tensor(rng, nq, t, qb);
  p.k = random_tensor(rng, nk, t, kb);
  p.v = random_tensor(rng, nk, t, vb);
  p.visible = c.custom_visible ? c.custom_visible
                               : reference_mask(cfg.mask, c.seqlen_q, c.seqlen_k, c.window_left, c.window_right, c.chunk_size);
  if (c.custom_score_mod) {
    p.score_mod = c.custom_score_mod;
  } else if (cfg.score_mod.kind == ScoreMod::Kind::softcap) {
    const double cap = c.softcap;
    p.score_mod = [cap](double s, int, int, int, int) { return cap * std::tanh(s / cap); };
  } else if (cfg.score_mod.kind == ScoreMod::Kind::alibi) {
    const int H = c.num_q_heads, off = c.seqlen_k - c.seqlen_q;
    p.score_mod = [H, off](double s, int, int h, int q, int k) {
      return s - alibi_slope(h, H) * std::fabs(static_cast<double>(q + off - k));
    };
  }
  if (c.with_sinks) {
    std::normal_distribution<float> dist(0.0f, 2.0f);
    for (int h = 0; h < c.num_q_heads; ++h) p.sinks.push_back(dist(rng));
  }

  DeviceBuffer dq(nq * 2), dk(nk * 2), dv(nk * 2), doo(nq * 2);
  const std::size_t nl = static_cast<std::size_t>(c.batch) * c.num_q_heads * c.seqlen_q;
  DeviceBuffer dlse(nl * 4), dsinks(std::max<std::size_t>(p.sinks.size(), 1) * 4);
  dq.upload(qb.data(), nq * 2);
  dk.upload(kb.data(), nk * 2);
  dv.upload(vb.data(), nk * 2);
  doo.fill_byte(0xff);  // NaN in both 16-bit types: an unwritten element cannot pass
  dlse.fill_byte(0xff);
  if (!p.sinks.empty()) dsinks.upload(p.sinks.data(), p.sinks.size() * 4);

  LaunchArgs a;
  a.q = Tensor::contiguous(dq.get(), t, c.batch, c.seqlen_q, c.num_q_heads, D);
  a.k = Tensor::contiguous(dk.get(), t, c.batch, c.seqlen_k, c.num_kv_heads, D);
  a.v = Tensor::contiguous(dv.get(), t, c.batch, c.seqlen_k, c.num_kv_heads, D);
  a.o = Tensor::contiguous(doo.get(), to, c.batch, c.seqlen_q, c.num_q_heads, D);
  a.lse = c.with_lse ? static_cast<float*>(dlse.get()) : nullptr;
  a.window_left = c.window_left;
  a.window_right = c.window_right;
  a.chunk_size = c.chunk_size;
  a.softcap = c.softcap;
  a.sinks = p.sinks.empty() ? nullptr : static_cast<const float*>(dsinks.get());
  kernel.launch(a, nullptr);
  check(driver().cuCtxSynchronize(), "kernel execution (cuCtxSynchronize)");

  std::vector<std::uint16_t> ob(nq);
  std::vector<float> lse(nl);
  doo.download(ob.data(), nq * 2);
  dlse.download(lse.data(), nl * 4);
  const Reference ref = reference_attention(p);

  double err2 = 0, ref2 = 0;
  for (std::size_t i = 0; i < nq; ++i) {
    const double o = host::from_bits(to, ob[i]);
    if (std::isnan(o)) {
      ++res.unwritten;
      continue;
    }
    const double d = o - ref.o[i];
    err2 += d * d;
    ref2 += ref.o[i] * ref.o[i];
    res.max_abs = std::max(res.max_abs, std::fabs(d));
  }
  res.rel_l2 = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  if (c.with_lse) {
    for (std::size_t i = 0; i < nl; ++i) {
      if (std::isnan(lse[i])) {
        ++res.unwritten;
      } else if (std::isinf(ref.lse[i]) || std::isinf(lse[i])) {
        res.lse_inf_mismatch += !(std::isinf(ref.lse[i]) && std::isinf(lse[i]) && (ref.lse[i] < 0) == (lse[i] < 0));
      } else {
        res.lse_max_abs = std::max(res.lse_max_abs, std::fabs(lse[i] - ref.lse[i]));
      }
    }
  }
  return res;
}

double time_kernel_ms(const Kernel& kernel, const LaunchArgs& args, int warmup, int iters) {
  const detail::DriverApi& d = driver();
  for (int i = 0; i < warmup; ++i) kernel.launch(args, nullptr);
  CUevent start, stop;
  check(d.cuEventCreate(&start, CU_EVENT_DEFAULT), "cuEventCreate");
  check(d.cuEventCreate(&stop, CU_EVENT_DEFAULT), "cuEventCreate");
  std::vector<float> ms(iters);
  for (int i = 0; i < iters; ++i) {
    check(d.cuEventRecord(start, nullptr), "cuEventRecord");
    kernel.launch(args, nullptr);
    check(d.cuEventRecord(stop, nullptr), "cuEventRecord");
    check(d.cuEventSynchronize(stop), "cuEventSynchronize");
    check(d.cuEventElapsedTime(&ms[i], start, stop), "cuEventElapsedTime");
  }
  d.cuEventDestroy(start);
  d.cuEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return ms[iters / 2];
}

}  // namespace jit::testing
