"""PyTorch custom ops over the C API: ``torch.ops.fa4jit.fwd`` (returns out, lse) and
``torch.ops.fa4jit.fwd_out`` (writes a caller's out / lse), and the user functions attention,
attention_varlen and attention_paged built on them.

torch.compile traces the ops through their fake (shape-only) implementations, so compiled graphs
have no break at fa4jit calls. The real implementation launches on the current CUDA stream of the
inputs' device without synchronizing or allocating outside torch (the split-KV workspace is a torch
tensor), so CUDA graphs capture it. Forward only: a backward raises.
"""
import ctypes
import json
import threading
from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch

from . import _lib, _snippets
from .errors import ConfigError, LaunchError

_flex = None  # fa4jit.flex, set when it is imported (Python mods and BlockMasks)

Tensor = torch.Tensor

_FP8 = getattr(torch, "float8_e4m3fn", None)  # FP8 inputs (sm_90a); older torch has none
_DTYPE_CODE = {torch.bfloat16: 0, torch.float16: 1}  # fa4jit_dtype
_DTYPE_NAME = {torch.bfloat16: "bf16", torch.float16: "fp16"}
if _FP8 is not None:
    _DTYPE_CODE[_FP8] = 2
    _DTYPE_NAME[_FP8] = "e4m3"
_DESCALE = ("descale_q", "descale_k", "descale_v")
_BUILTIN_SCORE_MODS = ("identity", "softcap", "alibi")
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


_kernels: Dict[tuple, _Kernel] = {}
_kernels_lock = threading.Lock()
_archs: Dict[int, str] = {}


def _arch(device_index: int) -> str:
    a = _archs.get(device_index)
    if a is None:
        a = _archs[device_index] = _lib.device_arch(device_index)
    return a


def _mask_json(causal: bool, window: bool, chunked: bool, mask_snippet: str, block_snippet: str):
    parts = []
    if window:
        parts.append("sliding_window")  # causal + window: right extent 0 (set by the caller)
    elif causal:
        parts.append("causal")
    if chunked:
        parts.append("chunked")
    if mask_snippet:
        m = {"kind": "custom", "snippet": mask_snippet}
        if block_snippet:
            m["block_snippet"] = block_snippet
        parts.append(m)
    if not parts:
        return "none"
    return parts[0] if len(parts) == 1 else {"kind": "all_of", "masks": parts}


def _get_kernel(key: tuple) -> _Kernel:
    k = _kernels.get(key)
    if k is not None:
        return k
    (arch, dtype, kv_dtype, depth, causal, window, chunked, mask_snippet, block_snippet, score_kind, score_snippet,
     pack, group, out_dtype) = key
    score = {"kind": score_kind, "snippet": score_snippet} if score_kind == "custom" else score_kind
    cfg = {"dtype": dtype, "depth": depth, "mask": _mask_json(causal, window, chunked, mask_snippet, block_snippet),
           "score_mod": score, "pack_gqa": pack}
    if kv_dtype != dtype:  # FP8 KV cache: e4m3 K and V under a 16-bit Q (written only then, as the library does)
        cfg["kv_dtype"] = kv_dtype
    if out_dtype != dtype:  # FP8 inputs: O in bf16 or fp16
        cfg["output_dtype"] = out_dtype
    if pack:
        cfg["group"] = group
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


# ---- argument checks (shared by the real and the fake implementation) ----------------------------

def _where(t: Tensor) -> str:
    return str(t.device)


