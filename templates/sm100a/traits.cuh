// Everything every role derives from Config the same way: tile shapes, the shared-memory
// map, the TMEM column map, and the per-CTA work description (which Q rows, which KV tiles).
// Roles never exchange these; they recompute them, so they agree by construction.
#pragma once
#include "common/tile_work.cuh"
#include "common/prelude.cuh"
#include "common/sequence.cuh"
#include "common/mask.cuh"
#include "sm100a/abi.h"

namespace fa4 {
namespace sm100a {

template <class Config>
struct Traits {
  using Element = typename Config::Element;
  using OutElement = typename Config::OutElement;
  // FP8 ("dtype": "e4m3"): Q, K and V in e4m3, both MMAs tcgen05 kind::f8f6f4 (K 32 per MMA), P
  // rounded to e4m3 in TMEM (4 per column), O in OutElement (16-bit). A 128-byte swizzle row holds
  // 128 elements, so the padded depth is 128 and one TMA box spans it.
  static constexpr bool kFp8 = DTypeTraits<Element>::kIsFp8;
  // K/V in global memory: Element, or e4m3 for an FP8 KV cache (Config::KVElement, "kv_dtype":
  // "e4m3" under a 16-bit Element). Then TMA lands K/V tiles as e4m3 in the f8 ring and warps 14-15
  // widen them into the 16-bit K/V rings (convert.cuh); everything after that is the 16-bit kernel's.
  using KVElement = typename Config::KVElement;
  static constexpr bool kFp8KV = !kFp8 && DTypeTraits<KVElement>::kIsFp8;
  // Scores and O take the launch's descale factors (FP8 inputs: descale_q, _k, _v; an FP8 KV cache:
  // descale_k, _v).
  static constexpr bool kDescaled = kFp8 || kFp8KV;
  static constexpr int kElemBytes = sizeof(Element);  // Q, K, V in shared memory (2, or 1 for FP8)

  static constexpr int kBM = Config::kBM;           // CTA rows: two Q tiles
  static constexpr int kTileM = 128;                // one Q tile = one MMA M = the 128 TMEM lanes
  static constexpr int kNumQTiles = kBM / kTileM;   // 2
  static constexpr int kBN = Config::kBN;
  static constexpr int kDepth = Config::kDepth;  // Q and K: S = Q K^T runs over kDp
  static constexpr int kDp = Config::kPaddedDepth;
  // V and O (FA4Config::depth_v): kDepth / kDp, or a narrower 16-bit V (Q/K 192, V 128): V's ring
  // stages, P V's N, O in TMEM, the correction, the epilogue and the split partials are kDpV wide.
  static constexpr int kDepthV = Config::kDepthV;
  static constexpr int kDpV = Config::kPaddedDepthV;
  static constexpr int kStages = Config::kNumKVStages;  // V stages (and K's, where whole K stages fit)
  static constexpr int kQKStages = Config::kNumQKStages;
  static constexpr int kBK0 = kDp / kQKStages;      // depth per K chunk (one K barrier each)
  static constexpr int kBox = 128 / kElemBytes;     // Q/K/V TMA box width: one 128-byte swizzle row
  static constexpr int kOBox = 64;                  // O (16-bit) TMA box width: one 128-byte swizzle row
  // K per tcgen05.mma: 32 bytes of K (kind::f16: 16 elements, kind::f8f6f4: 32), so a K step is
  // +32 bytes inside a swizzled K-major row, and 32 bytes of P per row = 8 TMEM columns.
  static constexpr int kMmaK = 32 / kElemBytes;
  static constexpr int kPPerColumn = 4 / kElemBytes;  // P elements per 32-bit TMEM column (2, or 4 e4m3)
  static constexpr int kThreads = 512;
  static constexpr int kPack = Config::kPack;       // GQA packing: tile row -> (query, head) by Rows
  static constexpr int kPackSlices = Config::kPackSlices;  // groups above 128: slices of kPack heads
  using Rows = PackedRow<kPack, kTileM>;            // common/packed_rows.h: a Q tile is one span (one 5-D box)

