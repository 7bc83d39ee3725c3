#!/usr/bin/env python3
"""Writes the PTX of a fixed set of configs x archs into one folder, entry names normalized, so
two builds can be compared file by file: `diff -r BEFORE AFTER` empty means the kernels are
PTX-identical. Used to show that a refactor left the generated code alone (issue 20's rule).

Usage: tools/ptx_snapshot.py FA4JIT_BINARY OUT_DIR [--jobs N] [--archs sm_90a,sm_80,sm_100a] [--sass]

--sass also writes NAME.ARCH.sass (cuobjdump -sass of the cubin: instructions with their control
bits, entry names normalized): where a change moves PTX around, identical SASS still proves the
kernels unchanged. cuobjdump comes from the CUDA toolkit or PyPI's nvidia-cuda-cuobjdump.

Entry names carry the cache key (fa4_fwd_<key16>), which changes whenever any generated text
does, so they are replaced by fixed names; the comment lines NVRTC writes (its version) go too.
"""
import argparse
import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

SNIPPET_MASK = "const int* doc = (const int*)aux[0];\nreturn doc[q_idx] == doc[kv_idx];"
SNIPPET_SCORE = "return score + 0.125f * (float)(kv_idx - q_idx);"

# name -> config JSON (arch added per run). Presets' configs, then one config per feature.
CONFIGS = {
    "d64": {"depth": 64},
    "d64_causal": {"depth": 64, "mask": "causal"},
    "d128": {"depth": 128},
    "d128_causal": {"depth": 128, "mask": "causal"},
    "d128_causal_fp16": {"depth": 128, "mask": "causal", "dtype": "fp16"},
    "llama3_8b": {"depth": 128, "mask": "causal", "num_q_heads": 32, "group": 4},
    "llama3_8b_decode": {"depth": 128, "mask": "causal", "num_q_heads": 32, "group": 4, "pack_gqa": True},
    "llama3_70b_decode": {"depth": 128, "mask": "causal", "num_q_heads": 64, "group": 8, "pack_gqa": True},
    "d96": {"depth": 96},
    "d192_causal": {"depth": 192, "mask": "causal"},
    "d256": {"depth": 256},
    "d256_causal": {"depth": 256, "mask": "causal"},
    "window": {"depth": 128, "mask": "sliding_window"},
    "chunked": {"depth": 128, "mask": "chunked"},
    "causal_top_left": {"depth": 64, "mask": {"kind": "causal", "top_left": True}},
    "softcap": {"depth": 128, "score_mod": "softcap"},
    "causal_alibi_fp16": {"depth": 128, "mask": "causal", "score_mod": "alibi", "dtype": "fp16"},
    "doc_mask": {"depth": 128, "mask": {"kind": "custom", "snippet": SNIPPET_MASK}},
    "doc_and_causal": {"depth": 64, "mask": {"kind": "all_of", "masks": [
        "causal", {"kind": "custom", "snippet": SNIPPET_MASK}]}},
    "custom_score": {"depth": 128, "mask": "causal", "score_mod": {"kind": "custom", "snippet": SNIPPET_SCORE}},
    "window_softcap_gqa": {"depth": 128, "mask": "sliding_window", "score_mod": "softcap",
                           "num_q_heads": 32, "group": 8},
    "bn64_stages3": {"depth": 128, "BN": 64, "num_kv_stages": 3},
}
# name -> (config, FA4JIT_TUNE): the sm90a tile walks that no default picks.
TUNED = {
    "d128_grid": ({"depth": 128}, "persistent=0"),
    "d128_causal_stream_k": ({"depth": 128, "mask": "causal"}, "persistent=2"),
    "d128_no_pingpong_overlap": ({"depth": 128, "mask": "causal"}, "pingpong=0,intra_wg_overlap=0"),
}

ENTRY = re.compile(r"fa4_(fwd|combine)_[0-9a-f]{16}")
# NVRTC names internal-linkage symbols after a hash of the source text, so any template edit
# (a comment too) renames them; the hash is not code.
INTERNAL = re.compile(r"_INTERNAL_[0-9a-f]{8}_\d+_fa4jit_cu_[0-9a-f]{8}")