def _check_device(name: str, t: Optional[Tensor], device: torch.device):
    if t is None:
        return
    if not isinstance(t, Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.device != device:
        raise LaunchError(f"{name} is on {_where(t)}, q on {device}: every tensor must be on q's CUDA device")


def _check_int32_vector(name: str, t: Optional[Tensor], device: torch.device, length=None):
    if t is None:
        return
    _check_device(name, t, device)
    if t.dtype != torch.int32:
        raise LaunchError(f"{name} has dtype {t.dtype}; it must be torch.int32")
    if t.dim() != 1 or (length is not None and t.shape[0] != length):
        want = f"({length},)" if length is not None else "1-D"
        raise LaunchError(f"{name} has shape {tuple(t.shape)}; expected {want}")
    if not t.is_contiguous():
        raise LaunchError(f"{name} must be contiguous")


def _check_float_vector(name: str, t: Optional[Tensor], device: torch.device, length: int):
    if t is None:
        return
    _check_device(name, t, device)
    if t.dtype != torch.float32:
        raise LaunchError(f"{name} has dtype {t.dtype}; it must be torch.float32")
    if tuple(t.shape) != (length,) or not t.is_contiguous():
        raise LaunchError(f"{name} has shape {tuple(t.shape)}; expected a contiguous ({length},) (one per query head)")


def _out_dtype(q_dtype):
    """O's dtype for inputs of q_dtype when the caller passes no out: q's (also under an FP8 KV
    cache), or bf16 for FP8 q, k, v."""
    return torch.bfloat16 if _FP8 is not None and q_dtype == _FP8 else q_dtype


def _check_descale(q, k, v, batch, Hkv, device, descale_q, descale_k, descale_v):
    """FP8 descale factors (FlashAttention-3's): float32 (batch, Hkv) on q's device, each for an FP8
    tensor only: descale_q for e4m3 q, descale_k / descale_v for e4m3 k / v (FP8 inputs, or an FP8
    KV cache under a 16-bit q)."""
    for name, t, x, xname in zip(_DESCALE, (descale_q, descale_k, descale_v), (q, k, v), "qkv"):
        if t is None:
            continue
        if not isinstance(t, Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
        if _FP8 is None or x.dtype != _FP8:
            hint = ""
            if xname == "q" and _FP8 is not None and k.dtype == _FP8:
                hint = (" (with an FP8 KV cache q is 16-bit: pass descale_k / descale_v only, and fold a scale of "
                        "q into softmax_scale)")
            raise LaunchError(f"{name} is set but {xname} has dtype {x.dtype}: descale factors are for "
                              f"torch.float8_e4m3fn inputs only{hint}")
        _check_device(name, t, device)
        if t.dtype != torch.float32:
            raise LaunchError(f"{name} has dtype {t.dtype}; it must be torch.float32")
        if tuple(t.shape) != (batch, Hkv) or not t.is_contiguous():
            raise LaunchError(f"{name} has shape {tuple(t.shape)}; expected a contiguous ({batch}, {Hkv}) "
                              f"(batch, kv heads)")


def _check_qkv(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, sinks, alibi_slopes, aux,
               max_seqlen_q, return_lse, out_bhsd, descale_q=None, descale_k=None, descale_v=None, max_seqlen_k=0):
    """Metadata checks: run at trace time (fake tensors) and before every launch. Errors name the argument."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise LaunchError(f"{name} has {t.dim()} dimensions {tuple(t.shape)}; expected 4 (batch, seqlen, heads, head_dim)")
    device = q.device
    if device.type != "cuda":
        raise LaunchError(f"q is on {device}: fa4jit runs on CUDA tensors")
    if k.device != device:
        _check_device("k", k, device)
    if v.device != device:
        _check_device("v", v, device)
    dt = q.dtype
    if dt not in _DTYPE_CODE:
        raise LaunchError(f"q has dtype {dt}; fa4jit takes torch.bfloat16, torch.float16" +
                          (" or torch.float8_e4m3fn" if _FP8 is not None else " (or torch.float8_e4m3fn, which "
                                                                                "this torch lacks)"))
    if _FP8 is not None and dt != _FP8 and (k.dtype == _FP8 or v.dtype == _FP8):
        # An FP8 KV cache: e4m3 k and v under a bf16/fp16 q (kv_dtype e4m3); O in q's dtype.
        if k.dtype != v.dtype:
            name, t, other = ("k", k, "v") if k.dtype != _FP8 else ("v", v, "k")
            raise LaunchError(f"{name} has dtype {t.dtype} but {other} has torch.float8_e4m3fn: an FP8 KV cache "
                              f"needs k and v both torch.float8_e4m3fn (q {dt})")
    elif k.dtype != dt or v.dtype != dt:
        name, t = ("k", k) if k.dtype != dt else ("v", v)
        raise LaunchError(f"{name} has dtype {t.dtype} but q has {dt}: q, k and v must have one dtype" +
                          (" (or k and v both torch.float8_e4m3fn: an FP8 KV cache)" if _FP8 is not None and
                           dt != _FP8 else ""))
    qs, ks, vs = q.shape, k.shape, v.shape
    D = qs[3]
    for name, t, shape in (("q", q, qs), ("k", k, ks), ("v", v, vs)):
        st = t.stride()
        # Strides in 16-byte steps of each tensor's own elements: 8 of a 16-bit type, 16 of FP8 (an FP8
        # KV cache: k and v in 16-element steps, q in 8-element ones).
        align = 16 // t.element_size()
        if shape[3] != D:
            raise LaunchError(f"{name} has head_dim {shape[3]}, q has {D}")
        if st[3] != 1:
            raise LaunchError(f"{name} has head_dim stride {st[3]}: head_dim must be contiguous (stride 1); "
                              f"call .contiguous() or pass a view whose last dimension is dense")
        for i in range(3):
            if st[i] % align != 0 or st[i] < 0:
                raise LaunchError(f"{name}.stride({i}) is {st[i]}: strides must be multiples of {align} elements "
                                  f"(16 bytes) for TMA")
    if ks != vs:
        raise LaunchError(f"k {tuple(ks)} and v {tuple(vs)} must have the same shape")
    Hq, Hkv = qs[2], ks[2]
    if Hkv < 1 or Hq % Hkv != 0:
        raise LaunchError(f"q has {Hq} heads, k/v {Hkv}: the q heads must be a multiple of the k/v heads (GQA)")
    varlen_q = cu_seqlens_q is not None
    paged = page_table is not None
    if varlen_q or cu_seqlens_k is not None:
        if q.shape[0] != 1:
            raise LaunchError(f"q has batch {q.shape[0]}: varlen q is packed (total_q, heads, head_dim)")
        if cu_seqlens_k is not None and not varlen_q:
            raise LaunchError("cu_seqlens_k needs cu_seqlens_q")
        _check_device("cu_seqlens_q", cu_seqlens_q, device)
        batch = cu_seqlens_q.shape[0] - 1 if cu_seqlens_q.dim() == 1 else -1
        if batch < 1:
            raise LaunchError(f"cu_seqlens_q has shape {tuple(cu_seqlens_q.shape)}; expected (batch + 1,)")
        _check_int32_vector("cu_seqlens_q", cu_seqlens_q, device, batch + 1)
        _check_int32_vector("cu_seqlens_k", cu_seqlens_k, device, batch + 1)
        if not paged and cu_seqlens_k is None:
            raise LaunchError("varlen without a page table needs cu_seqlens_k")
        if not paged and k.shape[0] != 1:
            raise LaunchError(f"k has batch {k.shape[0]}: varlen k/v are packed (total_k, heads, head_dim)")
        if max_seqlen_q < 1:
            raise LaunchError(f"max_seqlen_q is {max_seqlen_q}: varlen needs the longest query length")
    else:
        batch = q.shape[0]
        if not paged and k.shape[0] != batch:
            raise LaunchError(f"q has batch {batch}, k/v {k.shape[0]}")
    if max_seqlen_k < 0:
        raise LaunchError(f"max_seqlen_k is {max_seqlen_k}: pass the longest key sequence, or None when it is not "
                          f"known")
    if paged:
        _check_device("page_table", page_table, device)
        if page_table.dtype != torch.int32 or page_table.dim() != 2 or page_table.shape[0] != batch:
            raise LaunchError(f"page_table has dtype {page_table.dtype} and shape {tuple(page_table.shape)}; expected "
                              f"torch.int32 (batch = {batch}, max_pages)")
        # Rows are max_pages apart in the kernel; one row's stride is never read (vLLM passes a
        # single sequence's row sliced out of a wider table).
        if page_table.stride(1) != 1 or (batch > 1 and page_table.stride(0) != page_table.shape[1]):
            raise LaunchError("page_table must be contiguous")
    _check_int32_vector("seqused_k", seqused_k, device, batch)
    _check_descale(q, k, v, batch, Hkv, device, descale_q, descale_k, descale_v)
    _check_float_vector("sinks", sinks, device, Hq)
    _check_float_vector("alibi_slopes", alibi_slopes, device, Hq)
    if len(aux) > 4:
        raise LaunchError(f"aux has {len(aux)} tensors; at most 4")
    for i, t in enumerate(aux):
        _check_device(f"aux[{i}]", t, device)
        if not t.is_contiguous():
            raise LaunchError(f"aux[{i}] must be contiguous (snippets index its memory directly)")
    if out is not None:
        _check_device("out", out, device)
        if tuple(out.shape) != tuple(q.shape):
            raise LaunchError(f"out has shape {tuple(out.shape)}; expected q's {tuple(q.shape)}")
        if _FP8 is not None and q.dtype == _FP8:
            if out.dtype not in (torch.bfloat16, torch.float16):
                raise LaunchError(f"out has dtype {out.dtype}; float8_e4m3fn inputs write torch.bfloat16 or "
                                  f"torch.float16")
        elif out.dtype != q.dtype:
            raise LaunchError(f"out has dtype {out.dtype}; expected q's {q.dtype}")
        if out.stride(3) != 1 or any(out.stride(i) % 8 or out.stride(i) < 0 for i in range(3)):
            raise LaunchError(f"out has strides {out.stride()}: head_dim must be contiguous and the other strides "
                              f"multiples of 8 elements")
    if lse is not None:
        _check_device("lse", lse, device)
        want = _lse_shape(q, varlen_q)
        if lse.dtype != torch.float32 or tuple(lse.shape) != want or not lse.is_contiguous():
            raise LaunchError(f"lse has dtype {lse.dtype} and shape {tuple(lse.shape)}; expected a contiguous "
                              f"torch.float32 {want}")
    return batch


def _lse_shape(q: Tensor, varlen_q: bool):
    return (q.shape[2], q.shape[1]) if varlen_q else (q.shape[0], q.shape[2], q.shape[1])


def _check_aligned(**tensors):
    for name, t in tensors.items():
        if t.data_ptr() % 16 != 0:
            raise LaunchError(f"{name}.data_ptr() is not 16-byte aligned (storage offset {t.storage_offset()}); "
                              f"fa4jit's TMA loads need 16-byte aligned tensors")


def _packable(group):
    """Whether every backend packs this group (generator/backends/backend.hpp pack_heads): groups up to
    a 64-row sm90a warpgroup tile, or larger ones that split into equal slices of 2..64 heads (a prime
    group above 64 cannot). Any group runs packed, padded where it does not divide 64
    (templates/common/packed_rows.h); generator/model.cpp's prewarm derives the same kernels."""
    return group <= 64 or any(group % p == 0 for p in range(2, 65))


def _packed_tensors(**tensors):
    """The fa4jit_tensor fields of each tensor, in order, after the alignment check (names the argument)."""
    _check_aligned(**tensors)
    fields = []
    for name, t in tensors.items():
        ptr = t.data_ptr()
        s, st = t.shape, t.stride()
        fields += (ptr, _DTYPE_CODE[t.dtype], 0, s[0], s[1], s[2], s[3], st[0], st[1], st[2], st[3])
    return fields


def _new_out(q: Tensor, out_bhsd: bool) -> Tensor:
    if out_bhsd:  # (B, H, S, D) memory, returned as its (B, S, H, D) view
        B, S, H, D = q.shape
        return torch.empty((B, H, S, D), dtype=_out_dtype(q.dtype), device=q.device).transpose(1, 2)
    if _FP8 is not None and q.dtype == _FP8:
        return torch.empty(q.shape, dtype=torch.bfloat16, device=q.device)
    return torch.empty_like(q, memory_format=torch.contiguous_format)  # torch.empty(q.shape, ...), a few us cheaper


# ---- the launch -------------------------------------------------------------------------------------

def _snippet_texts(aux, aux_names: str, mask_mod: str, block_mask_mod: str, score_mod: str):
    """The snippets as compiled: with typed aux names when there are aux tensors (_snippets)."""
    score_snippet = "" if score_mod in ("",) + _BUILTIN_SCORE_MODS else score_mod
    if not aux or not (mask_mod or block_mask_mod or score_snippet):
        return mask_mod, block_mask_mod, score_snippet
    names = tuple(aux_names.split(",")) if aux_names else ()
    return _snippets.typed_snippets((("mask", mask_mod), ("block", block_mask_mod), ("score", score_snippet)),
                                    names, tuple(str(t.dtype) for t in aux))


def _ptr(t: Optional[Tensor]) -> int:
    return 0 if t is None else t.data_ptr()


def _stream(device_index: int) -> int:
    return torch.cuda.current_stream(device_index).cuda_stream


# The raw-stream getter torch's own generated code uses: no Stream object per call.
_stream = getattr(torch._C, "_cuda_getCurrentRawStream", _stream)


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
_OPTIONAL_POINTERS = ("lse", "alibi_slopes", "aux_ptr[0]", "aux_ptr[1]", "aux_ptr[2]", "aux_ptr[3]", "cu_seqlens_q",
                      "cu_seqlens_k", "seqused_k", "sinks", "page_table")


def _meta(t: Optional[Tensor]):
    """The part of a tensor the checks and the packed arguments depend on (all but its data pointer)."""
    return None if t is None else (t.shape, t.stride(), t.dtype, t.device)


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
    plans (_plan_call) also say how to allocate them (o_*, lse_*) and what the call returns."""
    __slots__ = ("kernel", "handle", "dev", "device", "args", "values", "optional", "nbytes", "like_q", "o_shape",
                 "o_stride", "dtype", "lse_shape", "lse_stride", "cast", "return_lse", "descale")


def _make_plan(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, sinks, alibi_slopes, aux, scalars,
               aux_names, causal, window_left, window_right, chunk_size, mask_mod, block_mask_mod, score_mod,
               softcap, softmax_scale, max_seqlen_q, num_splits, pack_gqa, patch=True, descale_q=None, descale_k=None,
               descale_v=None, max_seqlen_k=0) -> _Plan:
    """Checks the arguments, gets the kernel and packs the launch arguments of this signature. Without
    patch, the plan is for this call only: plan.values are the struct's values with this call's pointers
    (the workspace's excepted) and plan.args is None."""
    batch = _check_qkv(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, sinks, alibi_slopes, aux,
                       max_seqlen_q, lse is not None, False, descale_q, descale_k, descale_v, max_seqlen_k)
    tensors = _packed_tensors(q=q, k=k, v=v, out=out)
    dev = q.device.index
    if dev is None:
        dev = torch.cuda.current_device()
    window = window_left != -2  # -2: no window (the op's encoding of None)
    if not window:
        window_left = window_right = -1
    if score_mod in ("", "identity"):
        score_mod = "softcap" if softcap > 0 else ("alibi" if alibi_slopes is not None else "identity")
    score_kind = score_mod if score_mod in _BUILTIN_SCORE_MODS else "custom"
    mask_mod, block_mask_mod, score_snippet = _snippet_texts(aux, aux_names, mask_mod, block_mask_mod, score_mod)
    Hq, Hkv = q.shape[2], k.shape[2]
    group = Hq // Hkv
    if pack_gqa < 0:  # automatic: pack the group's heads into one tile when the queries are few (decode)
        sq = max_seqlen_q if cu_seqlens_q is not None else q.shape[1]
        pack = group > 1 and sq * group <= max(128, group) and _packable(group)
    else:
        pack = bool(pack_gqa) and group > 1
    key = (_arch(dev), _DTYPE_NAME[q.dtype], _DTYPE_NAME[k.dtype], q.shape[3], causal, window, chunk_size > 0,
           mask_mod, block_mask_mod, score_kind, score_snippet, pack, group if pack else 0, _DTYPE_NAME[out.dtype])
    kernel = _get_kernel(key)

    ptrs = [_ptr(t) for t in aux] + [0] * (4 - len(aux))
    sc = list(scalars) + [0.0] * (4 - len(scalars))
    max_pages = page_table.shape[1] if page_table is not None else 0
    varlen = cu_seqlens_q is not None
    values = [_lib.LAUNCH_ARGS_SIZE, dev, *tensors, _ptr(lse), softmax_scale, window_left, window_right, chunk_size,
              softcap, _ptr(alibi_slopes), *ptrs, *sc, _ptr(cu_seqlens_q), _ptr(cu_seqlens_k), _ptr(seqused_k),
              batch if varlen else 0, max_seqlen_q if varlen else 0, _ptr(sinks), _ptr(page_table), max_pages,
              num_splits, 0, 128, 128, 0, 0, 0, 0, 0, _ptr(descale_q), _ptr(descale_k), _ptr(descale_v),
              max_seqlen_k]
    nbytes = 0
    if num_splits != 1:
        # Split-KV scratch comes from torch's allocator (stream-ordered, CUDA-graph safe) on every
        # launch, sized by the library once per shape.
        wkey = (dev, tuple(q.shape), tuple(k.shape), num_splits, batch, max_seqlen_q, max_pages, varlen,
                cu_seqlens_k is not None, seqused_k is not None, max_seqlen_k)
        nbytes = kernel.workspace.get(wkey)
        if nbytes is None:
            n = ctypes.c_uint64()
            code = _lib.fa4jit_workspace_bytes(kernel.handle, _lib.LAUNCH_ARGS.pack(*values), ctypes.byref(n))
            if code:
                _lib.raise_last(code)
            nbytes = n.value
            if len(kernel.workspace) > 4096:
                kernel.workspace.clear()
            kernel.workspace[wkey] = nbytes
        values[_lib.FIELD_INDEX["workspace_bytes"]] = nbytes
    optional = [name for name, t in zip(_OPTIONAL_POINTERS, (lse, alibi_slopes, *aux, *(None,) * (4 - len(aux)),
                                                             cu_seqlens_q, cu_seqlens_k, seqused_k, sinks, page_table))
                if t is not None]
    descale = [name for name, t in zip(_DESCALE, (descale_q, descale_k, descale_v)) if t is not None]
    plan = _Plan()
    plan.kernel, plan.handle, plan.dev, plan.device = kernel, kernel.handle, dev, q.device
    plan.values = None if patch else values
    plan.args = _lib.PointerPatch(values, ["q.data", "k.data", "v.data", "o.data"] + optional +
                                  (["workspace"] if nbytes else []) + descale) if patch else None
    plan.optional, plan.nbytes, plan.descale = bool(optional), nbytes, bool(descale)
    plan.like_q = plan.o_shape = plan.o_stride = plan.lse_shape = plan.lse_stride = None
    plan.dtype, plan.cast, plan.return_lse = out.dtype, False, lse is not None
    return plan


def _run(plan: _Plan, q, k, v, out, lse, alibi_slopes, aux, cu_seqlens_q, cu_seqlens_k, seqused_k, sinks, page_table,
         descale=(None, None, None)):
    """Launches a plan with this call's tensors: q, k, v, out as the caller passed them (views of the
    ones the plan was made with; only their data pointers are read); out None and lse None are
    allocated as the plan says. descale: (descale_q, descale_k, descale_v). Returns out, or (out, lse)
    when the plan's call returns the LSE."""
    if out is None:
        out = torch.empty_like(q) if plan.like_q else torch.empty_strided(plan.o_shape, plan.o_stride,
                                                                          dtype=plan.dtype, device=plan.device)
    if plan.lse_shape is not None:
        lse = torch.empty_strided(plan.lse_shape, plan.lse_stride, dtype=torch.float32, device=plan.device)
    qp, kp, vp, op = q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr()
    if (qp | kp | vp | op) & 15:
        _check_aligned(q=q, k=k, v=v, out=out)
    ptrs = [qp, kp, vp, op]
    if plan.optional:
        if plan.cast:
            sinks, alibi_slopes = _vector32(sinks), _vector32(alibi_slopes)
        ptrs += [t.data_ptr() for t in (lse, alibi_slopes, *_aux_tensors(aux), cu_seqlens_q, cu_seqlens_k, seqused_k,
                                        sinks, page_table) if t is not None]
    workspace = None
    if plan.nbytes:
        workspace = torch.empty_strided((plan.nbytes,), (1,), dtype=torch.uint8, device=plan.device)
        ptrs.append(workspace.data_ptr())
    if plan.descale:
        ptrs += [t.data_ptr() for t in descale if t is not None]
    code = _lib.fa4jit_launch(plan.handle, plan.args.pack(ptrs), _stream(plan.dev))
    if code:
        _lib.raise_last(code)
    return (out, lse) if plan.return_lse else out


def _launch(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, sinks, alibi_slopes, aux, scalars,
            aux_names, causal, window_left, window_right, chunk_size, mask_mod, block_mask_mod, score_mod,
            softcap, softmax_scale, max_seqlen_q, num_splits, pack_gqa, cached=True, descale_q=None, descale_k=None,
            descale_v=None, max_seqlen_k=0):
    """The ops' launch (normalized arguments, as in the op schema). cached=False: a one-off launch
    (the user functions' first call of a signature), without a plan kept for later calls."""
    if not cached:
        plan = _make_plan(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, sinks, alibi_slopes,
                          aux, scalars, aux_names, causal, window_left, window_right, chunk_size, mask_mod,
                          block_mask_mod, score_mod, softcap, softmax_scale, max_seqlen_q, num_splits, pack_gqa,
                          patch=False, descale_q=descale_q, descale_k=descale_k, descale_v=descale_v,
                          max_seqlen_k=max_seqlen_k)
        values, workspace = plan.values, None
        if plan.nbytes:
            workspace = torch.empty_strided((plan.nbytes,), (1,), dtype=torch.uint8, device=plan.device)
            values[_lib.FIELD_INDEX["workspace"]] = workspace.data_ptr()
        code = _lib.fa4jit_launch(plan.handle, _lib.LAUNCH_ARGS.pack(*values), _stream(plan.dev))
        if code:
            _lib.raise_last(code)
        return
    key = ("launch", _meta(q), _meta(k), _meta(v), _meta(out), _meta(lse), _meta(cu_seqlens_q), _meta(cu_seqlens_k),
           _meta(seqused_k), _meta(page_table), _meta(sinks), _meta(alibi_slopes), tuple(_meta(t) for t in aux),
           tuple(scalars), aux_names, causal, window_left, window_right, chunk_size, mask_mod, block_mask_mod,
           score_mod, softcap, softmax_scale, max_seqlen_q, num_splits, pack_gqa, _meta(descale_q), _meta(descale_k),
           _meta(descale_v), max_seqlen_k)
    plan = _plans.get(key)
    if plan is None:
        if not _seen_before(key):
            return _launch(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, sinks, alibi_slopes,
                           aux, scalars, aux_names, causal, window_left, window_right, chunk_size, mask_mod,
                           block_mask_mod, score_mod, softcap, softmax_scale, max_seqlen_q, num_splits, pack_gqa,
                           cached=False, descale_q=descale_q, descale_k=descale_k, descale_v=descale_v,
                           max_seqlen_k=max_seqlen_k)
        plan = _remember(key, _make_plan(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, sinks,
                                         alibi_slopes, aux, scalars, aux_names, causal, window_left, window_right,
                                         chunk_size, mask_mod, block_mask_mod, score_mod, softcap, softmax_scale,
                                         max_seqlen_q, num_splits, pack_gqa, descale_q=descale_q,
                                         descale_k=descale_k, descale_v=descale_v, max_seqlen_k=max_seqlen_k))
    _run(plan, q, k, v, out, lse, alibi_slopes, aux, cu_seqlens_q, cu_seqlens_k, seqused_k, sinks, page_table,
         (descale_q, descale_k, descale_v))


# ---- the custom ops ---------------------------------------------------------------------------------
# Schema: snippets and kinds are str, window None is (-2, -2), pack_gqa -1/0/1 (auto/off/on); the FP8
# descale factors come last (appended with C API version 3), default None, so callers written before
# them still call the ops unchanged.

@torch.library.custom_op("fa4jit::fwd", mutates_args=())
def _fwd(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Optional[Tensor], cu_seqlens_k: Optional[Tensor],
         seqused_k: Optional[Tensor], page_table: Optional[Tensor], sinks: Optional[Tensor],
         alibi_slopes: Optional[Tensor], aux: List[Tensor], scalars: List[float], aux_names: str, causal: bool,
         window_left: int, window_right: int, chunk_size: int, mask_mod: str, block_mask_mod: str, score_mod: str,
         softcap: float, softmax_scale: float, max_seqlen_q: int, num_splits: int, pack_gqa: int, return_lse: bool,
         out_bhsd: bool, descale_q: Optional[Tensor] = None, descale_k: Optional[Tensor] = None,
         descale_v: Optional[Tensor] = None, max_seqlen_k: int = 0) -> Tuple[Tensor, Tensor]:
    return _fwd_impl(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, sinks, alibi_slopes, aux, scalars,
                     aux_names, causal, window_left, window_right, chunk_size, mask_mod, block_mask_mod, score_mod,
                     softcap, softmax_scale, max_seqlen_q, num_splits, pack_gqa, return_lse, out_bhsd,
                     descale_q=descale_q, descale_k=descale_k, descale_v=descale_v, max_seqlen_k=max_seqlen_k)


def _fwd_impl(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, sinks, alibi_slopes, aux, scalars,
              aux_names, causal, window_left, window_right, chunk_size, mask_mod, block_mask_mod, score_mod, softcap,
              softmax_scale, max_seqlen_q, num_splits, pack_gqa, return_lse, out_bhsd, cached=True, descale_q=None,
              descale_k=None, descale_v=None, max_seqlen_k=0):
    out = _new_out(q, out_bhsd)
    lse = torch.empty(_lse_shape(q, cu_seqlens_q is not None) if return_lse else (0,), dtype=torch.float32,
                      device=q.device)
    _launch(q, k, v, out, lse if return_lse else None, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, sinks,
            alibi_slopes, aux, scalars, aux_names, causal, window_left, window_right, chunk_size, mask_mod,
            block_mask_mod, score_mod, softcap, softmax_scale, max_seqlen_q, num_splits, pack_gqa, cached,
            descale_q=descale_q, descale_k=descale_k, descale_v=descale_v, max_seqlen_k=max_seqlen_k)
    return out, lse


@_fwd.register_fake
def _fwd_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, sinks, alibi_slopes, aux, scalars,
              aux_names, causal, window_left, window_right, chunk_size, mask_mod, block_mask_mod, score_mod, softcap,
              softmax_scale, max_seqlen_q, num_splits, pack_gqa, return_lse, out_bhsd, descale_q=None, descale_k=None,
              descale_v=None, max_seqlen_k=0):
    _check_qkv(q, k, v, None, None, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, sinks, alibi_slopes, aux,
               max_seqlen_q, return_lse, out_bhsd, descale_q, descale_k, descale_v, max_seqlen_k)
    _snippet_texts(aux, aux_names, mask_mod, block_mask_mod, score_mod)  # snippet/aux errors at trace time
    lse_shape = _lse_shape(q, cu_seqlens_q is not None) if return_lse else (0,)
    return _new_out(q, out_bhsd), q.new_empty(lse_shape, dtype=torch.float32)


@torch.library.custom_op("fa4jit::fwd_out", mutates_args=("out", "lse"))
def _fwd_out(q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Optional[Tensor], cu_seqlens_q: Optional[Tensor],
             cu_seqlens_k: Optional[Tensor], seqused_k: Optional[Tensor], page_table: Optional[Tensor],
             sinks: Optional[Tensor], alibi_slopes: Optional[Tensor], aux: List[Tensor], scalars: List[float],
             aux_names: str, causal: bool, window_left: int, window_right: int, chunk_size: int, mask_mod: str,
             block_mask_mod: str, score_mod: str, softcap: float, softmax_scale: float, max_seqlen_q: int,
             num_splits: int, pack_gqa: int, descale_q: Optional[Tensor] = None, descale_k: Optional[Tensor] = None,
             descale_v: Optional[Tensor] = None, max_seqlen_k: int = 0) -> None:
    _launch(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, sinks, alibi_slopes, aux, scalars,
            aux_names, causal, window_left, window_right, chunk_size, mask_mod, block_mask_mod, score_mod, softcap,
            softmax_scale, max_seqlen_q, num_splits, pack_gqa, descale_q=descale_q, descale_k=descale_k,
            descale_v=descale_v, max_seqlen_k=max_seqlen_k)


@_fwd_out.register_fake
def _fwd_out_fake(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, sinks, alibi_slopes, aux,
                  scalars, aux_names, causal, window_left, window_right, chunk_size, mask_mod, block_mask_mod,
                  score_mod, softcap, softmax_scale, max_seqlen_q, num_splits, pack_gqa, descale_q=None, descale_k=None,
                  descale_v=None, max_seqlen_k=0):
    _check_qkv(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, sinks, alibi_slopes, aux,
               max_seqlen_q, lse is not None, False, descale_q, descale_k, descale_v, max_seqlen_k)
    _snippet_texts(aux, aux_names, mask_mod, block_mask_mod, score_mod)


def _no_backward(ctx, *grads):
    raise RuntimeError(_FORWARD_ONLY)


def _setup_context(ctx, inputs, output):
    pass


# The out= op mutates its output, which autograd cannot track: _call refuses grad-requiring inputs.
_fwd.register_autograd(_no_backward, setup_context=_setup_context)


# ---- the user functions -----------------------------------------------------------------------------

AuxArg = Union[None, Sequence[Tensor], Dict[str, Tensor]]


def _aux(aux: AuxArg):
    if aux is None:
        return [], ""
    if isinstance(aux, dict):
        names = list(aux.keys())
        for n in names:
            if not isinstance(n, str) or not _snippets.is_identifier(n):
                raise ConfigError(f"aux: key {n!r} is not a C++ identifier a snippet can use")
        return list(aux.values()), ",".join(names)
    if isinstance(aux, Tensor):
        return [aux], ""
    return list(aux), ""


def _window(window, causal: bool):
    if window is None:
        return -2, -2
    if not isinstance(window, (tuple, list)) or len(window) != 2:
        raise ConfigError(f"window: expected (left, right), got {window!r}")
    left = -1 if window[0] is None or window[0] < 0 else int(window[0])
    right = -1 if window[1] is None or window[1] < 0 else int(window[1])
    if causal:
        right = 0  # causal and a window: the keys up to the query (as flash_attn's window_size)
    if left == -1 and right == -1:
        return -2, -2  # unbounded both ways: no window
    return left, right


def _score_mod(score_mod, softcap, alibi_slopes):
    if score_mod is None:
        score_mod = ""
    if not isinstance(score_mod, str):
        raise ConfigError(f"score_mod: expected a built-in name ({', '.join(_BUILTIN_SCORE_MODS)}) or a CUDA C++ "
                          f"snippet string, got {type(score_mod).__name__}")
    custom = score_mod not in ("",) + _BUILTIN_SCORE_MODS
    if softcap and (custom or score_mod == "alibi"):
        raise ConfigError("softcap: a kernel has one score-mod; with a custom or ALiBi score_mod, apply the cap in a "
                          "snippet (e.g. return cap * tanhf(score / cap);)")
    if alibi_slopes is not None and (custom or score_mod == "softcap"):
        raise ConfigError("alibi_slopes: a kernel has one score-mod; it is used only with score_mod='alibi' or None")
    if score_mod == "softcap" and not softcap > 0:
        raise ConfigError(f"softcap is {softcap}: score_mod='softcap' needs a positive cap")
    return score_mod


try:
    from torch.utils._python_dispatch import _get_current_dispatch_mode
except ImportError:  # pragma: no cover
    def _get_current_dispatch_mode():
        return object()  # unknown: always go through the op
_functorch_active = getattr(torch._C, "_are_functorch_transforms_active", lambda: False)


def _eager(q, k, v, out) -> bool:
    """Whether a call may run the ops' implementation directly, skipping the dispatcher (tens of
    microseconds per call in eager mode): only when nothing observes ops, i.e. no torch.compile
    tracing, no dispatch mode (FakeTensorMode, make_fx), no functorch transform, plain tensors, and
    no autograd to record. Otherwise the call goes through torch.ops.fa4jit.*, with the same result."""
    if torch.compiler.is_compiling() or _get_current_dispatch_mode() is not None or _functorch_active():
        return False
    if type(q) is not Tensor or type(k) is not Tensor or type(v) is not Tensor or (
            out is not None and type(out) is not Tensor):
        return False
    if torch.is_grad_enabled():
        return not (q.requires_grad or k.requires_grad or v.requires_grad or (out is not None and out.requires_grad))
    return True


def _vector32(t: Optional[Tensor]) -> Optional[Tensor]:
    return None if t is None else t.to(torch.float32).contiguous()


def _prepare(*, aux, scalars, causal, window, softcap, score_mod, alibi_slopes, sinks, mask_mod, block_mask_mod,
             chunk_size, softmax_scale, max_seqlen_q, num_splits, pack_gqa, descale_q=None, descale_k=None,
             descale_v=None, max_seqlen_k=None):
    """The user arguments in the ops' schema (raises on bad ones, naming them); sinks and ALiBi slopes as float32."""
    aux_list, aux_names = _aux(aux)
    for name, t in zip(_DESCALE, (descale_q, descale_k, descale_v)):
        if t is not None and not isinstance(t, Tensor):  # before the op schema's own, less helpful, cast error
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    scalars = [float(s) for s in (scalars or ())]
    if len(scalars) > 4:
        raise ConfigError(f"scalars: {len(scalars)} values; at most 4")
    wl, wr = _window(window, causal)
    score_mod = _score_mod(score_mod, float(softcap or 0.0), alibi_slopes)
    common = dict(aux=aux_list, scalars=scalars, aux_names=aux_names, causal=bool(causal), window_left=wl,
                  window_right=wr, chunk_size=int(chunk_size or 0), mask_mod=mask_mod or "",
                  block_mask_mod=block_mask_mod or "", score_mod=score_mod, softcap=float(softcap or 0.0),
                  softmax_scale=float(softmax_scale or 0.0), max_seqlen_q=max_seqlen_q, num_splits=int(num_splits),
                  pack_gqa=-1 if pack_gqa is None else int(bool(pack_gqa)), descale_q=descale_q, descale_k=descale_k,
                  descale_v=descale_v, max_seqlen_k=int(max_seqlen_k or 0))
    return common, _vector32(sinks), _vector32(alibi_slopes)


def _call(q, k, v, *, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, max_seqlen_q, causal, window, softcap,
          softmax_scale, sinks, score_mod, mask_mod, block_mask_mod, aux, scalars, alibi_slopes, num_splits, pack_gqa,
          return_lse, out, chunk_size, bhsd, descale_q=None, descale_k=None, descale_v=None, max_seqlen_k=None):
    common, sinks, alibi_slopes = _prepare(
        aux=aux, scalars=scalars, causal=causal, window=window, softcap=softcap, score_mod=score_mod,
        alibi_slopes=alibi_slopes, sinks=sinks, mask_mod=mask_mod, block_mask_mod=block_mask_mod, chunk_size=chunk_size,
        softmax_scale=softmax_scale, max_seqlen_q=max_seqlen_q, num_splits=num_splits, pack_gqa=pack_gqa,
        descale_q=descale_q, descale_k=descale_k, descale_v=descale_v, max_seqlen_k=max_seqlen_k)
    direct = _eager(q, k, v, out)
    if out is not None:
        if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v, out)):
            raise RuntimeError(_FORWARD_ONLY + " (out= with inputs that require grad)")
        o = out.transpose(1, 2) if bhsd else out
        lse = None
        if return_lse:
            lse = torch.empty(_lse_shape(q, cu_seqlens_q is not None), dtype=torch.float32, device=q.device)
        if direct:  # the user functions cache their own plans (_plan_call): this launch is a one-off
            _launch(q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, sinks, alibi_slopes, **common,
                    cached=False)
        else:
            torch.ops.fa4jit.fwd_out(q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, sinks,
                                     alibi_slopes, **common)
        return (out, lse) if return_lse else out
    if direct:
        o, lse = _fwd_impl(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, sinks, alibi_slopes,
                           return_lse=bool(return_lse), out_bhsd=bhsd, **common, cached=False)
    else:
        o, lse = torch.ops.fa4jit.fwd(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, sinks, alibi_slopes,
                                      return_lse=bool(return_lse), out_bhsd=bhsd, **common)
    return o, lse


