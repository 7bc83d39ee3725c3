"""fa4jit against its peers, in the same run on the same GPU.

Usage (GPU machine, from the repo root, with build/ present):
  python3 bench/compare.py [--rounds N] [--variants ...] [--rows ...] [--out results.json]
Prints a markdown table (the one docs/PERF.md keeps) and writes every number as JSON.

Each row runs --rounds interleaved rounds: every fa4jit variant and every peer once per round
(fa4jit first in even rounds, the peers first in odd ones), so clock and power drift over a run
falls on all kernels alike. The table gives each kernel's median over the rounds, and the ratio to
cuDNN as the median of the per-round (paired) ratios with their range: one kernel's single
readings on an H200 moved by up to 7% within a run (PERF.md run 14).
"""
import statistics
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from peers import peers  # noqa: E402

FA4JIT = os.environ.get("FA4JIT", "./build/fa4jit")

# The standard prefill rows: (B, H, S, D[, Hkv]) x causal.
PREFILL = [(16, 16, 2048, 128), (4, 16, 8192, 128), (2, 16, 16384, 128), (8, 16, 4096, 64)]
# --rows lead: issue 23's table against FlashAttention-4 (GQA, head dim 256, short causal).
LEAD = PREFILL + [(2, 32, 8192, 128, 8), (1, 64, 4096, 128, 8), (2, 16, 4096, 256), (4, 32, 1024, 128)]


def ours(arch, B, H, Hkv, Sq, Sk, D, causal, iters=30, tune="", extra=None, binary=None):
    cfg = {"depth": D, "mask": "causal" if causal else "none"}
    for k, v in (extra or {}).items():
        if v.get("depth", D) == D:
            cfg.update({kk: vv for kk, vv in v.items() if kk != "depth"})
    path = f"/tmp/fa4jit_bench_{D}_{int(causal)}.json"
    with open(path, "w") as f:
        json.dump(cfg, f)
    cmd = [binary or FA4JIT, "bench", "--json", "--config", path, "--batch", str(B), "--heads", str(H), "--kv-heads", str(Hkv),
           "--seqlen-q", str(Sq), "--seqlen-k", str(Sk), "--iters", str(iters)]
    if arch:
        cmd += ["--arch", arch]
    env = dict(os.environ, FA4JIT_TUNE=tune)
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        return {"error": (r.stderr or r.stdout).strip()[-160:]}
    j = json.loads(r.stdout.strip().splitlines()[-1])
    j["tflops_stream"] = j["tflops"] * j["ms"] / j["ms_stream"]
    return j


def all_ours(variants, B, H, Hkv, S, D, causal):
    res = {}
    for name, (arch, tune, cfg, binary) in variants.items():
        if cfg and cfg.get("depth", D) != D:
            res[name] = {"error": "n/a for this depth"}
            continue
        res[name] = ours(arch, B, H, Hkv, S, S, D, causal, tune=tune, extra={"cfg": cfg} if cfg else None, binary=binary)
    return res


PEERS = ("cudnn", "flash2", "flex", "fa4")


