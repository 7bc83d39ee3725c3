// sm80's compile-time facts, written once for the host (generator/backends/sm80.cpp derives and
// checks configs with them) and the kernel (sm80/traits.cuh lays out and asserts with them).
// Compiled by the host compiler and by NVRTC, like sm90a/abi.h: plain C++, no headers beyond
// segments.h's FA4_HOST_DEVICE.
//   - the warps: rows per warp, and the O split of a V wider than one warp's O fragment;
//   - the register budget of the O and S accumulators;
//   - the shared-memory size (the one formula; Traits' offsets are its terms).
// dp: the Q/K padded depth; dpv: V's and O's (FA4Config::depth_v; dp unless V is narrower).
#pragma once
#include "common/segments.h"

namespace fa4 {
namespace sm80 {
namespace abi {

// ---- Warps ----------------------------------------------------------------------------------
// A warp keeps O for its rows in registers for the whole KV loop, at most 256 columns (128 floats
// a thread per 16 rows). A wider V (512) is split over o_split warps that share their rows: each
// computes the same S = Q K^T and softmax (identical instructions on identical data, so identical
// P and row sums: nothing to exchange) and P V's and stores its own dpv / o_split columns.
FA4_HOST_DEVICE constexpr int o_split(int dpv) { return dpv > 256 ? 2 : 1; }
// Warps over the rows of one O slice: 4 (16 or 32 rows each), or 2 of 16 rows for BM 32 (V 512
// where two K/V stages beside a 64-row Q do not fit: 99 KiB parts).
FA4_HOST_DEVICE constexpr int row_warps(int bm) { return bm < 64 ? bm / 16 : 4; }
FA4_HOST_DEVICE constexpr int num_threads(int bm, int dpv) { return 32 * row_warps(bm) * o_split(dpv); }
FA4_HOST_DEVICE constexpr int m_tiles(int bm) { return bm / row_warps(bm) / 16; }  // m16 row blocks per warp

// ---- Registers ------------------------------------------------------------------------------
// O (a warp's slice of V's width) and S live in registers through the KV loop: m_tiles * (dpv /
// o_split / 8 + bn / 8) * 4 floats per thread. Beyond 192 the kernel spills (a V of 192 or 256 needs
// BM 64, as in FA2; 512 its O split).
FA4_HOST_DEVICE constexpr int accumulators(int bm, int bn, int dpv) {
  return m_tiles(bm) * (dpv / o_split(dpv) / 8 + bn / 8) * 4;
}
constexpr int kMaxAccumulators = 192;

// ---- Shared memory --------------------------------------------------------------------------
// [Q: bm x dp][K ring: stages x bn x dp][V ring: stages x bn x dpv], 16-bit. An FP8 KV cache
// (dpv = dp): [Q][one 16-bit K stage][one 16-bit V stage][e4m3 K ring][e4m3 V ring].
FA4_HOST_DEVICE constexpr int smem_bytes(int bm, int bn, int dp, int dpv, int stages, bool fp8_kv) {
  return fp8_kv ? 2 * (bm * dp + bn * (dp + dpv)) + 2 * stages * bn * dp : 2 * (bm * dp + stages * bn * (dp + dpv));
}

}  // namespace abi
}  // namespace sm80
}  // namespace fa4
