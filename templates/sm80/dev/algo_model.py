#!/usr/bin/env python3
"""CPU model of the sm80 kernel's control flow and softmax arithmetic (no GPU needed).

Mirrors kernel.cuh (q tile, TileWork's kv_range -> tile range and split share, next_tile
skipping, the load/compute ring order, the `partial` rule, GQA-packed rows, split-KV partials
and combine.cuh's merge, mask::Custom's per-head block classification), softmax.cuh (score-mod, mask, row max, lazy rescale via RowState,
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
        self.q_head, self.num_heads = 0, 1

    def with_head(self, q_head, num_heads=1):
        c = Ctx(self.seqlen_q, self.seqlen_k, self.flags, self.window_left, self.window_right, self.chunk_size)
        c.q_head, c.num_heads = q_head, num_heads
        return c

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


def combine_classes(acc, t, first):
    return t if first else (acc if acc == t else PARTIAL)


class Custom:
    """mask::Custom<User> with User::block = PARTIAL and a run-time block mask (block_mask_class):
    per (head, q block, k block) class 0/1/2; partial blocks hide a pseudo-random half."""
    is_none = False
    may_skip = True

    def __init__(self, rnd, bq, bk):
        self.bq, self.bk, self.seed = bq, bk, rnd.randint(0, 1 << 30)

    def block(self, h, i, j):  # the block mask byte of (head, q block, k block)
        return (h * 7919 + i * 104729 + j * 1299709 + self.seed) % 3

    def visible(self, q, k, c):  # rows past seqlen_q (padding) are evaluated too, never written
        v = self.block(c.q_head, q // self.bq, k // self.bk)
        return v == FULL or (v == PARTIAL and (q * 7 + k * 13 + c.q_head) % 3 != 0)

    def kv_range(self, q_lo, q_hi, c): return 0, c.seqlen_k

    def block_class(self, h, q_lo, q_hi, k_lo, k_hi):
        acc, first = PARTIAL, True
        for bq in range(q_lo // self.bq, (q_hi - 1) // self.bq + 1):
            for bk in range(k_lo // self.bk, (k_hi - 1) // self.bk + 1):
                acc = combine_classes(acc, self.block(h, bq, bk), first)
                first = False
                if acc == PARTIAL:
                    return PARTIAL
        return acc

    def classify(self, q_lo, q_hi, k_lo, k_hi, c):
        acc = PARTIAL
        for h in range(c.q_head, c.q_head + c.num_heads):
            acc = combine_classes(acc, self.block_class(h, q_lo, q_hi, k_lo, k_hi), h == c.q_head)
            if acc == PARTIAL:
                break
        return acc


class RowState:  # common/softmax.cuh
    def __init__(self):
        self.max, self.sum, self.o_scale = NEG_INF, 0.0, 1.0

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
    def inv_sum(self): return self.o_scale / self.sum if self.sum > 0 else 0.0
    def lse(self, scale): return (self.max * scale + math.log2(self.sum)) * LN2 if self.sum > 0 else NEG_INF

    def add_sink(self, sink_log2, scale):
        d = sink_log2 - self.exp_bias(scale)
        if self.max != NEG_INF and d <= 0.0:
            self.sum += 2.0 ** d
            return
        self.o_scale = 0.0 if self.max == NEG_INF else 2.0 ** (-d)
        self.sum = self.sum * self.o_scale + 1.0
        self.max = sink_log2 / scale


def exp2(x):
    return 0.0 if x == NEG_INF else 2.0 ** x


def tile_work(mask, ctx, BM, BN, m_block, split, num_splits, pack):
    """TileWork::finish (common/tile_scheduler.cuh): rows [q_lo, q_hi) (packed) and this
    split's share [n_begin, n_end) of the KV tiles."""
    rows = ctx.seqlen_q * pack
    q_lo = m_block * BM
    q_hi = min(q_lo + BM, rows)
    if q_lo >= rows:
        return None
    n_begin = n_end = 0
    if ctx.seqlen_k > 0:
        rb, re = mask.kv_range(q_lo // pack, (q_hi - 1) // pack + 1, ctx)
        end, begin = min(re, ctx.seqlen_k), max(rb, 0)
        if end > begin:
            n_begin, n_end = begin // BN, -(-end // BN)
        if num_splits > 1:
            per = -(-(n_end - n_begin) // num_splits)
            lo = n_begin + split * per
            n_end = min(n_end, lo + per)
            n_begin = min(lo, n_end)
    return q_lo, q_hi, n_begin, n_end


def kernel(Qh, K, V, mask, ctx, BM, BN, S, softmax_scale, softcap, sinks, m_blocks, pack=1, num_splits=1):
    """Returns per head of the group (O, LSE) the way kernel.cuh computes them; every CTA of
    one (batch, KV head). Qh[h]: head h's queries (pack = len(Qh) heads packed, or 1 head).
    num_splits > 1: the CTAs write partials (epilogue) and combine() merges them (combine.cuh)."""
    sq, sk, D = ctx.seqlen_q, ctx.seqlen_k, len(Qh[0][0]) if Qh[0] else 0
    heads = len(Qh)
    assert pack in (1, heads)
    O = [[[None] * D for _ in range(sq)] for _ in range(heads)]
    LSE = [[None] * sq for _ in range(heads)]
    part = {}  # (split, head, q) -> (O row, lse)
    identity = softcap is None
    scale = softmax_scale * LOG2E if identity else 1.0
    for head0 in range(0, heads, pack):  # blockIdx.y: one head, or one packed group
        cctx = ctx.with_head(head0, pack)
        for bx in range(m_blocks * num_splits):
            x, nm, split = bx, m_blocks, 0
            if num_splits > 1:
                split, x, nm = bx % num_splits, bx // num_splits, m_blocks  # cta_tile
            m_block = x if mask.is_none else nm - 1 - x
            w = tile_work(mask, cctx, BM, BN, m_block, split, num_splits, pack)
            if w is None:
                continue
            q_lo, q_hi, n_begin, n_end = w

            def tile_class(n):
                return mask.classify(q_lo // pack, (q_hi - 1) // pack + 1, n * BN, min((n + 1) * BN, sk), cctx)

            def next_tile(n):
                if mask.may_skip:
                    while n < n_end and tile_class(n) == SKIP:
                        n += 1
                return n
            # load schedule (ring) and compute schedule must agree; contiguous masks: stage n % S
            loads = []
            n_load = next_tile(n_begin)
            for st in range(S - 1):
                if n_load < n_end:
                    loads.append((n_load, st if mask.may_skip else n_load % S))
                    n_load = next_tile(n_load + 1)
            rows = list(range(q_lo, q_lo + BM))  # packed rows; >= sq*pack: Q zero-filled, never written

            def qh(r):
                return (r // pack, head0 + r % pack)
            acc = {r: [0.0] * D for r in rows}
            rs = {r: RowState() for r in rows}
            stage_tracked, n = 0, next_tile(n_begin)
            while n < n_end:
                stage = stage_tracked if mask.may_skip else n % S
                load_stage = stage - 1 if stage + S - 1 >= S else stage + S - 1
                load_tile = n_load if mask.may_skip else n + S - 1
                assert (n, stage) in loads, ("tile not loaded where computed", n, stage)
                assert all(st != load_stage for (t, st) in loads if t == n), "prefetch overwrites the tile in use"
                if load_tile < n_end:
                    loads = [(t, st) for (t, st) in loads if st != load_stage]  # the stage it replaces
                    loads.append((load_tile, load_stage))
                    if mask.may_skip:
                        n_load = next_tile(n_load + 1)
                partial = (not mask.is_none and tile_class(n) != FULL) or (n + 1) * BN > sk
                cols = list(range(n * BN, (n + 1) * BN))
                for r in rows:
                    q, h = qh(r)
                    hctx = ctx.with_head(h)
                    qv = Qh[h][q] if r < sq * pack else [0.0] * D
                    s_ = []
                    for k in cols:
                        kv = K[k] if k < sk else [0.0] * D
                        x_ = sum(a * b for a, b in zip(qv, kv))
                        if not identity:
                            x_ = softcap * math.tanh(x_ * softmax_scale / softcap) * LOG2E
                        if partial and not (k < sk and (mask.is_none or mask.visible(q, k, hctx))):
                            x_ = NEG_INF
                        if not partial:  # a full tile must not contain a hidden key
                            assert k < sk and (mask.is_none or q >= sq or mask.visible(q, k, hctx)), ("full tile", q, k)
                        s_.append(x_)
                    st_ = rs[r]
                    corr = st_.update_max(max(s_), scale)
                    acc[r] = [a * corr for a in acc[r]]
                    bias = st_.exp_bias(scale)
                    p_ = [exp2(x_ * scale - bias) if x_ != NEG_INF else 0.0 for x_ in s_]
                    st_.sum = st_.sum * corr + sum(p_)
                    for pk, k in zip(p_, cols):
                        if pk:
                            vv = V[k] if k < sk else [0.0] * D
                            acc[r] = [a + pk * b for a, b in zip(acc[r], vv)]
                if mask.may_skip:
                    stage_tracked = (stage + 1) % S
                n = next_tile(n + 1)
            for r in rows:  # epilogue
                q, h = qh(r)
                st_ = rs[r]
                if sinks is not None and split == 0:
                    st_.add_sink(sinks[h] * LOG2E, scale)
                inv = st_.inv_sum()
                if r < sq * pack:
                    if num_splits > 1:
                        assert (split, h, q) not in part
                        part[(split, h, q)] = ([a * inv for a in acc[r]], st_.lse(scale))
                    else:
                        O[h][q] = [a * inv for a in acc[r]]
                        LSE[h][q] = st_.lse(scale)
    if num_splits > 1:  # split::combine
        for h in range(heads):
            for q in range(sq):
                ls = [part[(s, h, q)][1] for s in range(num_splits)]  # every split wrote every row
                m = max(ls)
                lse = NEG_INF if m == NEG_INF else m + math.log(sum(math.exp(x - m) for x in ls if x != NEG_INF))
                o = [0.0] * D
                if lse != NEG_INF:
                    for s in range(num_splits):
                        if ls[s] != NEG_INF:
                            wgt = math.exp(ls[s] - lse)
                            o = [a + wgt * b for a, b in zip(o, part[(s, h, q)][0])]
                O[h][q], LSE[h][q] = o, lse
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


def run_case(rnd, sq, sk, mask, ctx, BM, BN, softcap=None, sink=None, D=8, heads=1, pack=1, num_splits=1, S=2):
    Qh = [[[rnd.uniform(-2, 2) for _ in range(D)] for _ in range(sq)] for _ in range(heads)]
    K = [[rnd.uniform(-2, 2) for _ in range(D)] for _ in range(sk)]
    V = [[rnd.uniform(-1, 1) for _ in range(D)] for _ in range(sk)]
    scale = 1.3 / math.sqrt(D)
    sinks = [sink + 0.1 * h for h in range(heads)] if sink is not None else None
    m_blocks = -(-(sq * pack) // BM) + rnd.randint(0, 1)  # varlen: grid sized for a longer sequence
    O, LSE = kernel(Qh, K, V, mask, ctx, BM, BN, S, scale, softcap, sinks, m_blocks, pack, num_splits)
    tol = 1e-9 if num_splits == 1 else 1e-7
    for h in range(heads):
        Or_, LSEr = reference(Qh[h], K, V, mask, ctx.with_head(h), scale, softcap, sinks[h] if sinks else None)
        for q in range(sq):
            assert O[h][q] is not None and O[h][q][0] is not None, ("row not written", h, q)
            for d in range(D):
                assert abs(O[h][q][d] - Or_[q][d]) < tol, ("O", h, q, d, O[h][q][d], Or_[q][d])
            if LSEr[q] == NEG_INF:
                assert LSE[h][q] == NEG_INF or sink is not None, ("LSE -inf", h, q, LSE[h][q])
            else:
                assert abs(LSE[h][q] - LSEr[q]) < tol, ("LSE", h, q, LSE[h][q], LSEr[q])


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
    # Variants: split-KV (partials + combine), GQA packing, run-time block masks, 3-stage ring.
    count = 0
    for sq, sk in [(1, 1), (1, 90), (3, 130), (37, 5), (20, 70), (1, 0), (9, 200)]:
        for BM, BN in [(16, 8), (32, 16)]:
            for flags in (0, 1):
                for heads, pack in [(1, 1), (4, 4), (3, 3), (2, 1)]:
                    for num_splits in (1, 2, 3, 5):
                        masks = [(NoneMask(), Ctx(sq, sk, flags)), (BandMask(True), Ctx(sq, sk, flags)),
                                 (BandMask(False), Ctx(sq, sk, flags, wl=rnd.randint(0, 40), wr=rnd.randint(0, 9))),
                                 (Chunked(), Ctx(sq, sk, flags, chunk=rnd.choice([3, 16, 50]))),
                                 (Custom(rnd, rnd.choice([1, 4, 16]), rnd.choice([4, 8, 32])),
                                  Ctx(sq, sk, flags))]
                        for mask, ctx in masks:
                            if sk == 0 and isinstance(mask, Chunked):
                                continue
                            softcap = rnd.choice([None, None, 5.0])
                            sink = rnd.choice([None, None, 0.7])
                            run_case(rnd, sq, sk, mask, ctx, BM, BN, softcap, sink, D=4, heads=heads, pack=pack,
                                     num_splits=num_splits, S=rnd.choice([2, 2, 3]))
                            count += 1
    print(f"ok: {count} variant cases (split-KV, GQA packing, block masks vs float64 reference)")
