"""The argument checks and normalizations of the fa4jit ops (ops.py), shared by the real and the
fake (shape-only) implementations: errors name the argument. The launch table's own checks
(launch_table.CHECKS, which C++ runs as well) are evaluated here on the tensors' metadata."""
from typing import Dict, Optional, Sequence, Union

import torch

from . import _snippets, launch_schema
from .errors import ConfigError, LaunchError

Tensor = torch.Tensor
AuxArg = Union[None, Sequence[Tensor], Dict[str, Tensor]]

_FP8 = getattr(torch, "float8_e4m3fn", None)  # FP8 inputs (sm_90a); older torch has none
_DTYPE_CODE = {torch.bfloat16: 0, torch.float16: 1}  # fa4jit_dtype
_DTYPE_NAME = {torch.bfloat16: "bf16", torch.float16: "fp16"}
if _FP8 is not None:
    _DTYPE_CODE[_FP8] = 2
    _DTYPE_NAME[_FP8] = "e4m3"
_DESCALE = ("descale_q", "descale_k", "descale_v")
_BUILTIN_SCORE_MODS = ("identity", "softcap", "alibi")


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


def _check_page_descale(t, k, paged, device):
    """An e4m3 latent cache's per-page factors: float32 (num_pages,) contiguous on q's device, with a
    page table and an FP8 cache (the library refuses them for any kernel but MLA's over that cache)."""
    if t is None:
        return
    if not isinstance(t, Tensor):
        raise TypeError(f"page_descale: expected a torch.Tensor, got {type(t).__name__}")
    if not paged:
        raise LaunchError("page_descale without a page_table: per-page factors are for a paged cache")
    if _FP8 is None or k.dtype != _FP8:
        raise LaunchError(f"page_descale is set but k has dtype {k.dtype}: per-page factors are for a "
                          f"torch.float8_e4m3fn (latent) cache only")
    _check_device("page_descale", t, device)
    if t.dtype != torch.float32 or tuple(t.shape) != (k.shape[0],) or not t.is_contiguous():
        raise LaunchError(f"page_descale has dtype {t.dtype} and shape {tuple(t.shape)}; expected a contiguous "
                          f"torch.float32 ({k.shape[0]},) (num_pages)")


