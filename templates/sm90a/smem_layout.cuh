// Shared memory of the sm90a kernel: offsets of Q, the K / V rings, the extra rings of the FP8
// families, the own-O region and the barriers. Sizes come from sm90a/abi.h (smem_bytes is the one
// formula, which the host's Config::kSmemBytes also is).
#pragma once
#include "common/pipeline.cuh"
#include "sm90a/abi.h"
#include "common/persistent_walk.h"  // HandedUnit
#include "sm90a/shape.cuh"

namespace fa4 {
namespace sm90a {

// Offsets from the 1024-aligned dynamic base (abi.h smem_bytes: Q, rings, extra rings, own O, barriers):
//   [Q: kBM/64 warpgroups x Dp/64 blocks of 64x128B][K ring: S x Dp*e/128 blocks of BNx128B][V ring: same,
//   DpV wide]
//   [FP8: Vt ring, S x ceil(BN/128) blocks of Dp x 128B (kBN 160: the second block's rows hold 32
//   keys); FP8 KV cache: the e4m3 K and V rings][own O (kOwnO): kBM x DpV 16-bit][tail: the
//   barriers, then the page ring of kernels that gather pages (abi.h tail_bytes)]. Without kOwnO,
//   O is staged in the owning warpgroup's Q region, which is sized
//   for 16-bit O (an FP8 Q fills half of it).
template <class Config>
struct SmemLayout {
  using Sh = Shape<Config>;
  static constexpr u32 kQWgBytes = abi::q_bytes(Sh::kWgRows, Sh::kDp);  // one warpgroup's Q (and 16-bit O) region
  static constexpr u32 kQLoadBytes = Sh::kWgRows * Sh::kQChunks * Sh::kRowBytes;  // the Q tile's bytes in it
  // The bytes the Q boxes bring (the mbarrier's expect_tx): kQLoadBytes unless packed rows pad the tile.
  static constexpr u32 kQTxBytes = Sh::kQBoxRows * Sh::kQChunks * Sh::kRowBytes;
  static constexpr u32 kQBytes = abi::q_bytes(Sh::kBM, Sh::kDp);
  static constexpr u32 kKVStageBytes = abi::kv_stage_bytes(Sh::kFamily, Sh::kBN, Sh::kDp);  // a K stage the consumers read
  static constexpr u32 kKVLoadStageBytes = abi::kv_load_stage_bytes(Sh::kFamily, Sh::kBN, Sh::kDp);  // a K stage TMA fills
  // V's stages: as K's, or narrower for a V of its own depth (kDpV); none for latent KV (kVInK).
  static constexpr u32 kVStageBytes = abi::v_stage_bytes(Sh::kFamily, Sh::kBN, Sh::kDp, Sh::kDpV);
  static constexpr u32 kVLoadStageBytes = abi::kv_load_stage_bytes(Sh::kFamily, Sh::kBN, Sh::kDpV);
  // FP8's transposed V stage: whole SW128 blocks of [Dp rows][128 keys].
  static constexpr u32 kVtBlocks = abi::vt_blocks(Sh::kBN);
  static constexpr u32 kVtStageBytes = abi::vt_stage_bytes(Sh::kBN, Sh::kDp);
  // A stage of the ring P V reads: V's, FP8's transposed one, or K's (latent KV: V is its prefix).
  static constexpr u32 kPVStageBytes = Sh::kFp8 ? kVtStageBytes : Sh::kVInK ? kKVStageBytes : kVStageBytes;
  static constexpr u32 kQOffset = 0;
  static constexpr u32 kKOffset = kQOffset + kQBytes;
  static constexpr u32 kVOffset = kKOffset + Sh::kStages * kKVStageBytes;
  // Behind the K and V rings: FP8's transposed V ring, or an FP8 KV cache's e4m3 K and V rings.
  static constexpr u32 kExtraOffset = kVOffset + Sh::kStages * kVStageBytes;
  static constexpr u32 kExtraBytes = abi::extra_bytes(Sh::kFamily, Sh::kBN, Sh::kDp, Sh::kDpV, Sh::kStages);
  // What P V reads: V's ring, for FP8 the transposed ring behind it (kPVStageBytes a stage), or
  // for latent KV K's ring.
  static constexpr u32 kPVOffset = Sh::kFp8 ? kExtraOffset : Sh::kVInK ? kKOffset : kVOffset;
  // Where consumer warpgroup wg's columns of V start in a stage: its O slice's 64-column blocks
  // ([block][kBN rows][128 B], as TMA lands them).
  __device__ __forceinline__ static constexpr u32 pv_slice_offset(int wg) {
    return static_cast<u32>(Sh::o_slice(wg) * (Sh::kDpVWg / 64) * Sh::kBN * 128);
  }
  // Where TMA puts K and V: their rings, or an FP8 KV cache's e4m3 rings.
  static constexpr u32 kKLoadOffset = Sh::kKvFp8 ? kExtraOffset : kKOffset;
  static constexpr u32 kVLoadOffset = Sh::kKvFp8 ? kExtraOffset + Sh::kKLoadStages * kKVLoadStageBytes : kVOffset;
  // Persistent CTAs stage O in a region of their own where it fits (abi.h own_o; the host added it
  // to kSmemBytes): the next tile's Q load then overlaps this tile's epilogue. Otherwise O is
  // staged in the Q region.
  // O-split warpgroups (Shape::kOSplit > 1): P [64 rows][kBN] in SW128 blocks of 64 keys, then
  // each row's O correction and final 1 / sum (float), which the row group's first warpgroup
  // hands the others (consumer.cuh SharedP).
  static constexpr u32 kSharedPOffset = kExtraOffset + kExtraBytes;
  static constexpr u32 kSharedPBytes = abi::shared_p_bytes(Sh::kBN, Sh::kDpV);
  static constexpr u32 kSharedCorrOffset = kSharedPOffset + abi::shared_p_tile_bytes(Sh::kBN);
  static constexpr u32 kSharedInvOffset = kSharedCorrOffset + 64 * 4;
  static constexpr u32 kSharedMaxOffset = kSharedInvOffset + 64 * 4;  // alternating S (shared_p.cuh Baton)
  static constexpr u32 kSharedSumOffset = kSharedMaxOffset + 64 * 4;
  static constexpr u32 kOOffset = kSharedPOffset + kSharedPBytes;
  static constexpr bool kOwnO =
      abi::own_o(Sh::kFamily, Sh::kPersistent, Sh::kBM, Sh::kBN, Sh::kDp, Sh::kDpV, Sh::kStages, Config::kSmemBytes);
  static constexpr u32 kBarOffset = kOOffset + (kOwnO ? static_cast<u32>(abi::q_bytes(Sh::kBM, Sh::kDpV)) : 0u);
  // Row group g's Q tile (the warpgroups that split O read the same one).
  __device__ __forceinline__ static constexpr u32 q_offset(int g) { return kQOffset + static_cast<u32>(g) * kQWgBytes; }
  // Warpgroup g's O staging: its own O region ([64 rows] x DpV per warpgroup), or its Q region.
  static constexpr u32 kOWgBytes = abi::q_bytes(Sh::kWgRows, Sh::kDpV);
  __device__ __forceinline__ static constexpr u32 o_offset(int g) {
    return kOwnO ? kOOffset + static_cast<u32>(g) * kOWgBytes : q_offset(g);
  }
  // Gathering kernels: two slots of kBN page numbers behind the barriers (gather.cuh GatherState).
  static constexpr u32 kPageRingOffset = kBarOffset + abi::kBarrierBytes;
  static constexpr u32 kTotalBytes =
      kBarOffset + static_cast<u32>(abi::tail_bytes(Sh::kFamily, Sh::kPersistent, Sh::kDp, Sh::kBN));

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
    // FP8 KV cache only: the e4m3 rings TMA fills (full: tx bytes; empty: the converter warps); K's
    // is deeper for an e4m3 latent cache (Shape::kKLoadStages).
    pipe::Barriers<Sh::kKLoadStages> k_load;
    pipe::Barriers<Sh::kStages> v_load;
    // O split only (shared_p.cuh): P's one-slot ring from the S warpgroup (full: its 128 threads
    // arrive) to its partner (empty: its 128 threads).
    pipe::Barriers<1> p;
    // Dynamic persistent walk only (DynamicTiles; last, so no other offset moves): consumer
    // warpgroup g's next unit and its KV tiles, written by the producer before it arrives on q_full[g].
    HandedUnit unit[Sh::kNumConsumerWGs];
    // K stages in parts (Shape::kKParts > 1): stage i's parts 1 .. kKParts - 1 (part 0 is its full
    // barrier), at k_part[i * (kKParts - 1) + j - 1]; tx bytes like full.
    u64 k_part[Sh::kKParts > 1 ? Sh::kStages * (Sh::kKParts - 1) : 1];
    // Stage i's parts 1 .. kKParts - 1 (the producer arms them, the consumers wait on them).
    __device__ __forceinline__ u64* k_parts_of(u32 i) { return k_part + i * (Sh::kKParts - 1); }
  };
  // The ring P V acquires: V, or for FP8 its transposed copy.
  __device__ __forceinline__ static pipe::Barriers<Sh::kStages>* pv_barriers(Barriers* b) {
    return Sh::kFp8 ? &b->vt : &b->v;
  }
  // The rings TMA fills: K and V, or an FP8 KV cache's e4m3 rings (the converters feed K and V).
  __device__ __forceinline__ static pipe::Barriers<Sh::kKLoadStages>* k_load_barriers(Barriers* b) {
    if constexpr (Sh::kKvFp8)
      return &b->k_load;
    else
      return &b->k;
  }
  __device__ __forceinline__ static pipe::Barriers<Sh::kStages>* v_load_barriers(Barriers* b) {
    return Sh::kKvFp8 ? &b->v_load : &b->v;
  }
  static_assert(sizeof(Barriers) <= abi::kBarrierBytes, "barriers must fit in abi::kBarrierBytes");
  static_assert(kTotalBytes == static_cast<u32>(abi::smem_bytes(Sh::kFamily, Sh::kBM, Sh::kBN, Sh::kDp, Sh::kDpV,
                                                                Sh::kStages, Sh::kPersistent, kOwnO)),
                "layout must match the ABI smem formula (abi.h smem_bytes)");
  static_assert(Config::kSmemBytes >= kTotalBytes, "Config::kSmemBytes is smaller than the sm90a layout needs");
  static_assert(kTotalBytes <= 232448, "sm90a smem layout exceeds 227 KB: lower kNumKVStages or kBN");
  static_assert(kKVStageBytes % 1024 == 0 && kVStageBytes % 1024 == 0 && kQWgBytes % 1024 == 0,
                "blocks must stay 1024-aligned");
};

}  // namespace sm90a
}  // namespace fa4