def summarize(rounds):
    """Per kernel: the median over rounds of "tflops" and "tflops_stream" (errors if any round
    failed), the rounds' readings, and for fa4jit kernels the paired per-round ratios to cuDNN."""
    out = {}
    for name in rounds[0]:
        runs = [rd.get(name, {}) for rd in rounds]
        bad = [x for x in runs if "tflops" not in x]
        if bad:
            out[name] = bad[0] if "error" in bad[0] else {"error": "missing"}
            continue
        k = {"runs": [round(x["tflops"], 1) for x in runs]}
        for key in ("tflops", "tflops_stream"):
            k[key] = statistics.median(x[key] for x in runs)
        for peer, suffix in (("cudnn", ""), ("fa4", "_fa4")):  # "tflops_ratio" is against cuDNN
            if name in PEERS or not all("tflops" in rd.get(peer, {}) for rd in rounds):
                continue
            for key in ("tflops", "tflops_stream"):
                rs = [x[key] / rd[peer][key] for x, rd in zip(runs, rounds)]
                k[key + "_ratio" + suffix] = {"median": statistics.median(rs), "min": min(rs), "max": max(rs), "all": rs}
        out[name] = k
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--variants", default="sm90a=sm_90a,sm80=sm_90",
                    help="fa4jit variants: name=arch[@binary][:FA4JIT_TUNE[:config JSON for one depth]], comma-separated; "
                         "';' separates tune items, e.g. bn176=sm_90a::{\"depth\":128;\"BN\":176}; @binary times another "
                         "fa4jit build in the same rounds (A/B of two commits), e.g. base=sm_90a@.device/fa4jit_base")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "compare.json"))
    ap.add_argument("--no-flex", action="store_true")
    ap.add_argument("--fa4", action="store_true", help="FlashAttention-4 as a peer (flash_attn.cute; FA4_SITE: "
                    "../shared/bench/fa4_peer.sh)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds per row (medians reported)")
    ap.add_argument("--rows", default="", help="B,H,S,D[,Hkv];... instead of the standard prefill rows; "
                    "'lead': those plus issue 23's GQA, head dim 256 and short causal rows")
    a = ap.parse_args()
    if a.rows == "lead":
        rows_spec = LEAD
    else:
        rows_spec = [tuple(int(x) for x in r.split(",")) for r in a.rows.split(";") if r] or PREFILL
    variants = {}
    for item in filter(None, a.variants.split(",")):
        name, spec = item.split("=", 1)
        arch, _, rest = spec.partition(":")
        arch, _, binary = arch.partition("@")
        tune, _, cfg = rest.partition(":")
        variants[name] = (arch, tune.replace(";", ","), json.loads(cfg.replace(";", ",")) if cfg else None, binary or None)
    archs = list(variants)
    rows = []
    for spec in rows_spec:
        B, H, S, D = spec[:4]
        Hkv = spec[4] if len(spec) > 4 else H
        for causal in (False, True):
            rounds = []
            for r in range(a.rounds):
                kernels = [lambda: all_ours(variants, B, H, Hkv, S, D, causal),
                           lambda: peers(B, H, Hkv, S, S, D, causal, flex=not a.no_flex, fa4=a.fa4)]
                res = {}
                for run in (kernels if r % 2 == 0 else kernels[::-1]):
                    res.update(run())
                rounds.append(res)
            row = {"B": B, "H": H, "Hkv": Hkv, "S": S, "D": D, "causal": causal, "rounds": rounds}
            row.update(summarize(rounds))
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "rounds"}), flush=True)
    with open(a.out, "w") as f:
        json.dump(rows, f, indent=1)

    # Two timings of every kernel: "tflops" from the median synchronized call (host cost included)
    # and "tflops_stream" from back-to-back calls (device time), each the median over the rounds.
    # sm90a / cuDNN is the median of the paired per-round ratios (range in brackets), for both.
    def tf(x, key="tflops"):
        return f"{x[key]:.0f}" if isinstance(x, dict) and key in x else "err"

    def ratio(r, key):
        x = r.get("sm90a", {}).get(key)
        if not x:
            return "n/a"
        return f"{x['median']:.3f} ({x['min']:.2f}-{x['max']:.2f})" if len(x["all"]) > 1 else f"{x['median']:.3f}"

    cols = archs + ["cudnn", "flash2"] + ([] if a.no_flex else ["flex"]) + (["fa4"] if a.fa4 else [])
    fa4_head = " sm90a / FA4 | stream ratio / FA4 |" if a.fa4 else ""
    print("\n| B | H | S | D | causal | " + " | ".join(cols) + " | sm90a / cuDNN | stream: sm90a, cuDNN | stream ratio |"
          + fa4_head)
    print("|" + "---|" * (9 + len(cols) + (2 if a.fa4 else 0)))
    for r in rows:
        heads = f"{r['H']}/{r['Hkv']}" if r["Hkv"] != r["H"] else f"{r['H']}"
        fa4_cols = f" {ratio(r, 'tflops_ratio_fa4')} | {ratio(r, 'tflops_stream_ratio_fa4')} |" if a.fa4 else ""
        print(f"| {r['B']} | {heads} | {r['S']} | {r['D']} | {'yes' if r['causal'] else 'no'} | "
              + " | ".join(tf(r[c]) for c in cols) + f" | {ratio(r, 'tflops_ratio')} | "
              f"{tf(r.get('sm90a'), 'tflops_stream')}, {tf(r['cudnn'], 'tflops_stream')} | {ratio(r, 'tflops_stream_ratio')} |"
              + fa4_cols)


if __name__ == "__main__":
    main()
