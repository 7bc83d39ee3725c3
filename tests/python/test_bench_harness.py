"""The benchmark harness (bench/harness.py, bench/zoo.py): its statistics and row building on the
CPU, and on a GPU that its steady state removes the thermal bias (a test of the harness, not of
any kernel)."""
import json
import math
import os
import sys

import pytest

from conftest import REPO

sys.path.insert(0, os.path.join(REPO, "bench"))
import harness  # noqa: E402
import zoo  # noqa: E402


class FakeNvml:
    """Clocks that fall from 1980 MHz towards 1620 MHz (a GPU reaching its power cap), then hold."""

    def __init__(self, falls=8):
        self.h = object()
        self.reads = 0
        self.falls = falls

    def sm_clock(self):
        self.reads += 1
        return 1620 + max(0, self.falls - self.reads) * 45

    def power_w(self):
        return 690.0

    def instant_w(self):
        return 690.0

    def state(self):
        return {"sm_mhz": self.sm_clock(), "power_w": self.power_w()}


def test_stable_needs_a_full_window_of_flat_readings():
    assert not harness.stable([1620, 1620, 1620], window=5)
    assert harness.stable([1980, 1700, 1620, 1625, 1620, 1630, 1622], window=5, tol=0.015)
    assert not harness.stable([1980, 1900, 1800, 1700, 1620], window=5, tol=0.015)


def test_warm_until_stable_waits_for_the_clock_not_just_the_minimum_time():
    nv = FakeNvml(falls=8)
    w = harness.warm_until_stable(lambda: None, nv, min_s=0.0, max_s=5.0, block_s=0.001, window=3, sync=lambda: None)
    assert w["stable"]
    assert nv.reads >= 8 + 2  # not before the clock stopped falling (8 falling reads + a flat window)
    assert all(c == 1620 for c in w["clocks"])


def test_warm_until_stable_gives_up_at_max_s():
    class Moving(FakeNvml):
        def sm_clock(self):
            self.reads += 1
            return 1500 + (self.reads % 2) * 400
    w = harness.warm_until_stable(lambda: None, Moving(), min_s=0.0, max_s=0.05, block_s=0.001, sync=lambda: None)
    assert not w["stable"] and w["seconds"] >= 0.05


def test_power_sampler_averages_the_window():
    class Ramp(FakeNvml):
        def instant_w(self):
            self.reads += 1
            return 600.0 if self.reads % 2 else 700.0
    import time
    with harness.PowerSampler(Ramp(), period=0.001) as p:
        time.sleep(0.05)
    assert len(p.samples) >= 5 and 640 <= p.mean_w() <= 660
    with harness.PowerSampler(type("NoNvml", (), {"instant_w": lambda self: None})(), period=0.001) as q:
        time.sleep(0.005)
    assert q.mean_w() is None


def rounds_of(ours, aa, peers):
    """Fake rounds: each arm's per-call and back-to-back ms per round."""
    out = []
    for r in range(len(ours)):
        rd = {"fa4jit": {"ms": ours[r], "ms_b2b": ours[r] * 0.9, "j_call": 0.5},
              "fa4jit A/A": {"ms": aa[r], "ms_b2b": aa[r] * 0.9, "j_call": 0.5}}
        for name, ts in peers.items():
            rd[name] = {"ms": ts[r], "ms_b2b": ts[r] * 0.9, "j_call": 0.6} if ts[r] else {"error": "Unsupported: no"}
        out.append(rd)
    return out


def test_summarize_pairs_ratios_per_round_against_the_fastest_peer():
    rounds = rounds_of([1.0, 2.0, 1.0], [1.0, 2.0, 1.02], {"cudnn": [1.2, 2.2, 1.1], "fa4": [0.9, 1.9, 1.1],
                                                              "fa2": [None, None, None]})
    s = harness.summarize(rounds, "fa4jit", "fa4jit A/A", ["cudnn", "fa4", "fa2"])
    assert s["best_peer"] == "fa4"  # lowest median per-call time (1.1 vs 1.2)
    med, lo, hi = s["vs_best"]
    # Paired per round: 0.9/1.0, 1.9/2.0, 1.1/1.0 -> median 0.95 (unpaired medians would give 1.1/1.0).
    assert med == pytest.approx(0.95) and lo == pytest.approx(0.9) and hi == pytest.approx(1.1)
    assert s["aa"][0] == pytest.approx(1.0) and s["aa"][2] == pytest.approx(1.02)
    assert "error" in s["arms"]["fa2"]


def test_back_to_back_ratio_is_against_the_peer_fastest_back_to_back():
    """A peer with a slow host path (FA2 at batch-1 decode) leads per call and trails back to back:
    the back-to-back ratio is taken against the peer fastest there (cuDNN), paired per round."""
    rounds = [{"fa4jit": {"ms": 30.0, "ms_b2b": 7.2}, "fa4jit A/A": {"ms": 30.0, "ms_b2b": 7.2},
               "fa2": {"ms": 25.0, "ms_b2b": 13.8}, "cudnn": {"ms": 60.0, "ms_b2b": c}}
              for c in (7.0, 7.1, 7.2)]
    s = harness.summarize(rounds, "fa4jit", "fa4jit A/A", ["fa2", "cudnn"])
    assert s["best_peer"] == "fa2" and s["best_peer_b2b"] == "cudnn"
    assert s["vs_best"][0] == pytest.approx(25.0 / 30.0)
    assert s["vs_best_b2b"][0] == pytest.approx(7.1 / 7.2) and s["vs_best_b2b"][1] == pytest.approx(7.0 / 7.2)


