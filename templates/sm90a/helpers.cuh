// The producer warpgroup's helper warps (warps 1-3, Shape::kProducerHelpers): FP8's V transposers
// and an FP8 KV cache's converters, between the rings TMA fills and the ones the consumers read.
#pragma once
#include "common/mbarrier.cuh"
#include "common/pipeline.cuh"
#include "common/smem.cuh"
#include "sm90a/smem_layout.cuh"
#include "sm90a/walk.cuh"

namespace fa4 {
namespace sm90a {

// ---- FP8: V transposed in shared memory ----
// FP8 wgmma reads B K-major only, and V arrives [keys][depth]. Three warps of the producer
// warpgroup (warps 1-3; warp 0 issues the TMA loads) copy each V stage to a Vt stage, [depth][keys]
// in SW128 blocks of [kDp rows][128 keys], through the rings v (TMA -> transposers) and vt
// (transposers -> consumers); kBN 160 fills a second block's first 32 keys (SmemLayout::
// kVtStageBytes). Within each 16-key chunk of a row the keys are permuted as pack_p
// (softmax.cuh) leaves P: logical key 4t + i is tile key 8(i/2) + 2t + i%2, so P V needs no shuffle.
// Warps 1-3 of the producer warpgroup: FP8's V transposers, or an FP8 KV cache's converters.
constexpr int kHelperThreads = 96;

__device__ __forceinline__ u32 byte_perm(u32 a, u32 b, u32 sel) {
  u32 r;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
  return r;
}

// One V stage (src) -> one Vt stage (dst) by thread t of kHelperThreads, in units of 16 keys (key
// block kb) x 32 depths (depth group dg), a warp at a time: the V bytes are read as b16 pairs of
// depths by one transposing ldmatrix.x4 (matrices: keys 0-7 / 8-15 of the block x depths 0-15 /
// 16-31 of the group), so lane l holds keys 2t, 2t+1 (matrix 0, 2) and 8+2t, 9+2t (matrix 1, 3) of
// depths 2c, 2c+1 (t = l % 4, c = l / 4); four byte permutes make one word per depth of exactly
// pack_p's key order, and one stmatrix.x4 writes them as Vt rows: about 15 warp instructions per
// unit, against 32 for the 4-byte reads, byte transposes and per-read swizzle arithmetic this
// replaced, most of the FP8 kernel's integer instructions (docs/PERF.md runs 33-34; cuDNN's FP8
// kernel transposes with LDSM/STSM too).
// Conflicts: a read phase takes 8 rows (keys) of one 16-byte depth chunk, each at its own swizzled
// chunk (SW128: c ^ k % 8; SW64 rows: 64 bytes, c ^ (k / 2) % 4, half a row apart): all 32 banks.
// A write phase's 8 Vt rows are depths whose d % 8 differ (lanes c >= 4 store the odd depth of
// their pair in the even matrix: depths 0 2 4 6 9 11 13 15 and 1 3 5 7 8 10 12 14), so their
// chunks kb ^ d % 8 differ too.
template <class Config>
__device__ __forceinline__ void transpose_v(u32 src, u32 dst, int t) {
  using Sh = Shape<Config>;
  constexpr int kBN = Sh::kBN, kDp = Sh::kDp, kRow = Sh::kRowBytes;
  constexpr u32 kWarps = kHelperThreads / 32;
  static_assert(kBN % 32 == 0 && kDp % 32 == 0 && kHelperThreads % 32 == 0,
                "transpose_v: pairs of 16-key blocks, whole depth groups");
  static_assert(kRow == 128 || kRow == 64, "transpose_v: SW128 or SW64 V rows");
  // opaque: the lane's bases below are recomputed per stage (a few instructions) rather than hoisted
  // out of the walk and held across it, which the 32-register producer warpgroup cannot afford.
  const u32 lane = opaque_u32(static_cast<u32>(t)) % 32, m = lane / 8, j = lane % 8;  // row j of matrix m
  // Unit-invariant parts (unsigned: the unit's / and % are shifts). The read row: key 16 kb + 8 (m % 2)
  // + j, whose swizzle term (SW128 key % 8, SW64 (key / 2) % 4) does not depend on kb; its depth
  // chunk starts 16 (m / 2) into the group.
  const u32 key_in_block = 8 * (m % 2) + j, read_depth = 16 * (m / 2);
  const u32 swz = kRow == 128 ? key_in_block % 8 : (key_in_block / 2) % 4;
  const u32 read_base = src + key_in_block * kRow;
  // The write row (depth) in the group: matrix m holds the even depth of pair j for j < 4 (the odd
  // one for j >= 4) when m is even, the other one when m is odd; its d % 8 does not depend on dg.
  const u32 write_depth = 16 * (m / 2) + 2 * j + ((m % 2) ^ (j / 4));
  const u32 write_base = dst + write_depth * 128, write_chunk = write_depth % 8;
  // Byte selectors: depth 2c of the lane's pair c = l / 4 is bytes 0 2 4 6 of (matrix 0, matrix 1),
  // depth 2c + 1 bytes 1 3 5 7; lanes with c >= 4 put the odd depth in the even matrix.
  const bool odd_first = lane / 4 >= 4;
  const u32 sel_even_matrix = odd_first ? 0x7531u : 0x6420u, sel_odd_matrix = odd_first ? 0x6420u : 0x7531u;
  // A warp's item: depth group dg, key blocks kb0 and kb0 + 1 (items round-robin over the warps:
  // 6/5/5 at depth 128 and kBN 128). The second block's read is the first's plus an immediate; both
  // land in Vt block kb0 / 8 (128 keys), chunks kb0 % 8 and kb0 % 8 + 1.
  constexpr u32 kPairs = kBN / 32, kItems = kPairs * (kDp / 32);
#pragma unroll 1
  for (u32 item = static_cast<u32>(t) / 32; item < kItems; item += kWarps) {
    const u32 dg = item / kPairs, kb0 = 2 * (item % kPairs), d = 32 * dg + read_depth;
    const u32 read = read_base + 16 * kb0 * kRow + (d / kRow) * (kBN * kRow) + ((((d % kRow) / 16) ^ swz) << 4);
    const u32 write = write_base + 32 * dg * 128 + (kb0 / 8) * (kDp * 128);
    u32 r[2][4];
#pragma unroll
    for (u32 h = 0; h < 2; ++h) ldmatrix_x4_trans(r[h], read + 16 * kRow * h);
#pragma unroll
    for (u32 h = 0; h < 2; ++h) {
      const u32 w[4] = {byte_perm(r[h][0], r[h][1], sel_even_matrix), byte_perm(r[h][0], r[h][1], sel_odd_matrix),
                        byte_perm(r[h][2], r[h][3], sel_even_matrix), byte_perm(r[h][2], r[h][3], sel_odd_matrix)};
      stmatrix_x4(write + ((((kb0 % 8) + h) ^ write_chunk) << 4), w);
    }
  }
}

// The transposers' walk: the CTA's tile walk (TileWalker), one Vt stage per V stage the producer
// loads (producer_loop), so the V and Vt rings run on across a persistent CTA's tiles.
template <class Config, class Mask, class Tiles>
__device__ __forceinline__ void transpose_loop(const FwdParams& p, Tiles tiles, unsigned char* smem,
                                               typename SmemLayout<Config>::Barriers* bars, int t) {
  using Sh = Shape<Config>;
  using L = SmemLayout<Config>;
  static_assert(Sh::kFp8, "transpose_loop: FP8 kernels only");
  const u32 base = smem_u32(smem);
  pipe::Relay<Sh::kStages> v_to_vt(&bars->v, &bars->vt);
  auto transpose_stage = [&] {
    auto st = v_to_vt.acquire();
    transpose_v<Config>(base + L::kVOffset + st.index() * L::kVStageBytes,
                        base + L::kPVOffset + st.index() * L::kPVStageBytes, t);
    fence_proxy_async();  // this thread's Vt writes (and V reads) before the wgmma / TMA that follow
    st.publish();
  };  // release V: its TMA slot is free again
  // The walk's constants (unit count, grid size) re-read per tile from an opaque zero, not held
  // across it: this warpgroup runs at 32 registers at kBM 192.
  for (; tiles.valid(p, Tiles::loop_zero()); tiles.advance()) {
    const CtaWork<Config, Mask>& w =
        tiles.template work<Sh::kBM, Sh::kBN, Sh::kPack, Sh::kBottomTiles, Sh::kWgRows>(p, Tiles::loop_zero());
    for (int n = w.first_tile(); w.has(n); n = w.next_tile(n)) transpose_stage();  // none when !w.valid
  }
}

// ---- FP8 KV cache: e4m3 K / V converted to the 16-bit stages the consumers read ----
// The converters' passes (a pass: one 16-byte task of each converter thread): the reads of up to
// kBatch passes go out before their conversions. ld/st.shared are volatile with a memory clobber,
// so pass by pass each read's latency sat between one pass's stores and the next pass's
// conversions, the converters' top stall (docs/PERF.md run 46: e4m3-KV prefill +6-13%, decode
// +1-2%). live(i): pass i has a row; read(i): its 16-byte e4m3 source; write(i, out): stores its 16
// converted elements (out[0]: the first 8, out[1] the next 8, in MmaElement pairs).
template <class MmaElement, int kPasses, int kBatch, class Live, class Read, class Write>
__device__ __forceinline__ void convert_passes(Live live, Read read, Write write) {
#pragma unroll
  for (int i0 = 0; i0 < kPasses; i0 += kBatch) {
    u32 in[kBatch][4];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = i0 + b;
      if (i < kPasses && live(i)) ld_shared_v4(read(i), in[b]);
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = i0 + b;
      if (i >= kPasses || !live(i)) continue;
      u32 out[2][4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        out[j / 2][(j % 2) * 2] = e4m3x2_to<MmaElement>(static_cast<u16>(in[b][j] & 0xffffu));
        out[j / 2][(j % 2) * 2 + 1] = e4m3x2_to<MmaElement>(static_cast<u16>(in[b][j] >> 16));
      }
      write(i, out);
    }
  }
}

// One e4m3 stage (src: kKvChunks SW128 blocks of [kBN rows][128 keys' bytes]) -> one 16-bit stage
// (dst: kChunks SW128 blocks of [kBN rows][64 elements]), exactly (e4m3x2_to), by thread t of
// kHelperThreads. A task is 16 elements (group g) of one row: one 16-byte read, eight conversions,
// two 16-byte writes (elements 16g.. to block g / 4, chunks 2 (g % 4) and 2 (g % 4) + 1).
// A thread keeps its group for the whole stage: 16 consecutive threads take rows 2p and 2p + 1,
// lanes 0-3 / 4-7 of each 8-lane phase groups 0-3 of one row and 4-7 of the other (the next phase
// the other way round), so a phase reads 8 chunks whose bit 2 differs between the rows (the rows'
// swizzles differ in bit 0, the groups in bit 2) and writes 8 distinct chunks of the two blocks.
// A pass of the 96 threads covers 12 rows; 12 rows on, a row's swizzle term (row % 8) flips bit 2,
// so every address is a per-thread base, on odd passes with bit 6 flipped, plus an immediate (the
// per-task index arithmetic was ~40 of the loop's ~52 instructions per task before, docs/PERF.md
// run 35).
template <class Config>
__device__ __forceinline__ void convert_kv(u32 src, u32 dst, int t) {
  using Sh = Shape<Config>;
  constexpr int kGroups = Sh::kDp / 16;  // 16-element groups per row
  constexpr int kRowStep = 2 * (kHelperThreads / 16);  // rows per pass
  constexpr int kPasses = (Sh::kBN + kRowStep - 1) / kRowStep;
  static_assert(Sh::kKvFp8 && Sh::kDp == 128 && kGroups == 8, "convert_kv: e4m3 rows of one 128-byte block");
  static_assert(kHelperThreads % 16 == 0 && kRowStep % 8 == 4, "convert_kv: a pass moves a row's swizzle by 4");
  const int q = t % 16, half = q / 8, sub = (q / 4) % 2;
  const int r0 = 2 * (t / 16) + sub, g = q % 4 + 4 * (sub ^ half), c0 = 2 * (g % 4);
  const int sw0 = r0 % 8;
  // The swizzle is sw0 on even passes and sw0 ^ 4 on odd ones: chunk bit 2, address bit 6 (rows are
  // 128-byte aligned and a pass steps whole rows, so the step never reaches that bit).
  const u32 in_base = src + r0 * 128 + ((g ^ sw0) << 4);
  const u32 out_row = dst + (g / 4) * (Sh::kBN * 128) + r0 * 128;
  const u32 out_base[2] = {out_row + ((c0 ^ sw0) << 4), out_row + (((c0 + 1) ^ sw0) << 4)};
  // A pass's rows exist unless it is the last one of a kBN that is no multiple of kRowStep.
  const auto live = [&](int i) { return Sh::kBN % kRowStep == 0 || i < kPasses - 1 || r0 + kRowStep * i < Sh::kBN; };
  // Reads in flight (convert_passes): 6 passes of 4 registers fit the 56-register producer
  // warpgroup of the grid walk; the persistent walk's state leaves room for 3 (6 spilled 28 B there,
  // and 64 producer registers exceed the launch's pool: Shape::kLaunchRegs, docs/PERF.md runs 46-47).
  constexpr int kMaxBatch = Sh::kPersistent ? 3 : 6;
  constexpr int kBatch = kPasses < kMaxBatch ? kPasses : kMaxBatch;
  convert_passes<typename Sh::MmaElement, kPasses, kBatch>(
      live, [&](int i) { return (in_base ^ ((i % 2) << 6)) + kRowStep * i * 128; },
      [&](int i, const u32(&out)[2][4]) {  // [elements 16g..16g+7, 16g+8..16g+15]
        const u32 step = kRowStep * i * 128, odd = (i % 2) << 6;
        st_shared_v4((out_base[0] ^ odd) + step, out[0]);
        st_shared_v4((out_base[1] ^ odd) + step, out[1]);
      });
}

constexpr int kRows64Step = kHelperThreads / 4;  // rows per pass of convert_kv_rows64: 24

// An e4m3 latent cache's per-page factors (FwdParams::page_descale) for the rows one converter
// thread t writes in one KV tile: pass i of convert_kv_rows64 writes tile row (t / 4 + 24 i) % kBN,
// one of the kBN / 8 rows t / 4 % 8 + 8 j, whose page's factor is h2[i % (kBN / 8)] (an fp16 pair,
// the MMAs' type). 1 where the launch has no factors. Loaded one KV tile ahead (convert_loop), so
// the page-table and factor reads are in flight while the converters work on the tile before.
template <class Config>
struct PageFactors {
  static constexpr int kClasses = Shape<Config>::kBN / 8;
  static_assert(kRows64Step % 8 == 0, "PageFactors: a pass keeps each row's class");
  u32 h2[kClasses];

