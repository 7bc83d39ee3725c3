"""fa4jit.mla_decode and fa4jit.mla_with_kvcache without a GPU: argument errors naming the argument,
the one-buffer test and the 576-wide view of the latent cache (or its copy), shapes with fake CUDA
tensors, torch.compile without graph breaks, and the arguments each call passes to attention_paged,
checked against a float64 reference with a CPU stand-in for the kernel."""

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (the torch-layer tests need it)")
import fa4jit  # noqa: E402
from fa4jit import mla, ops  # noqa: E402
from mla_warnings import copy_warning, fresh_copy_warning  # noqa: E402,F401 (an autouse fixture)
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode  # noqa: E402

bf16 = torch.bfloat16
SCALE = 0.1352  # DeepSeek-V3's (1/sqrt(192) x the YaRN mscale squared), not 1/sqrt(576)


@pytest.fixture
def fake():
    return FakeTensorMode()


def latent_buffer(pages, page, dtype=bf16, device="cpu", width=576):
    return torch.randn(pages, page, width, device=device).to(dtype)


def decode_args(B=3, Sq=2, H=16, page=16, pages=12, max_pages=4, device="cpu", dtype=bf16, separate=False,
                lengths=(50, 1, 33)):
    """Valid mla_decode arguments (random values), and the buffer the caches are sliced from (unless
    separate: then copies of its slices)."""
    torch.manual_seed(0)
    buf = latent_buffer(pages, page, dtype, device)
    ckv, kpe = buf[..., :512], buf[..., 512:]
    if separate:
        ckv, kpe = ckv.clone(), kpe.clone()
    table = torch.randperm(pages, device=device)[:B * max_pages].view(B, max_pages).to(torch.int32)
    return dict(q_nope=torch.randn(B, Sq, H, 512, device=device).to(dtype),
                q_pe=torch.randn(B, Sq, H, 64, device=device).to(dtype), ckv_cache=ckv, kpe_cache=kpe,
                page_table=table, cache_seqlens=torch.tensor(lengths[:B], dtype=torch.int32, device=device),
                buffer=buf)


def call_decode(a, **kw):
    kw.setdefault("softmax_scale", SCALE)
    return fa4jit.mla_decode(a["q_nope"], a["q_pe"], a["ckv_cache"], a["kpe_cache"], a["page_table"],
                             a["cache_seqlens"], **kw)


def kvcache_args(a):
    """mla_with_kvcache's arguments for the same attention as decode_args' a: FlashMLA's k_cache is the
    buffer with a head dimension."""
    return torch.cat([a["q_nope"], a["q_pe"]], -1), a["buffer"].unsqueeze(2), a["page_table"], a["cache_seqlens"]


# ---- argument errors --------------------------------------------------------------------------------

def _edit(case, a, kw):
    """Makes the arguments a (by name) or the keywords kw wrong in the way case says."""
    if case == "scale_none":
        kw["softmax_scale"] = None
    elif case == "scale_zero":
        kw["softmax_scale"] = 0.0
    elif case == "splits_tensor":
        kw["num_splits"] = torch.ones(4, dtype=torch.int32)
    elif case == "q_nope_list":
        a["q_nope"] = a["q_nope"].tolist()
    elif case == "q_nope_576":
        a["q_nope"] = torch.cat([a["q_nope"], a["q_pe"]], -1)
    elif case == "q_pe_32":
        a["q_pe"] = a["q_pe"][..., :32]
    elif case == "q_pe_heads":
        a["q_pe"] = a["q_pe"][:, :, :8]
    elif case == "q_float":
        a["q_nope"], a["q_pe"] = a["q_nope"].float(), a["q_pe"].float()
    elif case == "kpe_fp16":
        a["kpe_cache"] = a["kpe_cache"].half()
    elif case == "ckv_4d":
        a["ckv_cache"] = a["ckv_cache"].unsqueeze(2)
    elif case == "kpe_pages":
        a["kpe_cache"] = a["kpe_cache"][:-1]
    elif case == "table_int64":
        a["page_table"] = a["page_table"].long()
    elif case == "table_1d":
        a["page_table"] = a["page_table"].flatten()
    elif case == "table_batch":
        a["page_table"] = a["page_table"][:2]
    elif case == "seqlens_int64":
        a["cache_seqlens"] = a["cache_seqlens"].long()
    elif case == "seqlens_len":
        a["cache_seqlens"] = torch.zeros(4, dtype=torch.int32)
    elif case == "sq_17":
        a["q_nope"], a["q_pe"] = a["q_nope"][:, :1].expand(-1, 17, -1, -1), a["q_pe"][:, :1].expand(-1, 17, -1, -1)
    elif case.startswith("varlen"):
        a["q_nope"], a["q_pe"] = a["q_nope"].flatten(0, 1), a["q_pe"].flatten(0, 1)
        kw.update(cu_seqlens_q=torch.tensor([0, 2, 4, 6], dtype=torch.int32), max_seqlen_q=2)
        if case == "varlen_no_max":
            kw["max_seqlen_q"] = None
        elif case == "varlen_max_20":
            kw["max_seqlen_q"] = 20
        elif case == "varlen_cu_int64":
            kw["cu_seqlens_q"] = kw["cu_seqlens_q"].long()
        elif case == "varlen_4d_q":
            a["q_nope"], a["q_pe"] = a["q_nope"].unflatten(0, (3, 2)), a["q_pe"].unflatten(0, (3, 2))
    elif case == "lse_shape":
        kw["lse"] = torch.empty(3, 16, 2)  # the kernel's (B, H, Sq), not out's (B, Sq, H)
    elif case == "out_list":
        kw["out"] = [0.0]


