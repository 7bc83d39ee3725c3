// FP8 KV cache ("kv_dtype": "e4m3" under a bf16/fp16 dtype; Traits::kFp8KV): the converter warps
// (14-15, idle in the 16-bit kernel) widen each e4m3 K or V tile that TMA landed in the f8 ring
// into the 16-bit K chunk slots or V stage, in exactly the smem image a 16-bit TMA load would
// have left there, so the MMA warp and its UMMA descriptors do not change.
//
// Per visited KV tile n (Work walk, the loader's order K_n, V_n):
//   f8 slot (K_n)  -> k chunk slots, one Producer acquire each (the MMA's commit frees them);
//                     each chunk: widen, fence.proxy.async, every thread arrives on its full barrier
//   f8 slot (V_n)  -> one v stage, the same way
// then the f8 slot goes back to the loader (one arrival per converter warp). This is the chain
// loader -> f8 -> converters -> k/v -> MMA, each ring in FIFO order: the converters take the
// place the loader had on the k/v rings (same acquires in the same order), and the loader only
// waits for f8 slots, which the converters free in order.
//
// Layouts (all SWIZZLE_128B, 1024-byte aligned, the 16-byte chunk j of row r at (j ^ (r % 8)) * 16):
//   e4m3 slot: Dp/128 boxes of [BN rows][128 bytes = 128 elements]
//   16-bit K chunk / V stage: boxes of [BN rows][64 elements] at box * BN * 128
// 16-bit box b holds elements [64 b, 64 b + 64): e4m3 box b / 2, e4m3 chunks 4 (b % 2) + jj,
// jj = 0..3; e4m3 chunk jj becomes 16-bit chunks 2 jj and 2 jj + 1 (elements 0-7 and 8-15).
// Bank conflicts: a 16-byte access is served 8 lanes at a time; lanes 8q..8q+7 take rows q and
// q + 4 (mod 8) with jj = 0..3 each, so the 8 loads hit 8 different chunk positions, and the
// stores too because the q + 4 row writes its odd chunk first.
#pragma once
#include "common/mbarrier.cuh"
#include "common/pipeline.cuh"
#include "common/smem.cuh"
#include "sm100a/traits.cuh"
#include "sm100a/pipelines.cuh"

