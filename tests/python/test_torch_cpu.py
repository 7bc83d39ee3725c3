"""The torch layer without a GPU: argument errors before any launch, and tracing with fake CUDA
tensors (FakeTensorMode needs no device): shapes, strides, torch.compile(fullgraph=True) with no
graph break, make_fx graphs holding the custom ops."""
import json

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (the torch-layer tests need it)")
import fa4jit  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

bf16 = torch.bfloat16


@pytest.fixture
def fake():
    return FakeTensorMode()


def qkv(B=2, Sq=128, Sk=256, Hq=8, Hkv=2, D=64, dtype=bf16, device="cuda"):
    return (torch.empty(B, Sq, Hq, D, dtype=dtype, device=device), torch.empty(B, Sk, Hkv, D, dtype=dtype, device=device),
            torch.empty(B, Sk, Hkv, D, dtype=dtype, device=device))


def test_torch_ops_are_registered():
    assert hasattr(torch.ops.fa4jit, "fwd") and hasattr(torch.ops.fa4jit, "fwd_out")
    assert "Tensor(a3!) out" in str(torch.ops.fa4jit.fwd_out.default._schema)
    # The FP8 descale factors (appended last) default to None: calls written before them still work.
    for op in (torch.ops.fa4jit.fwd, torch.ops.fa4jit.fwd_out):
        schema = str(op.default._schema)
        for name in ("descale_q", "descale_k", "descale_v"):
            assert f"Tensor? {name}=None" in schema, schema


def test_ops_called_without_descale_arguments(fake):
    with fake:
        q, k, v = qkv()
        o, lse = torch.ops.fa4jit.fwd(q, k, v, None, None, None, None, None, None, [], [], "", True, -2, -2, 0, "", "",
                                      "", 0.0, 0.0, 0, 1, -1, True, False)
        assert o.shape == q.shape and o.dtype == bf16 and lse.shape == (2, 8, 128)
        torch.ops.fa4jit.fwd_out(q, k, v, torch.empty_like(q), None, None, None, None, None, None, None, [], [], "",
                                 True, -2, -2, 0, "", "", "", 0.0, 0.0, 0, 1, -1)


def test_cpu_tensors_are_refused_naming_the_argument():
    q, k, v = qkv(device="cpu")
    with pytest.raises(fa4jit.LaunchError, match="q is on cpu"):
        fa4jit.attention(q, k, v)


def test_meta_tensors_are_refused():
    q, k, v = qkv(device="meta")
    with pytest.raises(fa4jit.LaunchError, match="q is on meta"):
        fa4jit.attention(q, k, v, causal=True)


@pytest.mark.parametrize("case, match", [
    ("k_cpu", "k is on cpu, q on cuda"),
    ("v_dtype", "v has dtype torch.float16 but q has torch.bfloat16"),
    ("q_float", "q has dtype torch.float32"),
    ("head_dim_stride", r"q.stride\[3\] is 2: head_dim must be contiguous"),
    ("odd_stride", r"k.stride\[1\] = 132 must be a non-negative multiple of 8 elements"),
    ("head_dim", "k has head_dim 128, q has 64"),
    ("kv_shape", r"k \(2, 256, 2, 64\) and v \(2, 200, 2, 64\)"),
    ("gqa", "q has 8 heads, k/v 3"),
    ("batch", "q has batch 2, k/v 3"),
    ("dims", "q has 3 dimensions"),
    ("sinks", "sinks has shape"),
    ("out_shape", "out has shape"),
    ("aux_cpu", r"aux\[0\] is on cpu"),
    ("aux_many", "at most 4"),
    ("layout", "layout: 'sbhd'"),
    ("window", "window: expected"),
    ("softcap_custom", "softcap: a kernel has one score-mod"),
])
def test_argument_errors(fake, case, match):
    with fake:
        q, k, v = qkv()
        kw = {}
        if case == "k_cpu":
            k = torch.empty(k.shape, dtype=bf16, device="cpu")
        elif case == "v_dtype":
            v = v.half()
        elif case == "q_float":
            q, k, v = q.float(), k.float(), v.float()
        elif case == "head_dim_stride":
            q = torch.empty(2, 128, 8, 128, dtype=bf16, device="cuda")[..., ::2]
        elif case == "odd_stride":
            k = torch.empty(2, 256, 2, 66, dtype=bf16, device="cuda")[..., :64]
        elif case == "head_dim":
            k = torch.empty(2, 256, 2, 128, dtype=bf16, device="cuda")
        elif case == "kv_shape":
            v = torch.empty(2, 200, 2, 64, dtype=bf16, device="cuda")
        elif case == "gqa":
            k = v = torch.empty(2, 256, 3, 64, dtype=bf16, device="cuda")
        elif case == "batch":
            k = v = torch.empty(3, 256, 2, 64, dtype=bf16, device="cuda")
        elif case == "dims":
            q = q[0]
        elif case == "sinks":
            kw["sinks"] = torch.empty(3, device="cuda")
        elif case == "out_shape":
            kw["out"] = torch.empty(2, 128, 8, 32, dtype=bf16, device="cuda")
        elif case == "aux_cpu":
            kw.update(mask_mod="return aux0[q_idx] > 0;", aux=[torch.empty(128, dtype=torch.int32)])
        elif case == "aux_many":
            kw.update(mask_mod="return true;", aux=[torch.empty(4, device="cuda")] * 5)
        elif case == "layout":
            kw["layout"] = "sbhd"
        elif case == "window":
            kw["window"] = 128
        elif case == "softcap_custom":
            kw.update(softcap=30.0, score_mod="return score;")
        with pytest.raises(ValueError, match=match):
            fa4jit.attention(q, k, v, **kw)


def test_fake_shapes_and_layouts(fake):
    with fake:
        q, k, v = qkv()
        o, lse = fa4jit.attention(q, k, v, causal=True, return_lse=True)
        assert o.shape == q.shape and o.dtype == bf16 and o.is_contiguous()
        assert lse.shape == (2, 8, 128) and lse.dtype == torch.float32
        # SDPA's layout: (B, H, S, D) in, (B, H, S, D) out, no copies of the inputs.
        qb, kb, vb = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        ob = fa4jit.attention(qb, kb, vb, layout="bhsd")
        assert ob.shape == qb.shape and ob.is_contiguous()
        out = torch.empty_like(q)
        assert fa4jit.attention(q, k, v, out=out) is out


