"""fa4jit from PyTorch on a GPU: every variant against the float64 reference (tests/python/reference.py)
and against torch's scaled_dot_product_attention; torch.compile, CUDA graphs, recompiles, errors.
Skips without a CUDA GPU (`tools/gpu.sh python` runs it on the lent machine)."""
import itertools
import json

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (the torch-layer tests need it)")
import torch.nn.functional as F  # noqa: E402

import fa4jit  # noqa: E402
from reference import REL_L2, assert_close, attention_ref, rel_l2  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="no CUDA GPU visible to torch (run tools/gpu.sh python on a GPU machine)")

DTYPES = [torch.bfloat16, torch.float16]


def rnd(*shape, dtype=torch.bfloat16, seed=None, scale=1.0):
    g = torch.Generator(device="cuda")
    g.manual_seed(seed if seed is not None else hash(shape) % 10000)
    return (torch.randn(*shape, generator=g, device="cuda", dtype=torch.float32) * scale).to(dtype)


def qkv(B, Sq, Sk, Hq, Hkv, D, dtype, seed=0):
    return (rnd(B, Sq, Hq, D, dtype=dtype, seed=seed), rnd(B, Sk, Hkv, D, dtype=dtype, seed=seed + 1),
            rnd(B, Sk, Hkv, D, dtype=dtype, seed=seed + 2))


def sdpa(q, k, v, causal=False):
    """torch's SDPA in (B, S, H, D) layout (GQA by repeating K/V heads); causal bottom-right only for Sq == Sk."""
    g = q.shape[2] // k.shape[2]
    k, v = k.repeat_interleave(g, dim=2), v.repeat_interleave(g, dim=2)
    o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal)
    return o.transpose(1, 2)


# ---- masks, heads, dtypes, layouts --------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("B,Sq,Sk,Hq,Hkv", [(2, 256, 256, 8, 8), (1, 197, 333, 8, 2), (3, 1, 512, 16, 2),
                                             (1, 1000, 1000, 4, 1)])
def test_against_reference_and_sdpa(dtype, D, causal, B, Sq, Sk, Hq, Hkv):
    q, k, v = qkv(B, Sq, Sk, Hq, Hkv, D, dtype)
    o, lse = fa4jit.attention(q, k, v, causal=causal, return_lse=True)
    torch.cuda.synchronize()
    ref, ref_lse = attention_ref(q, k, v, causal=causal)
    assert_close(o, ref, dtype, lse, ref_lse, what="vs float64")
    if Sq == Sk or not causal:  # SDPA's causal is top-left aligned
        s = sdpa(q, k, v, causal)
        assert rel_l2(o, s) <= 2 * REL_L2[dtype], "vs SDPA"


@pytest.mark.parametrize("dtype", DTYPES)
def test_bhsd_layout_without_copies(dtype):
    B, H, S, D = 2, 8, 300, 128
    qb, kb, vb = (rnd(B, H, S, D, dtype=dtype, seed=i) for i in range(3))
    ob = fa4jit.attention(qb, kb, vb, causal=True, layout="bhsd")
    assert ob.shape == (B, H, S, D) and ob.is_contiguous()
    ref = F.scaled_dot_product_attention(qb, kb, vb, is_causal=True)
    assert rel_l2(ob, ref) <= 2 * REL_L2[dtype]
    # A strided view (a slice of a fused qkv projection) goes in as is.
    qkv_ = rnd(B, S, 3, H, D, dtype=dtype, seed=7)
    q, k, v = qkv_.unbind(2)
    assert not q.is_contiguous()
    o = fa4jit.attention(q, k, v)
    ref, _ = attention_ref(q, k, v)
    assert_close(o, ref, dtype, what="strided qkv views")


def test_small_window_prefill_takes_the_64_row_tile(monkeypatch):
    """gpt-oss's layer shape (head dim 64, group 8, a 128-key window, sinks): on sm_90a the automatic
    choice runs the 64-row tile (fa4jit_choose_kernel2, docs/PERF.md run 88), dense and varlen, and a
    window of 1024 keys the default tile; each matches the float64 reference."""
    from fa4jit import ops
    keys = []
    get = ops._get_kernel
    monkeypatch.setattr(ops, "_get_kernel", lambda key: keys.append(key) or get(key))
    sm90a = ops._arch(torch.cuda.current_device()) == "sm_90a"
    q, k, v = qkv(2, 700, 700, 16, 2, 64, torch.bfloat16, seed=17)
    sinks = torch.randn(16, device="cuda")
    for left, bm in ((127, 64), (1023, 0)):
        keys.clear()
        o, lse = fa4jit.attention(q, k, v, causal=True, window=(left, 0), sinks=sinks, return_lse=True)
        ref, ref_lse = attention_ref(q, k, v, causal=True, window=(left, 0), sinks=sinks)
        assert_close(o, ref, torch.bfloat16, lse, ref_lse, what=f"window {left}")
        if keys:  # a kernel this process had not asked for yet
            assert keys[-1].bm == (bm if sm90a else 0), keys[-1]
    lq = [700, 300]
    qv, kv_, vv, cu_q, cu_k, off_q, off_k = packed_batch(lq, lq, 16, 2, 64, seed=18)
    o = fa4jit.attention_varlen(qv, kv_, vv, cu_q, cu_k, 700, 700, causal=True, window=(127, 0), pack_gqa=False)
    for b in range(2):
        qs = slice(off_q[b], off_q[b + 1])
        ref, _ = attention_ref(qv[qs][None], kv_[qs][None], vv[qs][None], causal=True, window=(127, 0))
        assert_close(o[qs][None], ref, torch.bfloat16, what=f"varlen window 127 seq {b}")


def test_out_and_lse():
    q, k, v = qkv(2, 128, 256, 8, 4, 128, torch.bfloat16)
    out = torch.full_like(q, float("nan"))
    r, lse = fa4jit.attention(q, k, v, causal=True, out=out, return_lse=True)
    assert r is out
    ref, ref_lse = attention_ref(q, k, v, causal=True)
    assert_close(out, ref, torch.bfloat16, lse, ref_lse, what="out=")
    # bhsd out=
    outb = torch.empty(2, 8, 128, 128, dtype=torch.bfloat16, device="cuda")
    fa4jit.attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=True, out=outb, layout="bhsd")
    assert_close(outb.transpose(1, 2), ref, torch.bfloat16, what="bhsd out=")


@pytest.mark.parametrize("window,causal", [((64, 32), False), ((100, None), True), ((0, 0), False), ((None, 16), False)])
def test_sliding_window(window, causal):
    q, k, v = qkv(2, 300, 400, 8, 2, 128, torch.bfloat16, seed=3)
    o, lse = fa4jit.attention(q, k, v, causal=causal, window=window, return_lse=True)
    w = (window[0], 0 if causal else window[1])
    ref, ref_lse = attention_ref(q, k, v, window=w)
    assert_close(o, ref, torch.bfloat16, lse, ref_lse, what=f"window {window} causal {causal}")


@pytest.mark.parametrize("causal", [False, True])
def test_chunked(causal):
    q, k, v = qkv(1, 512, 512, 8, 8, 64, torch.bfloat16, seed=4)
    o = fa4jit.attention(q, k, v, causal=causal, chunk_size=96)
    ref, _ = attention_ref(q, k, v, causal=causal, chunk=96)
    assert_close(o, ref, torch.bfloat16, what="chunked")


# ---- score-mods, snippets, aux, sinks -----------------------------------------------------------

