// FP8 (e4m3) on the host, without a GPU: the e4m3 codec of the reference checks, the TMA map
// parameters per element size, and the launch checks (strides in bytes, dtypes, descale factors)
// that run before anything reaches the driver; for FP8 KV caches ("kv_dtype": "e4m3") also the
// config rules and the sm_90a kernels' compile (no spills, the conversion in the PTX).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "check/gpu.hpp"
#include "check/host_numeric.hpp"
#include "fa4jit/jit.hpp"
#include "runtime/launch_args.hpp"
#include "runtime/nvrtc.hpp"
#include "runtime/runtime_internal.hpp"
#include "runtime/tma.hpp"

namespace {

using jit::DType;
using jit::host::e4m3_to_float;
using jit::host::float_to_e4m3;

// ---- the e4m3 codec ----------------------------------------------------------------------------

// The nearest e4m3 code by brute force over every finite code (ties: the even code, i.e. the one
// whose mantissa LSB is 0), with satfinite saturation: an independent definition to test against.
std::uint8_t nearest_e4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  const std::uint8_t sign = std::signbit(f) ? 0x80 : 0;
  const double a = std::fabs(static_cast<double>(f));
  int best = 0;
  double best_err = std::numeric_limits<double>::infinity();
  for (int c = 0; c <= 0x7e; ++c) {
    const double err = std::fabs(static_cast<double>(e4m3_to_float(static_cast<std::uint8_t>(c))) - a);
    if (err < best_err || (err == best_err && (c & 1) == 0)) {
      best = c;
      best_err = err;
    }
  }
  return sign | static_cast<std::uint8_t>(best);
}

