"""Python mask_mod / score_mod callables traced into fa4jit's CUDA C++ snippets.

FlexAttention's mods are Python functions over 0-dim tensors: ``mask_mod(b, h, q_idx, kv_idx)``
returns a bool, ``score_mod(score, b, h, q_idx, kv_idx)`` a float. ``trace(fn, kind)`` runs the
function once under ``make_fx`` (fake tensors: data-dependent Python control flow is an error, not a
silently baked branch) and translates the aten graph, one node per ``const`` line, into the body of
fa4jit's custom mask or score-mod (docs/VARIANTS.md). What it takes: arithmetic, comparisons,
logical / bitwise operators and shifts, ``torch.where``, tanh / exp / log / sqrt / sigmoid / abs /
minimum / maximum / clamp / floor / ceil / pow / relu / isnan ..., torch.nn.functional's activations
(through their decompositions, ``_DECOMPOSED``), dtype conversions, integer division and modulo
(Python's floor semantics), indexing into captured tensors, and short 1-D rows of them (``_Vector``:
unrolled, reduced by sum / dot / any ...). A captured tensor becomes a typed aux tensor (its strides
are written into the snippet; a view is read through its base; the kernel reads its memory live, so
later in-place writes are seen). Anything else is a ``ConfigError`` naming the operation and the line of the
function that used it.

``TracedMod.graph`` (the aten graph module) evaluates the same function on tensors, which is how
``fa4jit.create_block_mask`` classifies tiles (``fa4jit.flex``).
"""
import contextlib
import linecache
import math
import sys
import traceback
import weakref
from typing import Dict, List, Optional

import torch

from .errors import ConfigError

aten = torch.ops.aten

_ARGS = {"mask": ("b", "h", "q_idx", "kv_idx"), "score": ("score", "b", "h", "q_idx", "kv_idx")}
_CTYPE = {torch.bool: "bool", torch.int8: "int", torch.uint8: "int", torch.int16: "int", torch.int32: "int",
          torch.int64: "long long", torch.float16: "float", torch.bfloat16: "float", torch.float32: "float",
          torch.float64: "double"}
# Helpers defined at the top of a traced snippet (inside the snippet's own function: a lambda each).
_HELPERS = {
    "fdiv": "auto fa_fdiv = [](long long a, long long b) -> long long { long long q = a / b; "
            "return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q; };",
    "fmod": "auto fa_mod = [](long long a, long long b) -> long long { long long r = a % b; "
            "return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; };",
    # int32 results (torch computes int32 tensors in int32): 32-bit division, a few instructions where
    # the 64-bit one is a long sequence per element of every partial tile.
    "fdiv32": "auto fa_fdiv32 = [](int a, int b) -> int { int q = a / b; "
              "return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q; };",
    "fmod32": "auto fa_mod32 = [](int a, int b) -> int { int r = a % b; "
              "return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; };",
    "ffmod": "auto fa_fmodf = [](double a, double b) -> double { double r = fmod(a, b); "
             "return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; };",
    "bf16": "auto fa_bf16 = [](short x) -> float { return __uint_as_float(((unsigned)(unsigned short)x) << 16); };",
}


class _View:
    """A captured tensor indexed down to some of its dimensions: offset (a C expression) into aux
    ``name``; ``sizes`` / ``strides`` of the dimensions left."""

    def __init__(self, name, dtype, offset, sizes, strides, bits16=False, wide=True):
        self.name, self.dtype, self.offset, self.sizes, self.strides = name, dtype, offset, sizes, strides
        self.bits16 = bits16  # a bf16 tensor passed as int16 bits
        self.wide = wide  # offsets may pass 2^31 (64-bit index math); else int, cheaper per element


class _Scalar:
    def __init__(self, expr: str, dtype: torch.dtype):
        self.expr, self.dtype = expr, dtype


class _Vector:
    """A short 1-D value, unrolled: a captured row (``pos[q_idx]``: 3 coordinates; ``topk[b, h, q]``:
    the selected tiles) and what elementwise ops make of it, until a reduction (``sum``, ``any``,
    ``dot``, ``amax`` ...) makes it one value again. One _Scalar an element, at most _MAX_LANES."""

    def __init__(self, items: List[_Scalar]):
        self.items = items


# Elements of a _Vector: every one is a temporary of its own per element of a tile (MLA's rope part,
# q_rope . k_rope, has 64).
_MAX_LANES = 128


class TracedMod:
    """A traced mod: ``snippet`` (the CUDA C++ body), ``aux`` (snippet name -> tensor, as passed to
    the kernel), ``uses`` (which of b, h, q_idx, kv_idx, score the result depends on) and ``graph``
    (the aten graph, callable on tensors)."""

    def __init__(self, kind, fn, snippet, aux, uses, graph, sources=None):
        self.kind, self.fn, self.snippet, self.aux, self.uses, self.graph = kind, fn, snippet, aux, uses, graph
        # Where each aux tensor comes from, for torch.compile (fa4jit.flex fetches them from the function
        # inside the graph): ((name, "cell" or "global", closure index or global name, transforms), ...),
        # None when some captured tensor is reachable only otherwise (an attribute, a list).
        self.sources = sources
        self.memo = {}  # what callers derive from the mod once (fa4jit.flex: its ALiBi slopes)

    def __repr__(self):
        return f"TracedMod({self.kind}, {getattr(self.fn, '__name__', self.fn)!r})"