def test_softcap_and_alibi():
    q, k, v = qkv(2, 200, 300, 8, 2, 128, torch.bfloat16, seed=5)
    o = fa4jit.attention(q, k, v, causal=True, softcap=5.0)
    ref, _ = attention_ref(q, k, v, causal=True, softcap=5.0)
    assert_close(o, ref, torch.bfloat16, what="softcap")
    slopes = torch.tensor([2 ** (-(i + 1)) for i in range(8)], device="cuda")
    o = fa4jit.attention(q, k, v, causal=True, alibi_slopes=slopes)
    ref, _ = attention_ref(q, k, v, causal=True, alibi=slopes)
    assert_close(o, ref, torch.bfloat16, what="alibi slopes")
    # score_mod="alibi": the standard slopes 2^(-8(h+1)/H) for a power-of-two H
    o = fa4jit.attention(q, k, v, causal=True, score_mod="alibi")
    std = torch.tensor([2 ** (-8 * (i + 1) / 8) for i in range(8)], device="cuda")
    ref, _ = attention_ref(q, k, v, causal=True, alibi=std)
    assert_close(o, ref, torch.bfloat16, what="alibi standard")


def test_issue_snippets_with_aux_lists():
    # The issue's calls exactly: a list of aux tensors, `aux[0][h]` typed, `doc` bound to the list's tensor.
    B, S, H, D = 2, 384, 8, 128
    q, k, v = qkv(B, S, S, H, H, D, torch.bfloat16, seed=6)
    bias = torch.linspace(-0.05, 0.05, H, device="cuda")
    o = fa4jit.attention(q, k, v, score_mod="return score + aux[0][h] * (kv_idx - q_idx);", aux=[bias])
    ref, _ = attention_ref(q, k, v, score_fn=lambda s, b, h, qi, ki: s + bias.double().view(1, H, 1, 1) * (ki - qi))
    assert_close(o, ref, torch.bfloat16, what="score_mod aux[0][h]")
    doc = (torch.arange(S, device="cuda") // 100).to(torch.int32)
    o = fa4jit.attention(q, k, v, mask_mod="return doc[q_idx] == doc[kv_idx];", aux=[doc])
    ref, _ = attention_ref(q, k, v, mask_fn=lambda b, h, qi, ki: doc[qi.expand(1, 1, S, S)] == doc[ki.expand(1, 1, S, S)])
    assert_close(o, ref, torch.bfloat16, what="mask_mod doc")


def test_named_aux_dict_scalars_and_causal():
    B, S, H, D = 1, 300, 4, 64
    q, k, v = qkv(B, S, S, H, H, D, torch.float16, seed=8)
    doc = (torch.arange(S, device="cuda") // 77).long()
    w = torch.rand(H, device="cuda")
    o = fa4jit.attention(q, k, v, causal=True, mask_mod="return doc[q_idx] == doc[kv_idx];",
                         score_mod="return score * w[h] + scalars[0];", aux={"doc": doc, "w": w}, scalars=[0.25])
    ref, _ = attention_ref(q, k, v, causal=True, score_fn=lambda s, b, h, qi, ki: s * w.double().view(1, H, 1, 1) + 0.25,
                           mask_fn=lambda b, h, qi, ki: doc[qi.expand(1, 1, S, S)] == doc[ki.expand(1, 1, S, S)])
    assert_close(o, ref, torch.float16, what="named aux")


@pytest.mark.parametrize("dtype", DTYPES)
def test_sinks(dtype):
    q, k, v = qkv(2, 100, 260, 8, 2, 64, dtype, seed=9)
    sinks = torch.randn(8, device="cuda")
    o, lse = fa4jit.attention(q, k, v, causal=True, sinks=sinks, window=(64, 0), return_lse=True)
    ref, ref_lse = attention_ref(q, k, v, causal=True, window=(64, 0), sinks=sinks)
    assert_close(o, ref, dtype, lse, ref_lse, what="sinks + window")
    o = fa4jit.attention(q, k, v, sinks=sinks.to(dtype))  # any float dtype is converted
    ref, _ = attention_ref(q, k, v, sinks=sinks.to(dtype).float())
    assert_close(o, ref, dtype, what="sinks dtype")


# ---- varlen, paged, splits, packed GQA ----------------------------------------------------------

def packed_batch(lq, lk, Hq, Hkv, D, seed):
    """Random packed varlen q, k, v of these sequence lengths, their cu_seqlens on the device and offsets."""
    q = rnd(sum(lq), Hq, D, seed=seed)
    k, v = rnd(sum(lk), Hkv, D, seed=seed + 1), rnd(sum(lk), Hkv, D, seed=seed + 2)
    off_q, off_k = [0] + list(itertools.accumulate(lq)), [0] + list(itertools.accumulate(lk))
    cu_q = torch.tensor(off_q, dtype=torch.int32, device="cuda")
    cu_k = torch.tensor(off_k, dtype=torch.int32, device="cuda")
    return q, k, v, cu_q, cu_k, off_q, off_k


def test_varlen_with_empty_sequence():
    lq, lk = [5, 0, 130, 64], [300, 17, 130, 200]
    Hq, Hkv, D = 8, 2, 128
    q, k, v, cu_q, cu_k, off_q, off_k = packed_batch(lq, lk, Hq, Hkv, D, seed=10)
    o, lse = fa4jit.attention_varlen(q, k, v, cu_q, cu_k, max(lq), max(lk), causal=True, return_lse=True)
    assert o.shape == q.shape and lse.shape == (Hq, sum(lq))
    for b in range(4):
        if lq[b] == 0:
            continue
        qs, ks = slice(off_q[b], off_q[b + 1]), slice(off_k[b], off_k[b + 1])
        ref, ref_lse = attention_ref(q[qs][None], k[ks][None], v[ks][None], causal=True)
        assert_close(o[qs][None], ref, torch.bfloat16, lse[:, qs][None], ref_lse, what=f"varlen seq {b}")


def test_varlen_max_seqlen_k_hint_only_picks_the_schedule():
    # Causal d96 over 4 sequences of at most 2048 keys, 4300 in all: without max_seqlen_k the batch is
    # bounded by its total; with it, it runs the equal-length schedule. A hint below the real longest
    # (1000 < 2048) picks it too and must not change the result.
    lq = lk = [2048, 1000, 1, 1251]
    q, k, v, cu_q, cu_k, off_q, off_k = packed_batch(lq, lk, 8, 2, 96, seed=20)
    refs = []
    for b in range(len(lq)):
        qs, ks = slice(off_q[b], off_q[b + 1]), slice(off_k[b], off_k[b + 1])
        refs.append((qs, attention_ref(q[qs][None], k[ks][None], v[ks][None], causal=True)))
    for hint in (None, max(lk), 1000):  # unpacked: the persistent walk (2 KV heads would pack automatically)
        o, lse = fa4jit.attention_varlen(q, k, v, cu_q, cu_k, max(lq), hint, causal=True, return_lse=True,
                                         pack_gqa=False)
        for b, (qs, (ref, ref_lse)) in enumerate(refs):
            assert_close(o[qs][None], ref, torch.bfloat16, lse[:, qs][None], ref_lse,
                         what=f"max_seqlen_k {hint} seq {b}")


def test_continuous_batching_step_packs_and_matches_reference(monkeypatch):
    """One varlen call holding 36 decode rows, 2 speculative rows (Sq 4) and 2 prefill chunks (300 queries
    over 500 keys), group 7: the automatic choice packs it (mean query length 16), and packed, unpacked and
    split-KV all match the float64 reference per sequence (bottom-right causal). 40 sequences: sm90a's
    varlen grid walk scans cu_seqlens_q in two warp-sized chunks."""
    from fa4jit import ops
    keys = []
    get = ops._get_kernel
    monkeypatch.setattr(ops, "_get_kernel", lambda key: keys.append(key) or get(key))
    lq = [1] * 36 + [4, 4, 300, 300]
    lk = [60 + (i * 97) % 900 for i in range(38)] + [500, 500]
    q, k, v, cu_q, cu_k, off_q, off_k = packed_batch(lq, lk, 28, 4, 128, seed=31)
    refs = []
    for b in range(len(lq)):
        qs, ks = slice(off_q[b], off_q[b + 1]), slice(off_k[b], off_k[b + 1])
        refs.append((qs, attention_ref(q[qs][None], k[ks][None], v[ks][None], causal=True)))
    for pack, splits in ((None, 0), (False, 0), (None, 3)):
        keys.clear()
        o, lse = fa4jit.attention_varlen(q, k, v, cu_q, cu_k, max(lq), max(lk), causal=True, return_lse=True,
                                         pack_gqa=pack, num_splits=splits)
        if keys:
            assert keys[-1].pack == (pack is None), keys[-1]
        for b, (qs, (ref, ref_lse)) in enumerate(refs):
            assert_close(o[qs][None], ref, torch.bfloat16, lse[:, qs][None], ref_lse,
                         what=f"pack {pack} splits {splits} seq {b}")


@pytest.mark.parametrize("page_size", [16, 64, 256])
def test_paged_decode_and_splits(page_size):
    B, Hq, Hkv, D = 3, 32, 8, 128
    used = torch.tensor([1000, 37, 513], dtype=torch.int32, device="cuda")
    max_pages = (1000 + page_size - 1) // page_size
    num_pages = B * max_pages + 5
    kc, vc = rnd(num_pages, page_size, Hkv, D, seed=13), rnd(num_pages, page_size, Hkv, D, seed=14)
    perm = torch.randperm(num_pages, device="cuda")[:B * max_pages].view(B, max_pages).to(torch.int32)
    q = rnd(B, 1, Hq, D, seed=15)
    # Contiguous copies of each sequence's keys for the reference.
    k = kc[perm.long()].reshape(B, max_pages * page_size, Hkv, D)
    v = vc[perm.long()].reshape(B, max_pages * page_size, Hkv, D)
    ref, ref_lse = attention_ref(q, k, v, causal=True, seqused_k=used)
    for splits in (0, 1, 3):
        for pack in (None, False, True):
            o, lse = fa4jit.attention_paged(q, kc, vc, perm, used, causal=True, num_splits=splits, pack_gqa=pack,
                                            return_lse=True)
            assert_close(o, ref, torch.bfloat16, lse, ref_lse, what=f"paged {page_size} splits {splits} pack {pack}")


def test_paged_varlen_queries():
    Hq, Hkv, D, page = 8, 8, 64, 64
    lq, lk = [3, 40, 1], [200, 40, 129]
    max_pages = 4
    kc, vc = rnd(16, page, Hkv, D, seed=16), rnd(16, page, Hkv, D, seed=17)
    table = torch.arange(12, dtype=torch.int32, device="cuda").view(3, 4).flip(1).contiguous()
    used = torch.tensor(lk, dtype=torch.int32, device="cuda")
    q = rnd(sum(lq), Hq, D, seed=18)
    cu_q = torch.tensor([0, 3, 43, 44], dtype=torch.int32, device="cuda")
    o = fa4jit.attention_paged(q, kc, vc, table, used, causal=True, cu_seqlens_q=cu_q, max_seqlen_q=40)
    k = kc[table.long()].reshape(3, max_pages * page, Hkv, D)
    v = vc[table.long()].reshape(3, max_pages * page, Hkv, D)
    for b, (lo, hi) in enumerate(((0, 3), (3, 43), (43, 44))):
        qs = slice(lo, hi)
        ref, _ = attention_ref(q[qs][None], k[b:b + 1], v[b:b + 1], causal=True, seqused_k=used[b:b + 1])
        assert_close(o[qs][None], ref, torch.bfloat16, what=f"paged varlen seq {b}")


def test_split_kv_decode_matches_unsplit():
    q, k, v = qkv(2, 1, 8192, 32, 8, 128, torch.bfloat16, seed=19)
    ref, ref_lse = attention_ref(q, k, v, causal=True)
    for splits in (0, 1, 4, 16):
        o, lse = fa4jit.attention(q, k, v, causal=True, num_splits=splits, return_lse=True)
        assert_close(o, ref, torch.bfloat16, lse, ref_lse, what=f"splits {splits}")


# ---- V narrower than Q and K (DeepSeek-V3 / Kimi-K2 prefill: 192 / 128) ----------------------------

@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("B,Sq,Sk,Hq,Hkv", [(2, 300, 300, 16, 16), (1, 197, 1000, 8, 2), (3, 1, 700, 16, 4)])
def test_value_head_dim_narrower_than_query(causal, B, Sq, Sk, Hq, Hkv):
    q, k = rnd(B, Sq, Hq, 192, seed=40), rnd(B, Sk, Hkv, 192, seed=41)
    v = rnd(B, Sk, Hkv, 128, seed=42)
    scale = 0.1352  # DeepSeek's is not 1/sqrt(192): the caller's scale must be used
    o, lse = fa4jit.attention(q, k, v, causal=causal, softmax_scale=scale, return_lse=True)
    assert o.shape == (B, Sq, Hq, 128)
    ref, ref_lse = attention_ref(q, k, v, causal=causal, scale=scale)
    assert_close(o, ref, torch.bfloat16, lse, ref_lse, what="d192 / v128")
    # out= of V's width (poisoned), the bhsd layout, and split-KV with its combine.
    out = torch.full((B, Sq, Hq, 128), float("nan"), dtype=torch.bfloat16, device="cuda")
    assert fa4jit.attention(q, k, v, causal=causal, softmax_scale=scale, out=out) is out
    assert_close(out, ref, torch.bfloat16, what="d192 / v128 out=")
    ob = fa4jit.attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=causal, softmax_scale=scale,
                          layout="bhsd")
    assert ob.shape == (B, Hq, Sq, 128)
    assert_close(ob.transpose(1, 2), ref, torch.bfloat16, what="d192 / v128 bhsd")
    o3 = fa4jit.attention(q, k, v, causal=causal, softmax_scale=scale, num_splits=3)
    assert_close(o3, ref, torch.bfloat16, what="d192 / v128 splits 3")
    with pytest.raises(fa4jit.LaunchError, match="out has shape"):
        fa4jit.attention(q, k, v, causal=causal, out=torch.empty_like(q))


def test_value_head_dim_narrower_varlen_paged_and_masks():
    Hq, Hkv = 16, 4
    lq, lk = [5, 300, 1], [400, 300, 1000]
    q = rnd(sum(lq), Hq, 192, seed=43)
    k, v = rnd(sum(lk), Hkv, 192, seed=44), rnd(sum(lk), Hkv, 128, seed=45)
    cu_q = torch.tensor([0, 5, 305, 306], dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0, 400, 700, 1700], dtype=torch.int32, device="cuda")
    o = fa4jit.attention_varlen(q, k, v, cu_q, cu_k, 300, 1000, causal=True, window=(128, 0), softcap=20.0)
    assert o.shape == (306, Hq, 128)
    for b in range(3):
        qs, ks = slice(int(cu_q[b]), int(cu_q[b + 1])), slice(int(cu_k[b]), int(cu_k[b + 1]))
        ref, _ = attention_ref(q[qs][None], k[ks][None], v[ks][None], causal=True, window=(128, 0), softcap=20.0)
        assert_close(o[qs][None], ref, torch.bfloat16, what=f"varlen d192 / v128 seq {b}")
    # Paged decode (page 64 and 16), packed and unpacked, split.
    B = 3
    used = torch.tensor([1000, 64, 333], dtype=torch.int32, device="cuda")
    for page in (16, 64):
        max_pages = (1000 + page - 1) // page
        n = B * max_pages + 3
        kc, vc = rnd(n, page, Hkv, 192, seed=46), rnd(n, page, Hkv, 128, seed=47)
        table = torch.randperm(n, device="cuda")[:B * max_pages].view(B, max_pages).to(torch.int32)
        qd = rnd(B, 2, Hq, 192, seed=48)
        kr = kc[table.long()].reshape(B, max_pages * page, Hkv, 192)
        vr = vc[table.long()].reshape(B, max_pages * page, Hkv, 128)
        ref, ref_lse = attention_ref(qd, kr, vr, causal=True, seqused_k=used)
        for pack, splits in ((None, 0), (False, 1), (True, 3)):
            o, lse = fa4jit.attention_paged(qd, kc, vc, table, used, causal=True, pack_gqa=pack, num_splits=splits,
                                            return_lse=True)
            assert_close(o, ref, torch.bfloat16, lse, ref_lse, what=f"paged {page} pack {pack} splits {splits}")
    # A snippet mask and score-mod read V's narrower rows like any other.
    qd, kd, vd = rnd(1, 256, Hq, 192, seed=49), rnd(1, 256, Hkv, 192, seed=50), rnd(1, 256, Hkv, 128, seed=51)
    o = fa4jit.attention(qd, kd, vd, mask_mod="return (q_idx ^ kv_idx) % 3 != 1 || kv_idx == 0;",
                         score_mod="return score * 0.5f;")
    ref, _ = attention_ref(qd, kd, vd, score_fn=lambda s, b, h, qi, ki: s * 0.5,
                           mask_fn=lambda b, h, qi, ki: ((qi ^ ki) % 3 != 1) | (ki == 0))
    assert_close(o, ref, torch.bfloat16, what="snippets d192 / v128")