  __device__ __forceinline__ static PageFactors load(const FwdParams& p, const SeqInfo& s, int n, int t) {
    PageFactors f;
    const int row = t / 4;
#pragma unroll
    for (int m = 0; m < kClasses; ++m) {
      f.h2[m] = 0x3c003c00u;  // fp16 1.0 twice
      if (p.page_descale && s.pages) {  // uniform
        const int r = row % 8 + 8 * ((row / 8 + (kRows64Step / 8) * m) % kClasses);
        const float x = p.page_descale[s.page_of(p, n * Shape<Config>::kBN + r)];
        asm("cvt.rn.f16x2.f32 %0, %1, %1;" : "=r"(f.h2[m]) : "f"(x));
      }
    }
    return f;
  }
};

// convert_kv for MLA's e4m3 latent rows (Shape::kKvRowBytes 64: 576 bytes are no whole 128-byte
// rows), each element times its page's factor (PageFactors, in fp16): src is kKvChunks SW64 blocks of [kBN rows][64 e4m3] (16-byte unit u of row r at unit
// u ^ (r / 2) % 4), dst kChunks SW128 blocks of [kBN rows][64 16-bit elements] (unit c at c ^ r % 8).
// Both stages list their rows block after block, so row R = b kBN + r of the stage is at R x 64
// (src) and R x 128 (dst). A task is 16 elements (unit u = t % 4 of row R): one 16-byte read, eight
// conversions, two 16-byte writes (units 2u, 2u + 1 of the same row). Thread t takes rows t / 4 +
// 24 k: 24 rows on, both swizzle terms repeat (r / 2 % 4 and r % 8, also across a block boundary:
// kBN is a multiple of 8), so every address is a per-thread base plus an immediate (index
// arithmetic per task spilled the 56-register producer warpgroup: 152 B). A phase of 8 threads
// reads 128 contiguous bytes, and its writes land in 8 distinct units (rows r and r + 1 differ in
// bit 0 of their swizzle, 2u never has it).
template <class Config>
__device__ __forceinline__ void convert_kv_rows64(u32 src, u32 dst, int t, const PageFactors<Config>& factors) {
  using Sh = Shape<Config>;
  static_assert(DTypeTraits<typename Sh::MmaElement>::kIsBf16 == false, "convert_kv_rows64: fp16 MMAs (the factors' type)");
  constexpr int kRows = Sh::kKvChunks * Sh::kBN;       // rows of the stage, block after block
  constexpr int kRowStep = kRows64Step;
  constexpr int kPasses = (kRows + kRowStep - 1) / kRowStep;
  constexpr int kBatch = 4;  // reads in flight before their conversions (16 of the 56 registers)
  static_assert(Sh::kKvFp8 && Sh::kKvRowBytes == 64 && Sh::kRowBytes == 128 && Sh::kKvChunks == Sh::kChunks,
                "convert_kv_rows64: 64-byte e4m3 rows into 128-byte 16-bit rows, block for block");
  static_assert(kRowStep % 8 == 0 && Sh::kBN % 8 == 0, "convert_kv_rows64: a pass keeps each row's swizzle");
  const int row = t / 4, u = t % 4;
  const u32 in_base = src + row * 64 + ((u ^ ((row / 2) % 4)) << 4);
  const u32 out_base[2] = {dst + row * 128 + (((2 * u) ^ (row % 8)) << 4),
                           dst + row * 128 + (((2 * u + 1) ^ (row % 8)) << 4)};
  const auto live = [&](int i) { return kRows % kRowStep == 0 || i < kPasses - 1 || row + kRowStep * i < kRows; };
  convert_passes<typename Sh::MmaElement, kPasses, kBatch>(
      live, [&](int i) { return in_base + kRowStep * i * 64; },
      [&](int i, const u32(&converted)[2][4]) {  // [elements 16u..16u+7, 16u+8..16u+15]
        // The row's page factor (exact for 1; else one fp16 rounding of the factor and one of the product).
        const u32 f = factors.h2[i % PageFactors<Config>::kClasses];
        u32 out[2][4];
#pragma unroll
        for (int j = 0; j < 8; ++j)
          asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(out[j / 4][j % 4]) : "r"(converted[j / 4][j % 4]), "r"(f));
        st_shared_v4(out_base[0] + kRowStep * i * 128, out[0]);
        st_shared_v4(out_base[1] + kRowStep * i * 128, out[1]);
      });
}

