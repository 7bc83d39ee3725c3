#!/usr/bin/env python3
"""CPU model of the sm80 kernel's control flow and softmax arithmetic (no GPU needed).

Mirrors kernel.cuh (q tile, kv_range -> tile range, next_tile skipping, the load/compute ring
order, the `partial` rule), softmax.cuh (score-mod, mask, row max, lazy rescale via RowState,
exp2 with the folded scale, per-lane partial sums) and epilogue.cuh (sink, 1/sum, LSE) at row
granularity (the fragment layouts are checked by layout_model.py), and the masks of
common/mask.cuh. Compares O and LSE with a float64 reference over odd shapes, Sq != Sk,
both causal alignments, sliding windows, chunks, a union mask, softcap and sinks.

Run: python3 templates/sm80/dev/algo_model.py
"""
import math
import random

NEG_INF = float("-inf")
LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
THRESH = 8.0
SKIP, FULL, PARTIAL = 0, 1, 2


def floor_div(a, b):
    return a // b  # Python floors like mask.cuh's floor_div


class Ctx:
    def __init__(self, sq, sk, flags, wl=-1, wr=-1, chunk=0):
        self.seqlen_q, self.seqlen_k, self.flags = sq, sk, flags
        self.window_left, self.window_right, self.chunk_size = wl, wr, chunk

    def diag_offset(self):
        return 0 if (self.flags & 1) else self.seqlen_k - self.seqlen_q


class Band:
    def __init__(self, left, right):
        self.left, self.right = left, right

    def visible(self, q, k, c):
        d = k - q - c.diag_offset()
        return (self.left < 0 or d >= -self.left) and (self.right < 0 or d <= self.right)

    def kv_range(self, q_lo, q_hi, c):
        off = c.diag_offset()
        lo = 0 if self.left < 0 else max(0, q_lo + off - self.left)
        hi = c.seqlen_k if self.right < 0 else min(c.seqlen_k, q_hi - 1 + off + self.right + 1)
        return lo, max(lo, hi)

    def classify(self, q_lo, q_hi, k_lo, k_hi, c):
        off = c.diag_offset()
        d_min, d_max = k_lo - (q_hi - 1) - off, (k_hi - 1) - q_lo - off
        if (self.right >= 0 and d_min > self.right) or (self.left >= 0 and d_max < -self.left):
            return SKIP
        if (self.right < 0 or d_max <= self.right) and (self.left < 0 or d_min >= -self.left):
            return FULL
        return PARTIAL


class NoneMask:
    is_none = True
    may_skip = False

    def visible(self, q, k, c): return True
    def kv_range(self, q_lo, q_hi, c): return 0, c.seqlen_k
    def classify(self, *a): return FULL


class BandMask:
    is_none = False
    may_skip = False

    def __init__(self, causal):
        self.causal = causal

    def band(self, c):
        return Band(-1, 0) if self.causal else Band(c.window_left, c.window_right)

    def visible(self, q, k, c): return self.band(c).visible(q, k, c)
    def kv_range(self, q_lo, q_hi, c): return self.band(c).kv_range(q_lo, q_hi, c)
    def classify(self, *a): return self.band(a[-1]).classify(*a)


class Chunked:
    is_none = False
    may_skip = False

    def visible(self, q, k, c):
        C = c.chunk_size
        return floor_div(q + c.diag_offset(), C) == floor_div(k, C)

    def kv_range(self, q_lo, q_hi, c):
        C, off = c.chunk_size, c.diag_offset()
        lo = max(0, floor_div(q_lo + off, C) * C)
        hi = min(c.seqlen_k, (floor_div(q_hi - 1 + off, C) + 1) * C)
        return lo, max(lo, hi)

    def classify(self, q_lo, q_hi, k_lo, k_hi, c):
        C, off = c.chunk_size, c.diag_offset()
        cq_lo, cq_hi = floor_div(q_lo + off, C), floor_div(q_hi - 1 + off, C)
        ck_lo, ck_hi = floor_div(k_lo, C), floor_div(k_hi - 1, C)
        if ck_hi < cq_lo or ck_lo > cq_hi:
            return SKIP
        if cq_lo == cq_hi and ck_lo == ck_hi and cq_lo == ck_lo:
            return FULL
        return PARTIAL


