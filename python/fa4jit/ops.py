"""PyTorch custom ops over the C API: ``torch.ops.fa4jit.fwd`` (returns out, lse) and
``torch.ops.fa4jit.fwd_out`` (writes a caller's out / lse), and the user functions attention,
attention_varlen and attention_paged built on them.

torch.compile traces the ops through their fake (shape-only) implementations, so compiled graphs
have no break at fa4jit calls. The real implementation launches on the current CUDA stream of the
inputs' device without synchronizing or allocating outside torch (the split-KV workspace is a torch
tensor), so CUDA graphs capture it. Forward only: a backward raises.
"""
import collections
import ctypes
import functools
import inspect
import json
import threading
from typing import Dict, Optional, Sequence, Tuple

import torch

from . import _lib, launch_table
from ._checks import (_BUILTIN_SCORE_MODS, _DESCALE, _DTYPE_NAME, AuxArg, _aux, _aux_tensors,  # noqa: F401
                      _check_aligned, _check_qkv, _eager, _layout, _lse_shape, _new_out, _packed_tensors,
                      _score_mod, _snippet_texts, _vector32, _window)
from .errors import ConfigError, LaunchError

_flex = None  # fa4jit.flex, set when it is imported (Python mods and BlockMasks)

Tensor = torch.Tensor
_FORWARD_ONLY = ("fa4jit attention is forward only: it has no backward. Call it under torch.no_grad() / "
                 "torch.inference_mode(), or detach its inputs")


# ---- kernels: one handle per (device arch, config), cached for the process ------------------------

class _Kernel:
    """An fa4jit_kernel handle, and the workspace sizes its launches needed (by shape)."""

    __slots__ = ("handle", "workspace", "__weakref__")

    def __init__(self, handle: int):
        self.handle = handle
        self.workspace: Dict[tuple, int] = {}

    def __del__(self):
        if self.handle and _lib is not None and _lib.fa4jit_kernel_release is not None:
            _lib.fa4jit_kernel_release(self.handle)
            self.handle = 0


_kernels: Dict[tuple, _Kernel] = {}  # by KernelKey
_kernels_lock = threading.Lock()
_archs: Dict[int, str] = {}


def _arch(device_index: int) -> str:
    a = _archs.get(device_index)
    if a is None:
        a = _archs[device_index] = _lib.device_arch(device_index)
    return a


def _mask_json(causal: bool, window: bool, top_left: bool, prefix: bool, chunked: bool, mask_snippet: str,
               block_snippet: str):
    parts = ["sliding_window"] if window else ["causal"] if causal else []  # causal + window: right extent 0
    if parts and (top_left or prefix):  # prefix: keys [0, mask_prefix) visible to every query too
        flags = {"top_left": top_left, "prefix": prefix}
        parts = [{"kind": parts[0], **{name: True for name, on in flags.items() if on}}]
    parts += ["chunked"] if chunked else []
    if mask_snippet:
        block = {"block_snippet": block_snippet} if block_snippet else {}
        parts.append(dict(kind="custom", snippet=mask_snippet, **block))
    return "none" if not parts else parts[0] if len(parts) == 1 else {"kind": "all_of", "masks": parts}


# What selects a kernel: the ops' kernel cache key, turned into the library's config by _get_kernel.
KernelKey = collections.namedtuple("KernelKey", "arch dtype kv_dtype depth depth_v causal window top_left prefix "
                                   "chunked mask_snippet block_snippet score_kind score_snippet pack group bm out_dtype")


def _get_kernel(key: KernelKey) -> _Kernel:
    k = _kernels.get(key)
    if k is not None:
        return k
    (arch, dtype, kv_dtype, depth, depth_v, causal, window, top_left, prefix, chunked, mask_snippet, block_snippet,
     score_kind, score_snippet, pack, group, bm, out_dtype) = key
    score = {"kind": score_kind, "snippet": score_snippet} if score_kind == "custom" else score_kind
    cfg = {"dtype": dtype, "depth": depth,
           "mask": _mask_json(causal, window, top_left, prefix, chunked, mask_snippet, block_snippet),
           "score_mod": score, "pack_gqa": pack}
    if depth_v != depth:  # a V narrower than Q and K (written only then, as the library does)
        cfg["depth_v"] = depth_v
    if kv_dtype != dtype:  # FP8 KV cache: e4m3 K and V under a 16-bit Q (written only then, as the library does)
        cfg["kv_dtype"] = kv_dtype
    if out_dtype != dtype:  # FP8 inputs: O in bf16 or fp16
        cfg["output_dtype"] = out_dtype
    if pack:
        cfg["group"] = group
    if bm:  # a tile other than the backend's default (_choose)
        cfg["BM"] = bm
    handle = ctypes.c_void_p()
    # Generates, compiles (NVRTC, the GIL released by ctypes) or loads from the disk cache.
    code = _lib.fa4jit_kernel_get(json.dumps(cfg).encode(), arch.encode(), ctypes.byref(handle))
    if code:
        _lib.raise_last(code)
    with _kernels_lock:
        k = _kernels.get(key)
        if k is None:
            k = _kernels[key] = _Kernel(handle.value)
        else:
            _lib.fa4jit_kernel_release(handle.value)
    return k


