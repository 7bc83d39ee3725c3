// Compile-time shape of the sm90a kernel: the generated Config's members (the generator writes
// every one, generator/source.cpp), what follows from them, and the static_asserts that keep a
// Config inside what the kernel runs. The facts the host shares (legal kBN, shared-memory sizes,
// the own-O rule, register budgets) are in sm90a/abi.h; the shared-memory layout is
// sm90a/smem_layout.cuh, the tile walk sm90a/walk.cuh.
#pragma once
#include "common/prelude.cuh"
#include "common/mask.cuh"
#include "common/pipeline.cuh"
#include "common/sequence.cuh"
#include "sm90a/abi.h"

// Dev check only: 0 compiles out the run-time paged-KV and split-KV branches (kernels then serve
// only unpaged, unsplit launches), so the default path's SASS can be compared instruction for
// instruction with a build that predates them (dev/sass_stats.py on the two SASS dumps).
#ifndef FA4_SM90A_RUNTIME_VARIANTS
#define FA4_SM90A_RUNTIME_VARIANTS 1
#endif

namespace fa4 {
namespace sm90a {

template <bool B, class T, class F> struct IfT { using type = T; };
template <class T, class F> struct IfT<false, T, F> { using type = F; };

// What the consumer warpgroups' turns go around (Config::kPingPong: Tuning::pingpong 0, 1, 2;
// consumer.cuh Scheduler).
enum class Turn : int { kNone = 0, kGemm = 1, kSoftmax = 2 };

// Config::kPersistent (0: one CTA per Q tile, grid (m blocks, heads, batch); 1: persistent CTAs
// over PersistentTiles, grid (min(#SMs, total tiles), 1, 1); 2: stream-K persistent CTAs over
// SegmentTiles, grid (G, 1, 1); see README "Persistent mode" and "Stream-K decode"), as walk.cuh
// reads it.
template <class C> struct PersistentOf { static constexpr int value = C::kPersistent; };

// Config::kBottomTiles (0: Q tile m covers rows [m kBM, (m+1) kBM)): Q tiles counted from the last
// row (TileWork's kBottom), the host's choice (BackendPolicy::bottom_q_tiles: the built-in causal
// mask, unpacked, at kBM 192). The partial tile of a seqlen_q that 192 does not divide (every power
// of two) is then the first, lightest tile instead of the last, heaviest one (+4% bf16 d64, +3-4%
// FP8 d128 at S 2048, +7-9% FP8 d64 on an H100, docs/PERF.md run 41); the epilogue skips the padding
// rows above row 0.
// Config::kPack (1: one q head per CTA; p > 1: GQA packing, p q heads of one KV head share the
// Q tile, tile row r -> (query, head) by PackedRow<p, 64> in common/packed_rows.h: dense when p
// divides 64, else each warpgroup's 64 rows hold 64 / p whole queries and padding).
// Config::kCtasPerSm (1; 2 or 3: __launch_bounds__ asks for that many CTAs per SM, registers split for it).
template <class Config>
struct Shape {
  using Element = typename Config::Element;
  using OutElement = typename Config::OutElement;
  static constexpr int kDepth = Config::kDepth;
  static constexpr int kDp = Config::kPaddedDepth;
  // V and O (FA4Config::depth_v): kDepth / kDp, or a narrower 16-bit V (Q/K 192, V 128): V's ring
  // stages, P V's N, the O fragment, the epilogue and the split partials are then kDpV wide.
  static constexpr int kDepthV = Config::kDepthV;
  static constexpr int kDpV = Config::kPaddedDepthV;
  static constexpr int kBM = Config::kBM;
  static constexpr int kBN = Config::kBN;
  static constexpr int kStages = Config::kNumKVStages;
  // Stages of the ring TMA fills with K (abi.h k_load_stages): kStages, or twice that for an e4m3
  // latent cache. Set below, with the family.
  static constexpr int kWgRows = 64;           // rows of Q per consumer warpgroup (one wgmma M)
  // Consumer warpgroups: one per 64 rows (kRowWGs: 2 at kBM 128, 3 at kBM 192 (depth 64, FP8), 1 at
  // kBM 64 (decode)), times kOSplit where V is wider than one warpgroup's O (abi.h o_split: the
  // kOSplit warpgroups of a row group share its Q rows and each owns kDpVWg of O's columns).
  static constexpr int kOSplit = abi::o_split(kDpV);
  static constexpr int kRowWGs = kBM / kWgRows;
  static constexpr int kNumConsumerWGs = abi::consumer_wgs(kBM, kDpV);
  static constexpr int kDpVWg = kDpV / kOSplit;        // O columns of one warpgroup (its P V's N)
  static constexpr int kDepthVWg = kDepthV / kOSplit;  // ... of them real
  // Latent KV (abi.h v_in_k, MLA): V is K's first kDpV columns, read from K's stage; no V loads.
  static constexpr bool kVInK = abi::v_in_k(kDp, kDpV);
  // Consumer warpgroup wg: its 64-row group (Q region, rows, q_full) and its slice of O's columns.
  __device__ __forceinline__ static constexpr int row_wg(int wg) { return wg / kOSplit; }
  __device__ __forceinline__ static constexpr int o_slice(int wg) { return wg % kOSplit; }
  // FP8 (e4m3 Q, K, V): 1-byte elements, so a 128-byte swizzle row holds 128 of them; the grid walk
  // only, with a transposed copy of each V tile (helpers.cuh transpose_v: FP8 wgmma reads B K-major).
  static constexpr bool kFp8 = DTypeTraits<Element>::kIsFp8;
  static constexpr int kElemBytes = kFp8 ? 1 : 2;
  // Bytes of one swizzled Q / K / V row in shared memory (the TMA box's inner span and the wgmma
  // descriptors' swizzle): 128 (SW128), or 64 (SW64) for e4m3 at padded depth 64, whose rows are 64
  // bytes (padding them to 128 doubled the work of S = Q K^T and the K bytes: docs/PERF.md run 32).
  static constexpr int kRowBytes = swizzle_row_bytes(kDp, kElemBytes);
  static constexpr int kBlockElems = kRowBytes / kElemBytes;  // elements of one swizzle row
  static constexpr int kChunks = kDp / kBlockElems;          // swizzle blocks per Q / K / V row
  static constexpr int kPRegs = kBN / 2 * kElemBytes / 4;  // packed P registers per consumer thread (kBN/2 values)
  // FP8 KV cache (Config::KVElement e4m3 under a 16-bit Element): TMA brings e4m3 K / V stages, and
  // warps 1-3 of the producer warpgroup convert each into the 16-bit stage the consumers read
  // (helpers.cuh convert_loop), so the consumers run the 16-bit kernel; descale_k / descale_v as FP8's.
  using KVElement = typename Config::KVElement;
  static constexpr bool kKvFp8 = !kFp8 && DTypeTraits<KVElement>::kIsFp8;
  static constexpr abi::Family kFamily = abi::family_of(kFp8, kKvFp8);  // shared memory, registers, kBN
  static constexpr int kKvElemBytes = kKvFp8 ? 1 : kElemBytes;  // K / V in global memory and TMA stages
  static constexpr int kKLoadStages = abi::k_load_stages(kFamily, kDp, kDpV, kStages);
  // As kRowBytes: 64 for MLA's e4m3 latent rows (576 bytes), whose 16-bit stages keep 128.
  static constexpr int kKvRowBytes = swizzle_row_bytes(kDp, kKvElemBytes);
  static_assert((kRowBytes < kKvRowBytes ? kRowBytes : kKvRowBytes) == Config::kSwizzleBytes,
                "sm90a kernel: the narrower of the Q and K/V rows must be the host's swizzle rows");
  static constexpr int kKvChunks = kDp * kKvElemBytes / kKvRowBytes;  // swizzle blocks per K / V row loaded
  static constexpr int kKvBlockElems = kKvRowBytes / kKvElemBytes;
  static constexpr int kVChunks = kDpV * kKvElemBytes / kKvRowBytes;  // swizzle blocks per V row loaded
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
  // 16-bit P V runs only O's real columns too (kOWg: wgmma N 96 over the first 96 columns of V's
  // MN-major SW128 blocks), and the epilogue never stores O columns >= kDepthV.
  static constexpr int kQKDepth = kDepth;
  // O's fragment of one warpgroup, and its P V's wgmma N: the warpgroup's real columns for 16-bit
  // P V (an O 96 wide holds 48 floats, not 64); FP8's transposed V rows keep the padded width.
  static constexpr int kOWg = kFp8 ? kDpVWg : kDepthVWg;
  static_assert(kOWg % 16 == 0 && kOWg <= kDpVWg, "sm90a kernel: O's fragment is whole k16-wide column pairs");

