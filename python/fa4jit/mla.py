"""MLA decode (DeepSeek-V2/V3, Kimi-K2 absorbed attention) with FlashInfer's and FlashMLA's arguments.

    o = fa4jit.mla_decode(q_nope, q_pe, ckv_cache, kpe_cache, page_table, cache_seqlens, softmax_scale=s)
    o, lse = fa4jit.mla_with_kvcache(q, k_cache, block_table, cache_seqlens, softmax_scale=s)

Absorbed MLA attends H query heads over one latent KV head: a key row is 576 wide (512 latent c_kv
columns, then 64 rope columns) and the value is the same row's first 512 columns. fa4jit runs it as
its (576, 512) attention (``depth`` 576, ``depth_v`` 512) over a paged cache: q is q_nope and q_pe
side by side, k the cache's rows as (num_pages, page_size, 1, 576), v the view of k's first 512
columns (same data and strides: the kernel reads V from K's tile and refuses any other v), the query
heads packed as one GQA group. Both functions call fa4jit.attention_paged (and torch ops), so
torch.compile and CUDA graphs work as with it; docs/PYTHON.md, "MLA decode".

The c_kv and rope caches are one buffer in SGLang and vLLM (a (..., 576) tensor sliced at 512): then
the 576-wide rows are a view of it, no copy. Separate ckv_cache / kpe_cache tensors are concatenated
on every call, a copy of the whole cache (warned once).
"""
import math
import warnings
from typing import Optional

import torch

from . import ops as _ops
from .errors import ConfigError, LaunchError

Tensor = torch.Tensor

D_CKV = 512  # latent c_kv columns: V's and O's width (DeepSeek's kv_lora_rank)
D_KPE = 64  # rope columns (qk_rope_head_dim)
D_QK = D_CKV + D_KPE  # a key row, and a query with q_pe appended
MAX_SEQLEN_Q = 16  # decode, speculative decoding and MTP verification
_DTYPES = (torch.bfloat16, torch.float16)
_FP8 = torch.float8_e4m3fn  # an FP8 latent cache (under bf16 / fp16 queries)
_copy_warned = False


# ---- the 576-wide key rows ----------------------------------------------------------------------------

def _one_buffer(ckv_cache: Tensor, kpe_cache: Tensor) -> bool:
    """Whether each kpe_cache row continues its ckv_cache row in one buffer: the same storage and
    dtype, kpe 512 elements past ckv, equal page and row strides, unit column strides. Then every
    element of the 576-wide view is an element of one of the two, wherever the buffer came from.
    Storages and offsets rather than data pointers: fake tensors (FakeTensorMode) have them too."""
    return (ckv_cache.dtype == kpe_cache.dtype and ckv_cache.stride(2) == 1 and kpe_cache.stride(2) == 1
            and ckv_cache.stride()[:2] == kpe_cache.stride()[:2]
            and kpe_cache.storage_offset() == ckv_cache.storage_offset() + D_CKV
            and torch._C._is_alias_of(kpe_cache, ckv_cache))


def _warn_copy():
    global _copy_warned
    if not _copy_warned:
        _copy_warned = True
        warnings.warn("fa4jit.mla_decode: ckv_cache and kpe_cache are separate tensors, so every call copies both "
                      "whole caches into one (num_pages, page_size, 1, 576) buffer (the slow path). Allocate them as "
                      "one (num_pages, page_size, 576) tensor and pass its [..., :512] and [..., 512:] slices to "
                      "attend without a copy (docs/PYTHON.md, MLA decode).", stacklevel=5)


def _latent_cache(ckv_cache: Tensor, kpe_cache: Tensor) -> Tensor:
    """The (num_pages, page_size, 1, 576) key rows of ckv_cache (num_pages, page_size, 512) and
    kpe_cache (num_pages, page_size, 64): a view over their buffer when they share one, else a copy."""
    P, S = ckv_cache.shape[:2]
    if _one_buffer(ckv_cache, kpe_cache):
        # The head dimension has one entry; its stride is a row's width, as in FlashMLA's k_cache.
        return ckv_cache.as_strided((P, S, 1, D_QK), (ckv_cache.stride(0), ckv_cache.stride(1), D_QK, 1))
    _warn_copy()
    return torch.cat([ckv_cache, kpe_cache], dim=-1).unsqueeze(2)


