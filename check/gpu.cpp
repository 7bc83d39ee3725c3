#include "check/gpu.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <stdexcept>

#include <fmt/format.h>

#include "check/host_numeric.hpp"
#include "runtime/driver.hpp"

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
void DeviceBuffer::upload(const void* src, std::size_t n) {
  check(driver().cuMemcpyHtoD(ptr_, src, n), "cuMemcpyHtoD");
}
void DeviceBuffer::download(void* dst, std::size_t n) const {
  check(driver().cuMemcpyDtoH(dst, ptr_, n), "cuMemcpyDtoH");
}
void DeviceBuffer::fill_byte(unsigned char b) { check(driver().cuMemsetD8(ptr_, b, bytes_), "cuMemsetD8"); }

double rel_l2_tolerance(DType dtype) {
  switch (dtype) {
    case DType::bf16: return 1e-2;
    case DType::fp16: return 5e-3;
    case DType::e4m3: return kFp8RelL2Tolerance;
  }
  return 0;
}

bool CheckResult::passes() const {
  return unwritten == 0 && clobbered == 0 && rel_l2 <= rel_l2_tolerance(dtype) && lse_inf_mismatch == 0 &&
         lse_max_abs <= kLseTolerance;
}

std::string CheckResult::describe() const {
  return fmt::format(
      "rel_l2={:.3e} max_abs={:.3e} lse_max_abs={:.3e} unwritten={} clobbered={} lse_inf_mismatch={} seed={}", rel_l2,
      max_abs, lse_max_abs, unwritten, clobbered, lse_inf_mismatch, seed);
}

std::string timing_input_bytes(DType t, std::size_t n, std::mt19937& rng) {
  constexpr std::size_t kPool = std::size_t{1} << 22, kBlock = std::size_t{1} << 20;
  const std::size_t size = static_cast<std::size_t>(dtype_size(t));
  std::normal_distribution<float> dist;
  std::string pool(std::min(n, kPool) * size, '\0');
  for (std::size_t i = 0; i < pool.size(); i += size) {
    const std::uint16_t x = host::to_bits(t, dist(rng));
    std::memcpy(pool.data() + i, &x, size);  // little-endian: e4m3's code is the low byte
  }
  if (n <= kPool) return pool;
  std::string out(n * size, '\0');
  std::uniform_int_distribution<std::size_t> start(0, kPool - kBlock);
  for (std::size_t e = 0; e < n; e += kBlock) {
    const std::size_t len = std::min(kBlock, n - e);
    std::memcpy(out.data() + e * size, pool.data() + start(rng) * size, len * size);
  }
  return out;
}

namespace {

// Random normal values rounded to the kernel's type; returns the bits (host::to_bits: e4m3 codes in
// the low byte) and host floats.
std::vector<float> random_tensor(std::mt19937_64& rng, std::size_t n, DType t, std::vector<std::uint16_t>& bits,
                                 float stddev = 1.0f) {
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> f(n);
  bits.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    bits[i] = host::to_bits(t, dist(rng));
    f[i] = host::from_bits(t, bits[i]);
  }
  return f;
}

// A device buffer holding `bits` as elements of type t (2 bytes each, or 1 for e4m3).
DeviceBuffer upload_elements(const std::vector<std::uint16_t>& bits, DType t) {
  const std::size_t size = static_cast<std::size_t>(dtype_size(t));
  DeviceBuffer buf(bits.size() * size);
  if (size == 2) {
    buf.upload(bits.data(), bits.size() * 2);
  } else {
    std::vector<std::uint8_t> bytes(bits.size());
    for (std::size_t i = 0; i < bits.size(); ++i) bytes[i] = static_cast<std::uint8_t>(bits[i]);
    buf.upload(bytes.data(), bytes.size());
  }
  return buf;
}

}  // namespace

std::vector<std::string> runnable_archs() {
  const std::string dev = current_device_arch();
  std::vector<std::string> archs = {dev.back() == 'a' ? dev.substr(0, dev.size() - 1) : dev};  // portable
  if (dev == "sm_90a") archs.push_back(dev);                                                   // Hopper
  return archs;
}

double alibi_slope(int h, int num_heads) {
  int n = 1;
  while (n * 2 <= num_heads) n *= 2;
  if (h < n) return std::exp2(-8.0 * (h + 1) / n);
  return std::exp2(-4.0 * (2 * (h - n) + 1) / n);
}

