"""fa4jit.flex and fa4jit._trace without a GPU: Python mods traced into CUDA snippets (text, aux typing,
errors naming the operation and line), NVRTC compiles of the traced snippets, tile classes against
brute force, FlexAttention BlockMask conversion, and the automatic tile map's reuse and rebuild."""
import math

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (the torch-layer tests need it)")

import fa4jit  # noqa: E402
from fa4jit import _trace, flex, ops  # noqa: E402


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def sliding(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx - kv_idx <= 100)


def prefix_lm(b, h, q_idx, kv_idx):
    return (kv_idx < 37) | (q_idx >= kv_idx)


def dilated(b, h, q_idx, kv_idx):
    return ((q_idx - kv_idx) % 4 == 0) & (q_idx // 64 >= kv_idx // 64)


def softcap(score, b, h, q_idx, kv_idx):
    return 30.0 * torch.tanh(score / 30.0)


def alibi(score, b, h, q_idx, kv_idx):
    return score - torch.exp2(-(h + 1) * 8.0 / 16) * (q_idx - kv_idx).abs()


def test_traced_mask_snippets():
    assert _trace.trace(causal, "mask").snippet == "const int t0 = q_idx - kv_idx;\nconst bool t1 = t0 >= 0;\nreturn t1;"
    d = _trace.trace(dilated, "mask")
    # Python's floor // and % by powers of two: an arithmetic shift and the low bits
    assert "& 3;" in d.snippet and ">> 6;" in d.snippet and "fa_mod" not in d.snippet
    assert d.uses == {"q_idx", "kv_idx"} and d.aux == {}

    def odd(b, h, q_idx, kv_idx):
        return ((q_idx - kv_idx) % 5 == 1) | ((kv_idx - q_idx) // 3 == -2)
    o = _trace.trace(odd, "mask").snippet
    assert "fa_mod32(" in o and "fa_fdiv32(" in o  # int32 values: 32-bit helpers
    s = _trace.trace(softcap, "score").snippet
    assert "tanh(" in s and s.startswith("const float t0 = score /")
    a = _trace.trace(alibi, "score")
    assert "exp2(" in a.snippet and "abs(" in a.snippet and a.uses == {"score", "h", "q_idx", "kv_idx"}


def test_position_comparisons_share_their_difference():
    """Two positions compare through their difference, emitted once and reused by the window's own
    q_idx - kv_idx (so the compiler folds 0 <= d < W into one unsigned compare); the same
    expression is never emitted twice."""
    w = _trace.trace(sliding, "mask").snippet
    assert w.count("q_idx - kv_idx") == 1 and "const int t0 = q_idx - kv_idx;" in w
    assert "t0 >= 0" in w and "t0) <= 100" in w and ">= kv_idx" not in w

    def twice(b, h, q_idx, kv_idx):
        return ((q_idx - kv_idx) % 2 == 0) & ((q_idx - kv_idx) < 9) & (kv_idx < q_idx) & (h <= b)
    t = _trace.trace(twice, "mask").snippet
    assert t.count("q_idx - kv_idx") == 1 and t.count("kv_idx - q_idx") == 1 and "h - b" in t


def _host_program_output(src: str) -> list:
    """The whitespace-separated output of C++ program src, compiled by the host C++ compiler (the test
    is skipped without one)."""
    import shutil
    import subprocess
    import tempfile
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no host C++ compiler")
    with tempfile.TemporaryDirectory() as d:
        with open(f"{d}/m.cpp", "w") as fh:
            fh.write(src)
        subprocess.run([cxx, "-std=c++17", "-O1", "-o", f"{d}/m", f"{d}/m.cpp"], check=True)
        return subprocess.run([f"{d}/m"], check=True, capture_output=True, text=True).stdout.split()


_HOST_AUX_TYPES = {torch.float32: "float", torch.int32: "int", torch.int64: "long long", torch.int16: "short",
                   torch.bool: "bool", torch.uint8: "unsigned char"}


def _host_values(mod, kind: str, points) -> tuple:
    """(the traced snippet's values, compiled by the host C++ compiler with its aux tensors as arrays
    behind params.aux_ptr as the kernel passes them, torch's values of mod) at points (score, b, h, q,
    kv); score is ignored for a mask."""
    t = _trace.trace(mod, kind)
    aux = list(t.aux.values())
    m, _, s = ops._snippet_texts(aux, ",".join(t.aux), t.snippet if kind == "mask" else "", "",
                                 t.snippet if kind == "score" else "")
    arrays = "".join(f"static const {_HOST_AUX_TYPES[a.dtype]} A{i}[] = {{" +
                     ", ".join(str(int(v)) if not a.is_floating_point() else f"{float(v)!r}f"
                               for v in a.reshape(-1).tolist()) + "};\n" for i, a in enumerate(aux))
    src = ("#include <cstdio>\n#include <cmath>\n#include <algorithm>\nusing namespace std;\n"
           "struct Params { const void* aux_ptr[4]; } params;\n" + arrays +
           f"static double f(float score, int b, int h, int q_idx, int kv_idx) {{ {m or s} }}\n"
           "int main() {\n" + "".join(f"params.aux_ptr[{i}] = A{i};\n" for i in range(len(aux))) +
           "".join(f"std::printf(\"%.9g\\n\", f({sc!r}f, {b}, {h}, {q}, {kv}));\n" for sc, b, h, q, kv in points) + "}\n")
    got = [float(x) for x in _host_program_output(src)]
    i32 = lambda x: torch.tensor(x, dtype=torch.int32)  # noqa: E731
    want = [float(mod(torch.tensor(sc), i32(b), i32(h), i32(q), i32(kv)) if kind == "score" else
                  mod(i32(b), i32(h), i32(q), i32(kv))) for sc, b, h, q, kv in points]
    return got, want


def test_short_vectors_unroll_and_reduce_match_torch_when_compiled():
    """A captured row indexed down to one dimension (positions (S, 3), a rope part (S, 8), a top-k
    list of KV tiles per Q tile) is a short vector: elementwise ops run per element, and sum, dot,
    any, all, amax, amin, mean and prod reduce it (PyTorch's FlexAttention tests and attention-gym:
    a Euclidean distance bias, MLA's rope dot product, top-k tile selection). Compiled by the host
    compiler against torch, and by NVRTC."""
    g = torch.Generator().manual_seed(7)
    pos = torch.randn(64, 3, generator=g)
    q_rope, k_rope = torch.randn(2, 64, 8, generator=g), torch.randn(2, 64, 8, generator=g)
    topk = torch.randint(0, 8, (2, 8, 4), generator=g, dtype=torch.int32)

    def euclid(score, b, h, q_idx, kv_idx):
        return score - (pos[q_idx] - pos[kv_idx]).pow(2).sum(-1).sqrt()

    def rope(score, b, h, q_idx, kv_idx):
        return score + 0.25 * torch.dot(q_rope[b, q_idx], k_rope[b, kv_idx])

    def stats(score, b, h, q_idx, kv_idx):
        d = pos[q_idx] * pos[kv_idx]
        return score + d.amax() - d.amin() + d.mean() + d.prod(0) + (d > 0).all().float()

    def selected(b, h, q_idx, kv_idx):
        return (topk[b, q_idx // 8] == (kv_idx // 8).unsqueeze(-1)).any(dim=-1)

    def of_one_value(score, b, h, q_idx, kv_idx):  # a reduction of one value, or of it expanded
        return score.sum() + (q_idx - kv_idx).float().expand(3).sum() + pos[q_idx, 0].amax()

    gen = torch.Generator().manual_seed(8)
    points = [(float(torch.randn((), generator=gen)), int(torch.randint(0, 2, (), generator=gen)), 0,
               int(torch.randint(0, 64, (), generator=gen)), int(torch.randint(0, 64, (), generator=gen)))
              for _ in range(64)]
    for mod in (euclid, rope, stats, of_one_value):
        got, want = _host_values(mod, "score", points)
        assert all(abs(a - w) <= 1e-5 * abs(w) + 1e-5 for a, w in zip(got, want)), mod.__name__
    got, want = _host_values(selected, "mask", points)
    assert got == want and 0 < sum(want) < len(want)
    assert _trace.trace(euclid, "score").snippet.count("sqrt(") == 1  # three squares summed, one root
    with pytest.raises(fa4jit.ConfigError, match="where one value is expected"):
        _trace.trace(lambda b, h, q_idx, kv_idx: topk[b, q_idx] > 0, "mask")  # a vector as the mask
    report = fa4jit.prewarm([_typed_config(selected, rope)], archs=["sm_90a"])
    assert all(r["status"] in ("compiled", "hit") for r in report), report


def test_powers_of_negative_bases_do_not_use_fast_math_pow():
    """The kernels compile with --use_fast_math, whose pow is exp2(b * log2(a)): NaN for any negative
    a (a GPU run found (pos[q] - pos[kv]).pow(2) NaN). Integral literal exponents are products or the
    signed power of |a|, a captured exponent takes the sign where integral; the values match torch
    (host compiler) over negative and positive bases."""
    expo = torch.tensor([2.0, 3.0, 0.5, 0.0])

    def small(score, b, h, q_idx, kv_idx):
        d = (q_idx - kv_idx) * 0.25
        return score + d.pow(2) - 0.1 * d.pow(3) + 0.01 * (d + 0.1).pow(-2) + 0.001 * d.pow(7)

    def captured(score, b, h, q_idx, kv_idx):
        return score + ((q_idx - kv_idx) * 0.25).pow(expo[h])

    t = _trace.trace(small, "score")
    assert "pow(" not in t.snippet.replace("pow(fabs(", ""), t.snippet  # products and |a|'s power only
    points = [(0.5, 0, h, q, kv) for h in range(4) for q in range(0, 9, 2) for kv in range(0, 9, 3)]
    for mod in (small, captured):
        got, want = _host_values(mod, "score", points)
        pairs = [(a, w) for a, w in zip(got, want) if not math.isnan(w)]
        assert len(pairs) > len(points) // 2 and all(abs(a - w) <= 1e-4 * abs(w) + 1e-4 for a, w in pairs)
        assert all(math.isnan(a) for a, w in zip(got, want) if math.isnan(w))  # a negative base to 0.5
    report = fa4jit.prewarm([_typed_config(None, small), _typed_config(causal, captured)], archs=["sm_90a"])
    assert all(r["status"] in ("compiled", "hit") for r in report), report


def test_views_of_one_tensor_share_its_aux_and_read_it_live():
    """Captured views of one tensor (attention-gym's Graphormer bias: one table sliced per path step)
    are one aux tensor, the base itself (no copy), read at each view's offset and strides: four
    views take one of a kernel's four aux slots, and an in-place write to the base is what the kernel
    reads."""
    g = torch.Generator().manual_seed(3)
    table = torch.randn(4, 5, 6, generator=g)
    steps = [table[:, n] for n in range(5)]  # (4, 6) each, strided
    col = table[2, :, 1]  # (5,), stride 6, offset 2 * 30 + 1

    def path_bias(score, b, h, q_idx, kv_idx):
        total = score + col[kv_idx % 5]
        for n, step in enumerate(steps):
            total = total + step[h, (q_idx + n) % 6]
        return total

    t = _trace.trace(path_bias, "score")
    assert list(t.aux) == ["sc0"] and t.aux["sc0"] is table
    assert "61 + " in t.snippet  # col's offset into the table
    points = [(0.5, 0, h, q, kv) for h in range(4) for q in range(6) for kv in range(0, 10, 3)]
    got, want = _host_values(path_bias, "score", points)
    assert all(abs(a - w) <= 1e-5 * abs(w) + 1e-5 for a, w in zip(got, want))
    table.mul_(2)  # an in-place write: the traced aux is the same memory
    assert torch.equal(_trace.trace(path_bias, "score").aux["sc0"], table)


def test_indices_are_made_on_the_captured_tensors_device():
    """A mod comparing a captured row with an index made a vector (attention-gym's top-k tile
    selection) mixes devices unless the indices are on the captured tensor's: they are made there, as
    FlexAttention's vmap makes them on the query's (the meta device stands for the GPU here, the
    mod's table reached through a closure's function as and_masks / gpt-fast's offsets hold it)."""
    topk = torch.zeros(2, 4, 3, dtype=torch.int32, device="meta")

    def selected(b, h, q_idx, kv_idx):
        return (topk[b, q_idx // 128] == (kv_idx // 128).unsqueeze(-1)).any(dim=-1)

    def wrapped(inner):
        def mod(b, h, q_idx, kv_idx):
            return inner(b, h, q_idx, kv_idx) | (q_idx // 128 == kv_idx // 128)
        return mod

    assert _trace._capture_device(wrapped(selected)) == torch.device("meta")
    assert _trace._capture_device(causal) is None
    t = _trace.trace(wrapped(selected), "mask")
    assert list(t.aux.values())[0] is topk and t.snippet.count(" == t1;") == 4, t.snippet  # 3 lanes, the diagonal


def _assert_mask_matches_torch_when_compiled(mod, n, b, h):
    """mod's trace, compiled by the host C++ compiler, gives torch's mask over n x n int32 positions at
    batch b and head h, and the mask is neither empty nor full there."""
    got, want = _host_values(mod, "mask", [(0.0, b, h, q, k) for q in range(n) for k in range(n)])
    assert got == want and 0 < sum(want) < n * n


def test_position_comparisons_match_torch_when_compiled():
    """Every comparison between two positions, traced and compiled by the host C++ compiler, against
    torch on the same int32 positions."""
    def mod(b, h, q_idx, kv_idx):
        return (((q_idx >= kv_idx) & (q_idx - kv_idx < 5)) | ((kv_idx > q_idx) & (kv_idx - q_idx > 7)) |
                ((kv_idx == q_idx + 9) ^ (b < h)) | ((q_idx != kv_idx) & (kv_idx <= q_idx) & (q_idx % 11 == 0)) |
                ((q_idx < kv_idx) & (kv_idx % 5 == 0) & (h <= b)) | ((q_idx > kv_idx) & (q_idx == 23)))

    _assert_mask_matches_torch_when_compiled(mod, n=24, b=1, h=0)


def test_shifts_and_integer_bit_operations_match_torch_when_compiled():
    """Python's << and >> on positions (aten.__lshift__ / __rshift__, what `q_idx >> 10` traces to) and
    torch's named shifts and bit operations, traced and compiled by the host C++ compiler, against
    torch on the same int32 positions."""
    def mod(b, h, q_idx, kv_idx):
        return (((q_idx >> 3) == (kv_idx >> 3)) & (q_idx >= kv_idx)) | (((kv_idx << 2) & 12) == 8) | \
            (torch.bitwise_right_shift(q_idx ^ kv_idx, 4) == torch.bitwise_left_shift(h, 1))

    t = _trace.trace(mod, "mask")
    assert ">> 3" in t.snippet and "<< 2" in t.snippet
    _assert_mask_matches_torch_when_compiled(mod, n=40, b=0, h=1)


def test_activations_trace_through_decompositions_and_match_torch_when_compiled():
    """Score mods that apply torch.nn.functional's activations (PyTorch's own FlexAttention tests run
    silu on the score) trace through their decompositions, relu and isnan directly, and the snippets,
    compiled by the host C++ compiler, give torch's values on the same scores."""
    F = torch.nn.functional
    mods = [lambda s, b, h, q, kv: F.silu(s), lambda s, b, h, q, kv: F.gelu(s),
            lambda s, b, h, q, kv: F.gelu(s, approximate="tanh"), lambda s, b, h, q, kv: F.softplus(s),
            lambda s, b, h, q, kv: F.hardtanh(s), lambda s, b, h, q, kv: F.leaky_relu(s, 0.1),
            lambda s, b, h, q, kv: F.elu(s), lambda s, b, h, q, kv: F.mish(s), lambda s, b, h, q, kv: F.hardswish(s),
            lambda s, b, h, q, kv: torch.logaddexp(s, s * 0.5), lambda s, b, h, q, kv: s + torch.relu(q - kv),
            lambda s, b, h, q, kv: torch.where(torch.isnan(s), 0.0, s) + torch.relu(s)]
    scores = [-30.0, -7.5, -2.0, -0.75, -0.1, 0.0, 0.2, 1.0, 2.5, 9.0, 25.0]
    qs = [(3, 1), (1, 3)]
    bodies, want = [], []
    for i, mod in enumerate(mods):
        t = _trace.trace(mod, "score")
        assert "fa_" not in t.snippet and not t.aux, t.snippet
        bodies.append(f"static float f{i}(float score, int b, int h, int q_idx, int kv_idx) {{\n{t.snippet}\n}}\n")
        for sc in scores:
            for q, kv in qs:
                want.append(float(mod(torch.tensor(sc), torch.tensor(0, dtype=torch.int32),
                                      torch.tensor(0, dtype=torch.int32), torch.tensor(q, dtype=torch.int32),
                                      torch.tensor(kv, dtype=torch.int32))))
    calls = "".join(f"for (float s : sc) for (int j = 0; j < 2; ++j) std::printf(\"%.9g\\n\", f{i}(s, 0, 0, qs[j][0], "
                    f"qs[j][1]));\n" for i in range(len(mods)))
    src = ("#include <cstdio>\n#include <cmath>\n#include <cstring>\n#include <algorithm>\nusing namespace std;\n"
           "static float __int_as_float(int x) { float f; std::memcpy(&f, &x, 4); return f; }  // CUDA's, for infinities\n" +
           "".join(bodies) +
           "int main() { const float sc[] = {" + ", ".join(f"{x}f" for x in scores) + "};\n"
           "const int qs[2][2] = {{3, 1}, {1, 3}};\n" + calls + "}\n")
    got = [float(x) for x in _host_program_output(src)]
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert abs(g - w) <= 1e-5 * abs(w) + 1e-6, (i // (len(scores) * 2), g, w)
    # NVRTC takes the CUDA math they call (erf, expm1, log1p, isnan, tanh, max / min on floats).
    every = lambda s, b, h, q, kv: sum(m(s, b, h, q, kv) for m in mods)  # noqa: E731
    report = fa4jit.prewarm([_typed_config(None, every)], archs=["sm_90a"])
    assert all(r["status"] in ("compiled", "hit") for r in report), report


def test_device_scalars_become_aux_and_host_constants_literals():
    """A captured shape-() tensor on a device (meta here, as CUDA on a GPU machine) is read from memory
    as an aux tensor, also as an index; a constant made in the body or a captured CPU scalar is a
    literal of the snippet."""
    scale, which = torch.tensor(2.0, device="meta"), torch.tensor(1, device="meta")
    bias, host = torch.randn(4, 8, device="meta"), torch.tensor(3.0)

    def mod(score, b, h, q_idx, kv_idx):
        return score * scale + bias[which, q_idx] + torch.tensor(0.5) + host

    t = _trace.trace(mod, "score")
    by_tensor = {id(x): n for n, x in t.aux.items()}
    assert set(by_tensor) == {id(scale), id(which), id(bias)}, t.aux
    assert f"{by_tensor[id(scale)]}[0]" in t.snippet and f"{by_tensor[id(which)]}[0]" in t.snippet
    assert "0.5f" in t.snippet and "3.0f" in t.snippet, t.snippet


def test_integer_division_and_modulo_match_torch_when_compiled():
    """Traced floor division and modulo, compiled by the host C++ compiler, against torch on the same
    int32 positions (negative intermediate values included): shifts, masks and the 32- and 64-bit
    helpers round toward minus infinity as torch does."""
    wide = torch.tensor([3, 7], dtype=torch.int64)

    def mod(score, b, h, q_idx, kv_idx):
        d = q_idx - kv_idx
        return score + (d // 8 + d % 4 * 3 + d // 3 * 5 + d % 7 * 11 + (kv_idx - 2 * q_idx) // 16 * 13 +
                (d * wide[0]) % 5 * 17 + (d - wide[1]) // 4 * 19)

    t = _trace.trace(mod, "score")
    assert ">> 3" in t.snippet and "& 3" in t.snippet and "fa_mod32(" in t.snippet and "fa_mod(" in t.snippet
    n = 40
    q_idx, kv_idx = torch.meshgrid(torch.arange(n, dtype=torch.int32), torch.arange(n, dtype=torch.int32),
                                   indexing="ij")
    want = mod(torch.zeros(n, n), 0, 0, q_idx, kv_idx).reshape(-1).long().tolist()
    body = t.snippet.replace("sc0[", "wc[")
    src = ("#include <cstdio>\n#include <cmath>\nusing std::tanh;\nstatic const long long wc[2] = {3, 7};\n"
           "static float f(float score, int b, int h, int q_idx, int kv_idx) {\n" + body + "\n}\n"
           f"int main() {{ for (int q = 0; q < {n}; ++q) for (int k = 0; k < {n}; ++k) "
           "std::printf(\"%.0f\\n\", f(0.0f, 0, 0, q, k)); }\n")
    assert set(t.aux) == {"sc0"}
    got = [int(float(x)) for x in _host_program_output(src)]
    assert got == want


def test_where_minimum_casts_and_constants():
    def mod(score, b, h, q_idx, kv_idx):
        x = torch.where(q_idx > kv_idx, score * 0.5, torch.minimum(score, torch.tensor(2.0)))
        return torch.maximum(x, (kv_idx.float() - 3) / 7)

    s = _trace.trace(mod, "score").snippet
    assert " ? " in s and "min(" in s and "max(" in s and "((float)kv_idx)" in s and "2.0f" in s


def test_captured_tensors_become_typed_aux():
    doc = torch.tensor([0, 0, 1, 1, 2], dtype=torch.int32)
    bias = torch.randn(4, 9)
    wide = torch.arange(5, dtype=torch.int64)

    def docmask(b, h, q_idx, kv_idx):
        return (doc[q_idx] == doc[kv_idx]) & (wide[kv_idx] >= 0)

    def relpos(score, b, h, q_idx, kv_idx):
        return score + bias[h, q_idx - kv_idx + 4]

    m = _trace.trace(docmask, "mask")
    assert list(m.aux) == ["mc0", "mc1"] and m.aux["mc0"] is doc and m.aux["mc1"] is wide
    assert "mc0[" in m.snippet and "mc1[" in m.snippet
    r = _trace.trace(relpos, "score")
    assert r.aux["sc0"] is bias and "* 9 +" in r.snippet  # the row stride, written in
    typed = ops._snippet_texts(list(m.aux.values()), ",".join(m.aux), m.snippet, "", "")
    assert "const int* mc0 = aux0;" in typed[0] and "const long long* mc1 = aux1;" in typed[0]


def test_bf16_capture_is_read_as_bits_and_chained_indexing():
    table = torch.randn(4, 16).to(torch.bfloat16)

    def mod(score, b, h, q_idx, kv_idx):
        return score + table[h][kv_idx % 16]

    t = _trace.trace(mod, "score")
    assert t.aux["sc0"].dtype == torch.int16 and t.aux["sc0"].data_ptr() == table.data_ptr()
    assert "fa_bf16(sc0[" in t.snippet and "* 16 +" in t.snippet


def test_untraceable_mods_name_the_operation_and_line():
    def branchy(b, h, q_idx, kv_idx):
        if q_idx > kv_idx:  # the line the error names
            return q_idx >= 0
        return q_idx < 0

    with pytest.raises(fa4jit.ConfigError, match=r"control flow.*test_flex_cpu.py\", line \d+, in branchy: "
                                                  r"if q_idx > kv_idx"):
        _trace.trace(branchy, "mask")

    def cums(score, b, h, q_idx, kv_idx):
        return torch.cumsum(score.reshape(1), 0)[0]

    with pytest.raises(fa4jit.ConfigError, match=r"aten.cumsum.*in cums: return torch.cumsum"):
        _trace.trace(cums, "score")
    with pytest.raises(fa4jit.ConfigError, match="expected a Python callable"):
        _trace.trace(3, "mask")


def test_trace_is_cached_per_function_and_closure():
    doc = torch.zeros(4, dtype=torch.int32)

    def make(d):
        def m(b, h, q_idx, kv_idx):
            return d[q_idx] == d[kv_idx]
        return m

    f = make(doc)
    assert _trace.trace(f, "mask") is _trace.trace(f, "mask")
    assert _trace.trace(make(doc), "mask") is not _trace.trace(f, "mask")


def _brute(mask_mod, B, H, Q, K, bq, bk):
    full = torch.zeros(B, H, Q, K, dtype=torch.bool)
    for b in range(B):
        for h in range(H):
            qi = torch.arange(Q, dtype=torch.int32)[:, None]
            ki = torch.arange(K, dtype=torch.int32)[None, :]
            full[b, h] = torch.vmap(torch.vmap(lambda q, k: mask_mod(torch.tensor(b, dtype=torch.int32),
                                                                     torch.tensor(h, dtype=torch.int32), q, k),
                                               in_dims=(None, 0)), in_dims=(0, None))(qi[:, 0], ki[0])
    nq, nk = -(-Q // bq), -(-K // bk)
    out = torch.zeros(B, H, nq, nk, dtype=torch.uint8)
    for i in range(nq):
        for j in range(nk):
            t = full[:, :, i * bq:(i + 1) * bq, j * bk:(j + 1) * bk]
            out[:, :, i, j] = torch.where(t.all(-1).all(-1), 1, torch.where(t.any(-1).any(-1), 2, 0))
    return out


@pytest.mark.parametrize("mask_mod", [causal, sliding, prefix_lm, dilated])
@pytest.mark.parametrize("shape", [(1, 1, 300, 300, 64, 64), (1, 1, 130, 257, 32, 128), (1, 1, 64, 200, 16, 48)])
def test_tile_classes_match_brute_force(mask_mod, shape):
    B, H, Q, K, bq, bk = shape
    bm = fa4jit.create_block_mask(mask_mod, None, None, Q, K, device="cpu", BLOCK_SIZE=(bq, bk))
    assert torch.equal(bm.classes, _brute(mask_mod, B, H, Q, K, bq, bk))
    assert bm.shape == (1, 1, Q, K) and 0 <= bm.sparsity() <= 100


def test_tile_classes_per_batch_and_head_and_chunking(monkeypatch):
    doc = torch.tensor([[0] * 50 + [1] * 90 + [2] * 60, [0] * 120 + [1] * 80], dtype=torch.int32)

    def mod(b, h, q_idx, kv_idx):
        return (doc[b, q_idx] == doc[b, kv_idx]) & ((h == 0) | (q_idx >= kv_idx))

    monkeypatch.setattr(flex, "_ELEMENTS_PER_CHUNK", 5000)  # many row chunks
    bm = fa4jit.create_block_mask(mod, 2, 3, 200, 200, device="cpu", BLOCK_SIZE=32)
    assert bm.classes.shape == (2, 3, 7, 7)
    assert torch.equal(bm.classes, _brute(mod, 2, 3, 200, 200, 32, 32))
    # Broadcast dimensions: a mask without b / h is evaluated once.
    assert fa4jit.create_block_mask(causal, 4, 8, 100, 100, device="cpu", BLOCK_SIZE=32).classes.shape[:2] == (1, 1)


def test_from_torch_block_mask_matches_own():
    fa = pytest.importorskip("torch.nn.attention.flex_attention")
    for mod in (causal, sliding, prefix_lm, dilated):
        tbm = fa.create_block_mask(mod, None, None, 512, 640, device="cpu", BLOCK_SIZE=128)
        mine = flex.from_torch_block_mask(tbm)
        own = fa4jit.create_block_mask(mod, None, None, 512, 640, device="cpu", BLOCK_SIZE=128)
        assert torch.equal(mine.classes, own.classes), mod.__name__
        assert mine._traced is not None and mine.seq_lengths == (512, 640)
        assert flex.from_torch_block_mask(tbm) is mine


def test_lowering_and_automatic_tile_map_reuse_and_rebuild():
    flex.clear_block_mask_cache()
    doc = torch.tensor([0] * 200 + [1] * 56, dtype=torch.int32)

    def docmask(b, h, q_idx, kv_idx):
        return doc[q_idx] == doc[kv_idx]

    q = torch.empty(2, 256, 4, 64)
    k = torch.empty(2, 256, 4, 64)
    m, blk, s, aux = flex.lower_call(q, k, "bshd", docmask, None, softcap, None)
    assert isinstance(blk, fa4jit.BlockMask) and "mc0[" in m and "tanh(" in s
    assert set(aux) == {"mc0"} and aux["mc0"] is doc
    assert blk.classes.reshape(-1).tolist() == [1, 2, 2, 2]  # blocks of 128: the doc boundary at 200 is in block 1
    assert blk.BLOCK_SIZE == (flex.AUTO_BLOCK, flex.AUTO_BLOCK)
    # Same aux tensors at the same version: the same map.
    assert flex.lower_call(q, k, "bshd", docmask, None, None, None)[1] is blk
    doc[:] = 0  # an in-place write: rebuilt, every tile full
    again = flex.lower_call(q, k, "bshd", docmask, None, None, None)[1]
    assert again is not blk and again.classes.reshape(-1).tolist() == [1, 1, 1, 1]
    # Varlen / paged: no automatic map (lengths live on the device).
    assert flex.lower_call(q, k, None, docmask, None, None, None)[1] is None
    with pytest.raises(fa4jit.ConfigError, match="dict"):
        flex.lower_call(q, k, "bshd", docmask, None, None, [doc])


def test_flex_attention_argument_errors():
    q = torch.empty(1, 4, 128, 64)
    k = torch.empty(1, 2, 128, 64)
    with pytest.raises(fa4jit.ConfigError, match="enable_gqa"):
        fa4jit.flex_attention(q, k, k)
    bm = fa4jit.create_block_mask(causal, None, None, 256, 256, device="cpu")
    with pytest.raises(fa4jit.ConfigError, match="Q_LEN, KV_LEN"):
        fa4jit.flex_attention(q, k, k, block_mask=bm, enable_gqa=True)


def _typed_config(mask_mod=None, score_mod=None):
    m, blk, s, aux = flex.lower(mask_mod, None, score_mod, None)
    assert blk is None  # a tile map is a launch argument (the ops' block_mask), not a snippet
    aux = aux or {}
    names = list(aux)
    m, _, s = ops._snippet_texts(list(aux.values()), ",".join(names), m or "", "", s or "")
    cfg = {"depth": 128}
    if m:
        cfg["mask"] = {"kind": "custom", "snippet": m}
    if s:
        cfg["score_mod"] = {"kind": "custom", "snippet": s}
    return cfg


def test_traced_snippets_compile_with_nvrtc():
    doc = torch.tensor([0] * 100 + [1] * 156, dtype=torch.int32)
    rel = torch.randn(8, 511)
    table = torch.randn(8).to(torch.bfloat16)

    def docmask(b, h, q_idx, kv_idx):
        return (doc[q_idx] == doc[kv_idx]) & (q_idx >= kv_idx)

    def relpos(score, b, h, q_idx, kv_idx):
        return score + rel[h, q_idx - kv_idx + 255] + table[h]

    def everything(score, b, h, q_idx, kv_idx):
        x = torch.where(q_idx // 3 % 2 == 0, torch.sigmoid(score), torch.log(torch.abs(score) + 1.0))
        return torch.clamp(x * torch.rsqrt(torch.exp(score.double()).float() + 1), -5.0, 5.0) + (b - h) % 3

    cfgs = [_typed_config(docmask, relpos), _typed_config(dilated, alibi), _typed_config(prefix_lm, softcap),
            _typed_config(None, everything)]
    report = fa4jit.prewarm(cfgs, archs=["sm_90a"])
    assert all(r["status"] in ("compiled", "hit") for r in report), report


def test_flexattention_test_suite_mods_trace_and_compile():
    """Score and mask mods in the style of PyTorch's own FlexAttention tests (test_flex_attention.py:
    _times_two, _squared, _trig, _trig2 with tan of the batch index, _rel_causal, _head_offset, ALiBi
    from a captured table, and noop_mask as FlexAttention writes it, batch.new_ones(size=(), dtype=
    torch.bool)) trace into the expected snippets, and the score mods compile with NVRTC."""
    head_offset = torch.rand(4)

    def times_two(score, b, h, m, n):
        return score * 2

    def squared(score, b, h, m, n):
        return score * score

    def trig(score, b, h, m, n):
        return torch.sin(torch.cos(score)) + torch.tan(b)

    def trig2(score, b, h, m, n):
        return torch.cos(score) * torch.sin(score) + torch.tan(b)

    def rel_causal(score, b, h, m, n):
        return torch.where(m <= n, score + (m - n), float("-inf"))

    def offset(score, b, h, m, n):
        return score * head_offset[h]

    def noop_mask(b, h, q_idx, kv_idx):
        return b.new_ones(size=(), dtype=torch.bool)

    def zeros_or_causal(b, h, q_idx, kv_idx):
        return torch.zeros((), dtype=torch.bool) | (q_idx >= kv_idx)

    assert _trace.trace(times_two, "score").snippet == "const float t0 = score * 2.0f;\nreturn t0;"
    assert _trace.trace(squared, "score").snippet == "const float t0 = score * score;\nreturn t0;"
    t = _trace.trace(trig, "score").snippet
    assert "sin(t0)" in t and "tan(((float)b))" in t  # the integer batch index promoted as torch does
    assert "-__int_as_float(0x7f800000)" in _trace.trace(rel_causal, "score").snippet
    o = _trace.trace(offset, "score")
    assert "[h]" in o.snippet and list(o.aux.values())[0] is head_offset
    assert _trace.trace(noop_mask, "mask").snippet == "return true;"
    assert _trace.trace(zeros_or_causal, "mask").snippet.endswith("false || t1;\nreturn t2;")
    try:
        from torch.nn.attention.flex_attention import noop_mask as flex_noop
    except ImportError:
        flex_noop = None
    if flex_noop is not None:
        assert _trace.trace(flex_noop, "mask").snippet == "return true;"
    cfgs = [_typed_config(None, f) for f in (trig, trig2, rel_causal, offset)]
    report = fa4jit.prewarm(cfgs, archs=["sm_90a"])
    assert all(r["status"] in ("compiled", "hit") for r in report), report


def test_fake_tensor_tracing_of_flex_attention():
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        q = torch.empty(2, 4, 256, 64, dtype=torch.bfloat16, device="cuda")
        k = torch.empty(2, 4, 256, 64, dtype=torch.bfloat16, device="cuda")
        o = fa4jit.flex_attention(q, k, k, score_mod=softcap)
        assert o.shape == q.shape and o.dtype == q.dtype
        o, lse = fa4jit.flex_attention(q, k, k, score_mod=alibi, return_lse=True)
        assert lse.shape == (2, 4, 256) and lse.dtype == torch.float32


def test_return_aux_requests_lse_as_flex_attention_does():
    """FlexAttention's return_aux=AuxRequest(lse=True) (return_lse's replacement) returns (out, AuxOutput);
    max_scores, which the kernels do not write, and return_lse beside return_aux are refused by name."""
    fa = pytest.importorskip("torch.nn.attention.flex_attention")
    if not hasattr(fa, "AuxRequest"):
        pytest.skip("this PyTorch has no AuxRequest (added in 2.9)")
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        q = torch.empty(2, 4, 256, 64, dtype=torch.bfloat16, device="cuda")
        k = torch.empty(2, 2, 256, 64, dtype=torch.bfloat16, device="cuda")
        o, aux = fa4jit.flex_attention(q, k, k, score_mod=softcap, enable_gqa=True, return_aux=fa.AuxRequest(lse=True))
        assert isinstance(aux, fa.AuxOutput) and aux.max_scores is None
        assert o.shape == q.shape and aux.lse.shape == (2, 4, 256) and aux.lse.dtype == torch.float32
        o, aux = fa4jit.flex_attention(q, k, k, enable_gqa=True, return_aux=fa.AuxRequest())
        assert o.shape == q.shape and aux == fa.AuxOutput(lse=None, max_scores=None)
        with pytest.raises(fa4jit.ConfigError, match="max_scores"):
            fa4jit.flex_attention(q, k, k, enable_gqa=True, return_aux=fa.AuxRequest(lse=True, max_scores=True))
        with pytest.raises(fa4jit.ConfigError, match="return_lse and return_aux"):
            fa4jit.flex_attention(q, k, k, enable_gqa=True, return_lse=True, return_aux=fa.AuxRequest(lse=True))
        with pytest.raises(fa4jit.ConfigError, match="AuxRequest"):
            fa4jit.flex_attention(q, k, k, enable_gqa=True, return_aux=True)



def test_head_dims_without_a_kernel_run_padded(monkeypatch):
    """FlexAttention's head dims that no fa4jit kernel has (its tests use 16 and 32; V may be narrower)
    run zero-padded to the backend's next one, with the scale of the real head dim, and come back
    cut to V's width (the kernel replaced by a stand-in that records what it was given)."""
    seen = []

    def kernel(q, k, v, softmax_scale=None, return_lse=False, **kw):
        seen.append((q.shape[-1], k.shape[-1], v.shape[-1], softmax_scale))
        o = torch.zeros(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype)
        return (o, torch.zeros(q.shape[:-1])) if return_lse else o

    monkeypatch.setattr(fa4jit.ops, "attention", kernel)
    monkeypatch.setattr(fa4jit._widths, "device_arch", lambda device_type, index: "sm_90a")
    q, k, v = torch.randn(1, 2, 16, 32, dtype=torch.bfloat16), torch.randn(1, 2, 16, 32), torch.randn(1, 2, 16, 16)
    o, lse = fa4jit.flex_attention(q, k.bfloat16(), v.bfloat16(), return_lse=True)
    assert o.shape == (1, 2, 16, 16) and lse.shape == (1, 2, 16)
    assert seen == [(64, 64, 64, 32 ** -0.5)]
    o = fa4jit.flex_attention(q, k.bfloat16(), k.bfloat16(), scale=0.3)
    assert o.shape == q.shape and seen[-1] == (64, 64, 64, 0.3)
    q = torch.randn(1, 2, 16, 128, dtype=torch.bfloat16)
    fa4jit.flex_attention(q, q, q)
    assert seen[-1] == (128, 128, 128, None)  # a kernel's own width: as it is


def test_band_masks_are_recognized_for_the_built_in_masks():
    def window(b, h, q_idx, kv_idx):
        return (q_idx - kv_idx <= 100) & (kv_idx - q_idx <= 7)

    def docmask_like(b, h, q_idx, kv_idx):
        return (q_idx // 100) == (kv_idx // 100)

    S = 700
    bands = {}
    for mod in (causal, sliding, window, prefix_lm, dilated, docmask_like):
        bm = fa4jit.create_block_mask(mod, None, None, S, S, device="cpu", BLOCK_SIZE=64)
        bands[mod.__name__] = (bm.band, flex._builtin_band(bm, S, S))
    assert bands["causal"] == ((0, S - 1), dict(causal=True, window=None))
    assert bands["sliding"] == ((0, 100), dict(causal=True, window=(100, 0)))
    assert bands["window"] == ((-7, 100), dict(window=(100, 7)))
    assert bands["prefix_lm"] == (None, None) and bands["dilated"] == (None, None)
    assert bands["docmask_like"] == (None, None)
    bm = fa4jit.create_block_mask(causal, None, None, 300, 500, device="cpu")
    assert flex._builtin_band(bm, 300, 500) is None  # top-left vs bottom-right alignment differ


def test_snippet_classifier_compiles_before_the_driver_is_needed():
    # The library's tile-map kernel (jit::build_tile_map) for a CUDA C++ snippet: NVRTC runs, every
    # argument is checked, and only the launch needs the GPU this machine lacks.
    q = torch.empty(2, 256, 4, 64, dtype=torch.bfloat16)
    doc = torch.zeros(256, dtype=torch.int32)
    typed = ops._snippet_texts([doc], "doc", "return doc[q_idx] == doc[kv_idx] && q_idx >= kv_idx;", "", "")[0]
    out = torch.empty(2, 4, 2, 2, dtype=torch.uint8)
    if not torch.cuda.is_available():  # with a GPU the launch would run, on these host tensors' pointers
        with pytest.raises(fa4jit.DriverError):
            flex.call_tile_map(q, q, typed, [doc], out.data_ptr(), 128, 128, True, True, "sm_90a", 0, -1)
    with pytest.raises(fa4jit.CompileError, match=r"mask\(2\)|mask:2"):
        flex.call_tile_map(q, q, "bool a = true;\nreturn a && nope;", [], out.data_ptr(), 128, 128, True, True,
                           "sm_90a", 0, -1)
    with pytest.raises(fa4jit.LaunchError, match="block sizes"):
        flex.call_tile_map(q, q, "return true;", [], out.data_ptr(), 0, 128, True, True, "sm_90a", 0, -1)


def test_snippet_reads_decide_broadcast_dimensions():
    assert flex._reads("return doc[b * 8 + q_idx] > 0;", "b")
    assert not flex._reads("return q_idx >= kv_idx; // b h", "b")
    assert not flex._reads("return params.b > 0 && x.h;", "h")
    assert flex._reads("return scalars[0] > q_idx;", "scalars")
    # CPU tensors: no automatic map; the snippet and a list aux pass through unchanged.
    q = torch.empty(1, 128, 2, 64, dtype=torch.bfloat16)
    doc = torch.zeros(128, dtype=torch.int32)
    m, blk, s, aux = flex.lower_call(q, q, "bshd", "return doc[q_idx] == doc[kv_idx];", None, None, [doc])
    assert m == "return doc[q_idx] == doc[kv_idx];" and blk is None and aux == [doc]


_GLOBAL_BIAS = None


def _global_head_bias(score, b, h, q_idx, kv_idx):
    return score + _GLOBAL_BIAS[h]


def test_captured_tensor_sources_for_compiled_graphs():
    """TracedMod.sources: each aux tensor as the closure cell or global it was captured from, with the
    steps that made the kernel's copy; _trace.fetch rebuilds it; None when a tensor is held otherwise."""
    doc = torch.tensor([0, 0, 1, 1], dtype=torch.int32)
    rel = torch.randn(2, 8, dtype=torch.bfloat16)
    cols = torch.randn(8, 2)[:, 0]  # not contiguous
    holder = {"t": doc}

    def mod(score, b, h, q_idx, kv_idx):
        return score + rel[h, q_idx] + cols[kv_idx] + (doc[q_idx] == doc[kv_idx]).float()

    def held(b, h, q_idx, kv_idx):
        return holder["t"][q_idx] == 0

    global _GLOBAL_BIAS
    _GLOBAL_BIAS = torch.randn(4)
    t = _trace.trace(mod, "score")
    assert t.sources is not None and len(t.sources) == 3
    for name, where, key, steps in t.sources:
        assert where == "cell" and torch.equal(_trace.fetch(mod, where, key, steps), t.aux[name])
    assert {steps for *_, steps in t.sources} == {("view_int16",), ("base",), ()}  # cols: read through its base
    g = _trace.trace(_global_head_bias, "score")
    assert g.sources == (("sc0", "global", "_GLOBAL_BIAS", ()),)
    assert _trace.trace(held, "mask").sources is None


def test_torch_compile_traces_python_mods_without_graph_breaks():
    from torch._subclasses.fake_tensor import FakeTensorMode
    torch._dynamo.reset()
    with FakeTensorMode():
        bm = fa4jit.create_block_mask(causal, None, None, 256, 256, device="cuda")
        snippet = _trace.trace(sliding, "mask").snippet

        def flex_fn(q, k, v):
            return fa4jit.flex_attention(q, k, v, score_mod=softcap, block_mask=bm, return_lse=True)

        def traced_fn(q, k, v):  # (B, S, H, D), Python mods: no automatic map inside the graph
            return fa4jit.attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), mask_mod=causal,
                                    score_mod=alibi)

        def snippet_fn(q, k, v):
            return fa4jit.attention(q, k, v, mask_mod=snippet, block_mask_mod=bm, layout="bhsd")

        # Mods that capture tensors, in a closure and as a module global: fetched inside the graph.
        doc = torch.zeros(256, dtype=torch.int32, device="cuda")
        rel = torch.zeros(4, 512, dtype=torch.bfloat16, device="cuda")

        def docmask(b, h, q_idx, kv_idx):
            return (doc[q_idx] == doc[kv_idx]) & (q_idx >= kv_idx)

        def relbias(score, b, h, q_idx, kv_idx):
            return score + rel[h, q_idx - kv_idx + 256]

        global _GLOBAL_BIAS
        _GLOBAL_BIAS = torch.zeros(4, device="cuda")

        # Traced before the graph (make_fx under dynamo's own fake mode would mix it with this test's;
        # on a GPU, tests/python/test_flex_gpu.py compiles the first trace too).
        _trace.trace(docmask, "mask"), _trace.trace(relbias, "score"), _trace.trace(_global_head_bias, "score")

        def captured_fn(q, k, v):
            return fa4jit.attention(q, k, v, mask_mod=docmask, score_mod=relbias, layout="bhsd")

        def global_fn(q, k, v):
            return fa4jit.flex_attention(q, k, v, score_mod=_global_head_bias)

        q = torch.empty(2, 4, 256, 64, dtype=torch.bfloat16, device="cuda")
        for fn in (flex_fn, traced_fn, snippet_fn, captured_fn, global_fn):
            explain = torch._dynamo.explain(fn)(q, q, q)
            assert explain.graph_break_count == 0 and explain.graph_count == 1, (fn.__name__, explain)
        o, lse = torch.compile(flex_fn, backend="eager", fullgraph=True)(q, q, q)
        assert o.shape == q.shape and lse.shape == (2, 4, 256)


def test_softcap_score_mods_are_recognized_for_the_built_in_softcap():
    def mul_first(score, b, h, q_idx, kv_idx):
        return torch.tanh(score / 50.0) * 50.0

    def by_product(score, b, h, q_idx, kv_idx):
        return 20.0 * torch.tanh(score * (1 / 20.0))

    def other_cap(score, b, h, q_idx, kv_idx):
        return 30.0 * torch.tanh(score / 20.0)

    assert flex._builtin_softcap(_trace.trace(softcap, "score").snippet) == 30.0
    assert flex._builtin_softcap(_trace.trace(mul_first, "score").snippet) == 50.0
    assert flex._builtin_softcap(_trace.trace(by_product, "score").snippet) == pytest.approx(20.0)
    assert flex._builtin_softcap(_trace.trace(other_cap, "score").snippet) == 0.0
    assert flex._builtin_softcap(_trace.trace(alibi, "score").snippet) == 0.0


def test_alibi_score_mods_are_recognized_for_the_built_in_alibi():
    slopes = torch.rand(16)
    other = torch.rand(16)

    def documented(score, b, h, q_idx, kv_idx):  # FlexAttention's documented form, slopes captured
        return score + slopes[h] * (kv_idx - q_idx)

    def rewards_distance(score, b, h, q_idx, kv_idx):
        return score + other[h] * (q_idx - kv_idx)

    def per_batch(score, b, h, q_idx, kv_idx):
        return score - torch.exp2(-(b + 1) * 8.0 / 16) * (q_idx - kv_idx).abs()

    def scaled_distance(score, b, h, q_idx, kv_idx):
        return score - 0.5 * (q_idx - kv_idx).abs() * 2

    def relpos(score, b, h, q_idx, kv_idx):
        return score + other[(q_idx - kv_idx) % 16]

    def standard(h):
        return torch.exp2(-(h + 1) * 8.0 / 16)

    m = flex._builtin_alibi(_trace.trace(alibi, "score"), 16, False, "cpu")  # |q - kv|: any mask
    torch.testing.assert_close(m, standard(torch.arange(16.0)), rtol=0, atol=0)
    assert flex._builtin_alibi(_trace.trace(alibi, "score"), 16, False, "cpu") is m  # decided once
    torch.testing.assert_close(flex._builtin_alibi(_trace.trace(alibi, "score"), 16, True, "cpu"), m, rtol=0, atol=0)
    # Signed distances equal ALiBi's only where q_idx >= kv_idx: under a causal mask.
    assert flex._builtin_alibi(_trace.trace(documented, "score"), 16, True, "cpu") is slopes  # read live
    assert flex._builtin_alibi(_trace.trace(documented, "score"), 16, False, "cpu") is None
    assert flex._builtin_alibi(_trace.trace(documented, "score"), 8, True, "cpu") is None  # not one per head
    # Slopes -other[h]: no tensor to read them from live, so the snippet computes them.
    assert flex._builtin_alibi(_trace.trace(rewards_distance, "score"), 16, True, "cpu") is None
    for fn in (per_batch, relpos, softcap):
        assert flex._builtin_alibi(_trace.trace(fn, "score"), 16, True, "cpu") is None, fn.__name__
    assert flex._builtin_alibi(_trace.trace(scaled_distance, "score"), 16, True, "cpu") is None


def test_alibi_slopes_captured_as_a_whole_view_are_read_through_their_base():
    """Slopes captured as a view of a whole tensor (a caller's ``table.view(H)``): the tracer passes the
    base as the aux tensor (its in-place writes are seen), and the built-in ALiBi reads that same
    tensor; a view of part of it is not one slope per head and keeps the snippet."""
    base = torch.rand(16)
    whole, part = base.view(16), base[:8]

    def documented(score, b, h, q_idx, kv_idx):
        return score + whole[h] * (kv_idx - q_idx)

    def first_half(score, b, h, q_idx, kv_idx):
        return score + part[h] * (kv_idx - q_idx)

    traced = _trace.trace(documented, "score")
    assert any(a is base for a in traced.aux.values())
    assert flex._builtin_alibi(traced, 16, True, "cpu") is base
    assert flex._builtin_alibi(_trace.trace(first_half, "score"), 8, True, "cpu") is None


def test_alibi_slopes_on_another_device_than_the_indices_are_recognized():
    """A mod capturing a tensor off the CPU is traced with its arguments moved to that tensor's device
    (a _to_copy between the head index and slopes[h]), as FlexAttention's CUDA slopes are; the meta
    device stands in for CUDA here. The built-in ALiBi still reads the captured slopes themselves
    (test_flex_gpu's captured-ALiBi test failed on the GPU for this)."""
    slopes = torch.rand(16, device="meta")

    def documented(score, b, h, q_idx, kv_idx):
        return score + slopes[h] * (kv_idx - q_idx)

    traced = _trace.trace(documented, "score")
    assert any(n.target == torch.ops.aten._to_copy.default for n in traced.graph.graph.nodes)
    assert flex._builtin_alibi(traced, 16, True, "meta") is slopes


def test_traced_bands_hold_over_every_position_a_call_can_have():
    def window(b, h, q_idx, kv_idx):
        return (q_idx - kv_idx <= 100) & (kv_idx - q_idx <= 7)

    def diagonal_hidden(b, h, q_idx, kv_idx):
        return q_idx > kv_idx

    def per_head(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (h >= 0)

    def everything(b, h, q_idx, kv_idx):
        return q_idx - kv_idx > -(1 << 20)

    doc = torch.zeros(1000, dtype=torch.int32)

    def document(b, h, q_idx, kv_idx):
        return (doc[q_idx] == doc[kv_idx]) & (q_idx >= kv_idx)

    def band(mod, q_bound=300, k_bound=500):
        b = flex.traced_band(flex._traced(mod, "mask"), q_bound, k_bound)
        return None if b is None else (b.causal, b.window, b.top_left)
    assert band(causal) == (True, None, True)
    assert band(sliding) == (True, (100, 0), True)
    assert band(sliding, q_bound=50) == (True, (100, 0), True)  # bounds round up to 1024: the window kept
    assert band(sliding, q_bound=50, k_bound=50) == band(sliding, q_bound=1000, k_bound=900)  # the same bounds
    assert band(window) == (False, (100, 7), True)
    assert band(everything) == (False, None, True)  # every key visible: no mask
    # Not a function of q_idx - kv_idx alone, not one band holding the diagonal: the snippet stays.
    for mod in (dilated, diagonal_hidden, per_head, document):
        assert band(mod) is None, mod.__name__
    assert flex.traced_band("return true;", 300, 500) is None
    b = flex.traced_band(flex._traced(sliding, "mask"), 300, 500)
    assert isinstance(b, str) and b.startswith("\0") and flex.traced_band(flex._traced(sliding, "mask"), 700, 20) is b
    # Unbounded sides: beyond the rounded bounds (4096 queries, 2048 keys), no position exists.
    def wide(b, h, q_idx, kv_idx):
        return (q_idx - kv_idx < 5000) & (kv_idx - q_idx < 3000)
    assert band(wide, q_bound=3000, k_bound=2000) == (False, None, True)
    assert band(wide, q_bound=3000, k_bound=5000) == (False, (-1, 2999), True)


def test_a_band_or_a_key_prefix_is_a_band_with_a_prefix():
    def sink_window(b, h, q_idx, kv_idx):
        return (kv_idx <= 3) | ((q_idx >= kv_idx) & (q_idx - kv_idx < 100))

    def query_prefix(b, h, q_idx, kv_idx):  # q_idx alone on one side: not a key prefix
        return (q_idx < 37) | (q_idx >= kv_idx)

    def key_suffix(b, h, q_idx, kv_idx):  # keys not from 0
        return (kv_idx > 37) | (q_idx >= kv_idx)

    def per_head_prefix(b, h, q_idx, kv_idx):
        return (kv_idx < h) | (q_idx >= kv_idx)

    def and_prefix(b, h, q_idx, kv_idx):
        return (kv_idx < 37) & (q_idx >= kv_idx)

    def band(mod, q_bound=300, k_bound=500):
        b = flex.traced_band(flex._traced(mod, "mask"), q_bound, k_bound)
        return None if b is None else (b.causal, b.window, b.prefix)
    assert band(prefix_lm) == (True, None, 37)
    assert band(sink_window) == (True, (99, 0), 4)
    assert band(causal) == (True, None, 0)
    for mod in (query_prefix, key_suffix, per_head_prefix, and_prefix):
        assert band(mod) is None, mod.__name__
    # Dense prefix LM: the built-in causal mask with mask.prefix and the launch's mask_prefix.
    q = torch.empty(2, 64, 4, 64, dtype=torch.bfloat16)
    m = flex.lower_call(q, q, "bshd", prefix_lm, None, None, None)[0]
    assert isinstance(m, flex.Band) and (m.causal, m.prefix, m.top_left) == (True, 37, False)
    assert ops._mask_json(True, False, False, True, False, "", "") == {"kind": "causal", "prefix": True}
    assert ops._mask_json(True, True, True, True, False, "", "") == {"kind": "sliding_window", "top_left": True,
                                                                     "prefix": True}


def test_traced_bands_lower_to_the_built_in_mask_aligned_top_left():
    q = torch.empty(2, 64, 4, 64, dtype=torch.bfloat16)
    pages = torch.empty(16, 32, 4, 64, dtype=torch.bfloat16)
    m, blk, s, aux = flex.lower_call(q, pages, None, sliding, None, softcap, None)  # paged: 512 keys at most
    assert isinstance(m, flex.Band) and blk is None and "tanh(" in s and not aux
    assert (m.causal, m.window, m.top_left) == (True, (100, 0), True)
    assert not flex.mods_need_lowering(m, None, s)
    # A built-in mask beside it, or a BlockMask of another mask: the snippet stays.
    assert not isinstance(flex.lower_call(q, pages, None, sliding, None, None, None, True)[0], flex.Band)
    other = fa4jit.create_block_mask(prefix_lm, None, None, 64, 512, device="cpu")
    assert not isinstance(flex.lower_call(q, pages, None, causal, other, None, None)[0], flex.Band)
    same = fa4jit.create_block_mask(causal, None, None, 64, 512, device="cpu")
    assert isinstance(flex.lower_call(q, pages, None, None, same, None, None)[0], flex.Band)
    # Dense with Sq == Sk: the bottom-right built-in (the kernel causal=True runs); else top-left.
    k = torch.empty(2, 64, 4, 64, dtype=torch.bfloat16)
    assert flex.lower_call(q, k, "bshd", causal, None, None, None)[0].top_left is False
    assert flex.lower_call(q, torch.empty(2, 96, 4, 64), "bshd", causal, None, None, None)[0].top_left is True
    # The op's arguments and the kernel's config.
    u = dict(zip(ops._names_paged, ops._defaults_paged))
    u.update(q=q, k=pages, v=pages, page_table=torch.zeros(2, 16, dtype=torch.int32), seqused_k=None, mask_mod=m)
    a, _ = ops._prepare("paged", u)
    assert (a.causal, a.window_left, a.window_right, a.mask_mod, a.top_left, a.mask_prefix) == (
        True, 100, 0, "", True, 0)
    u.update(mask_mod=flex.lower_call(q, pages, None, prefix_lm, None, None, None)[0])
    a, _ = ops._prepare("paged", u)
    assert (a.causal, a.window_left, a.mask_mod, a.top_left, a.mask_prefix) == (True, -2, "", True, 37)
    assert ops._mask_json(True, False, True, False, False, "", "") == {"kind": "causal", "top_left": True}
    assert ops._mask_json(True, True, True, False, False, "", "") == {"kind": "sliding_window", "top_left": True}
    assert ops._mask_json(True, False, False, False, False, "", "") == "causal"