# ---- head dim 512 (sm_90a: O split over two warpgroups) --------------------------------------------

def test_head_dim_512_prefill_decode_paged_and_window():
    Hq, Hkv, D = 8, 2, 512
    q, k, v = rnd(2, 333, Hq, D, seed=60), rnd(2, 333, Hkv, D, seed=61), rnd(2, 333, Hkv, D, seed=62)
    for causal, window in ((False, None), (True, None), (True, (100, 0))):
        o, lse = fa4jit.attention(q, k, v, causal=causal, window=window, return_lse=True)
        ref, ref_lse = attention_ref(q, k, v, causal=causal, window=window)
        assert_close(o, ref, torch.bfloat16, lse, ref_lse, what=f"d512 causal {causal} window {window}")
    # Decode over paged K/V (page 64), packed and unpacked, split.
    B, page = 3, 64
    used = torch.tensor([700, 64, 1], dtype=torch.int32, device="cuda")
    max_pages = (700 + page - 1) // page
    n = B * max_pages + 2
    kc, vc = rnd(n, page, Hkv, D, seed=63), rnd(n, page, Hkv, D, seed=64)
    table = torch.randperm(n, device="cuda")[:B * max_pages].view(B, max_pages).to(torch.int32)
    qd = rnd(B, 1, Hq, D, seed=65)
    kr = kc[table.long()].reshape(B, max_pages * page, Hkv, D)
    vr = vc[table.long()].reshape(B, max_pages * page, Hkv, D)
    ref, ref_lse = attention_ref(qd, kr, vr, causal=True, seqused_k=used)
    for pack, splits in ((None, 0), (False, 1), (True, 3)):
        o, lse = fa4jit.attention_paged(qd, kc, vc, table, used, causal=True, pack_gqa=pack, num_splits=splits,
                                        return_lse=True)
        assert_close(o, ref, torch.bfloat16, lse, ref_lse, what=f"d512 paged pack {pack} splits {splits}")


