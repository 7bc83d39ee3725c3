#!/usr/bin/env python3
"""Executable model of the sm100a barrier protocol (pipelines.cuh, load/mma/softmax/correction/
epilogue.cuh), run under random interleavings. It mirrors the kernel's waits, arrivals, arrival
counts and parity bookkeeping (producers start at phase 1) and the asynchronous agents (TMA
copies, the in-order tensor-core queue, tcgen05.commit), and checks:
  * no deadlock (every role finishes) for 0..8 KV tiles and the d128 / d64 ring shapes;
  * parity waits never pass on a stale phase (a waiter never more than one phase behind);
  * data hazards: TMA never overwrites a K/V slot an issued MMA has not read yet; MMAs read
    landed K/V; S_i(n) is not overwritten before softmax_i read it and P_i(n) V consumed it;
    P_i V reads the P written for that tile; correction rescales O_i between P_i V(n-1) and
    P_i V(n); factors in smem are not overwritten before they are read; the epilogue reads the
    final O and reuses Q smem only after the last MMA reading Q.
A model, not the kernel: it checks the protocol as written in the headers, not the PTX.
Usage: protocol_model.py [trials] | --mutants (each deliberate protocol bug must be caught)"""
import random
import sys

# Deliberate protocol bugs (--mutants): the model must catch each one.
# Value: True = must be caught. False = the wait is implied by another chain under in-order MMA
# completion (the model shows it is redundant there; the kernel keeps it, as MAX does, because
# the implication runs through several threads and tcgen05 fences the PTX model does not promise).
MUTANTS = {
    "mma_skips_p_wait": (True, "MMA issues P_i V without waiting for softmax_i's P"),
    "mma_skips_o_empty": (True, "MMA accumulates into O_i without waiting for the correction"),
    "producer_phase0": (True, "TMA producers start at phase 0 instead of 1"),
    "early_v_release": (True, "V(n) released after O0 += P0 V(n) instead of after O1 += P1 V(n)"),
    "correction_skips_o_wait": (False, "correction skips o[i].full (implied: c[i].full <- S_i(n) <- P_i V(n-1))"),
    "softmax_skips_c_empty": (False, "softmax skips c[i].empty (implied: S_i(n+1) <- o[i].empty <- read)"),
}
MUT = set()


class Bar:
    """mbarrier: `count` arrivals (plus tx bytes) complete a phase."""

    def __init__(self, name, count):
        self.name, self.count, self.pending, self.completed, self.tx = name, count, count, 0, 0

    def arrive(self, n=1):
        self.pending -= n
        assert self.pending >= 0, f"{self.name}: too many arrivals"
        self._maybe_complete()

    def expect_tx(self, nbytes):
        self.tx += nbytes
        self.arrive()

    def complete_tx(self, nbytes):
        self.tx -= nbytes
        assert self.tx >= 0
        self._maybe_complete()

    def _maybe_complete(self):
        if self.pending == 0 and self.tx == 0:
            self.completed += 1
            self.pending = self.count

    def ready(self, parity, wanted):
        """try_wait.parity: passes iff the phase with this parity has completed. `wanted` is the
        completion the waiter means (1-based); a pass with fewer completions is a stale pass."""
        ok = (self.completed % 2) != parity
        if ok:
            assert self.completed >= wanted, f"{self.name}: stale parity pass ({self.completed} < {wanted})"
        return ok


class PhaseState:
    def __init__(self, stages, phase):
        self.stages, self.index, self.phase, self.round = stages, 0, phase, 0

    def advance(self):
        self.index += 1
        if self.index == self.stages:
            self.index, self.phase, self.round = 0, self.phase ^ 1, self.round + 1