def test_fake_varlen_and_paged_shapes(fake):
    with fake:
        q = torch.empty(300, 8, 128, dtype=bf16, device="cuda")
        k = torch.empty(500, 2, 128, dtype=bf16, device="cuda")
        cu = torch.empty(4, dtype=torch.int32, device="cuda")
        o, lse = fa4jit.attention_varlen(q, k, k, cu, cu, 200, causal=True, return_lse=True)
        assert o.shape == (300, 8, 128) and lse.shape == (8, 300)
        kc = torch.empty(64, 64, 2, 128, dtype=bf16, device="cuda")
        table = torch.empty(3, 16, dtype=torch.int32, device="cuda")
        used = torch.empty(3, dtype=torch.int32, device="cuda")
        qd = torch.empty(3, 1, 8, 128, dtype=bf16, device="cuda")
        assert fa4jit.attention_paged(qd, kc, kc, table, used, causal=True).shape == (3, 1, 8, 128)
        with pytest.raises(fa4jit.LaunchError, match="page_table"):
            fa4jit.attention_paged(qd, kc, kc, table[:2], used)
        # One sequence's row sliced out of a wider table (vLLM's cascade prefix split): its row stride
        # is never read; two such rows are not max_pages apart and are refused.
        wide = torch.empty(2, 20, dtype=torch.int32, device="cuda")
        assert fa4jit.attention_paged(qd[:1], kc, kc, wide[:1, 4:], used[:1], causal=True).shape == (1, 1, 8, 128)
        with pytest.raises(fa4jit.LaunchError, match="page_table must be contiguous"):
            fa4jit.attention_paged(qd[:2], kc, kc, wide[:, 4:], used[:2])
        with pytest.raises(fa4jit.LaunchError, match="seqused_k has dtype torch.int64"):
            fa4jit.attention_paged(qd, kc, kc, table, used.long())
        with pytest.raises(fa4jit.LaunchError, match="cu_seqlens_q has dtype torch.int64"):
            fa4jit.attention_varlen(q, k, k, cu.long(), cu, 200)
        # max_seqlen_k: a hint (any length is correct), but not a negative one
        assert fa4jit.attention_varlen(q, k, k, cu, cu, 200, 100).shape == (300, 8, 128)
        with pytest.raises(fa4jit.LaunchError, match="max_seqlen_k is -1"):
            fa4jit.attention_varlen(q, k, k, cu, cu, 200, -1)
        with pytest.raises(fa4jit.LaunchError, match="max_seqlen_k is -5"):
            fa4jit.attention_paged(qd, kc, kc, table, used, max_seqlen_k=-5)


def test_block_mask_tile_map_checks(fake):
    """A BlockMask reaches the ops as their block_mask (the run-time tile map), checked before launch:
    dtype, rank, broadcast dimensions, and blocks covering every query and key (read without bounds)."""
    with fake:
        q, k, v = qkv(B=2, Sq=300, Sk=500, Hq=4, Hkv=4)
        ok = fa4jit.BlockMask(torch.empty(2, 1, 3, 4, dtype=torch.uint8, device="cuda"), 128, (300, 500))
        assert fa4jit.attention(q, k, v, mask_mod="return true;", block_mask_mod=ok).shape == q.shape
        a = torch.empty(1, 4, 5, 8, dtype=torch.uint8, device="cuda")
        assert fa4jit.attention(q, k, v, mask_mod="return true;", block_mask_mod=fa4jit.BlockMask(a, 64, (300, 500))
                                ).shape == q.shape
        for classes, size, match in (
                (torch.empty(2, 1, 2, 4, dtype=torch.uint8, device="cuda"), 128, r">= 3, >= 4"),  # rows short
                (torch.empty(2, 1, 3, 3, dtype=torch.uint8, device="cuda"), 128, r">= 3, >= 4"),  # keys short
                (torch.empty(3, 1, 3, 4, dtype=torch.uint8, device="cuda"), 128, r"1 or 2, 1 or 4"),
                (torch.empty(2, 2, 3, 4, dtype=torch.uint8, device="cuda"), 128, r"1 or 2, 1 or 4"),
                (torch.empty(2, 1, 4, 3, dtype=torch.uint8, device="cuda").transpose(2, 3), 128, "contiguous")):
            bm = fa4jit.BlockMask(torch.empty(1, 1, 1, 1, dtype=torch.uint8, device="cuda"), size, (300, 500))
            bm.classes = classes  # as given (the constructor makes them contiguous)
            with pytest.raises(fa4jit.LaunchError, match=match):
                fa4jit.attention(q, k, v, mask_mod="return true;", block_mask_mod=bm)
        bad = fa4jit.BlockMask(ok.classes, 128, (300, 500))
        bad.classes = ok.classes.int()
        with pytest.raises(fa4jit.LaunchError, match="expected torch.uint8"):
            fa4jit.attention(q, k, v, mask_mod="return true;", block_mask_mod=bad)
        bad = fa4jit.BlockMask(ok.classes, 128, (300, 500))
        bad.BLOCK_SIZE = (0, 128)
        with pytest.raises(fa4jit.LaunchError, match="block sizes must be positive"):
            fa4jit.attention(q, k, v, mask_mod="return true;", block_mask_mod=bad)


def test_snippet_aux_errors_at_trace_time(fake):
    with fake:
        q, k, v = qkv()
        ids = torch.empty(256, dtype=torch.int32, device="cuda")
        with pytest.raises(fa4jit.ConfigError, match="pass aux as a dict"):
            fa4jit.attention(q, k, v, mask_mod="return x[q_idx] == y[kv_idx];", aux=[ids])
        with pytest.raises(fa4jit.ConfigError, match="not a C\\+\\+ identifier"):
            fa4jit.attention(q, k, v, mask_mod="return true;", aux={"not valid": ids})


def _block(q, k, v, doc, bias, s):
    o = fa4jit.attention(q, k, v, causal=True)
    o = o + fa4jit.attention(q, k, v, window=(64, 0), softcap=30.0, sinks=s)
    o = o + fa4jit.attention(q, k, v, score_mod="return score + aux[0][h] * (kv_idx - q_idx);", aux=[bias])
    o = o + fa4jit.attention(q, k, v, mask_mod="return doc[q_idx] == doc[kv_idx];", aux=[doc])
    o2, lse = fa4jit.attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), layout="bhsd",
                               return_lse=True)
    return o + o2.transpose(1, 2), lse


def _inputs(Sq=128, Sk=256):
    q, k, v = qkv(Sq=Sq, Sk=Sk)
    return (q, k, v, torch.empty(Sk, dtype=torch.int32, device="cuda"), torch.empty(8, device="cuda"),
            torch.empty(8, device="cuda"))


def test_torch_compile_fullgraph_no_graph_break(fake):
    with fake:
        args = _inputs()
        explain = torch._dynamo.explain(_block)(*args)
        assert explain.graph_break_count == 0 and explain.graph_count == 1, explain
        o, lse = torch.compile(_block, backend="eager", fullgraph=True)(*args)
        assert o.shape == args[0].shape and lse.shape == (2, 8, 128)


def test_torch_compile_dynamic_shapes_one_graph(fake):
    torch._dynamo.reset()
    from torch._dynamo.testing import CompileCounter
    counter = CompileCounter()
    f = torch.compile(_block, backend=counter, fullgraph=True, dynamic=True)
    with fake:
        for sq, sk in ((128, 256), (96, 320), (200, 200)):
            o, _ = f(*_inputs(sq, sk))
            assert o.shape[1] == sq
    assert counter.frame_count == 1, f"recompiled: {counter.frame_count} frames for 3 sequence lengths"


def test_make_fx_graph_holds_the_custom_ops(fake):
    from torch.fx.experimental.proxy_tensor import make_fx
    with fake:
        g = make_fx(_block, tracing_mode="fake")(*_inputs())
    code = g.code
    assert code.count("torch.ops.fa4jit.fwd.default") == 5
    assert "return doc[q_idx] == doc[kv_idx];" in code  # snippets are op arguments, verbatim


