"""fa4jit.flash_attn_interface without a GPU: FlashAttention-3's signatures, how each argument reaches
fa4jit's ops (recorded, with the ops replaced), the NotImplementedError of each unsupported argument,
the KV append into contiguous and paged caches, rotary embedding against a float64 reference, and
merge_state against float64 attention over the union of the keys."""
import inspect
import math

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (the torch-layer tests need it)")
import fa4jit  # noqa: E402
from fa4jit import flash_attn_interface as fai  # noqa: E402
from fa4jit import ops  # noqa: E402
from reference import attention_ref  # noqa: E402

bf16 = torch.bfloat16

# FlashAttention-3's hopper/flash_attn_interface.py, positional parameters in order (callers pass
# some of them positionally).
FA3_FUNC = ["q", "k", "v", "softmax_scale", "causal", "qv", "q_descale", "k_descale", "v_descale", "window_size",
            "attention_chunk", "softcap", "num_splits", "pack_gqa", "deterministic", "sm_margin", "return_attn_probs"]
FA3_VARLEN = ["q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k", "seqused_q", "seqused_k",
              "softmax_scale", "causal", "qv", "q_descale", "k_descale", "v_descale", "window_size", "attention_chunk",
              "softcap", "num_splits", "pack_gqa", "deterministic", "sm_margin", "return_attn_probs"]
FA3_KVCACHE = ["q", "k_cache", "v_cache", "k", "v", "qv", "rotary_cos", "rotary_sin", "cache_seqlens", "cache_batch_idx",
               "cache_leftpad", "page_table", "cu_seqlens_q", "cu_seqlens_k_new", "max_seqlen_q", "rotary_seqlens",
               "q_descale", "k_descale", "v_descale", "softmax_scale", "causal", "window_size", "attention_chunk",
               "softcap", "rotary_interleaved", "scheduler_metadata", "num_splits", "pack_gqa", "sm_margin",
               "return_softmax_lse"]
FA3_DEFAULTS = {"softmax_scale": None, "causal": False, "window_size": (-1, -1), "attention_chunk": 0, "softcap": 0.0,
                "pack_gqa": None, "deterministic": False, "sm_margin": 0, "return_attn_probs": False,
                "rotary_interleaved": True, "return_softmax_lse": False}


@pytest.mark.parametrize("fn, names, num_splits", [(fai.flash_attn_func, FA3_FUNC, 1),
                                                   (fai.flash_attn_varlen_func, FA3_VARLEN, 1),
                                                   (fai.flash_attn_with_kvcache, FA3_KVCACHE, 0)])
def test_signatures_are_flash_attention_3s(fn, names, num_splits):
    params = inspect.signature(fn).parameters
    positional = [n for n, p in params.items() if p.kind == p.POSITIONAL_OR_KEYWORD]
    assert positional == names
    for n in names:
        if n in FA3_DEFAULTS:
            assert params[n].default == FA3_DEFAULTS[n], n
    assert params["num_splits"].default == num_splits
    # vLLM's wrapper's extras are keyword-only, so FA3's positional calls bind as in FA3.
    extras = {n for n, p in params.items() if p.kind == p.KEYWORD_ONLY}
    assert {"alibi_slopes", "s_aux", "out"} <= extras


class Recorder:
    """Stands in for an fa4jit op: records its arguments and returns zeros of the output's shape (and
    an LSE when asked)."""

    def __init__(self, kind):
        self.kind, self.calls = kind, []

    def __call__(self, q, k, v, *args, **kw):
        self.calls.append(dict(q=q, k=k, v=v, args=args, **kw))
        o = torch.zeros(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype)
        if not kw.get("return_lse"):
            return o
        if q.dim() == 3:
            lse = torch.zeros(q.shape[1], q.shape[0])
        else:
            lse = torch.zeros(q.shape[0], q.shape[2], q.shape[1])
        return o, lse


@pytest.fixture
def rec(monkeypatch):
    r = {k: Recorder(k) for k in ("attention", "attention_varlen", "attention_paged")}
    for name, f in r.items():
        monkeypatch.setattr(ops, name, f)
    return r


def qkv(B=2, Sq=4, Sk=8, Hq=4, Hkv=2, D=16, dtype=bf16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, Sq, Hq, D, generator=g).to(dtype), torch.randn(B, Sk, Hkv, D, generator=g).to(dtype),
            torch.randn(B, Sk, Hkv, D, generator=g).to(dtype))