  static_assert(Config::kNumThreads == kThreads, "sm100a: 16 warps (2 softmax WGs, correction WG, MMA, load)");
  static_assert(kBM == 256 && kNumQTiles == 2, "sm100a: BM = 256 = two Q tiles of 128 rows");
  static_assert(Config::kSwizzleBytes == 128, "sm100a: 128-byte swizzle");
  static_assert(kDp % kBox == 0 && kDp >= 64 && kDp <= 192, "sm100a: padded depth 64, 128 or 192");
  static_assert(kDepth <= kDp, "depth fits the padded depth");
  static_assert(kDpV == kDp || (!kFp8 && !kFp8KV && kDpV < kDp && kDpV % kOBox == 0 && kDepthV % 16 == 0 &&
                                 kDepthV <= kDpV && kDpV - kDepthV < kOBox),
                "sm100a: a V narrower than Q and K (kDepthV) is 16-bit, in whole 64-element swizzle rows");
  static_assert(Config::kBK0 == kBK0 && kBK0 % kBox == 0, "K chunk = whole TMA boxes (128-byte rows)");
  static_assert(abi::bn_legal(kBN, kDpV), "BN (abi.h): MMA N (M = 128 needs N % 16 == 0, <= 256), 32-col batches");
  static_assert(kStages >= 2, "V(n) is held until O1 += P1 V(n) one iteration later: needs 2 V slots");
  static_assert((sizeof(Element) == 2 || kFp8) && sizeof(OutElement) == 2, "16-bit or e4m3 Q/K/V, 16-bit O");
  static_assert(!kFp8 || (kDp == 128 && kQKStages == 1),
                "FP8: padded depth 128 (one 128-byte e4m3 row per key), K in one chunk (BK0 = Dp)");
  static_assert(kPack >= 1 && kPack <= kTileM, "a Q tile (one 5-D TMA box) holds whole groups: kPack 1..128");
  static_assert(sizeof(KVElement) == sizeof(Element) || (kFp8KV && kDp == 128),
                "16-bit K/V, or an e4m3 KV cache at padded depth 128 (one 128-byte e4m3 row per key)");

  // ---- TMEM columns (fp32, 128 lanes) ----
  static constexpr u32 kTmemS0 = 0;                 // S0, then P0 (packed kPPerColumn per column) over it
  static constexpr u32 kTmemS1 = kBN;
  static constexpr u32 kTmemO0 = 2 * kBN;           // O: V's width
  static constexpr u32 kTmemO1 = 2 * kBN + kDpV;
  static_assert(kTmemO1 + kDpV == abi::tmem_columns(kBN, kDpV) && abi::tmem_columns(kBN, kDpV) <= abi::kTmemColumns,
                "TMEM budget (abi.h): S0, S1, O0, O1 in 512 columns");
  __device__ __forceinline__ static constexpr u32 tmem_s(int tile) { return tile == 0 ? kTmemS0 : kTmemS1; }
  __device__ __forceinline__ static constexpr u32 tmem_o(int tile) { return tile == 0 ? kTmemO0 : kTmemO1; }