@pytest.mark.parametrize("case, error, match", [
    ("scale_none", fa4jit.ConfigError, "softmax_scale is None: pass the model's"),
    ("scale_zero", fa4jit.ConfigError, "softmax_scale is 0.0"),
    ("splits_tensor", TypeError, "num_splits: expected an int"),
    ("q_nope_list", TypeError, "q_nope: expected a torch.Tensor, got list"),
    ("out_list", TypeError, "out: expected a torch.Tensor"),
    ("q_nope_576", fa4jit.LaunchError, r"q_nope has shape \(3, 2, 16, 576\); expected \(B, Sq, H, 512\) = "
                                       r"\(_, _, _, 512\), or \(B, H, 512\), or \(total_q, H, 512\) with cu_seqlens_q"),
    ("q_pe_32", fa4jit.LaunchError, r"q_pe has shape \(3, 2, 16, 32\); expected q_nope's shape with 64 columns = "
                                    r"\(3, 2, 16, 64\)"),
    ("q_pe_heads", fa4jit.LaunchError, r"q_pe has shape \(3, 2, 8, 64\)"),
    ("q_float", fa4jit.LaunchError, "q_nope has dtype torch.float32; MLA decode takes torch.bfloat16 or torch.float16"),
    ("kpe_fp16", fa4jit.LaunchError, "kpe_cache has dtype torch.float16 but q_nope has torch.bfloat16"),
    ("ckv_4d", fa4jit.LaunchError, r"ckv_cache has shape \(12, 16, 1, 512\); expected \(num_pages, page_size, 512\)"),
    ("kpe_pages", fa4jit.LaunchError, r"kpe_cache has shape \(11, 16, 64\); expected \(num_pages, page_size, 64\) = "
                                      r"\(12, 16, 64\), ckv_cache's pages"),
    ("table_int64", fa4jit.LaunchError, "page_table has dtype torch.int64; it must be torch.int32"),
    ("table_1d", fa4jit.LaunchError, r"page_table has shape \(12,\); expected \(B, max_pages\) = \(3, _\)"),
    ("table_batch", fa4jit.LaunchError, r"page_table has shape \(2, 4\); expected \(B, max_pages\) = \(3, _\)"),
    ("seqlens_int64", fa4jit.LaunchError, "cache_seqlens has dtype torch.int64"),
    ("seqlens_len", fa4jit.LaunchError, r"cache_seqlens has shape \(4,\); expected \(B,\) = \(3\)"),
    ("sq_17", fa4jit.LaunchError, r"q_nope.shape\[1\] \(Sq\) is 17: MLA decode takes 1..16 queries"),
    ("varlen_no_max", fa4jit.LaunchError, "max_seqlen_q: needed with cu_seqlens_q"),
    ("varlen_max_20", fa4jit.LaunchError, "max_seqlen_q is 20: MLA decode takes 1..16"),
    ("varlen_cu_int64", fa4jit.LaunchError, "cu_seqlens_q has dtype torch.int64"),
    ("varlen_4d_q", fa4jit.LaunchError, r"q_nope has shape \(3, 2, 16, 512\); expected \(total_q, H, 512\) = "
                                        r"\(_, _, 512\) with cu_seqlens_q"),
    ("lse_shape", fa4jit.LaunchError, r"lse has dtype torch.float32 and shape \(3, 16, 2\); expected torch.float32 "
                                      r"\(3, 2, 16\)"),
])
def test_decode_argument_errors_name_the_argument(case, error, match):
    a, kw = decode_args(), {}
    _edit(case, a, kw)
    with pytest.raises(error, match=match):
        call_decode(a, **kw)


