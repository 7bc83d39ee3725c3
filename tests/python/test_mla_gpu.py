"""fa4jit.mla_decode and fa4jit.mla_with_kvcache on a GPU against a float64 reference: each sequence's
keys gathered from its pages, scores = q576 . k576 x scale, softmax, O = P . k[:, :512]. Decode and
MTP (Sq 1 and 4, causal bottom-right), pages of 16 and 64 rows, 16 and 128 heads, caches sliced from
one buffer or separate, FlashMLA's form, varlen queries, split-KV, CUDA graphs and torch.compile.
Skips without a CUDA GPU (`tools/gpu.sh python` runs it on the lent machine)."""

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (the torch-layer tests need it)")
import fa4jit  # noqa: E402
from fa4jit import mla  # noqa: E402
from mla_warnings import copy_warning, fresh_copy_warning  # noqa: E402,F401 (an autouse fixture)
from reference import assert_close  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="no CUDA GPU visible to torch (run tools/gpu.sh python on a GPU machine)")

bf16 = torch.bfloat16
SCALE = 0.1352  # DeepSeek-V3's (1/sqrt(192) x the YaRN mscale squared), not 1/sqrt(576)


def rnd(*shape, seed, dtype=bf16):
    g = torch.Generator(device="cuda")
    g.manual_seed(seed)
    return torch.randn(*shape, generator=g, device="cuda").to(dtype)


