// A program that uses fa4jit as an installed library (README, "Use from C++"), in C++17.
//
// Always: builds the README's kernel (bf16, head dim 128, 32 query heads in groups of 4, causal)
// for sm_90a and sm_100a, which needs no GPU, and prints each kernel's cache key and origin.
// With a GPU: runs that attention on small random bf16 inputs with poisoned outputs and checks
// it against a float64 CPU reference written here: ||O - ref|| / ||ref|| <= 1e-2, |LSE - ref|
// <= 2e-2, nothing left unwritten. Exit status 1 on a mismatch or an error; 0 when there is no
// GPU unless --require-gpu is given.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <fa4jit/jit.hpp>

namespace {

// The README's config.
jit::FA4Config readme_config() {
  jit::FA4Config cfg;  // 0 / unset fields are derived per arch
  cfg.dtype = jit::DType::bf16;
  cfg.depth = 128;
  cfg.num_q_heads = 32;
  cfg.group = 4;
  cfg.mask = jit::Mask::causal();  // bottom-right aligned when Sq != Sk
  return cfg;
}

std::uint16_t to_bf16(float f) {  // round to nearest even (inputs are finite)
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

float from_bf16(std::uint16_t h) {
  const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// Device memory for one tensor, freed on scope exit.
struct DeviceBuffer {
  void* ptr = nullptr;
  explicit DeviceBuffer(std::size_t bytes) { cuda_check(cudaMalloc(&ptr, bytes), "cudaMalloc"); }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

// Causal attention (bottom-right aligned) in float64 over (B, S, H, D) tensors; GQA: query head
// h reads KV head h / (Hq / Hkv).
void reference(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v, int B, int Sq,
               int Sk, int Hq, int Hkv, int D, std::vector<double>& o, std::vector<double>& lse) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  o.assign(static_cast<std::size_t>(B) * Sq * Hq * D, 0.0);
  lse.assign(static_cast<std::size_t>(B) * Hq * Sq, -INFINITY);
  std::vector<double> s(Sk);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < Hq; ++h) {
      const int hk = h / (Hq / Hkv);
      for (int i = 0; i < Sq; ++i) {
        const int last = i + (Sk - Sq);  // keys 0..last are visible
        if (last < 0) continue;
        const float* qi = &q[((static_cast<std::size_t>(b) * Sq + i) * Hq + h) * D];
        double mx = -INFINITY;
        for (int j = 0; j <= last && j < Sk; ++j) {
          const float* kj = &k[((static_cast<std::size_t>(b) * Sk + j) * Hkv + hk) * D];
          double dot = 0;
          for (int d = 0; d < D; ++d) dot += static_cast<double>(qi[d]) * kj[d];
          s[j] = dot * scale;
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        double* oi = &o[((static_cast<std::size_t>(b) * Sq + i) * Hq + h) * D];
        for (int j = 0; j <= last && j < Sk; ++j) {
          const double p = std::exp(s[j] - mx);
          sum += p;
          const float* vj = &v[((static_cast<std::size_t>(b) * Sk + j) * Hkv + hk) * D];
          for (int d = 0; d < D; ++d) oi[d] += p * vj[d];
        }
        for (int d = 0; d < D; ++d) oi[d] /= sum;
        lse[(static_cast<std::size_t>(b) * Hq + h) * Sq + i] = mx + std::log(sum);
      }
    }
}

// One attention on the current GPU, checked against the reference. True when it matches.
bool run_and_check(const jit::Kernel& kernel) {
  const int B = 2, Sq = 200, Sk = 333, Hq = 32, Hkv = 8, D = 128;  // odd lengths: partial tiles
  const std::size_t nq = static_cast<std::size_t>(B) * Sq * Hq * D, nk = static_cast<std::size_t>(B) * Sk * Hkv * D;
  std::mt19937 rng(1234);
  std::normal_distribution<float> dist;
  // Inputs rounded to bf16 once: the device and the reference see the same values.
  auto random_bf16 = [&](std::size_t n, std::vector<std::uint16_t>& bits, std::vector<float>& values) {
    bits.resize(n);
    values.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      bits[i] = to_bf16(dist(rng));
      values[i] = from_bf16(bits[i]);
    }
  };
  std::vector<std::uint16_t> hq, hk, hv;
  std::vector<float> fq, fk, fv;
  random_bf16(nq, hq, fq);
  random_bf16(nk, hk, fk);
  random_bf16(nk, hv, fv);

  DeviceBuffer q(nq * 2), k(nk * 2), v(nk * 2), o(nq * 2), lse(static_cast<std::size_t>(B) * Hq * Sq * 4);
  cuda_check(cudaMemcpy(q.ptr, hq.data(), nq * 2, cudaMemcpyHostToDevice), "copy q");
  cuda_check(cudaMemcpy(k.ptr, hk.data(), nk * 2, cudaMemcpyHostToDevice), "copy k");
  cuda_check(cudaMemcpy(v.ptr, hv.data(), nk * 2, cudaMemcpyHostToDevice), "copy v");
  // Poison: 0xFF bytes are NaN in bf16 and float32, so an element the kernel skips shows up.
  cuda_check(cudaMemset(o.ptr, 0xFF, nq * 2), "poison o");
  cuda_check(cudaMemset(lse.ptr, 0xFF, static_cast<std::size_t>(B) * Hq * Sq * 4), "poison lse");

  // The README's launch.
  jit::LaunchArgs args;  // (batch, seqlen, heads, head_dim), strides in elements
  args.q = jit::Tensor::contiguous(q.ptr, jit::DType::bf16, B, Sq, Hq, D);
  args.k = jit::Tensor::contiguous(k.ptr, jit::DType::bf16, B, Sk, Hkv, D);
  args.v = jit::Tensor::contiguous(v.ptr, jit::DType::bf16, B, Sk, Hkv, D);
  args.o = jit::Tensor::contiguous(o.ptr, jit::DType::bf16, B, Sq, Hq, D);
  args.lse = static_cast<float*>(lse.ptr);  // optional float32 [B][Hq][Sq], natural log
  cudaStream_t stream = nullptr;            // the legacy default stream
  kernel.launch(args, stream);              // checks every argument first: jit::LaunchError
  cuda_check(cudaDeviceSynchronize(), "kernel");

  std::vector<std::uint16_t> ho(nq);
  std::vector<float> hlse(static_cast<std::size_t>(B) * Hq * Sq);
  cuda_check(cudaMemcpy(ho.data(), o.ptr, nq * 2, cudaMemcpyDeviceToHost), "copy o");
  cuda_check(cudaMemcpy(hlse.data(), lse.ptr, hlse.size() * 4, cudaMemcpyDeviceToHost), "copy lse");

  std::vector<double> ref_o, ref_lse;
  reference(fq, fk, fv, B, Sq, Sk, Hq, Hkv, D, ref_o, ref_lse);
  double err2 = 0, ref2 = 0, lse_err = 0;
  std::size_t unwritten = 0;
  for (std::size_t i = 0; i < nq; ++i) {
    const double x = from_bf16(ho[i]);
    if (std::isnan(x)) ++unwritten;
    err2 += (x - ref_o[i]) * (x - ref_o[i]);
    ref2 += ref_o[i] * ref_o[i];
  }
  for (std::size_t i = 0; i < hlse.size(); ++i) {
    if (std::isnan(hlse[i]))
      ++unwritten;
    else
      lse_err = std::max(lse_err, std::abs(hlse[i] - ref_lse[i]));
  }
  const double rel_l2 = std::sqrt(err2 / ref2);
  const bool ok = unwritten == 0 && rel_l2 <= 1e-2 && lse_err <= 2e-2;
  std::printf("run: B=%d Sq=%d Sk=%d H=%d/%d D=%d causal: rel_l2=%.3e lse_max_abs=%.3e unwritten=%zu -> %s\n", B, Sq,
              Sk, Hq, Hkv, D, rel_l2, lse_err, unwritten, ok ? "PASS" : "FAIL");
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  const bool require_gpu = argc > 1 && std::string(argv[1]) == "--require-gpu";
  try {
    const jit::RuntimeInfo info = jit::runtime_info();
    std::printf("fa4jit %s (headers %s), NVRTC %d.%d\n", info.version.c_str(), FA4JIT_VERSION_STRING, info.nvrtc_major,
                info.nvrtc_minor);
    if (info.version != FA4JIT_VERSION_STRING) {
      std::fprintf(stderr, "error: the library (%s) is not the version of its headers (%s)\n", info.version.c_str(),
                   FA4JIT_VERSION_STRING);
      return 1;
    }
    // Kernels for GPUs this machine may not have: generated and compiled, no GPU needed.
    for (const char* arch : {"sm_90a", "sm_100a"}) {
      jit::FA4Config cfg = readme_config();
      cfg.arch = arch;
      const jit::KernelPtr kernel = jit::get_kernel(cfg);  // generated, compiled, cached; thread-safe
      std::printf("%-8s %s backend, key %s, %s\n", arch, jit::to_string(kernel->config().backend),
                  kernel->key().c_str(), kernel->origin().c_str());
    }

    int gpus = 0;
    if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus == 0) {
      std::printf("no GPU here: the attention run is skipped\n");
      return require_gpu ? 1 : 0;
    }
    const jit::KernelPtr kernel = jit::get_kernel(readme_config());  // arch empty: the current GPU's
    std::printf("%-8s %s backend, key %s, %s\n", kernel->config().config.arch.c_str(),
                jit::to_string(kernel->config().backend), kernel->key().c_str(), kernel->origin().c_str());
    const bool ok = run_and_check(*kernel);
    const jit::Stats s = jit::stats();
    std::printf("stats: %llu compiled, %llu disk hits, %llu memory hits\n", static_cast<unsigned long long>(s.compiles),
                static_cast<unsigned long long>(s.disk_hits), static_cast<unsigned long long>(s.memory_hits));
    return ok ? 0 : 1;
  } catch (const jit::Error& e) {  // typed errors from fa4jit (include/fa4jit/errors.hpp)
    std::fprintf(stderr, "fa4jit error: %s\n", e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
  }
  return 1;
}