namespace {

// Per-sequence lengths of a case, and the padded extents the reference works in.
struct Lengths {
  int batch;
  std::vector<int> q, k;
  int max_q, max_k;
  bool varlen_q, varlen_k, seqused_k;
  explicit Lengths(const CheckCase& c) {
    varlen_q = !c.seqlens_q.empty();
    batch = varlen_q ? static_cast<int>(c.seqlens_q.size()) : c.batch;
    q = varlen_q ? c.seqlens_q : std::vector<int>(batch, c.seqlen_q);
    k = c.seqlens_k.empty() ? std::vector<int>(batch, c.seqlen_k) : c.seqlens_k;
    if (static_cast<int>(k.size()) != batch) throw std::invalid_argument("CheckCase: seqlens_k size != batch");
    max_q = std::max(1, *std::max_element(q.begin(), q.end()));
    max_k = std::max(1, *std::max_element(k.begin(), k.end()));
    if (!varlen_q) max_q = c.seqlen_q;
    varlen_k = varlen_q && c.page_size == 0;
    seqused_k = !varlen_k && (c.page_size > 0 || !c.seqlens_k.empty());
    if (!varlen_k && c.seqlens_k.empty() && c.page_size == 0) max_k = c.seqlen_k;
  }
  std::vector<int> offsets(const std::vector<int>& len) const {
    std::vector<int> cu(1, 0);
    for (int l : len) cu.push_back(cu.back() + l);
    return cu;
  }
};

// Copies rows (b, i < len[b]) of a padded (B, S, H, D) tensor into a packed (1, total, H, D) one.
std::vector<std::uint16_t> pack_rows(const std::vector<std::uint16_t>& padded, const std::vector<int>& len, int S,
                                     std::size_t row_elems) {
  std::vector<std::uint16_t> out;
  for (std::size_t b = 0; b < len.size(); ++b)
    out.insert(out.end(), padded.begin() + b * S * row_elems, padded.begin() + (b * S + len[b]) * row_elems);
  if (out.empty()) out.resize(row_elems, 0);  // a zero-row tensor still needs a valid pointer
  return out;
}

// Paged K/V: every sequence's rows in randomly chosen physical pages, plus spare pages.
struct Paged {
  int num_pages = 0, max_pages = 0;
  std::vector<int> table;
  std::vector<std::uint16_t> k, v;
  // row_elems / v_row_elems: a key's and a value's elements (all heads); V may be narrower (depth_v).
  Paged(std::mt19937_64& rng, DType t, const Lengths& L, int ps, const std::vector<std::uint16_t>& kpad,
        const std::vector<std::uint16_t>& vpad, std::size_t row_elems, std::size_t v_row_elems) {
    std::vector<int> pages_of(L.batch);
    for (int b = 0; b < L.batch; ++b) {
      pages_of[b] = (L.k[b] + ps - 1) / ps;
      max_pages = std::max(max_pages, pages_of[b]);
      num_pages += pages_of[b];
    }
    max_pages += 1;  // an entry past every sequence: the kernel may read it for tile padding
    num_pages += 3;
    std::vector<int> perm(num_pages);
    for (int i = 0; i < num_pages; ++i) perm[i] = i;
    std::shuffle(perm.begin(), perm.end(), rng);
    std::uniform_int_distribution<int> any_page(0, num_pages - 1);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    k.resize(static_cast<std::size_t>(num_pages) * ps * row_elems);
    v.resize(static_cast<std::size_t>(num_pages) * ps * v_row_elems);
    for (auto& x : k) x = host::to_bits(t, dist(rng));  // spare rows: finite garbage
    for (auto& x : v) x = host::to_bits(t, dist(rng));
    table.assign(static_cast<std::size_t>(L.batch) * max_pages, 0);
    int next = 0;
    for (int b = 0; b < L.batch; ++b)
      for (int lp = 0; lp < max_pages; ++lp) {
        const int page = lp < pages_of[b] ? perm[next++] : any_page(rng);
        table[static_cast<std::size_t>(b) * max_pages + lp] = page;
        if (lp >= pages_of[b]) continue;
        for (int r = 0; r < ps && lp * ps + r < L.k[b]; ++r) {
          const std::size_t src = static_cast<std::size_t>(b) * L.max_k + lp * ps + r;
          const std::size_t dst = static_cast<std::size_t>(page) * ps + r;
          std::copy_n(kpad.begin() + src * row_elems, row_elems, k.begin() + dst * row_elems);
          std::copy_n(vpad.begin() + src * v_row_elems, v_row_elems, v.begin() + dst * v_row_elems);
        }
      }
  }
};

}  // namespace

