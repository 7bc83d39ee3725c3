// Compile-time shape of the sm90a kernel (from the generated Config), schedule switches,
// shared-memory layout, and the KV-tile iteration that producer and consumers share.
#pragma once
#include "common/prelude.cuh"
#include "common/mask.cuh"
#include "common/pipeline.cuh"
#include "common/sequence.cuh"
#include "common/tile_scheduler.cuh"

// Schedule switches (see README). Override per build with -D..., or per Config with
// `static constexpr int kIntraWGOverlap / kPingPong` members (those win). kPingPong: 0 no turns,
// 1 turns around each warpgroup's GEMM issue (FA3), 2 turns around its softmax (simple schedule).
#ifndef FA4_SM90A_INTRA_WG_OVERLAP
#define FA4_SM90A_INTRA_WG_OVERLAP 1
#endif
#ifndef FA4_SM90A_PINGPONG
#define FA4_SM90A_PINGPONG 1
#endif
// Dev check only: 0 compiles out the run-time paged-KV and split-KV branches (kernels then serve
// only unpaged, unsplit launches), so the default path's SASS can be compared instruction for
// instruction with a build that predates them (dev/sass_stats.py on the two SASS dumps).
#ifndef FA4_SM90A_RUNTIME_VARIANTS
#define FA4_SM90A_RUNTIME_VARIANTS 1
#endif