def _check_qkv(a):
    """Metadata checks of a call (ops.Call): run at trace time (fake tensors) and before every launch.
    Errors name the argument. Returns the batch (varlen: the number of sequences)."""
    (q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, sinks, alibi_slopes, aux, max_seqlen_q,
     max_seqlen_k) = (a.q, a.k, a.v, a.out, a.lse, a.cu_seqlens_q, a.cu_seqlens_k, a.seqused_k, a.page_table, a.sinks,
                      a.alibi_slopes, a.aux, a.max_seqlen_q, a.max_seqlen_k)
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
    if ks[3] != D:
        raise LaunchError(f"k has head_dim {ks[3]}, q has {D}")
    # v may be narrower than q and k (DeepSeek-V3 prefill: 192 / 128): the kernel's depth_v, whose
    # pairs the library checks when it builds the kernel; out is then v's width.
    Hq, Hkv = qs[2], ks[2]
    varlen_q = cu_seqlens_q is not None
    paged = page_table is not None
    if varlen_q or cu_seqlens_k is not None:
        if cu_seqlens_k is not None and not varlen_q:
            raise LaunchError("cu_seqlens_k needs cu_seqlens_q")
        _check_device("cu_seqlens_q", cu_seqlens_q, device)
        batch = cu_seqlens_q.shape[0] - 1 if cu_seqlens_q.dim() == 1 else -1
        if batch < 1:
            raise LaunchError(f"cu_seqlens_q has shape {tuple(cu_seqlens_q.shape)}; expected (batch + 1,)")
    else:
        batch = q.shape[0]
    if out is not None:
        _check_device("out", out, device)
        if tuple(out.shape) != (*q.shape[:3], vs[3]):
            want = f"q's {tuple(q.shape)}" if vs[3] == D else f"{(*q.shape[:3], vs[3])} (q's, v's head_dim)"
            raise LaunchError(f"out has shape {tuple(out.shape)}; expected {want}")
        if _FP8 is not None and q.dtype == _FP8:
            if out.dtype not in (torch.bfloat16, torch.float16):
                raise LaunchError(f"out has dtype {out.dtype}; float8_e4m3fn inputs write torch.bfloat16 or "
                                  f"torch.float16")
        elif out.dtype != q.dtype:
            raise LaunchError(f"out has dtype {out.dtype}; expected q's {q.dtype}")
    # The launch table's checks (launch_table.CHECKS), which pack_params runs in C++ on the same values.
    # Shapes, strides and element sizes only: strides and sizes are what the C struct carries (o: out, or
    # the contiguous output the call allocates; "o" is out's name in the C API).
    def view(t):
        return launch_schema.tensor(t.shape, t.stride(), t.element_size())

    o = view(out) if out is not None else launch_schema.tensor((*q.shape[:3], vs[3]), (0, 0, 0, 1))
    msg = launch_schema.check(dict(
        q=view(q), k=view(k), v=view(v), o=o, cu_seqlens_q=int(varlen_q), cu_seqlens_k=int(cu_seqlens_k is not None),
        seqused_k=int(seqused_k is not None), page_table=int(paged), batch=batch if varlen_q else 0,
        max_seqlen_q=max_seqlen_q if varlen_q else 0, max_pages=page_table.shape[1] if paged and page_table.dim() == 2
        else int(paged), max_seqlen_k=max_seqlen_k))
    if msg:
        raise LaunchError(msg)
    if varlen_q:
        _check_int32_vector("cu_seqlens_q", cu_seqlens_q, device, batch + 1)
        _check_int32_vector("cu_seqlens_k", cu_seqlens_k, device, batch + 1)
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
    _check_descale(q, k, v, batch, Hkv, device, a.descale_q, a.descale_k, a.descale_v)
    _check_page_descale(a.page_descale, k, paged, device)
    _check_float_vector("sinks", sinks, device, Hq)
    _check_float_vector("alibi_slopes", alibi_slopes, device, Hq)
    if len(aux) > 4:
        raise LaunchError(f"aux has {len(aux)} tensors; at most 4")
    for i, t in enumerate(aux):
        _check_device(f"aux[{i}]", t, device)
        if not t.is_contiguous():
            raise LaunchError(f"aux[{i}] must be contiguous (snippets index its memory directly)")
    _check_block_mask(a, batch, Hq, paged)
    if lse is not None:
        _check_device("lse", lse, device)
        want = _lse_shape(q, varlen_q)
        if lse.dtype != torch.float32 or tuple(lse.shape) != want or not lse.is_contiguous():
            raise LaunchError(f"lse has dtype {lse.dtype} and shape {tuple(lse.shape)}; expected a contiguous "
                              f"torch.float32 {want}")
    return batch


