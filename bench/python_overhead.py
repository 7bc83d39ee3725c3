#!/usr/bin/env python3
"""Host overhead per call from Python for a cached kernel (not a test).

On a decode-sized problem (the GPU work takes a few microseconds) a loop of N calls without
synchronization is bound by the host: wall time / N is the host cost per call. CUDA events give
the GPU time per call beside it. Layers of fa4jit are timed separately so the overhead can be
attributed: the raw C API launch with pre-packed arguments (ctypes), the custom op
torch.ops.fa4jit.fwd, and fa4jit.attention (argument handling + the op). Peers: SDPA, and
flash_attn.cute.flash_attn_func (FA4) when importable.

    python3 bench/python_overhead.py [--calls 2000] [--json out.json]
    python3 bench/python_overhead.py --cpu     # no GPU: the Python path only (see cpu_main)
"""
import argparse
import ctypes
import ctypes.util
import inspect
import json
import os
import site
import time

import torch
import torch.nn.functional as F

import fa4jit
from fa4jit import _checks, _lib, ops


def timed(fn, calls, warmup=50):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best_host = float("inf")
    gpu = 0.0
    for _ in range(3):
        start.record()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
        end.record()
        torch.cuda.synchronize()
        best_host = min(best_host, (t1 - t0) / calls * 1e6)
        gpu = start.elapsed_time(end) / calls * 1e3
    return best_host, gpu