def run(N, S, QK, seed):
    rng = random.Random(seed)
    KS = S * QK
    B = {}

    def bar(name, count):
        B[name] = Bar(name, count)
        return B[name]

    for i in range(2):
        bar(f"q_full{i}", 1); bar(f"s_full{i}", 1); bar(f"s_empty{i}", 128)
        bar(f"c_full{i}", 128); bar(f"c_empty{i}", 128); bar(f"o_full{i}", 1); bar(f"o_empty{i}", 128)
        bar(f"o_final{i}", 1)
    for j in range(KS):
        bar(f"k_full{j}", 1); bar(f"k_empty{j}", 1)
    for j in range(S):
        bar(f"v_full{j}", 1); bar(f"v_empty{j}", 1)

    st = dict(k_slot={}, v_slot={}, k_read_by={}, v_read_by={}, tma=[], tc=[], done=set(),
              executed=[], s_read={}, p_written={}, corr_written={}, corr_read={}, o_rescaled={})
    # k_slot[j] = (tile n, chunk c) landed; k_read_by[j] = set of MMA ids still to execute reading it

    def wait(name, parity, wanted):
        while not B[name].ready(parity, wanted):
            yield

    # tcgen05 queue entries: ("mma", id, reads, check) or ("commit", barname)
    def tc_issue(entry):
        st["tc"].append(entry)

    # ---------------- load (warp 13) ----------------
    def load():
        if N == 0:
            return
        ph = 0 if "producer_phase0" in MUT else 1
        kp, vp = PhaseState(KS, ph), PhaseState(S, ph)

        def tma(dst, barname, nbytes, on_land):
            st["tma"].append((barname, nbytes, on_land))

        B["q_full0"].expect_tx(1); tma("q0", "q_full0", 1, lambda: st.__setitem__("q0", True))

        def load_k(n):
            for c in range(QK):
                yield from wait(f"k_empty{kp.index}", kp.phase, kp.round)  # acquire
                j = kp.index
                assert not st["k_read_by"].get(j), f"K slot {j} overwritten before its MMAs ran"
                st["k_slot"][j] = None
                B[f"k_full{j}"].expect_tx(1)
                tma("k", f"k_full{j}", 1, (lambda j=j, n=n, c=c: st["k_slot"].__setitem__(j, (n, c))))
                kp.advance()

        def load_v(n):
            yield from wait(f"v_empty{vp.index}", vp.phase, vp.round)
            j = vp.index
            assert not st["v_read_by"].get(j), f"V slot {j} overwritten before its MMAs ran"
            st["v_slot"][j] = None
            B[f"v_full{j}"].expect_tx(1)
            tma("v", f"v_full{j}", 1, (lambda j=j, n=n: st["v_slot"].__setitem__(j, n)))
            vp.advance()

        yield from load_k(0)
        B["q_full1"].expect_tx(1); tma("q1", "q_full1", 1, lambda: st.__setitem__("q1", True))
        yield from load_v(0)
        for n in range(1, N):
            yield from load_k(n)
            yield from load_v(n)

    # ---------------- MMA (warp 12) ----------------
    def mma():
        if N == 0:
            return
        kc, vc_wait, vc_rel = [PhaseState(KS, 0), PhaseState(KS, 0)], PhaseState(S, 0), PhaseState(S, 0)
        p_phase = [0, 0]
        p_count = [0, 0]
        o_prod = [PhaseState(1, 1), PhaseState(1, 1)]
        uid = [0]

        def mma_op(kind, tile, n, reads):
            uid[0] += 1
            mid = uid[0]
            for (ring, j) in reads:
                st[f"{ring}_read_by"].setdefault(j, set()).add(mid)
            tc_issue(("mma", mid, kind, tile, n, reads))

        def pv(tile, vslot, n):
            if "mma_skips_p_wait" not in MUT:
                yield from wait(f"s_empty{tile}", p_phase[tile], p_count[tile] + 1)
            p_phase[tile] ^= 1
            p_count[tile] += 1
            o = o_prod[tile]
            if "mma_skips_o_empty" not in MUT:
                yield from wait(f"o_empty{tile}", o.phase, o.round)
            mma_op("pv", tile, n, [("v", vslot)])
            tc_issue(("commit", f"o_final{tile}" if n == N - 1 else f"o_full{tile}"))
            o.advance()

        yield from wait("q_full0", 0, 1)
        v_prev = None
        for n in range(N):
            slots = []
            for c in range(QK):
                k = kc[0]
                yield from wait(f"k_full{k.index}", k.phase, k.round + 1)
                slots.append(k.index)
                mma_op("s", 0, n, [("k", k.index)])
                k.advance()
            tc_issue(("commit", "s_full0"))
            if n > 0:
                yield from pv(1, v_prev, n - 1)
                if "early_v_release" not in MUT:
                    tc_issue(("commit", f"v_empty{vc_rel.index}")); vc_rel.advance()
            if n == 0:
                yield from wait("q_full1", 0, 1)
            for c in range(QK):
                mma_op("s", 1, n, [("k", slots[c])])
                tc_issue(("commit", f"k_empty{kc[1].index}")); kc[1].advance()
            tc_issue(("commit", "s_full1"))
            yield from wait(f"v_full{vc_wait.index}", vc_wait.phase, vc_wait.round + 1)
            v_prev = vc_wait.index
            vc_wait.advance()
            yield from pv(0, v_prev, n)
            if "early_v_release" in MUT:
                tc_issue(("commit", f"v_empty{vc_rel.index}")); vc_rel.advance()
        yield from pv(1, v_prev, N - 1)
        if "early_v_release" not in MUT:
            tc_issue(("commit", f"v_empty{vc_rel.index}")); vc_rel.advance()

    # ---------------- softmax WG i (128 threads modelled as one agent arriving 128 times) ----------------
    def softmax(i):
        s_cons, c_prod = PhaseState(1, 0), PhaseState(1, 1)
        for n in range(N):
            yield from wait(f"s_full{i}", s_cons.phase, s_cons.round + 1)
            assert ("s", i, n) in st["executed"], f"softmax{i} reads S({n}) before it was computed"
            st["s_read"][(i, n)] = True
            yield
            if n > 0:
                if "softmax_skips_c_empty" not in MUT:
                    yield from wait(f"c_empty{i}", c_prod.phase, c_prod.round)
                assert n == 1 or st["corr_read"].get((i, n - 1)), f"factor ({i},{n-1}) overwritten before it was read"
                st["corr_written"][(i, n)] = True
                B[f"c_full{i}"].arrive(128)
                c_prod.advance()
            yield
            st["p_written"][(i, n)] = True
            B[f"s_empty{i}"].arrive(128)
            s_cons.advance()
        # epilogue
        if N > 0:
            yield from wait(f"o_final{i}", 0, 1)
            pvs = [e for e in st["executed"] if e[0] == "pv" and e[1] == i]
            assert len(pvs) == N, f"epilogue{i} before all P V ({len(pvs)}/{N})"
            assert all(e in st["executed"] for e in [("s", i, m) for m in range(N)]), "Q reused while read"
        st["done"].add(f"softmax{i}")

    # ---------------- correction WG ----------------
    def correction():
        cc, oc = [PhaseState(1, 0), PhaseState(1, 0)], [PhaseState(1, 0), PhaseState(1, 0)]
        for n in range(1, N):
            for i in range(2):
                yield from wait(f"c_full{i}", cc[i].phase, cc[i].round + 1)
                assert st["corr_written"].get((i, n)), f"correction reads factor ({i},{n}) before it was written"
                st["corr_read"][(i, n)] = True
                B[f"c_empty{i}"].arrive(128); cc[i].advance()
                if "correction_skips_o_wait" not in MUT:
                    yield from wait(f"o_full{i}", oc[i].phase, oc[i].round + 1)
                assert ("pv", i, n - 1) in st["executed"] and ("pv", i, n) not in st["executed"], \
                    f"rescale of O{i} at {n} out of order"
                st["o_rescaled"][(i, n)] = True
                yield
                B[f"o_empty{i}"].arrive(128); oc[i].advance()

    # ---------------- asynchronous agents ----------------
    def tma_step():
        barname, nbytes, on_land = st["tma"].pop(rng.randrange(len(st["tma"])))  # copies finish in any order
        on_land()
        B[barname].complete_tx(nbytes)

    def tc_step():
        e = st["tc"].pop(0)  # in issue order
        if e[0] == "commit":
            B[e[1]].arrive()
            return
        _, mid, kind, tile, n, reads = e
        for ring, j in reads:
            if ring == "k":
                assert st["k_slot"].get(j) is not None and st["k_slot"][j][0] == n, f"MMA reads K slot {j} not landed"
            else:
                assert st["v_slot"].get(j) == n, f"MMA reads V slot {j} (tile {n}) not landed"
            st[f"{ring}_read_by"][j].discard(mid)
        if kind == "s":
            assert st["q0" if tile == 0 else "q1"], "Q not landed"
            if n > 0:
                assert st["s_read"].get((tile, n - 1)) and ("pv", tile, n - 1) in st["executed"], \
                    f"S{tile}({n}) overwrites S/P({n-1}) too early"
            if ("s", tile, n) not in st["executed"]:
                st["executed"].append(("s", tile, n))
        else:
            assert st["p_written"].get((tile, n)), f"P{tile}({n}) V before P was written"
            if n > 0:
                assert st["o_rescaled"].get((tile, n)), f"P{tile}({n}) V before the correction of O{tile}"
            st["executed"].append(("pv", tile, n))

    roles = {"load": load(), "mma": mma(), "softmax0": softmax(0), "softmax1": softmax(1), "correction": correction()}
    steps = 0
    while roles or st["tma"] or st["tc"]:
        steps += 1
        if steps > 20000:
            raise AssertionError(f"deadlock: roles {sorted(roles)} pending, barriers "
                                 + ", ".join(f"{b.name}:{b.completed}" for b in B.values()))
        choice = rng.random()
        if st["tma"] and (choice < 0.15 or not roles):
            tma_step(); continue
        if st["tc"] and (choice < 0.3 or not roles):
            tc_step(); continue
        name = rng.choice(sorted(roles))
        try:
            next(roles[name])
        except StopIteration:
            del roles[name]
    return steps


