"""FP8 KV cache decode speed: fa4jit with e4m3 K/V ("kv_dtype": "e4m3", bf16 Q and O) against the
same kernels on bf16 K/V, and PyTorch SDPA (cuDNN, bf16 K/V) as the peer, in the same run.

Usage (GPU machine, repo root): FA4JIT=.device/fa4jit python3 bench/kv_fp8.py [--out kv_fp8.json]
Shapes are issue 22's: Hq 32 / Hkv 8, D 128, Sq 1 and 16, 32k keys, contiguous and paged (64).
"TB/s" = K+V bytes read / time (e4m3: half the bf16 bytes). The goal: e4m3 >= 1.8x bf16 KV.
Prints the markdown table docs/PERF.md keeps.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from decode import ours, sdpa  # noqa: E402

import torch  # noqa: E402

SHAPES = [(8, 32, 8, 1, 32768), (8, 32, 8, 16, 32768), (1, 32, 8, 1, 131072)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "kv_fp8.json"))
    ap.add_argument("--archs", default="sm90a=sm_90a,sm80=sm_90", help="name=arch,...")
    ap.add_argument("--e4m3-variants", default="",
                    help="extra e4m3 rows: name=JSON config fields;... (e.g. bn128={\"BN\":128})")
    a = ap.parse_args()
    archs = dict(item.split("=", 1) for item in a.archs.split(","))
    variants = {"": {}}
    for item in filter(None, a.e4m3_variants.split(";")):
        n, cfg = item.split("=", 1)
        variants[n] = json.loads(cfg)
    rows = []
    # Per call: median of synchronized calls; stream: back-to-back calls (device time per call).
    print("| kernel | B | Sq | Sk | KV layout | bf16 KV µs (TB/s) | e4m3 KV µs (TB/s) | e4m3 / bf16 speed-up | "
          "stream: bf16 µs | stream: e4m3 µs | stream speed-up | cuDNN bf16 µs |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for (B, H, Hkv, Sq, Sk) in SHAPES:
        peer = sdpa(B, H, Hkv, Sq, Sk)
        for name, arch in archs.items():
            for page in (0, 64):
                b = ours(arch, B, H, Hkv, Sq, Sk, page=page)
                for vname, extra in variants.items():
                    e = ours(arch, B, H, Hkv, Sq, Sk, page=page, kv_dtype="e4m3", extra=extra)
                    rows.append({"kernel": name + (f" {vname}" if vname else ""), "arch": arch, "B": B, "H": H,
                                 "Hkv": Hkv, "Sq": Sq, "Sk": Sk, "page": page, "e4m3_config": extra, "bf16": b,
                                 "e4m3": e, "peers_ms": peer})
                    layout = f"paged {page}" if page else "contiguous (BHSD)"
                    label = name + (f" e4m3 {vname}" if vname else "")
                    if "ms" in b and "ms" in e:
                        cud = peer.get("cudnn")
                        print(f"| {label} | {B} | {Sq} | {Sk} | {layout} | {b['ms'] * 1e3:.0f} ({b['kv_TBps']:.2f}) | "
                              f"{e['ms'] * 1e3:.0f} ({e['kv_TBps']:.2f}) | {b['ms'] / e['ms']:.2f} | "
                              f"{b['ms_stream'] * 1e3:.0f} | {e['ms_stream'] * 1e3:.0f} | "
                              f"{b['ms_stream'] / e['ms_stream']:.2f} | {cud * 1e3 if cud else float('nan'):.0f} |",
                              flush=True)
                    else:
                        print(f"| {label} | {B} | {Sq} | {Sk} | {layout} | {b.get('error', '')[:60]} | "
                              f"{e.get('error', '')[:60]} | | | | | |", flush=True)
    with open(a.out, "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