// The converters of an FP8 KV cache: per KV tile, K's e4m3 stage TMA filled -> the consumers'
// 16-bit K stage, then V's. Each e4m3 ring and its 16-bit ring move in lockstep (one stage each per
// K or V tile), so one Relay serves both, as for FP8's V transposers. Every converter thread
// releases the e4m3 stage it read (the empty barriers count 96): a gathered stage's next cp.async
// writes then follow each thread's own reads (compute-sanitizer's racecheck flagged the
// one-lane-per-warp release there, which TMA's writes never meet).
template <class Config>
struct KvConverter {
  using L = SmemLayout<Config>;
  pipe::Relay<Shape<Config>::kStages, pipe::ArriveEachThread> k, v;

  __device__ __forceinline__ explicit KvConverter(typename L::Barriers* bars)
      : k(&bars->k_load, &bars->k), v(&bars->v_load, &bars->v) {}
  __device__ __forceinline__ void tile(u32 base, int t) {
    stage(k, base + L::kKLoadOffset, base + L::kKOffset, t);
    stage(v, base + L::kVLoadOffset, base + L::kVOffset, t);
  }
  __device__ __forceinline__ static void stage(pipe::Relay<Shape<Config>::kStages, pipe::ArriveEachThread>& relay,
                                               u32 src_ring, u32 dst_ring, int t) {
    auto st = relay.acquire();
    convert_kv<Config>(src_ring + st.index() * L::kKVLoadStageBytes, dst_ring + st.index() * L::kKVStageBytes, t);
    fence_proxy_async();  // this thread's writes (and reads) before the wgmma / TMA that follow
    st.publish();
  }  // release the e4m3 stage: its TMA slot is free again
};