  static constexpr bool kIntraWGOverlap = Config::kIntraWGOverlap != 0;
  // The consumer warpgroups take turns (named barriers, consumer.cuh Scheduler; no partner alone):
  // around their GEMM issue (kPingPong 1, FA3's ping-pong), or around their softmax (2, the simple
  // schedule): one warpgroup's exponentials at a time while the others' GEMMs run. FP8 d128 at kBM
  // 192: +2-7% over no turns, docs/PERF.md run 48 (7); with the overlap it measured neutral.
  static_assert(Config::kPingPong >= 0 && Config::kPingPong <= 2,
                "sm90a kernel: kPingPong is 0 (no turns), 1 (around the GEMMs) or 2 (around the softmax)");
  // O-split warpgroups do not take turns: one computes S and the softmax, the others follow its P.
  static constexpr Turn kTurns = kRowWGs > 1 ? static_cast<Turn>(Config::kPingPong) : Turn::kNone;
  // O split, alternating S (Tuning::alternate_s; shared_p.cuh Baton): the row group's warpgroups
  // take turns computing S = Q K^T and the softmax, one KV tile each (FlashMLA's schedule), so each
  // runs half the S GEMMs and every P V of its columns. 16-bit K/V: an FP8 KV cache's kernel keeps
  // one S warpgroup (its Q is converted in place once, by that warpgroup).
  static constexpr bool kAlternateS = Config::kAlternateS != 0;
  static_assert(!kAlternateS || (kOSplit == 2 && !kKvFp8),
                "sm90a kernel: alternating S needs O split over two warpgroups and 16-bit K/V");
  // K stages in parts (Tuning::k_parts; consumer.cuh KvLanded): TMA fills part j of a K stage (its
  // j-th kKvChunks / kKParts swizzle blocks) on a barrier of its own, and S = Q K^T issues each
  // part's k16 steps once it landed, so a stage's tail lands under the GEMM on its head (FlashMLA's
  // fine-grained TMA / GEMM pipelining). MLA's 16-bit latent under the S warpgroup: two stages of
  // 73.7 KB, one load in flight while the other is read (docs/PERF.md, the MLA decode section).
  static constexpr int kKParts = Config::kKParts;
  static_assert(kKParts == 1 || (kVInK && !kKvFp8 && !kAlternateS && kKvChunks % kKParts == 0),
                "sm90a kernel: K stages land in parts (kKParts > 1) for MLA's 16-bit latent with one S "
                "warpgroup, whole swizzle blocks a part");
  // Warpgroups that read K (and arrive on its empty barriers) per stage: each row group's first one
  // where O is split (alternating: the one whose turn the tile is).
  static constexpr int kKReaderWGs = kOSplit > 1 ? kRowWGs : kNumConsumerWGs;
  // Q in registers (consumer.cuh QFragments) for S = Q K^T in the KV loop of consumer_loop: the
  // 16-bit kernels at kBM 128 and padded depth 128 with the overlap (generator/backends/sm90a.cpp
  // says which).
  static constexpr bool kQInRegs = Config::kQInRegs != 0;
  // One f32 pair in kExp2EmulateEvery goes through FA4's polynomial exp2 (FMA pipe) instead of
  // MUFU; 0 = none. At d64 the exponentials, not the tensor cores, bound the softmax.
  static constexpr int kExp2EmulateEvery = Config::kExp2EmulateEvery;
  static constexpr bool kPersistent = Config::kPersistent != 0;
  static constexpr bool kStreamK = Config::kPersistent == 2;
  static constexpr bool kDynamic = Config::kPersistent == 3;  // DynamicTiles: units claimed at run time
  static constexpr int kPack = Config::kPack;
  static constexpr int kPackSlices = Config::kPackSlices;
  using Rows = PackedRow<kPack, 64>;  // tile row -> (query, head); spans are the warpgroups' 64 rows
  static constexpr int kQBoxRows = Rows::kSpanRows;  // rows one Q box loads: 64, or the real rows of a padded span
  static constexpr bool kBottomTiles = Config::kBottomTiles != 0;  // Q tiles end at the last row
  static constexpr bool kRuntimeVariants = FA4_SM90A_RUNTIME_VARIANTS != 0;  // paged / split branches
  // Paged launches whose pages no TMA box takes gather K / V rows (abi.h gathers, gather.cuh GatherTile).
  static constexpr bool kGathers = kRuntimeVariants && abi::gathers(kFamily, kPersistent, kDp);
  // Per-warpgroup key spans (consumer.cuh, WgKeySpan; Config::kWgSpans): a consumer
  // warpgroup's P V skips the keys of a KV tile its own 64 rows cannot see (masked kernels). Half
  // spans need whole k16 steps and kBN / 2 a generated wgmma N.
  static constexpr bool kWgSpans = Config::kWgSpans != 0;
  static constexpr bool kHalfSpans = kBN == 128 || kBN == 192 || kBN == 256;