def clear_kernel_cache():
    """Drops the cached kernel handles (the library's memory and disk caches stay)."""
    with _kernels_lock:
        _kernels.clear()
        _plans.clear()
        _seen.clear()


def _ptr(t: Optional[Tensor]) -> int:
    return 0 if t is None else t.data_ptr()


# The raw-stream getter torch's own generated code uses: no Stream object per call.
_stream = getattr(torch._C, "_cuda_getCurrentRawStream", lambda dev: torch.cuda.current_stream(dev).cuda_stream)


# ---- one call's arguments ---------------------------------------------------------------------------

# One call's arguments in the ops' schema (launch_table.OP_ARGS: names, schema types, defaults), carried
# from the public function through the custom ops, their fake kernels, the checks and the plan cache
# to the launch. The op schemas are derived from the same rows (_schema).
Call = collections.namedtuple("Call", [n for n, _, _ in launch_table.OP_ARGS],
                              defaults=[d for _, _, d in launch_table.OP_ARGS[3:]])
_OP_TYPE = {n: t for n, t, _ in launch_table.OP_ARGS}
_FWD = [i for i, n in enumerate(Call._fields) if n not in ("out", "lse")]
_FWD_OUT = [i for i, n in enumerate(Call._fields) if n not in ("return_lse", "out_bhsd")]


def _schema(fields, mutated=()):
    """The torch.library schema of the op taking Call's fields at these indices."""
    args = []
    for pos, i in enumerate(fields):
        name = Call._fields[i]
        t = "Tensor" if name == "out" else _OP_TYPE[name]
        if name in mutated:
            t = t.replace("Tensor", f"Tensor(a{pos}!)")
        default = Call._field_defaults[name] if i > Call._fields.index("out_bhsd") else ...
        args.append(f"{t} {name}" + ("" if default is ... else f"={default}"))
    return "(" + ", ".join(args) + ")"


def _op_call(fields, args, kw) -> Call:
    return Call(**dict(zip((Call._fields[i] for i in fields), args)), **kw)


def _meta(t: Optional[Tensor]):
    """The part of a tensor the checks and the packed arguments depend on (all but its data pointer)."""
    return None if t is None else (t.shape, t.stride(), t.dtype, t.device)


_SCALARS = frozenset((int, float, bool, str, type(None)))


def _key(x):
    """x with every tensor replaced by its _meta: a plan key part (TypeError when unhashable)."""
    if type(x) in _SCALARS:
        return x
    if isinstance(x, Tensor):
        return (x.shape, x.stride(), x.dtype, x.device)
    if isinstance(x, (list, tuple)):
        return tuple(map(_key, x))
    if isinstance(x, dict):
        return ("dict",) + tuple((n, _key(t)) for n, t in x.items())
    classes = getattr(x, "classes", None)
    if isinstance(classes, Tensor):  # a BlockMask (fa4jit.flex): the launch reads its classes and block sizes
        return ("BlockMask", _key(classes), x.BLOCK_SIZE)
    return x


# ---- the launch: a plan per call signature ----------------------------------------------------------
# Everything a launch derives from its arguments except the data pointers (the checks, the kernel, the
# packed fa4jit_launch_args, the workspace size) is a function of the tensors' shapes, strides, dtypes
# and devices and of the scalar arguments. A _Plan holds it, keyed by exactly those; a repeated call
# with the same signature only reads the pointers, checks their 16-byte alignment and launches. A
# signature is cached only after its checks passed, so every argument error is still raised before
# anything is launched. A plan is made on the second call of a signature: the first only records
# its hash (_seen_before), so calls whose signatures never repeat (a decode loop whose KV length
# grows every step) do not pay for plans they would not reuse. The hashes are ints, which the
# garbage collector does not track: keeping the key tuples instead made Python's full collections
# (over torch's ~250k objects) run every few thousand calls, at ~100 ms each.

_plans: Dict[tuple, object] = {}
_PLANS_MAX = 4096  # distinct signatures kept (scalar values such as softmax_scale are part of a key)
# The optional pointer fields, each with the argument it comes from, in the launch struct's field
# order (launch_table.FIELDS; PointerPatch packs them in that order: block_mask listed last here
# once made every Flex call with a workspace fail).
_POINTERS = tuple(sorted(
    (("lse", "lse"), ("alibi_slopes", "alibi_slopes"), ("aux_ptr", "aux"), ("cu_seqlens_q", "cu_seqlens_q"),
     ("cu_seqlens_k", "cu_seqlens_k"), ("seqused_k", "seqused_k"), ("sinks", "sinks"), ("page_table", "page_table"),
     ("workspace", "workspace"), ("descale_q", "descale_q"), ("descale_k", "descale_k"), ("descale_v", "descale_v"),
     ("block_mask", "block_mask"), ("page_descale", "page_descale")),
    key=lambda p: _lib.FIELD_INDEX[p[0] + "[0]" if p[0] == "aux_ptr" else p[0]]))
# The user functions' argument an op argument comes from where the names differ (block_mask_mod: a
# BlockMask, whose classes are the tile map).
_USER_ARG = {"block_mask": "block_mask_mod"}
_seen = set()  # hashes of the signatures called once, with no plan yet
_SEEN_MAX = 1 << 16