// An e4m3 latent cache (MLA): the e4m3 ring (Shape::kKLoadStages deep) feeds the 16-bit K ring
// (kStages), whose stage P V also reads as V. The rings no longer move in lockstep, and V's readers
// are this stage's second consumers: a converter thread takes a 16-bit stage once S = Q K^T (K's
// empty barrier) and P V (V's) have both released it, and hands it to both (K's and V's full
// barriers; the producer loads no V).
template <class Config>
struct LatentConverter {
  using Sh = Shape<Config>;
  using L = SmemLayout<Config>;
  pipe::Consumer<Sh::kKLoadStages, pipe::ArriveEachThread> in;
  pipe::Producer<Sh::kStages> k_out, v_out;

  __device__ __forceinline__ explicit LatentConverter(typename L::Barriers* bars)
      : in(&bars->k_load), k_out(&bars->k), v_out(&bars->v) {}
  __device__ __forceinline__ void tile(u32 base, int t, const PageFactors<Config>& factors) {
    auto src = in.acquire();
    auto ks = k_out.acquire();
    auto vs = v_out.acquire();
    convert_kv_rows64<Config>(base + L::kKLoadOffset + src.index() * L::kKVLoadStageBytes,
                              base + L::kKOffset + ks.index() * L::kKVStageBytes, t, factors);
    fence_proxy_async();  // this thread's writes (and reads) before the wgmma / TMA that follow
    ks.arrive();
    vs.arrive();
  }  // release the e4m3 stage (every converter thread)
};