def test_decode_refuses_cpu_and_mixed_devices(fake):
    with pytest.raises(fa4jit.LaunchError, match="q_nope is on cpu: fa4jit runs on CUDA tensors"):
        call_decode(decode_args())
    with fake:
        a = decode_args(device="cuda")
        a["kpe_cache"] = a["kpe_cache"].cpu()
        with pytest.raises(fa4jit.LaunchError, match="kpe_cache is on cpu, q_nope on cuda:0"):
            call_decode(a)
        a = decode_args(device="cuda")
        with pytest.raises(fa4jit.LaunchError, match="out is on cpu, q_nope on cuda:0"):
            call_decode(a, out=torch.empty(3, 2, 16, 512, dtype=bf16))


@pytest.mark.parametrize("change, error, match", [
    (dict(head_dim_v=128), fa4jit.ConfigError, "head_dim_v is 128: MLA's V is the first 512 columns"),
    (dict(softmax_scale=float("nan")), fa4jit.ConfigError, "softmax_scale is nan"),
    (dict(num_splits=None), TypeError, "num_splits: expected an int"),
    (dict(q=lambda q: q[..., :512]), fa4jit.LaunchError, r"q has shape \(3, 2, 16, 512\); expected \(B, Sq, H, 576\)"),
    (dict(k_cache=lambda k: k.expand(-1, -1, 2, -1)), fa4jit.LaunchError,
     r"k_cache has shape \(12, 16, 2, 576\); expected \(num_pages, page_size, 1, 576\) = \(_, _, 1, 576\): one "
     r"latent KV head"),
    (dict(k_cache=lambda k: k.half()), fa4jit.LaunchError, "k_cache has dtype torch.float16 but q has torch.bfloat16"),
    (dict(block_table=lambda t: t.long()), fa4jit.LaunchError, "block_table has dtype torch.int64"),
    (dict(cache_seqlens=lambda t: t[:2]), fa4jit.LaunchError,
     r"cache_seqlens has shape \(2,\); expected \(B,\) = \(3\)"),
    (dict(q=lambda q: q.repeat(1, 9, 1, 1)), fa4jit.LaunchError, r"q.shape\[1\] \(Sq\) is 18"),
    ({}, fa4jit.LaunchError, "q is on cpu: fa4jit runs on CUDA tensors"),
])
def test_kvcache_argument_errors_name_the_argument(change, error, match):
    q, k_cache, block_table, cache_seqlens = kvcache_args(decode_args())
    args = dict(q=q, k_cache=k_cache, block_table=block_table, cache_seqlens=cache_seqlens)
    kw = dict(softmax_scale=SCALE)
    for name, value in change.items():
        if name in args:
            args[name] = value(args[name])
        else:
            kw[name] = value
    with pytest.raises(error, match=match):
        fa4jit.mla_with_kvcache(*args.values(), **kw)
    with pytest.raises(TypeError, match="softmax_scale"):  # required: MLA has no default scale
        fa4jit.mla_with_kvcache(q, k_cache, block_table, cache_seqlens)


# ---- the 576-wide rows: one buffer read in place, or a copy ------------------------------------------

def one_buffer_layouts():
    """(ckv_cache, kpe_cache, buffer) sliced from one buffer as engines allocate it."""
    buf = latent_buffer(6, 16)
    yield buf[..., :512], buf[..., 512:], buf  # vLLM: (num_blocks, block_size, 576)
    tokens = latent_buffer(40, 1)  # SGLang: (tokens, 1, 576), pages of one token
    yield tokens[..., :512], tokens[..., 512:], tokens
    padded = latent_buffer(5, 8, width=640)  # rows padded to 640 columns
    yield padded[..., :512], padded[..., 512:576], padded
    raw = torch.zeros(4 * 32 * 576 * 2 + 64, dtype=torch.uint8)  # one byte pool, viewed per layer
    layer = raw[64:].view(bf16).view(4, 32, 576)
    layer.copy_(latent_buffer(4, 32))
    yield layer[..., :512], layer[..., 512:], layer


