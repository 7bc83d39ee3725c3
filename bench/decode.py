"""Decode (split-KV) speed: fa4jit against PyTorch SDPA (cuDNN, flash) in the same run.

Usage (GPU machine, repo root): FA4JIT=.device/fa4jit python3 bench/decode.py [--out decode.json]
Shapes are the variants issue's: bf16, D=128, Hq=32, Hkv=8, K/V contiguous (and paged, page 64,
for fa4jit). "TB/s" = K+V bytes read / time, the number a memory-bound decode is judged by.
Prints the markdown table docs/PERF.md keeps.

--fa4 adds FlashAttention-4 (flash_attn.cute, FA4_SITE from ../shared/bench/fa4_peer.sh) and a
second table: issue 23's goal per row (every round >= 1.05x FA4 and >= 1.10x cuDNN per call) over
--rounds interleaved rounds, beside the device's copy rate (read + write of 2 GiB): the ceiling a
decode that reads its K/V once approaches.
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from peers import fa4_func, median_ms, stream_ms  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

FA4JIT = os.environ.get("FA4JIT", "./build/fa4jit")
SHAPES = [(8, 32, 8, 1, 32768), (64, 32, 8, 1, 4096), (1, 32, 8, 1, 131072), (8, 32, 8, 16, 32768)]
D = 128


def ours(arch, B, H, Hkv, Sq, Sk, page=0, pack=True, splits=0, iters=50, bhsd=True, kv_dtype=None, extra=None):
    path = "/tmp/fa4jit_decode.json"
    cfg = {"depth": D, "mask": "none", **(extra or {})}  # extra: config fields, e.g. {"BN": 128}
    if kv_dtype:  # "e4m3": an FP8 KV cache under the bf16 query (bench/kv_fp8.py)
        cfg["kv_dtype"] = kv_dtype
    with open(path, "w") as f:
        json.dump(cfg, f)
    cmd = [FA4JIT, "bench", "--json", "--config", path, "--arch", arch, "--batch", str(B), "--heads", str(H),
           "--kv-heads", str(Hkv), "--seqlen-q", str(Sq), "--seqlen-k", str(Sk), "--iters", str(iters),
           "--splits", str(splits)]
    if pack:
        cmd.append("--pack-gqa")
    if page:
        cmd += ["--page-size", str(page)]
    elif bhsd:  # the peers' layout: each KV head's rows contiguous
        cmd.append("--kv-bhsd")
    env = dict(os.environ)
    if ":" in arch:  # "sm_90a:persistent=0": a tuning variant (FA4JIT_TUNE) timed in the same run
        arch, env["FA4JIT_TUNE"] = arch.split(":", 1)
        cmd[cmd.index("--arch") + 1] = arch
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        return {"error": (r.stderr or r.stdout).strip()[-200:]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def kv_bytes_of(B, Hkv, Sk):
    return 2 * B * Hkv * Sk * D * 2  # K and V, bf16


def sdpa(B, H, Hkv, Sq, Sk, fa4=False):
    q = torch.randn(B, H, Sq, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(B, Hkv, Sk, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    out = {}
    if fa4:  # (batch, seqlen, heads, dim); no split-KV on Hopper; its first call per shape compiles
        fn4, why = fa4_func()
        if fn4 is None:
            out["fa4"] = None
            print(f"fa4: {why}", file=sys.stderr)
        else:
            q4, k4, v4 = (t.transpose(1, 2).contiguous() for t in (q, k, v))
            try:
                fn = lambda: fn4(q4, k4, v4, causal=False)  # noqa: E731
                out["fa4"] = median_ms(fn, iters=50, warm=10)
                out["fa4_stream"] = stream_ms(fn, iters=50, warm=5)
            except Exception as e:  # noqa: BLE001 - a peer that cannot run this shape is reported
                out["fa4"] = None
                print(f"fa4: {str(e)[:100]}", file=sys.stderr)
    for name, be in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash2", SDPBackend.FLASH_ATTENTION)):
        try:
            with sdpa_kernel([be]):
                fn = lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)  # noqa: E731
                out[name] = median_ms(fn, iters=50, warm=10)
                out[name + "_stream"] = stream_ms(fn, iters=50, warm=5)
        except Exception as e:
            out[name] = None
            print(f"{name}: {str(e)[:100]}", file=sys.stderr)
    return out


def copy_tbps():
    """Device-to-device copy of 2 GiB (read + write bytes / time): the bandwidth ceiling."""
    x = torch.empty(2 * 1024**3, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    ms = median_ms(lambda: y.copy_(x), iters=20, warm=3)
    del x, y
    torch.cuda.empty_cache()
    return 2 * 2 * 1024**3 / ms / 1e9


def goal_table(shapes, rounds, copy):
    """Issue 23's decode rows: the first arm against cuDNN and FA4, per round, and the copy rate."""
    print(f"\ncopy rate (read + write): {copy:.2f} TB/s")
    print("| B | Sq | Sk | fa4jit µs, per call (TB/s) | cuDNN µs | FA4 µs | / cuDNN (rounds) | / FA4 (rounds) | "
          "stream: fa4jit, cuDNN, FA4 µs | fa4jit TB/s / copy | goal |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for (B, H, Hkv, Sq, Sk), rs in zip(shapes, rounds):
        if not rs:
            print(f"| {B} | {Sq} | {Sk} | no round ran (see the first table) |")
            continue
        kv_bytes = kv_bytes_of(B, Hkv, Sk)
        med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
        ours_ms = [r["ours"]["ms"] for r in rs]
        cud = [r["peers"]["cudnn"] for r in rs]
        fa4 = [r["peers"].get("fa4") for r in rs]
        vs_cud = [c / o for c, o in zip(cud, ours_ms)]
        vs_fa4 = [f / o for f, o in zip(fa4, ours_ms)] if all(fa4) else []
        st = [med([r["ours"]["ms_stream"] for r in rs]), med([r["peers"]["cudnn_stream"] for r in rs]),
              med([r["peers"]["fa4_stream"] for r in rs]) if vs_fa4 else float("nan")]
        tbps = kv_bytes / med(ours_ms) / 1e9
        miss = [f"cuDNN {min(vs_cud):.3f}"] if min(vs_cud) < 1.10 else []
        miss += [f"FA4 {min(vs_fa4):.3f}"] if vs_fa4 and min(vs_fa4) < 1.05 else []
        goal = "no FA4" if not vs_fa4 else ("met" if not miss else "not met (" + ", ".join(miss) + ")")
        rng = lambda xs: f"{med(xs):.3f} ({min(xs):.2f}-{max(xs):.2f})" if xs else "—"  # noqa: E731
        print(f"| {B} | {Sq} | {Sk} | {med(ours_ms) * 1e3:.0f} ({tbps:.2f}) | {med(cud) * 1e3:.0f} | "
              f"{med(fa4) * 1e3 if vs_fa4 else float('nan'):.0f} | {rng(vs_cud)} | {rng(vs_fa4)} | "
              f"{st[0] * 1e3:.0f}, {st[1] * 1e3:.0f}, {st[2] * 1e3:.0f} | "
              f"{kv_bytes / st[0] / 1e9 / copy:.2f} | {goal} |", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "decode.json"))
    ap.add_argument("--archs", default="sm90a=sm_90a,sm80=sm_90",
                    help="name=arch[:FA4JIT_TUNE],...; e.g. grid=sm_90a:persistent=0 (no stream-K)")
    ap.add_argument("--shapes", default="", help="B,Sq,Sk;... instead of the issue's four (Hq 32, Hkv 8)")
    ap.add_argument("--fa4", action="store_true", help="FlashAttention-4 as a peer, and issue 23's goal table")
    ap.add_argument("--rounds", type=int, default=1,
                    help="with --fa4: interleaved rounds of the first arm and the peers (the goal table)")
    a = ap.parse_args()
    shapes = [(int(b), 32, 8, int(sq), int(sk)) for b, sq, sk in (r.split(",") for r in a.shapes.split(";") if r)] or SHAPES
    archs = dict(item.split("=", 1) for item in a.archs.split(","))
    rows = []
    # Per call: median of synchronized calls (host cost included, as a caller sees one call);
    # stream: back-to-back calls (device time per call). "/ cuDNN" compares like with like.
    print("| B | Sq | Sk | cuDNN µs (TB/s) | cuDNN stream µs | FA2 µs | " +
          " | ".join(f"{n} µs (TB/s) | {n} / cuDNN | {n} stream µs | stream / cuDNN | {n} paged-64 µs | paged / contiguous"
                     for n in archs) + " |")
    print("|---|---|---|---|---|---|" + "---|---|---|---|---|---|" * len(archs))
    goal_rounds = []
    for (B, H, Hkv, Sq, Sk) in shapes:
        kv_bytes = kv_bytes_of(B, Hkv, Sk)
        peer = sdpa(B, H, Hkv, Sq, Sk)  # FA4 (--fa4) is timed in the goal rounds below
        row = {"B": B, "H": H, "Hkv": Hkv, "Sq": Sq, "Sk": Sk, "D": D, "peers_ms": peer}
        if a.fa4:  # the first arm and the peers once per round, their order alternating
            first = next(iter(archs.values()))
            rs = []
            for i in range(a.rounds):
                run = [lambda: ours(first, B, H, Hkv, Sq, Sk), lambda: sdpa(B, H, Hkv, Sq, Sk, fa4=True)]
                got = [f() for f in (run if i % 2 == 0 else run[::-1])]
                o, pr = got if i % 2 == 0 else got[::-1]
                if "ms" in o and pr.get("cudnn"):
                    rs.append({"ours": o, "peers": pr})
            row["goal_rounds"] = rs
            goal_rounds.append(rs)
        cells = []
        for name, arch in archs.items():
            c = ours(arch, B, H, Hkv, Sq, Sk)
            p = ours(arch, B, H, Hkv, Sq, Sk, page=64)
            row[name] = c
            row[name + "_paged64"] = p
            if "ms" in c and "ms" in p and peer.get("cudnn"):
                cells.append(f"{c['ms'] * 1e3:.0f} ({c['kv_TBps']:.2f}) | {peer['cudnn'] / c['ms']:.2f} | "
                             f"{c['ms_stream'] * 1e3:.0f} | {peer['cudnn_stream'] / c['ms_stream']:.2f} | "
                             f"{p['ms'] * 1e3:.0f} | {c['ms'] / p['ms']:.2f}")
            else:
                cells.append(f"{c.get('error', '')[:40]} | | | | {p.get('error', '')[:40]} |")
        rows.append(row)
        cud = peer.get("cudnn")
        fa2 = peer.get("flash2")
        cst = peer.get("cudnn_stream")
        print(f"| {B} | {Sq} | {Sk} | {cud * 1e3:.0f} ({kv_bytes / cud / 1e9:.2f}) | {cst * 1e3:.0f} | "
              f"{fa2 * 1e3 if fa2 else float('nan'):.0f} | "
              + " | ".join(cells) + " |", flush=True)
    copy = copy_tbps() if a.fa4 else None
    if a.fa4:
        goal_table(shapes, goal_rounds, copy)
    with open(a.out, "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "copy_TBps": copy, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