def _seen_before(key: tuple) -> bool:
    """Whether a call of this signature came before (records it). A hash collision only makes a plan
    one call early: plans are kept under their full keys."""
    h = hash(key)
    if h in _seen:
        return True
    if len(_seen) >= _SEEN_MAX:
        _seen.clear()
    _seen.add(h)
    return False


def _remember(key: tuple, plan):
    if len(_plans) >= _PLANS_MAX:
        _plans.clear()
    _plans[key] = plan
    return plan


class _Plan:
    """A launch of one signature. The ops' plans get out and lse from their caller; the user functions'
    plans (_user) also say how to allocate them (o_*, lse_*) and what the call returns."""
    __slots__ = ("kernel", "handle", "dev", "device", "args", "values", "at", "pointers", "nbytes", "like_q",
                 "o_shape", "o_stride", "dtype", "lse_shape", "lse_stride", "cast", "return_lse")


@functools.lru_cache(maxsize=4096)
def _choose(arch: str, dtype: str, kv_dtype: str, depth: int, depth_v: int, group: int, sq: int, varlen_batch: int,
            total_q: int, pack_request: int, window_left: int = -1, window_right: int = -1,
            mask_prefix: int = 0) -> Tuple[bool, int]:
    """(pack_gqa, BM) of a launch: the library's automatic choice (jit::choose_kernel,
    generator/kernel_choice.cpp, and each backend's own tiles, BackendPolicy::launch_bm), the one
    `prewarm --model` derives its kernels from. sq: max_seqlen_q (varlen) or Sq; varlen_batch 0 when
    not varlen; total_q: q's rows; pack_request: -1 automatic (pack_gqa=None), else 0 / 1; a sliding
    window's extents (-1: unbounded; the defaults: no window) and key prefix. BM 0: the backend's default."""
    pack, bm = ctypes.c_int32(), ctypes.c_int32()
    code = _lib.fa4jit_choose_kernel2(arch.encode(), dtype.encode(), kv_dtype.encode(), depth, depth_v, group, sq,
                                      varlen_batch, total_q, window_left, window_right, mask_prefix, pack_request,
                                      ctypes.byref(pack), ctypes.byref(bm))
    if code:
        _lib.raise_last(code)
    return bool(pack.value), bm.value