@pytest.mark.parametrize("Hq,Hkv", [(28, 4), (48, 4)])  # groups 7 (Qwen2.5-7B) and 12: no divisor of 64
@pytest.mark.parametrize("Sq", [1, 5])
def test_decode_packs_any_group(Hq, Hkv, Sq, monkeypatch):
    """Decode with a group that does not divide 64 rows: the automatic choice (pack_gqa=None) packs
    it (issue 53), the packed kernel matches the float64 reference (contiguous, split-KV and
    paged), and so does the unpacked one."""
    from fa4jit import ops
    keys = []
    get = ops._get_kernel
    monkeypatch.setattr(ops, "_get_kernel", lambda key: keys.append(key) or get(key))
    q, k, v = qkv(3, Sq, 2100, Hq, Hkv, 128, torch.bfloat16, seed=53 + Hq + Sq)
    ref, ref_lse = attention_ref(q, k, v, causal=True)
    for pack in (None, True, False):
        for splits in (0, 3):
            keys.clear()
            o, lse = fa4jit.attention(q, k, v, causal=True, num_splits=splits, pack_gqa=pack, return_lse=True)
            assert_close(o, ref, torch.bfloat16, lse, ref_lse, what=f"pack {pack} splits {splits}")
            if keys:  # the kernel key's pack flag (ops._prepare): None packs decode for every group
                assert keys[-1].pack == (pack is not False), keys[-1]
    page, max_pages = 16, (2100 + 15) // 16  # paged: the same keys in randomly placed pages of 16
    kc, vc = rnd(3 * max_pages + 5, page, Hkv, 128, seed=7), rnd(3 * max_pages + 5, page, Hkv, 128, seed=8)
    perm = torch.randperm(3 * max_pages + 5, device="cuda")[:3 * max_pages].view(3, max_pages).to(torch.int32)
    used = torch.tensor([2100, 1, 777], dtype=torch.int32, device="cuda")
    kp = kc[perm.long()].reshape(3, max_pages * page, Hkv, 128)
    vp = vc[perm.long()].reshape(3, max_pages * page, Hkv, 128)
    ref, ref_lse = attention_ref(q, kp, vp, causal=True, seqused_k=used)
    o, lse = fa4jit.attention_paged(q, kc, vc, perm, used, causal=True, return_lse=True)
    assert_close(o, ref, torch.bfloat16, lse, ref_lse, what="paged 16, automatic packing")


# ---- FP8 (float8_e4m3fn inputs, sm_90a) ----------------------------------------------------------

FP8 = getattr(torch, "float8_e4m3fn", None)
needs_fp8 = pytest.mark.skipif(FP8 is None or not torch.cuda.is_available() or
                               torch.cuda.get_device_capability() != (9, 0),
                               reason="FP8 kernels are sm_90a's: needs an sm_90 GPU and torch.float8_e4m3fn")