TEST(E4m3Codec, KnownValues) {
  EXPECT_EQ(e4m3_to_float(0x00), 0.0f);
  EXPECT_TRUE(std::signbit(e4m3_to_float(0x80)));
  EXPECT_EQ(e4m3_to_float(0x80), 0.0f);
  EXPECT_EQ(e4m3_to_float(0x38), 1.0f);
  EXPECT_EQ(e4m3_to_float(0xb8), -1.0f);
  EXPECT_EQ(e4m3_to_float(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_float(0xfe), -448.0f);
  EXPECT_EQ(e4m3_to_float(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(e4m3_to_float(0x07), 7 * std::ldexp(1.0f, -9));
  EXPECT_EQ(e4m3_to_float(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(e4m3_to_float(0x39), 1.125f);
  EXPECT_EQ(e4m3_to_float(0x40), 2.0f);
  EXPECT_EQ(e4m3_to_float(0x77), 240.0f);
  EXPECT_TRUE(std::isnan(e4m3_to_float(0x7f)));
  EXPECT_TRUE(std::isnan(e4m3_to_float(0xff)));

  EXPECT_EQ(float_to_e4m3(1.0f), 0x38);
  EXPECT_EQ(float_to_e4m3(-1.0f), 0xb8);
  EXPECT_EQ(float_to_e4m3(448.0f), 0x7e);
  EXPECT_EQ(float_to_e4m3(-2.0f), 0xc0);
  EXPECT_EQ(float_to_e4m3(0.0f), 0x00);
  EXPECT_EQ(float_to_e4m3(-0.0f), 0x80);
  EXPECT_EQ(float_to_e4m3(std::ldexp(1.0f, -9)), 0x01);
  EXPECT_EQ(float_to_e4m3(std::ldexp(1.0f, -6)), 0x08);
}

// Every code: decode is exact and encodes back to itself (NaN codes to the canonical 0x7f); the
// positive finite codes are strictly increasing and the negative ones mirror them.
TEST(E4m3Codec, EveryCodeRoundTrips) {
  int finite = 0;
  for (int c = 0; c < 256; ++c) {
    const auto code = static_cast<std::uint8_t>(c);
    const float f = e4m3_to_float(code);
    if ((c & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(f)) << c;
      EXPECT_EQ(float_to_e4m3(f), 0x7f) << c;
      continue;
    }
    ++finite;
    EXPECT_EQ(float_to_e4m3(f), code) << "code " << c << " = " << f;
    EXPECT_EQ(e4m3_to_float(code ^ 0x80), -f) << c;
    EXPECT_EQ(std::signbit(f), (c & 0x80) != 0) << c;
    if ((c & 0x7f) > 0) {
      EXPECT_GT(std::fabs(f), std::fabs(e4m3_to_float(code - 1))) << c;
    }
    // Through the DType-generic helpers the GPU checks use.
    EXPECT_EQ(jit::host::to_bits(DType::e4m3, f), c);
    EXPECT_EQ(jit::host::from_bits(DType::e4m3, code), f);
  }
  EXPECT_EQ(finite, 254);
}

// Between each pair of neighbouring codes: below the midpoint rounds down, above rounds up, the
// midpoint itself to the even code. Covers subnormals, every binade edge and the top (448).
TEST(E4m3Codec, RoundsToNearestEven) {
  for (int c = 0; c < 0x7e; ++c) {
    const double lo = e4m3_to_float(static_cast<std::uint8_t>(c));
    const double hi = e4m3_to_float(static_cast<std::uint8_t>(c + 1));
    const double mid = (lo + hi) / 2;  // exact in float: one bit below e4m3's mantissa
    const float fmid = static_cast<float>(mid);
    ASSERT_EQ(static_cast<double>(fmid), mid);
    const int even = (c & 1) == 0 ? c : c + 1;
    EXPECT_EQ(float_to_e4m3(fmid), even) << "midpoint of " << c << ", " << c + 1;
    EXPECT_EQ(float_to_e4m3(-fmid), 0x80 | even) << "negative midpoint of " << c << ", " << c + 1;
    EXPECT_EQ(float_to_e4m3(std::nextafter(fmid, 0.0f)), c) << "just below the midpoint of " << c;
    EXPECT_EQ(float_to_e4m3(std::nextafter(fmid, 1e9f)), c + 1) << "just above the midpoint of " << c;
  }
  // Worked ties: 1 + 1/16 lies between 1.0 (0x38) and 1.125 (0x39): even is 0x38; 1 + 3/16 between
  // 0x39 and 0x3a (1.25): even is 0x3a. In the subnormals 1.5 * 2^-9 goes to 2 * 2^-9 (0x02) and
  // 2^-10, half the smallest subnormal, to zero.
  EXPECT_EQ(float_to_e4m3(1.0625f), 0x38);
  EXPECT_EQ(float_to_e4m3(1.1875f), 0x3a);
  EXPECT_EQ(float_to_e4m3(1.5f * std::ldexp(1.0f, -9)), 0x02);
  EXPECT_EQ(float_to_e4m3(std::ldexp(1.0f, -10)), 0x00);
  EXPECT_EQ(float_to_e4m3(std::nextafter(std::ldexp(1.0f, -10), 1.0f)), 0x01);
  EXPECT_EQ(float_to_e4m3(-std::ldexp(1.0f, -11)), 0x80);
}

// satfinite: anything at or beyond 448 in magnitude (infinities included) saturates; NaN is 0x7f.
TEST(E4m3Codec, SaturatesAndMapsNanToTheCanonicalCode) {
  for (float f : {448.0f, 449.0f, 463.9f, 464.0f, 480.0f, 1e6f, 3e38f, std::numeric_limits<float>::infinity()}) {
    EXPECT_EQ(float_to_e4m3(f), 0x7e) << f;
    EXPECT_EQ(float_to_e4m3(-f), 0xfe) << -f;
  }
  EXPECT_EQ(float_to_e4m3(416.0f), 0x7d);
  EXPECT_EQ(float_to_e4m3(431.9f), 0x7d);
  EXPECT_EQ(float_to_e4m3(432.0f), 0x7e);  // the tie between 416 (0x7d) and 448 (0x7e): even 0x7e
  EXPECT_EQ(float_to_e4m3(std::numeric_limits<float>::quiet_NaN()), 0x7f);
  EXPECT_EQ(float_to_e4m3(-std::numeric_limits<float>::quiet_NaN()), 0x7f);
}

// Random floats over the whole range, against the brute-force nearest code.
TEST(E4m3Codec, MatchesBruteForceNearestOnRandomValues) {
  std::mt19937 rng(12345);
  std::uniform_real_distribution<float> log2mag(-12.0f, 9.5f);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int i = 0; i < 20000; ++i) {
    const float f = i % 2 ? normal(rng) : std::copysign(std::exp2(log2mag(rng)), normal(rng));
    ASSERT_EQ(float_to_e4m3(f), nearest_e4m3(f)) << f;
  }
}

// ---- the GPU check's tolerance -----------------------------------------------------------------

TEST(Fp8Host, ToleranceIsNamedAndLooserThan16Bit) {
  EXPECT_EQ(jit::testing::rel_l2_tolerance(DType::e4m3), jit::testing::kFp8RelL2Tolerance);
  EXPECT_GT(jit::testing::kFp8RelL2Tolerance, jit::testing::rel_l2_tolerance(DType::bf16));
  EXPECT_EQ(jit::testing::rel_l2_tolerance(DType::bf16), 1e-2);  // unchanged
  EXPECT_EQ(jit::testing::rel_l2_tolerance(DType::fp16), 5e-3);
  jit::testing::CheckResult r;
  r.dtype = DType::e4m3;
  r.rel_l2 = 0.03;
  EXPECT_TRUE(r.passes());
  r.dtype = DType::bf16;
  EXPECT_FALSE(r.passes());
}

// ---- TMA map parameters ------------------------------------------------------------------------

jit::Tensor tensor(DType t, std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t d) {
  return jit::Tensor::contiguous(reinterpret_cast<void*>(std::uintptr_t{1} << 20), t, b, s, h, d);
}

TEST(Fp8Host, TmaMapsFollowTheElementSize) {
  using jit::detail::tma_map_spec;
  // (B 2, S 300, H 4, D 128), box rows 64.
  for (DType t : {DType::bf16, DType::fp16, DType::e4m3}) {
    const auto s = tma_map_spec(tensor(t, 2, 300, 4, 128), t, 64);
    const cuuint64_t e = jit::dtype_size(t);
    EXPECT_EQ(s.type, t == DType::bf16   ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                      : t == DType::fp16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                         : CU_TENSOR_MAP_DATA_TYPE_UINT8)
        << jit::to_string(t);
    EXPECT_EQ(s.rank, 4);
    EXPECT_EQ(s.dims[0], 128u);
    EXPECT_EQ(s.dims[1], 300u);
    EXPECT_EQ(s.dims[2], 4u);
    EXPECT_EQ(s.dims[3], 2u);
    EXPECT_EQ(s.byte_strides[0], 4 * 128 * e);        // row
    EXPECT_EQ(s.byte_strides[1], 128 * e);            // head
    EXPECT_EQ(s.byte_strides[2], 300 * 4 * 128 * e);  // batch
    EXPECT_EQ(s.box[0] * e, 128u) << "the innermost box is one 128-byte swizzle span";
    EXPECT_EQ(s.box[1], 64u);
    EXPECT_EQ(s.box[2], 1u);
    EXPECT_EQ(s.box[3], 1u);
  }
  EXPECT_EQ(tma_map_spec(tensor(DType::bf16, 1, 8, 1, 64), DType::bf16, 8).box[0], 64u);
  EXPECT_EQ(tma_map_spec(tensor(DType::e4m3, 1, 8, 1, 64), DType::e4m3, 8).box[0], 128u);
  EXPECT_EQ(tma_map_spec(tensor(DType::e4m3, 1, 8, 1, 64), DType::e4m3, 8).swizzle, CU_TENSOR_MAP_SWIZZLE_128B);
  // 64-byte rows (sm90a e4m3 at padded depth 64): a 64-element box under the 64-byte swizzle.
  const auto sw64 = tma_map_spec(tensor(DType::e4m3, 1, 8, 1, 64), DType::e4m3, 8, 64);
  EXPECT_EQ(sw64.box[0], 64u);
  EXPECT_EQ(sw64.swizzle, CU_TENSOR_MAP_SWIZZLE_64B);
  EXPECT_EQ(jit::detail::tma_packed_map_spec(tensor(DType::e4m3, 1, 8, 4, 64), DType::e4m3, 4, 64, 64).swizzle,
            CU_TENSOR_MAP_SWIZZLE_64B);

  // A size-1 dimension gets the span of the one below (here heads = 1 after 300 rows, batch = 1), in bytes.
  jit::Tensor one_head = tensor(DType::e4m3, 1, 300, 1, 128);
  one_head.stride[2] = 0;  // never stepped over: any value
  one_head.stride[0] = 7;
  const auto one = tma_map_spec(one_head, DType::e4m3, 64);
  EXPECT_EQ(one.byte_strides[0], 128u);
  EXPECT_EQ(one.byte_strides[1], 128u * 300);
  EXPECT_EQ(one.byte_strides[2], 128u * 300);
  one_head.dtype = DType::bf16;
  const auto one16 = tma_map_spec(one_head, DType::bf16, 64);
  EXPECT_EQ(one16.byte_strides[0], 256u);
  EXPECT_EQ(one16.byte_strides[1], 256u * 300);
  EXPECT_EQ(one16.byte_strides[2], 256u * 300);

  // Strided views (K/V in (B, H, S, D) memory): the element strides times the element size.
  jit::Tensor bhsd = tensor(DType::e4m3, 2, 300, 4, 128);
  bhsd.stride = {4 * 304 * 128, 128, 304 * 128, 1};
  const auto sv = tma_map_spec(bhsd, DType::e4m3, 128);
  EXPECT_EQ(sv.byte_strides[0], 128u);
  EXPECT_EQ(sv.byte_strides[1], 304u * 128);
  EXPECT_EQ(sv.byte_strides[2], 4u * 304 * 128);
}

TEST(Fp8Host, PackedGqaTmaMapsFollowTheElementSize) {
  using jit::detail::tma_packed_map_spec;
  for (DType t : {DType::bf16, DType::e4m3}) {
    const cuuint64_t e = jit::dtype_size(t);
    // Q (B 3, Sq 16, Hq 8, D 128), group 4: 5-D (D, group, rows, kv heads, batch).
    const auto s = tma_packed_map_spec(tensor(t, 3, 16, 8, 128), t, 4, 64);
    EXPECT_EQ(s.rank, 5);
    EXPECT_EQ(s.type, t == DType::e4m3 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16);
    const cuuint64_t dims[5] = {128, 4, 16, 2, 3};
    for (int i = 0; i < 5; ++i) EXPECT_EQ(s.dims[i], dims[i]) << i;
    EXPECT_EQ(s.byte_strides[0], 128 * e);           // next head of the group
    EXPECT_EQ(s.byte_strides[1], 8 * 128 * e);       // next query row
    EXPECT_EQ(s.byte_strides[2], 4 * 128 * e);       // next kv head = group heads
    EXPECT_EQ(s.byte_strides[3], 16 * 8 * 128 * e);  // batch
    EXPECT_EQ(s.box[0] * e, 128u);
    EXPECT_EQ(s.box[1], 4u);
    EXPECT_EQ(s.box[2], 16u);
    EXPECT_EQ(s.box[3], 1u);
    EXPECT_EQ(s.box[4], 1u);
  }
}

// ---- launch checks (pack_params runs before any driver call) ------------------------------------

jit::ResolvedConfig fp8_kernel(jit::DType out = jit::DType::bf16, int depth = 128) {
  jit::FA4Config c;
  c.arch = "sm_90a";
  c.dtype = DType::e4m3;
  c.output_dtype = out;
  c.depth = depth;
  return jit::resolve(c);
}

jit::ResolvedConfig bf16_kernel() {
  jit::FA4Config c;
  c.arch = "sm_90a";
  c.depth = 128;
  return jit::resolve(c);
}

// Well-formed arguments for a kernel: (B 2, S 256, Hq 8, Hkv 2, D 128) at fake (never read) addresses.
jit::LaunchArgs args_for(const jit::ResolvedConfig& rc) {
  const DType in = rc.config.dtype, kv = jit::kv_type(rc.config), out = *rc.config.output_dtype;
  char* base = reinterpret_cast<char*>(std::uintptr_t{1} << 30);
  jit::LaunchArgs a;
  a.q = jit::Tensor::contiguous(base, in, 2, 256, 8, rc.config.depth);
  a.k = jit::Tensor::contiguous(base + (1 << 24), kv, 2, 256, 2, rc.config.depth);
  a.v = jit::Tensor::contiguous(base + (2 << 24), kv, 2, 256, 2, rc.config.depth);
  a.o = jit::Tensor::contiguous(base + (3 << 24), out, 2, 256, 8, rc.config.depth);
  return a;
}

std::string launch_error(const jit::ResolvedConfig& rc, const jit::LaunchArgs& a) {
  jit::detail::LaunchShape shape;
  try {
    jit::detail::pack_params(rc, a, &shape);
  } catch (const jit::LaunchError& e) {
    return e.what();
  }
  return "";
}

TEST(Fp8Host, Fp8KernelsResolveWithA16BitOutput) {
  const auto rc = fp8_kernel(DType::fp16);
  EXPECT_EQ(rc.config.dtype, DType::e4m3);
  EXPECT_EQ(*rc.config.output_dtype, DType::fp16);
  jit::FA4Config c;
  c.arch = "sm_90a";
  c.dtype = DType::e4m3;
  EXPECT_EQ(*jit::resolve(c).config.output_dtype, DType::bf16);  // the default
}

TEST(Fp8Host, LaunchStridesAreCheckedInBytes) {
  const auto fp8 = fp8_kernel(), bf16 = bf16_kernel();
  EXPECT_EQ(launch_error(fp8, args_for(fp8)), "");
  EXPECT_EQ(launch_error(bf16, args_for(bf16)), "");

  // 40 elements: 40 bytes of e4m3 (not a 16-byte multiple), 80 bytes of bf16 (fine).
  jit::LaunchArgs a = args_for(fp8);
  a.q.stride[1] = 40;
  EXPECT_EQ(launch_error(fp8, a), "launch: q.stride[1] = 40 must be a non-negative multiple of 16 elements (16 bytes)");
  a = args_for(bf16);
  a.q.stride[1] = 40;  // the launch checks each stride's alignment, not whether rows overlap
  EXPECT_EQ(launch_error(bf16, a), "");
  a.q.stride[1] = 36;
  EXPECT_EQ(launch_error(bf16, a), "launch: q.stride[1] = 36 must be a non-negative multiple of 8 elements (16 bytes)");

  // Every strided field of every tensor follows the same rule, in the e4m3 elements of q/k/v and
  // the 16-bit elements of o.
  for (const char* name : {"q", "k", "v", "o"})
    for (int i = 0; i < 3; ++i) {
      a = args_for(fp8);
      jit::Tensor& t = name[0] == 'q' ? a.q : name[0] == 'k' ? a.k : name[0] == 'v' ? a.v : a.o;
      t.stride[i] += 8;  // a multiple of 8 elements: 16 bytes of o, 8 bytes of q/k/v
      const std::string err = launch_error(fp8, a);
      if (name[0] == 'o') {
        EXPECT_EQ(err, "") << "o.stride[" << i << "]";
      } else {
        EXPECT_EQ(err, "launch: " + std::string(name) + ".stride[" + std::to_string(i) + "] = " +
                           std::to_string(t.stride[i]) + " must be a non-negative multiple of 16 elements (16 bytes)");
      }
    }
}

TEST(Fp8Host, LaunchDtypesMustMatchTheKernel) {
  const auto fp8 = fp8_kernel(DType::fp16);
  jit::LaunchArgs a = args_for(fp8);
  EXPECT_EQ(launch_error(fp8, a), "");
  a.k.dtype = DType::bf16;
  EXPECT_EQ(launch_error(fp8, a), "launch: k.dtype is bf16, the kernel was built for e4m3");
  a = args_for(fp8);
  a.o.dtype = DType::bf16;  // the kernel writes fp16
  EXPECT_EQ(launch_error(fp8, a), "launch: o.dtype is bf16, the kernel was built for fp16");
  a.o.dtype = DType::e4m3;
  EXPECT_EQ(launch_error(fp8, a), "launch: o.dtype is e4m3, the kernel was built for fp16");
  const auto bf16 = bf16_kernel();
  a = args_for(bf16);
  a.q.dtype = DType::e4m3;
  EXPECT_EQ(launch_error(bf16, a), "launch: q.dtype is e4m3, the kernel was built for bf16");
}

TEST(Fp8Host, DescaleFactorsReachTheKernelOnlyOnFp8) {
  float factors[3][4] = {};
  const auto fp8 = fp8_kernel();
  jit::LaunchArgs a = args_for(fp8);
  jit::detail::LaunchShape shape;
  fa4::FwdParams p = jit::detail::pack_params(fp8, a, &shape);
  EXPECT_EQ(p.descale_q, nullptr);  // none given: factor 1
  EXPECT_EQ(p.descale_k, nullptr);
  EXPECT_EQ(p.descale_v, nullptr);
  a.descale_q = factors[0];
  a.descale_k = factors[1];
  a.descale_v = factors[2];
  p = jit::detail::pack_params(fp8, a, &shape);
  EXPECT_EQ(p.descale_q, factors[0]);
  EXPECT_EQ(p.descale_k, factors[1]);
  EXPECT_EQ(p.descale_v, factors[2]);
  a.descale_k = nullptr;  // each one optional on its own
  p = jit::detail::pack_params(fp8, a, &shape);
  EXPECT_EQ(p.descale_q, factors[0]);
  EXPECT_EQ(p.descale_k, nullptr);
  EXPECT_EQ(p.descale_v, factors[2]);
  a.descale_v = reinterpret_cast<const float*>(reinterpret_cast<const char*>(factors[2]) + 2);
  EXPECT_EQ(launch_error(fp8, a), "launch: descale_v is not 4-byte aligned (float32 [batch][kv_heads])");

  const auto bf16 = bf16_kernel();
  const char* names[3] = {"descale_q", "descale_k", "descale_v"};
  for (int i = 0; i < 3; ++i) {
    jit::LaunchArgs b = args_for(bf16);
    const float** field[3] = {&b.descale_q, &b.descale_k, &b.descale_v};
    *field[i] = factors[i];
    EXPECT_EQ(launch_error(bf16, b), std::string("launch: ") + names[i] +
                                         " is set but the kernel's dtype is bf16: descale factors are for e4m3 "
                                         "(FP8) tensors only");
  }
  jit::LaunchArgs b = args_for(bf16);
  p = jit::detail::pack_params(bf16, b, &shape);
  EXPECT_EQ(p.descale_q, nullptr);
  EXPECT_EQ(p.descale_k, nullptr);
  EXPECT_EQ(p.descale_v, nullptr);
}

// ---- FP8 on sm_100a (tcgen05 kind::f8f6f4; compiled, never run: docs/BLACKWELL.md) ---------------

// The ConfigError resolving c (with FA4JIT_TUNE-style `tune`) throws; "" when it resolves.
std::string resolve_error(const jit::FA4Config& c, const std::string& tune = "") {
  jit::ResolveOptions o;
  try {
    if (!tune.empty()) o.tune = jit::parse_tune(tune, "FA4JIT_TUNE");  // values out of range fail here
    jit::resolve(c, o);
  } catch (const jit::ConfigError& e) {
    return e.what();
  }
  return "";
}

jit::FA4Config sm90a_e4m3(int depth) {
  jit::FA4Config c;
  c.arch = "sm_90a";
  c.dtype = DType::e4m3;
  c.depth = depth;
  return c;
}

// sm90a keeps the e4m3 rows of depth 64 at 64 bytes (SW64) instead of padding them to 128: padded
// depth 64, Q / K / V maps of 64-byte rows, O (bf16, 128-byte rows) unchanged; depth 96 and 128 take
// one 128-byte row; an FP8 KV cache under a 16-bit Q keeps its 128-byte e4m3 rows at depth 64.
TEST(Fp8Host, Sm90aE4m3RowsAtDepth64Are64Bytes) {
  using jit::detail::tma_row_bytes;
  struct Want {
    int depth, padded, in_row, bm, bn;
  };
  for (const Want w : {Want{64, 64, 64, 192, 160}, Want{96, 128, 128, 192, 128}, Want{128, 128, 128, 192, 128}}) {
    const auto rc = fp8_kernel(DType::bf16, w.depth);
    EXPECT_EQ(rc.padded_depth, w.padded) << w.depth;
    EXPECT_EQ(tma_row_bytes(rc, DType::e4m3), w.in_row) << w.depth;
    EXPECT_EQ(tma_row_bytes(rc, DType::bf16), 128) << w.depth;
    // Three consumer warpgroups (unmasked); at padded depth 128 their 160 registers hold one tile's
    // S and P at a time, so no intra-warpgroup overlap there, and the warpgroups take turns around
    // their softmax (pingpong 2); at depth 64 FA3's 160 keys per tile, with the overlap and without
    // turns.
    EXPECT_EQ(rc.config.BM, w.bm) << w.depth;
    EXPECT_EQ(rc.config.BN, w.bn) << w.depth;
    EXPECT_EQ(rc.tuning.intra_wg_overlap, w.padded == 128 ? 0 : 1) << w.depth;
    EXPECT_EQ(rc.tuning.pingpong, w.padded == 128 ? 2 : 0) << w.depth;
    EXPECT_EQ(rc.num_threads, 128 * (1 + w.bm / 64)) << w.depth;
    // Persistent CTAs (the transposers walk the same tiles), with O staged in a region of its own:
    // Q regions sized for 16-bit O staging, the K and V rings of 1-byte elements, the transposed V
    // ring in whole blocks of 128 keys (BN 160: two), then the 16-bit O region.
    EXPECT_EQ(rc.tuning.persistent, 1) << w.depth;
    const int vt_keys = w.bn > 128 ? 256 : 128;
    EXPECT_EQ(rc.smem_bytes,
              2 * w.bm * w.padded + 2 * 2 * w.bn * w.padded + 2 * vt_keys * w.padded + 2 * w.bm * w.padded + 1024)
        << w.depth;
  }
  // Causal at depth 64 keeps 128 keys per tile (160 measured -3.1..+1.3% there) and the turns; BN
  // 160 is refused where the consumers lack the registers (BM 128: a score-mod or mask).
  jit::FA4Config causal64 = sm90a_e4m3(64);
  causal64.mask = jit::Mask::causal();
  EXPECT_EQ(jit::resolve(causal64).config.BN, 128);
  EXPECT_EQ(jit::resolve(causal64).tuning.pingpong, 1);
  causal64.BN = 160;
  EXPECT_EQ(jit::resolve(causal64).config.BN, 160);
  jit::FA4Config soft64 = sm90a_e4m3(64);
  soft64.score_mod = jit::ScoreMod::softcap();
  soft64.BN = 160;
  EXPECT_EQ(resolve_error(soft64).rfind("BN", 0), 0u) << resolve_error(soft64);
  // The grid walk on request: no O region of its own.
  jit::ResolveOptions grid;
  grid.tune = jit::parse_tune("persistent=0", "FA4JIT_TUNE");
  const auto rg = jit::resolve(sm90a_e4m3(128), grid);
  EXPECT_EQ(rg.tuning.persistent, 0);
  EXPECT_EQ(rg.smem_bytes, 2 * 192 * 128 + 3 * 2 * 128 * 128 + 1024);
  // Stream-K cuts tiles into segments, which the transposers do not walk; packed GQA would turn a
  // persistent walk into it. Both are refused, naming the tune field.
  jit::FA4Config packed = sm90a_e4m3(128);
  packed.group = 4;
  packed.pack_gqa = true;
  EXPECT_NE(resolve_error(sm90a_e4m3(128), "persistent=2").find("tune: persistent=2"), std::string::npos);
  EXPECT_NE(resolve_error(packed, "persistent=1").find("tune: persistent=1"), std::string::npos);
  // A score-mod keeps two warpgroups (three spill with it), with the overlap.
  jit::FA4Config soft = sm90a_e4m3(64);
  soft.mask = jit::Mask::causal();
  soft.score_mod = jit::ScoreMod::softcap();
  for (int depth : {64, 128}) {
    soft.depth = depth;
    const auto rs = jit::resolve(soft);
    EXPECT_EQ(rs.config.BM, 128) << depth;
    EXPECT_EQ(rs.tuning.intra_wg_overlap, 1) << depth;
  }
  // Asking for the overlap at BM 192 and padded depth 128 is refused, naming the tune field.
  jit::FA4Config three = sm90a_e4m3(128);
  EXPECT_NE(resolve_error(three, "intra_wg_overlap=1").find("tune: intra_wg_overlap=1"), std::string::npos);
  three.BM = 128;  // two warpgroups take it
  jit::ResolveOptions overlap;
  overlap.tune = jit::parse_tune("intra_wg_overlap=1", "FA4JIT_TUNE");
  EXPECT_EQ(jit::resolve(three, overlap).tuning.intra_wg_overlap, 1);
  EXPECT_EQ(jit::resolve(three, overlap).tuning.pingpong, 1);
  // Turns around the softmax (pingpong 2) need the simple schedule; 0, 1 and 2 are the values.
  EXPECT_NE(resolve_error(three, "pingpong=2").find("tune: pingpong=2"), std::string::npos)
      << resolve_error(three, "pingpong=2");
  EXPECT_EQ(resolve_error(three, "pingpong=2,intra_wg_overlap=0"), "");
  EXPECT_NE(resolve_error(sm90a_e4m3(128), "pingpong=3").find("'pingpong=3' is out of range"), std::string::npos)
      << resolve_error(sm90a_e4m3(128), "pingpong=3");
  EXPECT_EQ(resolve_error(sm90a_e4m3(128), "pingpong=0"), "");
  jit::FA4Config kv;
  kv.arch = "sm_90a";
  kv.kv_dtype = DType::e4m3;
  kv.depth = 64;
  const auto rk = jit::resolve(kv);
  EXPECT_EQ(rk.padded_depth, 128);
  EXPECT_EQ(tma_row_bytes(rk, DType::e4m3), 128);
  EXPECT_EQ(tma_row_bytes(rk, DType::bf16), 128);
}

// One kernel of the NVRTC compile tests: depth, mask, score-mod, packed GQA (group 4).
struct CompileCase {
  int depth;
  jit::Mask mask;
  jit::ScoreMod mod;
  bool packed;
};

// Applies k to c, resolves and compiles it (NVRTC, no GPU) and expects no spill and no stack frame.
jit::detail::CompileOutput compile_case(jit::FA4Config c, const CompileCase& k, jit::ResolvedConfig* rc,
                                        std::string* what) {
  c.depth = k.depth;
  c.mask = k.mask;
  c.score_mod = k.mod;
  c.group = k.packed ? 4 : 0;
  c.pack_gqa = k.packed;
  *rc = jit::resolve(c);
  *what = fmt::format("{}{} d{} BM {} BN {} {}{}", jit::to_string(c.dtype), c.kv_dtype ? " kv e4m3" : "", k.depth,
                      rc->config.BM, rc->config.BN, jit::to_json(c)["mask"].dump(), k.packed ? " packed" : "");
  const auto in = jit::detail::compile_inputs(c);
  auto out = jit::detail::nvrtc_compile(in.source, "fa4jit.cu", *in.headers, in.compile_options());
  const auto use = jit::detail::parse_ptxas_log(out.log);
  EXPECT_EQ(use.spill_stores, 0) << *what << "\n" << out.log;
  EXPECT_EQ(use.stack_frame, 0) << *what << "\n" << out.log;
  return out;
}

// NVRTC, no GPU: sm90a FP8 prefill kernels compile without spills, a stack frame or serialized
// wgmma, with both GEMMs in k32 e4m3 wgmma (P V at N = the padded depth: 64 for the SW64 rows).
TEST(Fp8Host, Sm90aKernelsCompileWithoutSpills) {
  const CompileCase cases[] = {
      {64, jit::Mask::none(), jit::ScoreMod::identity(), false},  // BN 160: the Vt stage's second block
      {64, jit::Mask::causal(), jit::ScoreMod::identity(), false},
      {64, jit::Mask::sliding_window(), jit::ScoreMod::softcap(), false},
      {64, jit::Mask::causal(), jit::ScoreMod::custom("return score - 0.05f * h;"), true},
      {128, jit::Mask::causal(), jit::ScoreMod::identity(), false},  // BM 192, no overlap
      {128, jit::Mask::none(), jit::ScoreMod::softcap(), false},     // BM 128, overlapped
  };
  for (const CompileCase& k : cases) {
    jit::FA4Config c;
    c.arch = "sm_90a";
    c.dtype = DType::e4m3;
    jit::ResolvedConfig rc;
    std::string what;
    const auto out = compile_case(c, k, &rc, &what);
    EXPECT_EQ(out.log.find("are serialized"), std::string::npos) << what << "\n" << out.log;
    for (const std::string& needle :
         {fmt::format("wgmma.mma_async.sync.aligned.m64n{}k32.f32.e4m3.e4m3", rc.config.BN),
          fmt::format("wgmma.mma_async.sync.aligned.m64n{}k32.f32.e4m3.e4m3", rc.padded_depth),
          std::string(k.packed ? "cp.async.bulk.tensor.5d" : "cp.async.bulk.tensor.4d"), std::string("prmt.b32")})
      EXPECT_NE(out.ptx.find(needle), std::string::npos) << what << ": PTX lacks " << needle;
    // Turns (ping-pong or around the softmax) pass by bar.arrive; a kernel without them (or with
    // one consumer warpgroup, BM 64) has none.
    EXPECT_EQ(out.ptx.find("bar.arrive") != std::string::npos, rc.tuning.pingpong != 0 && rc.config.BM > 64) << what;
  }
}

// Resolved: padded depth 128 at depths 64 and 128 (one 128-byte e4m3 row), K in one chunk, the K
// and V rings of 1-byte elements fill what the Q regions (sized for 16-bit O) leave: 5 stages of BN
// 128, exactly 2*BM*Dp + 2*S*BN*Dp + BM*4 + 1024 bytes; O bf16 unless output_dtype says fp16.
TEST(Fp8Host, Sm100aResolvesTheFp8Kernel) {
  for (int depth : {64, 128})
    for (DType out : {DType::bf16, DType::fp16}) {
      jit::FA4Config c;
      c.arch = "sm_100a";
      c.dtype = DType::e4m3;
      c.depth = depth;
      if (out == DType::fp16) c.output_dtype = out;
      const auto rc = jit::resolve(c);
      const std::string what = fmt::format("d{} out {}", depth, jit::to_string(out));
      EXPECT_EQ(rc.backend, jit::Backend::blackwell) << what;
      EXPECT_EQ(rc.config.dtype, DType::e4m3) << what;
      EXPECT_EQ(*rc.config.output_dtype, out) << what;
      EXPECT_EQ(rc.padded_depth, 128) << what;
      EXPECT_EQ(rc.config.BM, 256) << what;
      EXPECT_EQ(rc.config.BN, 128) << what;
      EXPECT_EQ(rc.config.num_qk_stages, 1) << what;
      EXPECT_EQ(rc.config.BK0, 128) << what;
      EXPECT_EQ(rc.config.num_kv_stages, 5) << what;
      EXPECT_EQ(rc.smem_bytes, 2 * 256 * 128 + 2 * 5 * 128 * 128 + 256 * 4 + 1024) << what;
      EXPECT_EQ(rc.smem_bytes, 231424) << what;
      EXPECT_EQ(rc.num_threads, 512) << what;
      EXPECT_EQ(rc.walk, jit::TileWalk::grid) << what;
      // The launch takes e4m3 Q/K/V and the three descales like sm_90a's FP8 kernel.
      float factors[3][4] = {};
      jit::LaunchArgs a = args_for(rc);
      a.descale_q = factors[0];
      a.descale_k = factors[1];
      a.descale_v = factors[2];
      EXPECT_EQ(launch_error(rc, a), "") << what;
      jit::detail::LaunchShape shape;
      const fa4::FwdParams p = jit::detail::pack_params(rc, a, &shape);
      EXPECT_EQ(p.descale_q, factors[0]) << what;
      EXPECT_EQ(p.descale_v, factors[2]) << what;
    }
  // Packed GQA: whole groups in a 128-row Q tile.
  jit::FA4Config packed;
  packed.arch = "sm_100a";
  packed.dtype = DType::e4m3;
  packed.group = 8;
  packed.pack_gqa = true;
  EXPECT_EQ(jit::resolve(packed).smem_bytes, 231424);
}

// Refusals name the field: depths other than 64 / 128, two K chunks (one 128-byte row holds the
// whole depth), more stages than fit, a BN that overflows TMEM next to O at Dp 128.
TEST(Fp8Host, Sm100aRefusalsNameTheField) {
  jit::FA4Config c;
  c.arch = "sm_100a";
  c.dtype = DType::e4m3;
  c.depth = 192;  // padded 256: more than one e4m3 row (96 pads to 128 and runs)
  EXPECT_NE(resolve_error(c).find("depth: 192"), std::string::npos) << resolve_error(c);
  c.depth = 128;
  c.num_qk_stages = 2;
  EXPECT_NE(resolve_error(c).find("num_qk_stages: 2"), std::string::npos) << resolve_error(c);
  c.num_qk_stages = 0;
  c.num_kv_stages = 6;
  EXPECT_NE(resolve_error(c).find("num_kv_stages: 6 does not fit"), std::string::npos) << resolve_error(c);
  EXPECT_NE(resolve_error(c).find("2..5 stages"), std::string::npos) << resolve_error(c);
  c.num_kv_stages = 0;
  c.BN = 192;
  EXPECT_NE(resolve_error(c).find("BN: 192"), std::string::npos) << resolve_error(c);
  c.BN = 64;  // a smaller BN fits more stages
  EXPECT_EQ(jit::resolve(c).config.num_kv_stages, 8);
  c.BN = 0;
  c.output_dtype = DType::e4m3;
  EXPECT_NE(resolve_error(c).find("output_dtype"), std::string::npos) << resolve_error(c);
}

// ---- FP8 KV cache: e4m3 K/V under a 16-bit Q ----------------------------------------------------

jit::FA4Config kv_fp8(DType dtype = DType::bf16, const std::string& arch = "sm_90a") {
  jit::FA4Config c;
  c.arch = arch;
  c.dtype = dtype;
  c.kv_dtype = DType::e4m3;
  return c;
}

std::string config_error(const jit::FA4Config& c) {
  std::string why;
  return jit::supported(c, &why) ? "" : why;
}

TEST(Fp8KvHost, ConfigRules) {
  // Resolved: kept, the O type is the Q type, e4m3 rows padded to one 128-byte atom.
  jit::FA4Config c = kv_fp8(DType::fp16);
  c.depth = 64;
  const auto rc = jit::resolve(c);
  EXPECT_EQ(*rc.config.kv_dtype, DType::e4m3);
  EXPECT_EQ(*rc.config.output_dtype, DType::fp16);
  EXPECT_EQ(rc.padded_depth, 128);
  EXPECT_EQ(rc.walk, jit::TileWalk::persistent);  // unmasked, unpacked: as the 16-bit kernel
  // The dtype itself is the plain kernel: normalised away, so the key and JSON are the plain one's.
  jit::FA4Config same;
  same.arch = "sm_90a";
  same.kv_dtype = DType::bf16;
  jit::FA4Config plain;
  plain.arch = "sm_90a";
  EXPECT_FALSE(jit::resolve(same).config.kv_dtype.has_value());
  EXPECT_EQ(jit::resolve(same).config, jit::resolve(plain).config);
  EXPECT_FALSE(jit::to_json(jit::resolve(plain).config).contains("kv_dtype"));
  // Refused, naming the field: a 16-bit KV type under another dtype, and 16-bit K/V under e4m3 Q.
  jit::FA4Config mixed = plain;
  mixed.kv_dtype = DType::fp16;
  EXPECT_NE(config_error(mixed).find("kv_dtype: fp16 with dtype bf16 is not allowed"), std::string::npos)
      << config_error(mixed);
  mixed.dtype = DType::e4m3;
  mixed.kv_dtype = DType::bf16;
  EXPECT_NE(config_error(mixed).find("kv_dtype: bf16 with dtype e4m3"), std::string::npos) << config_error(mixed);
  // sm_90a: head dims whose e4m3 rows are one atom; the grid or persistent walk (whole tiles:
  // no stream-K, which packed GQA turns a persistent walk into).
  jit::FA4Config deep = kv_fp8();
  deep.depth = 256;
  EXPECT_NE(config_error(deep).find("depth: 256 with kv_dtype e4m3"), std::string::npos) << config_error(deep);
  jit::FA4Config causal = kv_fp8();
  causal.mask = jit::Mask::causal();
  EXPECT_EQ(jit::resolve(causal).tuning.persistent, 1);
  jit::FA4Config packed = kv_fp8();
  packed.group = 4;
  packed.pack_gqa = true;
  EXPECT_EQ(jit::resolve(packed).tuning.persistent, 0);
  jit::ResolveOptions tune;
  tune.tune.persistent = 1;
  EXPECT_THROW(jit::resolve(packed, tune), jit::ConfigError);
  tune.tune.persistent = 2;
  EXPECT_THROW(jit::resolve(kv_fp8(), tune), jit::ConfigError);
}

TEST(Fp8KvHost, JsonRoundTripAndKey) {
  jit::FA4Config c = kv_fp8();
  c.group = 4;
  c.pack_gqa = true;
  const nlohmann::json j = jit::to_json(c);
  EXPECT_EQ(j.at("kv_dtype"), "e4m3");
  EXPECT_EQ(jit::config_from_json(j), c);
  EXPECT_EQ(jit::config_from_json(nlohmann::json::parse(R"({"kv_dtype": "float8_e4m3fn"})")).kv_dtype, DType::e4m3);
  try {
    jit::config_from_json(nlohmann::json::parse(R"({"kv_dtype": "e5m2"})"));
    ADD_FAILURE() << "kv_dtype e5m2 accepted";
  } catch (const jit::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("kv_dtype"), std::string::npos) << e.what();
  }
  jit::FA4Config plain = c;
  plain.kv_dtype.reset();
  EXPECT_NE(jit::detail::compile_inputs(c).key, jit::detail::compile_inputs(plain).key);
}

TEST(Fp8KvHost, LaunchChecksKvTypeAndDescales) {
  const auto rc = jit::resolve(kv_fp8());
  jit::LaunchArgs a = args_for(rc);
  EXPECT_EQ(a.k.dtype, DType::e4m3);
  EXPECT_EQ(launch_error(rc, a), "");
  a.v.dtype = DType::bf16;
  EXPECT_EQ(launch_error(rc, a), "launch: v.dtype is bf16, the kernel was built for e4m3");
  // e4m3 rows step in 16-byte units of 16 elements; Q keeps the 16-bit rule.
  a = args_for(rc);
  a.k.stride[1] += 8;
  EXPECT_NE(launch_error(rc, a).find("k.stride[1]"), std::string::npos);
  a = args_for(rc);
  a.q.stride[1] += 8;
  EXPECT_EQ(launch_error(rc, a), "");
  float factors[4] = {};
  a = args_for(rc);
  a.descale_k = factors;
  a.descale_v = factors;
  jit::detail::LaunchShape shape;
  const fa4::FwdParams p = jit::detail::pack_params(rc, a, &shape);
  EXPECT_EQ(p.descale_k, factors);
  EXPECT_EQ(p.descale_v, factors);
  EXPECT_EQ(p.descale_q, nullptr);
  a.descale_q = factors;
  EXPECT_EQ(launch_error(rc, a),
            "launch: descale_q is set but the kernel's dtype is bf16: descale factors are for e4m3 (FP8) tensors only");
}

// Pages no TMA box takes are gathered row by row from 32-bit page and row strides (sm90a
// gather.cuh copy_own, sm100a gather.cuh gather_stage): FwdParams::kv_box_rows 0, and a wider
// stride is refused naming it; TMA-boxed pages (16) keep any stride.
TEST(Fp8KvHost, GatheredPagesTakeStridesBelow2To31) {
  for (const char* arch : {"sm_90a", "sm_100a"}) {
    SCOPED_TRACE(arch);
    jit::FA4Config c = kv_fp8(DType::bf16, arch);
    c.group = 4;
    c.pack_gqa = true;
    const auto rc = jit::resolve(c);
    auto paged = [&](int page_size) {
      jit::LaunchArgs a = args_for(rc);
      const std::int64_t pages = 4096 / page_size;
      a.q = jit::Tensor::contiguous(a.q.data, DType::bf16, 2, 1, 8, 128);
      a.o = jit::Tensor::contiguous(a.o.data, DType::bf16, 2, 1, 8, 128);
      a.k = jit::Tensor::contiguous(a.k.data, DType::e4m3, pages, page_size, 2, 128);
      a.v = jit::Tensor::contiguous(a.v.data, DType::e4m3, pages, page_size, 2, 128);
      static const int table[2][16] = {};
      a.page_table = &table[0][0];
      a.max_pages = 16;
      return a;
    };
    for (int page_size : {1, 3, 16}) {
      jit::LaunchArgs a = paged(page_size);
      EXPECT_EQ(launch_error(rc, a), "") << page_size;
      jit::detail::LaunchShape shape;
      EXPECT_EQ(jit::detail::pack_params(rc, a, &shape).kv_box_rows, page_size == 16 ? 16 : 0) << page_size;
      a.k.stride[0] = std::int64_t{1} << 31;
      const std::string k0 = launch_error(rc, a);
      a = paged(page_size);
      a.v.stride[1] = std::int64_t{1} << 31;
      const std::string v1 = launch_error(rc, a);
      if (page_size == 16) {
        EXPECT_EQ(k0, "");
        EXPECT_EQ(v1, "");
      } else {
        EXPECT_EQ(k0, fmt::format("launch: k.stride[0] is 2147483648 elements: a paged cache of page size {} is "
                                  "gathered row by row, which takes strides below 2^31",
                                  page_size));
        EXPECT_NE(v1.find("v.stride[1] is 2147483648 elements"), std::string::npos) << v1;
      }
    }
  }
}

// MLA over an e4m3 latent cache (depth 576, depth_v 512): its e4m3 rows are 64-byte TMA rows (576
// bytes are no whole 128-byte rows) beside Q's 128-byte bf16 rows, and its launch takes per-page
// factors (page_descale), which every other kernel refuses, as it refuses them without a page table.
TEST(Fp8KvHost, LatentCacheRowsAndPageFactors) {
  jit::FA4Config c = kv_fp8();
  c.depth = 576;
  c.depth_v = 512;
  c.group = 16;
  c.pack_gqa = true;
  const auto rc = jit::resolve(c);
  EXPECT_EQ(jit::detail::tma_row_bytes(rc, DType::e4m3), 64);
  EXPECT_EQ(jit::detail::tma_row_bytes(rc, DType::bf16), 128);
  // Paged: 8 pages of 64 rows, V the first 512 columns of K's rows, 2 sequences of up to 4 pages.
  char* base = reinterpret_cast<char*>(std::uintptr_t{1} << 30);
  jit::LaunchArgs a;
  a.q = jit::Tensor::contiguous(base, DType::bf16, 2, 1, 16, 576);
  a.k = jit::Tensor::contiguous(base + (1 << 24), DType::e4m3, 8, 64, 1, 576);
  a.v = a.k;
  a.v.shape[3] = 512;
  a.o = jit::Tensor::contiguous(base + (3 << 24), DType::bf16, 2, 1, 16, 512);
  const int table[8] = {};
  a.page_table = table;
  a.max_pages = 4;
  float factors[8] = {};
  a.page_descale = factors;
  jit::detail::LaunchShape shape;
  EXPECT_EQ(jit::detail::pack_params(rc, a, &shape).page_descale, factors);
  a.page_descale = reinterpret_cast<const float*>(reinterpret_cast<const char*>(factors) + 2);
  EXPECT_EQ(launch_error(rc, a), "launch: page_descale is not 4-byte aligned (float32 [num_pages])");
  a.page_descale = nullptr;
  EXPECT_EQ(jit::detail::pack_params(rc, a, &shape).page_descale, nullptr);
  // Unpaged: refused by the launch table's check, naming the field.
  jit::LaunchArgs flat = a;
  flat.page_table = nullptr;
  flat.max_pages = 0;
  flat.k = jit::Tensor::contiguous(base + (1 << 24), DType::e4m3, 2, 256, 1, 576);
  flat.v = flat.k;
  flat.v.shape[3] = 512;
  EXPECT_EQ(launch_error(rc, flat), "");
  flat.page_descale = factors;
  EXPECT_EQ(launch_error(rc, flat),
            "launch: page_descale without a page_table: per-page factors are for a paged cache");
  // Another FP8 KV cache's kernel (d128, K and V of their own): refused.
  const auto d128 = jit::resolve(kv_fp8());
  jit::LaunchArgs other = args_for(d128);
  other.page_table = table;
  other.max_pages = 4;
  other.k = jit::Tensor::contiguous(base + (1 << 24), DType::e4m3, 8, 64, 2, 128);
  other.v = jit::Tensor::contiguous(base + (2 << 24), DType::e4m3, 8, 64, 2, 128);
  EXPECT_EQ(launch_error(d128, other), "");
  other.page_descale = factors;
  EXPECT_NE(
      launch_error(d128, other).find("page_descale is set but this kernel is not MLA's over an e4m3 latent cache"),
      std::string::npos)
      << launch_error(d128, other);
}

TEST(Fp8KvHost, TmaMapsUseTheKvType) {
  const auto rc = jit::resolve(kv_fp8());
  const jit::LaunchArgs a = args_for(rc);
  EXPECT_EQ(jit::detail::tma_map_spec(a.k, *rc.config.kv_dtype, 64).type, CU_TENSOR_MAP_DATA_TYPE_UINT8);
  EXPECT_EQ(jit::detail::tma_map_spec(a.k, *rc.config.kv_dtype, 64).box[0], 128u);
}

// ld.shared.v4 instructions between the first line holding `needle` and the shared store or
// barrier before it (PTX keeps the volatile accesses in program order).
int reads_before_first(const std::string& ptx, const std::string& needle) {
  const size_t at = ptx.find(needle);
  if (at == std::string::npos) return -1;
  std::vector<std::string> lines;
  std::istringstream in(ptx.substr(0, ptx.rfind('\n', at)));
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  int reads = 0;
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
    if (it->find("ld.shared.v4") != std::string::npos)
      ++reads;
    else if (it->find("st.shared") != std::string::npos || it->find("mbarrier") != std::string::npos)
      break;
  }
  return reads;
}

// NVRTC, no GPU: the sm_90a FP8-KV kernels of the serving and prefill shapes compile without spills
// or a stack frame, convert e4m3 with the sm_89+ cvt, and keep the 16-bit wgmma of their dtype.
TEST(Fp8KvHost, Sm90aKernelsCompileWithoutSpills) {
  struct Case {
    DType dtype;
    CompileCase k;
  };
  const Case cases[] = {
      {DType::bf16, {128, jit::Mask::none(), jit::ScoreMod::identity(), true}},
      {DType::fp16, {128, jit::Mask::causal(), jit::ScoreMod::identity(), true}},
      {DType::bf16, {128, jit::Mask::causal(), jit::ScoreMod::identity(), false}},
      {DType::fp16, {64, jit::Mask::none(), jit::ScoreMod::identity(), false}},
      {DType::bf16, {96, jit::Mask::sliding_window(), jit::ScoreMod::softcap(), false}},
      {DType::bf16, {128, jit::Mask::causal(), jit::ScoreMod::custom("return score - 0.05f * h;"), true}},
  };
  for (const Case& k : cases) {
    jit::ResolvedConfig rc;
    std::string what;
    const auto out = compile_case(kv_fp8(k.dtype), k.k, &rc, &what);
    // The MMAs run in fp16 under either Q type (Shape::MmaElement): a bf16 Q is converted once in
    // shared memory (saturating cvt), and no bf16 wgmma, nor a bf16 K/V conversion, is left.
    for (const std::string& needle : {std::string("cvt.rn.f16x2.e4m3x2"),
                                      fmt::format("wgmma.mma_async.sync.aligned.m64n{}k16.f32.f16.f16", rc.config.BN),
                                      std::string("cp.async.bulk.tensor.4d"), std::string("fence.proxy.async")})
      EXPECT_NE(out.ptx.find(needle), std::string::npos) << what << ": PTX lacks " << needle;
    EXPECT_EQ(out.ptx.find(".f32.bf16.bf16"), std::string::npos) << what << ": a bf16 wgmma is left";
    if (k.dtype == DType::bf16)  // e4m3 -> bf16 went e4m3 -> f16 -> f32 -> bf16
      EXPECT_EQ(out.ptx.find("cvt.f32.f16"), std::string::npos) << what << ": K/V still widen to bf16";
    EXPECT_EQ(out.ptx.find("cvt.rn.satfinite.f16x2.f32") != std::string::npos, k.dtype == DType::bf16)
        << what << ": Q's bf16 -> fp16 conversion";
    // The converters read a batch of 6 passes (3 on the persistent walk) before converting any
    // (helpers.cuh convert_kv; one read at a time left each read's latency exposed: docs/PERF.md run
    // 46): the shared-memory reads between the stage's barrier wait and its first e4m3 conversion.
    EXPECT_EQ(reads_before_first(out.ptx, "cvt.rn.f16x2.e4m3x2"), rc.tuning.persistent ? 3 : 6) << what;
  }
}

}  // namespace