def _make_plan(a: Call, patch=True, names=Call._fields) -> _Plan:
    """Checks the arguments, gets the kernel and packs the launch arguments of this signature. Without
    patch, the plan is for this call only: plan.values are the struct's values with this call's pointers
    (the workspace's excepted) and plan.args is None. names: the argument names of the calls _run
    launches the plan with (a Call's fields, or a user function's parameters)."""
    batch = _check_qkv(a)
    q, k, aux = a.q, a.k, a.aux
    f = _packed_tensors(q=q, k=k, v=a.v, o=a.out)
    dev = q.device.index
    if dev is None:
        dev = torch.cuda.current_device()
    window = a.window_left != -2  # -2: no window (the op's encoding of None)
    if a.mask_prefix > 0 and not (a.causal or window):
        raise ConfigError(f"mask_prefix is {a.mask_prefix}: a key prefix widens a causal or sliding-window mask "
                          "(pass causal=True or a window)")
    score_mod = a.score_mod
    if score_mod in ("", "identity"):
        score_mod = "softcap" if a.softcap > 0 else ("alibi" if a.alibi_slopes is not None else "identity")
    score_kind = score_mod if score_mod in _BUILTIN_SCORE_MODS else "custom"
    mask_mod, block_mask_mod, score_snippet = _snippet_texts(aux, a.aux_names, a.mask_mod, a.block_mask_mod, score_mod)
    group = q.shape[2] // k.shape[2]
    varlen = a.cu_seqlens_q is not None
    sq = a.max_seqlen_q if varlen else q.shape[1]
    arch = _arch(dev)
    pack, bm = _choose(arch, _DTYPE_NAME[q.dtype], _DTYPE_NAME[k.dtype], q.shape[3], a.v.shape[3], group, sq,
                       batch if varlen else 0, q.shape[1], -1 if a.pack_gqa < 0 else int(bool(a.pack_gqa)),
                       *((a.window_left, a.window_right, a.mask_prefix) if window else ()))
    kernel = _get_kernel(KernelKey(arch, _DTYPE_NAME[q.dtype], _DTYPE_NAME[k.dtype], q.shape[3], a.v.shape[3],
                                   a.causal, window, a.top_left and (a.causal or window),
                                   a.mask_prefix > 0, a.chunk_size > 0, mask_mod,
                                   block_mask_mod, score_kind, score_snippet, pack, group if pack else 0, bm,
                                   _DTYPE_NAME[a.out.dtype]))
    # The struct's fields by name (launch_table.FIELDS; the ones not set here take the table's defaults).
    f.update(size=_lib.LAUNCH_ARGS_SIZE, device=dev, lse=_ptr(a.lse), softmax_scale=a.softmax_scale,
             window_left=a.window_left if window else -1, window_right=a.window_right if window else -1,
             chunk_size=a.chunk_size, softcap=a.softcap, alibi_slopes=_ptr(a.alibi_slopes),
             aux_ptr=[_ptr(t) for t in aux] + [0] * (4 - len(aux)),
             aux_scalar=list(a.scalars) + [0.0] * (4 - len(a.scalars)), cu_seqlens_q=_ptr(a.cu_seqlens_q),
             cu_seqlens_k=_ptr(a.cu_seqlens_k), seqused_k=_ptr(a.seqused_k), batch=batch if varlen else 0,
             max_seqlen_q=a.max_seqlen_q if varlen else 0, sinks=_ptr(a.sinks), page_table=_ptr(a.page_table),
             max_pages=a.page_table.shape[1] if a.page_table is not None else 0, num_splits=a.num_splits,
             descale_q=_ptr(a.descale_q), descale_k=_ptr(a.descale_k), descale_v=_ptr(a.descale_v),
             max_seqlen_k=a.max_seqlen_k, page_descale=_ptr(a.page_descale),
             mask_prefix=a.mask_prefix)
    if a.block_mask is not None:  # (B or 1, H or 1, q blocks, kv blocks): a broadcast dimension has stride 0
        t = a.block_mask
        f.update(block_mask=t.data_ptr(), block_mask_q=a.block_mask_q, block_mask_k=a.block_mask_k,
                 block_mask_batch_stride=t.stride(0) if t.shape[0] > 1 else 0,
                 block_mask_head_stride=t.stride(1) if t.shape[1] > 1 else 0, block_mask_row_stride=t.stride(2))
    nbytes = 0
    if a.num_splits != 1:
        # Split-KV scratch comes from torch's allocator (stream-ordered, CUDA-graph safe) on every
        # launch, sized by the library once per shape.
        wkey = (dev, tuple(q.shape), tuple(k.shape), a.num_splits, batch, a.max_seqlen_q, f["max_pages"], varlen,
                a.cu_seqlens_k is not None, a.seqused_k is not None, a.max_seqlen_k)
        nbytes = kernel.workspace.get(wkey)
        if nbytes is None:
            n = ctypes.c_uint64()
            code = _lib.fa4jit_workspace_bytes(kernel.handle, _lib.LAUNCH_ARGS.pack(*_lib.launch_values(f)),
                                               ctypes.byref(n))
            if code:
                _lib.raise_last(code)
            nbytes = kernel.workspace[wkey] = n.value
            if len(kernel.workspace) > 4096:
                kernel.workspace.clear()
        f["workspace_bytes"] = nbytes
    given = {"aux": bool(aux), "workspace": bool(nbytes)}
    pointers = [(field, arg) for field, arg in _POINTERS if given.get(arg, getattr(a, arg, None) is not None)]
    plan = _Plan()
    plan.kernel, plan.handle, plan.dev, plan.device = kernel, kernel.handle, dev, q.device
    plan.values = None if patch else _lib.launch_values(f)
    fields = [p if p != "aux_ptr" else f"aux_ptr[{i}]" for p, _ in pointers for i in range(len(aux) if p == "aux_ptr"
                                                                                             else 1)]
    plan.args = _lib.PointerPatch(_lib.launch_values(f), ["q.data", "k.data", "v.data", "o.data"] + fields) \
        if patch else None
    at = {n: i for i, n in enumerate(names)}
    plan.at = (at["q"], at["k"], at["v"], at["out"], at.get("lse", -1))
    plan.pointers = tuple((arg, at.get(arg, at.get(_USER_ARG.get(arg), -1))) for _, arg in pointers)
    plan.nbytes = nbytes
    plan.like_q = plan.o_shape = plan.o_stride = plan.lse_shape = plan.lse_stride = None
    plan.dtype, plan.cast, plan.return_lse = a.out.dtype, False, a.lse is not None
    return plan


def _run(plan: _Plan, values: tuple):
    """Launches a plan with this call's arguments, values: in the order of the names it was made for (a
    Call, or a user function's arguments, whose q, k, v and out are views of the ones the plan was made
    with: only their data pointers are read); out None and lse None are allocated as the plan says.
    Returns out, or (out, lse) when the plan's call returns the LSE."""
    iq, ik, iv, io, il = plan.at
    q, out = values[iq], values[io]
    if out is None:
        out = torch.empty_like(q) if plan.like_q else torch.empty_strided(plan.o_shape, plan.o_stride,
                                                                          dtype=plan.dtype, device=plan.device)
    lse = values[il] if il >= 0 else None
    if plan.lse_shape is not None:
        lse = torch.empty_strided(plan.lse_shape, plan.lse_stride, dtype=torch.float32, device=plan.device)
    qp, kp, vp, op = q.data_ptr(), values[ik].data_ptr(), values[iv].data_ptr(), out.data_ptr()
    if (qp | kp | vp | op) & 15:
        _check_aligned(q=q, k=values[ik], v=values[iv], out=out)
    ptrs = [qp, kp, vp, op]
    workspace = None
    for name, i in plan.pointers:
        if name == "lse":
            ptrs.append(lse.data_ptr())
        elif name == "aux":
            ptrs += [t.data_ptr() for t in _aux_tensors(values[i])]
        elif name == "workspace":
            workspace = torch.empty_strided((plan.nbytes,), (1,), dtype=torch.uint8, device=plan.device)
            ptrs.append(workspace.data_ptr())
        elif name == "block_mask":
            t = values[i]
            ptrs.append(getattr(t, "classes", t).data_ptr())  # a user call's BlockMask, an op's tensor
        else:
            t = values[i]
            ptrs.append((_vector32(t) if plan.cast and name in ("sinks", "alibi_slopes") else t).data_ptr())
    code = _lib.fa4jit_launch(plan.handle, plan.args.pack(ptrs), _stream(plan.dev))
    if code:
        _lib.raise_last(code)
    return (out, lse) if plan.return_lse else out