def test_runs_written_before_the_back_to_back_leader_are_read_against_it():
    """zoo.with_b2b_leader: an older summary's back-to-back ratio, against its per-call leader, is
    replaced by the ratio of medians against the back-to-back leader, and says so (b2b_medians);
    one whose leaders agree keeps its paired ratio."""
    arms = {"fa4jit": {"ms": 0.030, "ms_b2b": 0.0072}, "fa4jit A/A": {"ms": 0.030, "ms_b2b": 0.0070},
            "fa2": {"ms": 0.025, "ms_b2b": 0.0138}, "cudnn": {"ms": 0.060, "ms_b2b": 0.0071}}
    old = {"arms": arms, "best_peer": "fa2", "vs_best": [0.83] * 3, "vs_best_b2b": [1.9] * 3}
    s = zoo.with_b2b_leader(old)
    assert s["best_peer_b2b"] == "cudnn" and s["b2b_medians"]
    assert s["vs_best_b2b"][0] == pytest.approx(0.0071 / 0.0072) and s["vs_best"] == [0.83] * 3
    assert old["vs_best_b2b"] == [1.9] * 3  # the loaded summary is not changed in place
    agree = dict(old, best_peer="cudnn", vs_best_b2b=[0.98, 0.97, 0.99])
    s = zoo.with_b2b_leader(agree)
    assert s["vs_best_b2b"] == [0.98, 0.97, 0.99] and "b2b_medians" not in s
    new = dict(old, best_peer_b2b="fa2")  # a current run's summary: as written
    assert zoo.with_b2b_leader(new) is new


def test_summarize_without_a_peer_has_no_ratio():
    rounds = rounds_of([1.0, 1.0], [1.0, 1.0], {"cudnn": [None, None]})
    s = harness.summarize(rounds, "fa4jit", "fa4jit A/A", ["cudnn"])
    assert s["best_peer"] is None and "vs_best" not in s


def test_every_arm_takes_every_position_and_changes_neighbours():
    names = ["fa4jit", "flex", "builtin", "fa4jit A/A"]
    orders = [harness.round_order(names, r) for r in range(2 * len(names))]
    assert all(sorted(o) == sorted(names) for o in orders)
    for first_cycle in (orders[:4], orders[4:]):
        for pos in range(len(names)):
            assert sorted(o[pos] for o in first_cycle) == sorted(names)  # each arm in each position once
    # builtin's neighbours are not always the same arm (a hot or cool neighbour's clock carries over)
    neighbours = {frozenset(o[max(0, o.index("builtin") - 1):o.index("builtin") + 2]) - {"builtin"} for o in orders}
    assert len(neighbours) >= 3
    assert harness.round_order(["a"], 5) == ["a"]


def test_a_row_whose_aa_reads_noisy_is_measured_again_once(monkeypatch):
    """A row's A/A past 2% doubles its rounds once (the ratios then stand on all of them); a quiet
    row keeps its rounds; a row still noisy after the second batch is not measured a third time."""
    def rnd(aa):
        return {"fa4jit": {"ms": 1.0, "ms_b2b": 1.0}, "fa4jit A/A": {"ms": aa, "ms_b2b": 1.0},
                "cudnn": {"ms": 1.1, "ms_b2b": 1.1}}
    for first, second, expect_rounds, expect_aa in (
            ([1.0] * 3, None, 3, 1.0),              # quiet: 3 rounds
            ([1.05] * 3, [1.0] * 3, 6, 1.025),      # noisy, then quiet: 6 rounds, median over all
            ([1.05] * 3, [1.05] * 3, 6, 1.05)):     # noisy twice: still 6 rounds, flagged by the table
        batches = [first] + ([second] if second else [])
        calls = []

        def fake_rounds(arms, nvml, rounds=3, **kw):
            calls.append(rounds)
            return [rnd(a) for a in batches[len(calls) - 1]]
        monkeypatch.setattr(harness, "run_rounds", fake_rounds)
        s = harness.measure_row({}, None, "fa4jit", "fa4jit A/A", ["cudnn"], rounds=3)
        assert s["rounds"] == expect_rounds and len(calls) == expect_rounds // 3
        assert s["aa"][0] == pytest.approx(expect_aa) and s["vs_best"][0] == pytest.approx(1.1)
    assert math.isnan(harness.aa_deviation({})) and harness.aa_deviation(s) == pytest.approx(0.05)


def stub_run_row(monkeypatch, fake_arm):
    """zoo.run_row without a GPU: no data, fake_arm for fa4jit's arms, and measure_row replaced by a
    record of the arms it was given (the returned dict: "arms" sorted, "ran" the timed peers)."""
    import types
    import torch
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: types.SimpleNamespace(L2_cache_size=50 << 20))
    monkeypatch.setattr(zoo, "make_data", lambda row, sets: {})
    monkeypatch.setattr(zoo, "fa4jit_arm", fake_arm)
    timed = {}

    def fake_measure(arms, nvml, ours, aa, ran, **kw):
        timed.update(arms=sorted(arms), ran=list(ran))
        return {}
    monkeypatch.setattr(harness, "measure_row", fake_measure)
    return timed


def paged_decode_row():
    return next(r for r in zoo.zoo(["llama3_8b"], ["paged"])[0] if r.page == 16 and r.B == 32 and r.Sk == 4096)


def test_run_row_times_only_arms_that_run_and_compute_fa4jits_function(monkeypatch):
    """zoo.run_row: a peer that fails or computes another function, and fa4jit's own extra arms alike
    (--layout-ab's contiguous layout of a paged row's keys), stay out of the timed arms, each with its
    reason; the timed ones are checked against fa4jit's output first."""
    import torch
    import peers
    built = []

    def fake_arm(row, data, pack=None, bf16_cache=False):
        built.append((row.page, pack))
        return lambda i: torch.ones(4)

    def broken(row, data):
        raise RuntimeError("no kernel for this row")
    timed = stub_run_row(monkeypatch, fake_arm)
    monkeypatch.setattr(peers, "PEERS", {"same": lambda r, d: (lambda i: torch.ones(4)),
                                         "other": lambda r, d: (lambda i: torch.full((4,), 2.0)), "broken": broken})
    row = paged_decode_row()
    s = zoo.run_row(row, None, ["same", "other", "broken"], 3, 20, layout_ab=True)
    assert timed["ran"] == ["same", "fa4jit contiguous"]
    assert timed["arms"] == ["fa4jit", "fa4jit A/A", "fa4jit contiguous", "same"]
    assert built == [(16, None), (0, None)]  # the contiguous arm: the same row, page 0
    assert "rel L2" in s["errors"]["other"] and "no kernel for this row" in s["errors"]["broken"]
    assert s["checks"] == {"same": 0.0, "other": 0.5, "fa4jit contiguous": 0.0}
    # Without --layout-ab, or on a row that is not paged, no such arm.
    built.clear()
    zoo.run_row(row, None, ["same"], 3, 20)
    contiguous = next(r for r in zoo.zoo(["llama3_8b"], ["decode"])[0] if r.B == 32 and r.Sk == 4096)
    zoo.run_row(contiguous, None, ["same"], 3, 20, layout_ab=True)
    assert built == [(16, None), (0, None)] and timed["ran"] == ["same"]