void set_launch_scalars(LaunchArgs& a, const CheckCase& c) {
  a.window_left = c.window_left;
  a.window_right = c.window_right;
  a.chunk_size = c.chunk_size;
  a.mask_prefix = c.mask_prefix;
  a.softcap = c.softcap;
  a.num_splits = c.num_splits;
  a.max_seqlen_k = c.max_seqlen_k;
}

CheckResult run_and_check(const Kernel& kernel, const CheckCase& c) {
  const FA4Config& cfg = kernel.config().config;
  // t: Q (and the kernel's arithmetic); tk: K and V (e4m3 for an FP8 KV cache); to: O.
  const DType t = cfg.dtype, tk = kv_type(cfg), to = *cfg.output_dtype;
  const int D = cfg.depth, Dv = value_depth(cfg);  // Q / K, and V / O (depth_v)
  CheckResult res;
  res.dtype = kernel.config().config.dtype;
  res.seed = c.seed ? c.seed : (static_cast<std::uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  std::mt19937_64 rng(res.seed);
  const Lengths L(c);
  const int B = L.batch, Sq = L.max_q, Sk = L.max_k, Hq = c.num_q_heads, Hkv = c.num_kv_heads;
  if (c.latent_kv && Dv > D) throw std::invalid_argument("CheckCase: latent_kv needs depth_v <= depth");

  Problem p;
  p.batch = B;
  p.seqlen_q = Sq;
  p.seqlen_k = Sk;
  p.num_q_heads = Hq;
  p.num_kv_heads = Hkv;
  p.depth = D;
  p.depth_v = Dv;
  p.v_from_k = c.latent_kv;
  p.seqlens_q = L.q;
  p.seqlens_k = L.k;
  const std::size_t q_row = static_cast<std::size_t>(Hq) * D, k_row = static_cast<std::size_t>(Hkv) * D;
  // Latent KV: no V elements of its own (V is K's prefix), so nothing is drawn or stored for it.
  const std::size_t v_row = c.latent_kv ? 0 : static_cast<std::size_t>(Hkv) * Dv;
  const std::size_t nq = B * Sq * q_row, nk = B * Sk * k_row, nv = B * Sk * v_row;
  std::vector<std::uint16_t> qb, kb, vb;
  p.q = random_tensor(rng, nq, t, qb, c.q_stddev);
  p.k = random_tensor(rng, nk, tk, kb);
  p.v = random_tensor(rng, nv, tk, vb);
  if (c.custom_visible) {
    p.visible = c.custom_visible;
  } else {
    std::vector<std::function<bool(int, int, int, int)>> per_seq;
    for (int b = 0; b < B; ++b)
      per_seq.push_back(
          reference_mask(cfg.mask, L.q[b], L.k[b], c.window_left, c.window_right, c.chunk_size, c.mask_prefix));
    p.visible = [per_seq](int b, int h, int q, int k) { return per_seq[b](b, h, q, k); };
  }
  if (c.custom_score_mod) {
    p.score_mod = c.custom_score_mod;
  } else if (cfg.score_mod.kind == ScoreMod::Kind::softcap) {
    const double cap = c.softcap;
    p.score_mod = [cap](double s, int, int, int, int) { return cap * std::tanh(s / cap); };
  } else if (cfg.score_mod.kind == ScoreMod::Kind::alibi) {
    const std::vector<int> lq = L.q, lk = L.k;
    p.score_mod = [Hq, lq, lk](double s, int b, int h, int q, int k) {
      return s - alibi_slope(h, Hq) * std::fabs(static_cast<double>(q + lk[b] - lq[b] - k));
    };
  }
  if (c.with_sinks) {
    std::normal_distribution<float> dist(0.0f, 2.0f);
    for (int h = 0; h < Hq; ++h) p.sinks.push_back(dist(rng));
  }
  // FP8: the kernel computes with descale x stored value (FlashAttention-3's descale_q/k/v, float32
  // [B][Hkv]); the reference gets the dequantised inputs, so the check measures the kernel alone.
  // An FP8 KV cache (16-bit Q) has descale_k / descale_v only (descale_q stays empty: factor 1).
  std::vector<float> descale[3];  // q, k, v
  if (tk == DType::e4m3 && c.descale) {
    std::uniform_real_distribution<float> factor(0.5f, 2.0f);
    for (int i = t == DType::e4m3 ? 0 : 1; i < 3; ++i) {
      descale[i].resize(static_cast<std::size_t>(B) * Hkv);
      for (float& x : descale[i]) x = factor(rng);
    }
    // Latent KV: one cache, so V (K's prefix) takes K's factors, applied once to the K rows.
    if (c.latent_kv) descale[2] = descale[1];
    const int group = Hq / Hkv;
    auto apply = [](std::vector<float>& x, const std::vector<float>& d, int S, int H, int heads_per_factor, int Hk,
                    int D) {
      const std::size_t B_ = d.size() / Hk;
      for (std::size_t b = 0; b < B_; ++b)
        for (int s = 0; s < S; ++s)
          for (int h = 0; h < H; ++h) {
            const float f = d[b * Hk + h / heads_per_factor];
            float* row = x.data() + ((b * S + s) * H + h) * static_cast<std::size_t>(D);
            for (int i = 0; i < D; ++i) row[i] *= f;
          }
    };
    if (!descale[0].empty()) apply(p.q, descale[0], Sq, Hq, group, Hkv, D);
    apply(p.k, descale[1], Sk, Hkv, 1, Hkv, D);
    if (!c.latent_kv) apply(p.v, descale[2], Sk, Hkv, 1, Hkv, Dv);
  }

  // Device layouts.
  const std::vector<int> cu_q = L.offsets(L.q), cu_k = L.offsets(L.k);
  const int total_q = L.varlen_q ? cu_q.back() : B * Sq;
  const std::vector<std::uint16_t> q_dev = L.varlen_q ? pack_rows(qb, L.q, Sq, q_row) : qb;
  std::vector<std::uint16_t> k_dev = kb, v_dev = vb;
  std::optional<Paged> paged;
  if (c.page_size > 0) {
    paged.emplace(rng, tk, L, c.page_size, kb, vb, k_row, v_row);
    k_dev = paged->k;
    v_dev = paged->v;
  } else if (L.varlen_k) {
    k_dev = pack_rows(kb, L.k, Sk, k_row);
    v_dev = pack_rows(vb, L.k, Sk, v_row);
  }
  if (c.o_head_pad < 0 || c.o_head_pad % 8 != 0)
    throw std::invalid_argument("CheckCase: o_head_pad must be a multiple of 8");
  const int DO = Dv + c.o_head_pad;  // O head stride (O is V's width)
  const std::size_t o_row = static_cast<std::size_t>(Hq) * DO;
  const std::size_t no = static_cast<std::size_t>(std::max(total_q, 1)) * o_row;
  const std::size_t nl = static_cast<std::size_t>(Hq) * std::max(total_q, 1);
  DeviceBuffer dq = upload_elements(q_dev, t), dk = upload_elements(k_dev, tk);
  DeviceBuffer dv = c.latent_kv ? DeviceBuffer() : upload_elements(v_dev, tk);
  DeviceBuffer doo(no * 2);  // O is 16-bit (FP8 kernels write bf16 or fp16)
  DeviceBuffer dlse(nl * 4), dsinks(std::max<std::size_t>(p.sinks.size(), 1) * 4);
  DeviceBuffer dcu_q(cu_q.size() * 4), dcu_k(cu_k.size() * 4), dused(L.k.size() * 4);
  DeviceBuffer dtable(paged ? paged->table.size() * 4 : 4);
  DeviceBuffer ddescale[3];
  for (int i = 0; i < 3; ++i)
    if (!descale[i].empty()) {
      ddescale[i] = DeviceBuffer(descale[i].size() * 4);
      ddescale[i].upload(descale[i].data(), descale[i].size() * 4);
    }
  dcu_q.upload(cu_q.data(), cu_q.size() * 4);
  dcu_k.upload(cu_k.data(), cu_k.size() * 4);
  dused.upload(L.k.data(), L.k.size() * 4);
  if (paged) dtable.upload(paged->table.data(), paged->table.size() * 4);
  doo.fill_byte(0xff);  // NaN in both 16-bit types: an unwritten element cannot pass
  dlse.fill_byte(0xff);
  if (!p.sinks.empty()) dsinks.upload(p.sinks.data(), p.sinks.size() * 4);

  LaunchArgs a;
  if (L.varlen_q) {
    // Every sequence empty: the tensors still need a row (the launch checks shapes, not lengths).
    a.q = Tensor::contiguous(dq.get(), t, 1, std::max(total_q, 1), Hq, D);
    a.o = Tensor::contiguous(doo.get(), to, 1, std::max(total_q, 1), Hq, DO);
    a.cu_seqlens_q = static_cast<const int*>(dcu_q.get());
    a.batch = B;
    a.max_seqlen_q = Sq;
  } else {
    a.q = Tensor::contiguous(dq.get(), t, B, Sq, Hq, D);
    a.o = Tensor::contiguous(doo.get(), to, B, Sq, Hq, DO);
  }
  a.o.shape[3] = Dv;  // head stride DO, only Dv columns are O's
  if (paged) {
    a.k = Tensor::contiguous(dk.get(), tk, paged->num_pages, c.page_size, Hkv, D);
    a.v = Tensor::contiguous(dv.get(), tk, paged->num_pages, c.page_size, Hkv, Dv);
    a.page_table = static_cast<const int*>(dtable.get());
    a.max_pages = paged->max_pages;
  } else if (L.varlen_k) {
    a.k = Tensor::contiguous(dk.get(), tk, 1, std::max(cu_k.back(), 1), Hkv, D);
    a.v = Tensor::contiguous(dv.get(), tk, 1, std::max(cu_k.back(), 1), Hkv, Dv);
    a.cu_seqlens_k = static_cast<const int*>(dcu_k.get());
  } else {
    a.k = Tensor::contiguous(dk.get(), tk, B, Sk, Hkv, D);
    a.v = Tensor::contiguous(dv.get(), tk, B, Sk, Hkv, Dv);
  }
  if (c.latent_kv) {  // V: K's first Dv columns (the same data pointer and strides)
    a.v = a.k;
    a.v.shape[3] = Dv;
  }
  if (L.seqused_k) a.seqused_k = static_cast<const int*>(dused.get());
  a.lse = c.with_lse ? static_cast<float*>(dlse.get()) : nullptr;
  set_launch_scalars(a, c);
  a.sinks = p.sinks.empty() ? nullptr : static_cast<const float*>(dsinks.get());
  a.aux_scalar = c.aux_scalar;
  a.aux_ptr = c.aux_ptr;
  if (!descale[0].empty()) a.descale_q = static_cast<const float*>(ddescale[0].get());
  if (!descale[1].empty()) {
    a.descale_k = static_cast<const float*>(ddescale[1].get());
    a.descale_v = static_cast<const float*>(ddescale[2].get());
  }

  // Exact run-time block mask: per (b, h, q block, k block), over the sequence's real extent.
  std::vector<std::uint8_t> blocks;
  DeviceBuffer dblocks(4);
  if (c.block_mask_q > 0) {
    const int nqb = (Sq + c.block_mask_q - 1) / c.block_mask_q, nkb = (Sk + c.block_mask_k - 1) / c.block_mask_k;
    blocks.assign(static_cast<std::size_t>(B) * Hq * nqb * nkb, 0);
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < Hq; ++h)
        for (int i = 0; i < nqb; ++i)
          for (int j = 0; j < nkb; ++j) {
            int seen = 0, vis = 0;
            for (int q = i * c.block_mask_q; q < std::min(L.q[b], (i + 1) * c.block_mask_q); ++q)
              for (int k = j * c.block_mask_k; k < std::min(L.k[b], (j + 1) * c.block_mask_k); ++k) {
                ++seen;
                vis += p.visible(b, h, q, k);
              }
            blocks[((static_cast<std::size_t>(b) * Hq + h) * nqb + i) * nkb + j] = vis == 0 ? 0 : vis == seen ? 1 : 2;
          }
    dblocks = DeviceBuffer(blocks.size());
    dblocks.upload(blocks.data(), blocks.size());
    a.block_mask.data = static_cast<const std::uint8_t*>(dblocks.get());
    a.block_mask.block_q = c.block_mask_q;
    a.block_mask.block_k = c.block_mask_k;
    a.block_mask.row_stride = nkb;
    a.block_mask.head_stride = static_cast<std::int64_t>(nqb) * nkb;
    a.block_mask.batch_stride = static_cast<std::int64_t>(Hq) * nqb * nkb;
  }
  res.splits = kernel.num_splits(a);
  kernel.launch(a, nullptr);
  check(driver().cuCtxSynchronize(), "kernel execution (cuCtxSynchronize)");

  std::vector<std::uint16_t> ob(no);
  std::vector<float> lse(nl);
  doo.download(ob.data(), no * 2);
  dlse.download(lse.data(), nl * 4);
  const Reference ref = reference_attention(p);

  double err2 = 0, ref2 = 0;
  for (std::size_t i = 0; i < no; ++i) {
    const bool pad = static_cast<int>(i % DO) >= Dv;
    if (pad)
      res.clobbered += ob[i] != 0xffff;
    else
      res.unwritten += std::isnan(host::from_bits(to, ob[i]));
  }
  if (c.with_lse)
    for (const float x : lse) res.unwritten += std::isnan(x);
  if (total_q == 0) res.unwritten = res.clobbered = 0;  // the buffers hold no row
  for (int b = 0; b < B; ++b)
    for (int i = 0; i < L.q[b]; ++i) {
      const std::size_t krow = L.varlen_q ? cu_q[b] + i : static_cast<std::size_t>(b) * Sq + i;
      for (int h = 0; h < Hq; ++h) {
        for (int d = 0; d < Dv; ++d) {
          const double o = host::from_bits(to, ob[(krow * Hq + h) * DO + d]);
          const double r = ref.o[((static_cast<std::size_t>(b) * Sq + i) * Hq + h) * Dv + d];
          if (std::isnan(o)) continue;  // counted above
          err2 += (o - r) * (o - r);
          ref2 += r * r;
          res.max_abs = std::max(res.max_abs, std::fabs(o - r));
        }
        if (!c.with_lse) continue;
        const double l = lse[L.varlen_q ? static_cast<std::size_t>(h) * total_q + cu_q[b] + i
                                        : (static_cast<std::size_t>(b) * Hq + h) * Sq + i];
        const double rl = ref.lse[(static_cast<std::size_t>(b) * Hq + h) * Sq + i];
        if (std::isnan(l)) continue;
        if (std::isinf(rl) || std::isinf(l))
          res.lse_inf_mismatch += !(std::isinf(rl) && std::isinf(l) && (rl < 0) == (l < 0));
        else
          res.lse_max_abs = std::max(res.lse_max_abs, std::fabs(l - rl));
      }
    }
  res.rel_l2 = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  return res;
}

