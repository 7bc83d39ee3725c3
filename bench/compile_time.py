"""Cold compile time per kernel: the issue's measure (one job, empty cache, several runs, median).

Usage (repo root, an idle machine; no GPU needed):
  python3 bench/compile_time.py [--runs 3] [--set presets|random|all] [--archs sm_80,sm_90a,sm_100a]
                                [--fa4jit build/fa4jit] [--tests build/tests/fa4jit_tests] [--out FILE.json]
                                [--list-with BINARY]  (list the configs with this build, time them with --fa4jit:
                                                       a before/after with an older binary times the same kernels)
presets: every kernel of every preset (`fa4jit prewarm --preset P --arch A --print`), deduplicated.
random:  the seeded random feature combinations of tests/gpu_features_test.cpp (written by the test
         FeatureCompile.RandomCasesSurviveJson with FA4JIT_WRITE_RANDOM_CASES set), 24 per arch.
Each run compiles the whole set with `fa4jit prewarm --jobs 1` into a fresh cache directory; a
kernel's time is its `get_kernel` wall time as prewarm reports it (generate, key, NVRTC, publish).
Prints a markdown table of compile times (median and max over runs, per kernel and per group).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

PRESETS = ["default", "llama3-8b", "llama3-70b", "llama3-8b-decode", "llama3-70b-decode", "fp16"]
LINE = re.compile(r"\]\s+(\d+)/(\d+)\s+(\S+)\s+([0-9.]+)s\s+(.*)$")


def run(cmd, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    return r


def preset_configs(fa4jit, archs):
    seen, out = set(), []
    for preset in PRESETS:
        for arch in archs:
            for e in json.loads(run([fa4jit, "prewarm", "--preset", preset, "--arch", arch, "--print"]).stdout):
                key = json.dumps(e["config"], sort_keys=True)
                if key not in seen:
                    seen.add(key)
                    out.append((preset, e["config"]))
    return out


def random_configs(tests, archs):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "random.json")
        env = dict(os.environ, FA4JIT_WRITE_RANDOM_CASES=path)
        run([tests, "--gtest_filter=FeatureCompile.RandomCasesSurviveJson"], env)
        with open(path) as f:
            cases = json.load(f)
    return [(c["name"], c["config"]) for c in cases if c["config"]["arch"] in archs]


def label(cfg):
    mask = cfg["mask"]["kind"] if isinstance(cfg["mask"], dict) else cfg["mask"]
    mod = cfg["score_mod"]["kind"] if isinstance(cfg["score_mod"], dict) else cfg["score_mod"]
    gqa = f" g{cfg['group']}{'p' if cfg.get('pack_gqa') else ''}" if cfg.get("group", 0) > 1 else ""
    return f"{cfg['arch']} d{cfg['depth']} {cfg.get('dtype', 'bf16')} {mask}/{mod}{gqa}"


def time_once(fa4jit, configs):
    """One cold pass: every config compiled by one prewarm job into an empty cache; seconds per config."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "configs.json")
        with open(path, "w") as f:
            json.dump([c for _, c in configs], f)
        env = dict(os.environ, FA4JIT_CACHE_DIR=os.path.join(d, "cache"), FA4JIT_COMPILE="allow")
        env.pop("FA4JIT_CACHE_PATH", None)
        env.pop("FA4JIT_REMOTE_CACHE", None)
        r = run([fa4jit, "prewarm", "--config", path, "--jobs", "1"], env)
    seconds = []
    for line in r.stderr.splitlines():
        m = LINE.search(line)
        if m:
            if m.group(3) != "compiled":
                sys.exit(f"expected a cold compile, got: {line}")
            seconds.append(float(m.group(4)))
    if len(seconds) != len(configs):
        sys.exit(f"prewarm reported {len(seconds)} kernels for {len(configs)} configs:\n{r.stderr}")
    return seconds


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--set", choices=["presets", "random", "all"], default="all")
    ap.add_argument("--archs", default="sm_80,sm_90a,sm_100a")
    ap.add_argument("--fa4jit", default="build/fa4jit")
    ap.add_argument("--list-with", help="the fa4jit that lists the preset configs (default: --fa4jit)")
    ap.add_argument("--tests", default="build/tests/fa4jit_tests")
    ap.add_argument("--limit", type=int, default=0, help="only the first N configs of each set (smoke test)")
    ap.add_argument("--out", help="write every run's seconds as JSON")
    a = ap.parse_args()
    archs = a.archs.split(",")

    sets = []
    if a.set in ("presets", "all"):
        sets.append(("preset", preset_configs(a.list_with or a.fa4jit, archs)))
    if a.set in ("random", "all"):
        sets.append(("random", random_configs(a.tests, archs)))
    if a.limit:
        sets = [(n, cs[: a.limit]) for n, cs in sets]

    results = []
    for name, configs in sets:
        runs = [time_once(a.fa4jit, configs) for _ in range(a.runs)]
        for i, (origin, cfg) in enumerate(configs):
            t = [r[i] for r in runs]
            results.append({"set": name, "origin": origin, "label": label(cfg), "config": cfg, "seconds": t,
                            "median": statistics.median(t)})

    print(f"Cold compile, one job, {a.runs} runs (seconds: median; max over runs in brackets)\n")
    print("| set | kernel | median s | max s |\n|---|---|---|---|")
    for r in results:
        print(f"| {r['set']} | {r['label']} | {r['median']:.2f} | {max(r['seconds']):.2f} |")
    print("\n| set | arch | kernels | median of medians | slowest median | slowest |\n|---|---|---|---|---|---|")
    for name, _ in sets:
        for arch in archs:
            rs = [r for r in results if r["set"] == name and r["config"]["arch"] == arch]
            if rs:
                worst = max(rs, key=lambda r: r["median"])
                print(f"| {name} | {arch} | {len(rs)} | {statistics.median(r['median'] for r in rs):.2f} | "
                      f"{worst['median']:.2f} | {worst['label']} |")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
