// Compile-time shape of one sm80 kernel, derived from the generated Config. Every other sm80
// header takes these instead of re-deriving tile arithmetic, so load, MMA and epilogue agree.
#pragma once
#include "common/prelude.cuh"
#include "sm80/abi.h"

namespace fa4 {
namespace sm80 {

// One shared-memory row layout of 16-bit elements: kDepth real columns of D (padded), in 16-byte
// chunks XOR-swizzled per row. Q and K share one (Traits::QKRows); V, O's staging and P V's N use
// V's (Traits::VRows), the same type when V is as wide as Q and K.
template <int kValidDepth, int kPaddedDepth>
struct Rows {
  static constexpr int kDepth = kValidDepth;
  static constexpr int D = kPaddedDepth;  // smem row length (elements)
  static constexpr int kChunks = D / 8;   // 16-byte chunks per smem row
  static constexpr int kRowBytes = D * 2;
  // XOR swizzle on 16-byte chunks: chunk' = chunk ^ (row & kSwizzleMask). With 8+ chunks per
  // row, the 8 rows one ldmatrix 8x8 reads land in 8 different 16-byte bank groups.
  static constexpr int kSwizzleMask = kChunks % 8 == 0 ? 7 : kChunks % 4 == 0 ? 3 : kChunks % 2 == 0 ? 1 : 0;
  static_assert(D % 16 == 0, "sm80: padded depths are multiples of 16");
  static_assert(kDepth % 8 == 0 && kDepth <= D, "sm80: depths are multiples of 8, at most the padded depth");
};

template <class Config>
struct Traits {
  using Element = typename Config::Element;
  using OutElement = typename Config::OutElement;
  // K/V in global memory: Element, or e4m3 for an FP8 KV cache (Config::KVElement). An FP8 K/V tile
  // lands by cp.async in an e4m3 staging ring (kStages stages) and is converted into one 16-bit
  // K/V stage, which the MMA code reads as it reads a 16-bit kernel's ring.
  using KVElement = typename Config::KVElement;
  static constexpr bool kFp8KV = DTypeTraits<KVElement>::kIsFp8;

  static constexpr int kDepth = Config::kDepth;
  static constexpr int D = Config::kPaddedDepth;  // smem row length (elements)
  // V and O (FA4Config::depth_v): kDepth / D, or a narrower 16-bit V (Q/K 192, V 128): V's ring
  // stages, P V's N, the O accumulator, the epilogue and the split partials are then DV wide.
  static constexpr int kDepthV = Config::kDepthV;
  static constexpr int DV = Config::kPaddedDepthV;
  static constexpr bool kNarrowV = DV != D;
  using QKRows = Rows<kDepth, D>;
  using VRows = Rows<kDepthV, DV>;  // QKRows itself when V is as wide
  static constexpr int kBM = Config::kBM;
  static constexpr int kBN = Config::kBN;
  static constexpr int kStages = Config::kNumKVStages;
  static constexpr int kPack = Config::kPack;  // GQA packing: q heads per tile row group (1: unpacked)
  static constexpr int kThreads = Config::kNumThreads;
  // Warp w owns rows [row_warp(w) * kWarpRows, + kWarpRows) and O's columns [o_slice(w) * kOCols,
  // + kOCols) (abi.h: a V of 512 is split over kOSplit warps sharing their rows).
  static constexpr int kOSplit = abi::o_split(DV);
  static constexpr int kRowWarps = abi::row_warps(kBM);
  static constexpr int kWarpRows = kBM / kRowWarps;  // query rows owned by one warp
  static constexpr int kMTiles = kWarpRows / 16;     // m16 row blocks per warp
  static constexpr int kNTiles = kBN / 8;            // n8 column blocks of S
  static constexpr int kOCols = DV / kOSplit;        // O columns of one warp (its slice of V's width)
  static constexpr int kDTiles = kOCols / 8;         // n8 column blocks of a warp's O
  __device__ __forceinline__ static int row_warp(int warp) { return kOSplit == 1 ? warp : warp % kRowWarps; }
  __device__ __forceinline__ static int o_slice(int warp) { return kOSplit == 1 ? 0 : warp / kRowWarps; }
  static constexpr int kChunks = QKRows::kChunks;  // 16-byte chunks per Q / K smem row
  static constexpr int kSwizzleMask = QKRows::kSwizzleMask;