def test_out_variant_traces_as_a_mutation(fake):
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(q, k, v, out):
        return fa4jit.attention(q, k, v, causal=True, out=out)

    with fake:
        q, k, v = qkv()
        g = make_fx(f, tracing_mode="fake")(q, k, v, torch.empty_like(q))
    assert "torch.ops.fa4jit.fwd_out.default" in g.code


def test_out_with_grad_is_refused(fake):
    with fake:
        q, k, v = qkv()
        q.requires_grad_(True)
        with pytest.raises(RuntimeError, match="forward only"):
            fa4jit.attention(q, k, v, out=torch.empty_like(q.detach()))


def test_eager_calls_skip_the_dispatcher_only_when_nothing_observes_them(fake):
    from fa4jit import ops
    t = torch.empty(1, 8, 1, 64, dtype=bf16)
    assert ops._eager(t, t, t, None)  # plain tensors, eager, nothing to record
    assert not ops._eager(t.requires_grad_(True), t, t, None)  # autograd must see the op
    with torch.no_grad():
        assert ops._eager(t, t, t, None)
    with fake:
        f = torch.empty(1, 8, 1, 64, dtype=bf16, device="cuda")
        assert not ops._eager(f, f, f, None)  # a dispatch mode is active: through torch.ops


@pytest.fixture
def no_gpu_launch(monkeypatch):
    """The real launch path with CPU tensors standing in for CUDA ones: kernels compile for sm_90a,
    the arguments are packed and checked by the library, and the launch stops at the missing driver."""
    from fa4jit import ops
    if fa4jit.runtime_info()["gpus"]:
        pytest.skip("a GPU is present: test_gpu.py runs the real launches")
    check = ops._check_qkv

    def check_on_cpu(a):
        # The device rule is the only one a CPU tensor breaks: check the rest on a fake-CUDA copy.
        with FakeTensorMode() as m:
            conv = lambda t: None if t is None else (  # noqa: E731
                [conv(x) for x in t] if isinstance(t, list) else m.from_tensor(t).to("cuda") if isinstance(t, torch.Tensor) else t)
            return check(type(a)(*[conv(x) for x in a]))

    monkeypatch.setattr(ops, "_check_qkv", check_on_cpu)
    monkeypatch.setattr(ops, "_kernels", {})
    monkeypatch.setattr(ops, "_plans", {})
    monkeypatch.setattr(ops, "_seen", set())
    monkeypatch.setattr(ops, "_arch", lambda dev: "sm_90a")
    monkeypatch.setattr(ops, "_stream", lambda dev: 0)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    return ops


@pytest.fixture
def launches(no_gpu_launch, monkeypatch):
    """no_gpu_launch with fa4jit_launch recorded instead of called: .args holds each launch's packed
    argument struct, .unpack(args) its fields by name, .last() the last launch's fields."""
    from types import SimpleNamespace

    from fa4jit import _lib
    rec = SimpleNamespace(args=[], names=_lib.field_names())
    monkeypatch.setattr(_lib, "fa4jit_launch", lambda handle, args, stream: rec.args.append(args) or 0)
    rec.unpack = lambda args: dict(zip(rec.names, _lib.LAUNCH_ARGS.unpack(args)))
    rec.last = lambda: rec.unpack(rec.args[-1])
    return rec


def test_launch_path_reaches_the_driver(no_gpu_launch):
    q = torch.randn(2, 64, 8, 64).to(bf16)
    k = torch.randn(2, 96, 2, 64).to(bf16)
    ids = torch.arange(96, dtype=torch.int32)
    cases = [
        dict(causal=True, num_splits=1),
        dict(window=(16, 0), softcap=5.0, sinks=torch.zeros(8), return_lse=True, num_splits=1),
        dict(causal=True, chunk_size=32, mask_mod="return doc[q_idx] == doc[kv_idx];", aux={"doc": ids},
             score_mod="return score * scalars[0];", scalars=[0.5], num_splits=1),
        dict(score_mod="alibi", alibi_slopes=torch.ones(8), num_splits=1, pack_gqa=True),
        dict(causal=True),  # num_splits 0: the workspace query reaches the driver first
    ]
    for kw in cases:
        with pytest.raises(fa4jit.DriverError, match="no CUDA driver"):
            fa4jit.attention(q, k, k, **kw)
    cu = torch.tensor([0, 30, 128], dtype=torch.int32)
    with pytest.raises(fa4jit.DriverError, match="no CUDA driver"):
        fa4jit.attention_varlen(q.reshape(128, 8, 64), k.reshape(192, 2, 64), k.reshape(192, 2, 64), cu,
                                torch.tensor([0, 100, 192], dtype=torch.int32), 98, causal=True, num_splits=1)
    kc = torch.randn(6, 64, 2, 64).to(bf16)
    table = torch.tensor([[0, 1, 2], [3, 4, 5]], dtype=torch.int32)
    with pytest.raises(fa4jit.DriverError, match="no CUDA driver"):
        fa4jit.attention_paged(q[:, :1], kc, kc, table, torch.tensor([100, 192], dtype=torch.int32), causal=True,
                               num_splits=1)
    # One kernel per distinct variant, compiled for sm_90a and cached: causal (also varlen), window +
    # softcap, chunked + custom, packed ALiBi, packed causal (paged decode: Sq x group <= 128).
    keys = list(no_gpu_launch._kernels)
    assert len(keys) == 5, keys
    assert sum(1 for k in keys if k.pack) == 2  # packed


