// Consumer (MMA + softmax) warpgroup mainloop of the sm90a kernel. Each of the kBM/64 consumer
// warpgroups owns 64 Q rows and walks the CTA's KV tile list (CtaWork) in the producer's order.
//
// Simple schedule, per tile n:   S = Q K(n)^T; wait | softmax(S) -> P, rescale O | O += P V(n); wait
// Overlapped (FA3 IntraWGOverlap): issue S(n) = Q K(n)^T and O += P(n') V(n') (n' = previous tile)
//   back to back, wait for S(n), run softmax(n) while P V(n') is still on the tensor cores, wait,
//   rescale O, pack P(n). The last P V runs after the loop.
// Ping-pong: warpgroup g waits on named barrier kSchedBarrier+g before issuing its GEMMs and
//   arrives on the next one's ((g+1) mod W) afterwards, so one's softmax overlaps the others'
//   GEMMs (FA3; W = 3 is a round robin 0 -> 1 -> 2 -> 0). Softmax turns (simple schedule): the
//   same round robin around each warpgroup's softmax instead, so the three warpgroups of kBM 192
//   take the exponential unit one at a time while the others' GEMMs run.
//
// Stage scopes: K and V are separate rings; every stage is released only after the wgmma that
// reads it has been waited for. All consumer warpgroups read every stage (empty count = 4 per WG),
// except where O is split over two warpgroups (V 512 wide, shared_p.cuh): the partner reads no K
// and P V's from the S warpgroup's P (partner_loop, follow_p).
#pragma once
#include "common/mbarrier.cuh"
#include "common/pipeline.cuh"
#include "common/smem.cuh"
#include "sm90a/smem_layout.cuh"
#include "sm90a/walk.cuh"
#include "sm90a/mma.cuh"
#include "sm90a/softmax.cuh"
#include "sm90a/epilogue.cuh"
#include "sm90a/shared_p.cuh"

