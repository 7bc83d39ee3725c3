"""Float64 reference attention in torch (the Python tests' counterpart of tests/support/reference.cpp),
with the semantics of docs/VARIANTS.md: score = scale * q.k, then the score-mod, then the mask
(bottom-right aligned), softmax over the visible keys plus the sink; a row with no visible key gives
O = 0 and LSE = -inf (LSE = sink with a sink)."""
import math

import torch

REL_L2 = {torch.bfloat16: 1e-2, torch.float16: 5e-3}  # check/gpu.cpp rel_l2_tolerance, by input dtype
if hasattr(torch, "float8_e4m3fn"):
    # check/gpu.hpp kFp8RelL2Tolerance: against the reference on the dequantised inputs, FP8 kernels
    # differ by their rounding of P to e4m3 (3 mantissa bits) before P V.
    REL_L2[torch.float8_e4m3fn] = 5e-2
LSE_TOL = 2e-2


def attention_ref(q, k, v, causal=False, window=None, chunk=0, softcap=0.0, scale=None, sinks=None, alibi=None,
                  score_fn=None, mask_fn=None, seqused_k=None):
    """q (B, Sq, Hq, D), k/v (B, Sk, Hkv, D). score_fn(s, b, h, qi, ki) and mask_fn(b, h, qi, ki) get
    broadcastable index tensors (qi, ki: raw row indices) and return tensors. Returns (o float64 (B, Sq, Hq, D),
    lse float64 (B, Hq, Sq))."""
    B, Sq, Hq, D = q.shape
    Sk, Hkv = k.shape[1], k.shape[2]
    g = Hq // Hkv
    dev = q.device
    qf = q.double()
    kf = k.double().repeat_interleave(g, dim=2)
    vf = v.double().repeat_interleave(g, dim=2)
    scale = 1.0 / math.sqrt(D) if scale is None else scale
    s = torch.einsum("bqhd,bkhd->bhqk", qf, kf) * scale
    b = torch.arange(B, device=dev).view(B, 1, 1, 1)
    h = torch.arange(Hq, device=dev).view(1, Hq, 1, 1)
    qi = torch.arange(Sq, device=dev).view(1, 1, Sq, 1)
    ki = torch.arange(Sk, device=dev).view(1, 1, 1, Sk)
    if seqused_k is not None:
        sk_b = seqused_k.to(dev).long().view(B, 1, 1, 1)
    else:
        sk_b = torch.full((B, 1, 1, 1), Sk, device=dev)
    pos = qi + (sk_b - Sq)  # bottom-right aligned query position
    if alibi is not None:
        s = s - alibi.double().view(1, Hq, 1, 1) * (pos - ki).abs()
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    if score_fn is not None:
        s = score_fn(s, b, h, qi, ki).double()
    visible = ki < sk_b
    if causal:
        visible = visible & (ki <= pos)
    if window is not None:
        left, right = window
        if left is not None and left >= 0:
            visible = visible & (ki >= pos - left)
        if right is not None and right >= 0:
            visible = visible & (ki <= pos + right)
    if chunk:
        visible = visible & (torch.div(pos, chunk, rounding_mode="floor") == torch.div(ki, chunk, rounding_mode="floor"))
    if mask_fn is not None:
        visible = visible & mask_fn(b, h, qi, ki).bool()
    s = s.masked_fill(~visible, float("-inf"))
    if sinks is not None:
        sink = sinks.double().view(1, Hq, 1, 1).expand(B, Hq, Sq, 1)
        s = torch.cat([s, sink], dim=-1)
    m = s.amax(dim=-1, keepdim=True)
    m_safe = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    p = torch.exp(s - m_safe)
    denom = p.sum(dim=-1, keepdim=True)
    lse = (m_safe + torch.log(denom)).squeeze(-1)
    if sinks is not None:
        p = p[..., :-1]
    o = torch.einsum("bhqk,bkhd->bqhd", p / torch.where(denom > 0, denom, torch.ones_like(denom)), vf)
    return o, lse


def rel_l2(x, ref):
    x, ref = x.double(), ref.double()
    return ((x - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def assert_close(o, ref, dtype, lse=None, ref_lse=None, what=""):
    err = rel_l2(o, ref)
    assert torch.isfinite(o.double()).all(), f"{what}: non-finite output"
    assert err <= REL_L2[dtype], f"{what}: rel L2 {err:.3e} > {REL_L2[dtype]:.0e}"
    if lse is not None:
        fin = torch.isfinite(ref_lse)
        assert torch.equal(torch.isfinite(lse.double()), fin), f"{what}: LSE -inf rows differ"
        d = (lse.double()[fin] - ref_lse[fin]).abs().max().item() if fin.any() else 0.0
        assert d <= LSE_TOL, f"{what}: LSE max abs diff {d:.3e} > {LSE_TOL}"
    return err