def test_repeated_calls_reuse_the_plan_and_patch_only_pointers(no_gpu_launch, launches, monkeypatch):
    """A second eager call with the same signature skips the checks and the packing (the plan of the
    first call) but launches with its own tensors' pointers and its own outputs."""
    ops = no_gpu_launch
    launched, names, unpack = launches.args, launches.names, launches.unpack
    made = []
    make = ops._make_plan
    monkeypatch.setattr(ops, "_make_plan", lambda *a, **kw: made.append(1) or make(*a, **kw))
    pointers = ("q.data", "k.data", "v.data", "o.data", "lse")

    def calls(fn, make_args, check):
        # The first call of a signature runs the general path, the second makes its plan, the later
        # ones reuse it.
        made.clear()
        launched.clear()
        results = []
        for i in range(4):
            args = make_args()
            results.append((args, fn(*args)))
            if i == 1:
                n = len(made)
        assert len(made) == n and len(launched) == 4
        packed = [unpack(a) for a in launched]
        assert all({n for n in names if p[n] != packed[0][n]} <= set(pointers) for p in packed)
        for (args, result), p in zip(results, packed):
            check(args, result, p)

    q0 = torch.randn(2, 64, 8, 64).to(bf16)
    k0 = torch.randn(2, 96, 2, 64).to(bf16)

    def dense(args, result, packed):
        q, k, v = args
        o, lse = result
        assert o.shape == q.shape and o.is_contiguous() and lse.shape == (2, 8, 64) and lse.is_contiguous()
        assert (packed["q.data"], packed["k.data"], packed["v.data"], packed["o.data"], packed["lse"]) == (
            q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr())
    calls(lambda q, k, v: fa4jit.attention(q, k, v, causal=True, num_splits=1, return_lse=True),
          lambda: (q0.clone(), k0.clone(), k0.clone()), dense)

    def bhsd(args, result, packed):  # SDPA's layout in and out; the struct holds the (B, S, H, D) views
        q, k, v = args
        assert result.shape == q.shape and result.is_contiguous()
        assert packed["o.data"] == result.data_ptr() and packed["q.data"] == q.data_ptr()
        assert (packed["q.shape[1]"], packed["q.stride[1]"], packed["o.stride[2]"]) == (64, 64, 64 * 64)
    calls(lambda q, k, v: fa4jit.attention(q, k, v, layout="bhsd", num_splits=1),
          lambda: (q0.transpose(1, 2).contiguous(), k0.transpose(1, 2).contiguous(), k0.transpose(1, 2).contiguous()),
          bhsd)

    cu = torch.tensor([0, 30, 128], dtype=torch.int32)
    cuk = torch.tensor([0, 100, 192], dtype=torch.int32)

    def varlen(args, result, packed):
        q = args[0]
        assert result.shape == q.shape and result.is_contiguous() and packed["o.data"] == result.data_ptr()
        assert (packed["cu_seqlens_q"], packed["batch"], packed["max_seqlen_q"], packed["max_seqlen_k"]) == (
            cu.data_ptr(), 2, 98, 100)
    calls(lambda q, k, v: fa4jit.attention_varlen(q, k, v, cu, cuk, 98, 100, causal=True, num_splits=1),
          lambda: (q0.reshape(128, 8, 64).clone(), k0.reshape(192, 2, 64).clone(), k0.reshape(192, 2, 64).clone()),
          varlen)

    kc = torch.randn(6, 64, 2, 64).to(bf16)
    table = torch.tensor([[0, 1, 2], [3, 4, 5]], dtype=torch.int32)
    used = torch.tensor([100, 192], dtype=torch.int32)

    def paged(args, result, packed):
        assert result.shape == args[0].shape and packed["o.data"] == result.data_ptr()
        assert (packed["page_table"], packed["seqused_k"], packed["max_pages"]) == (table.data_ptr(), used.data_ptr(), 3)
    calls(lambda q, k, v: fa4jit.attention_paged(q, k, v, table, used, causal=True, num_splits=1),
          lambda: (q0[:, :1].clone(), kc.clone(), kc.clone()), paged)

    # Still checked per call once a signature is cached: the alignment of the pointers, before a launch ...
    q, k = q0.clone(), k0.clone()
    fa4jit.attention(q, k, k, causal=True, num_splits=1)
    fa4jit.attention(q, k, k, causal=True, num_splits=1)
    assert isinstance(ops._plans[next(key for key in ops._plans if key[0] == "attention" and key[1] == q.shape)],
                      ops._Plan)
    n = len(launched)
    buf = torch.empty(q.numel() + 8, dtype=bf16)
    q_odd = buf[1:1 + q.numel()].view(q.shape)  # q's shape and strides, 2 bytes off
    with pytest.raises(fa4jit.LaunchError, match=r"q.data_ptr\(\) is not 16-byte aligned"):
        fa4jit.attention(q_odd, k, k, causal=True, num_splits=1)
    # ... and any other change of signature goes through the checks again.
    with pytest.raises(fa4jit.LaunchError, match="v has dtype torch.float16 but q has torch.bfloat16"):
        fa4jit.attention(q, k, k.half(), causal=True, num_splits=1)
    with pytest.raises(fa4jit.LaunchError, match="out has shape"):
        fa4jit.attention(q, k, k, causal=True, num_splits=1, out=q[:, :32])
    assert len(launched) == n


# ---- FP8 (torch.float8_e4m3fn inputs, FlashAttention-3's descale_q / descale_k / descale_v) ----------

fp8 = getattr(torch, "float8_e4m3fn", None)
needs_fp8_dtype = pytest.mark.skipif(fp8 is None, reason="this torch has no float8_e4m3fn")


@needs_fp8_dtype
@pytest.mark.parametrize("case, match", [
    ("descale_on_bf16", "descale_q is set but q has dtype torch.bfloat16: descale factors are for "
                        "torch.float8_e4m3fn inputs only"),
    ("descale_dtype", "descale_k has dtype torch.float16; it must be torch.float32"),
    ("descale_shape", r"descale_v has shape \(2, 8\); expected a contiguous \(2, 2\) \(batch, kv heads\)"),
    ("descale_strided", r"descale_q has shape \(2, 2\); expected a contiguous \(2, 2\)"),
    ("descale_cpu", "descale_q is on cpu, q on cuda"),
    ("descale_list", "descale_k: expected a torch.Tensor, got list"),
    ("mixed_dtypes", "k has dtype torch.bfloat16 but q has torch.float8_e4m3fn"),
    ("stride_8", r"k.stride\[1\] = 136 must be a non-negative multiple of 16 elements \(16 bytes\)"),
    ("out_fp8", "out has dtype torch.float8_e4m3fn; float8_e4m3fn inputs write torch.bfloat16 or torch.float16"),
    ("out_float", "out has dtype torch.float32; float8_e4m3fn inputs write"),
])
def test_fp8_argument_errors(fake, case, match):
    with fake:
        q, k, v = qkv(dtype=fp8)  # B 2, Hkv 2
        kw = {}
        scale = lambda *shape, dtype=torch.float32, device="cuda": torch.empty(*shape, dtype=dtype, device=device)  # noqa: E731
        if case == "descale_on_bf16":
            q, k, v = qkv()
            kw["descale_q"] = scale(2, 2)
        elif case == "descale_dtype":
            kw["descale_k"] = scale(2, 2, dtype=torch.float16)
        elif case == "descale_shape":
            kw["descale_v"] = scale(2, 8)  # per q head: FA3's factors are per KV head
        elif case == "descale_strided":
            kw["descale_q"] = scale(2, 4)[:, ::2]
        elif case == "descale_cpu":
            kw["descale_q"] = scale(2, 2, device="cpu")
        elif case == "descale_list":
            kw["descale_k"] = [[1.0, 1.0], [1.0, 1.0]]
        elif case == "mixed_dtypes":
            k = torch.empty(k.shape, dtype=bf16, device="cuda")
        elif case == "stride_8":
            k = torch.empty(2, 256, 2, 68, dtype=fp8, device="cuda")[..., :64]  # 136-element rows: 8 bytes off
            v = torch.empty(2, 256, 2, 68, dtype=fp8, device="cuda")[..., :64]
        elif case == "out_fp8":
            kw["out"] = torch.empty(q.shape, dtype=fp8, device="cuda")
        elif case == "out_float":
            kw["out"] = torch.empty(q.shape, dtype=torch.float32, device="cuda")
        with pytest.raises((ValueError, TypeError), match=match):
            fa4jit.attention(q, k, v, **kw)