namespace {

// A start/stop event pair on the legacy stream (RAII) around some launches.
class EventTimer {
 public:
  EventTimer() {
    check(driver().cuEventCreate(&start_, CU_EVENT_DEFAULT), "cuEventCreate");
    check(driver().cuEventCreate(&stop_, CU_EVENT_DEFAULT), "cuEventCreate");
  }
  ~EventTimer() {
    driver().cuEventDestroy(start_);
    driver().cuEventDestroy(stop_);
  }
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;
  void start() { check(driver().cuEventRecord(start_, nullptr), "cuEventRecord"); }
  float stop_ms() {  // waits for the stop event
    check(driver().cuEventRecord(stop_, nullptr), "cuEventRecord");
    check(driver().cuEventSynchronize(stop_), "cuEventSynchronize");
    float ms = 0.f;
    check(driver().cuEventElapsedTime(&ms, start_, stop_), "cuEventElapsedTime");
    return ms;
  }

 private:
  CUevent start_ = nullptr, stop_ = nullptr;
};

}  // namespace

double time_kernel_ms(const Kernel& kernel, const LaunchArgs& args, int warmup, int iters) {
  for (int i = 0; i < warmup; ++i) kernel.launch(args, nullptr);
  EventTimer timer;
  std::vector<float> ms(iters);
  for (int i = 0; i < iters; ++i) {
    timer.start();
    kernel.launch(args, nullptr);
    ms[i] = timer.stop_ms();
  }
  std::sort(ms.begin(), ms.end());
  return ms[iters / 2];
}

double time_kernel_stream_ms(const Kernel& kernel, const LaunchArgs& args, int warmup, int iters) {
  for (int i = 0; i < warmup; ++i) kernel.launch(args, nullptr);
  EventTimer timer;
  timer.start();
  for (int i = 0; i < iters; ++i) kernel.launch(args, nullptr);
  return timer.stop_ms() / iters;
}

double host_launch_us(const Kernel& kernel, const LaunchArgs& args, int iters) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  for (int i = 0; i < iters; ++i) kernel.launch(args, nullptr);
  const double us = std::chrono::duration<double, std::micro>(clock::now() - t0).count() / iters;
  check(driver().cuCtxSynchronize(), "host_launch_us");
  return us;
}

}  // namespace jit::testing