def mutants(trials):
    """Each deliberate bug must make some run fail (assertion or deadlock)."""
    ok = True
    for m, (must, what) in MUTANTS.items():
        MUT.clear(); MUT.add(m)
        caught = None
        for t in range(trials):
            for N in (2, 3, 5):
                try:
                    run(N, 2, 2, seed=t * 7 + N)
                except AssertionError as e:
                    caught = str(e).split(", barriers")[0]
                    break
            if caught:
                break
        verdict = ("caught: " + caught) if caught else ("not caught (expected: implied)" if not must else "NOT CAUGHT")
        print(f"mutant {m:24s} {verdict}  [{what}]")
        ok = ok and (caught is not None or not must)
    MUT.clear()
    return ok


def main():
    if "--mutants" in sys.argv:
        sys.exit(0 if mutants(50) else 1)
    trials = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    shapes = [("d128", 2, 2), ("d64", 4, 1), ("S2/QK1", 2, 1), ("S3/QK2", 3, 2)]
    total = 0
    for label, S, QK in shapes:
        for N in range(0, 9):
            for t in range(trials):
                run(N, S, QK, seed=(t * 131 + N) * 17 + S * 5 + QK)
                total += 1
        print(f"{label}: S={S} qk_stages={QK}: N=0..8 x {trials} interleavings ok")
    print(f"protocol model: {total} runs, no deadlock, no stale phase, no hazard")


if __name__ == "__main__":
    main()