# ---- the eager fast path: a plan per user-call signature ---------------------------------------------
# An eager call (_eager) whose signature (the user's tensors' metadata and every other argument, as
# passed) was seen before skips _prepare, the layout views, _check_qkv and the packing: _run
# allocates the outputs as the first call did, reads the pointers and launches. The first call of a
# signature goes through _plan_call, which runs the same normalization and checks as _call, so every
# argument error is raised as before; unhashable arguments (a list as window) take the general path.

def _aux_key(aux):
    if isinstance(aux, dict):
        return ("dict",) + tuple((n, _meta(t)) for n, t in aux.items())
    if isinstance(aux, Tensor):
        return ("tensor", _meta(aux))
    return tuple(_meta(t) for t in aux)


def _aux_tensors(aux):
    if aux is None:
        return ()
    if isinstance(aux, dict):
        return list(aux.values())
    return [aux] if isinstance(aux, Tensor) else aux


def _plan_call(q_user, squeeze, q, k, v, *, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, max_seqlen_q, causal,
               window, softcap, softmax_scale, sinks, score_mod, mask_mod, block_mask_mod, aux, scalars, alibi_slopes,
               num_splits, pack_gqa, return_lse, out, chunk_size, bhsd, descale_q=None, descale_k=None,
               descale_v=None, max_seqlen_k=None) -> _Plan:
    """_call's work that depends only on the signature, done once: q_user is the tensor the user passed
    as q, and squeeze whether the returned output drops the leading dimension of q (packed varlen)."""
    common, sinks32, alibi32 = _prepare(
        aux=aux, scalars=scalars, causal=causal, window=window, softcap=softcap, score_mod=score_mod,
        alibi_slopes=alibi_slopes, sinks=sinks, mask_mod=mask_mod, block_mask_mod=block_mask_mod, chunk_size=chunk_size,
        softmax_scale=softmax_scale, max_seqlen_q=max_seqlen_q, num_splits=num_splits, pack_gqa=pack_gqa,
        descale_q=descale_q, descale_k=descale_k, descale_v=descale_v, max_seqlen_k=max_seqlen_k)
    if out is None:
        o = _new_out(q, bhsd)
        shown = o.transpose(1, 2) if bhsd else (o.squeeze(0) if squeeze else o)  # what the user gets
    else:
        o = out.transpose(1, 2) if bhsd else out
    lse = None
    if return_lse:
        lse = torch.empty(_lse_shape(q, cu_seqlens_q is not None), dtype=torch.float32, device=q.device)
    p = _make_plan(q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, sinks32, alibi32, **common)
    if out is None:
        p.o_shape, p.o_stride = tuple(shown.shape), shown.stride()
        p.like_q = (p.o_shape == tuple(q_user.shape) and shown.dtype == q_user.dtype and
                    torch.empty_like(q_user).stride() == p.o_stride)
    if lse is not None:
        p.lse_shape, p.lse_stride = tuple(lse.shape), lse.stride()
    p.cast = sinks32 is not sinks or alibi32 is not alibi_slopes
    return p


