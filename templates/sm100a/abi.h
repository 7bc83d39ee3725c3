// sm100a's compile-time facts, written once for the host (generator/backends/sm100a.cpp derives
// and checks configs with them) and the kernel (sm100a/traits.cuh lays out TMEM and shared memory
// and asserts with them). Compiled by the host compiler and by NVRTC, like sm90a/abi.h: plain C++,
// no headers beyond segments.h's FA4_HOST_DEVICE.
//   - TMEM columns: S0, S1 (BN each) and O0, O1 (V's padded depth each) in 512;
//   - the legal kBN;
//   - the shared-memory layout's size, and how many K chunk slots and e4m3 slots it holds.
// e: bytes of a Q/K/V element the MMAs read (2, or 1 for FP8); dp: the Q/K padded depth; dpv: V's
// and O's (FA4Config::depth_v; dp unless V is narrower: Q/K 192 with V 128).
#pragma once
#include "common/segments.h"

namespace fa4 {
namespace sm100a {
namespace abi {

// ---- TMEM -----------------------------------------------------------------------------------
constexpr int kTmemColumns = 512;  // the whole TMEM of one SM; one CTA per SM owns all of it
FA4_HOST_DEVICE constexpr int tmem_columns(int bn, int dpv) { return 2 * bn + 2 * dpv; }

// ---- kBN ------------------------------------------------------------------------------------
// S = Q K^T's MMA N (M 128 takes N % 16 up to 256) in whole 32-column tcgen05.ld batches of the
// softmax, at least 64, with S0, S1, O0 and O1 in TMEM.
FA4_HOST_DEVICE constexpr bool bn_legal(int bn, int dpv) {
  return bn % 32 == 0 && bn >= 64 && bn <= 256 && tmem_columns(bn, dpv) <= kTmemColumns;
}
// The largest: 192 at V depth 64, 128 at 128, 64 at 192.
FA4_HOST_DEVICE constexpr int bn_max(int dpv) {
  const int room = (kTmemColumns - 2 * dpv) / 2 / 32 * 32;
  return room < 256 ? room : 256;
}

// ---- Shared memory --------------------------------------------------------------------------
// Offsets from the 1024-aligned dynamic base (traits.cuh):
//   [Q0, Q1: bm x dp, 16-bit sized (O is staged there; an FP8 Q fills half)]
//   [K ring: k_slots chunks of bn x dp/qk_stages][V ring: stages x bn x dpv]
//   [FP8 KV cache: the e4m3 ring, f8_slots tiles of bn x dp bytes][correction factors: bm floats]
//   [barriers and the TMEM address: 1024]
FA4_HOST_DEVICE constexpr int q_bytes(int bm, int dp) { return 2 * bm * dp; }
FA4_HOST_DEVICE constexpr int k_chunk_bytes(int e, int bn, int dp, int qk_stages) { return e * bn * (dp / qk_stages); }
FA4_HOST_DEVICE constexpr int v_stage_bytes(int e, int bn, int dpv) { return e * bn * dpv; }
FA4_HOST_DEVICE constexpr int corr_bytes(int bm) { return 4 * bm; }
constexpr int kBarrierBytes = 1024;
// Without the e4m3 ring: the kernel's layout (Config::kSmemBytes is this, plus f8_slots x
// f8_slot_bytes under an FP8 KV cache).
FA4_HOST_DEVICE constexpr int smem_bytes(int e, int bm, int bn, int dp, int dpv, int stages, int qk_stages,
                                         int k_slots) {
  return q_bytes(bm, dp) + k_slots * k_chunk_bytes(e, bn, dp, qk_stages) + stages * v_stage_bytes(e, bn, dpv) +
         corr_bytes(bm) + kBarrierBytes;
}
// K chunk slots beside `stages` V stages in `limit` bytes: whole K stages (stages x qk_stages), or
// where those do not fit, as many chunks as do, at least one K tile's (S = Q K^T holds all of K_n's
// chunks): Q/K 192 with V 128 at BN 128 has Q 96 KiB + 2 V stages of 32 KiB + 4 chunks of 16 KiB,
// where 2 whole stages would need 160 KiB beside Q. 0: not even one K tile fits. The host asks
// with the arch's shared memory (and takes fewer than whole stages only for a V narrower than K);
// the kernel asks with Config::kSmemBytes, which holds exactly these.
FA4_HOST_DEVICE constexpr int k_slots(int e, int bm, int bn, int dp, int dpv, int stages, int qk_stages, int limit) {
  const int room = (limit - smem_bytes(e, bm, bn, dp, dpv, stages, qk_stages, 0)) / k_chunk_bytes(e, bn, dp, qk_stages);
  return room >= stages * qk_stages ? stages * qk_stages : room >= qk_stages ? room : 0;
}
// FP8 KV cache: one e4m3 K or V tile a slot (Dp/128 boxes of [bn][128 bytes]); what `limit` holds
// beyond the 16-bit layout (`smem16`), at most 4 (the host reserves 2: K(n) and V(n) in flight).
FA4_HOST_DEVICE constexpr int f8_slot_bytes(int bn, int dp) { return bn * dp; }
FA4_HOST_DEVICE constexpr int f8_slots(int smem16, int bn, int dp, int limit) {
  const int room = (limit - smem16) / f8_slot_bytes(bn, dp);
  return room < 4 ? room : 4;
}

}  // namespace abi
}  // namespace sm100a
}  // namespace fa4
