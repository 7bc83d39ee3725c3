"""How every number in bench/ is taken: one process, steady state, energy, paired rounds.

An H200 at its 700 W cap runs ~16% slower than one that just idled (docs/PERF.md), so a figure
means something only beside its peers' figures taken in the same process, in the same thermal
state. This module holds the pieces that make that so, and nothing model- or kernel-specific:

- ``Nvml``: SM clock and board power (nvidia-ml-py), read with each measurement, so a table shows
  the state it was taken in; ``PowerSampler`` samples the power through a timed window (J per call).
- ``warm_until_stable``: sustained load until the SM clock stops moving (the steady state).
- ``per_call`` / ``back_to_back``: a kernel's time per call (CUDA events around each call, median),
  and back to back (one event pair around many calls, replayed from a CUDA graph where the callable
  can be captured), with the energy per call (mean sampled power x time).
- ``run_rounds``: interleaved rounds over the arms of one row, each arm taking every position in
  turn (``round_order``), so drift and a neighbour's heat fall on every arm alike, and each arm led
  in by its own calls before it is timed; ``paired`` / ``summarize``: ratios paired per round.

The statistics (``stable``, ``paired``, ``median``, ``summarize``) are pure functions: the CPU tests
in tests/python/test_bench_harness.py check them without a GPU.
"""
import math
import statistics
import time


def median(xs):
    xs = [x for x in xs if x is not None and not math.isnan(x)]
    return statistics.median(xs) if xs else float("nan")


def stable(readings, window=5, tol=0.015):
    """True when the last ``window`` readings (SM clocks in MHz) lie within ``tol`` of their mean:
    the clock has stopped moving. Fewer readings than the window are never stable."""
    if len(readings) < window:
        return False
    last = readings[-window:]
    mean = sum(last) / window
    return mean > 0 and (max(last) - min(last)) / mean <= tol


def paired(rounds, num, den, key):
    """Per-round ratios rounds[r][num][key] / rounds[r][den][key] for the rounds where both arms
    have the key: >1 means ``den`` is faster when the key is a time."""
    out = []
    for rd in rounds:
        a, b = rd.get(num, {}), rd.get(den, {})
        if key in a and key in b and b[key] > 0:
            out.append(a[key] / b[key])
    return out


def spread(xs):
    """(median, min, max) of a list of ratios; NaNs when empty."""
    if not xs:
        return (float("nan"),) * 3
    return (median(xs), min(xs), max(xs))


def summarize(rounds, ours, aa, peers):
    """One row's summary from its rounds (a list of {arm: measurement}).

    Per arm: the median over rounds of each measured quantity. The best peer is the peer with the
    lowest median per-call time among those that ran every round, and ``best_peer_b2b`` the one with
    the lowest back-to-back time (a peer with a slow host path can lead per call and trail back to
    back: the back-to-back ratio is taken against the peer fastest there, not the per-call leader).
    Ratios are paired per round (peer time / our time: >1 means fa4jit is faster), per call ("ms")
    and back to back ("ms_b2b"); ``aa`` is the same kernel as ``ours`` under another name, its ratio
    the row's noise floor."""
    arms = {}
    names = [ours, aa] + list(peers)
    for name in names:
        runs = [rd[name] for rd in rounds if name in rd and "ms" in rd[name]]
        if len(runs) != len(rounds) or not runs:
            errs = [rd[name]["error"] for rd in rounds if name in rd and "error" in rd[name]]
            arms[name] = {"error": errs[0] if errs else "not run"}
            continue
        arms[name] = {k: median([r.get(k) for r in runs]) for k in runs[0] if isinstance(runs[0][k], (int, float))}
        arms[name]["mode"] = runs[0].get("mode", "")
    ran = [p for p in peers if "ms" in arms.get(p, {})]
    best = min(ran, key=lambda p: arms[p]["ms"]) if ran else None
    ran_b2b = [p for p in ran if "ms_b2b" in arms[p]]
    best_b2b = min(ran_b2b, key=lambda p: arms[p]["ms_b2b"]) if ran_b2b else None
    out = {"arms": arms, "best_peer": best, "best_peer_b2b": best_b2b}
    if "ms" in arms.get(ours, {}):
        if best:
            out["vs_best"] = spread(paired(rounds, best, ours, "ms"))
        if best_b2b:
            out["vs_best_b2b"] = spread(paired(rounds, best_b2b, ours, "ms_b2b"))
        if "ms" in arms.get(aa, {}):
            out["aa"] = spread(paired(rounds, aa, ours, "ms"))
            out["aa_b2b"] = spread(paired(rounds, aa, ours, "ms_b2b"))
    return out