class Or:
    is_none = False
    may_skip = True

    def __init__(self, a, b):
        self.a, self.b = a, b

    def visible(self, q, k, c): return self.a.visible(q, k, c) or self.b.visible(q, k, c)

    def kv_range(self, q_lo, q_hi, c):
        a, b = self.a.kv_range(q_lo, q_hi, c), self.b.kv_range(q_lo, q_hi, c)
        if a[1] <= a[0]: return b
        if b[1] <= b[0]: return a
        return min(a[0], b[0]), max(a[1], b[1])

    def classify(self, *args):
        a, b = self.a.classify(*args), self.b.classify(*args)
        if a == FULL or b == FULL: return FULL
        return SKIP if (a == SKIP and b == SKIP) else PARTIAL


class RowState:  # common/softmax.cuh
    def __init__(self):
        self.max, self.sum = NEG_INF, 0.0

    def update_max(self, tile_max, scale):
        m_new = max(self.max, tile_max)
        if self.max == NEG_INF:
            self.max = m_new
            return 1.0
        grow = (m_new - self.max) * scale
        if grow > THRESH:
            self.max = m_new
            return 2.0 ** (-grow)
        return 1.0

    def exp_bias(self, scale): return 0.0 if self.max == NEG_INF else self.max * scale
    def inv_sum(self): return 1.0 / self.sum if self.sum > 0 else 0.0
    def lse(self, scale): return (self.max * scale + math.log2(self.sum)) * LN2 if self.sum > 0 else NEG_INF

    def add_sink(self, sink_log2, scale):
        if self.max == NEG_INF:
            self.max, self.sum = sink_log2 / scale, 1.0
            return
        self.sum += 2.0 ** min(sink_log2 - self.max * scale, 126.0)


def exp2(x):
    return 0.0 if x == NEG_INF else 2.0 ** x