def _where_in(fn) -> str:
    code = getattr(fn, "__code__", None)
    if code is None:
        return getattr(fn, "__name__", repr(fn))
    return f"{code.co_filename}:{code.co_firstlineno} ({fn.__name__})"


def _user_line(tb_or_stack: Optional[str], fn) -> str:
    """The deepest line of a stack trace (text) that is not torch's or fa4jit's: the user's line."""
    if not tb_or_stack:
        return _where_in(fn)
    best = None
    lines = tb_or_stack.strip().splitlines()
    for i, line in enumerate(lines):
        s = line.strip()
        if s.startswith("File \"") and "/torch/" not in s and "/fa4jit/_trace.py" not in s:
            src = lines[i + 1].strip() if i + 1 < len(lines) and not lines[i + 1].strip().startswith("File") else ""
            best = s[len("File "):] + (f": {src}" if src else "")
    return best or _where_in(fn)


def _lit(value, dtype: torch.dtype) -> str:
    ct = _CTYPE[dtype]
    if ct == "bool":
        return "true" if value else "false"
    if ct in ("int", "long long"):
        v = int(value)
        return f"{v}LL" if ct == "long long" or not -2 ** 31 <= v < 2 ** 31 else str(v)
    v = float(value)
    if math.isnan(v):
        return "__int_as_float(0x7fffffff)" if ct == "float" else "__longlong_as_double(0x7ff8000000000000LL)"
    if math.isinf(v):
        inf = "__int_as_float(0x7f800000)" if ct == "float" else "__longlong_as_double(0x7ff0000000000000LL)"
        return f"(-{inf})" if v < 0 else inf
    return (repr(v) + "f") if ct == "float" else repr(v)


def _pow2(x: _Scalar) -> Optional[int]:
    """k where x is the integer literal 2^k (k >= 0), else None."""
    text = x.expr[:-2] if x.expr.endswith("LL") else x.expr
    if not text.isdigit():
        return None
    v = int(text)
    return v.bit_length() - 1 if v > 0 and v & (v - 1) == 0 else None


def _literal(x: _Scalar) -> Optional[float]:
    """x's value where x is a numeric literal (as _lit writes one), else None."""
    text = x.expr[:-2] if x.expr.endswith("LL") else x.expr[:-1] if x.expr.endswith("f") else x.expr
    try:
        return float(text)
    except ValueError:
        return None


def _pow(a: str, b: str, exponent: Optional[float], dtype: torch.dtype) -> str:
    """torch.pow(a, b) in C++. The kernels are compiled with --use_fast_math, whose pow is
    exp2(b * log2(a)): NaN for every negative a, where torch gives a signed power for an integral b
    ((q - kv).pow(2): a distance). Small integral literal exponents are products; other integral
    ones the power of |a| with a's sign where odd; a variable exponent takes the sign the same way
    where it is integral (and pow(x, 0) is 1)."""
    one, zero = _lit(1, dtype), _lit(0, dtype)
    if exponent is not None and exponent == int(exponent) and abs(exponent) <= 4:
        n = int(exponent)
        if n == 0:
            return one
        product = " * ".join([a] * abs(n))
        return product if n > 0 else f"{one} / ({product})"
    if not dtype.is_floating_point:
        return f"pow({a}, {b})"
    if exponent == 0.5:
        return f"sqrt({a})"
    if exponent is not None and exponent == int(exponent):
        return f"copysign(pow(fabs({a}), {b}), {a})" if int(exponent) % 2 else f"pow(fabs({a}), {b})"
    if exponent is not None:  # not integral: NaN for a negative a, as torch's
        return f"pow({a}, {b})"
    two = _lit(2, dtype)
    return (f"({b} == {zero} ? {one} : {a} < {zero} && {b} == trunc({b}) ? "
            f"(fmod({b}, {two}) != {zero} ? -pow(-{a}, {b}) : pow(-{a}, {b})) : pow({a}, {b}))")


def _cast(x: _Scalar, dtype: torch.dtype) -> str:
    if _CTYPE[x.dtype] == _CTYPE[dtype]:
        return x.expr
    if dtype == torch.bool:
        return f"({x.expr} != 0)"
    return f"(({_CTYPE[dtype]}){x.expr})"


_BINARY = {
    aten.add: "+", aten.sub: "-", aten.mul: "*", aten.eq: "==", aten.ne: "!=", aten.lt: "<", aten.le: "<=",
    aten.gt: ">", aten.ge: ">=", aten.bitwise_and: "&", aten.bitwise_or: "|", aten.bitwise_xor: "^",
    aten.__and__: "&", aten.__or__: "|", aten.__xor__: "^", aten.bitwise_left_shift: "<<",
    aten.bitwise_right_shift: ">>", aten.__lshift__: "<<", aten.__rshift__: ">>",  # x << n, x >> n in Python
}
_COMPARE = {aten.eq, aten.ne, aten.lt, aten.le, aten.gt, aten.ge}
_INDEX_ARGS = _ARGS["mask"]  # the int32 positions a mod receives (a mask mod's arguments), never negative
# Float functions: (float name, double name).
_UNARY_FLOAT = {
    aten.tanh: "tanh", aten.exp: "exp", aten.log: "log", aten.sqrt: "sqrt", aten.rsqrt: "rsqrt",
    aten.exp2: "exp2", aten.log2: "log2", aten.log10: "log10", aten.log1p: "log1p", aten.expm1: "expm1",
    aten.sin: "sin", aten.cos: "cos", aten.tan: "tan", aten.atan: "atan", aten.asin: "asin", aten.acos: "acos",
    aten.sinh: "sinh", aten.cosh: "cosh", aten.erf: "erf", aten.floor: "floor", aten.ceil: "ceil",
    aten.trunc: "trunc", aten.round: "rint",
}
_REDUCTIONS = {aten.sum, aten.mean, aten.prod, aten.amax, aten.amin, aten.max, aten.min, aten.any, aten.all, aten.dot}
_IDENTITY = {aten.alias, aten.detach, aten.lift_fresh_copy, aten.clone, aten.lift_fresh, aten.view, aten.reshape,
             aten._unsafe_view, aten.squeeze, aten.unsqueeze, aten.expand, aten.contiguous}


