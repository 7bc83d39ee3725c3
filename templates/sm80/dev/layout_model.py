#!/usr/bin/env python3
"""CPU model of the sm80 kernel's data layouts (no GPU needed).

Mirrors, formula for formula, the index arithmetic of smem_tile.cuh (swizzle, cp.async thread
mapping, LaneOffset), q_tile.cuh / kv_buffer.cuh (ldmatrix lane addresses and matrix order),
mma.cuh (m16n8k16 fragments, S -> P A-fragment) and epilogue.cuh (O staging, split-KV partial
stores), the paged K/V walk of KVBuffer::load_paged and the packed-Q rows, with the PTX ISA
semantics of ldmatrix (.x4, .trans) and mma.sync m16n8k16. Checks, per warp, that
S = Q K^T and O = P V come out right and that every byte lands where the reader expects it.
If a formula changes in the .cuh files, change it here too.

Run: python3 templates/sm80/dev/layout_model.py
"""
import random

THREADS = 128


class Traits:
    def __init__(self, D, BM, BN, depth=None):
        self.D, self.BM, self.BN = D, BM, BN
        self.kDepth = depth or D
        self.kWarpRows = BM // 4
        self.kMTiles = self.kWarpRows // 16
        self.kNTiles = BN // 8
        self.kDTiles = D // 8
        self.kChunks = D // 8
        c = self.kChunks
        self.kSwizzleMask = 7 if c % 8 == 0 else 3 if c % 4 == 0 else 1 if c % 2 == 0 else 0
        self.kRowBytes = D * 2
        self.pow2 = (self.kRowBytes & (self.kRowBytes - 1)) == 0


def offset(T, row, chunk):  # SmemTile::offset
    return row * T.kRowBytes + ((chunk ^ (row & T.kSwizzleMask)) << 4)