def test_flash_attn_func_maps_every_argument(rec):
    q, k, v = qkv()
    sinks = torch.randn(4)
    o = fai.flash_attn_func(q, k, v, 0.25, True, None, None, None, None, (64, 0), 0, 30.0, 3, True)
    assert o.shape == q.shape and not isinstance(o, tuple)
    c = rec["attention"].calls[-1]
    assert (c["softmax_scale"], c["causal"], c["window"], c["softcap"], c["num_splits"], c["pack_gqa"]) == \
        (0.25, True, (64, 0), 30.0, 3, True)
    assert c["return_lse"] is False and c["chunk_size"] == 0 and c["sinks"] is None
    o, lse = fai.flash_attn_func(q, k, v, attention_chunk=8192, s_aux=sinks, return_attn_probs=True)
    assert lse.shape == (2, 4, 4)
    c = rec["attention"].calls[-1]
    assert c["window"] is None and c["chunk_size"] == 8192 and c["sinks"] is sinks and c["num_splits"] == 1
    assert c["return_lse"] is True


def test_window_size_minus_one_is_unbounded(rec):
    q, k, v = qkv()
    for ws, want in [((-1, -1), None), ((127, -1), (127, -1)), ((-1, 0), (-1, 0)), (None, None)]:
        fai.flash_attn_func(q, k, v, window_size=ws)
        assert rec["attention"].calls[-1]["window"] == want, ws
    with pytest.raises(ValueError, match="window_size: expected"):
        fai.flash_attn_func(q, k, v, window_size=5)


def test_fp8_descale_of_any_stride_becomes_contiguous_float32(rec):
    q, k, v = qkv()
    scale = torch.tensor([0.5])
    expanded = scale.expand(2, 2)  # vLLM: layer._q_scale.expand(descale_shape), strides (0, 0)
    assert expanded.stride() == (0, 0)
    fai.flash_attn_func(q, k, v, q_descale=expanded, k_descale=torch.full((2, 2), 2.0, dtype=torch.float16).t(),
                        v_descale=None)
    c = rec["attention"].calls[-1]
    for name, want in (("descale_q", 0.5), ("descale_k", 2.0)):
        t = c[name]
        assert t.is_contiguous() and t.dtype == torch.float32 and tuple(t.shape) == (2, 2)
        assert torch.equal(t, torch.full((2, 2), want)), name
    assert c["descale_v"] is None


def test_varlen_maps_to_attention_varlen_and_to_paged_with_block_table(rec):
    q, k, v = (t.reshape(-1, t.shape[2], t.shape[3]) for t in qkv())
    cu_q = torch.tensor([0, 3, 8], dtype=torch.int32)
    cu_k = torch.tensor([0, 7, 16], dtype=torch.int32)
    seqused = torch.tensor([5, 9], dtype=torch.int32)
    o, lse = fai.flash_attn_varlen_func(q, k, v, cu_q, cu_k, 5, 9, None, seqused, 0.5, True, return_attn_probs=True)
    assert o.shape == q.shape and lse.shape == (4, 8)
    c = rec["attention_varlen"].calls[-1]
    assert c["args"][0] is cu_q and c["args"][1] is cu_k and c["args"][2] == 5
    assert c["seqused_k"] is seqused and c["max_seqlen_k"] == 9 and c["softmax_scale"] == 0.5 and c["causal"]

    # vLLM's FlashAttention backend: k/v are the paged cache, no cu_seqlens_k, out given.
    kc, vc = torch.zeros(6, 16, 2, 16, dtype=bf16), torch.zeros(6, 16, 2, 16, dtype=bf16)
    table = torch.tensor([[0, 1], [2, 3]], dtype=torch.int32)
    out = torch.empty_like(q)
    r = fai.flash_attn_varlen_func(q=q, k=kc, v=vc, out=out, cu_seqlens_q=cu_q, max_seqlen_q=5, seqused_k=seqused,
                                   max_seqlen_k=9, softmax_scale=0.125, causal=True, alibi_slopes=None,
                                   window_size=(-1, -1), block_table=table, softcap=0, scheduler_metadata=None,
                                   fa_version=3, q_descale=None, k_descale=None, v_descale=None, num_splits=0,
                                   s_aux=None)
    assert not isinstance(r, tuple)
    c = rec["attention_paged"].calls[-1]
    assert c["k"] is kc and c["args"][0] is table and c["args"][1] is seqused
    assert c["cu_seqlens_q"] is cu_q and c["max_seqlen_q"] == 5 and c["out"] is out and c["num_splits"] == 0