def cuobjdump():
    found = shutil.which("cuobjdump")
    if found:
        return found
    try:
        import nvidia  # PyPI nvidia-cuda-cuobjdump (tools/setup.sh installs it)
        path = os.path.join(list(nvidia.__path__)[0], "cu13", "bin", "cuobjdump")
        return path if os.path.exists(path) else None
    except ImportError:
        return None


def sass_of(binary, path, arch, env, tmp, name):
    cubin = os.path.join(tmp, f"{name}_{arch}.cubin")
    r = subprocess.run([binary, "gen", "--config", path, "--arch", arch, "--cubin", cubin],
                       capture_output=True, text=True, env=env)
    if r.returncode != 0:
        return "REFUSED\n"
    out = subprocess.run([cuobjdump(), "-sass", cubin], capture_output=True, text=True, check=True).stdout
    return ENTRY.sub(lambda m: f"fa4_{m.group(1)}_ENTRY", "".join(l for l in out.splitlines(True) if "/*" in l))


def snapshot_one(binary, name, cfg, arch, out_dir, tmp, tune="", sass=False):
    cfg = dict(cfg, arch=arch)
    path = os.path.join(tmp, f"{name}_{arch}.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    env = dict(os.environ, FA4JIT_TUNE=tune)
    r = subprocess.run([binary, "gen", "--config", path, "--arch", arch, "--ptx"],
                       capture_output=True, text=True, env=env)
    target = os.path.join(out_dir, f"{name}.{arch}.ptx")
    if r.returncode != 0:
        # A config an arch refuses is part of the snapshot too: the refusal must stay the same.
        text = "REFUSED\n" + r.stderr
    else:
        # Debug line info is not code: .file lines hold the working directory, .loc lines template
        # line numbers (they move when a template gains a line) and the .debug sections the names
        # of inlined functions; // lines NVRTC's version.
        lines = []
        for l in r.stdout.splitlines(True):
            if l.lstrip().startswith(".section") and ".debug" in l:
                break
            if not l.startswith("//") and not l.lstrip().startswith((".file", ".loc")):
                lines.append(l)
        text = "".join(lines)
        text = ENTRY.sub(lambda m: f"fa4_{m.group(1)}_ENTRY", text)
        text = INTERNAL.sub("_INTERNAL_SRC", text)
    with open(target, "w") as f:
        f.write(text)
    if sass:
        with open(os.path.join(out_dir, f"{name}.{arch}.sass"), "w") as f:
            f.write(sass_of(binary, path, arch, env, tmp, name))
    return target, r.returncode


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("out_dir")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--archs", default="sm_90a,sm_80,sm_100a")
    ap.add_argument("--sass", action="store_true", help="also write the SASS of each kernel")
    a = ap.parse_args()
    if a.sass and not cuobjdump():
        sys.exit("ptx_snapshot: --sass needs cuobjdump (CUDA toolkit, or pip install nvidia-cuda-cuobjdump)")
    os.makedirs(a.out_dir, exist_ok=True)
    env_cache = tempfile.mkdtemp()
    os.environ["FA4JIT_CACHE_DIR"] = env_cache  # compile every time: the PTX path never reads the cache
    with tempfile.TemporaryDirectory() as tmp, concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
        jobs = [pool.submit(snapshot_one, a.binary, n, c, arch, a.out_dir, tmp, "", a.sass)
                for n, c in CONFIGS.items() for arch in a.archs.split(",")]
        jobs += [pool.submit(snapshot_one, a.binary, n, c, "sm_90a", a.out_dir, tmp, tune, a.sass)
                 for n, (c, tune) in TUNED.items() if "sm_90a" in a.archs.split(",")]
        refused = 0
        for j in jobs:
            _, rc = j.result()
            refused += rc != 0
    print(f"ptx_snapshot: {len(jobs)} files in {a.out_dir} ({refused} refused configs)")


if __name__ == "__main__":
    sys.exit(main())