def read_root(t: torch.Tensor) -> torch.Tensor:
    """The tensor a snippet reads a captured tensor t through: t's base where t is a view of a contiguous
    tensor of its dtype (table[:, n], one row of a stacked tensor: every view of one tensor is one aux
    tensor, and an in-place write to the base is seen), else t itself."""
    base = t._base
    return base if base is not None and base.dtype == t.dtype and base.is_contiguous() else t


def views_whole(t: torch.Tensor, root: torch.Tensor) -> bool:
    """Whether t reads every element of root in root's own order (t is root, or a view of all of it)."""
    return t is root or (t.shape == root.shape and t.stride() == root.stride() and
                         t.storage_offset() == root.storage_offset())


class _Emitter:
    def __init__(self, kind, fn, gm):
        self.kind, self.fn, self.gm = kind, fn, gm
        self.lines: List[str] = []
        self.helpers: List[str] = []
        self.aux: Dict[str, torch.Tensor] = {}
        self.aux_by_id: Dict[int, str] = {}
        self.origin: Dict[str, tuple] = {}  # aux name -> (the captured tensor, steps to the passed one)
        self.n = 0
        self.temps: Dict[tuple, str] = {}  # (expression, C type) -> its temporary
        self.lane: Optional[int] = None  # the element of _Vector operands an op is emitted for

    def fail(self, node, what):
        where = _user_line(node.meta.get("stack_trace"), self.fn)
        raise ConfigError(f"{self.kind}_mod: {what} at {where} cannot become a CUDA snippet (fa4jit traces "
                          f"arithmetic, comparisons, torch.where, math functions, integer // and %, and indexing "
                          f"into captured tensors)")

    def helper(self, name):
        if name not in self.helpers:
            self.helpers.append(name)

    def floor_int(self, op: str, a: _Scalar, b: _Scalar, dtype) -> _Scalar:
        """Python's (and torch's) integer a // b ("div") or a % b ("mod"): by a power-of-two literal an
        arithmetic shift or the low bits (two's complement: exact); int32 results in 32-bit helpers,
        int64 ones in 64-bit helpers."""
        k = _pow2(b)
        if k is not None:
            lowbits = _lit((1 << k) - 1, dtype)
            return self.temp(f"{_cast(a, dtype)} >> {k}" if op == "div" else f"{_cast(a, dtype)} & {lowbits}", dtype)
        fn = {"div": "fa_fdiv", "mod": "fa_mod"}[op]
        if _CTYPE[dtype] == "int":
            self.helper({"div": "fdiv32", "mod": "fmod32"}[op])
            return self.temp(f"{fn}32({_cast(a, dtype)}, {_cast(b, dtype)})", dtype)
        self.helper({"div": "fdiv", "mod": "fmod"}[op])
        return self.temp(f"({_CTYPE[dtype]}){fn}({a.expr}, {b.expr})", dtype)

    def temp(self, expr: str, dtype) -> _Scalar:
        """A named temporary for expr; the same expression in the same C type again is the same temporary
        (every expression here is pure: arithmetic and reads of aux tensors)."""
        key = (expr, _CTYPE[dtype])
        if key in self.temps:
            return _Scalar(self.temps[key], dtype)
        name = f"t{self.n}"
        self.n += 1
        self.lines.append(f"const {_CTYPE[dtype]} {name} = {expr};")
        self.temps[key] = name
        return _Scalar(name, dtype)

    def tensor_const(self, node, t: torch.Tensor):
        # A shape-() tensor on the host is a constant of the trace (torch.tensor(0.5) in the mod's body,
        # or a captured CPU scalar): its value. One on the device is a captured tensor like any other,
        # read live (a learned scale updated in place is seen, and tracing does not synchronize).
        if t.dim() == 0 and t.device.type == "cpu":
            return _Scalar(_lit(t.item(), t.dtype), t.dtype)
        # A view is read through its base (read_root), with its own offset and strides in the
        # snippet: a kernel takes 4 aux tensors, and nothing is copied.
        root = read_root(t)
        name = self.aux_by_id.get(id(root))
        if name is None:
            name = f"{self.kind[0]}c{len(self.aux)}"
            passed, steps = root, (("base",) if root is not t else ())
            if root.dtype == torch.bfloat16:
                passed, steps = passed.view(torch.int16), steps + ("view_int16",)
            elif root.dtype == torch.float16:
                passed, steps = passed.float(), steps + ("float",)  # a copy: fp16 has no bit-cast reader here
            if not passed.is_contiguous():
                passed, steps = passed.contiguous(), steps + ("contiguous",)
            self.aux[name] = passed
            self.aux_by_id[id(root)] = name
            self.origin[name] = (t, steps)
        passed = self.aux[name]
        if root is t:
            sizes, strides, offset = list(passed.shape), list(passed.stride()), 0
        else:
            sizes, strides, offset = list(t.shape), list(t.stride()), t.storage_offset() - root.storage_offset()
        extent = offset + sum((n - 1) * st for n, st in zip(sizes, strides) if n > 0)
        return _View(name, t.dtype, str(offset), sizes, strides, t.dtype == torch.bfloat16, wide=extent >= 2 ** 31)

    def load(self, v: _View, node) -> _Scalar:
        if v.sizes:
            self.fail(node, f"a tensor of shape {tuple(v.sizes)} (indexed down to fewer dimensions than it has)")
        ref = f"{v.name}[{v.offset}]"
        if v.bits16:
            self.helper("bf16")
            return self.temp(f"fa_bf16({ref})", torch.float32)
        return self.temp(ref, v.dtype if v.dtype != torch.float16 else torch.float32)

    def value(self, a, env, node, dtype=None):
        """An argument as a _Scalar (Python numbers as literals of dtype, or of their own kind)."""
        if isinstance(a, torch.fx.Node):
            v = env[a]
            if isinstance(v, _Vector) or (isinstance(v, _View) and len(v.sizes) == 1 and self.lane is not None):
                return self.element(v, self.lane, node)
            if isinstance(v, _View):
                v = env[a] = self.load(v, node)
            return v
        if isinstance(a, bool):
            return _Scalar(_lit(a, torch.bool), torch.bool)
        if isinstance(a, int):
            return _Scalar(_lit(a, dtype or torch.int64), dtype or torch.int64)
        if isinstance(a, float):
            d = dtype if dtype is not None and dtype.is_floating_point else torch.float32
            return _Scalar(_lit(a, d), d)
        self.fail(node, f"argument {a!r}")

    def element(self, v, j: Optional[int], node) -> _Scalar:
        """Element j of a _Vector or of a 1-D _View (a size-1 one broadcasts, as torch's)."""
        n = len(v.items) if isinstance(v, _Vector) else v.sizes[0]
        if j is None:
            self.fail(node, f"a tensor of shape ({n},) where one value is expected")
        j = 0 if n == 1 else j
        if isinstance(v, _Vector):
            return v.items[j]
        return self.load(self.index(v, 0, _Scalar(str(j), torch.int64)), node)

    def elements(self, a, env, node) -> List[_Scalar]:
        """Every element of a 1-D operand (a _Vector or a captured row), or of one value (shape (),
        or expanded to (n,): n times)."""
        v = env[a] if isinstance(a, torch.fx.Node) else None
        if isinstance(v, _View) and len(v.sizes) == 1:
            return [self.element(v, j, node) for j in range(v.sizes[0])]
        if isinstance(v, _Vector):
            return list(v.items)
        shape = tuple(getattr(a.meta.get("val"), "shape", (0, 0))) if isinstance(a, torch.fx.Node) else ()
        if len(shape) <= 1 and (isinstance(v, _Scalar) or (isinstance(v, _View) and not v.sizes)):
            return [self.value(a, env, node)] * (shape[0] if shape else 1)
        self.fail(node, "a reduction of a value that is not a 1-D tensor")

    def reduce(self, node, env, packet, dtype) -> _Scalar:
        """sum / mean / prod / amax / amin / any / all over the one dimension of a 1-D operand, and
        dot of two: a chain of the elements' temporaries."""
        args = node.args
        if packet is aten.dot:
            xs, ys = self.elements(args[0], env, node), self.elements(args[1], env, node)
            terms = [f"{_cast(x, dtype)} * {_cast(y, dtype)}" for x, y in zip(xs, ys)]
            return self.temp(" + ".join(terms), dtype)
        dims = args[1] if len(args) > 1 else node.kwargs.get("dim")
        if isinstance(dims, (list, tuple)):
            dims = dims[0] if len(dims) == 1 else "many"
        if dims not in (None, 0, -1):
            self.fail(node, f"'{node.target}' over dimension {dims} of a 1-D tensor")
        xs = [_cast(x, dtype) for x in self.elements(args[0], env, node)]
        if packet in (aten.amax, aten.amin, aten.max, aten.min):
            fn = "max" if packet in (aten.amax, aten.max) else "min"
            acc = xs[0]
            for x in xs[1:]:
                acc = self.temp(f"{fn}({acc}, {x})", dtype).expr
            return _Scalar(acc, dtype)
        op = {aten.sum: " + ", aten.mean: " + ", aten.prod: " * ", aten.any: " || ", aten.all: " && "}[packet]
        total = self.temp(op.join(xs), dtype)
        if packet is aten.mean:
            return self.temp(f"{total.expr} / {_lit(len(xs), dtype)}", dtype)
        return total

    def index(self, v: _View, dim: int, idx: _Scalar) -> _View:
        """v indexed at idx along dim. Python's negative indices count from the end; the mod's own
        arguments (b, h, q_idx, kv_idx) are never negative (VARIANTS.md) and need no such test."""
        n, st = v.sizes[dim], v.strides[dim]
        plain = idx.expr.removesuffix("LL").isdigit() or idx.expr in _ARGS["mask"]
        i = idx.expr if plain else f"({idx.expr} < 0 ? {idx.expr} + {n} : {idx.expr})"
        term = f"(long long){i} * {st}" if v.wide else (i if st == 1 else f"{i} * {st}")
        off = f"{v.offset} + {term}" if v.offset != "0" else term
        return _View(v.name, v.dtype, off, v.sizes[:dim] + v.sizes[dim + 1:], v.strides[:dim] + v.strides[dim + 1:],
                     v.bits16, v.wide)

    def run(self):
        env = {}
        names = _ARGS[self.kind]
        placeholders = [n for n in self.gm.graph.nodes if n.op == "placeholder"]
        uses = set()
        for p, name in zip(placeholders, names):
            env[p] = _Scalar(name, torch.float32 if name == "score" else torch.int32)
            if p.users:
                uses.add(name)
        result = None
        for node in self.gm.graph.nodes:
            if node.op == "placeholder":
                continue
            if node.op == "get_attr":
                t = getattr(self.gm, node.target)
                if not isinstance(t, torch.Tensor):
                    self.fail(node, f"attribute {node.target}")
                env[node] = self.tensor_const(node, t)
                continue
            if node.op == "output":
                out = node.args[0]
                if isinstance(out, (tuple, list)):
                    if len(out) != 1:
                        self.fail(node, f"returning {len(out)} values")
                    out = out[0]
                result = self.value(out, env, node)
                continue
            if node.op != "call_function":
                self.fail(node, f"{node.op} {node.target}")
            env[node] = self.op(node, env)
        want = torch.bool if self.kind == "mask" else torch.float32
        ret = _cast(result, want)
        body = [_HELPERS[h] for h in self.helpers] + self.lines + [f"return {ret};"]
        return "\n".join(body), uses

    def op(self, node, env):
        t = node.target
        packet = getattr(t, "overloadpacket", None)
        val = node.meta.get("val")
        dtype = val.dtype if isinstance(val, torch.Tensor) else None
        args = node.args
        name = str(t)
        if packet in _IDENTITY or t in (torch.ops.aten._assert_tensor_metadata.default,):
            if not args or not isinstance(args[0], torch.fx.Node):
                return None
            v = env[args[0]]
            if isinstance(v, _View) and packet not in (aten.alias, aten.detach, aten.lift_fresh_copy, aten.clone,
                                                       aten.lift_fresh, aten.contiguous):
                if isinstance(val, torch.Tensor) and list(val.shape) != v.sizes:
                    self.fail(node, f"{packet.__name__} of a captured tensor")
            return v
        if packet is aten.index:
            base = env[args[0]]
            if not isinstance(base, _View):
                self.fail(node, "indexing a computed value")
            dim = 0
            for ix in args[1]:
                if ix is None:
                    dim += 1
                    continue
                base = self.index(base, dim, self.value(ix, env, node))
            return base
        if packet is aten.select:
            base = env[args[0]]
            if not isinstance(base, _View):
                self.fail(node, "indexing a computed value")
            dim = args[1] % (len(base.sizes) or 1)
            return self.index(base, dim, self.value(args[2], env, node, torch.int64))
        if dtype is None or dtype not in _CTYPE:
            self.fail(node, f"'{name}'")
        if packet in (aten.max, aten.min) and len(args) > 1 and isinstance(args[1], torch.fx.Node):
            packet = aten.maximum if packet is aten.max else aten.minimum  # torch.max(a, b): elementwise
        if packet in _REDUCTIONS and self.lane is None:
            r = self.reduce(node, env, packet, dtype)
            return _Vector([r]) if isinstance(val, torch.Tensor) and val.dim() == 1 else r  # keepdim
        if isinstance(val, torch.Tensor) and val.dim() == 1 and self.lane is None and val.shape[0] <= _MAX_LANES:
            items = []  # an elementwise op over 1-D operands: emitted once per element
            try:
                for j in range(val.shape[0]):
                    self.lane = j
                    items.append(self.op(node, env))
            finally:
                self.lane = None
            return _Vector(items)
        if isinstance(val, torch.Tensor) and val.dim() != 0 and not (self.lane is not None and val.dim() == 1):
            self.fail(node, f"'{name}' making a tensor of shape {tuple(val.shape)}")
        # Constants of shape (): FlexAttention's own noop_mask is batch.new_ones(size=(), dtype=torch.bool).
        if packet in (aten.ones, aten.new_ones, aten.ones_like):
            return _Scalar(_lit(1, dtype), dtype)
        if packet in (aten.zeros, aten.new_zeros, aten.zeros_like):
            return _Scalar(_lit(0, dtype), dtype)
        if packet in (aten.scalar_tensor, aten.full, aten.full_like, aten.new_full):
            return _Scalar(_lit(args[-1] if packet is not aten.scalar_tensor else args[0], dtype), dtype)
        if packet in (aten._to_copy, aten.to, aten.type_as) or name.startswith("aten.to."):
            a = self.value(args[0], env, node)
            if _CTYPE[a.dtype] == _CTYPE[dtype]:  # a move to another device (the index arguments): itself
                return a
            return self.temp(_cast(a, dtype), dtype)
        if packet in _BINARY:
            if len(args) > 2 and args[2] != 1 or node.kwargs.get("alpha", 1) != 1:
                a, b = self.value(args[0], env, node), self.value(args[1], env, node)
                alpha = node.kwargs.get("alpha", args[2] if len(args) > 2 else 1)
                b = _Scalar(f"({b.expr} * {_lit(alpha, dtype)})", dtype)
            else:
                lit = None if packet in _COMPARE else dtype  # Python numbers in the result's type
                a, b = self.value(args[0], env, node, lit), self.value(args[1], env, node, lit)
            op = _BINARY[packet]
            if packet in _COMPARE:
                if a.expr in _INDEX_ARGS and b.expr in _INDEX_ARGS:
                    # Two positions compared through their difference, as windows and dilations
                    # test it (q_idx - kv_idx < W): the compiler then folds d >= 0 && d < W into one
                    # unsigned compare. Positions are non-negative int32, so d cannot overflow.
                    # H200, the dilated mask of bench/zoo.py: 2.33 -> 2.03 ms (docs/PERF.md run 71).
                    a, b = self.temp(f"{a.expr} - {b.expr}", torch.int32), _Scalar("0", torch.int32)
                common = torch.promote_types(a.dtype, b.dtype)
                return self.temp(f"{_cast(a, common)} {op} {_cast(b, common)}", dtype)
            if dtype == torch.bool and op in "&|^":
                op = {"&": "&&", "|": "||", "^": "!="}[op]
            return self.temp(f"{_cast(a, dtype)} {op} {_cast(b, dtype)}", dtype)
        if packet is aten.rsub:
            a, b = self.value(args[0], env, node), self.value(args[1], env, node)
            return self.temp(f"{_cast(b, dtype)} - {_cast(a, dtype)}", dtype)
        if packet in (aten.logical_and, aten.logical_or, aten.logical_xor):
            a, b = self.value(args[0], env, node), self.value(args[1], env, node)
            op = {aten.logical_and: "&&", aten.logical_or: "||", aten.logical_xor: "!="}[packet]
            return self.temp(f"{_cast(a, torch.bool)} {op} {_cast(b, torch.bool)}", dtype)
        if packet in (aten.logical_not, aten.bitwise_not):
            a = self.value(args[0], env, node)
            if dtype == torch.bool or packet is aten.logical_not:
                return self.temp(f"!{_cast(a, torch.bool)}", dtype)
            return self.temp(f"~{a.expr}", dtype)
        if packet is aten.neg:
            return self.temp(f"-{_cast(self.value(args[0], env, node), dtype)}", dtype)
        if packet in (aten.div, aten.true_divide, aten.floor_divide):
            a, b = self.value(args[0], env, node), self.value(args[1], env, node)
            mode = node.kwargs.get("rounding_mode", args[2] if len(args) > 2 else None)
            if packet is aten.floor_divide:
                mode = "floor"
            if dtype.is_floating_point:
                q = f"{_cast(a, dtype)} / {_cast(b, dtype)}"
                if mode == "floor":
                    q = f"floor({q})"
                elif mode == "trunc":
                    q = f"trunc({q})"
                return self.temp(q, dtype)
            if mode == "trunc":
                return self.temp(f"{_cast(a, dtype)} / {_cast(b, dtype)}", dtype)
            return self.floor_int("div", a, b, dtype)
        if packet in (aten.remainder, aten.fmod):
            a, b = self.value(args[0], env, node), self.value(args[1], env, node)
            if dtype.is_floating_point:
                if packet is aten.fmod:
                    return self.temp(f"fmod({_cast(a, dtype)}, {_cast(b, dtype)})", dtype)
                self.helper("ffmod")
                return self.temp(f"({_CTYPE[dtype]})fa_fmodf({a.expr}, {b.expr})", dtype)
            if packet is aten.fmod:
                return self.temp(f"{_cast(a, dtype)} % {_cast(b, dtype)}", dtype)
            return self.floor_int("mod", a, b, dtype)
        if packet is aten.where:
            c, a, b = (self.value(x, env, node, dtype) for x in args[:3])
            return self.temp(f"{_cast(c, torch.bool)} ? {_cast(a, dtype)} : {_cast(b, dtype)}", dtype)
        if packet in (aten.minimum, aten.maximum, aten.clamp_min, aten.clamp_max, aten.fmin, aten.fmax):
            a, b = self.value(args[0], env, node, dtype), self.value(args[1], env, node, dtype)
            fn = "min" if packet in (aten.minimum, aten.clamp_max, aten.fmin) else "max"
            if dtype.is_floating_point and packet in (aten.minimum, aten.maximum):
                # torch propagates NaN; fmin/fmax would drop it. Scores are never NaN in practice.
                pass
            return self.temp(f"{fn}({_cast(a, dtype)}, {_cast(b, dtype)})", dtype)
        if packet is aten.clamp:
            x = _cast(self.value(args[0], env, node), dtype)
            lo = args[1] if len(args) > 1 else node.kwargs.get("min")
            hi = args[2] if len(args) > 2 else node.kwargs.get("max")
            if lo is not None:
                x = f"max({x}, {_cast(self.value(lo, env, node, dtype), dtype)})"
            if hi is not None:
                x = f"min({x}, {_cast(self.value(hi, env, node, dtype), dtype)})"
            return self.temp(x, dtype)
        if packet is aten.abs:
            a = self.value(args[0], env, node)
            return self.temp(f"{'fabs' if dtype.is_floating_point else 'abs'}({_cast(a, dtype)})", dtype)
        if packet is aten.sign:
            a = _cast(self.value(args[0], env, node), dtype)
            return self.temp(f"({_CTYPE[dtype]})(({a} > 0) - ({a} < 0))", dtype)
        if packet is aten.relu:
            a = _cast(self.value(args[0], env, node), dtype)
            return self.temp(f"max({a}, {_lit(0, dtype)})", dtype)
        if packet in (aten.isnan, aten.isinf, aten.isfinite):
            a = self.value(args[0], env, node)
            if not a.dtype.is_floating_point:  # integers are never NaN or infinite
                return _Scalar("true" if packet is aten.isfinite else "false", torch.bool)
            fn = {aten.isnan: "isnan", aten.isinf: "isinf", aten.isfinite: "isfinite"}[packet]
            return self.temp(f"{fn}({a.expr})", dtype)
        if packet is aten.sigmoid:
            a = _cast(self.value(args[0], env, node), dtype)
            return self.temp(f"{_lit(1, dtype)} / ({_lit(1, dtype)} + exp(-{a}))", dtype)
        if packet is aten.reciprocal:
            a = _cast(self.value(args[0], env, node), dtype)
            return self.temp(f"{_lit(1, dtype)} / {a}", dtype)
        if packet is aten.square:
            a = _cast(self.value(args[0], env, node), dtype)
            return self.temp(f"{a} * {a}", dtype)
        if packet is aten.pow:
            a, b = self.value(args[0], env, node, dtype), self.value(args[1], env, node, dtype)
            return self.temp(_pow(_cast(a, dtype), _cast(b, dtype), _literal(b), dtype), dtype)
        if packet in _UNARY_FLOAT:
            a = self.value(args[0], env, node)
            fn = _UNARY_FLOAT[packet]
            if not dtype.is_floating_point:  # floor / ceil / round / trunc of an integer
                if fn in ("floor", "ceil", "trunc", "rint"):
                    return a
                self.fail(node, f"'{name}' of an integer")
            if fn == "rsqrt":
                return self.temp(f"{'rsqrtf' if dtype != torch.float64 else 'rsqrt'}({_cast(a, dtype)})", dtype)
            # Overloads of the CUDA math library pick float or double from the argument.
            return self.temp(f"{fn}({_cast(a, dtype)})", dtype)
        self.fail(node, f"'{name}'")