def _launch(a: Call, cached=True):
    """The ops' launch (a.out given). cached=False: a one-off launch (the user functions' first call of
    a signature), without a plan kept for later calls."""
    if not cached:
        plan = _make_plan(a, patch=False)
        values, workspace = plan.values, None
        if plan.nbytes:
            workspace = torch.empty_strided((plan.nbytes,), (1,), dtype=torch.uint8, device=plan.device)
            values[_lib.FIELD_INDEX["workspace"]] = workspace.data_ptr()
        code = _lib.fa4jit_launch(plan.handle, _lib.LAUNCH_ARGS.pack(*values), _stream(plan.dev))
        if code:
            _lib.raise_last(code)
        return
    key = ("launch", *[x if type(x) in _SCALARS else _key(x) for x in a])
    plan = _plans.get(key)
    if plan is None:
        if not _seen_before(key):
            return _launch(a, cached=False)
        plan = _remember(key, _make_plan(a))
    _run(plan, a)


# ---- the custom ops ---------------------------------------------------------------------------------

@torch.library.custom_op("fa4jit::fwd", mutates_args=(), schema=_schema(_FWD) + " -> (Tensor, Tensor)")
def _fwd(*args, **kw):
    return _fwd_impl(_op_call(_FWD, args, kw))


def _fwd_impl(a: Call, cached=True):
    out = _new_out(a.q, a.out_bhsd, a.v)
    lse = torch.empty(_lse_shape(a.q, a.cu_seqlens_q is not None) if a.return_lse else (0,), dtype=torch.float32,
                      device=a.q.device)
    _launch(a._replace(out=out, lse=lse if a.return_lse else None), cached)
    return out, lse


@_fwd.register_fake
def _fwd_fake(*args, **kw):
    a = _op_call(_FWD, args, kw)
    _check_qkv(a)
    _snippet_texts(a.aux, a.aux_names, a.mask_mod, a.block_mask_mod, a.score_mod)  # snippet/aux errors at trace time
    lse_shape = _lse_shape(a.q, a.cu_seqlens_q is not None) if a.return_lse else (0,)
    return _new_out(a.q, a.out_bhsd, a.v), a.q.new_empty(lse_shape, dtype=torch.float32)


@torch.library.custom_op("fa4jit::fwd_out", mutates_args=("out", "lse"),
                         schema=_schema(_FWD_OUT, ("out", "lse")) + " -> ()")
def _fwd_out(*args, **kw):
    _launch(_op_call(_FWD_OUT, args, kw))


@_fwd_out.register_fake
def _fwd_out_fake(*args, **kw):
    a = _op_call(_FWD_OUT, args, kw)
    _check_qkv(a)
    _snippet_texts(a.aux, a.aux_names, a.mask_mod, a.block_mask_mod, a.score_mod)


def _no_backward(ctx, *grads):
    raise RuntimeError(_FORWARD_ONLY)


# The out= op mutates its output, which autograd cannot track: _prepare refuses grad-requiring inputs.
_fwd.register_autograd(_no_backward, setup_context=lambda ctx, inputs, output: None)


# ---- the user functions -----------------------------------------------------------------------------