# ---- argument checks: each error names the argument ---------------------------------------------------

def _tensors(**tensors):
    """TypeError for the first argument that is not a tensor (None: an optional one not given)."""
    for name, t in tensors.items():
        if t is not None and not isinstance(t, Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")


def _check_shape(name: str, t: Tensor, want: tuple, layout: str, note: str = ""):
    """want: the expected sizes, None where any size goes; layout: their names, and note what follows
    them, for the message (sizes are formatted only for an error: str() of a symbolic size would
    specialize a compiled graph on it)."""
    if t.dim() != len(want) or any(w is not None and s != w for s, w in zip(t.shape, want)):
        shown = ", ".join("_" if w is None else str(w) for w in want)
        raise LaunchError(f"{name} has shape {tuple(t.shape)}; expected {layout} = ({shown}){note}")


def _check_dtypes(q_name: str, q: Tensor, **caches):
    """The queries bf16 or fp16; the caches the queries' dtype, or all float8_e4m3fn (an FP8 latent cache)."""
    if q.dtype not in _DTYPES:
        raise LaunchError(f"{q_name} has dtype {q.dtype}; MLA decode takes torch.bfloat16 or torch.float16")
    first, want = next(iter(caches.items()))
    kv = want.dtype if want.dtype == _FP8 else q.dtype
    for name, t in caches.items():
        if t.dtype != kv:
            raise LaunchError(f"{name} has dtype {t.dtype} but {q_name} has {q.dtype}"
                              + (f" and {first} {kv}" if kv == _FP8 else "")
                              + ": the caches take the queries' dtype (bf16 or fp16), or are all "
                                "torch.float8_e4m3fn (an FP8 latent cache)")


def _check_descale(descale_k, cache: Tensor, batch, q_name: str, q: Tensor):
    """descale_k: None, a positive float, or a float32 tensor of shape (), (1,) (the whole cache) or (B,)
    (per sequence) on q's device, and only over an FP8 cache."""
    if descale_k is None:
        return
    if cache.dtype != _FP8:
        raise LaunchError(f"descale_k is set but the cache is {cache.dtype}: descale factors are for an FP8 "
                          f"(torch.float8_e4m3fn) latent cache only")
    if isinstance(descale_k, Tensor):
        if descale_k.dtype != torch.float32 or descale_k.shape not in ((), (1,), (batch,)):
            raise LaunchError(f"descale_k has dtype {descale_k.dtype} and shape {tuple(descale_k.shape)}; expected "
                              f"torch.float32 of shape () or (1,) (the whole cache) or ({batch},) (per sequence)")
        _check_devices(q_name, q, descale_k=descale_k)
    elif isinstance(descale_k, bool) or not isinstance(descale_k, (int, float)) or not (0 < descale_k < math.inf):
        raise LaunchError(f"descale_k is {descale_k!r}: a positive float, or a float32 tensor")


def _descale_rows(descale_k, q: Tensor, batch) -> Optional[Tensor]:
    """descale_k as the kernel's contiguous float32 (B, 1) factors of its one KV head (a per-cache factor
    repeated); the same factors dequantize K and V, which are one cache."""
    if descale_k is None:
        return None
    if not isinstance(descale_k, Tensor):
        return torch.full((batch, 1), float(descale_k), dtype=torch.float32, device=q.device)
    return descale_k.reshape(-1, 1).expand(batch, 1).contiguous()


def _check_int32(name: str, t: Tensor, want: tuple, layout: str):
    if t.dtype != torch.int32:
        raise LaunchError(f"{name} has dtype {t.dtype}; it must be torch.int32")
    _check_shape(name, t, want, layout)


def _check_seqlen_q(name: str, sq):
    if sq > MAX_SEQLEN_Q:
        raise LaunchError(f"{name} is {sq}: MLA decode takes 1..{MAX_SEQLEN_Q} queries per sequence (decode, "
                          f"speculative decoding, MTP); longer query chunks (prefill) cost less unabsorbed, as "
                          f"fa4jit.attention_varlen with 192-wide Q/K and a 128-wide V")


def _check_scalars(softmax_scale, num_splits):
    # Comparisons, not math.isfinite: a compiled graph with dynamic=True passes a symbolic float.
    if isinstance(softmax_scale, bool) or not isinstance(softmax_scale, (int, float)) or not (
            0 < softmax_scale < math.inf):
        raise ConfigError(f"softmax_scale is {softmax_scale!r}: pass the model's (a positive float); MLA has no "
                          f"default (DeepSeek's is 1/sqrt(192) times the YaRN mscale squared, not 1/sqrt(576))")
    if isinstance(num_splits, bool) or not isinstance(num_splits, int):
        raise TypeError(f"num_splits: expected an int (0 automatic, 1 none), got {type(num_splits).__name__} "
                        f"(FlashMLA's get_mla_metadata output is not needed: fa4jit schedules its own splits)")


def _require_cuda(name: str, t: Tensor):
    if t.device.type != "cuda":
        raise LaunchError(f"{name} is on {t.device}: fa4jit runs on CUDA tensors")


def _check_devices(q_name: str, q: Tensor, **others):
    for name, t in others.items():
        if t is not None and t.device != q.device:
            raise LaunchError(f"{name} is on {t.device}, {q_name} on {q.device}: every tensor must be on "
                              f"{q_name}'s CUDA device")
    _require_cuda(q_name, q)


def _check_decode_args(q_nope, q_pe, ckv_cache, kpe_cache, page_table, cache_seqlens, softmax_scale, cu_seqlens_q,
                       max_seqlen_q, out, lse, num_splits) -> bool:
    """mla_decode's argument checks, in the order of its parameters (the devices last). Returns whether
    q_nope is FlashInfer's decode layout (B, H, 512), one query per sequence."""
    _check_scalars(softmax_scale, num_splits)
    _tensors(q_nope=q_nope, q_pe=q_pe, ckv_cache=ckv_cache, kpe_cache=kpe_cache, page_table=page_table,
             cache_seqlens=cache_seqlens, cu_seqlens_q=cu_seqlens_q, out=out, lse=lse)
    varlen = cu_seqlens_q is not None
    one_query = not varlen and q_nope.dim() == 3
    if varlen:
        _check_shape("q_nope", q_nope, (None, None, D_CKV), "(total_q, H, 512)", " with cu_seqlens_q")
    elif not one_query:
        _check_shape("q_nope", q_nope, (None, None, None, D_CKV), "(B, Sq, H, 512)",
                     ", or (B, H, 512), or (total_q, H, 512) with cu_seqlens_q")
    _check_shape("q_pe", q_pe, (*q_nope.shape[:-1], D_KPE), "q_nope's shape with 64 columns")
    if q_pe.dtype != q_nope.dtype:
        raise LaunchError(f"q_pe has dtype {q_pe.dtype} but q_nope has {q_nope.dtype}: the queries have one dtype")
    _check_dtypes("q_nope", q_nope, ckv_cache=ckv_cache, kpe_cache=kpe_cache)
    _check_shape("ckv_cache", ckv_cache, (None, None, D_CKV), "(num_pages, page_size, 512)")
    _check_shape("kpe_cache", kpe_cache, (*ckv_cache.shape[:2], D_KPE), "(num_pages, page_size, 64)",
                 ", ckv_cache's pages")
    if varlen:
        _check_int32("cu_seqlens_q", cu_seqlens_q, (None,), "(B + 1,)")
        if max_seqlen_q is None:
            raise LaunchError("max_seqlen_q: needed with cu_seqlens_q (the longest query sequence, a host int)")
        batch = cu_seqlens_q.shape[0] - 1
        _check_seqlen_q("max_seqlen_q", max_seqlen_q)
    else:
        batch = q_nope.shape[0]
        _check_seqlen_q("q_nope.shape[1] (Sq)", 1 if one_query else q_nope.shape[1])
    _check_int32("page_table", page_table, (batch, None), "(B, max_pages)")
    _check_int32("cache_seqlens", cache_seqlens, (batch,), "(B,)")
    if lse is not None and (lse.dtype != torch.float32 or lse.shape != q_nope.shape[:-1]):
        raise LaunchError(f"lse has dtype {lse.dtype} and shape {tuple(lse.shape)}; expected torch.float32 "
                          f"{tuple(q_nope.shape[:-1])} (out's shape without the last dimension)")
    _check_devices("q_nope", q_nope, q_pe=q_pe, ckv_cache=ckv_cache, kpe_cache=kpe_cache, page_table=page_table,
                   cache_seqlens=cache_seqlens, cu_seqlens_q=cu_seqlens_q, out=out, lse=lse)
    return one_query


# ---- the launch -----------------------------------------------------------------------------------------

def _attend(q: Tensor, k: Tensor, page_table: Tensor, cache_seqlens: Tensor, softmax_scale: float, causal: bool,
            cu_seqlens_q: Optional[Tensor], max_seqlen_q: Optional[int], num_splits: int, out: Optional[Tensor],
            return_lse: bool, descale: Optional[Tensor] = None, page_descale: Optional[Tensor] = None):
    """fa4jit.attention_paged over the 576-wide rows k, V their first 512 columns. The query heads are
    always packed: with one KV head an unpacked tile would hold Sq of its 64+ rows. descale: an FP8
    cache's (B, 1) factors, K's and V's (one cache); page_descale: its (num_pages,) factors."""
    return _ops.attention_paged(q, k, k[..., :D_CKV], page_table, cache_seqlens, causal=causal,
                                cu_seqlens_q=cu_seqlens_q, max_seqlen_q=max_seqlen_q, softmax_scale=softmax_scale,
                                num_splits=num_splits, pack_gqa=True, return_lse=return_lse, out=out,
                                descale_k=descale, descale_v=descale, page_descale=page_descale)


# torch.compile cannot trace storages and offsets (dynamo graph-breaks on them, and guards on neither),
# so inside a compiled graph the one-buffer test runs in this op, at run time, on the real tensors.
@torch.library.custom_op("fa4jit::mla_decode_out", mutates_args=("out", "lse"))
def _mla_decode_out(q: Tensor, ckv_cache: Tensor, kpe_cache: Tensor, page_table: Tensor, cache_seqlens: Tensor,
                    out: Tensor, lse: Optional[Tensor], cu_seqlens_q: Optional[Tensor], max_seqlen_q: int,
                    softmax_scale: float, causal: bool, num_splits: int, descale: Optional[Tensor],
                    page_descale: Optional[Tensor]) -> None:
    r = _attend(q, _latent_cache(ckv_cache, kpe_cache), page_table, cache_seqlens, softmax_scale, causal,
                cu_seqlens_q, max_seqlen_q or None, num_splits, out, lse is not None, descale, page_descale)
    if lse is not None:
        lse.copy_(r[1])


@_mla_decode_out.register_fake
def _mla_decode_out_fake(q, ckv_cache, kpe_cache, page_table, cache_seqlens, out, lse, cu_seqlens_q, max_seqlen_q,
                         softmax_scale, causal, num_splits, descale, page_descale):
    # The launch's checks at trace time, on a stand-in for the key rows (their layout is decided at run time).
    k = ckv_cache.new_empty((*ckv_cache.shape[:2], 1, D_QK))
    _attend(q, k, page_table, cache_seqlens, softmax_scale, causal, cu_seqlens_q, max_seqlen_q or None, num_splits,
            out, lse is not None, descale, page_descale)


def _decode(q: Tensor, ckv_cache: Tensor, kpe_cache: Tensor, page_table: Tensor, cache_seqlens: Tensor,
            softmax_scale: float, causal: bool, cu_seqlens_q: Optional[Tensor], max_seqlen_q: Optional[int],
            num_splits: int, out: Optional[Tensor], return_lse: bool, descale: Optional[Tensor],
            page_descale: Optional[Tensor]):
    """(out, lse in the library's layout or None) of the 576-wide queries q over the two caches."""
    if not torch.compiler.is_compiling():
        r = _attend(q, _latent_cache(ckv_cache, kpe_cache), page_table, cache_seqlens, softmax_scale, causal,
                    cu_seqlens_q, max_seqlen_q, num_splits, out, return_lse, descale, page_descale)
        return r if return_lse else (r, None)
    varlen = cu_seqlens_q is not None
    if out is None:
        out = q.new_empty((*q.shape[:-1], D_CKV))
    lse = None
    if return_lse:
        lse = q.new_empty((q.shape[1], q.shape[0]) if varlen else (q.shape[0], q.shape[2], q.shape[1]),
                          dtype=torch.float32)
    torch.ops.fa4jit.mla_decode_out(q, ckv_cache, kpe_cache, page_table, cache_seqlens, out, lse, cu_seqlens_q,
                                    int(max_seqlen_q or 0), float(softmax_scale), bool(causal), num_splits, descale,
                                    page_descale)
    return out, lse


# ---- the public functions -------------------------------------------------------------------------------

def mla_decode(q_nope: Tensor, q_pe: Tensor, ckv_cache: Tensor, kpe_cache: Tensor, page_table: Tensor,
               cache_seqlens: Tensor, *, softmax_scale: float, causal: bool = False,
               cu_seqlens_q: Optional[Tensor] = None, max_seqlen_q: Optional[int] = None,
               out: Optional[Tensor] = None, lse: Optional[Tensor] = None, return_lse: bool = False,
               num_splits: int = 0, descale_k=None, page_descale: Optional[Tensor] = None):
    """Absorbed MLA attention over a paged latent cache, with FlashInfer's tensors
    (BatchMLAPagedAttentionWrapper.run) and FlashMLA's page table. Forward only.

    q_nope: (B, Sq, H, 512), or packed (total_q, H, 512) with cu_seqlens_q (int32 (B + 1,)) and
    max_seqlen_q (a host int), or (B, H, 512) for one query per sequence (FlashInfer's decode);
    q_pe: q_nope's shape with 64 columns. Sq (max_seqlen_q) at most 16; causal is bottom-right
    aligned (query i of a sequence of n cached keys sees keys 0 .. n - Sq + i: speculative decoding
    and MTP verification). bf16 or fp16 queries; the caches of the same dtype, or both
    torch.float8_e4m3fn (an FP8 latent cache, sm_90a: the kernel reads c = stored x descale_k).
    ckv_cache: (num_pages, page_size, 512) latent c_kv rows; kpe_cache: (num_pages, page_size, 64)
    rope rows. When both are slices of one (num_pages, page_size, 576) buffer (kpe's data 512
    elements after ckv's, equal page and row strides: SGLang's and vLLM's layouts), the kernel reads
    that buffer in place; separate tensors are concatenated on every call, a copy of both whole
    caches (warned once: the slow path).
    page_table: int32 (B, max_pages) (FlashMLA's block_table): sequence b's key r is row
    r % page_size of page page_table[b, r // page_size]; cache_seqlens: int32 (B,) keys per sequence.
    softmax_scale: required (the model's; DeepSeek's is not 1/sqrt(576)). num_splits: split-KV (0
    automatic, 1 none). out: written in place (q_nope's shape with 512 columns). descale_k: an FP8
    cache's dequantization factor (FlashMLA's name), for its keys and values alike: a float or a
    float32 tensor of shape () or (1,) for the whole cache, or (B,) per sequence; None means 1.
    page_descale: an FP8 cache's factors per page, float32 (num_pages,) (with descale_k or alone):
    page p's rows are read as page_descale[p] x stored value. The converters apply them in fp16:
    448 x factor must stay below 65504 (factors up to 146).

    Returns out (q_nope's shape, 512 columns: the latent output, before W_UV), or (out, lse) with
    return_lse. lse: float32 with out's shape without the last dimension, FlashInfer's layout
    ((total_q, H); (B, Sq, H) for 4-D q), a transposed view of the kernel's (B, H, Sq) ((H, total_q)
    varlen); ``lse=``: a tensor of that shape to write it into (returned with return_lse). Natural log, as
    fa4jit.merge_state takes it: FlashInfer's run returns log2 unless return_lse_base_on_e=True
    (multiply by 1 / ln 2 = 1.4427 to compare).
    """
    one_query = _check_decode_args(q_nope, q_pe, ckv_cache, kpe_cache, page_table, cache_seqlens, softmax_scale,
                                   cu_seqlens_q, max_seqlen_q, out, lse, num_splits)
    batch = page_table.shape[0]
    _check_descale(descale_k, ckv_cache, batch, "q_nope", q_nope)
    _tensors(page_descale=page_descale)
    q = torch.cat([q_nope, q_pe], dim=-1)  # the queries' 576 columns: a small copy, beside the cache's
    o = out
    if one_query:
        q, o = q.unsqueeze(1), out.unsqueeze(1) if out is not None else None
    want_lse = return_lse or lse is not None
    o, lse_kernel = _decode(q, ckv_cache, kpe_cache, page_table, cache_seqlens, softmax_scale, causal, cu_seqlens_q,
                            max_seqlen_q, num_splits, o, want_lse, _descale_rows(descale_k, q, batch), page_descale)
    if out is not None:
        o = out
    elif one_query:
        o = o.squeeze(1)
    if not want_lse:
        return o
    lse_out = lse_kernel.transpose(-1, -2)  # (B, H, Sq) -> (B, Sq, H); varlen (H, total_q) -> (total_q, H)
    if one_query:
        lse_out = lse_out.squeeze(1)
    if lse is not None:
        lse_out = lse.copy_(lse_out)
    return (o, lse_out) if return_lse else o


def mla_with_kvcache(q: Tensor, k_cache: Tensor, block_table: Tensor, cache_seqlens: Tensor, head_dim_v: int = D_CKV,
                     *, softmax_scale: float, causal: bool = False, out: Optional[Tensor] = None,
                     num_splits: int = 0, descale_k=None, page_descale: Optional[Tensor] = None):
    """Absorbed MLA attention with FlashMLA's arguments (flash_mla_with_kvcache, dense). Forward only.

    q: (B, Sq, H, 576), q_nope then q_pe; Sq at most 16, causal bottom-right aligned.
    k_cache: (num_pages, page_size, 1, 576) latent rows (c_kv then k_pe), attended in place (V is
    their first 512 columns). block_table: int32 (B, max_pages); cache_seqlens: int32 (B,).
    head_dim_v: 512. softmax_scale: required (the model's). The remaining arguments are keywords:
    FlashMLA's tile_scheduler_metadata and num_splits (get_mla_metadata) are not needed; num_splits
    here is split-KV (0 automatic, 1 none). out: written in place, (B, Sq, H, 512). An FP8 cache
    (torch.float8_e4m3fn k_cache under bf16 / fp16 q) takes descale_k as FlashMLA's: float32 (B,),
    or () / (1,) / a float for the whole cache; None means 1. page_descale: float32 (num_pages,)
    factors per page, as mla_decode's.

    Returns (out (B, Sq, H, 512), softmax_lse float32 (B, H, Sq), natural log), as FlashMLA does.
    """
    _check_scalars(softmax_scale, num_splits)
    _tensors(q=q, k_cache=k_cache, block_table=block_table, cache_seqlens=cache_seqlens, out=out)
    if head_dim_v != D_CKV:
        raise ConfigError(f"head_dim_v is {head_dim_v!r}: MLA's V is the first {D_CKV} columns of the {D_QK}-wide "
                          f"key rows")
    _check_shape("q", q, (None, None, None, D_QK), "(B, Sq, H, 576)")
    _check_shape("k_cache", k_cache, (None, None, 1, D_QK), "(num_pages, page_size, 1, 576)", ": one latent KV head")
    _check_dtypes("q", q, k_cache=k_cache)
    batch = q.shape[0]
    _check_seqlen_q("q.shape[1] (Sq)", q.shape[1])
    _check_int32("block_table", block_table, (batch, None), "(B, max_pages)")
    _check_int32("cache_seqlens", cache_seqlens, (batch,), "(B,)")
    _check_devices("q", q, k_cache=k_cache, block_table=block_table, cache_seqlens=cache_seqlens, out=out)
    _check_descale(descale_k, k_cache, batch, "q", q)
    _tensors(page_descale=page_descale)
    return _attend(q, k_cache, block_table, cache_seqlens, softmax_scale, causal, None, None, num_splits, out, True,
                   _descale_rows(descale_k, q, batch), page_descale)
