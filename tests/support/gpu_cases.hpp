// Set-ups the GPU tests share: the common GQA problem of the variant tests, and buffers for launches
// a kernel must refuse before anything runs.
#pragma once
#include <algorithm>
#include <cstddef>
#include <vector>

#include "check/gpu.hpp"

namespace jit::testing {

// `batch` padded sequences of seqlen_q queries and seqlen_k keys, 8 query heads over 2 KV heads
// (GQA 4:1); every other field at its default.
inline CheckCase gqa_case(int seqlen_q, int seqlen_k, int batch = 2) {
  CheckCase c;
  c.batch = batch;
  c.seqlen_q = seqlen_q;
  c.seqlen_k = seqlen_k;
  c.num_q_heads = 8;
  c.num_kv_heads = 2;
  return c;
}

// Device buffers for one contiguous (B 2, S 128, H 4, D 128) problem, 2 bytes an element so any
// dtype fits, with O poisoned: for launches that must throw LaunchError and write nothing.
class RefusedLaunchBuffers {
 public:
  RefusedLaunchBuffers() { o_.fill_byte(kPoison); }

  // q of q_dtype, k and v of kv_dtype, a bf16 o; no descale factors.
  LaunchArgs args(DType q_dtype, DType kv_dtype) const {
    LaunchArgs a;
    a.q = Tensor::contiguous(q_.get(), q_dtype, B, S, H, D);
    a.k = Tensor::contiguous(k_.get(), kv_dtype, B, S, H, D);
    a.v = Tensor::contiguous(v_.get(), kv_dtype, B, S, H, D);
    a.o = Tensor::contiguous(o_.get(), DType::bf16, B, S, H, D);
    return a;
  }
  // Device memory for a descale pointer (16 floats).
  const float* descale() const { return static_cast<const float*>(descale_.get()); }
  // How many bytes of O are no longer the poison: 0 while every launch was refused.
  std::size_t written_bytes() const {
    std::vector<unsigned char> host(o_.bytes());
    o_.download(host.data(), host.size());
    return static_cast<std::size_t>(
        std::count_if(host.begin(), host.end(), [](unsigned char b) { return b != kPoison; }));
  }

 private:
  static constexpr int B = 2, S = 128, H = 4, D = 128;
  static constexpr std::size_t kBytes = std::size_t{2} * B * S * H * D;
  static constexpr unsigned char kPoison = 0x5a;
  DeviceBuffer q_{kBytes}, k_{kBytes}, v_{kBytes}, o_{kBytes}, descale_{64};
};

}  // namespace jit::testing