class Nvml:
    """The GPU's SM clock (MHz) and power (W) through NVML; every reading is None
    where nvidia-ml-py or the counter is missing (the harness still times, and says so)."""

    def __init__(self, index=0):
        self.h = None
        self.why = ""
        try:
            import pynvml
            pynvml.nvmlInit()
            self.nv = pynvml
            self.h = pynvml.nvmlDeviceGetHandleByIndex(index)
        except Exception as e:  # noqa: BLE001 - no NVML: readings are None
            self.why = f"{type(e).__name__}: {e}"

    def _read(self, fn, *args):
        if self.h is None:
            return None
        try:
            return fn(self.h, *args)
        except Exception:  # noqa: BLE001 - a counter this board lacks
            return None

    def sm_clock(self):
        return None if self.h is None else self._read(self.nv.nvmlDeviceGetClockInfo, self.nv.NVML_CLOCK_SM)

    def power_w(self):
        mw = None if self.h is None else self._read(self.nv.nvmlDeviceGetPowerUsage)
        return mw / 1000.0 if mw is not None else None

    def instant_w(self):
        """Instantaneous board power (W) where the driver has the field, else the averaged reading."""
        if self.h is not None and getattr(self, "_instant", True):
            try:
                fv = self.nv.nvmlDeviceGetFieldValues(self.h, [self.nv.NVML_FI_DEV_POWER_INSTANT])[0]
                if fv.nvmlReturn == 0:
                    return fv.value.uiVal / 1000.0
            except Exception:  # noqa: BLE001 - older nvidia-ml-py or driver
                pass
            self._instant = False
        return self.power_w()

    def state(self):
        return {"sm_mhz": self.sm_clock(), "power_w": self.power_w()}


class PowerSampler:
    """Board power sampled every ``period`` s on a thread while a window of GPU work runs: the
    energy counter ticks too coarsely for windows of a tenth of a second (seen on the H200: 0 J
    over some 60 ms windows), so J per call is the mean sampled power times the window's time."""

    def __init__(self, nvml, period=0.002):
        self.nvml, self.period, self.samples = nvml, period, []

    def __enter__(self):
        import threading
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()
        return self

    def _run(self):
        while not self._stop.is_set():
            w = self.nvml.instant_w()
            if w is not None:
                self.samples.append(w)
            self._stop.wait(self.period)

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()

    def mean_w(self):
        return sum(self.samples) / len(self.samples) if self.samples else None


def warm_until_stable(load, nvml, min_s=3.0, max_s=20.0, block_s=0.1, window=5, tol=0.015, sync=None):
    """Runs ``load()`` (a chunk of GPU work) in blocks of ``block_s`` until at least ``min_s`` passed
    and the SM clock read after each block is ``stable``, or ``max_s``. ``sync`` waits for the GPU
    (default torch.cuda.synchronize). Returns {"seconds", "sm_mhz", "power_w", "stable", "clocks"}."""
    if sync is None:
        import torch
        sync = torch.cuda.synchronize
    t0 = time.perf_counter()
    clocks = []
    while True:
        tb = time.perf_counter()
        while time.perf_counter() - tb < block_s:
            load()
        sync()
        clocks.append(nvml.sm_clock() or 0)
        el = time.perf_counter() - t0
        ok = stable(clocks, window, tol) if nvml.h is not None else True
        if (el >= min_s and ok) or el >= max_s:
            return {"seconds": el, "stable": ok, "clocks": clocks[-window:], **nvml.state()}


def per_call(fn, iters=20, warm=3, min_s=0.0):
    """Median device time of one call (ms): an event pair around each call, synchronized between
    calls. For kernels shorter than their launch this is the launch-bound time a user sees.
    ``min_s``: more calls (up to 10x ``iters``) until they add up to that long (short kernels'
    medians need more samples to hold still)."""
    import torch
    for i in range(warm):
        fn(i)
    torch.cuda.synchronize()
    if min_s > 0:
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn(warm)
        e.record()
        e.synchronize()
        iters = int(min(10 * iters, max(iters, min_s * 1000.0 / max(s.elapsed_time(e), 1e-3))))
    ts = []
    for i in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn(i)
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e))
    return median(ts)


def _graph(fn, n):
    """A CUDA graph of n calls fn(0..n-1), or None where the callable cannot be captured."""
    import torch
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # capture-time warm-up on a side stream, as torch advises
            for i in range(2):
                fn(i)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for i in range(n):
                fn(i)
        torch.cuda.synchronize()
        return g
    except Exception:  # noqa: BLE001 - eager back-to-back instead
        torch.cuda.synchronize()
        return None


def back_to_back(fn, est_ms, nvml, min_s=0.06, graph=True, max_calls=400):
    """Time per call with the calls queued back to back (ms), and the energy per call (J) over a
    window of at least ``min_s``. The calls are replayed from a CUDA graph when ``graph`` and the
    callable can be captured (what serving engines do for decode), else issued eagerly; "mode" says
    which. ``est_ms``: a per-call estimate that sizes the window."""
    import torch
    n = int(max(8, min(max_calls, math.ceil(min_s * 1000.0 / max(est_ms, 1e-3)))))
    g = _graph(fn, n) if graph else None
    run = g.replay if g is not None else (lambda: [fn(i) for i in range(n)])
    run()
    torch.cuda.synchronize()
    reps = max(1, math.ceil(min_s * 1000.0 / max(est_ms * n, 1e-3)))
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with PowerSampler(nvml) as power:
        s.record()
        for _ in range(reps):
            run()
        e.record()
        e.synchronize()
    calls = reps * n
    ms = s.elapsed_time(e) / calls
    out = {"ms_b2b": ms, "mode": "graph" if g is not None else "eager", **nvml.state()}
    if power.mean_w() is not None:
        out["power_w"] = power.mean_w()
        out["j_call"] = power.mean_w() * ms / 1000.0
    del g
    return out