@pytest.mark.parametrize("call, match", [
    (lambda q, k, v: fai.flash_attn_func(q, k, v, dropout_p=0.1), r"dropout_p=0.1 is not supported"),
    (lambda q, k, v: fai.flash_attn_func(q, k, v, qv=q), r"qv=<tensor"),
    (lambda q, k, v: fai.flash_attn_func(q, k, v, sm_margin=8), r"sm_margin=8"),
    (lambda q, k, v: fai.flash_attn_func(q, k, v, alibi_slopes=torch.ones(2, 4)), r"alibi_slopes of shape \(2, 4\)"),
    (lambda q, k, v: fai.flash_attn_varlen_func(q[0], k[0], v[0], torch.zeros(2, dtype=torch.int32),
                                                torch.zeros(2, dtype=torch.int32), 4, 8,
                                                seqused_q=torch.zeros(1, dtype=torch.int32)), r"seqused_q=<tensor"),
    (lambda q, k, v: fai.flash_attn_varlen_func(q[0], k[0], v[0], torch.zeros(2, dtype=torch.int32),
                                                torch.zeros(2, dtype=torch.int32), 4, 8, dropout_p=0.5),
     r"flash_attn_varlen_func: dropout_p=0.5"),
    (lambda q, k, v: fai.flash_attn_varlen_func(q[0], k, v, torch.zeros(2, dtype=torch.int32),
                                                torch.zeros(2, dtype=torch.int32), 4,
                                                block_table=torch.zeros(1, 1, dtype=torch.int32)),
     r"cu_seqlens_k with block_table"),
    (lambda q, k, v: fai.flash_attn_with_kvcache(q, k, v, cache_leftpad=torch.zeros(2, dtype=torch.int32)),
     r"cache_leftpad=<tensor"),
    (lambda q, k, v: fai.flash_attn_with_kvcache(q, k, v, cu_seqlens_k_new=torch.zeros(3, dtype=torch.int32)),
     r"cu_seqlens_k_new=<tensor"),
    (lambda q, k, v: fai.flash_attn_with_kvcache(q, k, v, rotary_seqlens=torch.zeros(2, dtype=torch.int32)),
     r"rotary_seqlens=<tensor"),
    (lambda q, k, v: fai.flash_attn_with_kvcache(q, k, v, cache_batch_idx=torch.zeros(2, dtype=torch.int32),
                                                 page_table=torch.zeros(2, 1, dtype=torch.int32)),
     r"cache_batch_idx with a paged cache"),
])
def test_unsupported_arguments_raise_naming_them(rec, call, match):
    q, k, v = qkv()
    with pytest.raises(NotImplementedError, match=match):
        call(q, k, v)
    assert not any(r.calls for r in rec.values()), "refused before anything ran"


def test_backward_is_refused_naming_the_tensor(rec):
    q, k, v = qkv(dtype=torch.float32)
    k.requires_grad_(True)
    with pytest.raises(NotImplementedError, match="flash_attn_func: k requires grad.*forward only"):
        fai.flash_attn_func(q, k, v)
    with torch.no_grad():
        fai.flash_attn_func(q, k, v)
    assert len(rec["attention"].calls) == 1


@pytest.mark.parametrize("call, match", [
    (lambda q, kc, vc, k, v: fai.flash_attn_with_kvcache(q, kc, vc, k, None, cache_seqlens=1), "only k"),
    (lambda q, kc, vc, k, v: fai.flash_attn_with_kvcache(q, kc, vc, k, v), "cache_seqlens is required"),
    (lambda q, kc, vc, k, v: fai.flash_attn_with_kvcache(q, kc, vc, k, v, cache_seqlens=30), "do not fit"),
    (lambda q, kc, vc, k, v: fai.flash_attn_with_kvcache(q, kc, vc, rotary_cos=torch.ones(8, 4),
                                                         rotary_sin=torch.ones(8, 4)), "pass k and v"),
    (lambda q, kc, vc, k, v: fai.flash_attn_with_kvcache(q, kc, vc, k, v, rotary_cos=torch.ones(8, 4),
                                                         cache_seqlens=1), "got only rotary_cos"),
    (lambda q, kc, vc, k, v: fai.flash_attn_with_kvcache(q, kc, vc, k, v, cache_seqlens=torch.zeros(3)),
     r"cache_seqlens has shape \(3,\)"),
    (lambda q, kc, vc, k, v: fai.flash_attn_with_kvcache(q, kc, vc, k, v, cache_seqlens=0,
                                                         page_table=torch.zeros(2, 1, dtype=torch.int32),
                                                         block_table=torch.zeros(2, 1, dtype=torch.int32)),
     "page_table and block_table are the same argument"),
])
def test_kvcache_argument_errors(rec, call, match):
    q, _, _ = qkv(Sq=2)
    kc, vc = torch.zeros(2, 32, 2, 16, dtype=bf16), torch.zeros(2, 32, 2, 16, dtype=bf16)
    k, v = torch.ones(2, 3, 2, 16, dtype=bf16), torch.ones(2, 3, 2, 16, dtype=bf16)
    with pytest.raises(ValueError, match=match):
        call(q, kc, vc, k, v)
    assert not kc.any() and not vc.any(), "the caches are untouched"