def test_splits_ab_times_one_arm_per_split_count_on_memory_bound_rows(monkeypatch):
    """zoo.run_row's --splits-ab: a paged decode row gains one fa4jit arm per requested split count,
    each built with that num_splits (and checked like every arm); a prefill row gains none."""
    import torch
    built = []

    def fake_arm(row, data, pack=None, bf16_cache=False, num_splits=0):
        built.append(num_splits)
        return lambda i: torch.full((4,), 2.0) if num_splits == 4 else torch.ones(4)
    timed = stub_run_row(monkeypatch, fake_arm)
    s = zoo.run_row(paged_decode_row(), None, [], 3, 20, splits_ab=[1, 2, 4])
    assert built == [0, 1, 2, 4]
    assert timed["ran"] == ["fa4jit splits 1", "fa4jit splits 2"]  # 4 computed another function here
    assert "rel L2" in s["errors"]["fa4jit splits 4"]
    built.clear()
    prefill = next(r for r in zoo.zoo(["llama3_8b"], ["prefill"])[0])
    assert not prefill.memory_bound
    zoo.run_row(prefill, None, [], 3, 20, splits_ab=[1, 2])
    assert built == [0] and timed["ran"] == []


def test_an_arm_failing_in_one_round_does_not_count_as_run():
    rounds = rounds_of([1.0, 1.0], [1.0, 1.0], {"cudnn": [0.5, None]})
    s = harness.summarize(rounds, "fa4jit", "fa4jit A/A", ["cudnn"])
    assert s["best_peer"] is None and "error" in s["arms"]["cudnn"]


def test_visible_pairs_causal_bottom_right_and_window():
    assert zoo.visible_pairs(4, 4) == 10
    assert zoo.visible_pairs(1, 8) == 8  # a decode query sees every key
    assert zoo.visible_pairs(2, 8) == 7 + 8
    assert zoo.visible_pairs(4, 4, window=2) == 1 + 2 + 2 + 2


def test_every_zoo_model_has_a_config_and_tp_shards_split_heads():
    for m in zoo.MODELS:
        assert m in zoo.SHAPE_ONLY or os.path.exists(os.path.join(zoo.MODEL_DIR, m + ".json")), m
    rows, _ = zoo.zoo(["qwen2_5_1_5b", "qwen3_235b_a22b"], ["decode"])
    assert {r.shape.label for r in rows} == {"12/2 d128", "6/1 d128", "64/4 d128", "16/1 d128"}
    rows, pending = zoo.zoo(["llama3_1_70b"], ["decode"])
    shapes = {r.shape.label for r in rows}
    assert shapes == {"64/8 d128", "8/1 d128"}  # TP 1 and TP 8 (8 KV heads over 8 GPUs: one each)
    assert {m for r in rows for m in r.models} == {"llama3_1_70b", "llama3_1_70b@tp8"}
    assert pending == []


def test_models_with_the_same_per_gpu_shape_share_rows():
    rows, _ = zoo.zoo(["llama3_8b", "mistral_nemo", "qwen2_5_7b"], ["prefill"])
    by_name = {r.name: r.models for r in rows}
    assert by_name["prefill 1x2k, 32/8 d128"] == ["llama3_8b", "mistral_nemo"]
    assert by_name["prefill 1x2k, 28/4 d128"] == ["qwen2_5_7b"]
    assert by_name["prefill 1x2k, 14/2 d128"] == ["qwen2_5_7b@tp2"]