_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _closure_key(fn):
    cells = getattr(fn, "__closure__", None) or ()
    out = []
    for c in cells:
        try:
            v = c.cell_contents
        except ValueError:
            v = None
        out.append(id(v) if isinstance(v, torch.Tensor) or callable(v) else
                   (v if isinstance(v, (int, float, bool, str, type(None))) else id(v)))
    defaults = getattr(fn, "__defaults__", None) or ()
    return tuple(out) + tuple(id(d) if isinstance(d, torch.Tensor) else repr(d) for d in defaults)


def trace(fn, kind: str, device=None) -> TracedMod:
    """Traces ``fn`` (a mask_mod when kind is "mask", a score_mod when "score") into a TracedMod.
    Cached per function object and the identity of what its closure holds."""
    if isinstance(fn, TracedMod):
        return fn
    if not callable(fn):
        raise ConfigError(f"{kind}_mod: expected a Python callable, got {type(fn).__name__}")
    try:
        per_fn = _cache.get(fn)
    except TypeError:
        per_fn = None
    key = (kind, _closure_key(fn))
    if per_fn is not None and key in per_fn:
        return per_fn[key]
    mod = _trace(fn, kind)
    try:
        _cache.setdefault(fn, {})[key] = mod
    except TypeError:
        pass
    return mod