namespace fa4 {
namespace sm90a {

template <class...> struct VoidT { using type = void; };
template <bool B, class T, class F> struct IfT { using type = T; };
template <class T, class F> struct IfT<false, T, F> { using type = F; };

// Optional Config members, detected so the generated layer needs no change to use them.
template <class C, class = void> struct OverlapOf { static constexpr bool value = FA4_SM90A_INTRA_WG_OVERLAP != 0; };
template <class C> struct OverlapOf<C, typename VoidT<decltype(C::kIntraWGOverlap)>::type> {
  static constexpr bool value = C::kIntraWGOverlap;
};
// What the consumer warpgroups' turns go around (Tuning::pingpong 0, 1, 2; consumer.cuh Scheduler).
enum class Turn : int { kNone = 0, kGemm = 1, kSoftmax = 2 };

template <class C, class = void> struct PingPongOf { static constexpr int value = FA4_SM90A_PINGPONG; };
template <class C> struct PingPongOf<C, typename VoidT<decltype(C::kPingPong)>::type> {
  static constexpr int value = C::kPingPong;
};

// Config::kQInRegs (generator: sm90a q_in_registers; absent: off): S = Q K^T takes Q from registers.
template <class C, class = void> struct QInRegsOf { static constexpr bool value = false; };
template <class C> struct QInRegsOf<C, typename VoidT<decltype(C::kQInRegs)>::type> {
  static constexpr bool value = C::kQInRegs != 0;
};

template <class C, class = void> struct WgSpansOf { static constexpr bool value = false; };
template <class C> struct WgSpansOf<C, typename VoidT<decltype(C::kWgSpans)>::type> {
  static constexpr bool value = C::kWgSpans;
};

// kBottomTiles (absent or 0: Q tile m covers rows [m kBM, (m+1) kBM)): Q tiles counted from the last
// row (TileWork's kBottom), the host's choice (BackendPolicy::bottom_q_tiles: the built-in causal
// mask, unpacked, at kBM 192). The partial tile of a seqlen_q that 192 does not divide (every power
// of two) is then the first, lightest tile instead of the last, heaviest one (+4% bf16 d64, +3-4%
// FP8 d128 at S 2048, +7-9% FP8 d64 on an H100, docs/PERF.md run 41); the epilogue skips the padding
// rows above row 0.
template <class C, class = void> struct BottomTilesOf { static constexpr bool value = false; };
template <class C> struct BottomTilesOf<C, typename VoidT<decltype(C::kBottomTiles)>::type> {
  static constexpr bool value = C::kBottomTiles;
};

template <class C, class = void> struct EmulateOf { static constexpr int value = 0; };
template <class C> struct EmulateOf<C, typename VoidT<decltype(C::kExp2EmulateEvery)>::type> {
  static constexpr int value = C::kExp2EmulateEvery;
};

// kPersistent (absent or 0: one CTA per Q tile, grid (m blocks, heads, batch); 1: persistent CTAs
// over PersistentTiles, grid (min(#SMs, total tiles), 1, 1); 2: stream-K persistent CTAs over
// SegmentTiles, grid (G, 1, 1); see README "Persistent mode" and "Stream-K decode").
template <class C, class = void> struct PersistentOf { static constexpr int value = 0; };
template <class C> struct PersistentOf<C, typename VoidT<decltype(C::kPersistent)>::type> {
  static constexpr int value = C::kPersistent;
};

// kCtasPerSm (absent or 1; 2: __launch_bounds__ asks for two CTAs per SM, registers split for it).
template <class C, class = void> struct CtasPerSmOf { static constexpr int value = 1; };
template <class C> struct CtasPerSmOf<C, typename VoidT<decltype(C::kCtasPerSm)>::type> {
  static constexpr int value = C::kCtasPerSm;
};

// kPack (absent or 1: one q head per CTA; p > 1: GQA packing, p q heads of one KV head share the
// Q tile, tile row r -> (query, head) by PackedRow<p, 64> in common/packed_rows.h: dense when p
// divides 64, else each warpgroup's 64 rows hold 64 / p whole queries and padding).
template <class C, class = void> struct PackOf { static constexpr int value = 1; };
template <class C> struct PackOf<C, typename VoidT<decltype(C::kPack)>::type> {
  static constexpr int value = C::kPack;
};

template <class Config>
struct Shape {
  using Element = typename Config::Element;
  using OutElement = typename Config::OutElement;
  static constexpr int kDepth = Config::kDepth;
  static constexpr int kDp = Config::kPaddedDepth;
  static constexpr int kBM = Config::kBM;
  static constexpr int kBN = Config::kBN;
  static constexpr int kStages = Config::kNumKVStages;
  static constexpr int kWgRows = 64;           // rows of Q per consumer warpgroup (one wgmma M)
  static constexpr int kNumConsumerWGs = kBM / 64;  // 2 (kBM 128), 3 (kBM 192: depth 64, FP8) or 1 (kBM 64, decode)
  // FP8 (e4m3 Q, K, V): 1-byte elements, so a 128-byte swizzle row holds 128 of them; the grid walk
  // only, with a transposed copy of each V tile (load.cuh transpose_v: FP8 wgmma reads B K-major).
  static constexpr bool kFp8 = DTypeTraits<Element>::kIsFp8;
  static constexpr int kElemBytes = kFp8 ? 1 : 2;
  // Bytes of one swizzled Q / K / V row in shared memory (the TMA box's inner span and the wgmma
  // descriptors' swizzle): 128 (SW128), or 64 (SW64) for e4m3 at padded depth 64, whose rows are 64
  // bytes (padding them to 128 doubled the work of S = Q K^T and the K bytes: docs/PERF.md run 32).
  static constexpr int kRowBytes = kDp * kElemBytes < 128 ? kDp * kElemBytes : 128;
  static_assert(kRowBytes == Config::kSwizzleBytes, "sm90a kernel: Q/K/V rows must be the host's swizzle rows");
  static constexpr int kBlockElems = kRowBytes / kElemBytes;  // elements of one swizzle row
  static constexpr int kChunks = kDp / kBlockElems;          // swizzle blocks per Q / K / V row
  static constexpr int kPRegs = kBN / 2 * kElemBytes / 4;  // packed P registers per consumer thread (kBN/2 values)
  // FP8 KV cache (Config::KVElement e4m3 under a 16-bit Element): TMA brings e4m3 K / V stages, and
  // warps 1-3 of the producer warpgroup convert each into the 16-bit stage the consumers read
  // (load.cuh convert_loop), so the consumers run the 16-bit kernel; descale_k / descale_v as FP8's.
  using KVElement = typename KVElementOf<Config>::type;
  static constexpr bool kKvFp8 = !kFp8 && DTypeTraits<KVElement>::kIsFp8;
  static constexpr int kKvElemBytes = kKvFp8 ? 1 : kElemBytes;  // K / V in global memory and TMA stages
  static constexpr int kKvRowBytes = kDp * kKvElemBytes < 128 ? kDp * kKvElemBytes : 128;  // as kRowBytes
  static constexpr int kKvChunks = kDp * kKvElemBytes / kKvRowBytes;  // swizzle blocks per K / V row loaded
  static constexpr int kKvBlockElems = kKvRowBytes / kKvElemBytes;
  // The 16-bit type the MMAs read (Q, the converted K / V stages, P): Element, except under an FP8
  // KV cache with a bf16 Q, where it is fp16: e4m3 -> fp16 is one instruction per pair (to bf16 it
  // is four, and that conversion bounded the decode kernel: docs/PERF.md run 30), and every bf16
  // value of magnitude 2^-14 .. 65504 is an fp16 value. Each consumer warpgroup converts its Q tile
  // once in shared memory (consumer.cuh convert_q, saturating at +-65504) before its first S.
  using MmaElement = typename IfT<kKvFp8 && DTypeTraits<Element>::kIsBf16, half_t, Element>::type;
  static constexpr bool kQToMma = kKvFp8 && DTypeTraits<Element>::kIsBf16;
  // Q blocks that hold real columns: kChunks, except a 16-bit Q at depth 64 padded to an FP8 KV
  // cache's 128 (its second block is never loaded nor read: S = Q K^T runs over kDepth only).
  static constexpr int kQChunks = (kDepth + kBlockElems - 1) / kBlockElems;
  // Scores and O take the launch's descale factors (FP8 inputs or an FP8 KV cache).
  static constexpr bool kDescaled = kFp8 || kKvFp8;
  // Warps 1-3 of the producer warpgroup work (the V transposers, or the KV converters).
  static constexpr bool kProducerHelpers = kFp8 || kKvFp8;
  // Padded depth (kDepth 96 in kDp 128): the TMA maps end at kDepth, so the last chunk's columns
  // past it land as zeros. S = Q K^T runs only the k16 steps of real columns (kDepth / 16);
  // P V runs the whole kDp (wgmma N must cover whole 64-wide MN-major SW128 blocks), and the
  // epilogue never stores O columns >= kDepth.
  static constexpr int kQKDepth = kDepth;