def test_one_buffer_caches_are_viewed_without_a_copy():
    for ckv, kpe, buf in one_buffer_layouts():
        assert mla._one_buffer(ckv, kpe)
        with copy_warning(False):
            k = mla._latent_cache(ckv, kpe)
        assert k.shape == (*ckv.shape[:2], 1, 576)
        assert k.data_ptr() == ckv.data_ptr() and k.untyped_storage().data_ptr() == buf.untyped_storage().data_ptr()
        assert k.stride()[:2] == ckv.stride()[:2] and k.stride(3) == 1
        assert torch.equal(k, torch.cat([ckv, kpe], -1).unsqueeze(2))
        v = k[..., :512]  # what the launch gets as v: k's prefix view
        assert v.data_ptr() == k.data_ptr() and v.stride() == k.stride()


def mismatched_layouts():
    """(name, ckv_cache, kpe_cache): pairs whose 576-wide rows are not one buffer's."""
    buf = latent_buffer(6, 16)
    yield "separate tensors", buf[..., :512].clone(), buf[..., 512:].clone()
    rope_first = latent_buffer(6, 16)  # (k_pe, c_kv) rows: kpe before ckv
    yield "rope first", rope_first[..., 64:], rope_first[..., :64]
    yield "kpe one column early", buf[..., :512], buf[..., 511:575]
    flat = buf.view(-1)  # kpe 512 elements past ckv in one storage, but rows 64 apart
    yield "other strides", buf[..., :512], flat[512:512 + 6 * 16 * 64].view(6, 16, 64)
    other = latent_buffer(6, 16)  # same shapes, strides and offsets, another buffer
    yield "two buffers", buf[..., :512], other[..., 512:]


def test_other_caches_are_copied_with_one_warning():
    for name, ckv, kpe in mismatched_layouts():
        assert not mla._one_buffer(ckv, kpe), name
        mla._copy_warned = False
        with copy_warning(True):
            k = mla._latent_cache(ckv, kpe)
        assert torch.equal(k, torch.cat([ckv, kpe], -1).unsqueeze(2)), name
        assert k.is_contiguous() and k.shape == (6, 16, 1, 576)
        with copy_warning(False):  # once per process
            mla._latent_cache(ckv, kpe)


def test_one_buffer_test_works_on_fake_tensors(fake):
    with fake:
        buf = torch.empty(6, 16, 576, dtype=bf16, device="cuda")
        assert mla._one_buffer(buf[..., :512], buf[..., 512:])
        assert not mla._one_buffer(buf[..., :512], buf[..., 512:].clone())
        assert mla._latent_cache(buf[..., :512], buf[..., 512:]).shape == (6, 16, 1, 576)


# ---- shapes with fake CUDA tensors, torch.compile ------------------------------------------------------

def test_fake_shapes_of_each_layout(fake):
    with fake:
        a = decode_args(device="cuda")
        o, lse = call_decode(a, causal=True, return_lse=True)
        assert o.shape == (3, 2, 16, 512) and o.dtype == bf16
        assert lse.shape == (3, 2, 16) and lse.dtype == torch.float32  # out's shape without its last dimension
        out, lse_buf = torch.empty(3, 2, 16, 512, dtype=bf16, device="cuda"), torch.empty(3, 2, 16, device="cuda")
        r = call_decode(a, out=out, lse=lse_buf, return_lse=True)
        assert r[0] is out and r[1] is lse_buf
        assert call_decode(a, out=out, lse=lse_buf) is out  # lse= is written; the call returns out alone
        # Varlen queries: (total_q, H, 512), lse (total_q, H), FlashInfer's layout.
        cu = torch.empty(4, dtype=torch.int32, device="cuda")
        v = dict(a, q_nope=a["q_nope"].flatten(0, 1), q_pe=a["q_pe"].flatten(0, 1))
        o, lse = call_decode(v, cu_seqlens_q=cu, max_seqlen_q=2, causal=True, return_lse=True)
        assert o.shape == (6, 16, 512) and lse.shape == (6, 16)
        # FlashInfer's decode layout: (B, H, 512), one query per sequence.
        d = dict(a, q_nope=a["q_nope"][:, 0], q_pe=a["q_pe"][:, 0])
        o, lse = call_decode(d, return_lse=True)
        assert o.shape == (3, 16, 512) and lse.shape == (3, 16)
        out = torch.empty(3, 16, 512, dtype=bf16, device="cuda")
        assert call_decode(d, out=out) is out
        # FlashMLA's: (out, softmax_lse (B, H, Sq)).
        o, lse = fa4jit.mla_with_kvcache(*kvcache_args(a), softmax_scale=SCALE, causal=True)
        assert o.shape == (3, 2, 16, 512) and lse.shape == (3, 16, 2)