  // setmaxnreg budgets (abi.h: FA3's splits, and why each).
  static constexpr int kCtasPerSm = Config::kCtasPerSm;
  static constexpr int kProducerRegs = abi::producer_regs(kFamily, kNumConsumerWGs, kCtasPerSm, kDp, kBN, kPersistent);
  static constexpr int kConsumerRegs = abi::consumer_regs(kFamily, kNumConsumerWGs, kCtasPerSm, kDp, kBN, kPersistent);
  static constexpr bool kFp8Consumers160 = abi::fp8_consumers_160(kFamily, kNumConsumerWGs, kDp, kBN);
  static constexpr int kNumThreads = abi::num_threads(kBM, kDpV);
  // Budgets above the launch's registers make setmaxnreg.inc wait forever (abi.h launch_regs).
  static_assert(abi::budgets_fit(kFamily, kBM, kCtasPerSm, kDp, kDpV, kBN, kPersistent),
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
  static_assert(kDpV == kDp || (!kFp8 && (!kKvFp8 || kVInK) && kDpV < kDp && kDpV % 64 == 0 && kDepthV % 16 == 0 &&
                                 kDepthV <= kDpV && kDpV - kDepthV < 64),
                "sm90a kernel: a V narrower than Q and K (kDepthV) is 16-bit, in whole 64-element swizzle blocks");
  static_assert(kDp == 64 || kDp == 128 || kDp == 192 || kDp == 256 || (kDp == 512 && kDpV == 512) || kVInK,
                "sm90a kernel: padded depth 64, 128, 192 or 256 (wgmma N of P V, 64-column swizzle blocks), 512 "
                "(O split over two warpgroups) or MLA's 576 (latent KV)");
  static_assert(kOSplit == 1 || (kDpVWg == 256 && kDepthV == kDpV && !kFp8 && (!kKvFp8 || kVInK) && kBM == 64 &&
                                 (!kPersistent || (Config::kPersistent == 1 && kAlternateS)) && !kQInRegs && !kWgSpans),
                "sm90a kernel: O split across warpgroups (V wider than 256) is 16-bit, 256 whole columns a "
                "warpgroup, kBM 64 (two consumer warpgroups on one Q tile), the grid walk (or, with alternating "
                "S, the persistent one: kPersistent 1)");
  static_assert(kDepth % 16 == 0 && kDepth <= kDp && kDp - kDepth < kKvBlockElems,
                "sm90a kernel: kDepth must be a multiple of 16 (one k16 step of Q K^T) in the last 128-byte "
                "block of kPaddedDepth (of the K/V rows: an FP8 KV cache pads a 16-bit Q to its e4m3 rows)");
  // kBN (abi.h bn_legal): per consumer thread S kBN/2 + P kBN/4 + O kDp/2 registers (the host picks kBN
  // so they fit: 176 at d128 is FA3's non-causal tile, 112 at d192 and 80 at d256 FA3's tiles there).
  static_assert(abi::bn_legal(kFamily, kBN, kBM, kDp),
                "sm90a kernel: kBN must be 64, 80, 96, 112, 128, 176 or 192 (a wgmma N generated by dev/gen_mma.py); "
                "FP8 128, or 160 at kBM 192 and padded depth 64; an FP8 KV cache 64 or 128");
  static_assert(kStages >= 2 && kStages <= 4, "sm90a kernel: kNumKVStages must be 2..4");
  static_assert(sizeof(Element) == kElemBytes && sizeof(OutElement) == 2, "sm90a kernel: 16-bit or e4m3 Q/K/V, 16-bit O");
  static_assert(!kFp8 || ((kDp == 64 || kDp % 128 == 0) && kDepth % 32 == 0 && !kStreamK),
                "sm90a kernel: FP8 takes a padded depth of 64 (SW64 rows) or whole 128-byte rows (128, 256) and the "
                "grid or persistent walk (kPersistent 0 or 1: the transposers walk whole tiles)");
  static_assert(!kFp8 || kCtasPerSm == 1, "sm90a kernel: FP8 runs one CTA per SM (the transposing producer needs 56 registers)");
  static_assert(!kKvFp8 || ((kDp == 128 || kVInK) && kBM != 192 && Config::kPersistent <= 1),
                "sm90a kernel: an FP8 KV cache takes padded depth 128 (e4m3 rows of one 128-byte atom) or MLA's "
                "latent (576: 64-byte rows), kBM 64 or 128 and the grid or persistent walk (kPersistent 0 or 1: the "
                "converters walk whole tiles)");
  static_assert(!kProducerHelpers || kNumConsumerWGs <= 2 || kFp8,
                "sm90a kernel: producer helpers leave registers for 2 consumer WGs (3 for FP8's fragments at depth 64)");
  // A consumer's Q box (5-D packed map) is kWgRows / kPack whole queries of kPack heads each (rounded
  // down: the rest of the 64 rows is padding, PackedRow).
  static_assert(kPack >= 1 && kPack <= kWgRows, "sm90a kernel: kPack (GQA heads per CTA) must be 1..64");
  static_assert(kPackSlices == 1 || (kPack > 1 && !kPersistent),
                "sm90a kernel: sliced GQA packing (kPackSlices > 1) runs the grid walk (the persistent walks "
                "count one packed CTA per KV head)");
  static_assert(Config::kPersistent >= 0 && Config::kPersistent <= 3, "sm90a kernel: kPersistent is 0, 1, 2 or 3");
  // The dynamic walk's units reach the consumers with Q (Barriers::unit) and the producer's warp
  // (one thread, or one gathering warp); helper warps and an O split's partner would need them too.
  static_assert(!kDynamic || (!kProducerHelpers && kOSplit == 1 && kPack == 1),
                "sm90a kernel: the dynamic walk (kPersistent 3) runs 16-bit K/V, unpacked, without an O split");
  static_assert(!(kPersistent && !kStreamK && kPack > 1),
                "sm90a kernel: the LPT persistent scheduler walks q heads; GQA packing needs kPersistent 0 or 2");
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
// O-split warpgroups (one row group, W = 2): P full (the S warpgroup arrives, its partner syncs:
// P, the corrections or the final 1 / sums written) and P empty (the partner's P V is done), 256
// threads each: ids 5 and 6.
template <int kNumWGs>
struct SharedPBarrier {
  static constexpr int kFull = EpilogueBarrier<kNumWGs>::value + kNumWGs, kEmpty = kFull + 1;
  static_assert(kEmpty < 16, "named barrier ids must be < 16");
};

// Whether this launch gathers (the host's kv_box_rows 0: paged, pages no TMA box takes; gather.cuh
// GatherTile), which the producer and the consumers (consumer.cuh KvLanded) both ask.
template <class Config>
__device__ __forceinline__ bool gathers_kv(const FwdParams& p) {
  return Shape<Config>::kGathers && gathers_kv_rows(p);
}

}  // namespace sm90a
}  // namespace fa4