// The converters' walk: the CTA's tile walk (TileWalker, or a grid CTA's one unit), a tile (K(n), then
// V(n); latent: K(n)) per KV tile the producer loads (producer_unit, producer_loop), so the rings run on across a
// persistent CTA's tiles, as the FP8 V transposers' (transpose_loop).
template <class Config, class Mask, class Tiles>
__device__ __forceinline__ void convert_loop(const FwdParams& p, Tiles tiles, unsigned char* smem,
                                             typename SmemLayout<Config>::Barriers* bars, int t) {
  using Sh = Shape<Config>;
  using L = SmemLayout<Config>;
  static_assert(Sh::kKvFp8, "convert_loop: FP8 KV caches only");
  const u32 base = smem_u32(smem);
  typename IfT<Sh::kVInK, LatentConverter<Config>, KvConverter<Config>>::type converter(bars);
  // The walk's constants re-read per tile from an opaque zero, as the transposers' (transpose_loop):
  // held across it, they spilled the 56-register warpgroup (28 B at causal d128).
  for (; tiles.valid(p, Tiles::loop_zero()); tiles.advance()) {
    const CtaWork<Config, Mask>& w =
        tiles.template work<Sh::kBM, Sh::kBN, Sh::kPack, Sh::kBottomTiles, Sh::kWgRows>(p, Tiles::loop_zero());
    if constexpr (Sh::kVInK) {  // the tile's page factors, read one tile ahead (PageFactors)
      int n = w.first_tile();
      PageFactors<Config> f = PageFactors<Config>::load(p, w.seq, n, t);
      for (int next; w.has(n); n = next) {
        next = w.next_tile(n);
        const PageFactors<Config> f_next = w.has(next) ? PageFactors<Config>::load(p, w.seq, next, t) : f;
        converter.tile(base, t, f);
        f = f_next;
      }
    } else {
      for (int n = w.first_tile(); w.has(n); n = w.next_tile(n)) converter.tile(base, t);
    }
  }
}

}  // namespace sm90a
}  // namespace fa4