def attention(q: Tensor, k: Tensor, v: Tensor, causal: bool = False, window=None, softcap: float = 0.0,
              softmax_scale: Optional[float] = None, sinks: Optional[Tensor] = None, score_mod: Optional[str] = None,
              mask_mod: Optional[str] = None, aux: AuxArg = None, scalars: Optional[Sequence[float]] = None,
              alibi_slopes: Optional[Tensor] = None, num_splits: int = 0, pack_gqa: Optional[bool] = None,
              return_lse: bool = False, out: Optional[Tensor] = None, layout: str = "bshd", chunk_size: int = 0,
              block_mask_mod: Optional[str] = None, descale_q: Optional[Tensor] = None,
              descale_k: Optional[Tensor] = None, descale_v: Optional[Tensor] = None):
    """Attention forward (no backward) with a kernel generated for the arguments' variant.

    q: (B, Sq, Hq, D); k, v: (B, Sk, Hkv, D), Hq a multiple of Hkv (GQA/MQA); bf16 or fp16; D 64 or
    128 (sm_90a also 96, 192, 256). ``layout="bhsd"`` takes and returns (B, H, S, D) tensors (SDPA's
    layout) as strided views, without copies. Any strides with head_dim contiguous are accepted
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
    up to 4 floats, ``scalars[i]``. block_mask_mod: optional tile classifier for mask_mod.

    num_splits: split-KV (0 automatic, 1 none). pack_gqa: pack the query heads of a KV head into
    one tile (None: automatic for short query lengths). out: write into this tensor (q's shape and
    layout). Returns out, or (out, lse) with lse float32 (B, Hq, Sq) when return_lse.
    """
    if _flex is not None and _flex.mods_need_lowering(mask_mod, block_mask_mod, score_mod):
        # Python mask_mod / score_mod (traced into snippets) or a BlockMask (fa4jit.flex).
        mask_mod, block_mask_mod, score_mod, aux = _flex.lower_call(q, k, layout, mask_mod, block_mask_mod,
                                                                    score_mod, aux)
    key = None
    direct = _eager(q, k, v, out)
    if direct:
        try:
            key = ("attention", q.shape, q.stride(), q.dtype, q.device, k.shape, k.stride(), k.dtype, k.device,
                   v.shape, v.stride(), v.dtype, v.device, causal, window, softcap, softmax_scale, score_mod, mask_mod,
                   block_mask_mod, num_splits, pack_gqa, return_lse, layout, chunk_size, _meta(out), _meta(sinks),
                   _meta(alibi_slopes), None if aux is None else _aux_key(aux),
                   None if scalars is None else tuple(scalars), _meta(descale_q), _meta(descale_k), _meta(descale_v))
            plan = _plans.get(key)
        except (TypeError, AttributeError):  # unhashable or not a tensor: the general path reports it
            key = plan = None
        if plan is not None:
            return _run(plan, q, k, v, out, None, alibi_slopes, aux, None, None, None, sinks, None,
                        (descale_q, descale_k, descale_v))
    q_user = q
    bhsd = _layout(layout)
    if bhsd:
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    kw = dict(cu_seqlens_q=None, cu_seqlens_k=None, seqused_k=None, page_table=None, max_seqlen_q=0, causal=causal,
              window=window, softcap=softcap, softmax_scale=softmax_scale, sinks=sinks, score_mod=score_mod,
              mask_mod=mask_mod, block_mask_mod=block_mask_mod, aux=aux, scalars=scalars, alibi_slopes=alibi_slopes,
              num_splits=num_splits, pack_gqa=pack_gqa, return_lse=return_lse, out=out, chunk_size=chunk_size,
              bhsd=bhsd, descale_q=descale_q, descale_k=descale_k, descale_v=descale_v)
    if key is not None and _seen_before(key):
        plan = _remember(key, _plan_call(q_user, False, q, k, v, **kw))
        return _run(plan, q_user, k, v, out, None, alibi_slopes, aux, None, None, None, sinks, None,
                    (descale_q, descale_k, descale_v))
    o, lse = _split(_call(q, k, v, **kw), out)
    if bhsd and out is None:
        o = o.transpose(1, 2)
    return (o, lse) if return_lse else o