def test_kvcache_appends_into_a_contiguous_cache_and_attends_as_one_page_per_row(rec):
    B, S_cache, Hkv, D = 3, 32, 2, 16
    kc, vc = torch.zeros(4, S_cache, Hkv, D, dtype=bf16), torch.zeros(4, S_cache, Hkv, D, dtype=bf16)
    q = torch.randn(B, 2, 4, D).to(bf16)
    k, v = torch.randn(B, 2, Hkv, D).to(bf16), torch.randn(B, 2, Hkv, D).to(bf16)
    seqlens = torch.tensor([0, 5, 30], dtype=torch.int32)
    idx = torch.tensor([3, 0, 1], dtype=torch.int32)
    o, lse = fai.flash_attn_with_kvcache(q, kc, vc, k, v, cache_seqlens=seqlens, cache_batch_idx=idx, causal=True,
                                         return_softmax_lse=True)
    assert o.shape == q.shape and lse.shape == (B, 4, 2)
    for b in range(B):
        row, s = int(idx[b]), int(seqlens[b])
        assert torch.equal(kc[row, s:s + 2], k[b]) and torch.equal(vc[row, s:s + 2], v[b])
    assert not kc[2].any(), "row 2 is no sequence's"
    assert int((kc != 0).any(-1).any(-1).sum()) == 2 * B, "nothing else was written"
    c = rec["attention_paged"].calls[-1]
    assert c["k"] is kc and c["v"] is vc and c["causal"]
    assert torch.equal(c["args"][0], idx.view(B, 1))  # the page table: page = cache row
    assert torch.equal(c["args"][1], seqlens + 2)      # seqused_k: the keys after the append
    # Without cache_batch_idx: sequence b is row b; an int cache_seqlens also gives max_seqlen_k.
    fai.flash_attn_with_kvcache(q, kc, vc, k, v, cache_seqlens=7)
    c = rec["attention_paged"].calls[-1]
    assert torch.equal(c["args"][0], torch.arange(B, dtype=torch.int32).view(B, 1))
    assert torch.equal(c["args"][1], torch.full((B,), 9, dtype=torch.int32)) and c["max_seqlen_k"] == 9
    assert torch.equal(kc[1, 7:9], k[1])