  static constexpr bool kIntraWGOverlap = OverlapOf<Config>::value;
  // The consumer warpgroups take turns (named barriers, consumer.cuh Scheduler; no partner alone):
  // around their GEMM issue (kPingPong 1, FA3's ping-pong), or around their softmax (2, the simple
  // schedule): one warpgroup's exponentials at a time while the others' GEMMs run. FP8 d128 at kBM
  // 192: +2-7% over no turns, docs/PERF.md run 48 (7); with the overlap it measured neutral.
  static_assert(PingPongOf<Config>::value >= 0 && PingPongOf<Config>::value <= 2,
                "sm90a kernel: kPingPong is 0 (no turns), 1 (around the GEMMs) or 2 (around the softmax)");
  static constexpr Turn kTurns = kNumConsumerWGs > 1 ? static_cast<Turn>(PingPongOf<Config>::value) : Turn::kNone;
  // Q in registers (consumer.cuh QFragments) for S = Q K^T in the KV loop of consumer_loop: the
  // 16-bit kernels at kBM 128 and padded depth 128 with the overlap (generator/backends/sm90a.cpp
  // says which).
  static constexpr bool kQInRegs = QInRegsOf<Config>::value;
  // One f32 pair in kExp2EmulateEvery goes through FA4's polynomial exp2 (FMA pipe) instead of
  // MUFU; 0 = none. At d64 the exponentials, not the tensor cores, bound the softmax.
  static constexpr int kExp2EmulateEvery = EmulateOf<Config>::value;
  static constexpr bool kPersistent = PersistentOf<Config>::value != 0;
  static constexpr bool kStreamK = PersistentOf<Config>::value == 2;
  static constexpr int kPack = PackOf<Config>::value;
  static constexpr int kPackSlices = PackSlicesOf<Config>::value;
  using Rows = PackedRow<kPack, 64>;  // tile row -> (query, head); spans are the warpgroups' 64 rows
  static constexpr int kQBoxRows = Rows::kSpanRows;  // rows one Q box loads: 64, or the real rows of a padded span
  static constexpr bool kBottomTiles = BottomTilesOf<Config>::value;  // Q tiles end at the last row
  static constexpr bool kRuntimeVariants = FA4_SM90A_RUNTIME_VARIANTS != 0;  // paged / split branches
  // Per-warpgroup key spans (consumer.cuh, WgKeySpan; Config::kWgSpans, absent: off): a consumer
  // warpgroup's P V skips the keys of a KV tile its own 64 rows cannot see (masked kernels). Half
  // spans need whole k16 steps and kBN / 2 a generated wgmma N.
  static constexpr bool kWgSpans = WgSpansOf<Config>::value;
  static constexpr bool kHalfSpans = kBN == 128 || kBN == 192 || kBN == 256;