def fp8_inputs(B, Sq, Sk, Hq, Hkv, D, seed, descale):
    """e4m3 q, k, v (random normal values rounded by torch), float32 (B, Hkv) descale factors in
    [0.5, 2) or None, and the dequantised float64 tensors the reference runs on (stored x descale)."""
    q, k, v = qkv(B, Sq, Sk, Hq, Hkv, D, torch.float32, seed)
    q8, k8, v8 = q.to(FP8), k.to(FP8), v.to(FP8)
    scales = [None] * 3
    deq = []
    g = torch.Generator(device="cuda")
    g.manual_seed(seed + 100)
    for i, t in enumerate((q8, k8, v8)):
        d = t.double()
        if descale:
            scales[i] = torch.rand(B, Hkv, generator=g, device="cuda") * 1.5 + 0.5
            per_head = scales[i].double().repeat_interleave(t.shape[2] // Hkv, dim=1)  # q: a factor per KV head
            d = d * per_head[:, None, :, None]
        deq.append(d)
    return (q8, k8, v8), scales, deq


@needs_fp8
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("descale", [True, False])
@pytest.mark.parametrize("out_dtype", [None, torch.float16])
@pytest.mark.parametrize("B,Sq,Sk,Hq,Hkv", [(2, 256, 256, 8, 8), (1, 197, 333, 8, 2), (3, 1, 512, 16, 4)])
def test_fp8_against_reference_on_dequantised_inputs(D, causal, descale, out_dtype, B, Sq, Sk, Hq, Hkv):
    (q, k, v), (dq, dk, dv), (qd, kd, vd) = fp8_inputs(B, Sq, Sk, Hq, Hkv, D, seed=31, descale=descale)
    out = None if out_dtype is None else torch.full(q.shape, float("nan"), dtype=out_dtype, device="cuda")
    o, lse = fa4jit.attention(q, k, v, causal=causal, return_lse=True, out=out, descale_q=dq, descale_k=dk,
                              descale_v=dv)
    torch.cuda.synchronize()
    assert o.dtype == (out_dtype or torch.bfloat16) and o.shape == q.shape
    if out is not None:
        assert o is out
    ref, ref_lse = attention_ref(qd, kd, vd, causal=causal)
    err = assert_close(o, ref, FP8, lse, ref_lse, what=f"fp8 d{D} causal {causal} descale {descale}")
    print(f"fp8 d{D} causal {causal} descale {descale} out {o.dtype} {(B, Sq, Sk, Hq, Hkv)}: rel L2 {err:.3e}")
    # A second call of the same signature runs the cached plan: same result, descale pointers patched in.
    o2 = fa4jit.attention(q, k, v, causal=causal, out=out, descale_q=dq, descale_k=dk, descale_v=dv)
    torch.cuda.synchronize()
    assert torch.equal(o2, o)


@needs_fp8
def test_fp8_descale_factors_are_applied_per_batch_and_kv_head():
    # The same stored values with and without factors: the result must follow the factors, i.e.
    # match the reference on the scaled inputs and not the one on the raw stored values.
    (q, k, v), _, _ = fp8_inputs(2, 128, 300, 8, 2, 128, seed=32, descale=False)
    f = lambda *x: torch.tensor(x, device="cuda").view(2, 2)  # noqa: E731  (batch, kv head), far from 1
    dq, dk, dv = f(1.5, 0.6, 0.7, 1.8), f(0.5, 1.25, 1.9, 0.8), f(0.5, 1.9, 1.7, 0.6)
    per_q = dq.double().repeat_interleave(4, dim=1)[:, None, :, None]
    ref, _ = attention_ref(q.double() * per_q, k.double() * dk.double()[:, None, :, None],
                           v.double() * dv.double()[:, None, :, None], causal=True)
    raw, _ = attention_ref(q.double(), k.double(), v.double(), causal=True)
    o = fa4jit.attention(q, k, v, causal=True, descale_q=dq, descale_k=dk, descale_v=dv)
    assert rel_l2(o, ref) <= REL_L2[FP8]
    assert rel_l2(o, raw) > 5 * REL_L2[FP8]  # V alone is off by |1 - dv| >= 0.4 per (batch, head)
    swapped = fa4jit.attention(q, k, v, causal=True, descale_q=dq, descale_k=dk, descale_v=dv.flip(0).contiguous())
    assert rel_l2(swapped, ref) > 5 * REL_L2[FP8]  # factors of another batch row


@needs_fp8
def test_fp8_varlen_and_paged():
    lq, lk = [5, 0, 130], [300, 17, 130]
    Hq, Hkv, D = 8, 2, 128
    (q4, k4, v4), scales, (qd, kd, vd) = fp8_inputs(1, sum(lq), sum(lk), Hq, Hkv, D, seed=33, descale=False)
    q, k, v = q4[0], k4[0], v4[0]
    off_q, off_k = [0] + list(itertools.accumulate(lq)), [0] + list(itertools.accumulate(lk))
    cu_q = torch.tensor(off_q, dtype=torch.int32, device="cuda")
    cu_k = torch.tensor(off_k, dtype=torch.int32, device="cuda")
    g = torch.Generator(device="cuda")
    g.manual_seed(34)
    dq, dk, dv = (torch.rand(3, Hkv, generator=g, device="cuda") * 1.5 + 0.5 for _ in range(3))
    o = fa4jit.attention_varlen(q, k, v, cu_q, cu_k, max(lq), max(lk), causal=True, descale_q=dq, descale_k=dk,
                                descale_v=dv)
    assert o.dtype == torch.bfloat16 and o.shape == q.shape
    for b in range(3):
        if lq[b] == 0:
            continue
        qs, ks = slice(off_q[b], off_q[b + 1]), slice(off_k[b], off_k[b + 1])
        scale = lambda t, d: t.double() * d[b].double().repeat_interleave(t.shape[1] // Hkv)[None, :, None]  # noqa: E731
        ref, _ = attention_ref(scale(q[qs], dq)[None], scale(k[ks], dk)[None], scale(v[ks], dv)[None], causal=True)
        assert_close(o[qs][None], ref, FP8, what=f"fp8 varlen seq {b}")
    # Paged K/V (pages of 64 in random order), decode with split-KV.
    B, page, used_k = 3, 64, [1000, 37, 513]
    max_pages = (1000 + page - 1) // page
    num_pages = B * max_pages + 5
    kc = rnd(num_pages, page, Hkv, D, dtype=torch.float32, seed=35).to(FP8)
    vc = rnd(num_pages, page, Hkv, D, dtype=torch.float32, seed=36).to(FP8)
    table = torch.randperm(num_pages, device="cuda")[:B * max_pages].view(B, max_pages).to(torch.int32)
    used = torch.tensor(used_k, dtype=torch.int32, device="cuda")
    qp = rnd(B, 1, Hq, D, dtype=torch.float32, seed=37).to(FP8)
    dq, dk, dv = (torch.rand(B, Hkv, generator=g, device="cuda") * 1.5 + 0.5 for _ in range(3))
    k = kc[table.long()].reshape(B, max_pages * page, Hkv, D).double() * dk.double()[:, None, :, None]
    v = vc[table.long()].reshape(B, max_pages * page, Hkv, D).double() * dv.double()[:, None, :, None]
    qr = qp.double() * dq.double().repeat_interleave(Hq // Hkv, dim=1)[:, None, :, None]
    ref, ref_lse = attention_ref(qr, k, v, causal=True, seqused_k=used)
    for splits in (0, 3):
        o, lse = fa4jit.attention_paged(qp, kc, vc, table, used, causal=True, num_splits=splits, return_lse=True,
                                        descale_q=dq, descale_k=dk, descale_v=dv)
        assert_close(o, ref, FP8, lse, ref_lse, what=f"fp8 paged splits {splits}")


# ---- FP8 KV cache (bf16/fp16 q, float8_e4m3fn k and v: "kv_dtype": "e4m3"; every backend) ----------
# The reference runs on the dequantised K and V (stored e4m3 value x descale_k/v[b, h_kv], exact in
# float64) and the 16-bit q; e4m3 -> bf16/fp16 is exact, so the 16-bit tolerances apply (REL_L2 of
# q's dtype), as in tests/gpu_kv_fp8_test.cpp.

needs_fp8_tensors = pytest.mark.skipif(FP8 is None, reason="this torch has no float8_e4m3fn")


def kv_scales(B, Hkv, seed, descale):
    """float32 (B, Hkv) descale_k, descale_v in [0.5, 2), or (None, None)."""
    if not descale:
        return None, None
    g = torch.Generator(device="cuda")
    g.manual_seed(seed + 100)
    return tuple(torch.rand(B, Hkv, generator=g, device="cuda") * 1.5 + 0.5 for _ in range(2))


def dequant(t8, d):
    """e4m3 (B, S, Hkv, D) x d[b, h] (None: 1), in float64."""
    return t8.double() if d is None else t8.double() * d.double()[:, None, :, None]


def kv_fp8_inputs(B, Sq, Sk, Hq, Hkv, D, dtype, seed, descale):
    """16-bit q, e4m3 k and v (random normal values rounded by torch), their factors, and the dequantised K, V."""
    q = rnd(B, Sq, Hq, D, dtype=dtype, seed=seed)
    k8 = rnd(B, Sk, Hkv, D, dtype=torch.float32, seed=seed + 1).to(FP8)
    v8 = rnd(B, Sk, Hkv, D, dtype=torch.float32, seed=seed + 2).to(FP8)
    dk, dv = kv_scales(B, Hkv, seed, descale)
    return q, k8, v8, dk, dv, dequant(k8, dk), dequant(v8, dv)


@needs_fp8_tensors
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("Sq", [1, 16])
@pytest.mark.parametrize("descale", [True, False])
def test_kv_fp8_decode_gqa(dtype, Sq, descale):
    # Decode, GQA 32/8 (the group of 4 packed into one tile by default), split-KV on and off.
    B, Sk, Hq, Hkv, D = 3, 1000, 32, 8, 128
    q, k8, v8, dk, dv, kd, vd = kv_fp8_inputs(B, Sq, Sk, Hq, Hkv, D, dtype, seed=50, descale=descale)
    ref, ref_lse = attention_ref(q, kd, vd, causal=True)
    for splits in (0, 1, 3):
        for pack in (None, False):
            what = f"kv fp8 {dtype} decode Sq {Sq} descale {descale} splits {splits} pack {pack}"
            o, lse = fa4jit.attention(q, k8, v8, causal=True, num_splits=splits, pack_gqa=pack, return_lse=True,
                                      descale_k=dk, descale_v=dv)
            torch.cuda.synchronize()
            assert o.dtype == dtype and o.shape == q.shape
            err = assert_close(o, ref, dtype, lse, ref_lse, what=what)
            print(f"{what}: rel L2 {err:.3e}")
            o2 = fa4jit.attention(q, k8, v8, causal=True, num_splits=splits, pack_gqa=pack, descale_k=dk,
                                  descale_v=dv)  # the cached plan: same result
            torch.cuda.synchronize()
            assert torch.equal(o2, o), what


@needs_fp8_tensors
@pytest.mark.parametrize("page_size", [16, 64])
@pytest.mark.parametrize("Sq", [1, 16])
def test_kv_fp8_paged_decode_with_page_table(page_size, Sq):
    # A paged e4m3 KV cache (pages in random order), GQA 32/8, descale per (sequence, KV head),
    # split-KV, and sinks with pages of 64.
    B, Hq, Hkv, D = 3, 32, 8, 128
    used_k = [1000, 37, 513]
    used = torch.tensor(used_k, dtype=torch.int32, device="cuda")
    max_pages = (max(used_k) + page_size - 1) // page_size
    num_pages = B * max_pages + 5
    kc = rnd(num_pages, page_size, Hkv, D, dtype=torch.float32, seed=51).to(FP8)
    vc = rnd(num_pages, page_size, Hkv, D, dtype=torch.float32, seed=52).to(FP8)
    table = torch.randperm(num_pages, device="cuda")[:B * max_pages].view(B, max_pages).to(torch.int32)
    q = rnd(B, Sq, Hq, D, seed=53)
    dk, dv = kv_scales(B, Hkv, 53, True)
    sinks = rnd(Hq, dtype=torch.float32, seed=54) if page_size == 64 else None
    k = dequant(kc[table.long()].reshape(B, max_pages * page_size, Hkv, D), dk)
    v = dequant(vc[table.long()].reshape(B, max_pages * page_size, Hkv, D), dv)
    ref, ref_lse = attention_ref(q, k, v, causal=True, seqused_k=used, sinks=sinks)
    for splits in (0, 1, 3):
        what = f"kv fp8 paged {page_size} Sq {Sq} splits {splits}"
        o, lse = fa4jit.attention_paged(q, kc, vc, table, used, causal=True, num_splits=splits, return_lse=True,
                                        sinks=sinks, descale_k=dk, descale_v=dv)
        torch.cuda.synchronize()
        assert o.dtype == torch.bfloat16
        err = assert_close(o, ref, torch.bfloat16, lse, ref_lse, what=what)
        print(f"{what}: rel L2 {err:.3e}")


@needs_fp8_tensors
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("B,Sq,Sk,Hq,Hkv", [(2, 256, 256, 8, 8), (1, 197, 333, 8, 2), (1, 1000, 1000, 4, 1)])
def test_kv_fp8_causal_prefill(dtype, D, B, Sq, Sk, Hq, Hkv):
    q, k8, v8, dk, dv, kd, vd = kv_fp8_inputs(B, Sq, Sk, Hq, Hkv, D, dtype, seed=55, descale=True)
    out = torch.full(q.shape, float("nan"), dtype=dtype, device="cuda")
    o, lse = fa4jit.attention(q, k8, v8, causal=True, return_lse=True, out=out, descale_k=dk, descale_v=dv)
    torch.cuda.synchronize()
    assert o is out
    ref, ref_lse = attention_ref(q, kd, vd, causal=True)
    what = f"kv fp8 {dtype} prefill d{D} {(B, Sq, Sk, Hq, Hkv)}"
    err = assert_close(o, ref, dtype, lse, ref_lse, what=what)
    print(f"{what}: rel L2 {err:.3e}")
    o2 = fa4jit.attention(q, k8, v8, causal=True, descale_k=dk, descale_v=dv)  # O allocated: q's dtype
    torch.cuda.synchronize()
    assert o2.dtype == dtype and rel_l2(o2, ref) <= REL_L2[dtype]


@needs_fp8_tensors
def test_kv_fp8_varlen_prefill():
    lq, lk = [5, 0, 130, 64], [300, 17, 130, 200]
    Hq, Hkv, D = 8, 2, 128
    q4, k4, v4, _, _, _, _ = kv_fp8_inputs(1, sum(lq), sum(lk), Hq, Hkv, D, torch.bfloat16, seed=56, descale=False)
    q, k, v = q4[0], k4[0], v4[0]
    dk, dv = kv_scales(len(lq), Hkv, 56, True)  # one row per sequence
    off_q, off_k = [0] + list(itertools.accumulate(lq)), [0] + list(itertools.accumulate(lk))
    cu_q = torch.tensor(off_q, dtype=torch.int32, device="cuda")
    cu_k = torch.tensor(off_k, dtype=torch.int32, device="cuda")
    o, lse = fa4jit.attention_varlen(q, k, v, cu_q, cu_k, max(lq), max(lk), causal=True, return_lse=True,
                                     descale_k=dk, descale_v=dv)
    torch.cuda.synchronize()
    assert o.dtype == torch.bfloat16 and o.shape == q.shape
    for b in range(len(lq)):
        if lq[b] == 0:
            continue
        qs, ks = slice(off_q[b], off_q[b + 1]), slice(off_k[b], off_k[b + 1])
        ref, ref_lse = attention_ref(q[qs][None], dequant(k[ks][None], dk[b:b + 1]), dequant(v[ks][None], dv[b:b + 1]),
                                     causal=True)
        assert_close(o[qs][None], ref, torch.bfloat16, lse[:, qs][None], ref_lse, what=f"kv fp8 varlen seq {b}")


@needs_fp8_tensors
def test_kv_fp8_descale_factors_are_applied_per_batch_and_kv_head():
    # The same stored values with and without factors: the result must follow the factors.
    q, k8, v8, _, _, _, _ = kv_fp8_inputs(2, 128, 300, 8, 2, 128, torch.bfloat16, seed=57, descale=False)
    f = lambda *x: torch.tensor(x, device="cuda").view(2, 2)  # noqa: E731  (batch, kv head), far from 1
    dk, dv = f(0.5, 1.25, 1.9, 0.8), f(0.5, 1.9, 1.7, 0.6)
    ref, _ = attention_ref(q, dequant(k8, dk), dequant(v8, dv), causal=True)
    raw, _ = attention_ref(q, dequant(k8, None), dequant(v8, None), causal=True)
    o = fa4jit.attention(q, k8, v8, causal=True, descale_k=dk, descale_v=dv)
    tol = REL_L2[torch.bfloat16]
    assert rel_l2(o, ref) <= tol
    assert rel_l2(o, raw) > 5 * tol
    swapped = fa4jit.attention(q, k8, v8, causal=True, descale_k=dk, descale_v=dv.flip(0).contiguous())
    assert rel_l2(swapped, ref) > 5 * tol  # factors of another batch row


@needs_fp8_tensors
def test_kv_fp8_refusals_before_anything_runs():
    q, k8, v8, dk, dv, _, _ = kv_fp8_inputs(2, 64, 128, 8, 2, 128, torch.bfloat16, seed=58, descale=True)
    out = torch.full(q.shape, float("nan"), dtype=torch.bfloat16, device="cuda")
    with pytest.raises(fa4jit.LaunchError, match="descale_q is set but q has dtype torch.bfloat16"):
        fa4jit.attention(q, k8, v8, out=out, descale_q=dk, descale_k=dk, descale_v=dv)
    with pytest.raises(fa4jit.LaunchError, match="v has dtype torch.bfloat16 but k has torch.float8_e4m3fn"):
        fa4jit.attention(q, k8, v8.to(torch.bfloat16), out=out)
    torch.cuda.synchronize()
    assert torch.isnan(out).all()  # nothing was launched


@needs_fp8_tensors
def test_kv_fp8_paged_decode_cuda_graph_capture_and_replay():
    B, Hq, Hkv, D, page = 2, 32, 8, 128, 64
    kc = rnd(40, page, Hkv, D, dtype=torch.float32, seed=59).to(FP8)
    vc = rnd(40, page, Hkv, D, dtype=torch.float32, seed=60).to(FP8)
    table = torch.arange(40, dtype=torch.int32, device="cuda").view(B, 20)
    used = torch.tensor([1280, 700], dtype=torch.int32, device="cuda")
    q = rnd(B, 1, Hq, D, seed=61)
    dk, dv = kv_scales(B, Hkv, 61, True)
    kw = dict(causal=True, num_splits=4, descale_k=dk, descale_v=dv)
    fa4jit.attention_paged(q, kc, vc, table, used, **kw)  # compile / load outside capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fa4jit.attention_paged(q, kc, vc, table, used, **kw)
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        out = fa4jit.attention_paged(q, kc, vc, table, used, **kw)
    for seed in (62, 63):
        q.copy_(rnd(B, 1, Hq, D, seed=seed))
        kc.copy_(rnd(40, page, Hkv, D, dtype=torch.float32, seed=seed + 10).to(FP8))
        dk.copy_(torch.rand(B, Hkv, device="cuda") + 0.5)
        g.replay()
        torch.cuda.synchronize()
        k = dequant(kc[table.long()].reshape(B, 20 * page, Hkv, D), dk)
        v = dequant(vc[table.long()].reshape(B, 20 * page, Hkv, D), dv)
        ref, _ = attention_ref(q, k, v, causal=True, seqused_k=used)
        assert_close(out, ref, torch.bfloat16, what=f"kv fp8 paged graph replay seed {seed}")


# ---- torch.compile, CUDA graphs, recompiles, autograd, errors -----------------------------------

class Block(torch.nn.Module):
    def __init__(self, dim=512, heads=8, kv_heads=2):
        super().__init__()
        self.h, self.kv, self.d = heads, kv_heads, dim // heads
        self.qkv = torch.nn.Linear(dim, (heads + 2 * kv_heads) * self.d, bias=False)
        self.o = torch.nn.Linear(dim, dim, bias=False)

    def forward(self, x):
        B, S, _ = x.shape
        q, k, v = self.qkv(x).split([self.h * self.d, self.kv * self.d, self.kv * self.d], dim=-1)
        q = q.view(B, S, self.h, self.d)
        k = k.view(B, S, self.kv, self.d)
        v = v.view(B, S, self.kv, self.d)
        return self.o(fa4jit.attention(q, k, v, causal=True).reshape(B, S, -1))


def test_torch_compile_fullgraph_no_graph_breaks():
    torch.manual_seed(0)
    m = Block().cuda().to(torch.bfloat16).eval()
    x = torch.randn(2, 256, 512, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        eager = m(x)
        explain = torch._dynamo.explain(m)(x)
        assert explain.graph_break_count == 0 and explain.graph_count == 1, str(explain)
        compiled = torch.compile(m, fullgraph=True)(x)  # inductor
    torch.cuda.synchronize()
    assert rel_l2(compiled, eager) <= 1e-2


def test_no_recompiles_across_sequence_lengths():
    from torch._dynamo.testing import CompileCounterWithBackend
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("inductor")
    m = Block().cuda().to(torch.bfloat16).eval()
    f = torch.compile(m, backend=counter, fullgraph=True, dynamic=True)
    with torch.no_grad():
        for S in (128, 200, 333, 512, 1000):
            x = torch.randn(1, S, 512, device="cuda", dtype=torch.bfloat16)
            assert rel_l2(f(x), m(x)) <= 1e-2
    print(f"frames compiled for 5 sequence lengths: {counter.frame_count}")
    assert counter.frame_count == 1


@pytest.mark.parametrize("decode", [False, True])
def test_cuda_graph_capture_and_replay(decode):
    Sq, Sk = (1, 4096) if decode else (256, 256)
    q, k, v = qkv(2, Sq, Sk, 32, 8, 128, torch.bfloat16, seed=20)
    kw = dict(causal=True, num_splits=0 if not decode else 8)
    fa4jit.attention(q, k, v, **kw)  # compile / load outside capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fa4jit.attention(q, k, v, **kw)  # warm up on the side stream
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        out = fa4jit.attention(q, k, v, **kw)
    for seed in (30, 40):
        nq, nk, nv = qkv(2, Sq, Sk, 32, 8, 128, torch.bfloat16, seed=seed)
        q.copy_(nq), k.copy_(nk), v.copy_(nv)
        g.replay()
        torch.cuda.synchronize()
        ref, _ = attention_ref(nq, nk, nv, causal=True)
        assert_close(out, ref, torch.bfloat16, what=f"graph replay seed {seed}")


def test_backward_raises_forward_only():
    q, k, v = qkv(1, 64, 64, 4, 4, 64, torch.bfloat16)
    q.requires_grad_(True)
    o = fa4jit.attention(q, k, v)
    assert o.requires_grad
    with pytest.raises(RuntimeError, match="forward only"):
        o.float().sum().backward()


def test_launch_errors_before_anything_runs():
    q, k, v = qkv(1, 64, 64, 4, 4, 64, torch.bfloat16)
    buf = torch.empty(q.numel() + 1, dtype=torch.bfloat16, device="cuda")
    q_off = buf[1:].view(q.shape)  # 2-byte offset: not 16-byte aligned
    with pytest.raises(fa4jit.LaunchError, match="q.data_ptr\\(\\) is not 16-byte aligned"):
        fa4jit.attention(q_off, k, v)
    with pytest.raises(fa4jit.LaunchError, match="k is on cpu"):
        fa4jit.attention(q, k.cpu(), v)
    with pytest.raises(fa4jit.ConfigError, match="softcap"):
        fa4jit.attention(q, k, v, score_mod="softcap", softcap=0.0)
    with pytest.raises(fa4jit.LaunchError, match="num_splits is 300"):  # the library's own check, through the C API
        fa4jit.attention(q, k, v, num_splits=300)
    with pytest.raises(fa4jit.CompileError, match="undeclared_thing"):
        fa4jit.attention(q, k, v, mask_mod="return undeclared_thing > 0;")


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_second_device_uses_its_own_stream_and_context():
    with torch.cuda.device(1):
        q, k, v = (t.to("cuda:1") for t in qkv(1, 128, 128, 4, 4, 64, torch.bfloat16))
    o = fa4jit.attention(q, k, v, causal=True)
    assert o.device == q.device and torch.cuda.current_device() == 0
    ref, _ = attention_ref(q, k, v, causal=True)
    assert_close(o, ref, torch.bfloat16, what="cuda:1")


def test_readme_snippet_runs_as_written():
    torch.manual_seed(1)
    B, Sq, Sk, Hq, Hkv, D = 2, 256, 256, 8, 2, 128
    q, k, v = qkv(B, Sq, Sk, Hq, Hkv, D, torch.bfloat16)
    s = torch.randn(Hq, device="cuda")
    bias = torch.linspace(-0.01, 0.01, Hq, device="cuda")
    doc = (torch.arange(Sq, device="cuda") // 64).to(torch.int32)
    o = fa4jit.attention(q, k, v, causal=True)
    o, lse = fa4jit.attention(q, k, v, window=(128, 0), sinks=s, softcap=30.0, return_lse=True)
    o = fa4jit.attention(q, k, v, score_mod="return score + aux[0][h] * (kv_idx - q_idx);", aux=[bias])
    o = fa4jit.attention(q, k, v, mask_mod="return doc[q_idx] == doc[kv_idx];", aux=[doc])
    cu = torch.tensor([0, 100, 256], dtype=torch.int32, device="cuda")
    o = fa4jit.attention_varlen(q[0], k[0], v[0], cu, cu, 156, causal=True)
    table = torch.arange(8, dtype=torch.int32, device="cuda").view(2, 4)
    kc, vc = k.reshape(8, 64, Hkv, D), v.reshape(8, 64, Hkv, D)
    used = torch.tensor([256, 100], dtype=torch.int32, device="cuda")
    o = fa4jit.attention_paged(q[:, -1:], kc, vc, table, used, causal=True)
    fa4jit.prewarm([{"depth": 128, "mask": "causal"}], archs=["sm_90a", "sm_100a"])
    torch.cuda.synchronize()
    assert o.shape == (2, 1, Hq, D) and torch.isfinite(o.float()).all()


# ---- model prewarm, then no compiles in serving ---------------------------------------------------

_SERVE_AFTER_PREWARM = r"""
import json, sys, fa4jit, torch
path = sys.argv[1]
hf = json.load(open(path)); t = hf.get("text_config", hf)
Hq, Hkv = t["num_attention_heads"], t.get("num_key_value_heads", t["num_attention_heads"])
D = t.get("head_dim") or t["hidden_size"] // Hq
window = t.get("sliding_window") if t.get("use_sliding_window", True) else None
softcap = t.get("attn_logit_softcapping") or 0.0
arch = fa4jit._lib.device_arch(torch.cuda.current_device())
fa4jit.prewarm([k["config"] for k in fa4jit.model_configs(path, dtype="bf16", arch=arch)], archs=[arch])
fa4jit.set_compile_policy("forbid")  # from here a kernel the prewarm missed raises CacheMissError
before = fa4jit.stats()
sinks = torch.randn(Hq, device="cuda") if t["model_type"] == "gpt_oss" else None
runs = 0
for w in [None] + ([window] if window else []):
    for Sq, Sk in ((300, 300), (1, 700), (16, 700), (3, 700)):  # prefill, decode, speculative decode
        q = torch.randn(2, Sq, Hq, D, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(2, Sk, Hkv, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        fa4jit.attention(q, k, v, causal=True, window=(w - 1, 0) if w else None, softcap=softcap, sinks=sinks)
        runs += 1
    # varlen: an uneven prefill batch (sm_90a: the packed prefill tile) and a continuous-batching step
    for lens in ((1500, 300), (300, 1, 1)):
        cu = torch.tensor([0] + [sum(lens[:i + 1]) for i in range(len(lens))], dtype=torch.int32, device="cuda")
        q = torch.randn(sum(lens), Hq, D, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(sum(lens), Hkv, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        fa4jit.attention_varlen(q, k, v, cu, cu, max(lens), max(lens), causal=True,
                                window=(w - 1, 0) if w else None, softcap=softcap, sinks=sinks)
        runs += 1
torch.cuda.synchronize()
after = fa4jit.stats()
print(json.dumps({"runs": runs, "compiles": after["compiles"] - before["compiles"],
                  "disk_hits": after["disk_hits"] - before["disk_hits"]}))
"""


@pytest.mark.parametrize("model", ["llama3_8b", "qwen2_7b", "gemma2_9b", "gpt_oss_20b"])
def test_model_prewarm_leaves_nothing_to_compile_in_serving(model, tmp_path):
    # A fresh process and cache: nothing compiled by earlier tests can stand in for the prewarm.
    import os
    import subprocess
    import sys
    from conftest import REPO
    env = dict(os.environ, FA4JIT_CACHE_DIR=str(tmp_path))
    env.pop("FA4JIT_COMPILE", None)
    r = subprocess.run([sys.executable, "-c", _SERVE_AFTER_PREWARM, os.path.join(REPO, "tests", "models", model + ".json")],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["compiles"] == 0 and out["runs"] >= 4, out