class _IndexMode(torch.overrides.TorchFunctionMode):
    """Indexing by 0-dim integer tensors (``doc[q_idx]``, ``bias[h, q_idx - kv_idx]``) as aten.index:
    Python's indexing would read the index's value (data-dependent under fake tensors). Ints and full
    slices (``:``) in the same index are kept; anything else falls back to Python's indexing."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        # The user's line, for the nodes this call makes (error messages name it).
        f = sys._getframe(1)
        while f is not None and ("/torch/" in f.f_code.co_filename or f.f_code.co_filename == __file__):
            f = f.f_back
        if f is not None:
            import torch.fx.traceback as fx_tb
            fx_tb.set_stack_trace([f'  File "{f.f_code.co_filename}", line {f.f_lineno}, in {f.f_code.co_name}\n'
                                   f'    {linecache.getline(f.f_code.co_filename, f.f_lineno).strip()}\n'])
        if func is torch.Tensor.__getitem__ and len(args) == 2:
            base, idx = args
            items = idx if isinstance(idx, tuple) else (idx,)
            if any(isinstance(i, torch.Tensor) and i.dim() == 0 for i in items) and all(
                    (isinstance(i, torch.Tensor) and i.dim() == 0 and not i.is_floating_point()) or
                    (isinstance(i, int) and not isinstance(i, bool)) or
                    (isinstance(i, slice) and i == slice(None)) for i in items):
                lst = [None if isinstance(i, slice) else
                       (torch.full((), i, dtype=torch.int64, device=base.device) if isinstance(i, int) else i)
                       for i in items]
                return torch.ops.aten.index.Tensor(base, lst)
        return func(*args, **kwargs)


def _outside_dynamo() -> contextlib.ExitStack:
    """Under torch.compile a mod is traced while dynamo traces the call: make_fx would take dynamo's
    fake mode (the active one, and its tracing context's), which refuses the tensors the mod captures
    (document ids, a bias table: 'Mixing fake modes', or real ones 'convert all Tensors to FakeTensors
    first'). The trace runs outside both, in a fake mode of its own."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    stack = contextlib.ExitStack()
    stack.enter_context(unset_fake_temporarily())
    stack.enter_context(torch._guards.tracing(None))
    return stack


# torch.nn.functional's activations, which mods apply to the score (PyTorch's own FlexAttention tests:
# silu), are traced through their decompositions into the elementwise ops the emitter writes
# (silu: x * sigmoid(x); gelu: erf or tanh; softplus: log1p(exp); hardtanh: clamp; ...).
_DECOMPOSED = ("silu", "gelu", "softplus", "hardtanh", "leaky_relu", "elu", "celu", "selu", "mish", "hardsigmoid",
               "hardswish", "hardshrink", "softshrink", "logaddexp", "logaddexp2", "xlogy", "logit", "sinc")


def _decompositions():
    from torch._decomp import get_decompositions
    return get_decompositions([getattr(aten, n) for n in _DECOMPOSED if hasattr(aten, n)])


def _capture_device(fn, depth: int = 0) -> Optional[torch.device]:
    """The device of the tensors fn captures (its closure's cells and the globals it names, through the
    functions they hold) where that is not the CPU: the index arguments are made there, as
    FlexAttention's vmap makes them on the query's device, so that a captured row compared with an
    index made a vector (``topk[b, q_idx // 128] == (kv_idx // 128).unsqueeze(-1)``) is on one device.
    None (the CPU) where fn captures none."""
    if depth > 4:
        return None
    code = getattr(fn, "__code__", None)
    glob = getattr(fn, "__globals__", {})
    held = [c.cell_contents for c in (getattr(fn, "__closure__", None) or ()) if _filled(c)]
    held += [glob[n] for n in (code.co_names if code is not None else ()) if n in glob]
    for v in held:
        for x in (v if isinstance(v, (list, tuple)) else (v,)):
            if isinstance(x, torch.Tensor) and x.device.type != "cpu":
                return x.device
            if callable(x) and not isinstance(x, (type, torch.Tensor)) and hasattr(x, "__code__"):
                d = _capture_device(x, depth + 1)
                if d is not None:
                    return d
    return None


def _filled(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:  # an empty cell
        return False
    return True


def _trace(fn, kind: str) -> TracedMod:
    from torch.fx.experimental.proxy_tensor import make_fx

    import torch.fx.traceback as fx_tb

    device = _capture_device(fn)

    def indexed(*a):
        with fx_tb.preserve_node_meta(), _IndexMode():
            # Moved in the trace (fake tensors), not made there: a GPU tensor made outside would need a
            # driver, where torch.compile traces a mod of fake CUDA tensors without one.
            return fn(*(x if device is None else x.to(device) for x in a))
    n = len(_ARGS[kind])
    ints = [torch.zeros((), dtype=torch.int32) for _ in range(4)]
    args = ([torch.zeros((), dtype=torch.float32)] if kind == "score" else []) + ints
    try:
        with _outside_dynamo():
            gm = make_fx(indexed, decomposition_table=_decompositions(), tracing_mode="fake", record_stack_traces=True,
                         _allow_non_fake_inputs=True)(*args)
    except TypeError as e:
        if "record_stack_traces" in str(e) or "_allow_non_fake_inputs" in str(e):
            with _outside_dynamo():
                gm = make_fx(indexed, decomposition_table=_decompositions(), tracing_mode="fake",
                             _allow_non_fake_inputs=True)(*args)
        else:
            raise _trace_error(fn, kind, e) from e
    except ConfigError:
        raise
    except Exception as e:  # data-dependent control flow, unsupported Python, wrong arity ...
        raise _trace_error(fn, kind, e) from e
    if len([p for p in gm.graph.nodes if p.op == "placeholder"]) != n:
        raise ConfigError(f"{kind}_mod at {_where_in(fn)}: expected {n} arguments ({', '.join(_ARGS[kind])})")
    em = _Emitter(kind, fn, gm)
    body, uses = em.run()
    return TracedMod(kind, fn, body, dict(em.aux), uses, gm, _sources(fn, em.origin))


def _sources(fn, origin: dict):
    """TracedMod.sources: each aux tensor as a closure cell or a global of fn (the captured tensor
    itself), with the steps that made the passed tensor; None if one is neither."""
    cells = getattr(fn, "__closure__", None) or ()
    glob = getattr(fn, "__globals__", {})
    names = getattr(getattr(fn, "__code__", None), "co_names", ())
    out = []
    for name, (t, steps) in origin.items():
        where = None
        for i, c in enumerate(cells):
            try:
                if c.cell_contents is t:
                    where = ("cell", i)
                    break
            except ValueError:  # an empty cell
                continue
        if where is None:
            where = next((("global", n) for n in names if glob.get(n) is t), None)
        if where is None:
            return None
        out.append((name,) + where + (steps,))
    return tuple(out)


def fetch(fn, where: str, key, steps: tuple) -> torch.Tensor:
    """A captured tensor of fn as the kernel reads it (TracedMod.sources): plain attribute and torch
    calls, which torch.compile traces, so the tensor becomes an input of the graph."""
    t = fn.__closure__[key].cell_contents if where == "cell" else fn.__globals__[key]
    for step in steps:
        t = (t._base if step == "base" else t.view(torch.int16) if step == "view_int16" else t.float()
             if step == "float" else t.contiguous())
    return t


def _trace_error(fn, kind, e):
    tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    where = _user_line(tb, fn)
    msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    if "data-dependent" in str(e) or "Data dependent" in str(e) or "GuardOnDataDependent" in type(e).__name__:
        what = "Python control flow on a tensor value (if / and / or / bool() / int() of q_idx etc.; use " \
               "torch.where, & and | instead)"
    else:
        what = f"{type(e).__name__}: {msg}"
    return ConfigError(f"{kind}_mod: cannot trace {what} at {where}")


__all__ = ["TracedMod", "trace"]