  // setmaxnreg budgets (FA3's splits): 2 consumer WGs: 128*24 + 256*240 = 64512 <= 65536;
  // 3 consumer WGs: 128*32 + 384*160 = 65536.
  // 1 consumer WG, 2 CTAs per SM (decode): 2 * (128*24 + 128*232) = 65536.
  // 1 consumer WG, 1 CTA per SM (decode at padded depth > 128, or a large kBN): FA3's 56 / 256
  // (128*56 + 128*256 = 39936). With 24 / 240 there ptxas spills ~470 B (packed GQA + custom mask
  // and score-mod, d128 kBN 128 or d192 kBN 64); 56 / 256 spills none.
  static constexpr int kCtasPerSm = CtasPerSmOf<Config>::value;
  static constexpr bool kSoloConsumer = kNumConsumerWGs == 1 && kCtasPerSm == 1;
  // FP8, 2 consumer WGs: the producer warpgroup also transposes V (16 + 16 registers of bytes in
  // flight): 128*56 + 256*224 = 64512, and P takes 16 fewer consumer registers than at 16 bits.
  // FP8 at depth 64, 3 consumer WGs: 128*56 + 384*152 = 65536 (S 64 + P 16 + O 32 per thread).
  // FP8, 3 consumer WGs, at 160 (kFp8Consumers160): 128*32 + 384*160 = 65536; the ldmatrix
  // transposer fits 32 (the producer spilled 12 B there before it, 4e1d4d4). Padded depth 128:
  // S 64 + P 16 + O 64, no intra-warpgroup overlap (152 spills 1 KB); depth 64 over kBN 160 (FA3's
  // 192 x 160): S 80 + P 20 + O 32 with the overlap (152 spilled 96 B and serialized wgmma).
  // FP8 KV cache, 1 consumer WG at 2 CTAs per SM: 2 * (128*56 + 128*200) = 65536.
  static constexpr bool kFp8Consumers160 = kFp8 && kNumConsumerWGs == 3 && (kDp == 128 || kBN == 160);
  static constexpr int kProducerRegs = kFp8Consumers160                ? 32
                                       : kSoloConsumer || kProducerHelpers ? 56
                                       : kNumConsumerWGs <= 2             ? 24
                                                                          : 32;
  static constexpr int kConsumerRegs = kCtasPerSm == 2                          ? (kProducerHelpers ? 200 : 232)
                                       : kSoloConsumer                           ? 256
                                       : kFp8Consumers160                        ? 160
                                       : kProducerHelpers && kNumConsumerWGs == 3 ? 152
                                       : kProducerHelpers                        ? 224
                                       : kNumConsumerWGs <= 2                    ? 240
                                                                                 : 160;
  static constexpr int kNumThreads = 128 * (1 + kNumConsumerWGs);
  // setmaxnreg moves registers through a per-CTA pool holding what the launch allocated: the
  // __launch_bounds__ count (65536 / (threads x CTAs per SM), at most 255, in units of 8) for every
  // thread. Budgets above it make setmaxnreg.inc wait forever: a hang, not an error (docs/PERF.md
  // run 46 (6): 128*64 + 256*224 against 384*168).
  static constexpr int kLaunchBound = 65536 / (kNumThreads * kCtasPerSm);
  static constexpr int kLaunchRegs = (kLaunchBound < 255 ? kLaunchBound : 255) / 8 * 8;
  static_assert(128 * kProducerRegs + 128 * kNumConsumerWGs * kConsumerRegs <= kLaunchRegs * kNumThreads,
                "sm90a kernel: the producer's and consumers' setmaxnreg budgets exceed the CTA's launch registers");

