"""Causal varlen prefill (packed sequences, cu_seqlens): fa4jit against FlashAttention-4's
flash_attn_varlen_func in interleaved rounds.

Usage (GPU machine, repo root, after ../shared/bench/fa4_peer.sh stage B for FA4):
  FA4JIT=.device/fa4jit python3 bench/varlen.py [--rounds 3] [--out varlen.json]
fa4jit runs through its C++ CLI (`fa4jit bench --seqlens-q/k`), once with max_seqlen_k (the longest
sequence, as a FlashAttention caller passes it) and once without (--max-seqlen-k 0); FA4 through
PyTorch with the same lengths and its required max_seqlen_q / max_seqlen_k. bf16, random normal
inputs, CUDA events: per call the median of synchronized calls, "stream" back-to-back calls.
TFLOP/s counts each sequence's causal half, 2 * H * D * Sq * Sk (Sq = Sk here).
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from peers import fa4_func, median_ms, stream_ms  # noqa: E402

import torch  # noqa: E402

FA4JIT = os.environ.get("FA4JIT", "./build/fa4jit")
SERVING16 = [1843, 512, 97, 1200, 2048, 640, 1500, 333, 980, 1760, 256, 1111, 700, 1999, 150, 880]
# (name, q heads, kv heads, head dim, sequence lengths)
ROWS = [
    ("8 x 1024", 16, 16, 128, [1024] * 8),
    ("16 x 2048", 16, 16, 128, [2048] * 16),
    ("8 x 1024 GQA 32/8", 32, 8, 128, [1024] * 8),
    ("serving 16 (97-2048)", 16, 16, 128, SERVING16),
    ("4 x 8192", 16, 16, 128, [8192] * 4),
    ("8 x 1024 d64", 16, 16, 64, [1024] * 8),
]


def flops(H, D, lens):
    return sum(2.0 * H * D * n * n for n in lens)  # causal: half of 4 * H * D * Sq * Sk


def ours(H, Hkv, D, lens, hint=True, iters=30):
    path = "/tmp/fa4jit_varlen.json"
    with open(path, "w") as f:
        json.dump({"depth": D, "mask": "causal"}, f)
    seq = ",".join(map(str, lens))
    cmd = [FA4JIT, "bench", "--json", "--config", path, "--arch", "sm_90a", "--heads", str(H), "--kv-heads",
           str(Hkv), "--seqlens-q", seq, "--seqlens-k", seq, "--iters", str(iters)]
    if not hint:
        cmd += ["--max-seqlen-k", "0"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return {"error": (r.stderr or r.stdout).strip()[-200:]}
    j = json.loads(r.stdout.strip().splitlines()[-1])
    return {"ms": j["ms"], "ms_stream": j["ms_stream"]}


def fa4(fn, H, Hkv, D, lens):
    total = sum(lens)
    q = torch.randn(total, H, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(total, Hkv, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(total, Hkv, D, device="cuda", dtype=torch.bfloat16)
    cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0).tolist()), dtype=torch.int32, device="cuda")
    call = lambda: fn(q, k, v, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=max(lens),  # noqa: E731
                      max_seqlen_k=max(lens), causal=True)
    try:
        call()  # compile outside the timing
        return {"ms": median_ms(call), "ms_stream": stream_ms(call)}
    except Exception as e:  # noqa: BLE001 - FA4 refusing a shape is a result, not a crash
        return {"error": f"{type(e).__name__}: {e}"[:160]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "varlen.json"))
    a = ap.parse_args()
    fn, why = fa4_func("flash_attn_varlen_func")
    if fn is None:
        print(f"FA4: not importable ({why}); fa4jit only")
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    rng = lambda xs: f"{med(xs):.3f} ({min(xs):.2f}-{max(xs):.2f})" if xs else "—"  # noqa: E731
    print(f"{torch.cuda.get_device_name()}; TFLOP/s per call (median of {a.rounds} interleaved rounds); ratios: "
          "median (range) of the per-round ratios")
    print("| batch | H | D | fa4jit | fa4jit, no max_seqlen_k | FA4 | fa4jit / FA4 | fa4jit / no hint | "
          "stream: fa4jit, FA4 | stream fa4jit / FA4 |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    out = []
    for name, H, Hkv, D, lens in ROWS:
        rounds = []
        for i in range(a.rounds):  # the arms' order alternates between rounds
            arms = [("ours", lambda: ours(H, Hkv, D, lens)), ("nohint", lambda: ours(H, Hkv, D, lens, hint=False))]
            if fn is not None:
                arms.append(("fa4", lambda: fa4(fn, H, Hkv, D, lens)))
            got = {k: f() for k, f in (arms if i % 2 == 0 else arms[::-1])}
            rounds.append(got)
        out.append({"row": name, "H": H, "Hkv": Hkv, "D": D, "lens": lens, "rounds": rounds})
        ok = [r for r in rounds if "ms" in r["ours"] and "ms" in r["nohint"]]
        if not ok:
            print(f"| {name} | {H}/{Hkv} | {D} | " + "; ".join(x.get("error", "") for x in rounds[0].values()) + " |")
            continue
        with_fa4 = [r for r in ok if "ms" in r.get("fa4", {})]
        f = flops(H, D, lens)
        tf = lambda rs, key: f"{f / med([r[key]['ms'] for r in rs]) / 1e9:.0f}" if rs else "—"  # noqa: E731
        vs_fa4 = [r["fa4"]["ms"] / r["ours"]["ms"] for r in with_fa4]
        vs_nohint = [r["nohint"]["ms"] / r["ours"]["ms"] for r in ok]
        st = f"{f / med([r['ours']['ms_stream'] for r in ok]) / 1e9:.0f}"
        st_fa4 = [r["fa4"]["ms_stream"] / r["ours"]["ms_stream"] for r in with_fa4]
        if with_fa4:
            st += f", {f / med([r['fa4']['ms_stream'] for r in with_fa4]) / 1e9:.0f}"
        fa4_cell = tf(with_fa4, "fa4") if with_fa4 else rounds[0].get("fa4", {}).get("error", "—")[:60]
        print(f"| {name} | {H}/{Hkv} | {D} | {tf(ok, 'ours')} | {tf(ok, 'nohint')} | {fa4_cell} | {rng(vs_fa4)} | "
              f"{rng(vs_nohint)} | {st} | {rng(st_fa4)} |", flush=True)
    with open(a.out, "w") as fh:
        json.dump({"gpu": torch.cuda.get_device_name(), "rows": out}, fh, indent=1)


if __name__ == "__main__":
    main()