def lead_in(fn, seconds):
    """Calls of fn back to back for ``seconds`` (at least 4): at the power cap the SM clock follows
    the last few milliseconds' power, so a kernel timed right after a cooler or hotter one would
    run at that one's clock (docs/PERF.md, log run 77)."""
    import torch
    t0, i = time.perf_counter(), 0
    while i < 4 or time.perf_counter() - t0 < seconds:
        fn(i)
        i += 1
        if i % 8 == 0:
            torch.cuda.synchronize()  # bounds the queue: the time is the GPU's, not the launch loop's
    torch.cuda.synchronize()


def measure(fn, nvml, iters=20, graph=True, max_calls=400, lead_s=0.1):
    """One arm's measurement in one round: led in by its own calls, then per call, then back to back
    with energy."""
    lead_in(fn, lead_s)
    ms = per_call(fn, iters, min_s=0.01)
    return {"ms": ms, **back_to_back(fn, ms, nvml, graph=graph, max_calls=max_calls)}


def round_order(names, r):
    """The arms' order in round r: rotated by one each round, reversed every other cycle, so over
    len(names) rounds every arm takes every position once, and neighbours change."""
    n = len(names)
    k = r % n
    order = list(names[k:]) + list(names[:k])
    return order[::-1] if (r // n) % 2 else order


def run_rounds(arms, nvml, rounds=3, iters=20, preload_s=0.3, graph=True, max_calls=400):
    """Interleaved rounds over ``arms`` ({name: fn(i)}) in ``round_order``. Before
    the first round the arms run round-robin for at least ``preload_s`` and until the SM clock is
    stable, so the row starts in the steady state the run was warmed to. A failing arm is recorded
    as {"error": ...} and the others go on. ``max_calls`` bounds a back-to-back graph (each captured
    call keeps its output alive until the graph goes)."""
    import torch
    names = list(arms)
    warm_until_stable(lambda: [arms[n](0) for n in names], nvml, min_s=preload_s, max_s=5.0, block_s=0.05, window=3)
    out = []
    for r in range(rounds):
        order = round_order(names, r)
        rd = {}
        for name in order:
            try:
                rd[name] = measure(arms[name], nvml, iters=iters, graph=graph, max_calls=max_calls)
            except Exception as e:  # noqa: BLE001 - a peer that cannot run this row
                torch.cuda.synchronize()
                rd[name] = {"error": f"{type(e).__name__}: {e}"[:160]}
        out.append(rd)
    return out


def aa_deviation(summary):
    """How far the row's A/A ratios (per call, back to back; medians over rounds) lie from 1, the
    larger of the two; NaN without an A/A arm."""
    devs = [abs(summary[k][0] - 1) for k in ("aa", "aa_b2b") if k in summary and not math.isnan(summary[k][0])]
    return max(devs) if devs else float("nan")


def measure_row(arms, nvml, ours, aa, peers, rounds=3, extra_rounds=None, tol=0.02, **kw):
    """``run_rounds`` then ``summarize``; a row whose A/A reads past ``tol`` (the table's noise
    bound) is measured again, once, ``extra_rounds`` (default: ``rounds``) more rounds whose ratios
    join the first ones, so a row read in a noisy second stands on twice the rounds instead of
    entering the table as noise. The summary's "rounds" says how many it stands on."""
    out = run_rounds(arms, nvml, rounds=rounds, **kw)
    s = summarize(out, ours, aa, peers)
    extra = rounds if extra_rounds is None else extra_rounds
    if extra > 0 and aa_deviation(s) > tol:
        out += run_rounds(arms, nvml, rounds=extra, **kw)
        s = summarize(out, ours, aa, peers)
    s["rounds"] = len(out)
    return s


def copy_rate_tbs(nvml, gib=2.0):
    """Device-to-device copy rate (TB/s, bytes read plus written) measured now: the ceiling a
    decode that reads its K/V once approaches."""
    import torch
    n = int(gib * (1 << 30))
    a = torch.empty(n, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    ms = per_call(lambda i: b.copy_(a), iters=10)
    del a, b
    return 2 * n / ms / 1e9


def gemm_tflops():
    """bf16 8192^3 matrix product rate (TFLOP/s) measured now, on random data."""
    import torch
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn_like(a)
    ms = per_call(lambda i: a @ b, iters=10)
    return 2 * 8192 ** 3 / ms / 1e9