  static_assert(Config::kArch == 90, "sm90a kernel: Config::kArch must be 90");
  static_assert(kBM == 64 || kBM == 128 || kBM == 192,
                "sm90a kernel: kBM must be 128 (2 consumer warpgroups of 64 rows), 192 (3 warpgroups: depth 64, "
                "or FP8 at padded depth 128) or 64 (1 warpgroup: packed-GQA decode)");
  static_assert(kBM != 192 || kDp == 64 || (kFp8 && kDp == 128 && !kIntraWGOverlap),
                "sm90a kernel: kBM 192 (3 consumer warpgroups at 160 registers) is for head depth 64, and for FP8 "
                "at padded depth 128 without the intra-warpgroup overlap (S 64 + P 16 + O 64); 16-bit deeper "
                "heads do not fit: use kBM 128");
  static_assert(kBM != 192 || kBN <= 128 || !kIntraWGOverlap || kFp8Consumers160,
                "sm90a kernel: kBM 192 with kBN > 128 and the overlapped schedule does not fit 160 consumer "
                "registers (S kBN/2 + P kBN/4 + O 32 per thread; 400 B spills at kBN 192): use kBN 128 (FP8 at "
                "depth 64 takes kBN 160: P is kBN/8)");
  static_assert(!kQInRegs || (!kFp8 && !kKvFp8 && kDp == 128 && kNumConsumerWGs == 2 && kIntraWGOverlap),
                "sm90a kernel: Q in registers (kQInRegs) is for 16-bit kernels at kBM 128, padded depth 128, "
                "with the intra-warpgroup overlap");
  static_assert(kTurns != Turn::kSoftmax || !kIntraWGOverlap,
                "sm90a kernel: turns around the softmax (kPingPong 2) are for the simple schedule (kIntraWGOverlap 0)");
  static_assert(Config::kNumThreads == kNumThreads,
                "sm90a kernel: kNumThreads must be 128 * (1 + kBM / 64) (1 producer + kBM/64 consumer warpgroups)");
  static_assert(kDp == 64 || kDp == 128 || kDp == 192 || kDp == 256,
                "sm90a kernel: padded depth 64, 128, 192 or 256 (wgmma N of P V, 64-column swizzle blocks)");
  static_assert(kDepth % 16 == 0 && kDepth <= kDp && kDp - kDepth < kKvBlockElems,
                "sm90a kernel: kDepth must be a multiple of 16 (one k16 step of Q K^T) in the last 128-byte "
                "block of kPaddedDepth (of the K/V rows: an FP8 KV cache pads a 16-bit Q to its e4m3 rows)");
  // kBN: a multiple of 16 (one k16 step of P V) with a generated wgmma N (gen_mma.py NS); per consumer
  // thread S kBN/2 + P kBN/4 + O kDp/2 registers (generator/config.cpp picks kBN so they fit: 176 at d128
  // is FA3's non-causal tile, 112 at d192 and 80 at d256 FA3's tiles there).
  static_assert(kBN == 64 || kBN == 80 || kBN == 96 || kBN == 112 || kBN == 128 || kBN == 176 || kBN == 192 ||
                    kBN == 256 || (kFp8 && kBN == 160),
                "sm90a kernel: kBN must be 64, 80, 96, 112, 128, 176, 192 or 256, or 160 for FP8 (wgmma N generated by "
                "dev/gen_mma.py)");
  static_assert(kStages >= 2 && kStages <= 4, "sm90a kernel: kNumKVStages must be 2..4");
  static_assert(sizeof(Element) == kElemBytes && sizeof(OutElement) == 2, "sm90a kernel: 16-bit or e4m3 Q/K/V, 16-bit O");
  static_assert(!kFp8 || ((kBN == 128 || (kBN == 160 && kDp == 64 && kNumConsumerWGs == 3)) &&
                          (kDp == 64 || kDp % 128 == 0) && kDepth % 32 == 0 && !kStreamK),
                "sm90a kernel: FP8 takes kBN 128 (160 with kBM 192 at depth 64), a padded depth of 64 (SW64 rows) or "
                "whole 128-byte rows (128, 256) and the grid or persistent walk (kPersistent 0 or 1: the transposers "
                "walk whole tiles)");
  static_assert(!kFp8 || kCtasPerSm == 1, "sm90a kernel: FP8 runs one CTA per SM (the transposing producer needs 56 registers)");
  static_assert(!kKvFp8 || ((kBN == 64 || kBN == 128) && kDp == 128 && kBM != 192 && PersistentOf<Config>::value <= 1),
                "sm90a kernel: an FP8 KV cache takes kBN 64 or 128, padded depth 128 (e4m3 rows of one 128-byte "
                "atom), kBM 64 or 128 and the grid or persistent walk (kPersistent 0 or 1: the converters walk "
                "whole tiles)");
  static_assert(!kProducerHelpers || kNumConsumerWGs <= 2 || kFp8,
                "sm90a kernel: producer helpers leave registers for 2 consumer WGs (3 for FP8's fragments at depth 64)");
  // A consumer's Q box (5-D packed map) is kWgRows / kPack whole queries of kPack heads each (rounded
  // down: the rest of the 64 rows is padding, PackedRow).
  static_assert(kPack >= 1 && kPack <= kWgRows, "sm90a kernel: kPack (GQA heads per CTA) must be 1..64");
  static_assert(kPackSlices == 1 || (kPack > 1 && !kPersistent),
                "sm90a kernel: sliced GQA packing (kPackSlices > 1) runs the grid walk (the persistent walks "
                "count one packed CTA per KV head)");
  static_assert(PersistentOf<Config>::value >= 0 && PersistentOf<Config>::value <= 2, "sm90a kernel: kPersistent is 0, 1 or 2");
  static_assert(!(kPersistent && !kStreamK && kPack > 1),
                "sm90a kernel: the LPT persistent scheduler walks q heads; GQA packing needs kPersistent 0 or 2");
};

// Shared memory, offsets from the 1024-aligned dynamic base (ABI: 2*kBM*Dp + e*(2*S*kBN*Dp) + 1024,
// e = element bytes; FP8 adds the transposed V ring, S*ceil(kBN/128)*128*Dp; an FP8 KV cache its
// e4m3 K and V rings, 2*S*kBN*Dp, behind the 16-bit ones):
//   [Q: kBM/64 warpgroups x Dp/64 blocks of 64x128B][K ring: S x Dp*e/128 blocks of BNx128B][V ring: same]
//   [FP8: Vt ring, S x ceil(BN/128) blocks of Dp x 128B (kBN 160: the second block's rows hold 32
//   keys)][barriers, in the last 1024 bytes]. O is staged in the owning
//   warpgroup's Q region, which is sized for 16-bit O (an FP8 Q fills half of it).
template <class Config>
struct SmemLayout {
  using Sh = Shape<Config>;
  static constexpr u32 kQWgBytes = Sh::kWgRows * Sh::kDp * 2;  // one warpgroup's Q (and 16-bit O) region
  static constexpr u32 kQLoadBytes = Sh::kWgRows * Sh::kQChunks * Sh::kRowBytes;  // the Q tile's bytes in it
  // The bytes the Q boxes bring (the mbarrier's expect_tx): kQLoadBytes unless packed rows pad the tile.
  static constexpr u32 kQTxBytes = Sh::kQBoxRows * Sh::kQChunks * Sh::kRowBytes;
  static constexpr u32 kQBytes = Sh::kBM * Sh::kDp * 2;
  static constexpr u32 kKVStageBytes = Sh::kBN * Sh::kDp * Sh::kElemBytes;  // a stage the consumers read
  static constexpr u32 kKVLoadStageBytes = Sh::kBN * Sh::kDp * Sh::kKvElemBytes;  // a stage TMA fills
  // FP8's transposed V stage: whole SW128 blocks of [Dp rows][128 keys].
  static constexpr u32 kVtBlocks = (Sh::kBN + 127) / 128;
  static constexpr u32 kVtStageBytes = kVtBlocks * Sh::kDp * 128;
  // A stage of the ring P V reads: V's, or FP8's transposed one.
  static constexpr u32 kPVStageBytes = Sh::kFp8 ? kVtStageBytes : kKVStageBytes;
  static constexpr u32 kQOffset = 0;
  static constexpr u32 kKOffset = kQOffset + kQBytes;
  static constexpr u32 kVOffset = kKOffset + Sh::kStages * kKVStageBytes;
  // Behind the K and V rings: FP8's transposed V ring, or an FP8 KV cache's e4m3 K and V rings.
  static constexpr u32 kExtraOffset = kVOffset + Sh::kStages * kKVStageBytes;
  static constexpr u32 kExtraBytes = Sh::kFp8 ? Sh::kStages * kVtStageBytes : Sh::kKvFp8 ? 2 * Sh::kStages * kKVLoadStageBytes : 0;
  // What P V reads: V's ring, or for FP8 the transposed ring behind it (kPVStageBytes a stage).
  static constexpr u32 kPVOffset = Sh::kFp8 ? kExtraOffset : kVOffset;
  // Where TMA puts K and V: their rings, or an FP8 KV cache's e4m3 rings.
  static constexpr u32 kKLoadOffset = Sh::kKvFp8 ? kExtraOffset : kKOffset;
  static constexpr u32 kVLoadOffset = Sh::kKvFp8 ? kExtraOffset + Sh::kStages * kKVLoadStageBytes : kVOffset;
  // Persistent CTAs stage O in a region of their own where it fits in 227 KB (not d256): a
  // warpgroup then hands its Q region back right after its KV loop, and the next tile's Q load
  // overlaps this tile's epilogue instead of following it. Otherwise O is staged in the Q region.
  // The host decides (generator/config.cpp resolve): the region is there when kSmemBytes holds it.
  static constexpr u32 kOOffset = kExtraOffset + kExtraBytes;
  static constexpr bool kOwnO = Sh::kPersistent && Config::kSmemBytes >= kOOffset + kQBytes + 1024;
  static constexpr u32 kBarOffset = kOOffset + (kOwnO ? kQBytes : 0u);
  // Warpgroup g's Q tile.
  __device__ __forceinline__ static constexpr u32 q_offset(int g) { return kQOffset + static_cast<u32>(g) * kQWgBytes; }
  static constexpr u32 kTotalBytes = kBarOffset + 1024;