def _decode_block(q_nope, q_pe, buf, table, lengths, kpe_other):
    """Three calls: caches sliced from one buffer, separate caches, and FlashMLA's form."""
    o1 = fa4jit.mla_decode(q_nope, q_pe, buf[..., :512], buf[..., 512:], table, lengths, softmax_scale=SCALE,
                           causal=True)
    o2, lse = fa4jit.mla_decode(q_nope, q_pe, buf[..., :512], kpe_other, table, lengths, softmax_scale=SCALE,
                                return_lse=True)
    o3, lse3 = fa4jit.mla_with_kvcache(torch.cat([q_nope, q_pe], -1), buf.unsqueeze(2), table, lengths,
                                       softmax_scale=SCALE, causal=True)
    return o1 + o2 + o3, lse, lse3


def _block_inputs():
    a = decode_args(device="cuda")
    kpe_other = latent_buffer(12, 16, device="cuda", width=64)
    return a["q_nope"], a["q_pe"], a["buffer"], a["page_table"], a["cache_seqlens"], kpe_other


def test_torch_compile_fullgraph_no_graph_break(fake):
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm.code)
        return gm.forward

    torch._dynamo.reset()
    with fake:
        args = _block_inputs()
        explain = torch._dynamo.explain(_decode_block)(*args)
        assert explain.graph_break_count == 0 and explain.graph_count == 1, explain
        o, lse, lse3 = torch.compile(_decode_block, backend=backend, fullgraph=True)(*args)
        assert o.shape == (3, 2, 16, 512) and lse.shape == (3, 2, 16) and lse3.shape == (3, 16, 2)
    # The one-buffer test runs at run time inside the MLA op (dynamo sees no storages); FlashMLA's form
    # is attention_paged's own op.
    assert graphs[-1].count("torch.ops.fa4jit.mla_decode_out(") == 2, graphs[-1]
    assert graphs[-1].count("torch.ops.fa4jit.fwd(") == 1, graphs[-1]


def test_torch_compile_dynamic_one_graph_for_batches_and_varlen_queries(fake):
    from torch._dynamo.testing import CompileCounter
    torch._dynamo.reset()
    counter = CompileCounter()

    def f(q_nope, q_pe, buf, table, lengths, cu, out):
        o = fa4jit.mla_decode(q_nope, q_pe, buf[..., :512], buf[..., 512:], table, lengths, softmax_scale=SCALE,
                              cu_seqlens_q=cu, max_seqlen_q=4, causal=True)
        return o, fa4jit.mla_decode(q_nope[:cu.shape[0] - 1], q_pe[:cu.shape[0] - 1], buf[..., :512],
                                    buf[..., 512:], table, lengths, softmax_scale=SCALE, out=out, return_lse=True)

    compiled = torch.compile(f, backend=counter, fullgraph=True, dynamic=True)
    with fake:
        for B in (3, 5, 7):  # one graph for every batch and number of queries (sizes avoid coincidences)
            total = 3 * B - 2
            q_nope = torch.empty(total, 16, 512, dtype=bf16, device="cuda")
            q_pe = torch.empty(total, 16, 64, dtype=bf16, device="cuda")
            buf = latent_buffer(40, 64, device="cuda")
            table = torch.empty(B, 9, dtype=torch.int32, device="cuda")
            lengths = torch.empty(B, dtype=torch.int32, device="cuda")
            cu = torch.empty(B + 1, dtype=torch.int32, device="cuda")
            out = torch.empty(B, 16, 512, dtype=bf16, device="cuda")
            o, (o1, lse1) = compiled(q_nope, q_pe, buf, table, lengths, cu, out)
            assert o.shape == (total, 16, 512) and o1 is out and lse1.shape == (B, 16)
    assert counter.frame_count == 1, f"recompiled: {counter.frame_count} frames for 3 batches"


def test_make_fx_graph_holds_the_attention_op(fake):
    from torch.fx.experimental.proxy_tensor import make_fx
    with fake, copy_warning(True):  # eager tracing sees the storages: the separate caches are copied
        g = make_fx(_decode_block, tracing_mode="fake")(*_block_inputs())
    assert g.code.count("torch.ops.fa4jit.fwd.default") == 3


# ---- what reaches attention_paged: values against a float64 reference ---------------------------------

def attend_ref(q, keys, values, scale, causal):
    """q (Sq, H, 576) of one sequence over its keys (n, 576) and values (n, 512), float64, bottom-right
    causal. Returns (o (Sq, H, 512), lse (Sq, H)); a query that sees no key gets O = 0, LSE = -inf."""
    Sq, n = q.shape[0], keys.shape[0]
    s = torch.einsum("qhd,kd->qhk", q.double(), keys.double()) * scale
    if causal:
        visible = torch.arange(n).view(1, n) <= torch.arange(Sq).view(Sq, 1) + (n - Sq)
        s = s.masked_fill(~visible.view(Sq, 1, n), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse)).unsqueeze(-1))
    return torch.einsum("qhk,kd->qhd", p, values.double()), lse