def test_kvcache_appends_through_a_page_table(rec):
    page, Hkv, D = 4, 2, 8
    kc, vc = torch.zeros(10, page, Hkv, D), torch.zeros(10, page, Hkv, D)
    table = torch.tensor([[7, 2, 5], [1, 9, 0]], dtype=torch.int32)
    k, v = torch.randn(2, 3, Hkv, D), torch.randn(2, 3, Hkv, D)
    q = torch.randn(2, 3, 4, D)
    seqlens = torch.tensor([3, 8], dtype=torch.int32)
    fai.flash_attn_with_kvcache(q, kc, vc, k, v, cache_seqlens=seqlens, block_table=table, causal=True)
    for b in range(2):
        for i in range(3):
            p = int(seqlens[b]) + i
            blk, off = int(table[b, p // page]), p % page
            assert torch.equal(kc[blk, off], k[b, i]) and torch.equal(vc[blk, off], v[b, i]), (b, i)
    c = rec["attention_paged"].calls[-1]
    assert c["args"][0] is table and torch.equal(c["args"][1], seqlens + 3)
    # page_table (FlashAttention-3's name) is the same argument; decode without k keeps the cache.
    before = kc.clone()
    fai.flash_attn_with_kvcache(q[:, :1], kc, vc, cache_seqlens=seqlens, page_table=table)
    assert torch.equal(kc, before) and torch.equal(rec["attention_paged"].calls[-1]["args"][1], seqlens)


def test_kvcache_with_a_cache_length_not_a_multiple_of_8_uses_varlen_rows(rec):
    kc, vc = torch.zeros(2, 13, 2, 16, dtype=bf16), torch.zeros(2, 13, 2, 16, dtype=bf16)
    q = torch.randn(2, 1, 4, 16).to(bf16)
    o, lse = fai.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=torch.tensor([4, 13], dtype=torch.int32),
                                         return_softmax_lse=True)
    assert o.shape == q.shape and lse.shape == (2, 4, 1)
    c = rec["attention_varlen"].calls[-1]
    assert c["q"].shape == (2, 4, 16) and c["k"].shape == (26, 2, 16)
    assert torch.equal(c["args"][0], torch.tensor([0, 1, 2], dtype=torch.int32))   # cu_seqlens_q
    assert torch.equal(c["args"][1], torch.tensor([0, 13, 26], dtype=torch.int32))  # cu_seqlens_k: one row each
    assert torch.equal(c["seqused_k"], torch.tensor([4, 13], dtype=torch.int32))
    assert c["max_seqlen_k"] == 13  # the cache row bounds the keys: the hint that splits them


# ---- rotary embedding ------------------------------------------------------------------------------

def rotary_ref(x, cos, sin, positions, interleaved):
    """Float64: pairs of features as complex numbers times e^{i angle}."""
    x = x.double()
    rd = 2 * cos.shape[1]
    c, s = cos.double()[positions], sin.double()[positions]  # (B, S, rd / 2)
    if interleaved:
        pairs = x[..., :rd].reshape(*x.shape[:-1], rd // 2, 2)
        z = torch.complex(pairs[..., 0], pairs[..., 1])
    else:
        z = torch.complex(x[..., :rd // 2], x[..., rd // 2:rd])
    z = z * torch.complex(c, s).unsqueeze(2)
    if interleaved:
        rot = torch.stack((z.real, z.imag), dim=-1).flatten(-2)
    else:
        rot = torch.cat((z.real, z.imag), dim=-1)
    return torch.cat((rot, x[..., rd:]), dim=-1)


def cos_sin(seqlen_ro, rd, base=10000.0):
    inv = 1.0 / base ** (torch.arange(0, rd, 2, dtype=torch.float64) / rd)
    ang = torch.outer(torch.arange(seqlen_ro, dtype=torch.float64), inv)
    return ang.cos().float(), ang.sin().float()


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("rd", [16, 32])
def test_apply_rotary_emb_against_float64(interleaved, rd):
    x = torch.randn(2, 5, 3, 32)
    cos, sin = cos_sin(20, rd)
    offsets = torch.tensor([0, 11], dtype=torch.int32)
    got = fai.apply_rotary_emb(x, cos, sin, interleaved=interleaved, seqlen_offsets=offsets)
    pos = offsets.long().view(2, 1) + torch.arange(5).view(1, 5)
    ref = rotary_ref(x, cos, sin, pos, interleaved)
    assert (got.double() - ref).abs().max() < 1e-5
    if rd < 32:
        assert torch.equal(got[..., rd:], x[..., rd:]), "features past rotary_dim pass through"
    # Rotation keeps each pair's norm, and position 0 is the identity.
    assert torch.allclose(fai.apply_rotary_emb(x, cos, sin, interleaved)[:, :1], x[:, :1])
    y = x.clone()
    assert fai.apply_rotary_emb(y, cos, sin, interleaved, True, 3) is y
    assert torch.allclose(y, fai.apply_rotary_emb(x, cos, sin, interleaved, seqlen_offsets=3))


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_kvcache_rotates_q_and_the_new_k_at_the_cache_positions(rec, interleaved, causal):
    B, Hkv, D = 2, 2, 32
    kc, vc = torch.zeros(B, 16, Hkv, D), torch.zeros(B, 16, Hkv, D)
    q, k, v = torch.randn(B, 3, 4, D), torch.randn(B, 3, Hkv, D), torch.randn(B, 3, Hkv, D)
    cos, sin = cos_sin(16, 16)
    seqlens = torch.tensor([2, 9], dtype=torch.int32)
    fai.flash_attn_with_kvcache(q, kc, vc, k, v, rotary_cos=cos, rotary_sin=sin, cache_seqlens=seqlens, causal=causal,
                                rotary_interleaved=interleaved)
    pos = seqlens.long().view(B, 1) + torch.arange(3).view(1, 3)
    k_ref = rotary_ref(k, cos, sin, pos, interleaved)
    # FlashAttention: q's tokens at their own positions when causal (or local), else all at cache_seqlens.
    q_pos = pos if causal else seqlens.long().view(B, 1).expand(B, 3)
    q_ref = rotary_ref(q, cos, sin, q_pos, interleaved)
    for b in range(B):
        s = int(seqlens[b])
        assert (kc[b, s:s + 3].double() - k_ref[b]).abs().max() < 1e-5
        assert torch.equal(vc[b, s:s + 3], v[b]), "v is not rotated"
    assert (rec["attention_paged"].calls[-1]["q"].double() - q_ref).abs().max() < 1e-5


# ---- merge_state ------------------------------------------------------------------------------------

def test_merge_state_gives_attention_over_the_union_of_the_keys():
    # Attention over keys [0, 40) and [40, 100) separately, merged, against the float64 attention over all.
    q, k, v = qkv(B=1, Sq=6, Sk=100, Hq=4, Hkv=4, D=16, dtype=torch.float32, seed=3)
    o_a, lse_a = attention_ref(q, k[:, :40], v[:, :40])
    o_b, lse_b = attention_ref(q, k[:, 40:], v[:, 40:])
    o, lse = attention_ref(q, k, v)
    # fa4jit's layout: out (B, Sq, H, D) with lse (B, H, Sq): transpose lse to out's (B, Sq, H).
    vm, sm = fa4jit.merge_state(o_a.float(), lse_a.float().transpose(1, 2), o_b.float(), lse_b.float().transpose(1, 2))
    assert vm.dtype == torch.float32 and sm.dtype == torch.float32 and sm.shape == (1, 6, 4)
    assert (vm.double() - o).abs().max() < 1e-5
    assert (sm.double() - lse.transpose(1, 2)).abs().max() < 1e-5


def test_merge_state_matches_float64_with_empty_sides_and_keeps_v_dtype():
    g = torch.Generator().manual_seed(1)
    v_a, v_b = torch.randn(7, 3, 8, generator=g).to(bf16), torch.randn(7, 3, 8, generator=g).to(bf16)
    s_a, s_b = torch.randn(7, 3, generator=g) * 4, torch.randn(7, 3, generator=g) * 4
    s_a[0, 0] = float("-inf")                             # a has no key: b's result
    s_b[1, 1] = float("-inf")                             # b has no key: a's result
    s_a[2, 2] = s_b[2, 2] = float("-inf")                 # neither: 0 and -inf
    v, s = fai.merge_state(v_a, s_a, v_b, s_b)
    assert v.dtype == bf16 and s.dtype == torch.float32
    sa, sb = s_a.double(), s_b.double()
    s_ref = torch.logaddexp(sa, sb)
    wa = torch.where(torch.isneginf(s_ref), torch.zeros_like(sa), torch.exp(sa - s_ref))
    wb = torch.where(torch.isneginf(s_ref), torch.zeros_like(sb), torch.exp(sb - s_ref))
    v_ref = v_a.double() * wa.unsqueeze(-1) + v_b.double() * wb.unsqueeze(-1)
    fin = torch.isfinite(s_ref)
    assert torch.equal(torch.isfinite(s), fin) and (s.double()[fin] - s_ref[fin]).abs().max() < 1e-5
    assert (v.double() - v_ref).abs().max() < 2e-2  # bf16 output rounding
    assert torch.equal(v[0, 0], v_b[0, 0]) and torch.equal(v[1, 1], v_a[1, 1]) and not v[2, 2].any()
    assert s[2, 2] == float("-inf")


def test_merge_state_errors_and_docstring_names_the_log_base():
    v = torch.zeros(4, 2, 8)
    with pytest.raises(ValueError, match="must both be v's shape without headdim"):
        fai.merge_state(v, torch.zeros(4, 2), v, torch.zeros(2, 4))
    with pytest.raises(TypeError, match="s_b: expected a torch.Tensor"):
        fai.merge_state(v, torch.zeros(4, 2), v, 0.0)
    doc = fai.merge_state.__doc__
    assert "base e" in doc and "base 2" in doc and "ln(2)" in doc
    assert math.isclose(float(fai.merge_state(v[:1], torch.tensor([[0.0, 0.0]]), v[:1],
                                              torch.tensor([[0.0, 0.0]]))[1][0, 0]), math.log(2.0), rel_tol=1e-6)