def _check_block_mask(a, batch: int, Hq: int, paged: bool):
    """The run-time tile map: uint8 (batch or 1, Hq or 1, q blocks, kv blocks), keys contiguous, covering
    the longest query and key sequences the launch can have (the kernel reads it without bounds)."""
    t = a.block_mask
    if t is None:
        return
    _check_device("block_mask", t, a.q.device)
    if a.block_mask_q < 1 or a.block_mask_k < 1:
        raise LaunchError(f"block_mask_q / block_mask_k are ({a.block_mask_q}, {a.block_mask_k}); block sizes must be "
                          f"positive")
    if t.dtype != torch.uint8 or t.dim() != 4:
        raise LaunchError(f"block_mask has dtype {t.dtype} and shape {tuple(t.shape)}; expected torch.uint8 (batch or "
                          f"1, heads or 1, q blocks, kv blocks)")
    sq = a.max_seqlen_q if a.cu_seqlens_q is not None else a.q.shape[1]
    sk = a.page_table.shape[1] * a.k.shape[1] if paged else a.k.shape[1]
    need = (-(-sq // a.block_mask_q), -(-sk // a.block_mask_k))
    if t.shape[0] not in (1, batch) or t.shape[1] not in (1, Hq) or t.shape[2] < need[0] or t.shape[3] < need[1]:
        raise LaunchError(f"block_mask has shape {tuple(t.shape)}; expected (1 or {batch}, 1 or {Hq}, >= {need[0]}, "
                          f">= {need[1]}): blocks of ({a.block_mask_q}, {a.block_mask_k}) over {sq} queries and "
                          f"{sk} keys")
    if t.stride(3) != 1 or min(t.stride()) < 0:
        raise LaunchError(f"block_mask has strides {t.stride()}; the kv blocks must be contiguous")


def _lse_shape(q: Tensor, varlen_q: bool):  # (B, Hq, Sq), varlen (Hq, total_q)
    return (q.shape[2], q.shape[1]) if varlen_q else (q.shape[0], q.shape[2], q.shape[1])


def _check_aligned(**tensors):
    for name, t in tensors.items():
        if t.data_ptr() % 16 != 0:
            raise LaunchError(f"{name}.data_ptr() is not 16-byte aligned (storage offset {t.storage_offset()}); "
                              f"fa4jit's TMA loads need 16-byte aligned tensors")


def _packed_tensors(**tensors):
    """{name: the fa4jit_tensor values} of each tensor, after the alignment check (names the argument)."""
    _check_aligned(**tensors)
    return {name: (t.data_ptr(), _DTYPE_CODE[t.dtype], 0, *t.shape, *t.stride()) for name, t in tensors.items()}


def _new_out(q: Tensor, out_bhsd: bool, v: Tensor) -> Tensor:
    """The output of q's queries over v's head dim (narrower than q's for a depth_v kernel)."""
    B, S, H, D = q.shape
    Dv = v.shape[-1]
    if out_bhsd:  # (B, H, S, Dv) memory, returned as its (B, S, H, Dv) view
        return torch.empty((B, H, S, Dv), dtype=_out_dtype(q.dtype), device=q.device).transpose(1, 2)
    if _FP8 is not None and q.dtype == _FP8:
        return torch.empty((B, S, H, Dv), dtype=torch.bfloat16, device=q.device)
    if Dv != D:
        return torch.empty((B, S, H, Dv), dtype=q.dtype, device=q.device)
    return torch.empty_like(q, memory_format=torch.contiguous_format)  # torch.empty(q.shape, ...), a few us cheaper



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


def _aux_tensors(aux):
    return () if aux is None else list(aux.values()) if isinstance(aux, dict) else [aux] if isinstance(
        aux, Tensor) else aux


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


def _vector32(t: Optional[Tensor]) -> Optional[Tensor]:
    return None if t is None else t.to(torch.float32).contiguous()


def _layout(layout: str) -> bool:
    if layout not in ("bshd", "bhsd"):
        raise ConfigError(f"layout: '{layout}'; use 'bshd' (batch, seqlen, heads, head_dim) or 'bhsd'")
    return layout == "bhsd"


def _snippet_texts(aux, aux_names: str, mask_mod: str, block_mask_mod: str, score_mod: str):
    """The snippets as compiled: with typed aux names when there are aux tensors (_snippets)."""
    score_snippet = "" if score_mod in ("",) + _BUILTIN_SCORE_MODS else score_mod
    if not aux or not (mask_mod or block_mask_mod or score_snippet):
        return mask_mod, block_mask_mod, score_snippet
    names = tuple(aux_names.split(",")) if aux_names else ()
    return _snippets.typed_snippets((("mask", mask_mod), ("block", block_mask_mod), ("score", score_snippet)),
                                    names, tuple(str(t.dtype) for t in aux))


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
