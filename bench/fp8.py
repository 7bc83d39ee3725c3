"""FP8 (e4m3) attention: fa4jit's accuracy and speed against its bf16 kernel and cuDNN's FP8 SDPA.

Usage (GPU machine, from the repo root; FA4JIT is the fa4jit CLI, default ./build/fa4jit):
  python3 bench/fp8.py [--quick] [--out DIR] [--rounds N] [--sections acc,speed] [--rows ...] [--deadline S]
  python3 bench/fp8.py --selftest          # no GPU needed: the pure helpers, on CPU (torch parts skip without torch)
The cuDNN FP8 peer is cudnn-frontend's Python API (`import cudnn`, PyPI nvidia-cudnn-frontend), carried as a wheel:
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
It uses the libcudnn that torch loads (torch's nvidia/cudnn/lib is put first on the loader path before the import).

Sections (each catches its own errors, prints them and goes on; a summary table is printed at the END and every
number is written to DIR/fp8.json, DIR = --out, else $OUT, else /tmp; the JSON is rewritten after each case/row):
 acc    FP8 inputs quantized per (batch, kv head) with amax scaling (descale = amax / 448, q over the q heads of
        its kv head's group), a float64 reference computed on the GPU from the DEQUANTIZED inputs, and rel L2
        ||o - ref|| / ||ref|| of: fa4jit FP8 (`fa4jit run`), PyTorch float32 math attention, a float32 emulation
        of the kernel's P rounding (P = exp(s - rowmax), P_q = e4m3(P * 256) / 256, O = P_q V / rowsum(P)), and
        fa4jit bf16 on the dequantized inputs cast to bf16 (a yardstick); LSE error of fa4jit FP8; NaN/Inf count.
        Then the same inputs quantized PER TENSOR (cuDNN's FP8 SDPA takes one descale per tensor): fa4jit FP8
        and cuDNN FP8 (scale_s 448 and 256) against the float64 reference of those dequantized inputs.
 speed  Per row ROUNDS interleaved rounds (order reversed in odd rounds) of fa4jit e4m3 and bf16 (`fa4jit bench`,
        random inputs), cuDNN FP8 SDPA (cudnn-frontend graph) and PyTorch SDPA bf16 with the cuDNN backend
        (CUDA events, median of --iters after --warmup, as bench/compare.py and bench/peers.py do), plus PyTorch's
        own FP8 SDPA if it runs here. TFLOP/s = 4*B*H*S*S*D (halved for causal); the table gives each kernel's
        median over rounds and the per-round ratios e4m3 / bf16 and e4m3 / cuDNN-FP8 as median (min-max).
"""
import argparse
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
E4M3_MAX = 448.0
P_SCALE = 256.0  # the fa4jit kernel's P scaling before the e4m3 cast (emulated in section acc)
ARCH = os.environ.get("FA4JIT_ARCH", "sm_90a")

# (B, Hq, Hkv, S, D, causal, q_mult): q_mult scales q to sharpen the softmax.
ACC_CASES = [(2, 8, 8, 1024, 128, False, 1.0), (2, 8, 8, 1024, 128, True, 1.0), (2, 16, 4, 2048, 128, True, 1.0),
             (2, 8, 8, 1024, 64, True, 1.0), (1, 8, 8, 4096, 128, False, 1.0), (2, 8, 2, 333, 128, True, 1.0),
             (2, 8, 8, 1024, 128, True, 3.0)]
# (B, H, Hkv, S, D, causal): issue 22's grid (D 128 and 64, causal and not, S 2k-16k), the d64
# row at S 4096 of the earlier tables, and GQA.
SPEED_ROWS = [(B, 16, 16, S, D, causal) for D in (128, 64) for (B, S) in ((16, 2048), (4, 8192), (2, 16384))
              for causal in (False, True)]
SPEED_ROWS += [(8, 16, 16, 4096, 64, False), (8, 16, 16, 4096, 64, True), (2, 32, 8, 8192, 128, True)]

RESULTS = {"meta": {}, "probe": {}, "accuracy": [], "speed": [], "errors": []}
T0 = time.time()
DEADLINE = [0.0]  # --deadline, for sub_timeout()


class Terminated(BaseException):
    """SIGTERM (a timeout): stop the sections, still print the summary and write the JSON."""


# ----------------------------------------------------------------------------------------------------------
# Pure helpers (no GPU; the quantization helpers take the torch module so that they run on CPU in --selftest)


def attn_flops(B, H, Sq, Sk, D, causal):
    return 4.0 * B * H * Sq * Sk * D * (0.5 if causal else 1.0)


def parse_rows(spec):
    """'B,H,Hkv,S,D,c;...' (c: 0/1) -> [(B, H, Hkv, S, D, causal)]."""
    rows = []
    for item in filter(None, (s.strip() for s in spec.split(";"))):
        f = [int(x) for x in item.split(",")]
        if len(f) != 6:
            raise ValueError(f"--rows item {item!r}: want B,H,Hkv,S,D,causal")
        rows.append((f[0], f[1], f[2], f[3], f[4], bool(f[5])))
    return rows


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="1 round per speed row (default rounds: 3)")
    ap.add_argument("--rounds", type=int, default=None, help="interleaved rounds per speed row")
    ap.add_argument("--out", default=os.environ.get("OUT") or "/tmp", help="folder for fp8.json (default $OUT, else /tmp)")
    ap.add_argument("--sections", default="acc,speed", help="comma-separated: acc, speed")
    ap.add_argument("--rows", default="", help="speed rows instead of the standard ones: B,H,Hkv,S,D,causal;...")
    ap.add_argument("--cases", default="", help="accuracy cases to run, as indices into ACC_CASES (default: all)")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--scale-s", type=float, default=E4M3_MAX, help="cuDNN FP8 scale_s in speed rows (descale_s = 1/it)")
    ap.add_argument("--deadline", type=float, default=0, help="seconds after start to skip the remaining cases/rows "
                    "(0: none), so the summary still prints inside a caller's time limit")
    ap.add_argument("--selftest", action="store_true", help="CPU-only checks of the helpers; no GPU, no fa4jit")
    a = ap.parse_args(argv)
    if a.rounds is None:
        a.rounds = 1 if a.quick else 3
    a.sections = [s.strip() for s in a.sections.split(",") if s.strip()]
    bad = [s for s in a.sections if s not in ("acc", "speed")]
    if bad:
        ap.error(f"unknown section(s) {bad}")
    a.rows = parse_rows(a.rows) if a.rows else list(SPEED_ROWS)
    a.cases = [ACC_CASES[int(i)] for i in a.cases.split(",") if i.strip()] if a.cases else list(ACC_CASES)
    return a