def kernel(Q, K, V, mask, ctx, BM, BN, S, softmax_scale, softcap, sink, grid_x):
    """Returns (O, LSE) the way kernel.cuh computes them; every CTA of one (batch, head)."""
    sq, sk, D = ctx.seqlen_q, ctx.seqlen_k, len(Q[0]) if Q else 0
    O = [[None] * D for _ in range(sq)]
    LSE = [None] * sq
    identity = softcap is None
    scale = softmax_scale * LOG2E if identity else 1.0
    for bx in range(grid_x):
        m_block = bx if mask.is_none else grid_x - 1 - bx
        q_lo = m_block * BM
        if q_lo >= sq:
            continue
        q_hi = min(q_lo + BM, sq)
        rb, re = mask.kv_range(q_lo, q_hi, ctx)
        n_begin = rb // BN
        n_end = -(-re // BN) if re > rb else n_begin

        def tile_class(n): return mask.classify(q_lo, q_hi, n * BN, min((n + 1) * BN, sk), ctx)

        def next_tile(n):
            if mask.may_skip:
                while n < n_end and tile_class(n) == SKIP:
                    n += 1
            return n
        # load schedule (ring) and compute schedule must agree
        loads = []
        n_load = next_tile(n_begin)
        for st in range(S - 1):
            if n_load < n_end:
                loads.append((n_load, st))
                n_load = next_tile(n_load + 1)
        rows = list(range(q_lo, q_lo + BM))  # rows >= sq: Q zero-filled, never written
        acc = {q: [0.0] * D for q in rows}
        rs = {q: RowState() for q in rows}
        stage_tracked, n = 0, next_tile(n_begin)
        while n < n_end:
            stage = stage_tracked if mask.may_skip else (n - n_begin) % S
            load_stage = stage - 1 if stage + S - 1 >= S else stage + S - 1
            load_tile = n_load if mask.may_skip else n + S - 1
            assert (n, stage) in loads, ("tile not loaded where computed", n, stage)
            if load_tile < n_end:
                loads.append((load_tile, load_stage))
                if mask.may_skip:
                    n_load = next_tile(n_load + 1)
            partial = (not mask.is_none and tile_class(n) != FULL) or (n + 1) * BN > sk
            cols = list(range(n * BN, (n + 1) * BN))
            for q in rows:
                qv = Q[q] if q < sq else [0.0] * D
                s = []
                for k in cols:
                    kv = K[k] if k < sk else [0.0] * D
                    x = sum(a * b for a, b in zip(qv, kv))
                    if not identity:
                        qi, ki = min(q, sq - 1), min(k, sk - 1)
                        x = softcap * math.tanh(x * softmax_scale / softcap) * LOG2E
                        del qi, ki
                    if partial and not (k < sk and (mask.is_none or mask.visible(q, k, ctx))):
                        x = NEG_INF
                    if not partial:  # a full tile must not contain a hidden key
                        assert k < sk and (mask.is_none or q >= sq or mask.visible(q, k, ctx)), ("full tile", q, k)
                    s.append(x)
                r = rs[q]
                corr = r.update_max(max(s), scale)
                acc[q] = [a * corr for a in acc[q]]
                bias = r.exp_bias(scale)
                p = [exp2(x * scale - bias) if x != NEG_INF else 0.0 for x in s]
                r.sum = r.sum * corr + sum(p)
                for pk, k in zip(p, cols):
                    if pk:
                        vv = V[k] if k < sk else [0.0] * D
                        acc[q] = [a + pk * b for a, b in zip(acc[q], vv)]
            if mask.may_skip:
                stage_tracked = (stage + 1) % S
            n = next_tile(n + 1)
        for q in rows:
            r = rs[q]
            if sink is not None:
                r.add_sink(sink * LOG2E, scale)
            inv = r.inv_sum()
            if q < sq:
                O[q] = [a * inv for a in acc[q]]
                LSE[q] = r.lse(scale)
    return O, LSE


def reference(Q, K, V, mask, ctx, softmax_scale, softcap, sink):
    sq, sk, D = ctx.seqlen_q, ctx.seqlen_k, len(Q[0])
    O, LSE = [], []
    for q in range(sq):
        logits = []
        for k in range(sk):
            if mask.is_none or mask.visible(q, k, ctx):
                x = softmax_scale * sum(a * b for a, b in zip(Q[q], K[k]))
                if softcap is not None:
                    x = softcap * math.tanh(x / softcap)
                logits.append((x, k))
        allx = [x for x, _ in logits] + ([sink] if sink is not None else [])
        if not logits:
            O.append([0.0] * D)
            LSE.append(NEG_INF)
            continue
        m = max(allx)
        den = sum(math.exp(x - m) for x in allx)
        O.append([sum(math.exp(x - m) * V[k][d] for x, k in logits) / den for d in range(D)])
        LSE.append(m + math.log(den))
    return O, LSE


def run_case(rnd, sq, sk, mask, ctx, BM, BN, softcap=None, sink=None, D=8):
    Q = [[rnd.uniform(-2, 2) for _ in range(D)] for _ in range(sq)]
    K = [[rnd.uniform(-2, 2) for _ in range(D)] for _ in range(sk)]
    V = [[rnd.uniform(-1, 1) for _ in range(D)] for _ in range(sk)]
    scale = 1.3 / math.sqrt(D)
    grid_x = -(-sq // BM) + rnd.randint(0, 1)  # varlen: grid sized for a longer sequence
    O, LSE = kernel(Q, K, V, mask, ctx, BM, BN, 2, scale, softcap, sink, grid_x)
    Or_, LSEr = reference(Q, K, V, mask, ctx, scale, softcap, sink)
    for q in range(sq):
        assert O[q] is not None, ("row not written", q)
        for d in range(D):
            assert abs(O[q][d] - Or_[q][d]) < 1e-9, ("O", q, d, O[q][d], Or_[q][d])
        if LSEr[q] == NEG_INF:
            assert LSE[q] == NEG_INF or sink is not None, ("LSE -inf", q, LSE[q])
        else:
            assert abs(LSE[q] - LSEr[q]) < 1e-9, ("LSE", q, LSE[q], LSEr[q])


if __name__ == "__main__":
    rnd = random.Random(1)
    count = 0
    for sq, sk in [(1, 1), (1, 37), (37, 1), (5, 300), (300, 5), (77, 77), (130, 67), (67, 130), (200, 333), (1, 0)]:
        for BM, BN in [(16, 8), (16, 16), (32, 16)]:
            for flags in (0, 1):
                masks = [(NoneMask(), Ctx(sq, sk, flags)), (BandMask(True), Ctx(sq, sk, flags)),
                         (BandMask(False), Ctx(sq, sk, flags, wl=rnd.randint(0, 40), wr=rnd.randint(0, 9))),
                         (BandMask(False), Ctx(sq, sk, flags, wl=-1, wr=rnd.randint(0, 20))),
                         (Chunked(), Ctx(sq, sk, flags, chunk=rnd.choice([3, 16, 50]))),
                         (Or(BandMask(True), Chunked()), Ctx(sq, sk, flags, chunk=rnd.choice([7, 32])))]
                for mask, ctx in masks:
                    if sk == 0 and not mask.is_none and isinstance(mask, Chunked):
                        continue
                    softcap = rnd.choice([None, None, 5.0])
                    sink = rnd.choice([None, None, 0.7])
                    run_case(rnd, sq, sk, mask, ctx, BM, BN, softcap, sink)
                    count += 1
    print(f"ok: {count} cases (O and LSE vs float64 reference)")