namespace fa4 {
namespace sm90a {

// What a consumer does once a K / V stage landed (pipe::Consumer's OnLanded). The gathering warps'
// cp.async writes go through the generic proxy and arrive on their own (gather.cuh GatherState), so
// each consumer thread fences to the async proxy after its wait, before the wgmma that reads the
// stage: a uniform branch, taken only by launches that gather (false at compile time in kernels
// that cannot). TMA fills and an FP8 KV cache's converters (which fence before arriving) need nothing.
// K stages in parts (Shape::kKParts > 1, TMA only: a gathered stage lands whole on its full
// barrier): the full barrier is part 0's; a consumer that reads the stage whole (`whole`: the O
// split's partner, P V over V's columns) waits for the other parts here, the S warpgroup part by
// part as S = Q K^T reaches them (part()).
template <class Config>
struct KvLanded {
  static constexpr int kParts = Shape<Config>::kKParts;
  bool gathered;
  typename SmemLayout<Config>::Barriers* parts = nullptr;  // K's ring of a kernel with parts, else null
  bool whole = false;
  __device__ __forceinline__ void operator()(pipe::PipelineState st) const {
    if (gathered) fence_proxy_async();
    if (kParts > 1 && whole)
#pragma unroll
      for (int j = 1; j < kParts; ++j) part(st, j);
  }
  // Waits for part j > 0 of the stage at st.
  __device__ __forceinline__ void part(pipe::PipelineState st, int j) const {
    if (kParts > 1 && parts && !gathered) mbar_wait(parts->k_parts_of(st.index) + (j - 1), st.phase);
  }
};
// K's ring (parts: the barriers whose k_part it waits on; whole: every part at acquire) or V's.
template <class Config>
__device__ __forceinline__ KvLanded<Config> kv_landed(const FwdParams& p,
                                                      typename SmemLayout<Config>::Barriers* parts = nullptr,
                                                      bool whole = false) {
  return KvLanded<Config>{!Shape<Config>::kKvFp8 && gathers_kv<Config>(p), parts, whole};
}

// The consumer warpgroups' round robin of turns (named barriers) around one phase of their KV step:
// kAround = Turn::kGemm, the GEMM issue (FA3's ping-pong: one warpgroup issues while the others run
// their softmax); Turn::kSoftmax, the softmax (simple schedule: one warpgroup's exponentials at a
// time on the sub-partition's MUFU while the others' GEMMs run); Turn::kNone, no turns. Each step
// asks for a turn around its phase; only the scheduler's phase takes one, so the loops name the
// phases and the tuning picks which one turns.
template <Turn kAround, int kNumWGs>
struct Scheduler {
  static_assert(kNumWGs >= 1 && kNumWGs <= 3, "scheduler: 1 to 3 consumer warpgroups");
  static constexpr bool kOn = kAround != Turn::kNone;
  int wg;  // consumer warpgroup 0 .. kNumWGs-1
  // Barrier kSchedBarrier + g has two parties: warpgroup g (sync) and its predecessor in the
  // round robin (arrive), so its count is 256 for any number of warpgroups. The first warpgroup
  // gets the first turn: its own arrival plus its first sync complete the barrier's first phase.
  __device__ __forceinline__ void start() const {
    if (kOn && wg == 0) named_barrier_arrive(kSchedBarrier, 256);
  }
  template <Turn kPhase>
  __device__ __forceinline__ void wait_turn() const {
    if (kOn && kPhase == kAround) named_barrier_sync(kSchedBarrier + wg, 256);
  }
  template <Turn kPhase>
  __device__ __forceinline__ void pass_turn() const {
    if (kOn && kPhase == kAround) {
      const int next = kNumWGs == 2 ? (wg ^ 1) : (wg == kNumWGs - 1 ? 0 : wg + 1);
      named_barrier_arrive(kSchedBarrier + next, 256);
    }
  }
};

// Register fragments (O, S, packed P) start at zero.
template <class T, int N>
__device__ __forceinline__ void zero(T (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) r[i] = T(0);
}

// How much of KV tile n one consumer warpgroup's P V covers. The CTA walks every KV tile any of its
// rows can see, but one warpgroup's 64 rows may see fewer keys: on a causal diagonal the first
// warpgroup of kBM 128 sees half of the CTA's first tile, and at kBM 192 over kBN 128 a warpgroup
// can see none of it. P V skips the keys the warpgroup cannot see: it runs over the first half of
// the tile (kHalf) or not at all (kNone). A span wider than needed is always correct (P is zero
// there: the tile is masked per element, being partial or crossing seqlen_k), which the loops use
// where the exact tile is not at hand.
// S = Q K^T stays whole: a half-width S (N = kBN / 2) next to run-time P V spans made ptxas
// serialize every wgmma of the kernel (C7511 / C7515) for causal+softcap, window and chunked
// kernels, in every arrangement tried (a part of s's registers or its own, issued alone or
// overlapped). P V spans alone compile clean for causal attention without a score-mod (windows
// still serialize, d128 softcap spills), which is where the generator turns them on
// (derive_tuning; tests/compile_test.cpp fails on any serialized wgmma there).
enum class Span : int { kNone, kHalf, kFull };

template <class Config, class Mask>
struct WgKeySpan {
  using Sh = Shape<Config>;
  static constexpr bool kOn = Sh::kWgSpans && !Mask::kIsNone;
  int kv_end;  // one past the last key this warpgroup's rows may see
  __device__ __forceinline__ static WgKeySpan make(const CtaWork<Config, Mask>& w, int wg) {
    return {kOn ? w.kv_end_of_rows(w.q_lo + wg * Sh::kWgRows, Sh::kWgRows) : 0};
  }
  __device__ __forceinline__ Span of(int n) const {
    if constexpr (!kOn) return Span::kFull;
    // n opaque: where the walk steps by one tile (Mask::kContiguous), the compiler otherwise splits
    // the KV loop by span and ptxas serializes its wgmma (C7515, d192 and d256).
    const int visible = kv_end - static_cast<int>(opaque_u32(static_cast<u32>(n))) * Sh::kBN;
    if (visible <= 0) return Span::kNone;
    if (Sh::kHalfSpans && visible <= Sh::kBN / 2) return Span::kHalf;
    return Span::kFull;
  }
};

// O += P V over the warpgroup's span of the tile (no wgmma for kNone).
template <class Config>
__device__ __forceinline__ void gemm_pv_span(float (&o)[Shape<Config>::kOWg / 2], const u32 (&pr)[Shape<Config>::kPRegs],
                                             Span span, u32 v_addr) {
  using Sh = Shape<Config>;
  using E = typename Sh::MmaElement;
  if constexpr (Sh::kFp8) {  // v_addr: the transposed V stage
    if (span == Span::kFull) {
      gemm_pv_fp8<Sh::kDpVWg, Sh::kBN>(o, pr, v_addr);
    } else if constexpr (Sh::kHalfSpans) {
      if (span == Span::kHalf) gemm_pv_fp8<Sh::kDpVWg, Sh::kBN, Sh::kBN / 2>(o, pr, v_addr);
    }
  } else if (span == Span::kFull) {
    gemm_pv<E, Sh::kOWg, Sh::kBN>(o, pr, v_addr);
  } else if constexpr (Sh::kHalfSpans) {
    if (span == Span::kHalf) gemm_pv<E, Sh::kOWg, Sh::kBN, Sh::kBN / 2>(o, pr, v_addr);
  }
}

// Q's address for the wgmma descriptors: hoisted out of the KV loop at kBM 128 up to Dp 128;
// rebuilt per tile (opaque) where registers are tight (kBM 192, and Dp 192 where hoisting them
// spilled 36 B).
template <class Config>
struct QOperand {
  u32 addr;
  __device__ __forceinline__ u32 operator()() const {
    using Sh = Shape<Config>;
    return Sh::kNumConsumerWGs == 2 && Sh::kDp <= 128 ? addr : opaque_u32(addr);
  }
};

// The warpgroup's Q tile in registers (Shape::kQInRegs): wgmma A fragments, 4 registers per k16
// step (32 at depth 128), read once per tile by ldmatrix from Q's SW128 blocks, so each S = Q K^T
// of the KV loop reads only K from shared memory (RS wgmma). Warp w holds rows 16w .. 16w+15; lane
// l addresses row r8 = l % 8 (+ 8 for the odd matrices) of 8x8 matrix l / 8, whose order (rows
// 0-7 / 8-15, then columns 8-15) is the A fragment's a0..a3. In an SW128 block the 16-byte unit u
// of row r sits at unit u ^ (r % 8). docs/PERF.md run 49 (4) and run 50.
template <class Config>
struct QFragments {
  using Sh = Shape<Config>;
  static constexpr int kSteps = Sh::kQKDepth / 16;
  u32 r[4 * kSteps];
  __device__ __forceinline__ void load(u32 q_addr) {
    const int t = threadIdx.x & 127, lane = t & 31, mat = lane >> 3, r8 = lane & 7;
    const int row = 16 * (t >> 5) + r8 + 8 * (mat & 1);
#pragma unroll
    for (int k = 0; k < kSteps; ++k) {
      const int unit = (k % 4) * 2 + (mat >> 1);  // 4 k16 steps per 128-byte row
      u32 f[4];
      ldmatrix_x4(f, q_addr + (k / 4) * (64 * 128) + row * 128 + ((unit ^ r8) << 4));
#pragma unroll
      for (int j = 0; j < 4; ++j) r[4 * k + j] = f[j];
    }
  }
  __device__ __forceinline__ void gemm(float (&s)[Sh::kBN / 2], u32 k_stage) const {
    gemm_qk_rs<typename Sh::MmaElement, Sh::kBN, Sh::kQKDepth>(s, r, k_stage);
  }
};

// The Q operand of a kernel's KV loop: QFragments where Shape::kQInRegs, else QOperand.
template <class Config, bool kRegs = Shape<Config>::kQInRegs>
struct QOf {
  using type = QOperand<Config>;
  __device__ __forceinline__ static type make(u32 q_addr) { return type{q_addr}; }
};
template <class Config>
struct QOf<Config, true> {
  using type = QFragments<Config>;
  __device__ __forceinline__ static type make(u32 q_addr) {
    type f;
    f.load(q_addr);
    return f;
  }
};

// S = Q K^T on K ring stage `index`, Q from shared memory (QOperand) or from registers (QFragments).
// A stage in parts (Shape::kKParts > 1): before each part's first k16 step, part_landed(j) waits for it.
template <class Config, class PartLanded = NoParts>
__device__ __forceinline__ void issue_qk(float (&s)[Shape<Config>::kBN / 2], QOperand<Config> q, u32 k_addr, u32 index,
                                         PartLanded part_landed = {}) {
  using Sh = Shape<Config>;
  gemm_qk<typename Sh::MmaElement, Sh::kBN, Sh::kQKDepth, Sh::kRowBytes, Sh::kKParts>(
      s, q(), k_addr + index * SmemLayout<Config>::kKVStageBytes, part_landed);
}
template <class Config>
__device__ __forceinline__ void issue_qk(float (&s)[Shape<Config>::kBN / 2], const QFragments<Config>& q, u32 k_addr,
                                         u32 index) {
  q.gemm(s, k_addr + index * SmemLayout<Config>::kKVStageBytes);
}

// The GEMM steps of one consumer warpgroup. Each acquires its K / V stages in scope and releases
// them once the wgmma that reads them has been waited for; q (QOperand or QFragments) issues
// S = Q K^T from Q's address (evaluated after the K wait) or from its registers.

// S = Q K(n)^T alone, waited: every tile of the simple schedule, the first of the overlapped one.
template <class Config, class KRing, class Sched, class Q>
__device__ __forceinline__ void qk_step(float (&s)[Shape<Config>::kBN / 2], KRing& k_ring, const Sched& sched,
                                        Q q, u32 k_addr) {
  using Sh = Shape<Config>;
  auto ks = k_ring.acquire();  // part 0 of a stage in parts (KvLanded)
  sched.template wait_turn<Turn::kGemm>();
  fence_operand(s);
  wgmma_fence();
  if constexpr (Sh::kKParts > 1) {
    const pipe::PipelineState st = k_ring.state();  // K(n)'s, until the scope ends
    issue_qk<Config>(s, q, k_addr, ks.index(), [&](int j) { k_ring.landed().part(st, j); });
  } else {
    issue_qk<Config>(s, q, k_addr, ks.index());
  }
  wgmma_commit();
  sched.template pass_turn<Turn::kGemm>();
  wgmma_wait<0>();
  fence_operand(s);
}  // release K(n)

// O += P V alone, waited: every tile of the simple schedule, the last of the overlapped one.
template <class Config, class VRing>
__device__ __forceinline__ void pv_step(float (&o)[Shape<Config>::kOWg / 2], u32 (&pr)[Shape<Config>::kPRegs],
                                        VRing& v_ring, u32 v_addr, Span span) {
  auto vs = v_ring.acquire();
  fence_operand(o);
  fence_operand(pr);
  wgmma_fence();
  gemm_pv_span<Config>(o, pr, span, v_addr + vs.index() * SmemLayout<Config>::kPVStageBytes);
  wgmma_commit();
  wgmma_wait<0>();
  fence_operand(o);
  fence_operand(pr);
}  // release V

// The overlapped step (FA3 IntraWGOverlap): S(n) = Q K(n)^T and O += P V(n_prev) issued in one
// scheduler turn; softmax() runs on S(n) while P V is still on the tensor cores. kCorrectO: O is
// scaled by n_prev's correction (correct_o()) between the two issues, as FA3 orders it, while Q K^T
// runs; else the caller corrects O after the step, before the next turn's issue. Returns with both
// done: S(n) holds softmax's result, O and the P registers are free again. pv_span: the
// warpgroup's span of n_prev (an empty span still commits its wgmma group, empty, so the waits
// below count the same groups).
template <class Config, bool kCorrectO, class KRing, class VRing, class Sched, class Q, class CorrectFn, class SoftmaxFn>
__device__ __forceinline__ void overlapped_step(float (&s)[Shape<Config>::kBN / 2], float (&o)[Shape<Config>::kOWg / 2],
                                                u32 (&pr)[Shape<Config>::kPRegs], KRing& k_ring, VRing& v_ring,
                                                const Sched& sched, Q q, u32 k_addr, u32 v_addr,
                                                Span pv_span, CorrectFn correct_o, SoftmaxFn softmax) {
  using Sh = Shape<Config>;
  using L = SmemLayout<Config>;
  auto vs = v_ring.acquire();  // V(n_prev): loaded before K(n) by the producer
  {
    auto ks = k_ring.acquire();  // K(n)
    sched.template wait_turn<Turn::kGemm>();
    fence_operand(s);
    fence_operand(o);
    fence_operand(pr);
    wgmma_fence();
    issue_qk<Config>(s, q, k_addr, ks.index());
    wgmma_commit();
    if constexpr (kCorrectO) {
      correct_o();
      fence_operand(o);
      wgmma_fence();  // O's new values before the wgmma that accumulates into them
    }
    gemm_pv_span<Config>(o, pr, pv_span, v_addr + vs.index() * L::kPVStageBytes);
    wgmma_commit();
    sched.template pass_turn<Turn::kGemm>();
    wgmma_wait<1>();  // S(n) done; P V(n_prev) may still run
    fence_operand(s);
  }  // release K(n)
  softmax();
  wgmma_wait<0>();  // P V(n_prev) done: O and the P registers are free again
  fence_operand(o);
  fence_operand(pr);
}  // release V(n_prev)

// The overlapped schedule's KV tiles after the first (whose P is packed in pr and whose O needs no
// correction): per tile, S(n) with P V(n_prev) (kCorrectO: and n_prev's correction of O between
// the two, overlapped_step), softmax(n), else the correction of O, pack P(n). Returns with the last
// tile's correction applied and its P packed, leaving its P V to the caller, with span
// span.of(returned n + 1). The walk is descending, so n_prev >= n + 1 and span.of(n + 1) is at
// least n_prev's span (spans widen as n falls): correct without holding n_prev in a register.
template <class Config, class Mask, class ScoreMod, bool kCorrectO, class KRing, class VRing, class Sched, class Q>
__device__ __forceinline__ int kv_overlapped_tiles(const FwdParams& p, const CtaWork<Config, Mask>& w, int n,
                                                   KRing& k_ring, VRing& v_ring, const Sched& sched,
                                                   WgSoftmax<Config, Mask, ScoreMod>& sm,
                                                   float (&o)[Shape<Config>::kOWg / 2],
                                                   float (&s)[Shape<Config>::kBN / 2],
                                                   u32 (&pr)[Shape<Config>::kPRegs], Q q,
                                                   u32 k_addr, u32 v_addr, WgKeySpan<Config, Mask> span,
                                                   SharedP<Config>& share) {
  using Softmax = WgSoftmax<Config, Mask, ScoreMod>;
  float corr[2] = {1.0f, 1.0f};  // the first tile's: none (kCorrectO)
  auto at = w.after(n);
  while (w.has(at.n)) {
    const auto ahead = w.peek(at);  // the next tile's class, read while this one runs
    overlapped_step<Config, kCorrectO>(
        s, o, pr, k_ring, v_ring, sched, q, k_addr, v_addr, span.of(at.n + 1), [&] { rescale_o<Config>(o, corr); },
        [&] {
          sm.logits(s, at.n, w.needs_mask(at), p, w);
          sm.online(s, corr);
        });
    if constexpr (!kCorrectO) rescale_o<Config>(o, corr);
    Softmax::pack_p(s, pr);
    share.publish(pr, corr);
    at = w.after(at, ahead);
  }
  if constexpr (kCorrectO) rescale_o<Config>(o, corr);  // the last tile's, before its P V
  return at.n;
}

// KV loop of one tile for one consumer warpgroup (Q of the tile has landed; n = w.first_tile()
// is a visible tile). Rings and scheduler are passed in: the persistent mode carries their state
// across tiles, consumer_loop makes fresh ones per CTA.
template <class Config, class Mask, class ScoreMod, class KRing, class VRing, class Sched>
__device__ __forceinline__ void kv_mainloop(const FwdParams& p, const CtaWork<Config, Mask>& w, int n, KRing& k_ring,
                                            VRing& v_ring, const Sched& sched, WgSoftmax<Config, Mask, ScoreMod>& sm,
                                            float (&o)[Shape<Config>::kOWg / 2], float (&s)[Shape<Config>::kBN / 2],
                                            u32 (&pr)[Shape<Config>::kPRegs], u32 q_addr, u32 k_addr, u32 v_addr,
                                            int row_group, SharedP<Config>& share) {
  using Sh = Shape<Config>;
  using Softmax = WgSoftmax<Config, Mask, ScoreMod>;
  // Q (landed): its address for SS wgmma, or its fragments (Shape::kQInRegs).
  const typename QOf<Config>::type q = QOf<Config>::make(q_addr);
  const auto span = WgKeySpan<Config, Mask>::make(w, row_group);
  float corr[2];

  if constexpr (!Sh::kIntraWGOverlap) {
    for (auto at = w.pos(n); w.has(at.n);) {
      const auto ahead = w.peek(at);  // the next tile's class, read while this one runs
      n = at.n;
      qk_step<Config>(s, k_ring, sched, q, k_addr);
      sched.template wait_turn<Turn::kSoftmax>();
      sm.logits(s, n, w.needs_mask(at), p, w);
      sm.online(s, corr);
      rescale_o<Config>(o, corr);
      Softmax::pack_p(s, pr);
      share.publish(pr, corr);
      sched.template pass_turn<Turn::kSoftmax>();
      pv_step<Config>(o, pr, v_ring, v_addr, span.of(n));
      at = w.after(at, ahead);
    }
  } else {
    // Prologue: S(first) alone; O is zero so its correction is irrelevant.
    qk_step<Config>(s, k_ring, sched, q, k_addr);
    sm.logits(s, n, w.needs_mask(n), p, w);
    sm.online(s, corr);
    Softmax::pack_p(s, pr);
    share.publish(pr, corr);
    // O's correction between the GEMM issues (overlapped_step) with two consumer warpgroups, the
    // lazy rescale: +1.5-4.6% on the d128 kernels, +2-4% at d96, window, softcap, splits (run 51).
    // Not at kBM 192 (the eager rescale at 160 registers: 3-6% slower, run 51), nor beside P V
    // spans (the run-time span's branches around it made ptxas serialize the wgmma, C7515).
    constexpr bool kCorrectO = Sh::kNumConsumerWGs == 2 && !WgKeySpan<Config, Mask>::kOn;
    n = kv_overlapped_tiles<Config, Mask, ScoreMod, kCorrectO>(p, w, n, k_ring, v_ring, sched, sm, o, s, pr, q, k_addr,
                                                                v_addr, span, share);
    pv_step<Config>(o, pr, v_ring, v_addr, span.of(n + 1));  // Tail: P V of the last tile.
  }
}

// O += P V of the other warpgroup's last tile with P from the slot (alternating S): V of that
// tile acquired, its publication (of phase parity `parity`) taken, O corrected, the P V issued and
// waited for, with every wgmma this warpgroup committed before (the caller's S), then V released.
template <class Config, class Softmax, class VRing>
__device__ __forceinline__ void follow_baton(float (&o)[Shape<Config>::kOWg / 2], const Baton<Config>& baton,
                                             u32 parity, Softmax& sm, VRing& v_ring, u32 v_addr) {
  using Sh = Shape<Config>;
  auto vs = v_ring.acquire();
  const typename Baton<Config>::Taken t = baton.take(parity);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    sm.row[h].max = t.max[h];
    sm.row[h].sum = t.sum[h];
  }
  // Only S(i) may still run (pv_step waits for its own P V). Said to ptxas before the correction,
  // whose branch (rescale_o: skipped where no row of the warp moved its maximum) may differ between
  // the warpgroup's warps: without it ptxas put a wgmma wait inside that branch (C7517), which
  // synccheck reports as warps at different warpgroup instructions (undefined behaviour in PTX).
  wgmma_wait<1>();
  fence_operand(o);
  rescale_o<Config>(o, t.corr);
  fence_operand(o);
  wgmma_fence();
  gemm_pv_ss<typename Sh::MmaElement, Sh::kOWg, Sh::kBN>(o, baton.p_addr(),
                                                           v_addr + vs.index() * SmemLayout<Config>::kPVStageBytes);
  wgmma_commit();
  wgmma_wait<0>();
  fence_operand(o);
}

// The KV loop of an O split with alternating S (Shape::kAlternateS, shared_p.cuh Baton): both
// warpgroups of the row group run it, slice = o_slice(wg); the CTA's KV tile i (counted over every
// unit of a persistent walk) is slice i % 2's.
// On its own tile: S(i) = Q K(i)^T issued, then (unless i is the walk's first) the other's tile
// i - 1 followed (its P V from the slot, under S(i)), both waited; softmax(i) resumed from the
// state i - 1 left, O corrected, P(i) published, P V(i) from registers. On the other's tile: K(i)
// watched (latent KV: V(i) is its prefix) or skipped. Both acquire V tile by tile in walk order (i
// - 1 before i); K(i) is released by its owner. The other's publications all have the slot's
// phase parity 1 - slice (tile i's is i % 2), so the loop keeps two flags, not a tile count.
template <class Config, class Mask, class ScoreMod, class KRing, class VRing>
__device__ __forceinline__ void alternate_mainloop(const FwdParams& p, const CtaWork<Config, Mask>& w, int n,
                                                   KRing& k_ring, VRing& v_ring, WgSoftmax<Config, Mask, ScoreMod>& sm,
                                                   float (&o)[Shape<Config>::kOWg / 2],
                                                   float (&s)[Shape<Config>::kBN / 2], u32 (&pr)[Shape<Config>::kPRegs],
                                                   u32 q_addr, u32 k_addr, u32 v_addr, const Baton<Config>& baton,
                                                   int slice) {
  using Sh = Shape<Config>;
  using Softmax = WgSoftmax<Config, Mask, ScoreMod>;
  static_assert(Sh::kAlternateS && !Sh::kQInRegs, "alternate_mainloop: O split over two warpgroups, Q in shared memory");
  const QOperand<Config> q{q_addr};
  const u32 others = static_cast<u32>(slice) ^ 1u;  // the phase parity of the other's publications
  float corr[2];
  // Publication j of the CTA's life (its j-th KV tile, counted over the persistent walk's units too)
  // is o_slice j % 2's, so the warpgroup that read the last one publishes the next, as the slot's
  // ordering needs, across units too. Every KV tile takes one K stage (acquired or skipped), so the
  // K ring's position at the unit's start holds j's parity (0 on the grid walk).
  const pipe::PipelineState k0 = k_ring.state();
  bool mine = static_cast<u32>(slice) == ((k0.index + k0.phase * Sh::kStages) & 1u);
  bool follow = false;  // follow: the previous tile was the other's
  for (auto at = w.pos(n); w.has(at.n); mine = !mine) {
    const auto ahead = w.peek(at);  // the next tile's class, read while this one runs
    if (mine) {
      {
        auto ks = k_ring.acquire();
        fence_operand(s);
        wgmma_fence();
        issue_qk<Config>(s, q, k_addr, ks.index());
        wgmma_commit();
        if (follow)
          follow_baton<Config>(o, baton, others, sm, v_ring, v_addr);  // tile i - 1, under S(i)
        else
          wgmma_wait<0>();
        fence_operand(s);
      }  // release K(i)
      sm.logits(s, at.n, w.needs_mask(at), p, w);
      sm.online(s, corr);
      rescale_o<Config>(o, corr);
      Softmax::pack_p(s, pr);
      baton.publish(pr, corr, sm.row);
      pv_step<Config>(o, pr, v_ring, v_addr, Span::kFull);
      follow = false;
    } else {
      if constexpr (Sh::kVInK)
        k_ring.watch();
      else
        k_ring.skip();
      follow = true;
    }
    at = w.after(at, ahead);
  }
  if (follow) follow_baton<Config>(o, baton, others, sm, v_ring, v_addr);  // the walk's last tile was the other's
}

// The partner warpgroup of an O split (Shape::kOSplit > 1, shared_p.cuh): per KV tile, wait for
// the S warpgroup's P(n) and correction, correct O, O += P(n) V(n) over its columns with P from
// shared memory, hand P's slot back (shared_p.cuh). Latent KV (V is K's prefix): V's
// full barrier is the producer's plain arrival, so the partner also waits for K(n)'s bytes itself
// (k_watch, which releases nothing: the S warpgroup releases K; the producer refills the slot only
// after this P V released V).
template <class Config, class Mask, class KWatch, class VRing>
__device__ __forceinline__ void follow_p(const CtaWork<Config, Mask>& w, int n, KWatch& k_watch, VRing& v_ring,
                                         SharedPReader<Config>& share, float (&o)[Shape<Config>::kOWg / 2],
                                         u32 v_addr) {
  using Sh = Shape<Config>;
  using L = SmemLayout<Config>;
  for (bool first = true; w.has(n); n = w.next_tile(n), first = false) {
    auto p_slot = share.take();  // P(n) and n's correction
    if (!first) {                // O is zero before the first tile
      float corr[2];
      share.corr(corr);
      rescale_o<Config>(o, corr);
    }
    if constexpr (Sh::kVInK) k_watch.acquire();  // K(n) landed: V(n) is its prefix
    auto vs = v_ring.acquire();
    fence_operand(o);
    wgmma_fence();
    gemm_pv_ss<typename Sh::MmaElement, Sh::kOWg, Sh::kBN>(o, share.p_addr(), v_addr + vs.index() * L::kPVStageBytes);
    wgmma_commit();
    wgmma_wait<0>();
    fence_operand(o);
  }  // release V(n), then P's slot
}

// Under an FP8 KV cache with a bf16 Q the MMAs run in fp16 (Shape::MmaElement): the consumer
// warpgroup rewrites its Q tile in place, bf16 -> fp16, before its first S = Q K^T. Exact for
// |q| in 2^-14 .. 65504 (bf16's 8 significant bits fit fp16's 11); larger values saturate to
// +-65504, smaller ones round to fp16's subnormals (docs/VARIANTS.md, FP8 KV cache numerics).
template <class Config>
__device__ __forceinline__ void convert_q(u32 q_addr, int wg) {
  using Sh = Shape<Config>;
  constexpr int kVectors = SmemLayout<Config>::kQLoadBytes / 16;  // 16-byte vectors of the tile
  static_assert(kVectors % 128 == 0, "convert_q: whole vectors per thread");
  const int t = threadIdx.x % 128;
#pragma unroll
  for (int i = 0; i < kVectors / 128; ++i) {
    const u32 addr = q_addr + 16 * (t + 128 * i);
    u32 v[4];
    ld_shared_v4(addr, v);
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = bf16x2_to_f16x2(v[j]);
    st_shared_v4(addr, v);
  }
  fence_proxy_async();  // the generic writes before the wgmma reads (async proxy)
  named_barrier_sync(EpilogueBarrier<Sh::kNumConsumerWGs>::value + wg, 128);
}

// The partner warpgroup of an O split over the CTA's tile (the grid walk): follow_p, then its
// columns of O (epilogue_partner). It reads no Q and no K (but K's full barrier under latent KV).
template <class Config, class Mask, class Tiles>
__device__ __forceinline__ void partner_loop(const FwdParams& p, Tiles tiles, unsigned char* smem,
                                             typename SmemLayout<Config>::Barriers* bars, int wg) {
  using Sh = Shape<Config>;
  using L = SmemLayout<Config>;
  static_assert(!Tiles::kPersistent, "O-split warpgroups run the grid walk");
  const u32 base = smem_u32(smem);
  const u32 v_addr = base + L::kPVOffset + L::pv_slice_offset(wg);
  for (;; tiles.advance()) {
    if (!tiles.valid(p, Tiles::loop_zero())) break;
    const CtaWork<Config, Mask>& w = tiles.template work<Sh::kBM, Sh::kBN, Sh::kPack, Sh::kBottomTiles, Sh::kWgRows>(p);
    if (!w.valid) continue;  // uniform over the CTA, as the S warpgroup's
    SharedPReader<Config> share = SharedPReader<Config>::make(base, bars);
    float o[Sh::kOWg / 2];
    zero(o);
    const int n = w.first_tile();
    if (w.has(n)) {
      pipe::Consumer<Sh::kStages, pipe::NoRelease, KvLanded<Config>> k_watch(&bars->k,
                                                                             kv_landed<Config>(p, bars, true));
      pipe::Consumer<Sh::kStages, pipe::ArriveOnePerWarp, KvLanded<Config>> v_ring(L::pv_barriers(bars),
                                                                                    kv_landed<Config>(p));
      follow_p<Config>(w, n, k_watch, v_ring, share, o, v_addr);
    }
    epilogue_partner<Config>(p, w, wg, o, share);
  }
}

// A consumer's work of the walk's current unit: as the walk decodes it, or (DynamicTiles) as the
// producer handed it. (decltype(auto): the grid walk's CtaWork by reference, as before.)
template <class Config, class Mask, class Tiles>
__device__ __forceinline__ decltype(auto) tile_work(const FwdParams& p, const Tiles& tiles) {
  using Sh = Shape<Config>;
  if constexpr (Tiles::kDynamic)
    return tiles.template handed_work<Sh::kBM, Sh::kBN, Sh::kPack, Sh::kBottomTiles, Sh::kWgRows>(p);
  else
    return tiles.template work<Sh::kBM, Sh::kBN, Sh::kPack, Sh::kBottomTiles, Sh::kWgRows>(p);
}

// Persistent mode: per-warp word in shared memory, word = (word & keep) + add, by every lane of
// the warp (all lanes hold the same value; the syncwarps order the reads before any write).
__device__ __forceinline__ void update_carry(u32 addr, u32 keep, u32 add) {
  const u32 v = ld_shared_u32(opaque_u32(addr));
  __syncwarp();
  st_shared_u32(addr, (v & keep) + add);
  __syncwarp();
}

// The consumer loop over the CTA's tile walk (TileWalker: GridTiles, PersistentTiles or
// SegmentTiles), the same sequence the producer walks.
// Grid (one unit, Tiles::kPersistent false): if the tile has a visible KV tile, wait for Q
// (q_full, parity 0), KV loop; epilogue (O = 0 and LSE = -inf when no key is visible: the
// producer then loads nothing, not even Q). Rings and scheduler live for this tile only.
// Persistent: per tile i: wait q_full[rg] (rg: the warpgroup's row group, row_wg; parity i & 1;
// the producer signals it for every tile, by TMA bytes or, for a tile without KV tiles or Q rows, a
// plain arrival; DynamicTiles: the wait comes first, and the unit is read from Barriers::unit[rg]
// after it); if the tile has Q rows: KV loop, epilogue. Every thread arrives on q_empty[rg] (count
// 128 per warpgroup of the row group) once its Q reads are done: right after the KV loop when O is
// staged in its own region (SmemLayout::kOwnO) or not staged at all (split partials, an O split);
// else after the epilogue's O staging in the Q region and a fence.proxy.async that orders those
// generic-proxy smem accesses before the next TMA write. The K/V consumer rings and the ping-pong
// turn chain run on across tiles: Scheduler::start() once, so warpgroup W-1's last pass_turn of a
// tile is warpgroup 0's first turn of the next (every warpgroup takes the same number of turns per
// tile).
template <class Config, class Mask, class ScoreMod, class Tiles>
__device__ __forceinline__ void consumer_loop(const FwdParams& p, Tiles tiles, unsigned char* smem,
                                              typename SmemLayout<Config>::Barriers* bars, int wg) {
  using Sh = Shape<Config>;
  using L = SmemLayout<Config>;
  using Softmax = WgSoftmax<Config, Mask, ScoreMod>;
  constexpr int kBN = Sh::kBN;
  constexpr bool kPersistent = Tiles::kPersistent;
  using Release = pipe::ArriveOnePerWarp;

  // The warpgroup's 64-row group: its Q tile and rows (the kOSplit warpgroups of a group share them).
  const int rg = Sh::row_wg(wg);
  const u32 base = smem_u32(smem);
  const u32 q_addr = base + L::q_offset(rg);
  const u32 o_addr = base + L::o_offset(rg);  // O staging (not used where O is split: epilogue)
  const u32 k_addr = base + L::kKOffset, v_addr = base + L::kPVOffset + L::pv_slice_offset(wg);

  float o[Sh::kOWg / 2];  // the warpgroup's columns of O (V's width, or its slice of it)
  float s[kBN / 2];
  u32 pr[Sh::kPRegs];
  zero(s);
  zero(pr);  // S and P: written before read in every tile

  if constexpr (Sh::kOSplit > 1 && !Sh::kAlternateS) {
    if (Sh::o_slice(wg) != 0) return partner_loop<Config, Mask>(p, tiles, smem, bars, wg);
  }
  const Scheduler<Sh::kTurns, Sh::kNumConsumerWGs> sched{wg};
  // Persistent: tile state carried from one tile to the next, packed in one word: bits 0-1 ring
  // index, bit 2 ring phase (the K and V consumer rings are in the same state at a tile boundary:
  // each tile acquires as many K as V stages), bits 3.. the tile iteration. At 160 registers (kBM
  // 192) every register live across the KV loop counts, so the word lives in shared memory, one
  // per warp (every lane reads it at the top of a tile and writes the same value, update_carry).
  // The loop bound is recomputed from the parameters every tile (opaque zero) rather than held.
  u32 carry_addr = 0;
  if constexpr (kPersistent) {
    sched.start();
    carry_addr = smem_u32(&bars->carry[threadIdx.x / 32 - 4]);
    st_shared_u32(carry_addr, 0u);
    __syncwarp();
  }
  for (;; tiles.advance()) {
    u32 carry = 0;
    if constexpr (kPersistent) {
      carry = warp_uniform(ld_shared_u32(opaque_u32(carry_addr)));
      tiles.iter = static_cast<int>(carry >> 3);
    }
    if constexpr (Tiles::kDynamic) {  // the unit comes with Q (or, past the last unit, alone)
      mbar_wait(&bars->q_full[rg], static_cast<u32>(tiles.iter) & 1u);
      const HandedUnit u = bars->unit[rg];
      tiles.take({static_cast<int>(warp_uniform(static_cast<u32>(u.t))),
                  static_cast<int>(warp_uniform(static_cast<u32>(u.n_begin))),
                  static_cast<int>(warp_uniform(static_cast<u32>(u.n_end))), 0});
    }
    if (!tiles.valid(p, Tiles::loop_zero())) break;
    const CtaWork<Config, Mask>& w = tile_work<Config, Mask>(p, tiles);
    // Q's region is free once the KV loop is done unless the epilogue stages O in it (uniform; an O
    // split stores its columns straight from the fragment, epilogue.cuh store_o_slice).
    const bool early_q_release =
        kPersistent && (L::kOwnO || Sh::kOSplit > 1 || (Sh::kRuntimeVariants && writes_partials<Config>(p, w)));
    if constexpr (kPersistent && !Tiles::kDynamic) mbar_wait(&bars->q_full[rg], static_cast<u32>(tiles.iter) & 1u);
    if (w.valid) {  // uniform over the CTA; no Q rows (varlen tail): Q handshake only
      zero(o);
      SharedP<Config> share = SharedP<Config>::make(base, bars);  // O split: P, corrections, 1 / sums to the partner
      Softmax sm;
      sm.init(p, w.q_lo, rg);
      sm.descale(p, w);
      const int n = w.first_tile();
      if (w.has(n)) {  // else: no visible key in the tile, O = 0 and LSE = -inf below
        const pipe::PipelineState st{carry & 3u, (carry >> 2) & 1u};
        pipe::Consumer<Sh::kStages, Release, KvLanded<Config>> k_ring(&bars->k, st, kv_landed<Config>(p, bars)),
            v_ring(L::pv_barriers(bars), st, kv_landed<Config>(p));
        if constexpr (!kPersistent) {
          sched.start();
          mbar_wait(&bars->q_full[rg], 0);
        }
        if constexpr (Sh::kQToMma) convert_q<Config>(q_addr, wg);  // this tile's Q, landed
        if constexpr (Sh::kAlternateS)
          alternate_mainloop<Config, Mask, ScoreMod>(p, w, n, k_ring, v_ring, sm, o, s, pr, q_addr, k_addr, v_addr,
                                                     Baton<Config>::make(base, bars), Sh::o_slice(wg));
        else
          kv_mainloop<Config, Mask, ScoreMod>(p, w, n, k_ring, v_ring, sched, sm, o, s, pr, q_addr, k_addr, v_addr, rg,
                                              share);
        if constexpr (kPersistent) {
          const pipe::PipelineState e = k_ring.state();
          update_carry(carry_addr, ~7u, e.index | (e.phase << 2));
        }
      }
      // Hand Q's region back before the epilogue, so the next tile's Q load overlaps it.
      if (early_q_release) mbar_arrive(&bars->q_empty[rg]);
      if constexpr (kPersistent && !Mask::kIsNone) {
        // Masked: the sequence offsets (four 64-bit values) are re-derived after the KV loop
        // (opaque batch, so not CSE'd) instead of held across it; kBM 192 Causal+Softcap spills
        // 64 B otherwise (nvcc). Without a mask this choice spills instead, so it is not taken.
        CtaWork<Config, Mask> we = w;
        we.seq = SeqInfo::make(p, static_cast<int>(opaque_u32(static_cast<u32>(w.seq.batch))), w.seq.q_head);
        epilogue<Config, Mask, ScoreMod>(p, we, wg, o, sm, o_addr, share);
      } else {
        epilogue<Config, Mask, ScoreMod>(p, w, wg, o, sm, o_addr, share);
      }
      if constexpr (kPersistent && !L::kOwnO) fence_proxy_async();  // O staged in Q's region, which TMA writes next
    }
    if constexpr (kPersistent) {
      if (!early_q_release || !w.valid) mbar_arrive(&bars->q_empty[rg]);
      update_carry(carry_addr, ~0u, 8u);  // next iteration
    }
  }
}

}  // namespace sm90a
}  // namespace fa4
