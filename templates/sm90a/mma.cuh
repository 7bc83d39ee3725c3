// Hopper warpgroup MMA (wgmma) for the sm90a forward kernel: shared-memory descriptors,
// fence/commit/wait, and the m64nNk16 wrappers (mma_ops.inc, generated).
// Verified pieces: the SW128 K-major descriptor, +2 per k16 step and the accumulator fragment
// layout ran bit-exact on an H200 (shared/reference/nvrtc_ptx_verified.md 2.1).
#pragma once
#include "common/prelude.cuh"

namespace fa4 {
namespace sm90a {

// ---- descriptors ----
// sm_90 smem matrix descriptor: start>>4 [0,14) | LBO>>4 [16,30) | SBO>>4 [32,46) | base_offset
// [49,52) (0: every block is aligned to its swizzle period) | swizzle [62,64): 1 = 128B, 2 = 64B.
template <int kRowBytes = 128>
__device__ __forceinline__ u64 make_desc(u32 smem_addr, u32 lbo_bytes, u32 sbo_bytes) {
  static_assert(kRowBytes == 128 || kRowBytes == 64, "descriptor: SW128 or SW64 rows");
  constexpr u64 kSwizzle = kRowBytes == 128 ? 1 : 2;
  return static_cast<u64>((smem_addr & 0x3FFFF) >> 4) | (static_cast<u64>((lbo_bytes >> 4) & 0x3FFF) << 16) |
         (static_cast<u64>((sbo_bytes >> 4) & 0x3FFF) << 32) | (kSwizzle << 62);
}

// K-major operand (Q as A, K as B of S = Q K^T) stored as TMA-swizzled blocks [rows][kRowBytes]:
// 8-row core groups are 8 rows apart (SBO: 1024 bytes at SW128, 512 at SW64); LBO is unused for
// swizzled K-major (set 1). A k-step (32 bytes: k16 of 16-bit, k32 of e4m3) inside a row adds 32
// bytes (+2 in the start field); the next chunk of depth is the next block.
template <int kRowBytes = 128>
__device__ __forceinline__ u64 desc_kmajor(u32 block_addr) {
  return make_desc<kRowBytes>(block_addr, 16, 8 * kRowBytes);
}

// MN-major operand (V as B of O += P V, with the transpose bit): V blocks are [kv rows][64 depth],
// so N (depth) is contiguous. CUTLASS canonical MN-major SW128: ((8 elems, 8, m), (8, k)) with
// strides ((1, 8, LBO), (64, SBO)) in elements: LBO = distance between 64-wide depth chunks
// (one block = rows*128 bytes), SBO = distance between 8-row groups of K (1024 bytes).
// A k16 step (16 kv rows) adds 16*128 = 2048 bytes.
__device__ __forceinline__ u64 desc_mnmajor(u32 block_addr, u32 block_bytes) {
  return make_desc(block_addr, block_bytes, 1024);
}

// A descriptor moved through its operand by byte offsets: the start field advances by a 32-bit
// add on the low word. No carry leaves the field (14 bits of address >> 4: shared memory ends below
// 2^18), so this equals the descriptor of the moved address, without the per-step mask and shift
// of make_desc (3 uniform instructions per wgmma of the KV loop).
struct DescAt {
  u32 lo, hi;
  static __device__ __forceinline__ DescAt of(u64 desc) {
    return DescAt{static_cast<u32>(desc), static_cast<u32>(desc >> 32)};
  }
  __device__ __forceinline__ u64 at(u32 byte_offset) const {
    return (static_cast<u64>(hi) << 32) | (lo + (byte_offset >> 4));
  }
};

// ---- synchronisation ----
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// Pins register arrays at this point of the instruction stream: the compiler may neither move
// reads of an accumulator above the wgmma_wait that completes it nor sink writes of an operand
// below the wgmma_fence that publishes it (the asm statements above do not name the registers).
template <int N>
__device__ __forceinline__ void fence_operand(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_operand(u32 (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

// ---- wgmma.mma_async wrappers ----
template <int N, bool kIsBf16>
struct Wgmma;
template <int N>
struct WgmmaFp8;
#include "sm90a/mma_ops.inc"

// A K operand that landed whole (gemm_qk's kParts 1).
struct NoParts {
  __device__ __forceinline__ void operator()(int) const {}
};

// S[64 x N] (=) Q[64 x D] K[N x D]^T, both K-major blocks of kRowBytes-wide rows (SW128, or SW64 for
// e4m3 at depth 64). q_addr/k_addr: first block.
// D: the contracted depth, a multiple of 16 (the real head depth: padded columns are zero and skipped).
// scale_d = 0 on the first k-step overwrites the stale accumulator.
// FP8 (e4m3): k32 steps of 32 bytes, so the byte offsets are those of the 16-bit k16 steps (a
// 128-byte row holds 128 e4m3 depth elements instead of 64).
// kParts > 1: K lands in that many equal parts of whole swizzle blocks; part_landed(j) runs before
// part j's first k-step (j > 0), between the asynchronous wgmma of the parts before it.
template <class Element, int N, int D, int kRowBytes = 128, int kParts = 1, class PartLanded = NoParts>
__device__ __forceinline__ void gemm_qk(float (&s)[N / 2], u32 q_addr, u32 k_addr, PartLanded part_landed = {}) {
  constexpr bool kBf16 = DTypeTraits<Element>::kIsBf16, kFp8 = DTypeTraits<Element>::kIsFp8;
  constexpr int kStep = kFp8 ? 32 : 16;  // elements per k-step: 32 bytes either way
  constexpr int kRowSteps = kRowBytes / 32;  // k-steps per swizzle row
  static_assert(D % kStep == 0, "gemm_qk: depth must be a multiple of the k-step (16; FP8: 32)");
  static_assert(kParts == 1 || (D / kStep) % (kParts * kRowSteps) == 0, "gemm_qk: parts of whole swizzle blocks");
  constexpr int kPartSteps = D / kStep / kParts;
  const DescAt q = DescAt::of(desc_kmajor<kRowBytes>(q_addr)), kd = DescAt::of(desc_kmajor<kRowBytes>(k_addr));
#pragma unroll
  for (int k = 0; k < D / kStep; ++k) {
    if (kParts > 1 && k > 0 && k % kPartSteps == 0) part_landed(k / kPartSteps);
    // Q block: 64 rows x kRowBytes, K block: N rows x kRowBytes; a k-step inside one adds 32 bytes.
    const u64 a = q.at((k / kRowSteps) * (64 * kRowBytes) + 32 * (k % kRowSteps)),
              b = kd.at((k / kRowSteps) * (N * kRowBytes) + 32 * (k % kRowSteps));
    if constexpr (kFp8)
      WgmmaFp8<N>::ss(s, a, b, k > 0 ? 1 : 0);
    else
      Wgmma<N, kBf16>::ss(s, a, b, k > 0 ? 1 : 0);
  }
}

// S[64 x N] (=) Q K^T with Q in registers as wgmma A fragments (4 per k16 step: consumer.cuh
// QFragments) and K as in gemm_qk (16-bit, SW128 K-major blocks, no transpose): an RS wgmma that
// reads only K from shared memory.
template <class Element, int N, int D>
__device__ __forceinline__ void gemm_qk_rs(float (&s)[N / 2], const u32 (&q)[D / 4], u32 k_addr) {
  static_assert(!DTypeTraits<Element>::kIsFp8 && D % 16 == 0, "gemm_qk_rs: 16-bit Q, K in whole k16 steps");
  const DescAt kd = DescAt::of(desc_kmajor(k_addr));
#pragma unroll
  for (int k = 0; k < D / 16; ++k) {
    const u32 a[4] = {q[4 * k], q[4 * k + 1], q[4 * k + 2], q[4 * k + 3]};
    Wgmma<N, DTypeTraits<Element>::kIsBf16>::template rs<0>(s, a, kd.at((k / 4) * (N * 128) + 32 * (k % 4)),
                                                             k > 0 ? 1 : 0);
  }
}

// O[64 x Dp] += P[64 x BN] V[BN x Dp]; P in registers as wgmma A fragments (4 regs per k16),
// V MN-major SW128 blocks of BN rows x 64 depth (transpose bit set). Dp may end inside a block
// (96: the first 32 columns of the second; Shape::kOWg). kKeys < BN: the first kKeys keys only
// (the rest of P is zero).
template <class Element, int Dp, int BN, int kKeys = BN>
__device__ __forceinline__ void gemm_pv(float (&o)[Dp / 2], const u32 (&p)[BN / 4], u32 v_addr) {
  constexpr bool kBf16 = DTypeTraits<Element>::kIsBf16;
  static_assert(!DTypeTraits<Element>::kIsFp8, "gemm_pv: FP8 P V is gemm_pv_fp8");
  static_assert(kKeys % 16 == 0 && kKeys <= BN, "gemm_pv: whole k16 steps of the tile");
  const DescAt v = DescAt::of(desc_mnmajor(v_addr, BN * 128));
#pragma unroll
  for (int k = 0; k < kKeys / 16; ++k) {
    const u32 a[4] = {p[4 * k], p[4 * k + 1], p[4 * k + 2], p[4 * k + 3]};
    Wgmma<Dp, kBf16>::template rs<1>(o, a, v.at(k * 2048), 1);
  }
}

// FP8: O[64 x Dp] += P[64 x BN] Vt[Dp x BN]^T, e4m3. P in registers, 4 per register (k32 step k:
// p[4k..4k+3], softmax.cuh pack_p); Vt K-major SW128 blocks of [Dp rows][128 keys] (helpers.cuh
// transpose_v, which orders the keys of each k32 step as pack_p leaves them). kKeys < BN: the first
// kKeys keys only.
// O += P V with P from shared memory (a warpgroup that splits O with the one that computed P:
// consumer.cuh SharedP): P is [64 rows][kBN keys] in SW128 blocks of 64 keys (K-major, as Q), V
// MN-major as in gemm_pv.
template <class Element, int Dp, int BN>
__device__ __forceinline__ void gemm_pv_ss(float (&o)[Dp / 2], u32 p_addr, u32 v_addr) {
  constexpr bool kBf16 = DTypeTraits<Element>::kIsBf16;
  const DescAt pa = DescAt::of(desc_kmajor(p_addr)), v = DescAt::of(desc_mnmajor(v_addr, BN * 128));
#pragma unroll
  for (int k = 0; k < BN / 16; ++k)
    Wgmma<Dp, kBf16>::template ss<1>(o, pa.at((k / 4) * (64 * 128) + 32 * (k % 4)), v.at(k * 2048), 1);
}

template <int Dp, int BN, int kKeys = BN>
__device__ __forceinline__ void gemm_pv_fp8(float (&o)[Dp / 2], const u32 (&p)[BN / 8], u32 vt_addr) {
  static_assert(kKeys % 32 == 0 && kKeys <= BN, "gemm_pv_fp8: whole k32 steps of the tile");
  const DescAt v = DescAt::of(desc_kmajor(vt_addr));
#pragma unroll
  for (int k = 0; k < kKeys / 32; ++k) {
    const u32 a[4] = {p[4 * k], p[4 * k + 1], p[4 * k + 2], p[4 * k + 3]};
    WgmmaFp8<Dp>::rs(o, a, v.at((k / 4) * (Dp * 128) + 32 * (k % 4)), 1);
  }
}

}  // namespace sm90a
}  // namespace fa4