  static constexpr int kRowBytes = QKRows::kRowBytes;
  static constexpr int kQBytes = kBM * kRowBytes;
  static constexpr int kKVStageBytes = kBN * kRowBytes;        // one K stage (and V's when as wide)
  static constexpr int kVStageBytes = kBN * VRows::kRowBytes;  // one V stage
  static constexpr int kKVStages16 = kFp8KV ? 1 : kStages;     // 16-bit K (and V) stages the MMAs read
  static constexpr int kKBytes = kKVStages16 * kKVStageBytes;
  static constexpr int kVBytes = kKVStages16 * kVStageBytes;  // the V ring, after K's
  // FP8 KV cache: the e4m3 staging rings of K and V, kStages stages of [kBN][D] bytes each (after V).
  static constexpr int kKV8StageBytes = kBN * D;
  static constexpr int kKV8Bytes = kFp8KV ? kStages * kKV8StageBytes : 0;
  static constexpr int kKVChunks8 = D / 16;  // 16-byte chunks (16 e4m3) per staging row
  static constexpr int kSmemBytes = kQBytes + kKBytes + kVBytes + 2 * kKV8Bytes;

  static_assert(sizeof(Element) == 2 && sizeof(OutElement) == 2, "sm80: 16-bit Q/O (and MMAs) only");
  static_assert(kFp8KV || (sizeof(KVElement) == 2 && DTypeTraits<KVElement>::kIsBf16 == DTypeTraits<Element>::kIsBf16),
                "sm80: K/V are Element, or e4m3 (FP8 KV cache)");
  static_assert(!kFp8KV || (kDepth % 16 == 0 && kThreads % kKVChunks8 == 0 && (kBN * kKVChunks8) % kThreads == 0),
                "sm80 FP8 KV cache: whole 16-byte e4m3 chunks, split evenly over the threads");
  static_assert(kThreads == abi::num_threads(kBM, DV), "sm80: kNumThreads is abi::num_threads (row warps x O split)");
  static_assert(kWarpRows % 16 == 0 && kMTiles >= 1 && kMTiles == abi::m_tiles(kBM),
                "sm80: kBM must be 32 (O split only) or a multiple of 64 (16 rows per warp)");
  static_assert(kOSplit == 1 || kOCols % 64 == 0, "sm80: O slices start on whole swizzle periods (LaneOffset::plus)");
  static_assert(kBN % 16 == 0, "sm80: kBN must be a multiple of 16");
  static_assert(D % 16 == 0, "sm80: kPaddedDepth must be a multiple of 16");
  // A narrower V: 16-bit, whole 64-element rows (resolve() pads it so), never wider than Q and K.
  static_assert(!kNarrowV || (!kFp8KV && DV < D && DV % 64 == 0 && DV - kDepthV < 64),
                "sm80: a V narrower than Q and K (kDepthV) is 16-bit, padded to whole 64-element rows");
  static_assert(kNarrowV || kDepthV == kDepth, "sm80: a V as wide as Q and K has their depth");
  static_assert(kPack >= 1, "sm80: kPack is the GQA group when packed, else 1");
  static_assert(kStages >= 2, "sm80: cp.async ring needs kNumKVStages >= 2");
  static_assert(kSmemBytes == abi::smem_bytes(kBM, kBN, D, DV, kStages, kFp8KV) && kSmemBytes <= Config::kSmemBytes,
                "sm80: the layout is abi::smem_bytes, within the dynamic shared memory the host derived");
  static_assert(kMTiles * (kDTiles + kNTiles) * 4 == abi::accumulators(kBM, kBN, DV) &&
                    abi::accumulators(kBM, kBN, DV) <= abi::kMaxAccumulators,
                "sm80: accumulators exceed the register file; use kBM=64 for a V of 192 or 256 or a smaller kBN");
};

}  // namespace sm80
}  // namespace fa4