def _layout(layout: str) -> bool:
    if layout not in ("bshd", "bhsd"):
        raise ConfigError(f"layout: '{layout}'; use 'bshd' (batch, seqlen, heads, head_dim) or 'bhsd'")
    return layout == "bhsd"


def _split(result, out):
    if isinstance(result, tuple):
        return result
    return result, None


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
    the CTA schedule (causal: that of an equal-length batch), and any value gives the same results.
    seqused_k: int32 (B,) keys used per sequence.
    Other arguments as attention() (FP8 descale factors: (B, Hkv), B the number of sequences).
    Returns out (total_q, Hq, D), or (out, lse) with lse (Hq, total_q).
    """
    if _flex is not None and _flex.mods_need_lowering(mask_mod, block_mask_mod, score_mod):
        # Python mask_mod / score_mod (traced into snippets) or a BlockMask (fa4jit.flex).
        mask_mod, block_mask_mod, score_mod, aux = _flex.lower_call(q, k, None, mask_mod, block_mask_mod, score_mod,
                                                                    aux)
    key = None
    direct = _eager(q, k, v, out)
    if direct:
        try:
            key = ("varlen", q.shape, q.stride(), q.dtype, q.device, k.shape, k.stride(), k.dtype, k.device,
                   v.shape, v.stride(), v.dtype, v.device, _meta(cu_seqlens_q), _meta(cu_seqlens_k), _meta(seqused_k),
                   max_seqlen_q, max_seqlen_k, causal, window, softcap, softmax_scale, score_mod, mask_mod,
                   block_mask_mod, num_splits, pack_gqa, return_lse, chunk_size, _meta(out), _meta(sinks),
                   _meta(alibi_slopes), None if aux is None else _aux_key(aux),
                   None if scalars is None else tuple(scalars), _meta(descale_q), _meta(descale_k), _meta(descale_v))
            plan = _plans.get(key)
        except (TypeError, AttributeError):
            key = plan = None
        if plan is not None:
            return _run(plan, q, k, v, out, None, alibi_slopes, aux, cu_seqlens_q, cu_seqlens_k, seqused_k, sinks,
                        None, (descale_q, descale_k, descale_v))
    for name, t in (("q", q), ("k", k), ("v", v)):
        if isinstance(t, Tensor) and t.dim() != 3:
            raise LaunchError(f"{name} has shape {tuple(t.shape)}; varlen tensors are (total, heads, head_dim)")
    if out is not None and out.dim() == 3:
        out4 = out.unsqueeze(0)
    else:
        out4 = out
    kw = dict(cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k, seqused_k=seqused_k, page_table=None,
              max_seqlen_q=int(max_seqlen_q), causal=causal, window=window, softcap=softcap,
              softmax_scale=softmax_scale, sinks=sinks, score_mod=score_mod, mask_mod=mask_mod,
              block_mask_mod=block_mask_mod, aux=aux, scalars=scalars, alibi_slopes=alibi_slopes,
              num_splits=num_splits, pack_gqa=pack_gqa, return_lse=return_lse, out=out4, chunk_size=chunk_size,
              bhsd=False, descale_q=descale_q, descale_k=descale_k, descale_v=descale_v, max_seqlen_k=max_seqlen_k)
    q4, k4, v4 = q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0)
    if key is not None and _seen_before(key):
        plan = _remember(key, _plan_call(q, out is None, q4, k4, v4, **kw))
        return _run(plan, q, k, v, out, None, alibi_slopes, aux, cu_seqlens_q, cu_seqlens_k, seqused_k, sinks, None,
                    (descale_q, descale_k, descale_v))
    o, lse = _split(_call(q4, k4, v4, **kw), out4)
    o = out if out is not None else o.squeeze(0)
    return (o, lse) if return_lse else o


def attention_paged(q: Tensor, k_cache: Tensor, v_cache: Tensor, page_table: Tensor, seqused_k: Optional[Tensor],
                    causal: bool = False, cu_seqlens_q: Optional[Tensor] = None, max_seqlen_q: Optional[int] = None,
                    window=None, softcap: float = 0.0, softmax_scale: Optional[float] = None,
                    sinks: Optional[Tensor] = None, score_mod: Optional[str] = None, mask_mod: Optional[str] = None,
                    aux: AuxArg = None, scalars: Optional[Sequence[float]] = None,
                    alibi_slopes: Optional[Tensor] = None, num_splits: int = 0, pack_gqa: Optional[bool] = None,
                    return_lse: bool = False, out: Optional[Tensor] = None, chunk_size: int = 0,
                    block_mask_mod: Optional[str] = None, descale_q: Optional[Tensor] = None,
                    descale_k: Optional[Tensor] = None, descale_v: Optional[Tensor] = None,
                    max_seqlen_k: Optional[int] = None):
    """Attention forward (no backward) over a paged KV cache: decode and chunked prefill.

    k_cache/v_cache: (num_pages, page_size, Hkv, D); page_table: int32 (B, max_pages), sequence b's key
    row r is row r % page_size of page page_table[b, r // page_size] (entries past a sequence's pages
    must still be valid page indices); seqused_k: int32 (B,) keys per sequence (None: every page).
    q: (B, Sq, Hq, D), or packed (total_q, Hq, D) with cu_seqlens_q and max_seqlen_q (varlen queries).
    On TMA backends page_size must be a multiple of 8 (gcd with the tile's 128 rows). max_seqlen_k:
    the longest sequence's keys (None: max_pages x page_size bounds it), a hint as in
    attention_varlen(). Other arguments as attention().
    """
    if _flex is not None and _flex.mods_need_lowering(mask_mod, block_mask_mod, score_mod):
        # Python mask_mod / score_mod (traced into snippets) or a BlockMask (fa4jit.flex).
        mask_mod, block_mask_mod, score_mod, aux = _flex.lower_call(q, k_cache, None, mask_mod, block_mask_mod,
                                                                    score_mod, aux)
    key = None
    direct = _eager(q, k_cache, v_cache, out)
    if direct:
        try:
            key = ("paged", q.shape, q.stride(), q.dtype, q.device, k_cache.shape, k_cache.stride(), k_cache.dtype,
                   k_cache.device, v_cache.shape, v_cache.stride(), v_cache.dtype, v_cache.device, _meta(page_table),
                   _meta(seqused_k), _meta(cu_seqlens_q), max_seqlen_q, causal, window, softcap, softmax_scale,
                   score_mod, mask_mod, block_mask_mod, num_splits, pack_gqa, return_lse, chunk_size, _meta(out),
                   _meta(sinks), _meta(alibi_slopes), None if aux is None else _aux_key(aux),
                   None if scalars is None else tuple(scalars), _meta(descale_q), _meta(descale_k), _meta(descale_v),
                   max_seqlen_k)
            plan = _plans.get(key)
        except (TypeError, AttributeError):
            key = plan = None
        if plan is not None:
            return _run(plan, q, k_cache, v_cache, out, None, alibi_slopes, aux, cu_seqlens_q, None, seqused_k, sinks,
                        page_table, (descale_q, descale_k, descale_v))
    varlen = cu_seqlens_q is not None
    if varlen:
        if max_seqlen_q is None:
            raise LaunchError("max_seqlen_q: needed with cu_seqlens_q")
        if isinstance(q, Tensor) and q.dim() != 3:
            raise LaunchError(f"q has shape {tuple(q.shape)}; with cu_seqlens_q it is packed (total_q, heads, head_dim)")
        q4 = q.unsqueeze(0)
        out4 = out.unsqueeze(0) if out is not None else None
    else:
        q4, out4 = q, out
    kw = dict(cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=None, seqused_k=seqused_k, page_table=page_table,
              max_seqlen_q=int(max_seqlen_q or 0), causal=causal, window=window, softcap=softcap,
              softmax_scale=softmax_scale, sinks=sinks, score_mod=score_mod, mask_mod=mask_mod,
              block_mask_mod=block_mask_mod, aux=aux, scalars=scalars, alibi_slopes=alibi_slopes,
              num_splits=num_splits, pack_gqa=pack_gqa, return_lse=return_lse, out=out4, chunk_size=chunk_size,
              bhsd=False, descale_q=descale_q, descale_k=descale_k, descale_v=descale_v, max_seqlen_k=max_seqlen_k)
    if key is not None and _seen_before(key):
        plan = _remember(key, _plan_call(q, varlen and out is None, q4, k_cache, v_cache, **kw))
        return _run(plan, q, k_cache, v_cache, out, None, alibi_slopes, aux, cu_seqlens_q, None, seqused_k, sinks,
                    page_table, (descale_q, descale_k, descale_v))
    o, lse = _split(_call(q4, k_cache, v_cache, **kw), out4)
    if out is not None:
        o = out
    elif varlen:
        o = o.squeeze(0)
    return (o, lse) if return_lse else o