def load_async_targets(T, rows):
    """(row, chunk, dst) for every cp.async of SmemTile<T, rows>::load_async, all threads."""
    out = []
    for tid in range(THREADS):
        if THREADS % T.kChunks == 0:
            step = THREADS // T.kChunks
            assert rows % step == 0
            r, chunk = tid // T.kChunks, tid % T.kChunks
            for i in range(rows // step):
                dst = offset(T, r, chunk) + i * step * T.kRowBytes if step % 8 == 0 else offset(T, r + i * step, chunk)
                assert dst == offset(T, r + i * step, chunk)
                out.append((r + i * step, chunk, dst))
        else:
            total = rows * T.kChunks
            for i in range((total + THREADS - 1) // THREADS):
                idx = tid + i * THREADS
                if idx >= total:
                    break
                out.append((idx // T.kChunks, idx % T.kChunks, offset(T, idx // T.kChunks, idx % T.kChunks)))
    return out


def store_tile(T, smem, base, tile, rows):
    """cp.async copies of a [rows][kDepth] tile (zero-filled beyond kDepth)."""
    seen = set()
    for row, chunk, dst in load_async_targets(T, rows):
        assert (row, chunk) not in seen
        seen.add((row, chunk))
        for e in range(8):
            col = chunk * 8 + e
            v = tile[row][col] if col < T.kDepth else 0.0
            smem[base + dst + 2 * e] = v
    assert len(seen) == rows * T.kChunks


def load_paged_targets(T, n, seqlen_k, ps, max_pages):
    """(row, chunk, dst, page_index, row_in_page, valid) for every copy of KVBuffer::load_paged
    (tile n), all threads, with its running (page index, row in page) walk."""
    out = []
    fixed = THREADS % T.kChunks == 0
    row_step = THREADS // T.kChunks if fixed else 0
    total = T.BN * T.kChunks
    for tid in range(THREADS):
        row, chunk = tid // T.kChunks, tid % T.kChunks
        pg = inn = 0
        if fixed:
            kr = n * T.BN + row
            pg, inn = kr // ps, kr - (kr // ps) * ps
        for i in range(-(-total // THREADS)):
            if fixed:
                if i > 0:
                    row += row_step
                    inn += row_step
                    if inn >= ps:
                        on = inn // ps
                        inn -= on * ps
                        pg += on
            else:
                idx = tid + i * THREADS
                if total % THREADS != 0 and idx >= total:
                    break
                row, chunk = idx // T.kChunks, idx % T.kChunks
                kr = n * T.BN + row
                pg, inn = kr // ps, kr - (kr // ps) * ps
            valid = n * T.BN + row < seqlen_k and (T.kDepth == T.D or chunk * 8 < T.kDepth)
            out.append((row, chunk, offset(T, row, chunk), min(pg, max_pages - 1), inn, valid))
    return out


def check_paged(T):
    """Every (row, chunk) of the tile once, at its swizzled offset, from the right page row."""
    for ps in [1, 3, 8, 16, 24, 48, 64, 256]:
        for n in range(4):
            max_pages = -(-(4 * T.BN) // ps)
            seqlen_k = 4 * T.BN - 5
            seen = set()
            for row, chunk, dst, pg, inn, valid in load_paged_targets(T, n, seqlen_k, ps, max_pages):
                assert (row, chunk) not in seen
                seen.add((row, chunk))
                assert dst == offset(T, row, chunk)
                kr = n * T.BN + row
                assert valid == (kr < seqlen_k and chunk * 8 < T.kDepth)
                if valid:
                    assert (pg, inn) == (kr // ps, kr % ps), ("page walk", ps, n, row)
            assert len(seen) == T.BN * T.kChunks


def check_packed_q(T, pack, seqlen_q, q_lo):
    """SmemTile::load_async_rows for packed Q: tile row r -> query (q_lo + r) / pack of head
    (q_lo + r) % pack, each (row, chunk) once, rows >= seqlen_q * pack zero-filled."""
    seen = set()
    total = T.BM * T.kChunks
    for tid in range(THREADS):
        for i in range(-(-total // THREADS)):
            idx = tid + i * THREADS
            if total % THREADS != 0 and idx >= total:
                break
            row, chunk = idx // T.kChunks, idx % T.kChunks
            assert (row, chunk) not in seen
            seen.add((row, chunk))
            r = q_lo + row
            valid = r < seqlen_q * pack and chunk * 8 < T.kDepth
            if valid:
                q, head = r // pack, r % pack  # SeqInfo::q_row<pack>
                assert q < seqlen_q and 0 <= head < pack
    assert len(seen) == T.BM * T.kChunks


def check_partial_epilogue(T):
    """epilogue (split-KV): lane (g, t) of warp w stores o[mt][d][2h..2h+1] at row
    w*kWarpRows + mt*16 + h*8 + g, columns 8d + 2t, +1: every [BM][kDepth] element once."""
    written = {}
    for warp in range(4):
        for mt in range(T.kMTiles):
            for h in range(2):
                for l in range(32):
                    g, t = l >> 2, l & 3
                    row = warp * T.kWarpRows + mt * 16 + h * 8 + g
                    for d in range(T.kDTiles):
                        if d * 8 >= T.kDepth:
                            continue
                        for e in range(2):
                            key = (row, 8 * d + 2 * t + e)
                            assert key not in written
                            # C fragment element 2h+e of n8 block d is (row g + 8h, col 2t + e)
                            written[key] = (mt, d, l, 2 * h + e)
                            assert (warp * T.kWarpRows + mt * 16 + (l >> 2) + 8 * ((2 * h + e) >> 1), d * 8 + 2 * (l & 3) + ((2 * h + e) & 1)) == key
    assert len(written) == T.BM * T.kDepth


class LaneOffset:
    def __init__(self, T, row, chunk0):
        self.T = T
        c = (chunk0 ^ (row & T.kSwizzleMask)) << 4
        r = row * T.kRowBytes
        self.off, self.chunk = (r + c, 0) if T.pow2 else (r, c)

    def at(self, step):
        T = self.T
        lo, hi = (step & T.kSwizzleMask) << 4, (step & ~T.kSwizzleMask) << 4
        return ((self.off ^ lo) + hi) if T.pow2 else (self.off + (self.chunk ^ lo) + hi)


def read8(smem, addr):
    assert addr % 16 == 0, addr
    return [smem[addr + 2 * e] for e in range(8)]


def ldmatrix_x4(smem, addrs, trans=False):
    """addrs[lane] -> regs[lane] = [r0..r3], each a pair (lo, hi) of values (PTX ldmatrix)."""
    mats = [[read8(smem, addrs[8 * i + j]) for j in range(8)] for i in range(4)]
    regs = []
    for t in range(32):
        rr = []
        for i in range(4):
            m = mats[i]
            if not trans:
                rr.append((m[t // 4][2 * (t % 4)], m[t // 4][2 * (t % 4) + 1]))
            else:
                rr.append((m[2 * (t % 4)][t // 4], m[2 * (t % 4) + 1][t // 4]))
        regs.append(rr)
    return regs


def mma(c, a, b0, b1):
    """Warp-wide m16n8k16: c[lane] (4 floats) += A B from per-lane fragments (PTX layouts)."""
    A = [[0.0] * 16 for _ in range(16)]
    B = [[0.0] * 8 for _ in range(16)]
    for t in range(32):
        g, tt = t // 4, t % 4
        for (r, k0), reg in zip([(g, 0), (g + 8, 0), (g, 8), (g + 8, 8)], a[t]):
            A[r][k0 + 2 * tt], A[r][k0 + 2 * tt + 1] = reg
        B[2 * tt][g], B[2 * tt + 1][g] = b0[t]
        B[8 + 2 * tt][g], B[8 + 2 * tt + 1][g] = b1[t]
    for t in range(32):
        g, tt = t // 4, t % 4
        for e in range(4):
            r, n = g + 8 * (e >> 1), 2 * tt + (e & 1)
            c[t][e] += sum(A[r][k] * B[k][n] for k in range(16))


def check(T, seed=0):
    rnd = random.Random(seed)
    Q = [[rnd.randint(-3, 3) for _ in range(T.D)] for _ in range(T.BM)]
    K = [[rnd.randint(-3, 3) for _ in range(T.D)] for _ in range(T.BN)]
    V = [[rnd.randint(-3, 3) for _ in range(T.D)] for _ in range(T.BN)]
    P = [[rnd.randint(-2, 2) for _ in range(T.BN)] for _ in range(T.BM)]
    kQ, kK, kV = 0, T.BM * T.kRowBytes, (T.BM + T.BN) * T.kRowBytes
    smem = {}
    store_tile(T, smem, kQ, Q, T.BM)
    store_tile(T, smem, kK, K, T.BN)
    store_tile(T, smem, kV, V, T.BN)
    Dv = T.kDepth
    lane_off = [LaneOffset(T, l & 15, l >> 4) for l in range(32)]  # lane_qv
    lane_k = [LaneOffset(T, (l & 7) + ((l >> 4) << 3), (l >> 3) & 1) for l in range(32)]
    for warp in range(4):
        q_warp = kQ + warp * T.kWarpRows * T.kRowBytes
        # gemm_qk
        s = [[[[0.0] * 4 for _ in range(32)] for _ in range(T.kNTiles)] for _ in range(T.kMTiles)]
        for kk in range(T.D // 16):
            a = [ldmatrix_x4(smem, [q_warp + mt * 16 * T.kRowBytes + lane_off[l].at(2 * kk) for l in range(32)])
                 for mt in range(T.kMTiles)]
            for j in range(T.kNTiles // 2):
                b = ldmatrix_x4(smem, [kK + j * 16 * T.kRowBytes + lane_k[l].at(2 * kk) for l in range(32)])
                for mt in range(T.kMTiles):
                    mma(s[mt][2 * j], a[mt], [b[l][0] for l in range(32)], [b[l][1] for l in range(32)])
                    mma(s[mt][2 * j + 1], a[mt], [b[l][2] for l in range(32)], [b[l][3] for l in range(32)])
        for mt in range(T.kMTiles):
            for j in range(T.kNTiles):
                for l in range(32):
                    for e in range(4):
                        q = warp * T.kWarpRows + mt * 16 + (l >> 2) + 8 * (e >> 1)
                        k = j * 8 + 2 * (l & 3) + (e & 1)
                        ref = sum(Q[q][d] * K[k][d] for d in range(Dv))
                        assert s[mt][j][l][e] == ref, ("S", warp, mt, j, l, e)
        # P in the C layout (what online_softmax leaves in s), then gemm_pv
        for mt in range(T.kMTiles):
            for j in range(T.kNTiles):
                for l in range(32):
                    for e in range(4):
                        q = warp * T.kWarpRows + mt * 16 + (l >> 2) + 8 * (e >> 1)
                        s[mt][j][l][e] = P[q][j * 8 + 2 * (l & 3) + (e & 1)]
        o = [[[[0.0] * 4 for _ in range(32)] for _ in range(T.kDTiles)] for _ in range(T.kMTiles)]
        for kk in range(T.BN // 16):
            a = [[[(s[mt][2 * kk][l][0], s[mt][2 * kk][l][1]), (s[mt][2 * kk][l][2], s[mt][2 * kk][l][3]),
                   (s[mt][2 * kk + 1][l][0], s[mt][2 * kk + 1][l][1]), (s[mt][2 * kk + 1][l][2], s[mt][2 * kk + 1][l][3])]
                  for l in range(32)] for mt in range(T.kMTiles)]  # s_to_a_fragment
            for j in range(T.kDTiles // 2):
                b = ldmatrix_x4(smem, [kV + kk * 16 * T.kRowBytes + lane_off[l].at(2 * j) for l in range(32)], trans=True)
                for mt in range(T.kMTiles):
                    mma(o[mt][2 * j], a[mt], [b[l][0] for l in range(32)], [b[l][1] for l in range(32)])
                    mma(o[mt][2 * j + 1], a[mt], [b[l][2] for l in range(32)], [b[l][3] for l in range(32)])
        # epilogue staging into this warp's Q rows, then the 16-byte copy-out
        stage = {}
        for mt in range(T.kMTiles):
            for h in range(2):
                for l in range(32):
                    g, t = l >> 2, l & 3
                    row = warp * T.kWarpRows + mt * 16 + h * 8 + g
                    for d in range(T.kDTiles):
                        addr = offset(T, row, d) + t * 4
                        assert row // T.kWarpRows == warp
                        stage[addr], stage[addr + 2] = o[mt][d][l][2 * h], o[mt][d][l][2 * h + 1]
        total = T.kWarpRows * T.kChunks
        assert total % 32 == 0
        written = set()
        for i in range(total // 32):
            for l in range(32):
                idx = l + i * 32
                row = warp * T.kWarpRows + idx // T.kChunks
                chunk = idx % T.kChunks
                if chunk * 8 >= T.kDepth:
                    continue
                vals = [stage[offset(T, row, chunk) + 2 * e] for e in range(8)]
                for e in range(8):
                    col = chunk * 8 + e
                    ref = sum(P[row][k] * V[k][col] for k in range(T.BN))
                    assert vals[e] == ref, ("O", warp, row, col)
                    written.add((row, col))
        assert len(written) == T.kWarpRows * T.kDepth
    # bank conflicts of the ldmatrix phases: 8 addresses of one 8x8 matrix cover 32 banks
    for l0 in range(0, 32, 8):
        for step in range(0, T.kChunks, 2):
            banks = set()
            for l in range(l0, l0 + 8):
                a = lane_off[l].at(step)
                ak = lane_k[l].at(step)
                assert ak % 16 == 0
                banks.update(((a >> 2) + w) % 32 for w in range(4))
            if T.kSwizzleMask == 7:
                assert len(banks) == 32, ("bank conflict", step)


if __name__ == "__main__":
    for D, BM, BN, depth in [(64, 128, 128, None), (128, 128, 64, None), (64, 64, 64, None), (96, 128, 64, None),
                             (256, 64, 64, None), (128, 128, 64, 120), (80, 128, 64, 72)]:
        T = Traits(D, BM, BN, depth)
        check(T)
        check_paged(T)
        check_partial_epilogue(T)
        for pack, sq in [(2, 5), (4, 33), (6, 7), (8, 100)]:
            for q_lo in range(0, sq * pack + BM, BM):
                check_packed_q(T, pack, sq, q_lo)
        print(f"ok: D={D} kDepth={T.kDepth} BM={BM} BN={BN} swizzle_mask={T.kSwizzleMask}")