@needs_fp8_dtype
def test_fp8_fake_shapes_and_output_dtypes(fake):
    with fake:
        q, k, v = qkv(dtype=fp8)
        d = [torch.empty(2, 2, device="cuda") for _ in range(3)]
        o, lse = fa4jit.attention(q, k, v, causal=True, return_lse=True, descale_q=d[0], descale_k=d[1],
                                  descale_v=d[2])
        assert o.shape == q.shape and o.dtype == bf16 and o.is_contiguous()  # FP8 in, bf16 out by default
        assert lse.shape == (2, 8, 128) and lse.dtype == torch.float32
        out = torch.empty(q.shape, dtype=torch.float16, device="cuda")
        assert fa4jit.attention(q, k, v, out=out, descale_k=d[1]) is out  # fp16 out: the caller's
        qb, kb, vb = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        ob = fa4jit.attention(qb, kb, vb, layout="bhsd")
        assert ob.shape == qb.shape and ob.dtype == bf16
        # varlen: one factor row per sequence; paged: per page_table row
        qv = torch.empty(300, 8, 128, dtype=fp8, device="cuda")
        kv = torch.empty(500, 2, 128, dtype=fp8, device="cuda")
        cu = torch.empty(4, dtype=torch.int32, device="cuda")
        d3 = torch.empty(3, 2, device="cuda")
        assert fa4jit.attention_varlen(qv, kv, kv, cu, cu, 200, descale_q=d3).dtype == bf16
        with pytest.raises(fa4jit.LaunchError, match=r"descale_q has shape \(2, 2\); expected a contiguous \(3, 2\)"):
            fa4jit.attention_varlen(qv, kv, kv, cu, cu, 200, descale_q=d[0])
        kc = torch.empty(64, 64, 2, 128, dtype=fp8, device="cuda")
        table = torch.empty(3, 16, dtype=torch.int32, device="cuda")
        used = torch.empty(3, dtype=torch.int32, device="cuda")
        qd = torch.empty(3, 1, 8, 128, dtype=fp8, device="cuda")
        assert fa4jit.attention_paged(qd, kc, kc, table, used, causal=True, descale_v=d3).shape == (3, 1, 8, 128)


@needs_fp8_dtype
def test_fp8_make_fx_graph_carries_the_descale_factors(fake):
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(q, k, v, dq, dk, dv):
        return fa4jit.attention(q, k, v, causal=True, descale_q=dq, descale_k=dk, descale_v=dv)

    with fake:
        q, k, v = qkv(dtype=fp8)
        g = make_fx(f, tracing_mode="fake")(q, k, v, *[torch.empty(2, 2, device="cuda") for _ in range(3)])
    assert "torch.ops.fa4jit.fwd.default(q_1, k_1, v_1, " in g.code
    assert "dq_1, dk_1, dv_1)" in g.code, g.code  # the op's last three arguments, in order


@needs_fp8_dtype
def test_fp8_launch_path_packs_the_descale_pointers(no_gpu_launch, launches):
    """FP8 through the real launch path (kernel compiled for sm_90a, arguments packed): dtype codes,
    the descale pointers at their fields on the first call and on the cached plan's later calls."""
    q = torch.randn(2, 64, 8, 64).to(fp8)
    k = torch.randn(2, 96, 2, 64).to(fp8)
    for i in range(3):
        ds = [torch.rand(2, 2) + 0.5 for _ in range(3)]
        o = fa4jit.attention(q, k, k, causal=True, num_splits=1, descale_q=ds[0], descale_k=ds[1], descale_v=ds[2])
        p = launches.last()
        assert o.dtype == bf16 and p["o.data"] == o.data_ptr()
        assert (p["q.dtype"], p["k.dtype"], p["v.dtype"], p["o.dtype"]) == (2, 2, 2, 0)
        assert (p["descale_q"], p["descale_k"], p["descale_v"]) == tuple(t.data_ptr() for t in ds), i
    o = fa4jit.attention(q, k, k, causal=True, num_splits=1, descale_k=ds[1])  # another signature: only k's
    p = launches.last()
    assert (p["descale_q"], p["descale_k"], p["descale_v"]) == (0, ds[1].data_ptr(), 0)
    keys = [key for key in no_gpu_launch._kernels if key.dtype == "e4m3"]
    assert keys and all(key.out_dtype == "bf16" for key in keys), list(no_gpu_launch._kernels)


@needs_fp8_dtype
def test_fp8_launch_path_reaches_the_driver(no_gpu_launch):
    # The library's own checks (dtypes, 16-element strides, descale on an e4m3 kernel) pass: the
    # launch stops at the missing driver; an fp16 out builds the kernel with output_dtype fp16.
    q = torch.randn(2, 64, 8, 64).to(fp8)
    k = torch.randn(2, 96, 2, 64).to(fp8)
    ds = torch.ones(2, 2)
    for kw in (dict(causal=True, num_splits=1, descale_q=ds, descale_k=ds, descale_v=ds),
               dict(num_splits=1, out=torch.empty(q.shape, dtype=torch.float16)),
               dict(window=(16, 0), sinks=torch.zeros(8), return_lse=True, num_splits=1, descale_v=ds)):
        with pytest.raises(fa4jit.DriverError, match="no CUDA driver"):
            fa4jit.attention(q, k, k, **kw)
    assert {key.out_dtype for key in no_gpu_launch._kernels if key.dtype == "e4m3"} == {"bf16", "fp16"}


# ---- FP8 KV cache (bf16/fp16 q, torch.float8_e4m3fn k and v: "kv_dtype": "e4m3") ------------------

def kv8(B=2, Sq=128, Sk=256, Hq=8, Hkv=2, D=128, dtype=bf16, device="cuda"):
    """A 16-bit q and e4m3 k, v (an FP8 KV cache)."""
    q, _, _ = qkv(B, Sq, Sk, Hq, Hkv, D, dtype, device)
    return q, torch.empty(B, Sk, Hkv, D, dtype=fp8, device=device), torch.empty(B, Sk, Hkv, D, dtype=fp8, device=device)