def _prepare(kind: str, u: dict):
    """A user call's arguments u (by name; paged: k_cache and v_cache as k and v) in the ops' schema:
    (Call, squeeze), squeeze when the output drops q's leading dimension (packed varlen). Raises on bad
    arguments, naming them; sinks and ALiBi slopes become float32."""
    q, k, v, out, get = u["q"], u["k"], u["v"], u["out"], u.get
    bhsd = kind == "attention" and _layout(u["layout"])
    if bhsd:
        q, k, v, out = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), out if out is None else \
            out.transpose(1, 2)
    squeeze = kind == "varlen" or (kind == "paged" and u["cu_seqlens_q"] is not None)
    if squeeze:
        if kind == "paged" and u["max_seqlen_q"] is None:
            raise LaunchError("max_seqlen_q: needed with cu_seqlens_q")
        for name, t in (("q", q), ("k", k), ("v", v)) if kind == "varlen" else (("q", q),):
            if isinstance(t, Tensor) and t.dim() != 3:
                raise LaunchError(f"{name} has shape {tuple(t.shape)}; " + (
                    "varlen tensors are (total, heads, head_dim)" if kind == "varlen" else
                    "with cu_seqlens_q it is packed (total_q, heads, head_dim)"))
        q, out = q.unsqueeze(0), out.unsqueeze(0) if out is not None and out.dim() == 3 else out
        if kind == "varlen":
            k, v = k.unsqueeze(0), v.unsqueeze(0)
    aux, aux_names = _aux(u["aux"])
    for name in _DESCALE:
        if get(name) is not None and not isinstance(u[name], Tensor):  # before the op schema's cast error
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(u[name]).__name__}")
    scalars = [float(s) for s in (u["scalars"] or ())]
    if len(scalars) > 4:
        raise ConfigError(f"scalars: {len(scalars)} values; at most 4")
    causal, window, top_left, prefix, mask_mod = bool(u["causal"]), u["window"], False, 0, u["mask_mod"] or ""
    if _flex is not None and isinstance(mask_mod, _flex.Band):  # a traced band (flex.lower_call): the built-in mask
        b = mask_mod
        causal, window, top_left, prefix, mask_mod = b.causal, b.window, b.top_left, b.prefix, ""
    wl, wr = _window(window, causal)
    softcap = float(u["softcap"] or 0.0)
    score_mod = _score_mod(u["score_mod"], softcap, u["alibi_slopes"])
    if out is not None and torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v, out)):
        raise RuntimeError(_FORWARD_ONLY + " (out= with inputs that require grad)")
    lse = None
    if out is not None and u["return_lse"]:
        lse = torch.empty(_lse_shape(q, get("cu_seqlens_q") is not None), dtype=torch.float32, device=q.device)
    # A BlockMask (fa4jit.flex: given, or derived from the mask) is the launch's run-time tile map.
    tiles, block_mask_mod = _tile_map(u["block_mask_mod"])
    a = Call(q, k, v, out, lse, get("cu_seqlens_q"), get("cu_seqlens_k"), get("seqused_k"), get("page_table"),
             _vector32(u["sinks"]), _vector32(u["alibi_slopes"]), aux, scalars, aux_names, causal, wl, wr,
             int(u["chunk_size"] or 0), mask_mod, block_mask_mod, score_mod, softcap,
             float(u["softmax_scale"] or 0.0), int(get("max_seqlen_q") or 0), int(u["num_splits"]),
             -1 if u["pack_gqa"] is None else int(bool(u["pack_gqa"])), bool(u["return_lse"]), bhsd,
             u["descale_q"], u["descale_k"], u["descale_v"], int(get("max_seqlen_k") or 0),
             *((tiles.classes, *tiles.BLOCK_SIZE) if tiles is not None else ()), page_descale=get("page_descale"),
             top_left=top_left, mask_prefix=prefix)
    return a, squeeze


def _tile_map(block_mask_mod):
    """(BlockMask or None, block snippet) of a user's block_mask_mod: a CUDA C++ snippet, or a BlockMask
    (fa4jit.flex), whose classes the launch passes as the run-time tile map (Call.block_mask)."""
    if block_mask_mod is None or isinstance(block_mask_mod, str):
        return None, block_mask_mod or ""
    return block_mask_mod, ""


def _call(a: Call):
    """Runs a prepared call: directly when eager (a one-off launch: the user functions cache their own
    plans), else through torch.ops.fa4jit.*. Returns (out, lse)."""
    direct = _eager(a.q, a.k, a.v, a.out)
    if a.out is not None:
        if direct:
            _launch(a, cached=False)
        else:
            torch.ops.fa4jit.fwd_out(*[a[i] for i in _FWD_OUT])
        return a.out, a.lse
    if direct:
        return _fwd_impl(a, cached=False)
    return torch.ops.fa4jit.fwd(*[a[i] for i in _FWD])


# ---- the public functions: one body for the three --------------------------------------------------
# An eager call (_eager) whose signature (the user's tensors' metadata and every other argument, as
# passed) was seen before skips _prepare, the layout views, _check_qkv and the packing: _run
# allocates the outputs as the first call did, reads the pointers and launches. The second call of a
# signature makes the plan through the same normalization and checks as the first, so every argument
# error is still raised; unhashable arguments take the general path.

def _user(kind: str, names: tuple, values: tuple, key):
    """The public functions' general path: values are the call's arguments (in the order of names),
    key its plan key (None: no plan for this call)."""
    u = dict(zip(names, values))
    a, squeeze = _prepare(kind, u)
    if key is not None and _seen_before(key):
        return _run(_remember(key, _plan_user(a, u, names, squeeze)), values)
    o, lse = _call(a)
    out = u["out"]
    o = out if out is not None else o.transpose(1, 2) if a.out_bhsd else o.squeeze(0) if squeeze else o
    return (o, lse) if a.return_lse else o


def _plan_user(a: Call, u: dict, names: tuple, squeeze: bool) -> _Plan:
    """The plan of a user call (u: its arguments, a: as prepared): _make_plan's, plus how _run
    allocates out and lse as the general path does and what the call returns."""
    q_user = u["q"]
    o = a.out if a.out is not None else _new_out(a.q, a.out_bhsd, a.v)
    lse = a.lse
    if a.return_lse and lse is None:
        lse = torch.empty(_lse_shape(a.q, a.cu_seqlens_q is not None), dtype=torch.float32, device=a.q.device)
    p = _make_plan(a._replace(out=o, lse=lse), names=names)
    if a.out is None:
        shown = o.transpose(1, 2) if a.out_bhsd else (o.squeeze(0) if squeeze else o)  # what the user gets
        p.o_shape, p.o_stride = tuple(shown.shape), shown.stride()
        p.like_q = (p.o_shape == tuple(q_user.shape) and shown.dtype == q_user.dtype and
                    torch.empty_like(q_user).stride() == p.o_stride)
    if lse is not None:
        p.lse_shape, p.lse_stride = tuple(lse.shape), lse.stride()
    p.cast = a.sinks is not u["sinks"] or a.alibi_slopes is not u["alibi_slopes"]  # made float32 per call
    return p