class Cache:
    """A paged latent cache (num_pages, page_size, 576) and a page table placing each sequence's keys in
    random pages (spare pages stay unreferenced)."""

    def __init__(self, lengths, page_size, seed, dtype=bf16):
        B, longest = len(lengths), max(lengths)
        max_pages = -(-longest // page_size)
        self.num_pages = B * max_pages + 7
        self.buffer = rnd(self.num_pages, page_size, 576, seed=seed, dtype=dtype)
        self.table = torch.randperm(self.num_pages, device="cuda")[:B * max_pages].view(B, max_pages).to(torch.int32)
        self.lengths = list(lengths)
        self.seqlens = torch.tensor(lengths, dtype=torch.int32, device="cuda")

    def caches(self, separate):
        """ckv_cache and kpe_cache: slices of the buffer, or copies of them."""
        ckv, kpe = self.buffer[..., :512], self.buffer[..., 512:]
        return (ckv.clone(), kpe.clone()) if separate else (ckv, kpe)

    def keys(self, b):
        """Sequence b's keys, (n, 576), in order."""
        return self.buffer[self.table[b].long()].flatten(0, 1)[:self.lengths[b]]


def reference(q, cache, causal, cu=None):
    """Float64 (o, lse) of q (B, Sq, H, 576), or packed (total_q, H, 576) with cu (host offsets): o in q's
    shape with 512 columns, lse without the last dimension (FlashInfer's layout). Causal bottom-right:
    query i of Sq sees keys 0 .. n - Sq + i."""
    o = torch.zeros((*q.shape[:-1], 512), dtype=torch.float64, device="cuda")
    lse = torch.full(q.shape[:-1], float("-inf"), dtype=torch.float64, device="cuda")
    for b, n in enumerate(cache.lengths):
        rows = slice(cu[b], cu[b + 1]) if cu is not None else b
        qb, k = q[rows].double(), cache.keys(b).double()
        Sq = qb.shape[0]
        s = torch.einsum("qhd,kd->qhk", qb, k) * SCALE
        if causal:
            visible = torch.arange(n, device="cuda").view(1, n) <= torch.arange(Sq, device="cuda").view(Sq, 1) + n - Sq
            s = s.masked_fill(~visible.view(Sq, 1, n), float("-inf"))
        lse[rows] = torch.logsumexp(s, dim=-1)
        o[rows] = torch.einsum("qhk,kd->qhd", torch.softmax(s, dim=-1), k[:, :512])
    return o, lse


def queries(B, Sq, H, seed, dtype=bf16):
    return rnd(B, Sq, H, 512, seed=seed, dtype=dtype), rnd(B, Sq, H, 64, seed=seed + 1, dtype=dtype)


def poisoned(*shape, dtype=bf16):
    return torch.full(shape, float("nan"), dtype=dtype, device="cuda")


# ---- decode and MTP: both entry points, both cache layouts ---------------------------------------------

@pytest.mark.parametrize("H", [16, 128])
@pytest.mark.parametrize("page_size", [16, 64])
@pytest.mark.parametrize("Sq, causal", [(1, False), (4, True)])
def test_decode_against_reference(Sq, causal, page_size, H):
    cache = Cache([700, 5, 333], page_size, seed=1)
    q_nope, q_pe = queries(3, Sq, H, seed=2)
    q = torch.cat([q_nope, q_pe], -1)
    ref, ref_lse = reference(q, cache, causal)
    what = f"Sq {Sq} page {page_size} H {H}"
    for separate in (False, True):
        ckv, kpe = cache.caches(separate)
        with copy_warning(separate):
            o, lse = fa4jit.mla_decode(q_nope, q_pe, ckv, kpe, cache.table, cache.seqlens, softmax_scale=SCALE,
                                       causal=causal, return_lse=True)
        assert o.shape == (3, Sq, H, 512) and lse.shape == (3, Sq, H)
        assert_close(o, ref, bf16, lse, ref_lse, what=f"mla_decode {what} separate {separate}")
    # out= and lse= (poisoned) on the one-buffer caches: every element written.
    ckv, kpe = cache.caches(False)
    out, lse_out = poisoned(3, Sq, H, 512), poisoned(3, Sq, H, dtype=torch.float32)
    r = fa4jit.mla_decode(q_nope, q_pe, ckv, kpe, cache.table, cache.seqlens, softmax_scale=SCALE, causal=causal,
                          out=out, lse=lse_out, return_lse=True)
    assert r[0] is out and r[1] is lse_out
    assert_close(out, ref, bf16, lse_out, ref_lse, what=f"mla_decode out= lse= {what}")
    # FlashMLA's form: the buffer as (num_pages, page_size, 1, 576), softmax_lse (B, H, Sq).
    o, lse = fa4jit.mla_with_kvcache(q, cache.buffer.unsqueeze(2), cache.table, cache.seqlens, softmax_scale=SCALE,
                                     causal=causal)
    assert lse.shape == (3, H, Sq)
    assert_close(o, ref, bf16, lse.transpose(1, 2), ref_lse, what=f"mla_with_kvcache {what}")


@pytest.mark.parametrize("dtype", [bf16, torch.float16])
def test_varlen_and_one_query_layouts(dtype):
    H = 128
    cache = Cache([700, 64, 129], 64, seed=3, dtype=dtype)
    ckv, kpe = cache.caches(False)
    # Packed queries of 1, 4 and 3 tokens (a decode and two MTP drafts), lse (total_q, H).
    cu = [0, 1, 5, 8]
    q_nope, q_pe = rnd(8, H, 512, seed=4, dtype=dtype), rnd(8, H, 64, seed=5, dtype=dtype)
    ref, ref_lse = reference(torch.cat([q_nope, q_pe], -1), cache, True, cu)
    out = poisoned(8, H, 512, dtype=dtype)
    cu_q = torch.tensor(cu, dtype=torch.int32, device="cuda")
    o, lse = fa4jit.mla_decode(q_nope, q_pe, ckv, kpe, cache.table, cache.seqlens, softmax_scale=SCALE, causal=True,
                               cu_seqlens_q=cu_q, max_seqlen_q=4, out=out, return_lse=True)
    assert o is out and lse.shape == (8, H)
    assert_close(o, ref, dtype, lse, ref_lse, what=f"varlen {dtype}")
    # FlashInfer's decode layout: q_nope (B, H, 512), out (B, H, 512), lse (B, H).
    q_nope, q_pe = rnd(3, H, 512, seed=6, dtype=dtype), rnd(3, H, 64, seed=7, dtype=dtype)
    ref, ref_lse = reference(torch.cat([q_nope, q_pe], -1).unsqueeze(1), cache, False)
    o, lse = fa4jit.mla_decode(q_nope, q_pe, ckv, kpe, cache.table, cache.seqlens, softmax_scale=SCALE,
                               return_lse=True)
    assert o.shape == (3, H, 512) and lse.shape == (3, H)
    assert_close(o, ref.squeeze(1), dtype, lse, ref_lse.squeeze(1), what=f"one query per sequence {dtype}")


@pytest.mark.parametrize("H", [16, 128])
@pytest.mark.parametrize("Sq", [1, 4])
def test_split_kv_matches_the_reference(Sq, H):
    cache = Cache([4000, 1500, 64], 64, seed=8)
    ckv, kpe = cache.caches(False)
    q_nope, q_pe = queries(3, Sq, H, seed=9)
    q = torch.cat([q_nope, q_pe], -1)
    ref, ref_lse = reference(q, cache, True)
    for splits in (0, 1, 3, 8):
        o, lse = fa4jit.mla_decode(q_nope, q_pe, ckv, kpe, cache.table, cache.seqlens, softmax_scale=SCALE,
                                   causal=True, num_splits=splits, return_lse=True)
        assert_close(o, ref, bf16, lse, ref_lse, what=f"mla_decode Sq {Sq} H {H} splits {splits}")
        o, lse = fa4jit.mla_with_kvcache(q, cache.buffer.unsqueeze(2), cache.table, cache.seqlens,
                                         softmax_scale=SCALE, causal=True, num_splits=splits)
        assert_close(o, ref, bf16, lse.transpose(1, 2), ref_lse, what=f"mla_with_kvcache Sq {Sq} H {H} splits {splits}")


# ---- an FP8 (e4m3) latent cache: FlashMLA's descale_k, bf16 / fp16 queries ---------------------------

FP8 = getattr(torch, "float8_e4m3fn", None)
needs_fp8_cache = pytest.mark.skipif(
    FP8 is None or not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
    reason="the e4m3 latent-cache kernel is sm_90a's: needs an sm_90 GPU and torch.float8_e4m3fn")


class Fp8Cache(Cache):
    """A paged e4m3 latent cache (random normal values rounded by torch) and its factors: the reference
    reads stored value x factor of the sequence, in float64."""

    def __init__(self, lengths, page_size, seed, factors, page_factors=None):
        super().__init__(lengths, page_size, seed, dtype=torch.float32)
        self.buffer = self.buffer.to(FP8)
        self.factors = factors  # None, or float64 per sequence
        self.page_factors = page_factors  # None, or float32 (num_pages,): page_descale

    def keys(self, b):
        pages = self.table[b].long()
        k = self.buffer[pages].double()
        if self.page_factors is not None:
            k = k * self.page_factors[pages].double().view(-1, 1, 1)
        k = k.flatten(0, 1)[:self.lengths[b]]
        return k if self.factors is None else k * self.factors[b]


@needs_fp8_cache
@pytest.mark.parametrize("dtype", [bf16, torch.float16])
@pytest.mark.parametrize("H", [16, 128])
@pytest.mark.parametrize("Sq, causal, page_size", [(1, False, 64), (4, True, 16), (2, True, 1)])
def test_fp8_latent_cache_against_reference(Sq, causal, page_size, H, dtype):
    B = 3
    g = torch.Generator(device="cuda")
    g.manual_seed(30)
    per_seq = torch.rand(B, generator=g, device="cuda") * 1.5 + 0.5  # factors in [0.5, 2)
    q_nope, q_pe = queries(B, Sq, H, seed=31, dtype=dtype)
    q = torch.cat([q_nope, q_pe], -1)
    # descale_k as None (1), a float and a 0-d tensor (the whole cache), and (B,) (per sequence).
    for descale, factors in ((None, None), (0.75, [0.75] * B), (torch.tensor(1.25, device="cuda"), [1.25] * B),
                             (per_seq, per_seq.double().tolist())):
        cache = Fp8Cache([700, 5, 333], page_size, seed=32, factors=factors)
        ref, ref_lse = reference(q, cache, causal)
        what = f"e4m3 cache {dtype} Sq {Sq} page {page_size} H {H} descale {type(descale).__name__}"
        ckv, kpe = cache.caches(False)
        for splits in (0, 1, 3):
            out, lse_out = poisoned(B, Sq, H, 512, dtype=dtype), poisoned(B, Sq, H, dtype=torch.float32)
            fa4jit.mla_decode(q_nope, q_pe, ckv, kpe, cache.table, cache.seqlens, softmax_scale=SCALE, causal=causal,
                              num_splits=splits, out=out, lse=lse_out, descale_k=descale)
            assert_close(out, ref, dtype, lse_out, ref_lse, what=f"mla_decode {what} splits {splits}")
        o, lse = fa4jit.mla_with_kvcache(q, cache.buffer.unsqueeze(2), cache.table, cache.seqlens,
                                         softmax_scale=SCALE, causal=causal, descale_k=descale)
        assert o.dtype == dtype
        assert_close(o, ref, dtype, lse.transpose(1, 2), ref_lse, what=f"mla_with_kvcache {what}")


@needs_fp8_cache
@pytest.mark.parametrize("H", [16, 128])
@pytest.mark.parametrize("Sq, causal, page_size", [(1, False, 64), (4, True, 16), (1, True, 1)])
def test_fp8_latent_cache_page_factors(Sq, causal, page_size, H):
    # page_descale: a factor per page in [0.5, 2), alone and beside per-sequence descale_k.
    B = 3
    g = torch.Generator(device="cuda")
    g.manual_seed(40)
    cache = Fp8Cache([700, 5, 333], page_size, seed=41, factors=None)
    cache.page_factors = torch.rand(cache.num_pages, generator=g, device="cuda") * 1.5 + 0.5
    per_seq = torch.tensor([0.75, 1.25, 2.0], device="cuda")
    q_nope, q_pe = queries(B, Sq, H, seed=42)
    q = torch.cat([q_nope, q_pe], -1)
    ckv, kpe = cache.caches(False)
    for descale in (None, per_seq):
        cache.factors = None if descale is None else descale.double().tolist()
        ref, ref_lse = reference(q, cache, causal)
        what = f"page factors Sq {Sq} page {page_size} H {H} descale_k {descale is not None}"
        for splits in (0, 1, 3):
            out, lse_out = poisoned(B, Sq, H, 512), poisoned(B, Sq, H, dtype=torch.float32)
            fa4jit.mla_decode(q_nope, q_pe, ckv, kpe, cache.table, cache.seqlens, softmax_scale=SCALE, causal=causal,
                              num_splits=splits, out=out, lse=lse_out, descale_k=descale,
                              page_descale=cache.page_factors)
            assert_close(out, ref, bf16, lse_out, ref_lse, what=f"mla_decode {what} splits {splits}")
        o, lse = fa4jit.mla_with_kvcache(q, cache.buffer.unsqueeze(2), cache.table, cache.seqlens,
                                         softmax_scale=SCALE, causal=causal, descale_k=descale,
                                         page_descale=cache.page_factors)
        assert_close(o, ref, bf16, lse.transpose(1, 2), ref_lse, what=f"mla_with_kvcache {what}")
    if H == 16:  # compiled (fullgraph): both factor tensors reach the op
        torch._dynamo.reset()
        f = torch.compile(lambda *a: fa4jit.mla_decode(*a, softmax_scale=SCALE, causal=causal, descale_k=per_seq,
                                                       page_descale=cache.page_factors), fullgraph=True)
        assert_close(f(q_nope, q_pe, ckv, kpe, cache.table, cache.seqlens), ref, bf16, what=f"compiled {what}")


@needs_fp8_cache
def test_fp8_latent_cache_argument_errors():
    cache = Fp8Cache([100, 5, 33], 64, seed=33, factors=None)
    ckv, kpe = cache.caches(False)
    q_nope, q_pe = queries(3, 1, 16, seed=34)
    out = poisoned(3, 1, 16, 512)
    kw = dict(softmax_scale=SCALE, out=out)
    with pytest.raises(fa4jit.LaunchError, match="kpe_cache has dtype torch.bfloat16 but q_nope has torch.bfloat16 "
                                                 "and ckv_cache torch.float8_e4m3fn"):
        fa4jit.mla_decode(q_nope, q_pe, ckv, kpe.to(bf16), cache.table, cache.seqlens, **kw)
    with pytest.raises(fa4jit.LaunchError, match=r"descale_k has dtype torch.float32 and shape \(2,\)"):
        fa4jit.mla_decode(q_nope, q_pe, ckv, kpe, cache.table, cache.seqlens, descale_k=torch.ones(2, device="cuda"),
                          **kw)
    with pytest.raises(fa4jit.LaunchError, match="descale_k is -1.0"):
        fa4jit.mla_decode(q_nope, q_pe, ckv, kpe, cache.table, cache.seqlens, descale_k=-1.0, **kw)
    bf_cache = Cache([100, 5, 33], 64, seed=35)
    with pytest.raises(fa4jit.LaunchError, match="descale_k is set but the cache is torch.bfloat16"):
        fa4jit.mla_decode(q_nope, q_pe, *bf_cache.caches(False), bf_cache.table, bf_cache.seqlens, descale_k=2.0,
                          **kw)
    # Per-page factors: float32 (num_pages,), for an e4m3 latent cache only.
    pages = cache.num_pages
    with pytest.raises(fa4jit.LaunchError, match=rf"page_descale has dtype torch.float32 and shape \(5,\); expected "
                                                 rf"a contiguous torch.float32 \({pages},\)"):
        fa4jit.mla_decode(q_nope, q_pe, ckv, kpe, cache.table, cache.seqlens, page_descale=torch.ones(5, device="cuda"),
                          **kw)
    bf = Cache([100, 5, 33], 64, seed=37)
    with pytest.raises(fa4jit.LaunchError, match="page_descale is set but k has dtype torch.bfloat16"):
        fa4jit.mla_decode(q_nope, q_pe, *bf.caches(False), bf.table, bf.seqlens,
                          page_descale=torch.ones(bf.num_pages, device="cuda"), **kw)
    k8 = torch.randn(4, 16, 2, 128, device="cuda").to(FP8)  # an FP8 KV cache of another kernel (d128)
    with pytest.raises(fa4jit.LaunchError, match="page_descale is set but this kernel is not MLA's"):
        fa4jit.attention_paged(torch.randn(2, 1, 4, 128, device="cuda", dtype=bf16), k8, k8,
                               torch.zeros(2, 2, dtype=torch.int32, device="cuda"), None,
                               page_descale=torch.ones(4, device="cuda"))
    torch.cuda.synchronize()
    assert torch.isnan(out).all()  # nothing was launched


# ---- CUDA graphs, torch.compile, errors ---------------------------------------------------------------

def test_cuda_graph_capture_and_replay():
    cache = Cache([2000, 300, 1024], 64, seed=10)
    ckv, kpe = cache.caches(False)
    q_nope, q_pe = queries(3, 2, 128, seed=11)
    kw = dict(softmax_scale=SCALE, causal=True, num_splits=4, return_lse=True)
    fa4jit.mla_decode(q_nope, q_pe, ckv, kpe, cache.table, cache.seqlens, **kw)  # compile / load outside capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fa4jit.mla_decode(q_nope, q_pe, ckv, kpe, cache.table, cache.seqlens, **kw)
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        out, lse = fa4jit.mla_decode(q_nope, q_pe, ckv, kpe, cache.table, cache.seqlens, **kw)
    for seed in (12, 14):  # new queries, cache rows and lengths, written in place
        new_nope, new_pe = queries(3, 2, 128, seed=seed)
        q_nope.copy_(new_nope), q_pe.copy_(new_pe)
        cache.buffer.copy_(rnd(*cache.buffer.shape, seed=seed + 1))
        cache.lengths = [1999 - seed, 301 + seed, 2]
        cache.seqlens.copy_(torch.tensor(cache.lengths, dtype=torch.int32))
        g.replay()
        torch.cuda.synchronize()
        ref, ref_lse = reference(torch.cat([new_nope, new_pe], -1), cache, True)
        assert_close(out, ref, bf16, lse, ref_lse, what=f"graph replay seed {seed}")


def test_torch_compile_fullgraph_matches_eager():
    cache = Cache([700, 5, 333], 64, seed=16)
    q_nope, q_pe = queries(3, 4, 128, seed=17)

    def f(q_nope, q_pe, buf, kpe_separate, table, lengths):
        o1, lse1 = fa4jit.mla_decode(q_nope, q_pe, buf[..., :512], buf[..., 512:], table, lengths,
                                     softmax_scale=SCALE, causal=True, return_lse=True)
        o2 = fa4jit.mla_decode(q_nope, q_pe, buf[..., :512], kpe_separate, table, lengths, softmax_scale=SCALE,
                               causal=True)
        o3, lse3 = fa4jit.mla_with_kvcache(torch.cat([q_nope, q_pe], -1), buf.unsqueeze(2), table, lengths,
                                           softmax_scale=SCALE, causal=True)
        return o1, lse1, o2, o3, lse3

    torch._dynamo.reset()
    compiled = torch.compile(f, fullgraph=True)  # inductor
    with copy_warning(True):  # the separate rope cache: copied at run time, inside the op
        o1, lse1, o2, o3, lse3 = compiled(q_nope, q_pe, cache.buffer, cache.buffer[..., 512:].clone(), cache.table,
                                          cache.seqlens)
    ref, ref_lse = reference(torch.cat([q_nope, q_pe], -1), cache, True)
    assert_close(o1, ref, bf16, lse1, ref_lse, what="compiled mla_decode")
    assert_close(o2, ref, bf16, what="compiled mla_decode, separate caches")
    assert_close(o3, ref, bf16, lse3.transpose(1, 2), ref_lse, what="compiled mla_with_kvcache")


def test_argument_errors_before_anything_runs():
    cache = Cache([100, 5, 33], 64, seed=18)
    ckv, kpe = cache.caches(False)
    q_nope, q_pe = queries(3, 1, 16, seed=19)
    out = poisoned(3, 1, 16, 512)
    with pytest.raises(fa4jit.LaunchError, match="page_table has dtype torch.int64"):
        fa4jit.mla_decode(q_nope, q_pe, ckv, kpe, cache.table.long(), cache.seqlens, softmax_scale=SCALE, out=out)
    with pytest.raises(fa4jit.LaunchError, match="kpe_cache has dtype torch.float16"):
        fa4jit.mla_decode(q_nope, q_pe, ckv, kpe.half(), cache.table, cache.seqlens, softmax_scale=SCALE, out=out)
    with pytest.raises(fa4jit.LaunchError, match="out has shape"):  # attention_paged's own check, named
        fa4jit.mla_decode(q_nope, q_pe, ckv, kpe, cache.table, cache.seqlens, softmax_scale=SCALE,
                          out=poisoned(3, 1, 16, 576))
    torch.cuda.synchronize()
    assert torch.isnan(out).all()  # nothing was launched


def test_docs_snippets_run_as_written():
    # docs/PYTHON.md's "MLA decode" and README.md's lines, with their names bound.
    cache = Cache([300, 64], 64, seed=20)
    kv, page_table = cache.buffer, cache.table
    block_table, cache_seqlens, lens, scale = page_table, cache.seqlens, cache.seqlens, SCALE
    q_nope, q_pe = queries(2, 2, 16, seed=21)
    q = torch.cat([q_nope, q_pe], -1)
    o = fa4jit.mla_decode(q_nope, q_pe, kv[..., :512], kv[..., 512:], page_table, cache_seqlens,
                          softmax_scale=scale, causal=True)
    o2, lse = fa4jit.mla_with_kvcache(q, kv.unsqueeze(2), block_table, cache_seqlens,
                                      softmax_scale=scale, causal=True)
    o3 = fa4jit.mla_decode(q_nope, q_pe, kv[..., :512], kv[..., 512:], page_table, lens, softmax_scale=scale)
    ref, _ = reference(q, cache, True)
    assert_close(o, ref, bf16, what="docs mla_decode")
    assert_close(o2, ref, bf16, what="docs mla_with_kvcache")
    assert_close(o3, reference(q, cache, False)[0], bf16, what="README mla_decode")


@needs_fp8_cache
def test_docs_fp8_snippet_runs_as_written():
    # docs/PYTHON.md's "An FP8 latent cache" lines, with their names bound.
    cache = Cache([300, 64], 64, seed=22)
    kv, page_table, cache_seqlens, scale = cache.buffer, cache.table, cache.seqlens, SCALE
    q_nope, q_pe = queries(2, 2, 16, seed=23)
    kv8 = kv.to(torch.float8_e4m3fn)  # (num_pages, page_size, 576); or quantize with a scale of your own
    o = fa4jit.mla_decode(q_nope, q_pe, kv8[..., :512], kv8[..., 512:], page_table, cache_seqlens,
                          softmax_scale=scale, causal=True, descale_k=1.0)
    rows = Fp8Cache([300, 64], 64, seed=22, factors=None)  # the reference reads kv8's rows through page_table
    rows.buffer, rows.table = kv8, page_table
    ref, _ = reference(torch.cat([q_nope, q_pe], -1), rows, True)
    assert_close(o, ref, bf16, what="docs FP8 mla_decode")