  // ---- shared memory (byte offsets from a 1024-aligned base; abi.h smem_bytes) ----
  // A Q tile's region is sized for the 16-bit O staged there (FP8: the e4m3 Q fills half of it; a
  // narrower V: O takes its first kDpV / 64 boxes).
  static constexpr int kQTileBytes = abi::q_bytes(kTileM, kDp);  // O: DpV/64 boxes of [128][64 x 16-bit]
  // Q: Dp/kBox boxes of [128][128 B] (packed rows: of the span's real rows, Rows::kSpanRows).
  static constexpr int kQLoadBytes = Rows::kSpanRows * kDp * kElemBytes;
  // A K chunk: BK0/kBox boxes of [BN][128 B]; a V stage: DpV/kBox boxes of [BN][128 B].
  static constexpr int kKChunkBytes = abi::k_chunk_bytes(kElemBytes, kBN, kDp, kQKStages);
  static constexpr int kVStageBytes = abi::v_stage_bytes(kElemBytes, kBN, kDpV);
  // K chunk slots: whole stages (kStages x kQKStages), or as many chunks as kSmemBytes holds beside
  // the V ring (Q/K 192 with V 128: 4 chunks of 64 columns, one K tile and a third). The FP8 KV
  // cache's e4m3 ring takes what the host adds beyond whole stages.
  static constexpr int kKSlots =
      kFp8KV ? kStages * kQKStages
             : abi::k_slots(kElemBytes, kBM, kBN, kDp, kDpV, kStages, kQKStages, Config::kSmemBytes);
  static_assert(kKSlots >= kQKStages, "the K ring holds a whole K tile (S = Q K^T waits for all its chunks)");
  static constexpr int kQOff = 0;                                 // Q0, Q1; O staging reuses them
  static constexpr int kKOff = kQOff + kNumQTiles * kQTileBytes;
  static constexpr int kVOff = kKOff + kKSlots * kKChunkBytes;
  // FP8 KV cache only: the e4m3 ring, one slot per K or V tile in load order (K0 V0 K1 V1 ...),
  // Dp/128 TMA boxes of [BN][128 bytes] each. The host sizes it (generator/backends/sm100a.cpp):
  // whatever kSmemBytes holds beyond the 16-bit layout, 2..4 slots (abi.h f8_slots).
  static constexpr int kBoxF8 = 128;                              // e4m3 TMA box width: one 128-byte row
  static constexpr int kF8StageBytes = kFp8KV ? abi::f8_slot_bytes(kBN, kDp) : 0;  // Dp/128 boxes of [BN][128]
  // The DEVICE_ABI formula (abi.h): Q regions (16-bit O staging) + the K and V rings + factors + barriers.
  static constexpr int kSmemBytes16 = abi::smem_bytes(kElemBytes, kBM, kBN, kDp, kDpV, kStages, kQKStages, kKSlots);
  static constexpr int kF8Slots = kFp8KV ? abi::f8_slots(kSmemBytes16, kBN, kDp, Config::kSmemBytes) : 0;
  static constexpr int kF8Off = kVOff + kStages * kVStageBytes;
  static constexpr int kCorrOff = kF8Off + kF8Slots * kF8StageBytes;
  static constexpr int kBarOff = kCorrOff + abi::corr_bytes(kBM);
  static constexpr int kSmemBytes = kBarOff + abi::kBarrierBytes;
  static_assert(kSmemBytes == kSmemBytes16 + kF8Slots * kF8StageBytes,
                "the DEVICE_ABI sm100a shared-memory formula (+ the e4m3 ring of an FP8 KV cache)");
  static_assert(!kFp8 || Config::kSmemBytes == kSmemBytes, "FP8: the host launches with exactly the formula's bytes");
  static_assert(!kFp8KV || (kF8Slots >= 2 && kF8Slots <= 4 && Config::kSmemBytes == kSmemBytes),
                "FP8 KV cache: kSmemBytes = the 16-bit formula + 2..4 e4m3 slots of BN x Dp bytes");
  static_assert(kKSlots == kStages * kQKStages || Config::kSmemBytes == kSmemBytes,
                "a K ring of fewer than whole stages fills exactly the host's kSmemBytes");
  static_assert(Config::kSmemBytes >= kSmemBytes, "host launches with the formula's bytes");
  static_assert(kSmemBytes <= 232448, "B200: 228 KiB - 1 KiB per CTA");
  static_assert(kKOff % 1024 == 0 && kVOff % 1024 == 0 && kKChunkBytes % 1024 == 0 && kVStageBytes % 1024 == 0 &&
                    kQTileBytes % 1024 == 0,
                "swizzle atoms are 1024-byte aligned");
  static_assert(kF8Off % 1024 == 0 && kF8StageBytes % 1024 == 0, "e4m3 swizzle atoms are 1024-byte aligned");
};

// The work of one CTA (common/tile_work.cuh TileWork, which the sm90a backend runs and tests
// on hardware): batch, head (the group's first head when GQA heads are packed), tile rows
// [q_lo, q_hi) (packed rows when kPack > 1; Q tile i starts at q_lo + 128 i), the KV split and the
// KV tiles, walked from first_tile() down with next_tile() so every role skips the same kSkip
// tiles. Every role builds it from the same inputs.
template <class Config, class Mask>
using Work = TileWork<Traits<Config>::kBM, Traits<Config>::kBN, Mask, Traits<Config>::kPack, false, Traits<Config>::kTileM>;

template <class Config, class Mask>
__device__ __forceinline__ Work<Config, Mask> make_work(const FwdParams& p) {
  return Work<Config, Mask>::make(p);
}

}  // namespace sm100a
}  // namespace fa4