def quantize(torch, x, hkv, per_tensor=False):
    """x: (B, S, H, D) real values -> (e4m3 tensor, float32 descale of shape (B, hkv)).
    descale = amax / 448 over each (batch, kv head) slice (for H > hkv: over the H/hkv q heads of that kv head),
    or over the whole tensor (per_tensor; the one value repeated in every (B, hkv) entry)."""
    B, S, H, D = x.shape
    G = H // hkv
    xv = x.float().reshape(B, S, hkv, G, D)
    if per_tensor:
        amax = xv.abs().amax().reshape(1, 1).expand(B, hkv)
    else:
        amax = xv.abs().amax(dim=(1, 3, 4))
    descale = (amax / E4M3_MAX).clamp_min(1e-12).float().contiguous()
    q = (xv / descale[:, None, :, None, None]).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return q.reshape(B, S, H, D).contiguous(), descale


def dequantize(torch, x8, descale, dtype=None):
    dtype = dtype or torch.float64
    B, S, H, D = x8.shape
    hkv = descale.shape[1]
    x = x8.float().to(dtype).reshape(B, S, hkv, H // hkv, D) * descale.to(dtype)[:, None, :, None, None]
    return x.reshape(B, S, H, D)


def rel_l2(torch, x, ref):
    x, ref = x.double(), ref.double()
    return float(torch.linalg.vector_norm(x - ref) / torch.linalg.vector_norm(ref))


def attention_ref(torch, q, k, v, causal, scale, p_fp8_scale=None, max_bytes=1 << 30):
    """Attention in q's dtype, inputs (B, S, H, D) (GQA: q head h reads kv head h // (H / Hkv)); causal is
    bottom-right aligned. Returns o (B, Sq, H, D) and lse (B, H, Sq) (natural log). With p_fp8_scale: P =
    exp(s - rowmax) is rounded as e4m3(P * p_fp8_scale) / p_fp8_scale before P V, the row sum taken unrounded."""
    B, Sq, H, D = q.shape
    Sk, Hkv = k.shape[1], k.shape[2]
    G = H // Hkv
    qt, kt, vt = (t.permute(0, 2, 1, 3) for t in (q, k, v))
    o = torch.empty((B, H, Sq, v.shape[3]), dtype=q.dtype, device=q.device)
    lse = torch.empty((B, H, Sq), dtype=q.dtype, device=q.device)
    hc = max(1, min(H, max_bytes // max(1, Sq * Sk * q.element_size() * 3)))
    mask = None
    if causal:
        mask = torch.ones((Sq, Sk), dtype=torch.bool, device=q.device).triu(Sk - Sq + 1)
    for b in range(B):
        for h0 in range(0, H, hc):
            h1 = min(H, h0 + hc)
            hk = torch.arange(h0, h1, device=q.device) // G
            s = torch.matmul(qt[b, h0:h1], kt[b, hk].transpose(-1, -2)) * scale
            if mask is not None:
                s.masked_fill_(mask, float("-inf"))
            m = s.amax(-1, keepdim=True)
            p = torch.exp(s - m)
            l = p.sum(-1, keepdim=True)
            lse[b, h0:h1] = (m + torch.log(l)).squeeze(-1)
            if p_fp8_scale:
                p = (p * p_fp8_scale).to(torch.float8_e4m3fn).to(q.dtype) / p_fp8_scale
            o[b, h0:h1] = torch.matmul(p, vt[b, hk]) / l
            del s, p
    return o.permute(0, 2, 1, 3), lse


def ratio_stats(nums, dens):
    rs = [n / d for n, d in zip(nums, dens) if n and d]
    if not rs or len(rs) != len(nums):
        return None
    return {"median": statistics.median(rs), "min": min(rs), "max": max(rs), "all": rs}


def summarize_rounds(rounds, fp8="fa_e4m3"):
    """Per kernel: median over rounds of tflops / tflops_stream (or the first error); ratios of fp8 to the others,
    paired per round."""
    out = {}
    names = []
    for rd in rounds:
        names += [n for n in rd if n not in names]
    for name in names:
        runs = [rd.get(name, {}) for rd in rounds]
        bad = [x for x in runs if "tflops" not in x]
        if bad:
            out[name] = {"error": bad[0].get("error", "missing")}
            continue
        k = {"runs": [round(x["tflops"], 1) for x in runs]}
        for key in ("tflops", "tflops_stream"):
            if all(key in x for x in runs):
                k[key] = statistics.median(x[key] for x in runs)
        out[name] = k
    ratios = {}
    if "tflops" in out.get(fp8, {}):
        for peer in names:
            if peer == fp8 or "tflops" not in out.get(peer, {}):
                continue
            for key in ("tflops", "tflops_stream"):
                r = ratio_stats([rd[fp8].get(key) for rd in rounds], [rd[peer].get(key) for rd in rounds])
                if r:
                    ratios[f"{key}:{peer}"] = r
    return out, ratios


def fmt_ratio(r):
    if not r:
        return "n/a"
    if len(r["all"]) == 1:
        return f"{r['median']:.3f}"
    return f"{r['median']:.3f} ({r['min']:.2f}-{r['max']:.2f})"


def fmt_e(x):
    return "err" if x is None else ("nan" if isinstance(x, float) and math.isnan(x) else f"{x:.2e}")


def acc_table(cases):
    lines = ["| case | fa4jit fp8 | torch fp32 | emul P | fp8 vs emul | fa4jit bf16 | lse rel | lse max abs | non-finite |",
             "|---|---|---|---|---|---|---|---|---|"]
    for c in cases:
        r = c.get("per_head", {})
        lines.append(f"| {case_name(c)} | {fmt_e(r.get('fa_fp8'))} | {fmt_e(r.get('torch_fp32'))} | "
                     f"{fmt_e(r.get('emul_p'))} | {fmt_e(r.get('fa_fp8_vs_emul'))} | {fmt_e(r.get('fa_bf16'))} | "
                     f"{fmt_e(r.get('lse_rel'))} | {fmt_e(r.get('lse_max_abs'))} | {r.get('nonfinite', 'err')} |")
    lines += ["per-tensor scales (cuDNN's FP8 SDPA takes one descale per tensor):",
              "| case | fa4jit fp8 | cuDNN fp8 s448 | cuDNN fp8 s256 | cuDNN O | e4m3-O floor | non-finite fa/cuDNN |",
              "|---|---|---|---|---|---|---|"]
    for c in cases:
        r = c.get("per_tensor", {})
        lines.append(f"| {case_name(c)} | {fmt_e(r.get('fa_fp8'))} | {fmt_e(r.get('cudnn_s448'))} | "
                     f"{fmt_e(r.get('cudnn_s256'))} | {r.get('cudnn_o_dtype', '-')} | {fmt_e(r.get('cudnn_o_floor'))} | "
                     f"{r.get('nonfinite', '-')}/{r.get('cudnn_nonfinite', '-')} |")
    return lines


def case_name(c):
    heads = f"{c['H']}/{c['Hkv']}" if c["H"] != c["Hkv"] else f"{c['H']}"
    q = f" q*{c['q_mult']:g}" if c.get("q_mult", 1.0) != 1.0 else ""
    return f"B{c['B']} H{heads} S{c['S']} D{c['D']} {'causal' if c['causal'] else 'full'}{q}"


SPEED_COLS = [("fa_e4m3", "e4m3"), ("fa_bf16", "bf16"), ("cudnn_fp8", "cuDNN fp8"), ("sdpa_cudnn_bf16", "SDPA cuDNN bf16"),
              ("torch_fp8", "torch fp8")]


def speed_table(rows):
    cols = [(k, n) for k, n in SPEED_COLS if any(k in r.get("kernels", {}) for r in rows)] or SPEED_COLS[:4]
    lines = ["| B | H | S | D | causal | " + " | ".join(n for _, n in cols) +
             " | e4m3/bf16 | e4m3/cuDNN-fp8 | e4m3/SDPA-bf16 | stream e4m3/bf16 | stream e4m3/cuDNN-fp8 |",
             "|" + "---|" * (5 + len(cols) + 5)]
    for r in rows:
        ks, rt = r.get("kernels", {}), r.get("ratios", {})
        heads = f"{r['H']}/{r['Hkv']}" if r["H"] != r["Hkv"] else f"{r['H']}"

        def tf(name):
            x = ks.get(name, {})
            return f"{x['tflops']:.0f}" if "tflops" in x else ("skip" if r.get("skipped") else "err")
        lines.append(f"| {r['B']} | {heads} | {r['S']} | {r['D']} | {'yes' if r['causal'] else 'no'} | "
                     + " | ".join(tf(k) for k, _ in cols)
                     + f" | {fmt_ratio(rt.get('tflops:fa_bf16'))} | {fmt_ratio(rt.get('tflops:cudnn_fp8'))} | "
                     f"{fmt_ratio(rt.get('tflops:sdpa_cudnn_bf16'))} | {fmt_ratio(rt.get('tflops_stream:fa_bf16'))} | "
                     f"{fmt_ratio(rt.get('tflops_stream:cudnn_fp8'))} |")
    return lines


def short(e, n=240):
    s = f"{type(e).__name__}: {e}" if isinstance(e, BaseException) else str(e)
    s = " ".join(s.split())
    return s if len(s) <= n else s[: n - 3] + "..."


def record_error(where, e, tb=True):
    msg = short(e, 400)
    RESULTS["errors"].append({"where": where, "error": msg})
    print(f"[error] {where}: {msg}", flush=True)
    if tb and isinstance(e, BaseException):
        traceback.print_exc()
    return msg


# ----------------------------------------------------------------------------------------------------------
# fa4jit CLI


def sub_timeout():
    """A subprocess's time limit: 900 s, or what is left before --deadline (at least 30 s)."""
    left = DEADLINE[0] - (time.time() - T0) if DEADLINE[0] else math.inf
    return max(30.0, min(900.0, left))


def fa4jit_binary():
    return os.environ.get("FA4JIT", "./build/fa4jit")


def fa4jit_config(dtype, D, causal):
    return {"dtype": dtype, "depth": D, "mask": "causal" if causal else "none", "arch": ARCH}


def fa4jit_run(workdir, tag, cfg, tensors, timeout=None):
    """`fa4jit run` on tensors (name -> CPU/GPU tensor); returns the output file's tensors (o, lse)."""
    from safetensors.torch import load_file, save_file
    cfg_path, in_path, out_path = (os.path.join(workdir, f"{tag}.{x}") for x in ("json", "in.safetensors", "out.safetensors"))
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    save_file({k: v.detach().contiguous().cpu() for k, v in tensors.items()}, in_path)
    if os.path.exists(out_path):
        os.remove(out_path)
    r = subprocess.run([fa4jit_binary(), "run", "--config", cfg_path, "--inputs", in_path, "--output", out_path],
                       capture_output=True, text=True, timeout=timeout or sub_timeout())
    if r.returncode != 0:
        raise RuntimeError(f"fa4jit run exited {r.returncode}: {(r.stderr or r.stdout).strip()[-300:]}")
    return load_file(out_path)


def fa4jit_bench(workdir, dtype, B, H, Hkv, S, D, causal, iters, warmup, timeout=None):
    """`fa4jit bench --json` as bench/compare.py's ours() calls it; adds tflops_stream."""
    path = os.path.join(workdir, f"bench_{dtype}_{D}_{int(causal)}.json")
    with open(path, "w") as f:
        json.dump(fa4jit_config(dtype, D, causal), f)
    cmd = [fa4jit_binary(), "bench", "--json", "--config", path, "--batch", str(B), "--heads", str(H), "--kv-heads",
           str(Hkv), "--seqlen-q", str(S), "--seqlen-k", str(S), "--iters", str(iters), "--warmup", str(warmup)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout or sub_timeout(),
                       env=dict(os.environ, FA4JIT_TUNE=""))
    if r.returncode != 0:
        return {"error": (r.stderr or r.stdout).strip()[-300:]}
    j = json.loads(r.stdout.strip().splitlines()[-1])
    if j.get("ms_stream"):
        j["tflops_stream"] = j["tflops"] * j["ms"] / j["ms_stream"]
    return j


# ----------------------------------------------------------------------------------------------------------
# cuDNN FP8 SDPA through cudnn-frontend's Python API


def torch_cudnn_lib_dirs():
    """Folders holding the libcudnn.so.9 of torch's environment (nvidia-cudnn-cu13 / -cu12 in site-packages)."""
    dirs = []
    for p in sys.path:
        for sub in ("nvidia/cudnn/lib", "nvidia/cudnn_jit/lib"):
            d = os.path.join(p, sub)
            if os.path.exists(os.path.join(d, "libcudnn.so.9")) and d not in dirs:
                dirs.append(d)
    return dirs


def load_cudnn_frontend(torch):
    """Import cudnn-frontend so that it binds to the libcudnn torch uses. Returns (module, info dict)."""
    import ctypes
    info = {"torch_cudnn": torch.backends.cudnn.version()}
    dirs = torch_cudnn_lib_dirs()
    info["lib_dirs"] = dirs
    if dirs:  # cudnn-frontend dlopens the first libcudnn.so.9 found along LD_LIBRARY_PATH, before site-packages
        os.environ["LD_LIBRARY_PATH"] = os.pathsep.join(dirs + [os.environ.get("LD_LIBRARY_PATH", "")]).rstrip(os.pathsep)
    try:
        import cudnn
    except Exception as e1:  # preload the library globally, then retry once
        info["first_import_error"] = short(e1)
        for m in [m for m in sys.modules if m == "cudnn" or m.startswith("cudnn.")]:
            del sys.modules[m]
        for d in dirs:
            try:
                ctypes.CDLL(os.path.join(d, "libcudnn.so.9"), mode=ctypes.RTLD_GLOBAL)
                break
            except OSError as e:
                info["preload_error"] = short(e)
        import cudnn
    info["frontend"] = getattr(cudnn, "__version__", "?")
    info["frontend_file"] = getattr(cudnn, "__file__", "?")
    try:
        info["backend"] = cudnn.backend_version_string()
    except Exception as e:
        info["backend"] = f"? ({short(e, 80)})"
    return cudnn, info


class CudnnFp8:
    """cuDNN FP8 SDPA forward: q, k, v e4m3 in (B, S, H, D) memory (dims (B, H, S, D) with BSHD strides, as
    fa4jit's), float32 (1,1,1,1) descale_q/k/v/s and scale_s/scale_o, O bf16 if the engine takes it, else e4m3."""
    U = dict(q=1, k=2, v=3, o=4, dq=5, dk=6, dv=7, ds=8, ss=9, so=10, amax_s=11, amax_o=12)

    def __init__(self, cudnn, torch, handle, B, H, Hkv, S, D, causal):
        self.cudnn, self.torch, self.handle = cudnn, torch, handle
        self.B, self.H, self.Hkv, self.S, self.D, self.causal = B, H, Hkv, S, D, causal
        self.notes = []
        errs = []
        # cuDNN 9.19 builds FP8 SDPA with a bf16/fp16 O on Blackwell only ("...only supported on Blackwell"):
        # on Hopper its O is e4m3 (scale_o), while fa4jit's is bf16.
        o_types = ("bf16", "e4m3") if torch.cuda.get_device_capability()[0] >= 10 else ("e4m3",)
        for o_type in o_types:
            try:
                self._build(o_type)
                self.o_type = o_type
                break
            except Exception as e:
                errs.append(f"O {o_type}: {short(e, 300)}")
        else:
            raise RuntimeError("cuDNN FP8 graph not built: " + " | ".join(errs))
        self.notes += errs
        dev = "cuda"
        f32 = dict(dtype=torch.float32, device=dev)
        self.scal = {n: torch.ones((1, 1, 1, 1), **f32) for n in ("dq", "dk", "dv", "ds", "ss", "so")}
        self.amax = {n: torch.zeros((1, 1, 1, 1), **f32) for n in ("amax_s", "amax_o")}
        o_dtype = torch.bfloat16 if self.o_type == "bf16" else torch.float8_e4m3fn
        self.o = torch.empty((B, S, H, D), dtype=o_dtype, device=dev)
        self.ws = torch.empty(max(1, self.graph.get_workspace_size()), dtype=torch.uint8, device=dev)

    def _build(self, o_type):
        cudnn = self.cudnn
        dt = cudnn.data_type
        B, H, Hkv, S, D, U = self.B, self.H, self.Hkv, self.S, self.D, self.U
        g = cudnn.pygraph(io_data_type=dt.FP8_E4M3, intermediate_data_type=dt.FLOAT, compute_data_type=dt.FLOAT)

        def bshd(h):
            return dict(dim=[B, h, S, D], stride=[S * h * D, D, h * D, 1])
        q = g.tensor(name="q", uid=U["q"], data_type=dt.FP8_E4M3, **bshd(H))
        k = g.tensor(name="k", uid=U["k"], data_type=dt.FP8_E4M3, **bshd(Hkv))
        v = g.tensor(name="v", uid=U["v"], data_type=dt.FP8_E4M3, **bshd(Hkv))
        sc = {n: g.tensor(name=n, uid=U[n], dim=[1, 1, 1, 1], stride=[1, 1, 1, 1], data_type=dt.FLOAT)
              for n in ("dq", "dk", "dv", "ds", "ss", "so")}
        kw = dict(q=q, k=k, v=v, descale_q=sc["dq"], descale_k=sc["dk"], descale_v=sc["dv"], descale_s=sc["ds"],
                  scale_s=sc["ss"], scale_o=sc["so"], attn_scale=1.0 / math.sqrt(D), name="sdpa_fp8")
        try:  # frontend >= 1.13: generate_stats, and causal as a diagonal band (right_bound 0, top-left: Sq == Sk)
            extra = dict(generate_stats=False)
            if self.causal:
                extra.update(diagonal_alignment=cudnn.diagonal_alignment.TOP_LEFT, right_bound=0)
            outs = g.sdpa_fp8(**kw, **extra)
        except TypeError as e:  # older bindings
            self.notes.append(f"sdpa_fp8 fell back to is_inference/use_causal_mask ({short(e, 120)})")
            outs = g.sdpa_fp8(**kw, is_inference=True, use_causal_mask=self.causal)
        o, _stats, amax_s, amax_o = outs
        o.set_uid(U["o"]).set_output(True).set_dim([B, H, S, D]).set_stride([S * H * D, D, H * D, 1]) \
            .set_data_type(dt.BFLOAT16 if o_type == "bf16" else dt.FP8_E4M3)
        for t, n in ((amax_s, "amax_s"), (amax_o, "amax_o")):
            t.set_uid(U[n]).set_output(True).set_dim([1, 1, 1, 1]).set_stride([1, 1, 1, 1]).set_data_type(dt.FLOAT)
        g.validate()
        g.build_operation_graph()
        g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        g.check_support()
        g.build_plans()
        self.graph = g

    def set_scales(self, dq, dk, dv, scale_s, scale_o=1.0):
        for n, x in (("dq", dq), ("dk", dk), ("dv", dv), ("ds", 1.0 / scale_s), ("ss", scale_s), ("so", scale_o)):
            self.scal[n].fill_(float(x))
        self.scale_o = float(scale_o)

    def bind(self, q8, k8, v8):
        U = self.U
        self.pack = {U["q"]: q8, U["k"]: k8, U["v"]: v8, U["o"]: self.o}
        self.pack.update({U[n]: t for n, t in self.scal.items()})
        self.pack.update({U[n]: t for n, t in self.amax.items()})

    def __call__(self):
        self.graph.execute(self.pack, self.ws, handle=self.handle)

    def output(self):
        """O as real values (e4m3 O divided by scale_o)."""
        o = self.o.float()
        return o / self.scale_o if self.o_type == "e4m3" else o


def probe_cudnn(torch, st):
    """Import cudnn-frontend, make a handle, and build + run one small FP8 graph. Fills st (a dict)."""
    try:
        cudnn, info = load_cudnn_frontend(torch)
        st.update(info)
    except Exception as e:
        st["error"] = f"import cudnn failed: {short(e, 300)}"
        record_error("cudnn import", e)
        return None, None
    try:
        handle = cudnn.create_handle()
        try:
            cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
        except Exception as e:
            st["set_stream_error"] = short(e)
        g = CudnnFp8(cudnn, torch, handle, 1, 2, 2, 256, 128, True)
        st["probe_o_dtype"] = g.o_type
        if g.notes:
            st["notes"] = g.notes
    except Exception as e:
        st["error"] = f"graph build failed: {short(e, 300)}"
        record_error("cudnn probe graph", e)
        return None, None
    st["ok"] = True
    return cudnn, handle


def probe_torch_fp8(torch, st):
    """PyTorch's own FP8 SDPA, if torch 2.11 has a usable one: returns a maker (q8, k8, v8 BHSD, descales (B, Hkv),
    causal) -> callable, or None; st gets what was tried and why it failed."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    st["aten_sdpa_ops"] = sorted(n for n in dir(torch.ops.aten) if "scaled_dot_product" in n)
    B, H, S, D = 1, 2, 256, 128
    q8 = torch.randn(B, H, S, D, device="cuda").to(torch.float8_e4m3fn)
    ones = torch.ones(B, H, dtype=torch.float32, device="cuda")
    try:  # plain SDPA with e4m3 inputs (torch 2.11: "No available kernel")
        import warnings
        with warnings.catch_warnings(), sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            warnings.simplefilter("ignore")
            F.scaled_dot_product_attention(q8, q8, q8)
        st["plain_sdpa_e4m3_cudnn"] = "ran"
    except Exception as e:
        st["plain_sdpa_e4m3_cudnn"] = short(e, 160)
    try:
        from torch.nn.attention.experimental._scaled_dot_product_attention_quantized import (
            _scaled_dot_product_attention_quantized as sdpa_q)
    except Exception as e:
        st["quantized_api"] = f"absent: {short(e, 160)}"
        return None
    st["quantized_api"] = "torch.nn.attention.experimental._scaled_dot_product_attention_quantized"
    try:
        import torch.nn.attention as tna
        if hasattr(tna, "list_flash_attention_impls"):
            st["flash_impls"] = [str(x) for x in tna.list_flash_attention_impls()]
        if hasattr(tna, "activate_flash_attention_impl"):
            tna.activate_flash_attention_impl("FA3")
            st["fa3_activated"] = True
    except Exception as e:
        st["fa3_activate"] = short(e, 200)

    def maker(q, k, v, dq, dk, dv, causal):
        def fn():
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                return sdpa_q(q, k, v, is_causal=causal, q_descale=dq, k_descale=dk, v_descale=dv)
        return fn
    try:
        maker(q8, q8, q8, ones, ones, ones, False)()
        torch.cuda.synchronize()
        st["ok"] = True
        return maker
    except Exception as e:
        st["call"] = short(e, 240)
        return None


# ----------------------------------------------------------------------------------------------------------
# Sections


def time_left(a):
    return math.inf if not a.deadline else a.deadline - (time.time() - T0)


def save_json(a):
    try:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "fp8.json"), "w") as f:
            json.dump(RESULTS, f, indent=1, default=str)
    except Exception as e:
        print(f"[error] writing JSON: {short(e)}", flush=True)


def nonfinite(torch, *ts):
    return int(sum(int((~torch.isfinite(t.float())).sum()) for t in ts))


def section_acc(a, torch, workdir, cudnn, handle):
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    gen = torch.Generator(device="cuda").manual_seed(1234)
    for ci, (B, H, Hkv, S, D, causal, q_mult) in enumerate(a.cases):
        case = {"B": B, "H": H, "Hkv": Hkv, "S": S, "D": D, "causal": causal, "q_mult": q_mult}
        RESULTS["accuracy"].append(case)
        name = case_name(case)
        if time_left(a) < 30:
            case["skipped"] = "deadline"
            continue
        t_case = time.time()
        scale = 1.0 / math.sqrt(D)
        try:
            def normal(*shape):  # bf16-ish random normal (std 1)
                return torch.randn(*shape, generator=gen, device="cuda").to(torch.bfloat16).float()
            q = normal(B, S, H, D) * q_mult
            k = normal(B, S, Hkv, D)
            v = normal(B, S, Hkv, D)
        except Exception as e:
            case["error"] = record_error(f"acc {name} inputs", e)
            continue
        for mode in ("per_head", "per_tensor"):
            r = case[mode] = {}
            try:
                q8, dq = quantize(torch, q, Hkv, per_tensor=(mode == "per_tensor"))
                k8, dk = quantize(torch, k, Hkv, per_tensor=(mode == "per_tensor"))
                v8, dv = quantize(torch, v, Hkv, per_tensor=(mode == "per_tensor"))
                qd, kd, vd = (dequantize(torch, x8, ds) for x8, ds in ((q8, dq), (k8, dk), (v8, dv)))
                ref, lse_ref = attention_ref(torch, qd, kd, vd, causal, scale)
            except Exception as e:
                r["error"] = record_error(f"acc {name} {mode} quantize/reference", e)
                continue
            # (a) fa4jit FP8
            try:
                out = fa4jit_run(workdir, f"acc{ci}_{mode}_e4m3", fa4jit_config("e4m3", D, causal),
                                 {"q": q8, "k": k8, "v": v8, "descale_q": dq, "descale_k": dk, "descale_v": dv})
                o = out["o"].cuda().double()
                lse = out["lse"].cuda().double()
                r["fa_fp8"] = rel_l2(torch, o, ref)
                r["o_dtype"] = str(out["o"].dtype)
                r["nonfinite"] = nonfinite(torch, o, lse)
                r["lse_rel"] = rel_l2(torch, lse, lse_ref)
                r["lse_max_abs"] = float((lse - lse_ref).abs().max())
                r["fa_fp8_max_abs"] = float((o - ref).abs().max())
            except Exception as e:
                r["fa_fp8_error"] = record_error(f"acc {name} {mode} fa4jit e4m3", e, tb=False)
                o = None
            if mode == "per_head":
                # (b) PyTorch float32 math attention on the same dequantized inputs
                try:
                    q32, k32, v32 = (x.float().permute(0, 2, 1, 3) for x in (qd, kd, vd))
                    with sdpa_kernel([SDPBackend.MATH]):
                        o32 = F.scaled_dot_product_attention(q32, k32, v32, is_causal=causal, enable_gqa=(H != Hkv))
                    r["torch_fp32"] = rel_l2(torch, o32.permute(0, 2, 1, 3), ref)
                    del q32, k32, v32, o32
                except Exception as e:
                    r["torch_fp32_error"] = record_error(f"acc {name} torch fp32", e)
                # (c) float32 emulation of the kernel's P rounding
                try:
                    oe, _ = attention_ref(torch, qd.float(), kd.float(), vd.float(), causal, scale, p_fp8_scale=P_SCALE)
                    r["emul_p"] = rel_l2(torch, oe, ref)
                    if o is not None:  # ||o - emul|| / ||ref||: how far the kernel is from the emulation
                        r["fa_fp8_vs_emul"] = float(torch.linalg.vector_norm(o - oe.double()) / torch.linalg.vector_norm(ref))
                    del oe
                except Exception as e:
                    r["emul_p_error"] = record_error(f"acc {name} emulation", e)
                # (d) fa4jit bf16 on the dequantized inputs cast to bf16
                try:
                    out = fa4jit_run(workdir, f"acc{ci}_bf16", fa4jit_config("bf16", D, causal),
                                     {"q": qd.to(torch.bfloat16), "k": kd.to(torch.bfloat16), "v": vd.to(torch.bfloat16)})
                    ob = out["o"].cuda().double()
                    r["fa_bf16"] = rel_l2(torch, ob, ref)
                    r["fa_bf16_lse_rel"] = rel_l2(torch, out["lse"].cuda().double(), lse_ref)
                    r["fa_bf16_nonfinite"] = nonfinite(torch, ob)
                except Exception as e:
                    r["fa_bf16_error"] = record_error(f"acc {name} fa4jit bf16", e, tb=False)
            elif cudnn is not None:
                # cuDNN FP8 SDPA on the same per-tensor e4m3 inputs
                try:
                    g = CudnnFp8(cudnn, torch, handle, B, H, Hkv, S, D, causal)
                    r["cudnn_o_dtype"] = g.o_type
                    if g.notes:
                        r["cudnn_notes"] = g.notes
                    g.bind(q8, k8, v8)
                    # e4m3 O only: scale_o from max|V| (|O| <= max|V|, a convex combination of V's rows)
                    scale_o = 1.0 if g.o_type == "bf16" else E4M3_MAX / float(vd.abs().max())
                    bad = 0
                    for ss in (448.0, 256.0):
                        g.set_scales(float(dq[0, 0]), float(dk[0, 0]), float(dv[0, 0]), ss, scale_o)
                        g()
                        torch.cuda.synchronize()
                        oc = g.output().double()
                        bad += nonfinite(torch, oc)
                        r[f"cudnn_s{int(ss)}"] = rel_l2(torch, oc, ref)
                    r["cudnn_nonfinite"] = bad
                    if g.o_type == "e4m3":  # the error of rounding the exact O to e4m3 with the same scale_o alone
                        r["cudnn_o_floor"] = rel_l2(torch, (ref * scale_o).float().to(torch.float8_e4m3fn).double() / scale_o, ref)
                    r["cudnn_amax_o"] = float(g.amax["amax_o"].item())
                    del g
                except Exception as e:
                    r["cudnn_error"] = record_error(f"acc {name} cuDNN fp8", e)
            del ref, lse_ref, qd, kd, vd
        case["seconds"] = round(time.time() - t_case, 1)
        ph, pt = case.get("per_head", {}), case.get("per_tensor", {})
        print(f"acc {name}: fa-fp8 {fmt_e(ph.get('fa_fp8'))} fp32 {fmt_e(ph.get('torch_fp32'))} "
              f"emulP {fmt_e(ph.get('emul_p'))} fa-bf16 {fmt_e(ph.get('fa_bf16'))} lse {fmt_e(ph.get('lse_rel'))} | "
              f"per-tensor fa-fp8 {fmt_e(pt.get('fa_fp8'))} cuDNN {fmt_e(pt.get('cudnn_s448'))} ({case['seconds']} s)",
              flush=True)
        torch.cuda.empty_cache()
        save_json(a)


def section_speed(a, torch, workdir, cudnn, handle, torch_fp8):
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    sys.path.insert(0, HERE)
    from peers import median_ms, stream_ms  # the timing bench/compare.py's peers use

    def timed(fn, flops):
        ms, mss = median_ms(fn, iters=a.iters, warm=a.warmup), stream_ms(fn, iters=a.iters, warm=a.warmup)
        return {"ms": ms, "tflops": flops / ms / 1e9, "ms_stream": mss, "tflops_stream": flops / mss / 1e9}

    for (B, H, Hkv, S, D, causal) in a.rows:
        row = {"B": B, "H": H, "Hkv": Hkv, "S": S, "D": D, "causal": causal, "rounds": []}
        RESULTS["speed"].append(row)
        if time_left(a) < 45:
            row["skipped"] = "deadline"
            continue
        flops = attn_flops(B, H, S, S, D, causal)
        kernels = {}
        setup_err = {}
        try:
            # fa4jit bench makes its own random inputs; the peers get random normal ones.
            kernels["fa_e4m3"] = lambda: fa4jit_bench(workdir, "e4m3", B, H, Hkv, S, D, causal, a.iters, a.warmup)
            kernels["fa_bf16"] = lambda: fa4jit_bench(workdir, "bf16", B, H, Hkv, S, D, causal, a.iters, a.warmup)
            qb = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16)
            kb = torch.randn(B, Hkv, S, D, device="cuda", dtype=torch.bfloat16)
            vb = torch.randn(B, Hkv, S, D, device="cuda", dtype=torch.bfloat16)
            gqa = H != Hkv

            def sdpa_bf16():
                with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                    return timed(lambda: F.scaled_dot_product_attention(qb, kb, vb, is_causal=causal, enable_gqa=gqa), flops)
            kernels["sdpa_cudnn_bf16"] = sdpa_bf16
            # e4m3 inputs for the FP8 peers: the same values, (B, S, H, D), quantized per tensor
            q8, dq = quantize(torch, qb.transpose(1, 2), Hkv, per_tensor=True)
            k8, dk = quantize(torch, kb.transpose(1, 2), Hkv, per_tensor=True)
            v8, dv = quantize(torch, vb.transpose(1, 2), Hkv, per_tensor=True)
        except Exception as e:
            row["error"] = record_error(f"speed {B},{H},{Hkv},{S},{D},{causal} setup", e)
            continue
        if cudnn is not None:
            try:
                g = CudnnFp8(cudnn, torch, handle, B, H, Hkv, S, D, causal)
                scale_o = 1.0 if g.o_type == "bf16" else E4M3_MAX / float(vb.abs().max())  # |O| <= max|V|
                g.set_scales(float(dq[0, 0]), float(dk[0, 0]), float(dv[0, 0]), a.scale_s, scale_o)
                g.bind(q8, k8, v8)
                row["cudnn_o_dtype"] = g.o_type
                kernels["cudnn_fp8"] = lambda: timed(g, flops)
            except Exception as e:
                setup_err["cudnn_fp8"] = {"error": record_error(f"speed {B},{H},{Hkv},{S},{D},{causal} cuDNN fp8 build", e)}
        else:
            setup_err["cudnn_fp8"] = {"error": RESULTS["probe"].get("cudnn", {}).get("error", "cudnn-frontend unavailable")}
        if torch_fp8 is not None:
            try:
                q8h, k8h, v8h = (x.transpose(1, 2).contiguous() for x in (q8, k8, v8))
                fn8 = torch_fp8(q8h, k8h, v8h, dq, dk, dv, causal)
                kernels["torch_fp8"] = lambda: timed(fn8, flops)
            except Exception as e:
                setup_err["torch_fp8"] = {"error": record_error("speed torch fp8 setup", e)}
        names = list(kernels)
        for rnd in range(a.rounds):
            res = dict(setup_err)
            for name in (names if rnd % 2 == 0 else names[::-1]):
                try:
                    res[name] = kernels[name]()
                except Exception as e:
                    res[name] = {"error": short(e, 300)}
            row["rounds"].append(res)
        row["kernels"], row["ratios"] = summarize_rounds(row["rounds"])
        for n, x in row["kernels"].items():
            if "error" in x:
                RESULTS["errors"].append({"where": f"speed {B},{H},{Hkv},{S},{D},{causal} {n}", "error": x["error"]})
        ks = row["kernels"]
        print(f"speed B{B} H{H}/{Hkv} S{S} D{D} {'causal' if causal else 'full'}: " + ", ".join(
            f"{n} {ks[n]['tflops']:.0f}" if "tflops" in ks[n] else f"{n} err" for n in ks)
            + f" | e4m3/bf16 {fmt_ratio(row['ratios'].get('tflops:fa_bf16'))}"
            f" e4m3/cuDNN-fp8 {fmt_ratio(row['ratios'].get('tflops:cudnn_fp8'))}", flush=True)
        del kernels
        torch.cuda.empty_cache()
        save_json(a)


# ----------------------------------------------------------------------------------------------------------


def print_summary(a):
    m, p = RESULTS["meta"], RESULTS["probe"]
    print("\n" + "=" * 30 + " fp8.py summary " + "=" * 30)
    print(f"device: {m.get('device', '?')} | torch {m.get('torch', '?')} cuDNN {m.get('torch_cudnn', '?')} | "
          f"FA4JIT {fa4jit_binary()} arch {ARCH} | {time.time() - T0:.0f} s")
    c = p.get("cudnn", {})
    if c:
        print("cuDNN FP8 SDPA: " + (f"ok (frontend {c.get('frontend')}, backend {c.get('backend')}, O {c.get('probe_o_dtype')}; "
                                    "per-tensor descales; timed with random normal inputs)"
                                    if c.get("ok") else f"UNAVAILABLE: {short(c.get('error', '?'), 200)}"))
    t = p.get("torch_fp8", {})
    if t:
        print("PyTorch FP8 SDPA: " + ("ok (quantized SDPA, FA3)" if t.get("ok") else "none usable: " + short(
            "; ".join(f"{k}={t[k]}" for k in ("quantized_api", "fa3_activate", "call", "plain_sdpa_e4m3_cudnn") if k in t), 300)))
    if RESULTS["accuracy"]:
        print("\nAccuracy: rel L2 vs float64 attention on the dequantized inputs (per (batch, kv head) amax scales):")
        for line in acc_table(RESULTS["accuracy"]):
            print(line)
    if RESULTS["speed"]:
        print(f"\nSpeed: TFLOP/s, median of {a.rounds} interleaved round(s); ratios: median (min-max) of per-round ratios;"
              " 'stream': back-to-back device time")
        for line in speed_table(RESULTS["speed"]):
            print(line)
    errs = RESULTS["errors"]
    if errs:
        print(f"\nerrors ({len(errs)}; all in fp8.json):")
        for e in errs[:8]:
            print(f"- {e['where']}: {short(e['error'], 200)}")
    print(f"JSON: {os.path.join(a.out, 'fp8.json')}")


def selftest():
    """CPU checks of the pure helpers; torch parts skip when torch is missing."""
    ok = True

    def check(cond, what):
        nonlocal ok
        print(("ok   " if cond else "FAIL ") + what)
        ok = ok and bool(cond)
    check(attn_flops(16, 16, 2048, 2048, 128, False) == 4.0 * 16 * 16 * 2048 * 2048 * 128, "flops full")
    check(attn_flops(2, 16, 16384, 16384, 128, True) * 2 == attn_flops(2, 16, 16384, 16384, 128, False), "flops causal = half")
    a = parse_args(["--quick", "--out", "/tmp/x", "--rows", "2,32,8,8192,128,1;8,16,16,4096,64,0"])
    check(a.rounds == 1 and a.out == "/tmp/x" and a.rows == [(2, 32, 8, 8192, 128, True), (8, 16, 16, 4096, 64, False)],
          "parse_args --quick --rows")
    a = parse_args([])
    check(a.rounds == 3 and a.rows == SPEED_ROWS and a.sections == ["acc", "speed"] and a.cases == ACC_CASES,
          "parse_args defaults")
    check(parse_args(["--cases", "5,0"]).cases == [ACC_CASES[5], ACC_CASES[0]], "parse_args --cases")
    try:
        parse_rows("1,2,3")
        check(False, "parse_rows rejects short items")
    except ValueError:
        check(True, "parse_rows rejects short items")
    rounds = [{"fa_e4m3": {"tflops": 900.0, "tflops_stream": 950.0}, "fa_bf16": {"tflops": 600.0, "tflops_stream": 620.0},
               "cudnn_fp8": {"tflops": 800.0, "tflops_stream": 810.0}, "sdpa_cudnn_bf16": {"error": "boom"}},
              {"fa_e4m3": {"tflops": 880.0, "tflops_stream": 940.0}, "fa_bf16": {"tflops": 640.0, "tflops_stream": 630.0},
               "cudnn_fp8": {"tflops": 820.0, "tflops_stream": 800.0}, "sdpa_cudnn_bf16": {"error": "boom"}},
              {"fa_e4m3": {"tflops": 910.0, "tflops_stream": 960.0}, "fa_bf16": {"tflops": 610.0, "tflops_stream": 600.0},
               "cudnn_fp8": {"tflops": 790.0, "tflops_stream": 805.0}, "sdpa_cudnn_bf16": {"error": "boom"}}]
    ks, rt = summarize_rounds(rounds)
    check(ks["fa_e4m3"]["tflops"] == 900.0 and ks["sdpa_cudnn_bf16"] == {"error": "boom"}, "summarize medians/errors")
    r = rt["tflops:fa_bf16"]
    check(abs(r["median"] - 910 / 610) < 1e-9 and abs(r["min"] - 880 / 640) < 1e-9 and abs(r["max"] - 1.5) < 1e-9,
          "paired ratios median/min/max")
    check("tflops:sdpa_cudnn_bf16" not in rt, "no ratio against a failed peer")
    rows = [{"B": 2, "H": 32, "Hkv": 8, "S": 8192, "D": 128, "causal": True, "kernels": ks, "ratios": rt},
            {"B": 1, "H": 8, "Hkv": 8, "S": 128, "D": 64, "causal": False, "skipped": "deadline"}]
    tab = speed_table(rows)
    print("\n".join(tab))
    check(len(tab) == 4 and "| 1.492 (1.38-1.50) |" in tab[2] and "32/8" in tab[2] and "skip" in tab[3], "speed table")
    cases = [{"B": 2, "H": 8, "Hkv": 2, "S": 333, "D": 128, "causal": True, "q_mult": 3.0,
              "per_head": {"fa_fp8": 0.021, "torch_fp32": 1e-7, "emul_p": 0.02, "fa_bf16": 3e-3, "lse_rel": 1e-6,
                           "lse_max_abs": 2e-4, "nonfinite": 0, "fa_fp8_vs_emul": 0.004},
              "per_tensor": {"fa_fp8": 0.022, "cudnn_s448": 0.03, "cudnn_o_dtype": "bf16", "nonfinite": 0}}]
    tab = acc_table(cases)
    print("\n".join(tab))
    check(len(tab) == 7 and "B2 H8/2 S333 D128 causal q*3" in tab[2] and "2.10e-02" in tab[2] and "| err | bf16 |" in tab[6],
          "accuracy table")
    try:
        import torch
    except ImportError:
        print("skip torch parts (torch is not installed here)")
        return ok
    g = torch.Generator().manual_seed(0)
    B, S, H, Hkv, D = 2, 37, 8, 2, 16
    x = torch.randn(B, S, H, D, generator=g).to(torch.bfloat16).float()
    x[1, :, 4:8] *= 10  # the second kv head of batch 1 has a larger range
    x8, ds = quantize(torch, x, Hkv)
    check(x8.dtype == torch.float8_e4m3fn and tuple(ds.shape) == (B, Hkv) and ds.dtype == torch.float32, "quantize dtypes/shapes")
    amax = x.reshape(B, S, Hkv, H // Hkv, D).abs().amax(dim=(1, 3, 4))
    check(torch.allclose(ds, amax / 448), "descale = amax / 448 per (batch, kv head)")
    check(float(x8.float().abs().max()) == 448.0, "the amax element maps to 448")
    xd = dequantize(torch, x8, ds)
    # e4m3: 3 mantissa bits (relative error <= 2^-4 when normal), subnormal step 2^-9 (error <= descale * 2^-10)
    dse = ds.double()[:, None, :, None, None].expand(B, S, Hkv, H // Hkv, D).reshape(B, S, H, D)
    bound = torch.maximum(x.double().abs() * 2 ** -4, dse * 2 ** -10) * (1 + 1e-6)
    check(bool(((xd - x.double()).abs() <= bound).all()), "dequantize round trip within e4m3 rounding")
    x8t, dst = quantize(torch, x, Hkv, per_tensor=True)
    check(bool((dst == dst[0, 0]).all()) and abs(float(dst[0, 0]) - float(x.abs().max()) / 448) < 1e-6, "per-tensor descale")
    # reference attention against a straightforward softmax (float64, GQA, causal)
    q = torch.randn(1, 5, 4, 8, generator=g, dtype=torch.float64)
    k = torch.randn(1, 5, 2, 8, generator=g, dtype=torch.float64)
    v = torch.randn(1, 5, 2, 8, generator=g, dtype=torch.float64)
    o, lse = attention_ref(torch, q, k, v, True, 0.3, max_bytes=64)
    kk, vv = k.repeat_interleave(2, dim=2), v.repeat_interleave(2, dim=2)
    s = torch.einsum("bqhd,bkhd->bhqk", q, kk) * 0.3
    s = s.masked_fill(torch.ones(5, 5, dtype=torch.bool).triu(1), float("-inf"))
    o2 = torch.einsum("bhqk,bkhd->bqhd", torch.softmax(s, -1), vv)
    check(torch.allclose(o, o2) and torch.allclose(lse, torch.logsumexp(s, -1)), "attention_ref = softmax(QK^T) V, lse")
    oe, _ = attention_ref(torch, q.float(), k.float(), v.float(), True, 0.3, p_fp8_scale=P_SCALE)
    check(0 < rel_l2(torch, oe, o) < 0.1, f"P-rounding emulation differs slightly ({rel_l2(torch, oe, o):.2e})")
    try:
        import safetensors.torch as st
        with tempfile.TemporaryDirectory() as d:
            st.save_file({"q": x8, "descale_q": ds}, os.path.join(d, "t.safetensors"))
            back = st.load_file(os.path.join(d, "t.safetensors"))
            check(back["q"].dtype == torch.float8_e4m3fn and torch.equal(back["q"].view(torch.uint8), x8.view(torch.uint8)),
                  "safetensors e4m3 round trip")
    except ImportError:
        print("skip safetensors round trip (not installed here)")
    return ok


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    if a.selftest:
        ok = selftest()
        print("selftest:", "ok" if ok else "FAILED")
        return 0 if ok else 1

    def on_term(signum, frame):
        raise Terminated()
    signal.signal(signal.SIGTERM, on_term)
    DEADLINE[0] = a.deadline
    RESULTS["meta"] = {"argv": sys.argv, "fa4jit": fa4jit_binary(), "arch": ARCH, "rounds": a.rounds, "iters": a.iters,
                       "warmup": a.warmup, "scale_s": a.scale_s, "sections": a.sections,
                       "note": "fa4jit bench times its own random inputs; the peers random normal ones (e4m3: per tensor "
                               "descales). cuDNN FP8 writes an e4m3 O on Hopper (bf16 O: Blackwell only), fa4jit a bf16 O."}
    workdir = tempfile.mkdtemp(prefix="fa4jit_fp8_")
    try:
        import torch
        RESULTS["meta"].update(torch=torch.__version__, torch_cudnn=torch.backends.cudnn.version(),
                               device=torch.cuda.get_device_name() if torch.cuda.is_available() else "no CUDA device")
        if not torch.cuda.is_available():
            raise RuntimeError("no CUDA device visible to torch")
        torch.cuda.init()
        RESULTS["probe"]["cudnn"] = {}
        cudnn, handle = probe_cudnn(torch, RESULTS["probe"]["cudnn"])
        RESULTS["probe"]["torch_fp8"] = {}
        torch_fp8 = None
        if "speed" in a.sections:
            try:
                torch_fp8 = probe_torch_fp8(torch, RESULTS["probe"]["torch_fp8"])
            except Exception as e:
                RESULTS["probe"]["torch_fp8"]["error"] = record_error("torch fp8 probe", e)
        print("probe:", json.dumps(RESULTS["probe"], default=str)[:1500], flush=True)
        save_json(a)
        if not (os.path.exists(fa4jit_binary()) or shutil.which(fa4jit_binary())):
            record_error("fa4jit", f"FA4JIT={fa4jit_binary()} does not exist: the fa4jit columns will be errors", tb=False)
        for sec, fn in (("acc", lambda: section_acc(a, torch, workdir, cudnn, handle)),
                        ("speed", lambda: section_speed(a, torch, workdir, cudnn, handle, torch_fp8))):
            if sec in a.sections:
                print(f"--- section {sec} ({time.time() - T0:.0f} s)", flush=True)
                try:
                    fn()
                except Exception as e:
                    record_error(f"section {sec}", e)
    except Terminated:
        record_error("main", "SIGTERM: stopped early", tb=False)
    except Exception as e:
        record_error("main", e)
    finally:
        save_json(a)
        print_summary(a)
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