@needs_fp8_dtype
@pytest.mark.parametrize("case, match", [
    ("descale_q", "descale_q is set but q has dtype torch.bfloat16: descale factors are for torch.float8_e4m3fn "
                  "inputs only \\(with an FP8 KV cache q is 16-bit: pass descale_k / descale_v only"),
    ("descale_q_fp16", "descale_q is set but q has dtype torch.float16: .*FP8 KV cache"),
    ("k_fp8_v_bf16", "v has dtype torch.bfloat16 but k has torch.float8_e4m3fn: an FP8 KV cache needs k and v both "
                     "torch.float8_e4m3fn \\(q torch.bfloat16\\)"),
    ("k_bf16_v_fp8", "k has dtype torch.bfloat16 but v has torch.float8_e4m3fn: an FP8 KV cache"),
    ("k_fp8_v_fp16", "v has dtype torch.float16 but k has torch.float8_e4m3fn"),
    ("descale_k_on_bf16_k", "descale_k is set but k has dtype torch.bfloat16: descale factors are for "
                            "torch.float8_e4m3fn inputs only"),
    ("descale_k_dtype", "descale_k has dtype torch.float16; it must be torch.float32"),
    ("descale_v_shape", r"descale_v has shape \(2, 8\); expected a contiguous \(2, 2\) \(batch, kv heads\)"),
    ("descale_k_cpu", "descale_k is on cpu, q on cuda"),
    ("kv_stride_8", r"k.stride\[2\] = 136 must be a non-negative multiple of 16 elements \(16 bytes\)"),
    ("v_stride_8", r"v.stride\[2\] = 136 must be a non-negative multiple of 16 elements \(16 bytes\)"),
    ("out_fp8", "out has dtype torch.float8_e4m3fn; expected q's torch.bfloat16"),
    ("out_fp16", "out has dtype torch.float16; expected q's torch.bfloat16"),
    ("q_fp8_kv_bf16", "k has dtype torch.bfloat16 but q has torch.float8_e4m3fn: q, k and v must have one dtype"),
])
def test_kv_fp8_argument_errors(fake, case, match):
    with fake:
        q, k, v = kv8()  # B 2, Hkv 2, D 128
        kw = {}
        scale = lambda *shape, dtype=torch.float32, device="cuda": torch.empty(*shape, dtype=dtype, device=device)  # noqa: E731
        if case == "descale_q":
            kw.update(descale_q=scale(2, 2), descale_k=scale(2, 2))
        elif case == "descale_q_fp16":
            q = q.half()
            kw["descale_q"] = scale(2, 2)
        elif case == "k_fp8_v_bf16":
            v = torch.empty(v.shape, dtype=bf16, device="cuda")
        elif case == "k_bf16_v_fp8":
            k = torch.empty(k.shape, dtype=bf16, device="cuda")
        elif case == "k_fp8_v_fp16":
            v = torch.empty(v.shape, dtype=torch.float16, device="cuda")
        elif case == "descale_k_on_bf16_k":
            q, k, v = qkv(D=128)
            kw["descale_k"] = scale(2, 2)
        elif case == "descale_k_dtype":
            kw["descale_k"] = scale(2, 2, dtype=torch.float16)
        elif case == "descale_v_shape":
            kw["descale_v"] = scale(2, 8)
        elif case == "descale_k_cpu":
            kw["descale_k"] = scale(2, 2, device="cpu")
        elif case == "kv_stride_8":  # heads of 136 e4m3 elements: 16-byte steps of a 16-bit type, not of e4m3
            k = torch.empty(2, 256, 2, 136, dtype=fp8, device="cuda")[..., :128]
            v = torch.empty(2, 256, 2, 136, dtype=fp8, device="cuda")[..., :128]
        elif case == "v_stride_8":
            v = torch.empty(2, 256, 2, 136, dtype=fp8, device="cuda")[..., :128]
        elif case == "out_fp8":
            kw["out"] = torch.empty(q.shape, dtype=fp8, device="cuda")
        elif case == "out_fp16":
            kw["out"] = torch.empty(q.shape, dtype=torch.float16, device="cuda")
        elif case == "q_fp8_kv_bf16":
            q = torch.empty(q.shape, dtype=fp8, device="cuda")
            k, v = torch.empty(k.shape, dtype=bf16, device="cuda"), torch.empty(v.shape, dtype=bf16, device="cuda")
        with pytest.raises((ValueError, TypeError), match=match):
            fa4jit.attention(q, k, v, **kw)


@needs_fp8_dtype
def test_kv_fp8_strides_are_checked_in_each_tensors_own_elements(fake):
    # q bf16 with 8-element (16-byte) steps passes; e4m3 k/v need 16-element (16-byte) steps.
    with fake:
        q = torch.empty(2, 128, 8, 136, dtype=bf16, device="cuda")[..., :128]  # 272-byte heads: fine for bf16
        k = torch.empty(2, 256, 2, 144, dtype=fp8, device="cuda")[..., :128]  # 144-byte rows: fine for e4m3
        o = fa4jit.attention(q, k, k, descale_k=torch.empty(2, 2, device="cuda"))
        assert o.shape == q.shape and o.dtype == bf16


@needs_fp8_dtype
@pytest.mark.parametrize("dtype", [bf16, torch.float16])
def test_kv_fp8_fake_shapes_and_output_dtype_is_qs(fake, dtype):
    with fake:
        q, k, v = kv8(dtype=dtype)
        d = torch.empty(2, 2, device="cuda")
        o, lse = fa4jit.attention(q, k, v, causal=True, return_lse=True, descale_k=d, descale_v=d)
        assert o.shape == q.shape and o.dtype == dtype and o.is_contiguous()  # O in q's dtype
        assert lse.shape == (2, 8, 128) and lse.dtype == torch.float32
        assert fa4jit.attention(q, k, v).dtype == dtype  # no factors: 1
        out = torch.empty_like(q)
        assert fa4jit.attention(q, k, v, out=out, descale_v=d) is out
        qb, kb, vb = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        ob = fa4jit.attention(qb, kb, vb, layout="bhsd", descale_k=d)
        assert ob.shape == qb.shape and ob.dtype == dtype
        # decode, GQA 32/8: Sq 1 and 16
        for sq in (1, 16):
            qd = torch.empty(3, sq, 32, 128, dtype=dtype, device="cuda")
            kd = torch.empty(3, 2048, 8, 128, dtype=fp8, device="cuda")
            d38 = torch.empty(3, 8, device="cuda")
            od = fa4jit.attention(qd, kd, kd, causal=True, descale_k=d38, descale_v=d38, num_splits=3)
            assert od.shape == qd.shape and od.dtype == dtype
        # varlen: factors per sequence; paged: per page_table row
        qv = torch.empty(300, 8, 128, dtype=dtype, device="cuda")
        kv = torch.empty(500, 2, 128, dtype=fp8, device="cuda")
        cu = torch.empty(4, dtype=torch.int32, device="cuda")
        d3 = torch.empty(3, 2, device="cuda")
        o, lse = fa4jit.attention_varlen(qv, kv, kv, cu, cu, 200, causal=True, descale_k=d3, descale_v=d3,
                                         return_lse=True)
        assert o.shape == qv.shape and o.dtype == dtype and lse.shape == (8, 300)
        with pytest.raises(fa4jit.LaunchError, match=r"descale_k has shape \(2, 2\); expected a contiguous \(3, 2\)"):
            fa4jit.attention_varlen(qv, kv, kv, cu, cu, 200, descale_k=d)
        kc = torch.empty(64, 64, 2, 128, dtype=fp8, device="cuda")
        table = torch.empty(3, 16, dtype=torch.int32, device="cuda")
        used = torch.empty(3, dtype=torch.int32, device="cuda")
        qd = torch.empty(3, 1, 8, 128, dtype=dtype, device="cuda")
        op = fa4jit.attention_paged(qd, kc, kc, table, used, causal=True, descale_k=d3, descale_v=d3,
                                    sinks=torch.empty(8, device="cuda"))
        assert op.shape == (3, 1, 8, 128) and op.dtype == dtype
        with pytest.raises(fa4jit.LaunchError, match="descale_q is set but q has dtype"):
            fa4jit.attention_paged(qd, kc, kc, table, used, descale_q=d3)
        with pytest.raises(fa4jit.LaunchError, match="v has dtype .* but k has torch.float8_e4m3fn"):
            fa4jit.attention_paged(qd, kc, kc.to(dtype), table, used)


