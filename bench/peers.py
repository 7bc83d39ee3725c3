"""Peer attention timings on the current GPU: PyTorch SDPA (cuDNN, flash) and FlexAttention.

Same method as fa4jit's `bench` verb: random normal bf16 inputs, CUDA events, median of N
calls after warm-ups, TFLOP/s = 4*B*H*Sq*Sk*D (halved for causal). Run on the GPU machine.
"""
import json
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def median_ms(fn, iters=30, warm=5):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e))
    ts.sort()
    return ts[len(ts) // 2]


def stream_ms(fn, iters=30, warm=5):
    """Mean of back-to-back calls between one pair of events: device time per call once the host
    keeps ahead of the GPU (the per-call host cost that median_ms includes drops out)."""
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(iters):
        fn()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) / iters


def fa4_func(name="flash_attn_func"):
    """FlashAttention-4's function `name` (flash_attn_func, flash_attn_varlen_func; flash-attn-4 on PyPI,
    CuTe DSL), or the reason it is missing.
    On the lent GPU it is installed by ../shared/bench/fa4_peer.sh, which exports FA4_SITE: a site
    directory whose .pth files must run (site.addsitedir) before flash_attn.cute imports."""
    site_dir = os.environ.get("FA4_SITE")
    if site_dir:
        import site
        site.addsitedir(site_dir)
    try:
        import flash_attn.cute
        return getattr(flash_attn.cute, name), None
    except Exception as e:  # noqa: BLE001 - any import failure means "no FA4 here"
        return None, f"{type(e).__name__}: {e}"[:120]


def peers(B, H, Hkv, Sq, Sk, D, causal, flex=True, fa4=False):
    q = torch.randn(B, H, Sq, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(B, Hkv, Sk, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(B, Hkv, Sk, D, device="cuda", dtype=torch.bfloat16)
    flops = 4 * B * H * Sq * Sk * D * (0.5 if causal else 1.0)
    row = {}
    gqa = H != Hkv
    for name, be in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash2", SDPBackend.FLASH_ATTENTION)):
        try:
            with sdpa_kernel([be]):
                fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)  # noqa: E731
                ms, mss = median_ms(fn), stream_ms(fn)
            row[name] = {"ms": ms, "tflops": flops / ms / 1e9, "ms_stream": mss, "tflops_stream": flops / mss / 1e9}
        except Exception as e:  # a backend may not support a shape
            row[name] = {"error": str(e)[:80]}
    if fa4:  # FA4 takes (batch, seqlen, heads, dim); its first call per shape compiles (in the warm-up)
        fn4, why = fa4_func()
        if fn4 is None:
            row["fa4"] = {"error": why}
        else:
            try:
                q4, k4, v4 = (t.transpose(1, 2).contiguous() for t in (q, k, v))
                fn = lambda: fn4(q4, k4, v4, causal=causal)  # noqa: E731
                ms, mss = median_ms(fn), stream_ms(fn)
                row["fa4"] = {"ms": ms, "tflops": flops / ms / 1e9, "ms_stream": mss, "tflops_stream": flops / mss / 1e9}
            except Exception as e:
                row["fa4"] = {"error": str(e)[:120]}
    if flex:
        try:
            from torch.nn.attention.flex_attention import create_block_mask, flex_attention
            fx = torch.compile(flex_attention, dynamic=False)
            bm = create_block_mask(lambda b, h, qi, ki: qi >= ki, None, None, Sq, Sk) if causal else None
            fn = lambda: fx(q, k, v, block_mask=bm, enable_gqa=gqa)  # noqa: E731
            ms, mss = median_ms(fn), stream_ms(fn)
            row["flex"] = {"ms": ms, "tflops": flops / ms / 1e9, "ms_stream": mss, "tflops_stream": flops / mss / 1e9}
        except Exception as e:
            row["flex"] = {"error": str(e)[:80]}
    return row


if __name__ == "__main__":
    args = json.loads(sys.argv[1])
    print(json.dumps(peers(**args)))