_PLAIN = (bool, int, float, str, Optional[int], Optional[float], Optional[str], Optional[bool])


def _public(kind: str):
    """Makes fn's body the eager fast path and _user(kind, <fn's arguments>), generated from fn's
    signature: the argument list is written once, there (k_cache and v_cache reach _user as k and v).
    The plan key is every argument as passed, a tensor by its metadata (_meta)."""
    def wrap(fn):
        params = list(inspect.signature(fn).parameters.values())
        names = tuple({"k_cache": "k", "v_cache": "v"}.get(p.name, p.name) for p in params)
        args = ", ".join(p.name + ("" if p.default is p.empty else f"=_d[{i}]") for i, p in enumerate(params))
        values = ", ".join(p.name for p in params)
        # block_mask_mod: a snippet, or a BlockMask (a new one each time a mask's aux changes) keyed by
        # its classes' metadata, so its calls share one plan.
        key = ", ".join(f"{n}.shape, {n}.stride(), {n}.dtype, {n}.device" if p.annotation is Tensor else
                        f"_meta({n})" if p.annotation == Optional[Tensor] else
                        n if p.annotation in _PLAIN and n != "block_mask_mod" else
                        f"_key({n})" for n, p in ((p.name, p) for p in params))
        q, k, v = (p.name for p in params[:3])
        # Python mods, BlockMasks and mask snippets without a block snippet (fa4jit.flex) are lowered to
        # snippets, aux tensors and a tile map first: the plan key and the launch see the lowered call.
        layout = "layout" if "layout" in names else "None"
        lower = (f"    if _flex is not None and _flex.mods_need_lowering(mask_mod, block_mask_mod, score_mod):\n"
                 f"        mask_mod, block_mask_mod, score_mod, aux = _flex.lower_call({q}, {k}, {layout}, mask_mod, "
                 f"block_mask_mod, score_mod, aux, bool(causal) or window is not None or bool(chunk_size))\n")
        src = (f"def {fn.__name__}({args}):\n{lower}    key = None\n    if _eager({q}, {k}, {v}, out):\n        try:\n"
               f"            key = ({kind!r}, {key})\n            plan = _plans.get(key)\n"
               f"        except (TypeError, AttributeError):  # unhashable: the general path reports it\n"
               f"            key = plan = None\n        if plan is not None:\n            return _run(plan, ({values},))\n"
               f"    return _user({kind!r}, _names_{kind}, ({values},), key)\n")
        g, env = globals(), {}  # the module's globals: the names it reads stay patchable
        g[f"_names_{kind}"], g[f"_defaults_{kind}"] = names, [p.default for p in params]
        exec(src.replace("=_d[", f"=_defaults_{kind}["), g, env)  # noqa: S102 (the package's own signature)
        return functools.wraps(fn)(env[fn.__name__])
    return wrap


@_public("attention")
def attention(q: Tensor, k: Tensor, v: Tensor, causal: bool = False, window=None, softcap: float = 0.0,
              softmax_scale: Optional[float] = None, sinks: Optional[Tensor] = None, score_mod: Optional[str] = None,
              mask_mod: Optional[str] = None, aux: AuxArg = None, scalars: Optional[Sequence[float]] = None,
              alibi_slopes: Optional[Tensor] = None, num_splits: int = 0, pack_gqa: Optional[bool] = None,
              return_lse: bool = False, out: Optional[Tensor] = None, layout: str = "bshd", chunk_size: int = 0,
              block_mask_mod: Optional[str] = None, descale_q: Optional[Tensor] = None,
              descale_k: Optional[Tensor] = None, descale_v: Optional[Tensor] = None):
    """Attention forward (no backward) with a kernel generated for the arguments' variant.

    q: (B, Sq, Hq, D); k, v: (B, Sk, Hkv, D), Hq a multiple of Hkv (GQA/MQA); bf16 or fp16; D 64,
    96 (padded to 128), 128, 192 or 256 (sm_100a 64, 96, 128, 192); with D 192, v (and out) may be 128 wide.
    ``layout="bhsd"`` takes and returns (B, H, S, D) tensors (SDPA's layout) as strided views,
    without copies. Any strides with head_dim contiguous are accepted
    (multiples of 16 bytes).

    FP8 (sm_90a): q, k, v torch.float8_e4m3fn; the output is bf16 (or out's dtype, bf16 or fp16).
    descale_q / descale_k / descale_v: optional float32 (B, Hkv) factors, FlashAttention-3's: the
    kernel computes with descale * stored value (None: 1). Only FP8 inputs take them.

    FP8 KV cache: q bf16 or fp16 with k and v both torch.float8_e4m3fn (a kernel with "kv_dtype":
    "e4m3"); the output has q's dtype. descale_k / descale_v (B, Hkv) dequantize K and V; descale_q
    is refused (q is 16-bit). Works with every variant here, varlen and paged caches included;
    k/v strides are multiples of 16 elements (16 bytes).

    causal: bottom-right aligned when Sq != Sk (decode). window: (left, right) extents, None or -1
    unbounded (with causal, right is 0). chunk_size: chunked attention (Llama 4), combined with
    causal when both are set. softcap: tanh soft-capping of the scores (Gemma 2). softmax_scale:
    default 1/sqrt(D). sinks: float [Hq] sink logits (gpt-oss). alibi_slopes: float [Hq] (or
    score_mod="alibi" for the standard slopes).

    score_mod / mask_mod: CUDA C++ function bodies (FlexAttention's signature: score, b, h, q_idx,
    kv_idx; mask_mod returns bool), or for score_mod a built-in name ("softcap", "alibi"). They
    read ``aux`` tensors (up to 4, on q's device): a dict names them (``aux={"doc": doc}`` gives
    the snippet ``const int* doc``); a list gives ``aux0``.., a typed ``aux[i]`` when the dtypes
    agree, and binds undeclared names the snippet indexes in order (docs/PYTHON.md). ``scalars``:
    up to 4 floats, ``scalars[i]``. block_mask_mod: optional tile classifier for mask_mod, a CUDA C++
    block snippet or a ``fa4jit.BlockMask`` (its classes are the launch's run-time tile map); a mask
    snippet or Python mask_mod without one gets a tile map derived from the mask (dense calls).

    num_splits: split-KV (0 automatic, 1 none). pack_gqa: pack the query heads of a KV head into
    one tile (None: automatic for short query lengths). out: write into this tensor (q's shape and
    layout). Returns out, or (out, lse) with lse float32 (B, Hq, Sq) when return_lse.
    """