@pytest.fixture
def engine(monkeypatch):
    """attention_paged replaced by a float64 CPU stand-in that checks the MLA contract (v is k's prefix
    view, one KV head, packed heads); CPU tensors pass mla's CUDA check. .calls: the k of each call."""
    calls = []

    def paged(q, k_cache, v_cache, page_table, seqused_k, causal=False, cu_seqlens_q=None, max_seqlen_q=None,
              softmax_scale=None, num_splits=0, pack_gqa=None, return_lse=False, out=None, descale_k=None,
              descale_v=None, page_descale=None):
        assert k_cache.shape[2:] == (1, 576) and v_cache.shape == (*k_cache.shape[:3], 512)
        # An FP8 cache's factors: one float32 (B, 1) tensor for K and V (one cache), contiguous.
        assert descale_k is descale_v
        assert descale_k is None or (k_cache.dtype == torch.float8_e4m3fn and descale_k.dtype == torch.float32
                                     and descale_k.shape == (page_table.shape[0], 1) and descale_k.is_contiguous())
        assert v_cache.stride() == k_cache.stride() and pack_gqa is True and softmax_scale == SCALE
        varlen = cu_seqlens_q is not None
        B = page_table.shape[0]
        o = torch.empty((*q.shape[:-1], 512), dtype=q.dtype)
        lse = torch.empty((q.shape[1], q.shape[0]) if varlen else (B, q.shape[2], q.shape[1]))
        if isinstance(q, FakeTensor):  # the MLA op's fake implementation (compiled calls): shapes only
            return (o, lse) if return_lse else o
        assert v_cache.data_ptr() == k_cache.data_ptr()
        calls.append(dict(k=k_cache, num_splits=num_splits, descale=descale_k, page_descale=page_descale))
        for b in range(B):
            rows = slice(int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1])) if varlen else b
            n = int(seqused_k[b])
            pages = page_table[b].long()
            # The kernel reads stored value x factor of the sequence x factor of the page.
            f = (1.0 if descale_k is None else float(descale_k[b, 0])) * (
                1.0 if page_descale is None else page_descale[pages].double().view(-1, 1, 1, 1))
            keys = (k_cache[pages].double() * f).flatten(0, 1)[:n, 0]
            values = (v_cache[pages].double() * f).flatten(0, 1)[:n, 0]
            ob, lb = attend_ref(q[rows], keys, values, softmax_scale, causal)
            o[rows] = ob.to(q.dtype)
            if varlen:
                lse[:, rows] = lb.t().float()
            else:
                lse[b] = lb.t().float()
        if out is not None:
            o = out.copy_(o)
        return (o, lse) if return_lse else o

    monkeypatch.setattr(ops, "attention_paged", paged)
    monkeypatch.setattr(mla, "_require_cuda", lambda name, t: None)
    return calls


def expected(a, causal, cu=None):
    """o (q_nope's shape, 512 columns) and lse (out's shape without the last dimension) computed from
    the caller's own tensors: keys c_kv then k_pe, values c_kv."""
    q = torch.cat([a["q_nope"], a["q_pe"]], -1)
    o = torch.empty((*q.shape[:-1], 512), dtype=torch.float64)
    lse = torch.empty(q.shape[:-1], dtype=torch.float64)
    for b in range(a["page_table"].shape[0]):
        rows = slice(int(cu[b]), int(cu[b + 1])) if cu is not None else b
        pages, n = a["page_table"][b].long(), int(a["cache_seqlens"][b])
        ckv, kpe = a["ckv_cache"][pages].flatten(0, 1)[:n], a["kpe_cache"][pages].flatten(0, 1)[:n]
        o[rows], lse[rows] = attend_ref(q[rows], torch.cat([ckv, kpe], -1), ckv, SCALE, causal)
    return o, lse


def assert_matches(o, lse, ref_o, ref_lse):
    assert o.shape == ref_o.shape and lse.shape == ref_lse.shape
    assert torch.allclose(o.double(), ref_o, atol=1e-2, rtol=1e-2)
    assert torch.equal(torch.isinf(lse), torch.isinf(ref_lse))
    fin = torch.isfinite(ref_lse)
    assert torch.allclose(lse.double()[fin], ref_lse[fin], atol=1e-4)