@needs_fp8_dtype
def test_kv_fp8_ops_fake_output_dtype_and_make_fx_graph(fake):
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(q, k, v, dk, dv):
        return fa4jit.attention(q, k, v, causal=True, descale_k=dk, descale_v=dv)

    with fake:
        q, k, v = kv8()
        d = torch.empty(2, 2, device="cuda")
        # The op's fake implementation directly: O in q's dtype.
        o, lse = torch.ops.fa4jit.fwd(q, k, v, None, None, None, None, None, None, [], [], "", True, -2, -2, 0, "", "",
                                      "", 0.0, 0.0, 0, 0, -1, True, False, None, d, d)
        assert o.dtype == bf16 and o.shape == q.shape and lse.shape == (2, 8, 128)
        with pytest.raises(fa4jit.LaunchError, match="descale_q is set but q has dtype torch.bfloat16"):
            torch.ops.fa4jit.fwd(q, k, v, None, None, None, None, None, None, [], [], "", True, -2, -2, 0, "", "", "",
                                 0.0, 0.0, 0, 0, -1, False, False, d, None, None)
        out = torch.empty_like(q)
        torch.ops.fa4jit.fwd_out(q, k, v, out, None, None, None, None, None, None, None, [], [], "", True, -2, -2, 0,
                                 "", "", "", 0.0, 0.0, 0, 0, -1, None, d, d)
        g = make_fx(f, tracing_mode="fake")(q, k, v, d, torch.empty(2, 2, device="cuda"))
    assert "torch.ops.fa4jit.fwd.default(q_1, k_1, v_1, " in g.code
    assert "None, dk_1, dv_1)" in g.code, g.code  # no descale_q; the k and v factors last


@needs_fp8_dtype
def test_kv_fp8_compiles_fullgraph(fake):
    def f(q, k, v, dk, dv):
        return fa4jit.attention(q, k, v, causal=True, descale_k=dk, descale_v=dv) + 1

    with fake:
        q, k, v = kv8()
        d = torch.empty(2, 2, device="cuda")
        o = torch.compile(f, backend="eager", fullgraph=True)(q, k, v, d, d)
        assert o.dtype == bf16 and o.shape == q.shape


def _kernel_config(ops, key):
    from fa4jit import _lib
    return json.loads(_lib.call_str(_lib.fa4jit_kernel_info, ops._kernels[key].handle))["config"]


@needs_fp8_dtype
def test_kv_fp8_launch_path_builds_kv_dtype_kernels_and_packs_the_dtypes(no_gpu_launch, launches):
    """An FP8 KV cache through the real launch path (kernels compiled for sm_90a, arguments packed):
    the kernel key and config carry kv_dtype e4m3, a bf16-KV call of the same shapes gets another
    kernel, the dtype codes (q/o 16-bit, k/v e4m3) and descale_k/v pointers reach the struct on the
    first call and on the cached plan's later calls, and descale_q stays 0."""
    ops = no_gpu_launch
    q = torch.randn(2, 64, 8, 128).to(bf16)
    k8 = torch.randn(2, 96, 2, 128).to(fp8)
    for i in range(3):  # general path, plan made, plan reused
        ds = [torch.rand(2, 2) + 0.5 for _ in range(2)]
        o = fa4jit.attention(q, k8, k8, causal=True, num_splits=1, descale_k=ds[0], descale_v=ds[1])
        p = launches.last()
        assert o.dtype == bf16 and o.shape == q.shape and p["o.data"] == o.data_ptr()
        assert (p["q.dtype"], p["k.dtype"], p["v.dtype"], p["o.dtype"]) == (0, 2, 2, 0)
        assert (p["descale_q"], p["descale_k"], p["descale_v"]) == (0, ds[0].data_ptr(), ds[1].data_ptr()), i
    kv_keys = [key for key in ops._kernels if key.kv_dtype == "e4m3"]
    assert len(kv_keys) == 1 and kv_keys[0].dtype == "bf16" and kv_keys[0].out_dtype == "bf16", list(ops._kernels)
    cfg = _kernel_config(ops, kv_keys[0])
    assert (cfg["dtype"], cfg["kv_dtype"], cfg["output_dtype"]) == ("bf16", "e4m3", "bf16")
    # The same shapes with bf16 K/V: another kernel (no kv_dtype), never the e4m3 one.
    kb = k8.to(bf16)
    fa4jit.attention(q, kb, kb, causal=True, num_splits=1)
    assert launches.last()["k.dtype"] == 0
    plain = [key for key in ops._kernels if key.dtype == key.kv_dtype == "bf16"]
    assert len(plain) == 1 and "kv_dtype" not in _kernel_config(ops, plain[0])
    assert plain[0][:2] == kv_keys[0][:2] and plain[0][3:] == kv_keys[0][3:]  # only kv_dtype differs
    # fp16 q: O fp16, its own kernel.
    o = fa4jit.attention(q.half(), k8, k8, causal=True, num_splits=1, descale_k=ds[0])
    p = launches.last()
    assert o.dtype == torch.float16 and (p["q.dtype"], p["k.dtype"], p["o.dtype"]) == (1, 2, 1)
    assert (p["descale_q"], p["descale_k"], p["descale_v"]) == (0, ds[0].data_ptr(), 0)
    assert {(key.dtype, key.out_dtype) for key in ops._kernels if key.kv_dtype == "e4m3"} == {("bf16", "bf16"), ("fp16", "fp16")}
    # descale_q: refused before anything runs, on the general path and once a signature has a plan.
    n = len(launches.args)
    for _ in range(2):
        with pytest.raises(fa4jit.LaunchError, match="descale_q is set but q has dtype torch.bfloat16"):
            fa4jit.attention(q, k8, k8, causal=True, num_splits=1, descale_q=ds[0], descale_k=ds[0])
    with pytest.raises(fa4jit.LaunchError, match="v has dtype torch.bfloat16 but k has torch.float8_e4m3fn"):
        fa4jit.attention(q, k8, kb, causal=True, num_splits=1)
    assert len(launches.args) == n


@needs_fp8_dtype
def test_kv_fp8_paged_varlen_and_packed_decode_reach_the_driver(no_gpu_launch):
    # The library's own checks (k/v e4m3 against kv_dtype, 16-element k/v strides, descale_k/v on a
    # kv_dtype e4m3 kernel) pass for paged GQA 32/8 decode (packed, Sq 1 and 16), varlen prefill and
    # split-KV: each launch stops at the missing driver.
    ops = no_gpu_launch
    Hq, Hkv, D = 32, 8, 128
    kc = torch.randn(12, 64, Hkv, D).to(fp8)
    table = torch.arange(12, dtype=torch.int32).view(3, 4)
    used = torch.tensor([200, 1, 256], dtype=torch.int32)
    d = torch.rand(3, Hkv) + 0.5
    for sq in (1, 16):
        q = torch.randn(3, sq, Hq, D).to(bf16)
        for splits in (1, 0):  # 0: the workspace query reaches the driver first
            with pytest.raises(fa4jit.DriverError, match="no CUDA driver"):
                fa4jit.attention_paged(q, kc, kc, table, used, causal=True, num_splits=splits, descale_k=d,
                                       descale_v=d, sinks=torch.zeros(Hq))
    qv = torch.randn(300, 8, D).to(bf16)
    kv = torch.randn(500, 2, D).to(fp8)
    cu_q = torch.tensor([0, 100, 300], dtype=torch.int32)
    cu_k = torch.tensor([0, 250, 500], dtype=torch.int32)
    with pytest.raises(fa4jit.DriverError, match="no CUDA driver"):
        fa4jit.attention_varlen(qv, kv, kv, cu_q, cu_k, 200, causal=True, num_splits=1, descale_k=torch.ones(2, 2),
                                pack_gqa=False)  # unpacked (automatic: uneven lengths pack)
    keys = [key for key in ops._kernels if key.kv_dtype == "e4m3"]
    assert {(key.pack, key.group) for key in keys} == {(True, 4), (False, 0)}, keys  # decode packs the group of 4