@_public("varlen")
def attention_varlen(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor, max_seqlen_q: int,
                     max_seqlen_k: Optional[int] = None, causal: bool = False, seqused_k: Optional[Tensor] = None,
                     window=None, softcap: float = 0.0, softmax_scale: Optional[float] = None,
                     sinks: Optional[Tensor] = None, score_mod: Optional[str] = None, mask_mod: Optional[str] = None,
                     aux: AuxArg = None, scalars: Optional[Sequence[float]] = None,
                     alibi_slopes: Optional[Tensor] = None, num_splits: int = 0, pack_gqa: Optional[bool] = None,
                     return_lse: bool = False, out: Optional[Tensor] = None, chunk_size: int = 0,
                     block_mask_mod: Optional[str] = None, descale_q: Optional[Tensor] = None,
                     descale_k: Optional[Tensor] = None, descale_v: Optional[Tensor] = None):
    """Variable-length attention forward (no backward), as flash_attn_varlen_func.

    q: (total_q, Hq, D), k/v: (total_k, Hkv, D), packed sequences; cu_seqlens_q/k: int32 (B + 1,)
    offsets on the device; max_seqlen_q: the longest query sequence (a host int). max_seqlen_k: the
    longest key sequence (a host int, None: unknown), a hint as in FlashAttention: it only chooses
    the CTA schedule (causal: that of an equal-length batch) and how many ways the keys split (a
    decode batch splits only with it), and any value gives the same results.
    seqused_k: int32 (B,) keys used per sequence.
    Other arguments as attention() (FP8 descale factors: (B, Hkv), B the number of sequences).
    Returns out (total_q, Hq, D), or (out, lse) with lse (Hq, total_q).
    """


@_public("paged")
def attention_paged(q: Tensor, k_cache: Tensor, v_cache: Tensor, page_table: Tensor, seqused_k: Optional[Tensor],
                    causal: bool = False, cu_seqlens_q: Optional[Tensor] = None, max_seqlen_q: Optional[int] = None,
                    window=None, softcap: float = 0.0, softmax_scale: Optional[float] = None,
                    sinks: Optional[Tensor] = None, score_mod: Optional[str] = None, mask_mod: Optional[str] = None,
                    aux: AuxArg = None, scalars: Optional[Sequence[float]] = None,
                    alibi_slopes: Optional[Tensor] = None, num_splits: int = 0, pack_gqa: Optional[bool] = None,
                    return_lse: bool = False, out: Optional[Tensor] = None, chunk_size: int = 0,
                    block_mask_mod: Optional[str] = None, descale_q: Optional[Tensor] = None,
                    descale_k: Optional[Tensor] = None, descale_v: Optional[Tensor] = None,
                    max_seqlen_k: Optional[int] = None, page_descale: Optional[Tensor] = None):
    """Attention forward (no backward) over a paged KV cache: decode and chunked prefill.

    k_cache/v_cache: (num_pages, page_size, Hkv, D); page_table: int32 (B, max_pages), sequence b's key
    row r is row r % page_size of page page_table[b, r // page_size] (entries past a sequence's pages
    must still be valid page indices); seqused_k: int32 (B,) keys per sequence (None: every page).
    q: (B, Sq, Hq, D), or packed (total_q, Hq, D) with cu_seqlens_q and max_seqlen_q (varlen queries).
    Any page_size on every backend (sm_90a and sm_100a gather pages no TMA box takes, such as 1, row
    by row: sm_90a decode at page 16's speed; sm_90a's FP8, e4m3 q, k and v, refuses them, naming
    page_size; sm_100a's gather is compiled and checked, not run: no Blackwell GPU). max_seqlen_k:
    the longest sequence's keys (None: max_pages x page_size bounds it), a hint as in
    attention_varlen(). page_descale: an e4m3 latent cache's (MLA on sm_90a: fa4jit.mla_decode)
    per-page factors, float32 (num_pages,): page p's rows are read as page_descale[p] x stored value.
    Other arguments as attention().
    """