@pytest.mark.parametrize("separate", [False, True])
@pytest.mark.parametrize("Sq, causal", [(1, False), (4, True)])
def test_decode_passes_the_latent_rows(engine, separate, Sq, causal):
    a = decode_args(Sq=Sq, separate=separate, lengths=(50, 2, 33))  # 2 keys < 4 queries: empty causal rows
    with copy_warning(separate):
        o, lse = call_decode(a, causal=causal, return_lse=True, num_splits=3)
    assert_matches(o, lse, *expected(a, causal))
    k = engine[-1]["k"]
    assert (k.data_ptr() == a["ckv_cache"].data_ptr()) != separate and engine[-1]["num_splits"] == 3
    out = torch.full((3, Sq, 16, 512), float("nan"), dtype=bf16)
    lse_buf = torch.full((3, Sq, 16), float("nan"))
    assert call_decode(a, causal=causal, out=out, lse=lse_buf) is out
    assert_matches(out, lse_buf, *expected(a, causal))


def test_decode_varlen_and_one_query_layouts(engine):
    a = decode_args(Sq=4)
    lens = [1, 4, 3]
    cu = torch.tensor([0, 1, 5, 8], dtype=torch.int32)
    v = dict(a, q_nope=a["q_nope"].flatten(0, 1)[:8], q_pe=a["q_pe"].flatten(0, 1)[:8])
    o, lse = call_decode(v, cu_seqlens_q=cu, max_seqlen_q=max(lens), causal=True, return_lse=True)
    assert_matches(o, lse, *expected(v, True, cu))
    d = dict(a, q_nope=a["q_nope"][:, 0], q_pe=a["q_pe"][:, 0])
    o, lse = call_decode(d, return_lse=True)
    assert_matches(o, lse, *expected(d, False, torch.arange(4, dtype=torch.int32)))


def test_kvcache_passes_the_cache_in_place(engine):
    a = decode_args(Sq=4)
    q, k_cache, table, lengths = kvcache_args(a)
    out = torch.full((3, 4, 16, 512), float("nan"), dtype=bf16)
    o, lse = fa4jit.mla_with_kvcache(q, k_cache, table, lengths, softmax_scale=SCALE, causal=True, out=out)
    ref_o, ref_lse = expected(a, True)
    assert o is out and lse.shape == (3, 16, 4)  # FlashMLA's (B, H, Sq)
    assert_matches(o, lse.transpose(1, 2), ref_o, ref_lse)
    assert engine[-1]["k"] is k_cache


def fp8_args(Sq=2):
    """decode_args over an e4m3 latent cache (one buffer), its queries bf16."""
    a = decode_args(Sq=Sq)
    buf = a["buffer"].to(torch.float8_e4m3fn)
    return dict(a, buffer=buf, ckv_cache=buf[..., :512], kpe_cache=buf[..., 512:])


def dequantized(a, factors):
    """a with its e4m3 caches read as stored value x factors[b] (float64), the reference's inputs: each
    sequence's pages hold its own factor (the tables of decode_args share no page)."""
    ckv, kpe = a["ckv_cache"].double().clone(), a["kpe_cache"].double().clone()
    for b, f in enumerate(factors):
        pages = a["page_table"][b].long()
        ckv[pages] *= f
        kpe[pages] *= f
    return dict(a, ckv_cache=ckv, kpe_cache=kpe)


@pytest.mark.parametrize("form", ["none", "float", "0-d", "(1,)", "(B,)"])
def test_fp8_cache_descale_forms(engine, form):
    """descale_k as FlashMLA takes it ((B,) per sequence) and per cache (a float, a 0-d or 1-element
    tensor), None meaning 1: each reaches the kernel as contiguous float32 (B, 1) factors for K and V."""
    a = fp8_args(Sq=2)
    factors = [0.5, 1.5, 2.0]
    descale = {"none": None, "float": 0.75, "0-d": torch.tensor(1.25), "(1,)": torch.tensor([1.25]),
               "(B,)": torch.tensor(factors)}[form]
    per_seq = {"none": [1.0] * 3, "float": [0.75] * 3, "0-d": [1.25] * 3, "(1,)": [1.25] * 3, "(B,)": factors}[form]
    o, lse = call_decode(a, causal=True, return_lse=True, descale_k=descale)
    assert_matches(o, lse, *expected(dequantized(a, per_seq), True))
    seen = engine[-1]["descale"]
    assert (seen is None) == (descale is None)
    if seen is not None:
        assert seen.flatten().tolist() == per_seq
    q, k_cache, table, lengths = kvcache_args(a)
    o, lse = fa4jit.mla_with_kvcache(q, k_cache, table, lengths, softmax_scale=SCALE, causal=True, descale_k=descale)
    assert_matches(o, lse.transpose(1, 2), *expected(dequantized(a, per_seq), True))