  struct Barriers {
    u64 q_full[Sh::kNumConsumerWGs];  // per consumer warpgroup, tx-count of its Q tile
    pipe::Barriers<Sh::kStages> k;
    pipe::Barriers<Sh::kStages> v;
    // Persistent mode only (last, so the other offsets do not move): consumer warpgroup g -> producer,
    // "Q region g free again" (all 128 threads arrive after their last Q read: the KV loop with kOwnO
    // or split partials, else the epilogue's O staging reads).
    u64 q_empty[Sh::kNumConsumerWGs];
    // Persistent mode: each consumer warp's loop-carried tile state (see consumer_loop).
    u32 carry[4 * Sh::kNumConsumerWGs];
    // FP8 only: the transposed V ring (full: every transposer thread arrives; empty: consumer warps).
    pipe::Barriers<Sh::kStages> vt;
    // FP8 KV cache only: the e4m3 rings TMA fills (full: tx bytes; empty: the converter warps).
    pipe::Barriers<Sh::kStages> k_load, v_load;
  };
  // The ring P V acquires: V, or for FP8 its transposed copy.
  __device__ __forceinline__ static pipe::Barriers<Sh::kStages>* pv_barriers(Barriers* b) {
    return Sh::kFp8 ? &b->vt : &b->v;
  }
  // The rings TMA fills: K and V, or an FP8 KV cache's e4m3 rings (the converters feed K and V).
  __device__ __forceinline__ static pipe::Barriers<Sh::kStages>* k_load_barriers(Barriers* b) {
    return Sh::kKvFp8 ? &b->k_load : &b->k;
  }
  __device__ __forceinline__ static pipe::Barriers<Sh::kStages>* v_load_barriers(Barriers* b) {
    return Sh::kKvFp8 ? &b->v_load : &b->v;
  }
  static_assert(sizeof(Barriers) <= 1024, "barriers must fit in the last 1024 bytes");
  static_assert(kTotalBytes == 2u * Sh::kBM * Sh::kDp * (kOwnO ? 2u : 1u) + 2u * Sh::kStages * kKVStageBytes +
                                    kExtraBytes + 1024u,
                "layout must match the ABI smem formula");
  static_assert(Config::kSmemBytes >= kTotalBytes, "Config::kSmemBytes is smaller than the sm90a layout needs");
  static_assert(kTotalBytes <= 232448, "sm90a smem layout exceeds 227 KB: lower kNumKVStages or kBN");
  static_assert(kKVStageBytes % 1024 == 0 && kQWgBytes % 1024 == 0, "blocks must stay 1024-aligned");
};

// The same value, marked warp-uniform for ptxas: REDUX writes a uniform register. ptxas keeps
// address and descriptor math on the uniform datapath only where it can prove the values (and the
// branches around them) warp-uniform; threadIdx.x / 128 and shared-memory loads it cannot. A
// non-uniform wait (mbarrier address or parity) inside the persistent tile loop moved every wgmma
// descriptor of the KV loop to vector registers with an R2UR before each HGMMA.
__device__ __forceinline__ u32 warp_uniform(u32 x) { return __reduce_max_sync(0xffffffffu, x); }

// Named barrier ids (0 is __syncthreads), W = kNumConsumerWGs. Scheduler barriers: consumer
// warpgroup g waits on kSchedBarrier + g before issuing its GEMMs; the previous warpgroup in the
// round robin ((g - 1) mod W) arrives on it after issuing its own (count 256 = the two parties).
// Epilogue barriers: EpilogueBarrier<W>::value + g, 128 threads (O staging of warpgroup g).
//   W = 2: scheduler 1, 2; epilogue 3, 4.   W = 3: scheduler 1, 2, 3; epilogue 4, 5, 6.
constexpr int kSchedBarrier = 1;
template <int kNumWGs>
struct EpilogueBarrier {
  static constexpr int value = kSchedBarrier + kNumWGs;
  static_assert(value + kNumWGs <= 16, "named barrier ids must be < 16");
};

}  // namespace sm90a
}  // namespace fa4