namespace fa4 {
namespace sm100a {


// 16-bit boxes [b0, b0 + boxes) of one tile: from the e4m3 slot at src to the boxes at dst
// (dst = the 16-bit box b0). Thread t of kConvertThreads.
// kGroup: passes whose loads are in flight together: 2, or 1 beside a walk that classifies its
// tiles (Mask::kContiguous false: chunks, snippets), where the load warp's gather (gather.cuh) in
// the same 48-register warpgroup pushed one variant (a block snippet, packed GQA, ALiBi) to 4 B of
// spills.
template <class Config, int kGroup>
__device__ __forceinline__ void widen_boxes(u32 src, u32 dst, int b0, int boxes, int t) {
  using T = Traits<Config>;
  using Element = typename T::Element;
  constexpr int kRowsPerPass = 8 * kConvertWarps;  // 8 rows per warp and pass
  static_assert(T::kBN % (kRowsPerPass * kGroup) == 0, "whole pass groups per tile");
  const int lane = t % 32, cw = t / 32;
  const int jj = lane % 4, h = (lane / 4) % 2, q = lane / 8;
  const int r_in = q + 4 * h;  // row within the warp's 8 rows (= row % 8)
#pragma unroll 1
  for (int b = b0; b < b0 + boxes; ++b) {
    const u32 src_box = src + (b / 2) * (T::kBN * 128) + ((static_cast<u32>(4 * (b % 2) + jj) ^ r_in) << 4);
    const u32 dst_box = dst + (b - b0) * (T::kBN * 128);
    // This lane's first store: elements 0-7 (chunk 2 jj) for rows q, 8-15 (chunk 2 jj + 1) for rows q + 4.
    const u32 c_first = (static_cast<u32>(2 * jj + h) ^ r_in) << 4, c_second = (static_cast<u32>(2 * jj + 1 - h) ^ r_in) << 4;
#pragma unroll 1
    for (int r0 = 8 * cw; r0 < T::kBN; r0 += kRowsPerPass * kGroup) {
      u32 in[kGroup][4];
#pragma unroll
      for (int g = 0; g < kGroup; ++g) ld_shared_v4(src_box + (r0 + g * kRowsPerPass + r_in) * 128, in[g]);
#pragma unroll
      for (int g = 0; g < kGroup; ++g) {
        const u32 row = dst_box + (r0 + g * kRowsPerPass + r_in) * 128;
        // in[g][0..1]: elements 0-7, in[g][2..3]: 8-15; the first store's half first.
        const u32 f0 = h ? in[g][2] : in[g][0], f1 = h ? in[g][3] : in[g][1];
        const u32 s0 = h ? in[g][0] : in[g][2], s1 = h ? in[g][1] : in[g][3];
        st_shared_v4(row + c_first, e4m3x2_to<Element>(static_cast<u16>(f0 & 0xffffu)),
                         e4m3x2_to<Element>(static_cast<u16>(f0 >> 16)), e4m3x2_to<Element>(static_cast<u16>(f1 & 0xffffu)),
                         e4m3x2_to<Element>(static_cast<u16>(f1 >> 16)));
        st_shared_v4(row + c_second, e4m3x2_to<Element>(static_cast<u16>(s0 & 0xffffu)),
                         e4m3x2_to<Element>(static_cast<u16>(s0 >> 16)), e4m3x2_to<Element>(static_cast<u16>(s1 & 0xffffu)),
                         e4m3x2_to<Element>(static_cast<u16>(s1 >> 16)));
      }
    }
  }
}

template <class Config, class Mask>
__device__ __forceinline__ void convert(const FwdParams& p, unsigned char* smem, BarriersOf<Config>& bars) {
  using T = Traits<Config>;
  static_assert(T::kFp8KV, "convert: FP8 KV cache kernels only");
  constexpr int kBoxesPerChunk = T::kBK0 / T::kBox;
  constexpr int kGroup = Mask::kContiguous ? 2 : 1;  // widen_boxes
  const int t = static_cast<int>(threadIdx.x) - 32 * kConvertWarp0;
  const Work<Config, Mask> w = make_work<Config, Mask>(p);  // the same tiles as every other role
  const u32 base = smem_u32(smem);
  pipe::Consumer<T::kF8Slots, pipe::ArriveOnePerWarp> f8_cons(&bars.f8);
  pipe::Producer<T::kKSlots> k_prod(&bars.k);
  pipe::Producer<T::kStages> v_prod(&bars.v);
#pragma unroll 1
  for (int n = w.first_tile(); w.has(n); n = w.next_tile(n)) {
    {
      auto src = f8_cons.acquire();  // K_n in e4m3
      const u32 src_addr = base + T::kF8Off + src.index() * T::kF8StageBytes;
#pragma unroll 1
      for (int ch = 0; ch < T::kQKStages; ++ch) {
        auto dst = k_prod.acquire();  // the MMAs that read this chunk slot have completed
        widen_boxes<Config, kGroup>(src_addr, base + T::kKOff + dst.index() * T::kKChunkBytes,
                                    ch * kBoxesPerChunk, kBoxesPerChunk, t);
        fence_proxy_async();  // generic writes (and reads of the e4m3 slot) before the async proxy's MMA / TMA
        dst.arrive();
      }
    }  // e4m3 slot back to the loader (one arrival per warp)
    {
      auto src = f8_cons.acquire();  // V_n in e4m3
      auto dst = v_prod.acquire();
      widen_boxes<Config, kGroup>(base + T::kF8Off + src.index() * T::kF8StageBytes,
                                  base + T::kVOff + dst.index() * T::kVStageBytes, 0, T::kDpV / T::kBox, t);
      fence_proxy_async();
      dst.arrive();
    }
  }
}

}  // namespace sm100a
}  // namespace fa4