def test_fp8_cache_page_factors_reach_the_kernel(engine):
    """page_descale (float32 (num_pages,)) is passed through as it is, alone or beside descale_k."""
    a = fp8_args(Sq=2)
    pages = a["buffer"].shape[0]
    per_page = torch.linspace(0.5, 2.0, pages)
    ckv, kpe = a["ckv_cache"].double().clone(), a["kpe_cache"].double().clone()
    ckv *= per_page.double().view(-1, 1, 1)
    kpe *= per_page.double().view(-1, 1, 1)
    for descale, per_seq in ((None, [1.0] * 3), (torch.tensor([0.5, 1.5, 2.0]), [0.5, 1.5, 2.0])):
        o, lse = call_decode(a, causal=True, return_lse=True, descale_k=descale, page_descale=per_page)
        assert engine[-1]["page_descale"] is per_page
        assert_matches(o, lse, *expected(dequantized(dict(a, ckv_cache=ckv, kpe_cache=kpe), per_seq), True))
        q, k_cache, table, lengths = kvcache_args(a)
        o, lse = fa4jit.mla_with_kvcache(q, k_cache, table, lengths, softmax_scale=SCALE, causal=True,
                                         descale_k=descale, page_descale=per_page)
        assert engine[-1]["page_descale"] is per_page
        assert_matches(o, lse.transpose(1, 2), *expected(dequantized(dict(a, ckv_cache=ckv, kpe_cache=kpe), per_seq),
                                                          True))
    with pytest.raises(TypeError, match="page_descale: expected a torch.Tensor, got float"):
        call_decode(a, page_descale=2.0)


@pytest.mark.parametrize("change, match", [
    ("bf16_cache", "descale_k is set but the cache is torch.bfloat16"),
    ("negative", "descale_k is -1.0: a positive float"),
    ("bool", "descale_k is True"),
    ("float64", r"descale_k has dtype torch.float64 and shape \(3,\); expected torch.float32"),
    ("batch", r"descale_k has dtype torch.float32 and shape \(2,\)"),
    ("mixed_caches", "kpe_cache has dtype torch.bfloat16 but q_nope has torch.bfloat16 and ckv_cache "
                     "torch.float8_e4m3fn"),
])
def test_fp8_cache_errors_name_the_argument(engine, change, match):
    a, kw = fp8_args(), {"descale_k": torch.ones(3)}
    if change == "bf16_cache":
        a = decode_args()
    elif change == "negative":
        kw["descale_k"] = -1.0
    elif change == "bool":
        kw["descale_k"] = True
    elif change == "float64":
        kw["descale_k"] = torch.ones(3, dtype=torch.float64)
    elif change == "batch":
        kw["descale_k"] = torch.ones(2)
    elif change == "mixed_caches":
        a["kpe_cache"] = a["kpe_cache"].to(bf16)
    with pytest.raises(fa4jit.LaunchError, match=match):
        call_decode(a, **kw)
    assert not engine  # refused before the kernel


def test_compiled_calls_test_the_buffer_at_run_time(engine):
    """Compiled, the one-buffer test runs inside the op on each call's tensors: a graph traced with one
    buffer reads another call's separate caches correctly (and copies them)."""
    torch._dynamo.reset()

    def f(q_nope, q_pe, ckv, kpe, table, lengths):
        return fa4jit.mla_decode(q_nope, q_pe, ckv, kpe, table, lengths, softmax_scale=SCALE, causal=True,
                                 return_lse=True)

    compiled = torch.compile(f, backend="eager", fullgraph=True)
    a = decode_args(Sq=4)
    args = [a[n] for n in ("q_nope", "q_pe", "ckv_cache", "kpe_cache", "page_table", "cache_seqlens")]
    assert_matches(*compiled(*args), *expected(a, True))
    assert engine[-1]["k"].data_ptr() == a["ckv_cache"].data_ptr()
    other = latent_buffer(12, 16)[..., 512:]  # another buffer's rope rows, same shapes, strides and offset
    b = dict(a, kpe_cache=other)
    with copy_warning(True):
        r = compiled(*args[:3], other, *args[4:])
    assert_matches(*r, *expected(b, True))
    assert engine[-1]["k"].is_contiguous()