def test_mla_models_get_prefill_rows_and_latent_decode_rows():
    rows, pending = zoo.zoo(["deepseek_v3", "kimi_k2"], [k for k in zoo.ROWSETS if k != "d512"])
    assert {r.kind for r in rows} == {"prefill", "varlen", "mla", "mla8"}
    by_name = {r.name: r for r in rows}
    ds = by_name["prefill 1x2k, 128/128 d192/v128"]
    assert ds.models == ["deepseek_v3"] and by_name["prefill 1x16k, 16/16 d192/v128"].models == ["deepseek_v3@tp8"]
    assert "prefill 1x2k, 64/64 d192/v128" in by_name  # Kimi-K2: 64 heads
    # K and V bytes and FLOPs count V's 128 columns, not 192.
    assert ds.kv_bytes() == 2048 * 128 * (192 + 128) * 2
    assert ds.flops() == 2 * (192 + 128) * 128 * (2048 * 2049 // 2)
    # Their decode is the mla rows; the unabsorbed decode row sets are not run on them.
    assert [m for m, _ in pending] == ["deepseek_v3", "kimi_k2"]
    why = dict(pending)
    assert why["deepseek_v3"] == ("decode, paged, spec, fp8kv, mixed, pchunk rows: MLA decodes over the latent cache "
                                  "(the mla rows)")


def test_head_dim_512_rows_are_their_own_set():
    rows, pending = zoo.zoo(["llama3_8b"], ["d512"])
    assert pending == []
    assert [r.name for r in rows] == ["prefill 1x2k, 16/4 d512", "prefill 1x16k, 16/4 d512", "decode 32x4k, 16/4 d512",
                                      "paged64 decode 32x4k, 16/4 d512"]
    assert all(r.models == ["head dim 512"] for r in rows)
    assert rows[0].flops() == 2 * (512 + 512) * 16 * (2048 * 2049 // 2)
    assert rows[2].kv_bytes() == 32 * 4096 * 4 * (512 + 512) * 2
    # A model's own rows never include them, and they are not rows of the model.
    assert all(r.shape.D != 512 for r in zoo.zoo(["llama3_8b"], ["prefill", "decode"])[0])


def test_mla_decode_rows_read_the_latent_cache():
    rows, pending = zoo.zoo(["deepseek_v3", "kimi_k2"], ["mla"])
    assert {r.kind for r in rows} == {"mla"}
    # DeepSeek-V3: 128 heads (TP 1) and 16 (TP 8); Kimi-K2: 64 (TP 1) and 8 (TP 8). One KV head of
    # 576 columns, V its first 512.
    by_label = {}
    for r in rows:
        by_label.setdefault(r.shape.label, []).append(r)
    assert set(by_label) == {"128/1 d576/v512", "16/1 d576/v512", "64/1 d576/v512", "8/1 d576/v512"}
    assert {m for r in by_label["128/1 d576/v512"] for m in r.models} == {"deepseek_v3"}
    assert {m for r in by_label["16/1 d576/v512"] for m in r.models} == {"deepseek_v3@tp8"}
    assert {m for r in by_label["64/1 d576/v512"] for m in r.models} == {"kimi_k2"}
    assert {m for r in by_label["8/1 d576/v512"] for m in r.models} == {"kimi_k2@tp8"}
    assert pending == []
    for label, rs in by_label.items():
        assert sorted((r.B, r.Sq, r.Sk) for r in rs) == [(8, 1, 32768), (64, 1, 4096), (64, 4, 4096), (132, 1, 2048)]
        for r in rs:
            sh = r.shape
            assert (sh.Hkv, sh.D, sh.dv, r.page) == (1, 576, 512, 64), label
            assert sh.softmax_scale == pytest.approx(1 / math.sqrt(128 + 64))  # the unabsorbed head dim's
            assert r.memory_bound
            # FLOPs: 2 B H Sq keys (576 + 512); bytes: the latent cache read once, B keys 576 2.
            assert r.flops() == 2 * r.B * sh.Hq * r.Sq * r.Sk * (576 + 512)
            assert r.kv_bytes() == r.B * r.Sk * 576 * 2
    by_name = {r.name: r for r in rows}
    assert by_name["mla decode 64x4k, 128/1 d576/v512"].flops() == 2 * 64 * 128 * 4096 * 1088
    assert by_name["mla decode 132x2k, 16/1 d576/v512"].kv_bytes() == 132 * 2048 * 576 * 2
    assert by_name["mla Sq4 64x4k, 16/1 d576/v512"].flops() == 2 * 64 * 16 * 4 * 4096 * 1088
    assert by_name["mla decode 8x32k, 64/1 d576/v512"].kv_bytes() == 8 * 32768 * 576 * 2
    # Models without a latent cache have no mla rows; --batches keeps mla rows of the batch sizes given.
    assert zoo.zoo(["llama3_8b"], ["mla"]) == ([], [])
    assert zoo.mla_shape("llama3_8b") is None


def test_mla8_rows_read_an_e4m3_latent_cache():
    # The mla rows again over an e4m3 cache: one byte per latent element, the same FLOPs.
    rows, pending = zoo.zoo(["deepseek_v3"], ["mla", "mla8"])
    assert pending == []
    by_name = {r.name: r for r in rows}
    fp8, bf = by_name["mla decode e4m3 cache 64x4k, 128/1 d576/v512"], by_name["mla decode 64x4k, 128/1 d576/v512"]
    assert fp8.kind == "mla8" and fp8.latent and bf.latent and fp8.memory_bound
    assert fp8.kv_bytes() == 64 * 4096 * 576 and bf.kv_bytes() == 2 * fp8.kv_bytes()
    assert fp8.flops() == bf.flops()
    assert "mla Sq4 e4m3 cache 64x4k, 16/1 d576/v512" in by_name
    assert sum(r.kind == "mla8" for r in rows) == sum(r.kind == "mla" for r in rows) == 8
    assert {r.kind for r in zoo.zoo(["deepseek_v3"], ["mla8"])[0]} == {"mla8"}


def test_mla_rows_list_and_filter_by_batch(capsys):
    assert zoo.main(["--list", "--models", "deepseek_v3", "--rows", "mla", "--batches", "64"]) == 0
    out = capsys.readouterr().out
    assert "mla decode 64x4k, 128/1 d576/v512" in out and "mla Sq4 64x4k, 16/1 d576/v512" in out
    assert "132x2k" not in out and out.strip().endswith("4 rows")


def test_only_flashinfer_peers_the_mla_rows_and_its_absence_is_a_skip(monkeypatch):
    import peers
    mla = zoo.Row("mla", zoo.Shape(16, 1, 576, Dv=512), 8, 1, 32768, page=64)
    for name in ("cudnn", "fa2", "fa4", "flex"):
        with pytest.raises(peers.Unsupported):
            peers.PEERS[name](mla, {})
    # FlashInfer runs the rows serving engines call it on (MLA, decode, speculative, varlen batches),
    # not single prompts' prefill, and not what its wrappers lack (sinks; V narrower than K).
    with pytest.raises(peers.Unsupported, match="decode .paged, contiguous, speculative., varlen and paged prefill"):
        peers.PEERS["flashinfer"](zoo.Row("prefill", zoo.Shape(32, 8, 128), 1, 2048, 2048), {})
    with pytest.raises(peers.Unsupported, match="sinks"):
        peers.PEERS["flashinfer"](zoo.Row("paged", zoo.Shape(64, 8, 64, sinks=True), 32, 1, 4096, page=16), {})
    with pytest.raises(peers.Unsupported, match="sinks"):
        peers.PEERS["flashinfer"](zoo.Row("decode", zoo.Shape(64, 8, 64, sinks=True), 1, 1, 4096), {})
    with pytest.raises(peers.Unsupported, match="one head dim"):
        peers.PEERS["flashinfer"](zoo.Row("varlen", zoo.Shape(16, 16, 192, Dv=128), 8, 0, 0, lens=zoo.VARLEN_LENS), {})
    # FlashInfer may be absent: the arm is then Unsupported (a skipped peer), not a failed row.
    monkeypatch.setattr(peers, "_peer_modules", {})  # not imported yet in this process
    monkeypatch.setitem(sys.modules, "flashinfer", None)
    monkeypatch.setitem(sys.modules, "flashinfer.mla", None)
    with pytest.raises(peers.Unsupported, match="FlashInfer not importable"):
        peers.PEERS["flashinfer"](mla, {})


class _FakeFlashInfer:
    """flashinfer's decode / prefill wrappers as far as the peer arm uses them: records each plan and
    each run's inputs, returns zeros of the output shape."""
    def __init__(self):
        self.plans, self.runs = [], []
        fake = self

        class Wrapper:
            def __init__(self, work, layout, use_tensor_cores=None):
                assert layout == "NHD"
                self.kind = type(self).__name__

            def plan(self, *args, **kw):
                fake.plans.append((self.kind, args, kw))

            def run(self, q, cache):
                import torch
                fake.runs.append((self.kind, q.shape, cache))
                return torch.zeros(q.shape[0], q.shape[1], cache[1].shape[-1])

        self.BatchDecodeWithPagedKVCacheWrapper = type("BatchDecodeWithPagedKVCacheWrapper", (Wrapper,), {})
        self.BatchPrefillWithPagedKVCacheWrapper = type("BatchPrefillWithPagedKVCacheWrapper", (Wrapper,), {})


def test_flashinfer_decode_arm_plans_pages_as_flashinfer_reads_them(monkeypatch):
    """Contiguous decode: each sequence one page of Sk rows (identity table, last page full); paged:
    the row's own tables; speculative: the paged prefill wrapper, causal, Sq queries per sequence.
    Every set's call reads that set's K/V. (The kernels themselves run on the GPU: tools/gpu.sh zoo.)"""
    torch = pytest.importorskip("torch")
    import peers
    fake = _FakeFlashInfer()
    monkeypatch.setattr(peers, "flashinfer_module", lambda name="flashinfer": fake)
    monkeypatch.setattr(peers, "_fi_workspace", lambda dev: None)
    monkeypatch.setattr(peers, "_faster", lambda fns: fns[0])
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    sh = zoo.Shape(8, 2, 16)
    B, Sk = 2, 64

    def data(Sq, sets=2, page=0):
        d = {"q": [torch.randn(B, Sq, sh.Hq, sh.D) for _ in range(sets)],
             "k_bf16": [torch.randn(B, Sk, sh.Hkv, sh.D) for _ in range(sets)],
             "v_bf16": [torch.randn(B, Sk, sh.Hkv, sh.D) for _ in range(sets)]}
        if page:
            d["k_pages_bf16"] = torch.randn(sets * B * Sk // page, page, sh.Hkv, sh.D)
            d["v_pages_bf16"] = torch.randn_like(d["k_pages_bf16"])
            d["page_table"] = [torch.arange(B * Sk // page, dtype=torch.int32).view(B, -1) + s * B * Sk // page
                               for s in range(sets)]
        return d

    d = data(1)
    fn = peers.PEERS["flashinfer"](zoo.Row("decode", sh, B, 1, Sk), d)
    kind, args, kw = fake.plans[0]
    assert kind == "BatchDecodeWithPagedKVCacheWrapper"
    indptr, indices, last, hq, hkv, dim, page = args
    assert indptr.tolist() == [0, 1, 2] and indices.tolist() == [0, 1] and last.tolist() == [Sk, Sk]
    assert (hq, hkv, dim, page) == (8, 2, 16, Sk) and kw["window_left"] == -1 and kw["logits_soft_cap"] is None
    assert fn(1).shape == (B, 1, sh.Hq, sh.D)
    _, q_shape, cache = fake.runs[-1]
    assert q_shape == (B, sh.Hq, sh.D) and cache[0] is d["k_bf16"][1] and cache[1] is d["v_bf16"][1]

    fake.plans.clear()
    d = data(1, page=16)
    fn = peers.PEERS["flashinfer"](zoo.Row("paged", sh, B, 1, Sk, page=16), d)
    tables = [a[1] for _, a, _ in fake.plans[:2]]
    assert [t.tolist() for t in tables] == [t.reshape(-1).tolist() for t in d["page_table"]]
    assert fake.plans[0][1][0].tolist() == [0, 4, 8] and fake.plans[0][1][2].tolist() == [16, 16]
    fn(1)
    assert fake.runs[-1][2][0] is d["k_pages_bf16"]

    fake.plans.clear()
    d = data(4)
    fn = peers.PEERS["flashinfer"](zoo.Row("spec", sh, B, 4, Sk), d)
    kind, args, kw = fake.plans[0]
    assert kind == "BatchPrefillWithPagedKVCacheWrapper" and kw["causal"] is True
    assert args[0].tolist() == [0, 4, 8] and args[7] == Sk
    assert fn(0).shape == (B, 4, sh.Hq, sh.D) and fake.runs[-1][1] == (B * 4, sh.Hq, sh.D)


def test_paged_varlen_rows_read_the_same_keys_everywhere(monkeypatch):
    """A varlen row over a paged cache (pchunk's continuous-batching step): every sequence's keys sit
    in its own ceil(Sk / page) pages, shuffled; the table's padding repeats a sequence's last page
    (valid indices); the peers' packed K/V are those pages' rows; FlashInfer's paged prefill wrapper
    gets each sequence's pages (the padding cut), query offsets and last-page lengths."""
    torch = pytest.importorskip("torch")
    import peers
    sh, page = zoo.Shape(4, 2, 8), 16
    lens = ((1, 37), (5, 16), (3, 50))
    row = zoo.Row("mixed", sh, len(lens), 0, 0, page=page, lens=lens)
    assert row.name == "paged16 mixed step 1 decode + 2 chunks, 4/2 d8" and row.memory_bound
    d = {"q": [torch.randn(sum(q for q, _ in lens), sh.Hq, sh.D) for _ in range(2)]}
    zoo._paged_lens(row, d, 2)
    counts = [3, 1, 4]
    assert d["seqused_k"].tolist() == [37, 16, 50] and d["k_pages_bf16"].shape == (2 * 8, page, sh.Hkv, sh.D)
    for s, table in enumerate(d["page_table"]):
        assert table.shape == (3, 4) and table.dtype == torch.int32
        used = [table[b, :c].tolist() for b, c in enumerate(counts)]
        assert sorted(sum(used, [])) == list(range(8 * s, 8 * s + 8))  # each set its own pages, each once
        assert all(table[b, c:].eq(table[b, c - 1]).all() for b, c in enumerate(counts))
        for name in ("k", "v"):
            rows = torch.cat([d[f"{name}_pages_bf16"][t].flatten(0, 1)[:k] for t, (_, k) in zip(used, lens)])
            assert torch.equal(d[f"{name}_bf16"][s], rows)
    fake = _FakeFlashInfer()
    monkeypatch.setattr(peers, "flashinfer_module", lambda name="flashinfer": fake)
    monkeypatch.setattr(peers, "_fi_workspace", lambda dev: None)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    fn = peers.PEERS["flashinfer"](row, d)
    kind, args, kw = fake.plans[0]
    assert kind == "BatchPrefillWithPagedKVCacheWrapper" and kw["causal"] is True
    qo, indptr, indices, last = args[:4]
    assert qo.tolist() == [0, 1, 6, 9] and indptr.tolist() == [0, 3, 4, 8] and last.tolist() == [5, 16, 2]
    assert indices.tolist() == sum((d["page_table"][0][b, :c].tolist() for b, c in enumerate(counts)), [])
    assert fn(1).shape == d["q"][1].shape and fake.runs[-1][2][0] is d["k_pages_bf16"]
    chunk = zoo.Row("chunk", sh, 1, zoo.PCHUNK_Q, zoo.PCHUNK_K, page=zoo.PCHUNK_PAGE)
    assert chunk.name == "paged16 chunk 2k of 1x16k, 4/2 d8" and not chunk.memory_bound
    assert zoo.summary_kind(chunk) == zoo.summary_kind(row) == zoo.SUMMARY_KINDS[-1]
    assert zoo.peer_label(row, "cudnn") == "cudnn (contiguous)" and zoo.peer_label(row, "fa4") == "fa4"


def test_model_features_reach_the_shape():
    gemma2, _ = zoo.model_shape("gemma2_9b")
    oss, _ = zoo.model_shape("gpt_oss_120b")
    g3, _ = zoo.model_shape("gemma3_27b")  # text_config nesting
    assert gemma2.softcap == 50.0 and gemma2.D == 256
    assert oss.sinks and oss.D == 64 and (oss.Hq, oss.Hkv) == (64, 8)
    assert (g3.Hq, g3.Hkv, g3.D) == (32, 16, 128)


def test_sliding_window_layers_get_rows_of_their_own():
    """A model's windowed layers are a shape of their own (fa4jit.model_configs says which layers
    slide): Gemma 3 has both kinds, Mistral 7B v0.1 and Phi-3-mini slide on every layer, Llama 3
    on none; a window row's bytes are the keys its queries see."""
    g3, _ = zoo.model_shapes("gemma3_27b")
    assert [s.window for s in g3] == [0, 1024] and g3[1].D == 128
    mistral, _ = zoo.model_shapes("mistral_7b_v01")
    assert [s.window for s in mistral] == [4096]
    assert [s.window for s in zoo.model_shapes("phi3_mini_4k")[0]] == [2047]
    assert [s.window for s in zoo.model_shapes("llama3_8b")[0]] == [0]
    oss = zoo.model_shapes("gpt_oss_20b")[0]
    assert [(s.window, s.sinks) for s in oss] == [(0, True), (128, True)]
    rows, _ = zoo.zoo(["gemma3_27b"], ("decode",))
    names = {r.name for r in rows}
    assert "decode 32x32k, 32/16 d128 window 1024" in names and "decode 32x32k, 32/16 d128" in names
    w = zoo.Row("decode", g3[1], 32, 1, 32768)
    assert w.kv_bytes() == 2 * 16 * 128 * 2 * 32 * 1024
    assert zoo.Row("spec", g3[1], 32, 4, 32768).kv_bytes() == 2 * 16 * 128 * 2 * 32 * 1027


def test_row_rates_count_flops_and_kv_bytes():
    r = zoo.Row("prefill", zoo.Shape(16, 16, 128), 1, 2048, 2048)
    assert r.flops() == 4 * 128 * 16 * (2048 * 2049 // 2)
    d = zoo.Row("decode", zoo.Shape(32, 8, 128), 32, 1, 4096)
    assert d.kv_bytes() == 2 * 8 * 128 * 2 * 32 * 4096
    assert zoo.Row("fp8kv", zoo.Shape(32, 8, 128), 32, 1, 4096).kv_bytes() == d.kv_bytes() // 2
    assert d.memory_bound and not r.memory_bound


def test_mixed_step_counts_each_sequence_by_its_own_lengths():
    rows, _ = zoo.zoo(["llama3_8b"], ["mixed"])
    r, decode = rows  # the step, then its decode rows alone in one varlen call
    assert r.name == "mixed step 48 decode + 2 chunks, 32/8 d128" and decode.name == "varlen decode 48 seqs, 32/8 d128"
    assert sum(q == 1 for q, _ in r.lens) == 48 and [p for p in r.lens if p[0] > 1] == [(2048, 2048)] * 2
    assert r.kv_bytes() == 2 * 8 * 128 * 2 * sum(k for _, k in r.lens)
    assert r.flops() == 4 * 128 * 32 * (sum(k for q, k in r.lens if q == 1) + 2 * (2048 * 2049 // 2))
    assert r.memory_bound
    assert decode.lens == r.lens[:48] and decode.kv_bytes() == 2 * 8 * 128 * 2 * sum(k for _, k in decode.lens)
    assert decode.memory_bound


def test_table_puts_the_worst_row_first_and_judges_the_aa_arm():
    good = zoo.Row("decode", zoo.Shape(32, 8, 128), 32, 1, 4096, models=["a"])
    bad = zoo.Row("decode", zoo.Shape(28, 4, 128), 32, 1, 4096, models=["b"])
    s_good = harness.summarize(rounds_of([1.0] * 3, [1.0] * 3, {"cudnn": [1.2] * 3}), "fa4jit", "fa4jit A/A", ["cudnn"])
    s_bad = harness.summarize(rounds_of([5.0] * 3, [5.0] * 3, {"cudnn": [1.0] * 3}), "fa4jit", "fa4jit A/A", ["cudnn"])
    t = zoo.table([(good, s_good), (bad, s_bad)])
    lines = [ln for ln in t.splitlines() if ln.startswith("| decode")]
    assert "28/4" in lines[0] and "32/8" in lines[1]
    assert "within +-2%" in t
    s_noisy = harness.summarize(rounds_of([1.0] * 3, [1.1] * 3, {"cudnn": [1.2] * 3}), "fa4jit", "fa4jit A/A", ["cudnn"])
    assert "OUTSIDE +-2%" in zoo.table([(good, s_noisy)])


def test_summary_counts_each_kind_of_row_and_marks_a_worst_below_the_bar():
    """docs/PERF.md's summary per kind of row (zoo.summary): rows go to their kind (a step is not its
    decode rows alone; a window has kinds of its own), each kind's worst and median, worst in bold
    below 0.97 back to back, and the peers that led."""
    d128, window = zoo.Shape(32, 8, 128), zoo.Shape(32, 8, 128, window=4096)
    step = zoo.Row("mixed", d128, 50, 2048, 8700, lens=zoo.MIXED_LENS)
    alone = zoo.Row("mixed", d128, 48, 1, 8700, lens=zoo.VARLEN_DECODE_LENS)
    assert zoo.summary_kind(step).startswith("continuous-batching step")
    assert zoo.summary_kind(alone).startswith("varlen decode")
    assert zoo.summary_kind(zoo.Row("decode", d128, 1, 1, 4096)) == "decode, batch 1"
    assert zoo.summary_kind(zoo.Row("paged", d128, 32, 1, 4096, page=16)) == "paged decode, pages 1 and 16"
    assert zoo.summary_kind(zoo.Row("paged", window, 32, 1, 4096, page=1)).startswith("sliding-window layers: decode")
    assert zoo.summary_kind(zoo.Row("mla8", zoo.Shape(16, 1, 576, Dv=512), 8, 1, 32768, page=64)).startswith("MLA")

    def run(ms, peer, peer_ms):
        return harness.summarize(rounds_of([ms] * 3, [ms] * 3, {peer: [peer_ms] * 3}), "fa4jit", "fa4jit A/A", [peer])
    rows = [(zoo.Row("decode", d128, 32, 1, 4096), run(1.0, "cudnn", 1.2)),
            (zoo.Row("decode", zoo.Shape(28, 4, 128), 32, 1, 4096), run(1.0, "cudnn", 0.9)),
            (zoo.Row("decode", zoo.Shape(64, 8, 128), 32, 1, 4096), run(1.0, "fa4", 1.1)),
            (step, run(1.0, "fa4", 1.5))]
    lines = {ln.split(" | ")[0][2:]: ln for ln in zoo.summary(rows).splitlines()[2:]}
    assert set(lines) == {"decode, batch 32 and 128", "continuous-batching step (48 decode rows + 2 chunks)"}
    assert lines["decode, batch 32 and 128"] == \
        "| decode, batch 32 and 128 | 3 | 0.90, 1.10 | **0.90**, 1.10 | cudnn 2, fa4 1 |"
    assert "| 1.50, 1.50 | 1.50, 1.50 | fa4 1 |" in lines["continuous-batching step (48 decode rows + 2 chunks)"]


def test_list_runs_without_a_gpu(capsys):
    assert zoo.main(["--list", "--models", "phi4", "--rows", "spec"]) == 0
    out = capsys.readouterr().out
    assert "spec Sq4 32x4k, 40/10 d128" in out and out.strip().endswith("2 rows")


def test_match_keeps_the_rows_whose_name_holds_the_text(capsys):
    argv = ["--list", "--models", "gpt_oss_120b", "--rows", "mixed", "--kinds", "mixed"]
    assert zoo.main(argv) == 0
    every = capsys.readouterr().out
    assert zoo.main(argv + ["--match", "window 128"]) == 0
    out = capsys.readouterr().out
    rows = [ln for ln in out.splitlines() if ln.startswith(("mixed", "varlen"))]
    assert rows and all("window 128" in ln for ln in rows)
    assert any(ln.startswith(("mixed", "varlen")) and "window" not in ln for ln in every.splitlines())
    assert out.strip().endswith(f"{len(rows)} rows")


def test_bad_arguments_name_the_flag():
    with pytest.raises(SystemExit):
        zoo.main(["--list", "--models", "llama9"])
    with pytest.raises(SystemExit):
        zoo.main(["--list", "--rows", "decodes"])


def test_bench_has_no_timing_path_in_another_process():
    """Every bench/ script that times a peer runs fa4jit in the same process (issue 51): none may
    start a process (a fresh process runs on a cooler GPU)."""
    bench = os.path.join(REPO, "bench")
    for name in os.listdir(bench):
        if not name.endswith(".py"):
            continue
        with open(os.path.join(bench, name), encoding="utf-8") as f:
            text = f.read()
        times_peers = any(w in text for w in ("scaled_dot_product_attention", "flash_attn", "flashinfer", "peers"))
        if times_peers:
            assert "subprocess" not in text, name


def test_paged_row_caches_hold_the_same_keys_in_both_layouts():
    """The flex table's paged row: fa4jit's pages and FlexAttention's PagedAttention cache are the
    same shuffled physical pages, and FlexAttention's documented recipe over them (the converted
    block mask and mask_mod) computes causal attention over the logical sequence (eager, CPU)."""
    torch = pytest.importorskip("torch")
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    B, H, S, D, P = 2, 2, 512, 32, 128
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(B, H, S, D, generator=g) for _ in range(3))
    (kc, vc), table, pa, (kf, vf) = zoo.paged_caches(k, v, P)
    assert table.dtype == torch.int32 and sorted(table.flatten().tolist()) == list(range(B * S // P))
    assert table.flatten().tolist() != list(range(B * S // P))  # shuffled, not in order
    for b in range(B):
        for r in (0, 1, P - 1, P, S - 1):
            page, row = int(table[b, r // P]), r % P
            assert torch.equal(kc[page, row], k[b, :, r]) and torch.equal(vc[page, row], v[b, :, r])
            assert torch.equal(kf[0, :, page * P + row], k[b, :, r])

    def causal(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx
    logical = create_block_mask(causal, B, None, S, S, device="cpu", BLOCK_SIZE=P)
    out = flex_attention(q, kf, vf, block_mask=pa.convert_logical_block_mask(logical))
    ref = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True)
    assert (out.double() - ref).abs().max().item() < 1e-4


# ---- on a GPU --------------------------------------------------------------------------------------

def test_steady_state_measurements_repeat_within_two_percent():
    """The harness's claim: once warmed to a stable clock, the same work timed twice, seconds of
    load apart, reads the same within 2% (a fresh-process or just-idled reading does not)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU visible to torch (GPU tests run on the lent GPU machine)")
    nv = harness.Nvml()
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn_like(a)
    w = harness.warm_until_stable(lambda: a @ b, nv, min_s=3.0, max_s=20.0)
    first = harness.per_call(lambda i: a @ b, iters=20)
    harness.warm_until_stable(lambda: a @ b, nv, min_s=2.0, max_s=2.0)
    second = harness.per_call(lambda i: a @ b, iters=20)
    print(json.dumps({"warm": w["seconds"], "clock": w["sm_mhz"], "first": first, "second": second}))
    assert math.isfinite(first) and abs(second / first - 1) <= 0.02


def test_a_row_measured_again_comes_from_the_newest_run_in_any_order(tmp_path):
    """combined_table: runs sort by their heads' date and time (a run without a time first on its
    date), so a row measured again shows the newest run's figures whatever order the files come in."""
    src = os.path.join(REPO, "docs", "perf", "zoo_mixed_poles.json")
    with open(src, encoding="utf-8") as f:
        j = json.load(f)
    j["rows"] = j["rows"][:1]
    runs = {}
    for name, date, when, b2b in (("old", "2026-12-01", None, 0.5), ("new", "2026-12-01", "23:59", 1.25)):
        head = {k: v for k, v in j["head"].items() if k != "time"}
        head["date"] = date
        if when:
            head["time"] = when
        row = json.loads(json.dumps(j["rows"][0]))
        row["vs_best_b2b"] = [b2b] * len(row["vs_best_b2b"])
        runs[name] = tmp_path / f"{name}.json"
        runs[name].write_text(json.dumps({**j, "head": head, "rows": [row]}), encoding="utf-8")
    for order in (["old", "new"], ["new", "old"]):
        table = zoo.combined_table([str(runs[n]) for n in order])
        line = [ln for ln in table.splitlines() if ln.startswith("| mixed step")]
        assert len(line) == 1 and "| 1.250 " in line[0], (order, line)


def test_perf_md_holds_the_block_the_committed_runs_make(tmp_path):
    """docs/PERF.md's zoo block (the runs, the counts, the rows below 0.97) is what --perf-md makes of
    docs/perf/*.json: a run added without rewriting it fails here. --perf-md rewrites only the block."""
    import glob
    paths = glob.glob(os.path.join(REPO, "docs", "perf", "*.json"))
    with open(os.path.join(REPO, "docs", "PERF.md"), encoding="utf-8") as f:
        text = f.read()
    start, end = text.index(zoo.PERF_BEGIN), text.index(zoo.PERF_END) + len(zoo.PERF_END)
    block = zoo.perf_block(paths)
    assert text[start:end] == block, ("docs/PERF.md's zoo block is stale: python3 bench/zoo.py --table "
                                      "docs/perf/*.json --perf-md docs/PERF.md")
    assert zoo.perf_block(list(reversed(paths))) == block  # the files' order does not matter
    lines = block.splitlines()
    listed = [ln for ln in lines[lines.index(next(ln for ln in lines if ln.startswith("| row |"))) + 2:]
              if ln.startswith("| ")]
    kinds = [ln for ln in lines if ln.startswith("| ") and ln.split(" | ")[0][2:] in zoo.SUMMARY_KINDS]
    assert kinds and sum(int(ln.split(" | ")[1]) for ln in kinds) + 6 >= len(listed)  # every kind's rows counted
    counts = next(ln for ln in block.splitlines() if "rows measured of the zoo's" in ln)
    assert f": {len(listed)} below 0.97 back to back" in counts, counts
    doc = tmp_path / "PERF.md"
    doc.write_text("# head\n" + zoo.PERF_BEGIN + "\nstale\n" + zoo.PERF_END + "\ntail\n", encoding="utf-8")
    assert zoo.main(["--table", *paths, "--perf-md", str(doc)]) == 0
    assert doc.read_text(encoding="utf-8") == "# head\n" + block + "\ntail\n"
    assert not zoo.update_perf_md(str(doc), paths)  # current: not written again
    doc.write_text("no block\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="no generated block"):
        zoo.update_perf_md(str(doc), paths)


def test_table_of_the_committed_runs_renders_every_row(capsys):
    """docs/perf/*.json are the runs behind docs/PERF.md's table: --table rebuilds it from them."""
    import glob
    paths = sorted(glob.glob(os.path.join(REPO, "docs", "perf", "*.json")))
    assert paths, "docs/perf holds the current table's runs"
    assert zoo.main(["--table", *paths]) == 0
    out = capsys.readouterr().out
    rows = [ln for ln in out.splitlines() if ln.startswith("| ") and not ln.startswith("| row")]
    names = {zoo_row.name for p in paths for zoo_row, _ in zoo.load_results(p)[1]}
    assert len(rows) == len(names) and "A/A (the same fa4jit kernel" in out