def test_automatic_choice_is_the_librarys_and_packs_uneven_batches_at_sm90a_prefill_tile():
    """ops._choose asks the library (fa4jit_choose_kernel; the rule's cases: tests/kernel_choice_test.cpp):
    decode rows pack; a varlen batch of uneven lengths packs, on sm_90a at its prefill tile (BM 128, 192 at d64;
    d64 to d128 and d256);
    a continuous-batching step keeps decode's tile; one prompt stays unpacked; MHA decode runs sm_90a's
    decode tile unpacked; an explicit pack_gqa wins; other archs keep their default tile."""
    from fa4jit.ops import _choose
    assert _choose("sm_90a", "bf16", "bf16", 128, 128, 7, 1, 0, 1, -1) == (True, 0)  # decode
    assert _choose("sm_90a", "bf16", "bf16", 128, 128, 4, 7000, 8, 16048, -1) == (True, 128)  # uneven prefill batch
    assert _choose("sm_90a", "bf16", "bf16", 128, 128, 4, 2048, 50, 48 + 2 * 2048, -1) == (True, 0)  # mixed step
    assert _choose("sm_90a", "bf16", "bf16", 128, 128, 4, 2048, 0, 2048, -1) == (False, 0)  # one prompt
    assert _choose("sm_90a", "bf16", "bf16", 128, 128, 4, 2048, 0, 2048, 1) == (True, 128)  # pack_gqa=True
    assert _choose("sm_90a", "bf16", "bf16", 128, 128, 4, 1, 0, 1, 0) == (False, 0)  # pack_gqa=False
    assert _choose("sm_90a", "fp16", "fp16", 96, 96, 1, 1, 0, 1, -1) == (False, 64)  # MHA decode
    # an MHA continuous-batching step at head dim 128: the decode tile too (docs/PERF.md run 100); a prefill batch not
    assert _choose("sm_90a", "bf16", "bf16", 128, 128, 1, 2048, 50, 48 + 2 * 2048, -1) == (False, 64)
    assert _choose("sm_90a", "bf16", "bf16", 128, 128, 1, 7000, 8, 16048, -1) == (False, 0)
    assert _choose("sm_90a", "bf16", "e4m3", 128, 128, 4, 7000, 8, 16048, -1) == (True, 0)  # FP8 KV cache
    assert _choose("sm_100a", "bf16", "bf16", 128, 128, 4, 7000, 8, 16048, -1) == (True, 0)
    # gpt-oss's 128-key window (fa4jit_choose_kernel2) at head dim 64: sm_90a's 64-row tile; 4096 keys: the default
    assert _choose("sm_90a", "bf16", "bf16", 64, 64, 8, 16384, 0, 16384, -1, 127, 0, 0) == (False, 64)
    assert _choose("sm_90a", "bf16", "bf16", 64, 64, 8, 16384, 0, 16384, -1, 4095, 0, 0) == (False, 0)
    # its varlen batch: the packed prefill tile (BM 192 at head dim 64), under the 128-key window the 64-row
    # tile unpacked (three CTAs per SM); its continuous-batching step under the window: packed decode's
    assert _choose("sm_90a", "bf16", "bf16", 64, 64, 8, 7000, 8, 16048, -1) == (True, 192)
    assert _choose("sm_90a", "bf16", "bf16", 64, 64, 8, 7000, 8, 16048, -1, 127, 0, 0) == (False, 64)
    assert _choose("sm_90a", "bf16", "bf16", 64, 64, 8, 2048, 50, 48 + 2 * 2048, -1, 127, 0, 0) == (True, 0)
    # Gemma 3 4B's (head dim 256) varlen batch, under its 1024-key window too: the prefill tile (docs/PERF.md run 97),
    assert _choose("sm_90a", "bf16", "bf16", 256, 256, 2, 7000, 8, 16048, -1) == (True, 128)
    assert _choose("sm_90a", "bf16", "bf16", 256, 256, 2, 7000, 8, 16048, -1, 1023, 0, 0) == (True, 128)
    # and its one prompt under that window (run 98); without the window it stays unpacked
    assert _choose("sm_90a", "bf16", "bf16", 256, 256, 2, 16384, 0, 16384, -1, 1023, 0, 0) == (True, 128)
    assert _choose("sm_90a", "bf16", "bf16", 256, 256, 2, 16384, 0, 16384, -1) == (False, 0)
    with pytest.raises(fa4jit.ConfigError, match="choose_kernel: group 0"):
        _choose("sm_90a", "bf16", "bf16", 128, 128, 0, 1, 0, 1, -1)


def test_every_optional_pointer_packs_in_struct_order():
    """A call that passes every optional pointer at once (block_mask with a split's workspace, the
    Flex front end's case) packs them: the fields are in the launch struct's order."""
    from fa4jit import _lib, ops
    fields = [f + "[0]" if f == "aux_ptr" else f for f, _ in ops._POINTERS]
    assert fields == sorted(fields, key=_lib.FIELD_INDEX.__getitem__)
    values = _lib.LAUNCH_ARGS.unpack(bytes(_lib.LAUNCH_ARGS_SIZE))
    patch = _lib.PointerPatch(list(values), ["q.data", "k.data", "v.data", "o.data"] + fields)
    packed = patch.pack([i + 1 for i in range(4 + len(fields))])
    assert len(packed) == _lib.LAUNCH_ARGS_SIZE
    for i, name in enumerate(["q.data", "k.data", "v.data", "o.data"] + fields):
        off = _lib.FIELD_OFFSETS[name]
        assert int.from_bytes(packed[off:off + 8], "little") == i + 1, name


def test_torch_compile_traces_python_mods_that_capture_tensors(fake):
    """A Python mask_mod / score_mod capturing tensors (document ids, a bias table) inside
    torch.compile(fullgraph=True): the mods are traced outside dynamo's fake mode (which refused the
    captured tensors: 'Mixing fake modes', or real ones 'convert all Tensors to FakeTensors first')."""
    torch._dynamo.reset()
    with fake:
        q, k, v = qkv(Sq=128, Sk=128, Hq=4, Hkv=4)
        doc = torch.empty(2, 128, dtype=torch.int32, device="cuda")
        rel = torch.empty(4, 256, device="cuda")

        def docmask(b, h, q_idx, kv_idx):
            return (doc[b, q_idx] == doc[b, kv_idx]) & (q_idx >= kv_idx)

        def relbias(score, b, h, q_idx, kv_idx):
            return score + rel[h, q_idx - kv_idx + 128]

        f = torch.compile(lambda q, k, v: fa4jit.attention(q, k, v, mask_mod=docmask, score_mod=relbias),
                          backend="eager", fullgraph=True)
        assert f(q, k, v).shape == q.shape