def cpu_main(calls):
    """The Python host path on a machine without a GPU: CPU tensors stand in for CUDA ones, the
    kernel compiles for sm_90a (or comes from the disk cache), and the final fa4jit_launch ctypes call
    is replaced by a ctypes call of the same signature that does nothing (libc memcmp with length 0,
    the stream being 0), so everything up to the C launch is timed, including ctypes' argument
    conversion, but not the library's launch or the driver. Not comparable with GPU numbers: the
    host CPU differs, and CPU torch.empty is not the CUDA caching allocator."""
    # The checks as written, except that q's device type may be "cpu" (the only rule a CPU tensor breaks).
    src = inspect.getsource(ops._check_qkv)
    assert 'device.type != "cuda"' in src
    exec(src.replace('device.type != "cuda"', 'device.type != "cpu"'), _checks.__dict__)
    ops._check_qkv = _checks._check_qkv
    ops._arch = lambda dev: "sm_90a"
    ops._stream = lambda dev: 0
    torch.cuda.current_device = lambda: 0
    memcmp = ctypes.CDLL(ctypes.util.find_library("c")).memcmp
    memcmp.restype, memcmp.argtypes = ctypes.c_int32, _lib.fa4jit_launch.argtypes
    _lib.fa4jit_launch = memcmp

    def workspace_bytes(handle, args, n):  # the real query needs the device's SM count
        n._obj.value = 1 << 20
        return 0
    _lib.fa4jit_workspace_bytes = workspace_bytes
    B, Sq, Sk, Hq, Hkv, D = 1, 1, 512, 32, 8, 128
    dt = torch.bfloat16
    q, k, v = torch.randn(B, Sq, Hq, D).to(dt), torch.randn(B, Sk, Hkv, D).to(dt), torch.randn(B, Sk, Hkv, D).to(dt)
    qp, kp = torch.randn(B, 128, Hq, D).to(dt), torch.randn(B, 128, Hq, D).to(dt)
    out = torch.empty_like(q)
    cu = torch.tensor([0, 1], dtype=torch.int32)
    cuk = torch.tensor([0, Sk], dtype=torch.int32)
    kc = torch.randn(8, 64, Hkv, D).to(dt)
    table = torch.arange(8, dtype=torch.int32).reshape(1, 8)
    used = torch.tensor([Sk], dtype=torch.int32)

    def run(name, fn):
        for _ in range(200):
            fn()
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter_ns()
            for _ in range(calls):
                fn()
            best = min(best, (time.perf_counter_ns() - t0) / calls / 1e3)
        print(f"{name:62s} host {best:7.2f} us/call (CPU, no launch)", flush=True)

    run("fa4jit.attention (decode 1x1x32/8x128, Sk 512, num_splits=1)",
        lambda: fa4jit.attention(q, k, v, causal=True, num_splits=1))
    run("fa4jit.attention (same, automatic splits: workspace)", lambda: fa4jit.attention(q, k, v, causal=True))
    run("fa4jit.attention (same, out=, return_lse)",
        lambda: fa4jit.attention(q, k, v, causal=True, num_splits=1, out=out, return_lse=True))
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    run("fa4jit.attention (same, layout='bhsd')",
        lambda: fa4jit.attention(qt, kt, vt, causal=True, num_splits=1, layout="bhsd"))
    q3, k3, v3 = q[0], k[0], v[0]
    run("fa4jit.attention_varlen (same problem, packed)",
        lambda: fa4jit.attention_varlen(q3, k3, v3, cu, cuk, 1, causal=True, num_splits=1))
    run("fa4jit.attention_paged (8 pages of 64)",
        lambda: fa4jit.attention_paged(q, kc, kc, table, used, causal=True, num_splits=1))
    common = dict(aux=[], scalars=[], aux_names="", causal=True, window_left=-2, window_right=-2, chunk_size=0,
                  mask_mod="", block_mask_mod="", score_mod="", softcap=0.0, softmax_scale=0.0, max_seqlen_q=0,
                  num_splits=1, pack_gqa=-1, return_lse=False, out_bhsd=False)
    run("torch.ops.fa4jit.fwd (the custom op, num_splits=1)",
        lambda: torch.ops.fa4jit.fwd(q, k, v, None, None, None, None, None, None, **common))
    run("ops._launch (fa4jit's Python launch path, no op dispatch)",
        lambda: ops._launch(ops.Call(q, k, v, out, causal=True, num_splits=1)))
    run("fa4jit.attention (prefill 1x128x32x128, causal)", lambda: fa4jit.attention(qp, kp, kp, causal=True))
    # A new signature every call (a decode loop over a KV cache that grows by one row a step): no
    # plan is reused, so this is the general path's cost.
    kbuf = torch.randn(1, Sk + 200 + 5 * calls, Hkv, D).to(dt)
    grown = iter([kbuf[:, :n] for n in range(Sk, Sk + 200 + 5 * calls)])
    run("fa4jit.attention (decode, Sk + 1 every call: no plan reuse)",
        lambda: fa4jit.attention(q, *(2 * (next(grown),)), causal=True, num_splits=1))
    run("torch.empty_like(q) (for scale)", lambda: torch.empty_like(q))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--json")
    ap.add_argument("--cpu", action="store_true", help="no GPU: time the Python path up to the C launch")
    args = ap.parse_args()
    if args.cpu:
        return cpu_main(args.calls)
    B, Sq, Sk, Hq, Hkv, D = 1, 1, 512, 32, 8, 128
    dt = torch.bfloat16
    q = torch.randn(B, Sq, Hq, D, device="cuda", dtype=dt)
    k = torch.randn(B, Sk, Hkv, D, device="cuda", dtype=dt)
    v = torch.randn(B, Sk, Hkv, D, device="cuda", dtype=dt)
    qp = torch.randn(B, 128, Hq, D, device="cuda", dtype=dt)
    kp = torch.randn(B, 128, Hq, D, device="cuda", dtype=dt)
    rows = {}

    def run(name, fn):
        host, gpu = timed(fn, args.calls)
        rows[name] = {"host_us_per_call": round(host, 2), "gpu_us_per_call": round(gpu, 2)}
        print(f"{name:58s} host {host:7.2f} us/call   gpu {gpu:7.2f} us/call", flush=True)

    # fa4jit layers (one cached kernel each).
    run("fa4jit.attention (decode 1x1x32/8x128, Sk 512, num_splits=1)",
        lambda: fa4jit.attention(q, k, v, causal=True, num_splits=1))
    run("fa4jit.attention (same, automatic splits: workspace + combine)", lambda: fa4jit.attention(q, k, v, causal=True))
    common = dict(aux=[], scalars=[], aux_names="", causal=True, window_left=-2, window_right=-2, chunk_size=0,
                  mask_mod="", block_mask_mod="", score_mod="", softcap=0.0, softmax_scale=0.0, max_seqlen_q=0,
                  num_splits=1, pack_gqa=-1, return_lse=False, out_bhsd=False)
    run("torch.ops.fa4jit.fwd (the custom op, num_splits=1)",
        lambda: torch.ops.fa4jit.fwd(q, k, v, None, None, None, None, None, None, **common))
    out = torch.empty_like(q)
    run("ops._launch (fa4jit's Python launch path, no op dispatch)",
        lambda: ops._launch(ops.Call(q, k, v, out, causal=True, num_splits=1)))
    kern = next(iter(ops._kernels.values()))
    # The library's defaults (fa4jit_launch_args_init), then this launch's device, tensors and splits.
    buf = ctypes.create_string_buffer(_lib.LAUNCH_ARGS_SIZE)
    _lib.fa4jit_launch_args_init(buf)
    values = list(_lib.LAUNCH_ARGS.unpack_from(buf.raw))
    tensors = [x for t in ops._packed_tensors(q=q, k=k, v=v, o=out).values() for x in t]
    first = _lib.FIELD_INDEX["q.data"]
    values[first:first + len(tensors)] = tensors
    values[_lib.FIELD_INDEX["device"]] = q.device.index
    values[_lib.FIELD_INDEX["num_splits"]] = 1
    packed = _lib.LAUNCH_ARGS.pack(*values)
    stream = torch.cuda.current_stream().cuda_stream
    run("fa4jit_launch via ctypes, pre-packed args (library + ctypes)",
        lambda: _lib.fa4jit_launch(kern.handle, packed, stream))
    run("fa4jit.attention (prefill 1x128x32x128, causal)", lambda: fa4jit.attention(qp, kp, kp, causal=True))

    # Peers.
    qt, kt, vt = q.transpose(1, 2), k.repeat_interleave(Hq // Hkv, 2).transpose(1, 2), v.repeat_interleave(Hq // Hkv, 2).transpose(1, 2)
    run("torch SDPA (same decode problem, K/V heads repeated)",
        lambda: F.scaled_dot_product_attention(qt, kt, vt))
    if os.environ.get("FA4_SITE"):  # ../shared/bench/fa4_peer.sh: its .pth files must run
        site.addsitedir(os.environ["FA4_SITE"])
    try:
        from flash_attn.cute import flash_attn_func
    except Exception as e:  # not installed, or no Blackwell/Hopper build
        print(f"flash_attn.cute.flash_attn_func: not importable ({type(e).__name__}: {e})")
    else:
        try:
            run("flash_attn.cute.flash_attn_func (same decode problem)",
                lambda: flash_attn_func(q, k, v, causal=True))
        except Exception as e:
            print(f"flash_attn.cute.flash_attn_func failed: {type(e).__name__}: {e}")
    rows["device"] = torch.cuda.get_device_name()
    rows["torch"] = torch.__version__
    rows["fa4jit"] = fa4jit.__version__
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
