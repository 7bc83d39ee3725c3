"""FlashAttention-3's ``flash_attn_interface`` calls on fa4jit's kernels, for engines written against it.

    from fa4jit.flash_attn_interface import flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache

The three functions take FlashAttention-3's arguments (hopper/flash_attn_interface.py: names, order,
defaults) and return what it returns: ``out``, or ``(out, softmax_lse)`` with ``return_attn_probs``
(``return_softmax_lse`` for the KV-cache call). vLLM's FlashAttention wrapper's keyword arguments are
accepted too (``block_table``, ``out``, ``alibi_slopes``, ``s_aux``, ``return_softmax_lse``,
``scheduler_metadata``, ``fa_version``). They are thin layers over fa4jit.attention, attention_varlen
and attention_paged (PyTorch custom ops: torch.compile and CUDA graphs work as with those):

- ``window_size=(left, right)`` (-1: unbounded) is fa4jit's ``window``, ``attention_chunk`` its
  ``chunk_size``, ``s_aux`` its ``sinks``, ``q_descale`` / ``k_descale`` / ``v_descale`` its
  ``descale_q`` / ``descale_k`` / ``descale_v``. FP8 descale factors of any strides (engines pass
  stride-0 ``expand``-ed ones) are made contiguous float32 here.
- ``flash_attn_with_kvcache`` appends ``k`` / ``v`` into ``k_cache`` / ``v_cache`` in place at
  ``cache_seqlens`` (contiguous caches, with ``cache_batch_idx``, or paged ones through
  ``page_table`` / ``block_table``) and applies rotary embedding to ``q`` and the new ``k`` from
  ``rotary_cos`` / ``rotary_sin`` (interleaved or not) before attending over the updated cache.
- softmax_lse is float32 (batch, heads, seqlen_q) (varlen: (heads, total_q)), natural log, as FA's.

What fa4jit does not do raises NotImplementedError naming the argument before anything runs:
``dropout_p`` != 0, a backward (inputs that require grad), ``qv``, ``seqused_q``, ``cache_leftpad``,
``cu_seqlens_k_new``, ``rotary_seqlens``, ``sm_margin`` != 0, per-batch ``alibi_slopes``.
``deterministic`` concerns the backward only (the forward is deterministic); ``scheduler_metadata``
and ``fa_version`` are accepted and unused (fa4jit schedules its own kernels).
"""
from typing import Optional, Tuple, Union

import torch

from . import ops as _ops

Tensor = torch.Tensor

__all__ = ["flash_attn_func", "flash_attn_varlen_func", "flash_attn_with_kvcache", "apply_rotary_emb",
           "merge_state"]


# ---- what fa4jit does not do, refused up front ------------------------------------------------------

def _refuse(fn: str, **given):
    """NotImplementedError for the first argument given a value fa4jit has no kernel for."""
    for name, (value, why) in given.items():
        if value is None or value is False:
            continue
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0:
            continue
        raise NotImplementedError(f"{fn}: {name}={_show(value)} is not supported by fa4jit ({why})")


def _show(value) -> str:
    if isinstance(value, Tensor):
        return f"<tensor {tuple(value.shape)} {value.dtype}>"
    return repr(value)


def _no_grad(fn: str, **tensors):
    # fa4jit is forward only: refuse here, before a launch whose backward would fail later.
    if not torch.is_grad_enabled():
        return
    for name, t in tensors.items():
        if isinstance(t, Tensor) and t.requires_grad:
            raise NotImplementedError(
                f"{fn}: {name} requires grad, but fa4jit is forward only (no backward pass); call it under "
                f"torch.no_grad() / torch.inference_mode(), or detach the inputs")


def _window(window_size) -> Optional[Tuple[int, int]]:
    if window_size is None:
        return None
    if not isinstance(window_size, (tuple, list)) or len(window_size) != 2:
        raise ValueError(f"window_size: expected (left, right), got {window_size!r}")
    left, right = (-1 if w is None else int(w) for w in window_size)
    return None if left < 0 and right < 0 else (left, right)


def _alibi(fn: str, alibi_slopes: Optional[Tensor]) -> Optional[Tensor]:
    if alibi_slopes is None:
        return None
    if isinstance(alibi_slopes, Tensor) and alibi_slopes.dim() == 2:
        raise NotImplementedError(f"{fn}: alibi_slopes of shape {tuple(alibi_slopes.shape)} (per batch) is not "
                                  "supported by fa4jit; pass one slope per query head, shape (nheads,)")
    return alibi_slopes


def _descale(t: Optional[Tensor]) -> Optional[Tensor]:
    """FlashAttention's (batch, nheads_k) factors with any strides (vLLM passes scalar scales
    ``expand``-ed, stride 0) as the contiguous float32 ones fa4jit's launch reads."""
    if t is None or not isinstance(t, Tensor):
        return t  # None, or something ops names in its TypeError
    return t.to(torch.float32).contiguous()


def _lse_result(result, want_lse: bool):
    if want_lse:
        return result
    return result[0] if isinstance(result, tuple) else result


# ---- flash_attn_func / flash_attn_varlen_func -------------------------------------------------------

def flash_attn_func(q, k, v, softmax_scale=None, causal=False, qv=None, q_descale=None, k_descale=None,
                    v_descale=None, window_size=(-1, -1), attention_chunk=0, softcap=0.0, num_splits=1,
                    pack_gqa=None, deterministic=False, sm_margin=0, return_attn_probs=False, *,
                    dropout_p=0.0, alibi_slopes=None, s_aux=None, out=None, return_softmax_lse=False):
    """FlashAttention-3's flash_attn_func: q (batch, seqlen_q, nheads, headdim), k/v (batch, seqlen_k,
    nheads_k, headdim). Returns out (batch, seqlen_q, nheads, headdim), or (out, softmax_lse) with
    return_attn_probs (or return_softmax_lse), softmax_lse float32 (batch, nheads, seqlen_q).
    causal is bottom-right aligned; window_size (left, right), -1 unbounded. See the module doc."""
    fn = "flash_attn_func"
    _refuse(fn, dropout_p=(dropout_p, "no dropout: fa4jit is inference only"),
            qv=(qv, "no extra q·v term"), sm_margin=(sm_margin, "kernels use every SM"))
    _no_grad(fn, q=q, k=k, v=v)
    want_lse = bool(return_attn_probs or return_softmax_lse)
    result = _ops.attention(
        q, k, v, causal=bool(causal), window=_window(window_size), softcap=float(softcap or 0.0),
        softmax_scale=softmax_scale, sinks=s_aux, alibi_slopes=_alibi(fn, alibi_slopes), num_splits=int(num_splits),
        pack_gqa=pack_gqa, return_lse=want_lse, out=out, chunk_size=int(attention_chunk or 0),
        descale_q=_descale(q_descale), descale_k=_descale(k_descale), descale_v=_descale(v_descale))
    return _lse_result(result, want_lse)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None,
                           seqused_q=None, seqused_k=None, softmax_scale=None, causal=False, qv=None, q_descale=None,
                           k_descale=None, v_descale=None, window_size=(-1, -1), attention_chunk=0, softcap=0.0,
                           num_splits=1, pack_gqa=None, deterministic=False, sm_margin=0, return_attn_probs=False, *,
                           dropout_p=0.0, block_table=None, alibi_slopes=None, s_aux=None, out=None,
                           return_softmax_lse=False, scheduler_metadata=None, fa_version=None):
    """FlashAttention-3's flash_attn_varlen_func: packed sequences, q (total_q, nheads, headdim), k/v
    (total_k, nheads_k, headdim), cu_seqlens_q / cu_seqlens_k int32 (batch + 1,), max_seqlen_q /
    max_seqlen_k host ints, seqused_k int32 (batch,) keys used per sequence.

    As vLLM calls it: ``block_table`` int32 (batch, max_blocks) makes k/v a paged cache (num_blocks,
    block_size, nheads_k, headdim) with ``seqused_k`` keys per sequence (cu_seqlens_k then None);
    ``out`` receives the output. Returns out (total_q, nheads, headdim), or (out, softmax_lse) with
    return_attn_probs / return_softmax_lse, softmax_lse float32 (nheads, total_q)."""
    fn = "flash_attn_varlen_func"
    _refuse(fn, dropout_p=(dropout_p, "no dropout: fa4jit is inference only"),
            qv=(qv, "no extra q·v term"), seqused_q=(seqused_q, "queries are bounded by cu_seqlens_q only"),
            sm_margin=(sm_margin, "kernels use every SM"))
    _no_grad(fn, q=q, k=k, v=v)
    if cu_seqlens_q is None:
        raise ValueError(f"{fn}: cu_seqlens_q is required (int32 (batch + 1,) offsets of the packed queries)")
    if max_seqlen_q is None:
        raise ValueError(f"{fn}: max_seqlen_q is required (the longest query sequence, a host int)")
    want_lse = bool(return_attn_probs or return_softmax_lse)
    common = dict(causal=bool(causal), window=_window(window_size), softcap=float(softcap or 0.0),
                  softmax_scale=softmax_scale, sinks=s_aux, alibi_slopes=_alibi(fn, alibi_slopes),
                  num_splits=int(num_splits), pack_gqa=pack_gqa, return_lse=want_lse, out=out,
                  chunk_size=int(attention_chunk or 0), descale_q=_descale(q_descale),
                  descale_k=_descale(k_descale), descale_v=_descale(v_descale),
                  max_seqlen_k=None if max_seqlen_k is None else int(max_seqlen_k))
    if block_table is not None:
        if cu_seqlens_k is not None:
            raise NotImplementedError(f"{fn}: cu_seqlens_k with block_table is not supported by fa4jit; a paged "
                                      "cache's sequences are given by block_table and seqused_k")
        result = _ops.attention_paged(q, k, v, block_table, seqused_k, cu_seqlens_q=cu_seqlens_q,
                                      max_seqlen_q=int(max_seqlen_q), **common)
    else:
        if cu_seqlens_k is None:
            raise ValueError(f"{fn}: cu_seqlens_k is required without block_table (int32 (batch + 1,) offsets of "
                             "the packed keys)")
        result = _ops.attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q),
                                       seqused_k=seqused_k, **common)
    return _lse_result(result, want_lse)


# ---- rotary embedding --------------------------------------------------------------------------------

def apply_rotary_emb(x: Tensor, cos: Tensor, sin: Tensor, interleaved: bool = False, inplace: bool = False,
                     seqlen_offsets: Union[int, Tensor] = 0, cu_seqlens: Optional[Tensor] = None,
                     max_seqlen: Optional[int] = None) -> Tensor:
    """Rotary embedding as FlashAttention's flash_attn.layers.rotary.apply_rotary_emb (the same
    arguments; packed varlen x with cu_seqlens is not supported here):
    x (batch, seqlen, nheads, headdim); cos / sin (seqlen_ro, rotary_dim / 2). The first rotary_dim
    features of token t of sequence b are rotated by the angle of row seqlen_offsets[b] + t (an int:
    the same offset for every sequence); the rest pass through. interleaved: pairs (0, 1), (2, 3), ...
    (GPT-J); else (i, i + rotary_dim / 2) (GPT-NeoX). Computed in float32, returned in x's dtype
    (written into x with inplace)."""
    _refuse("apply_rotary_emb", cu_seqlens=(cu_seqlens, "x is (batch, seqlen, nheads, headdim)"))
    B, S = x.shape[0], x.shape[1]
    if isinstance(seqlen_offsets, Tensor):
        start = seqlen_offsets.to(device=x.device, dtype=torch.long).view(B, 1)
    else:
        start = torch.full((B, 1), int(seqlen_offsets), dtype=torch.long, device=x.device)
    positions = start + torch.arange(S, device=x.device).view(1, S)
    out = _rotate(x, cos, sin, positions, interleaved)
    return x.copy_(out) if inplace else out


def _rotate(x: Tensor, cos: Tensor, sin: Tensor, positions: Tensor, interleaved: bool) -> Tensor:
    """x (B, S, H, D) rotated at positions (B, S) (rows of cos / sin)."""
    half = cos.shape[-1]
    rd = 2 * half
    if cos.dim() != 2 or tuple(sin.shape) != tuple(cos.shape):
        raise ValueError(f"rotary_cos / rotary_sin: shapes {tuple(cos.shape)} and {tuple(sin.shape)}; expected the "
                         "same (seqlen_ro, rotary_dim / 2)")
    if rd > x.shape[-1]:
        raise ValueError(f"rotary_cos: rotary_dim {rd} (2 x {half}) is larger than headdim {x.shape[-1]}")
    c = cos.to(device=x.device, dtype=torch.float32)[positions].unsqueeze(2)  # (B, S, 1, rd / 2)
    s = sin.to(device=x.device, dtype=torch.float32)[positions].unsqueeze(2)
    xr = x[..., :rd].float()
    if interleaved:
        x0, x1 = xr[..., 0::2], xr[..., 1::2]
        rot = torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).flatten(-2)
    else:
        x0, x1 = xr[..., :half], xr[..., half:]
        rot = torch.cat((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1)
    if rd == x.shape[-1]:
        return rot.to(x.dtype)
    return torch.cat((rot.to(x.dtype), x[..., rd:]), dim=-1)


# ---- flash_attn_with_kvcache -------------------------------------------------------------------------

def _int32_lengths(cache_seqlens, batch: int, device) -> Optional[Tensor]:
    if cache_seqlens is None:
        return None
    if isinstance(cache_seqlens, int):
        return torch.full((batch,), cache_seqlens, dtype=torch.int32, device=device)
    if not isinstance(cache_seqlens, Tensor):
        raise TypeError(f"cache_seqlens: expected an int or an int32 (batch,) tensor, got {type(cache_seqlens).__name__}")
    if cache_seqlens.dim() != 1 or cache_seqlens.shape[0] != batch:
        raise ValueError(f"cache_seqlens has shape {tuple(cache_seqlens.shape)}; expected ({batch},)")
    return cache_seqlens.to(torch.int32)


def _append(cache: Tensor, new: Tensor, name: str, rows: Optional[Tensor], page_table: Optional[Tensor],
            start: Tensor):
    """Writes new (B, S_new, Hkv, D) into cache in place at rows start[b] .. start[b] + S_new - 1 of
    sequence b: cache row rows[b] (contiguous cache) or through page_table (paged cache)."""
    if not isinstance(new, Tensor) or new.dim() != 4:
        raise ValueError(f"{name} has shape {tuple(getattr(new, 'shape', ()))}; expected (batch, seqlen_new, "
                         "nheads_k, headdim)")
    if new.shape[2:] != cache.shape[2:]:
        raise ValueError(f"{name} has heads and headdim {tuple(new.shape[2:])}, its cache {tuple(cache.shape[2:])}")
    B, S = new.shape[0], new.shape[1]
    pos = start.to(torch.long).view(B, 1) + torch.arange(S, device=cache.device).view(1, S)  # (B, S) key rows
    if page_table is not None:
        size = cache.shape[1]
        page = torch.gather(page_table.to(torch.long), 1, torch.div(pos, size, rounding_mode="floor"))
        cache[page, pos % size] = new.to(cache.dtype)
    else:
        cache[rows.to(torch.long).view(B, 1).expand(B, S), pos] = new.to(cache.dtype)


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, qv=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens: Optional[Union[int, Tensor]] = None, cache_batch_idx: Optional[Tensor] = None,
                            cache_leftpad: Optional[Tensor] = None, page_table: Optional[Tensor] = None,
                            cu_seqlens_q: Optional[Tensor] = None, cu_seqlens_k_new: Optional[Tensor] = None,
                            max_seqlen_q: Optional[int] = None, rotary_seqlens: Optional[Tensor] = None,
                            q_descale: Optional[Tensor] = None, k_descale: Optional[Tensor] = None,
                            v_descale: Optional[Tensor] = None, softmax_scale=None, causal=False,
                            window_size=(-1, -1), attention_chunk=0, softcap=0.0, rotary_interleaved=True,
                            scheduler_metadata=None, num_splits=0, pack_gqa=None, sm_margin=0,
                            return_softmax_lse=False, *, block_table: Optional[Tensor] = None, alibi_slopes=None,
                            s_aux=None, out=None, fa_version=None):
    """FlashAttention-3's flash_attn_with_kvcache (decode and incremental prefill): attention of q
    (batch, seqlen_q, nheads, headdim) over a KV cache, after appending k / v to it.

    k_cache / v_cache: (batch_cache, seqlen_cache, nheads_k, headdim), or with page_table (or its
    FlashAttention-2 / vLLM name block_table, int32 (batch, max_blocks)) a paged cache (num_blocks,
    block_size, nheads_k, headdim). cache_seqlens: int or int32 (batch,), the keys already cached
    (None: the whole cache). cache_batch_idx: int32 (batch,), the contiguous cache's row of each
    sequence (None: 0 .. batch - 1).

    k / v (batch, seqlen_new, nheads_k, headdim), optional: written into the caches in place at
    positions cache_seqlens[b] .. cache_seqlens[b] + seqlen_new - 1 (the caches must have room:
    as in FlashAttention, this is not checked on the device), then attended over with the rest.
    rotary_cos / rotary_sin (seqlen_ro, rotary_dim / 2), with k: the new k is rotated at those
    positions, and q too (causal or windowed: q's token i at cache_seqlens[b] + i; otherwise every
    token of q at cache_seqlens[b]); rotary_interleaved as apply_rotary_emb's interleaved.

    Returns out (batch, seqlen_q, nheads, headdim), or (out, softmax_lse) with return_softmax_lse,
    softmax_lse float32 (batch, nheads, seqlen_q). Forward only."""
    fn = "flash_attn_with_kvcache"
    _refuse(fn, qv=(qv, "no extra q·v term"),
            cache_leftpad=(cache_leftpad, "caches start at row 0"),
            cu_seqlens_k_new=(cu_seqlens_k_new, "new keys are (batch, seqlen_new, ...), not packed"),
            rotary_seqlens=(rotary_seqlens, "rotary positions follow cache_seqlens"),
            sm_margin=(sm_margin, "kernels use every SM"))
    _no_grad(fn, q=q, k_cache=k_cache, v_cache=v_cache, k=k, v=v)
    if page_table is not None and block_table is not None:
        raise ValueError(f"{fn}: page_table and block_table are the same argument (FlashAttention-3's and "
                         "FlashAttention-2's name); pass one")
    table = page_table if page_table is not None else block_table
    if table is not None and cache_batch_idx is not None:
        raise NotImplementedError(f"{fn}: cache_batch_idx with a paged cache (page_table) is not supported by "
                                  "fa4jit; the page table already maps each sequence to its blocks")
    if (k is None) != (v is None):
        raise ValueError(f"{fn}: k and v are appended together; got only {'k' if v is None else 'v'}")
    if (rotary_cos is None) != (rotary_sin is None):
        raise ValueError(f"{fn}: rotary_cos and rotary_sin go together; got only "
                         f"{'rotary_cos' if rotary_sin is None else 'rotary_sin'}")
    if rotary_cos is not None and k is None:
        raise ValueError(f"{fn}: rotary_cos / rotary_sin rotate the new k (and q): pass k and v to append")
    if cu_seqlens_q is not None and (k is not None or rotary_cos is not None):
        raise NotImplementedError(f"{fn}: cu_seqlens_q with k / v to append or rotary embedding is not supported "
                                  "by fa4jit; append to the cache first, then call with cu_seqlens_q alone")
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{fn}: {name}: expected a torch.Tensor, got {type(t).__name__}")
    if k_cache.dim() != 4 or v_cache.dim() != 4:
        raise ValueError(f"{fn}: k_cache {tuple(k_cache.shape)} / v_cache {tuple(v_cache.shape)}: expected "
                         "(batch_cache, seqlen_cache, nheads_k, headdim) or (num_blocks, block_size, nheads_k, headdim)")

    varlen_q = cu_seqlens_q is not None
    batch = (cu_seqlens_q.shape[0] - 1) if varlen_q else q.shape[0]
    device = k_cache.device
    seqlens = _int32_lengths(cache_seqlens, batch, device)
    if k is not None:
        if seqlens is None:
            raise ValueError(f"{fn}: cache_seqlens is required with k / v (where in the cache to append them)")
        if k.shape[0] != batch or v.shape[:2] != k.shape[:2]:
            raise ValueError(f"{fn}: k {tuple(k.shape)} and v {tuple(v.shape)}: expected batch {batch} and the same "
                             "seqlen_new")
        if isinstance(cache_seqlens, int) and table is None and cache_seqlens + k.shape[1] > k_cache.shape[1]:
            raise ValueError(f"{fn}: cache_seqlens {cache_seqlens} + seqlen_new {k.shape[1]} keys do not fit the "
                             f"cache's seqlen_cache {k_cache.shape[1]}")
    rows = None
    if table is None:
        if cache_batch_idx is not None:
            if not isinstance(cache_batch_idx, Tensor) or tuple(cache_batch_idx.shape) != (batch,):
                raise ValueError(f"{fn}: cache_batch_idx has shape {tuple(getattr(cache_batch_idx, 'shape', ()))}; "
                                 f"expected ({batch},) int32")
            rows = cache_batch_idx.to(device=device, dtype=torch.int32).contiguous()
        else:
            if k_cache.shape[0] < batch:
                raise ValueError(f"{fn}: k_cache holds {k_cache.shape[0]} sequences, q has batch {batch} (pass "
                                 "cache_batch_idx to pick rows)")
            rows = torch.arange(batch, dtype=torch.int32, device=device)

    window = _window(window_size)
    if k is not None:
        k_new = k
        if rotary_cos is not None:
            k_new = _rotate(k, rotary_cos, rotary_sin, _positions(seqlens, k.shape[1], True), rotary_interleaved)
            # q's tokens: each at its own position when causal or windowed (they are the newest keys'
            # queries), else all at the first new position (FlashAttention's convention).
            q = _rotate(q, rotary_cos, rotary_sin, _positions(seqlens, q.shape[1], bool(causal) or window is not None),
                        rotary_interleaved)
        _append(k_cache, k_new, "k", rows, table, seqlens)
        _append(v_cache, v, "v", rows, table, seqlens)
        used = seqlens + k.shape[1]
    else:
        used = seqlens

    want_lse = bool(return_softmax_lse)
    common = dict(causal=bool(causal), window=window, softcap=float(softcap or 0.0), softmax_scale=softmax_scale,
                  sinks=s_aux, alibi_slopes=_alibi(fn, alibi_slopes), num_splits=int(num_splits), pack_gqa=pack_gqa,
                  return_lse=want_lse, out=out, chunk_size=int(attention_chunk or 0), descale_q=_descale(q_descale),
                  descale_k=_descale(k_descale), descale_v=_descale(v_descale))
    if isinstance(cache_seqlens, int):
        common["max_seqlen_k"] = cache_seqlens + (k.shape[1] if k is not None else 0)
    if varlen_q:
        if max_seqlen_q is None:
            raise ValueError(f"{fn}: max_seqlen_q is required with cu_seqlens_q")
        common.update(cu_seqlens_q=cu_seqlens_q, max_seqlen_q=int(max_seqlen_q))
    if table is None:
        result = attend_cache_rows(q, k_cache, v_cache, rows, used, common, picked=cache_batch_idx is not None)
    else:
        result = _ops.attention_paged(q, k_cache, v_cache, table, used, **common)
    return _lse_result(result, want_lse)


def _positions(seqlens: Tensor, S: int, per_token: bool) -> Tensor:
    B = seqlens.shape[0]
    start = seqlens.to(torch.long).view(B, 1)
    if not per_token:
        return start.expand(B, S)
    return start + torch.arange(S, device=seqlens.device).view(1, S)


def attend_cache_rows(q, k_cache, v_cache, rows: Tensor, used: Optional[Tensor], common: dict, picked: bool = True):
    """Attention over a contiguous cache (batch_cache, seqlen_cache, nheads_k, headdim): sequence b's
    keys are the first used[b] rows (None: all) of cache row rows[b] (picked False: rows is 0 ..
    batch - 1). Such a cache is a paged one whose page is a whole cache row. TMA backends need pages
    of a multiple of 8 rows; other sizes go through the varlen kernel over the gathered rows (a copy).
    common: the ops' other arguments (cu_seqlens_q and max_seqlen_q for varlen queries). Also the
    transformers backend's static caches."""
    batch = rows.shape[0]
    S_cache = k_cache.shape[1]
    if S_cache % 8 == 0:
        return _ops.attention_paged(q, k_cache, v_cache, rows.view(batch, 1), used, **common)
    kc, vc = k_cache, v_cache
    if picked:
        kc, vc = k_cache.index_select(0, rows.to(torch.long)), v_cache.index_select(0, rows.to(torch.long))
    cu_k = torch.arange(batch + 1, dtype=torch.int32, device=k_cache.device) * S_cache
    lengths = used if used is not None else torch.full((batch,), S_cache, dtype=torch.int32, device=k_cache.device)
    return _varlen_over_rows(q, kc[:batch], vc[:batch], cu_k, lengths, "cu_seqlens_q" in common, common)


def _varlen_over_rows(q, kc, vc, cu_k, lengths, varlen_q, common):
    """A contiguous cache whose seqlen_cache is not a multiple of 8, as packed varlen keys."""
    B, S_cache = kc.shape[0], kc.shape[1]
    k_packed = kc.reshape(B * S_cache, kc.shape[2], kc.shape[3])
    v_packed = vc.reshape(B * S_cache, vc.shape[2], vc.shape[3])
    kw = dict(common)
    # Every row's keys fit its cache row: S_cache bounds them where cache_seqlens gave no exact hint,
    # so a decode step's keys still split over the SMs (docs/PERF.md run 84).
    kw["max_seqlen_k"] = kw.get("max_seqlen_k") or S_cache
    out = kw.pop("out", None)
    if varlen_q:
        cu_q, max_q = kw.pop("cu_seqlens_q"), kw.pop("max_seqlen_q")
        return _ops.attention_varlen(q, k_packed, v_packed, cu_q, cu_k, max_q, seqused_k=lengths, out=out, **kw)
    Sq = q.shape[1]
    cu_q = torch.arange(B + 1, dtype=torch.int32, device=q.device) * Sq
    out_packed = None if out is None else out.view(B * Sq, out.shape[2], out.shape[3])
    result = _ops.attention_varlen(q.reshape(B * Sq, q.shape[2], q.shape[3]), k_packed, v_packed, cu_q, cu_k, Sq,
                                   seqused_k=lengths, out=out_packed, **kw)
    o, lse = (result if isinstance(result, tuple) else (result, None))
    o = out if out is not None else o.view(B, Sq, o.shape[-2], o.shape[-1])
    if lse is None:
        return o
    return o, lse.view(lse.shape[0], B, Sq).transpose(0, 1)  # (Hq, B * Sq) -> (B, Hq, Sq)


# ---- merge_state ---------------------------------------------------------------------------------------

def merge_state(v_a: Tensor, s_a: Tensor, v_b: Tensor, s_b: Tensor) -> Tuple[Tensor, Tensor]:
    """Merges two attention results over disjoint key sets into the result over their union, as
    FlashInfer's ``merge_state`` (cascade / shared-prefix attention, partial results from several
    devices): v (..., nheads, headdim) outputs, s (..., nheads) float32 log-sum-exps. Returns
    (v, s): v = (exp(s_a) v_a + exp(s_b) v_b) / (exp(s_a) + exp(s_b)) in v_a's dtype, and
    s = log(exp(s_a) + exp(s_b)) float32. A side with s = -inf (no key) contributes nothing; both
    -inf gives v = 0, s = -inf.

    **The LSE here is base e (natural log), fa4jit's and FlashAttention's; FlashInfer's is base 2.**
    Convert FlashInfer's with s * ln(2) (and back with s / ln(2)) before mixing them.

    fa4jit's attention returns lse as (batch, nheads, seqlen_q) beside out (batch, seqlen_q, nheads,
    headdim): pass ``lse.transpose(1, 2)``; varlen lse (nheads, total_q): ``lse.t()``."""
    for name, t in (("v_a", v_a), ("s_a", s_a), ("v_b", v_b), ("s_b", s_b)):
        if not isinstance(t, Tensor):
            raise TypeError(f"merge_state: {name}: expected a torch.Tensor, got {type(t).__name__}")
    if v_a.shape != v_b.shape:
        raise ValueError(f"merge_state: v_a {tuple(v_a.shape)} and v_b {tuple(v_b.shape)} differ")
    if s_a.shape != s_b.shape or tuple(s_a.shape) != tuple(v_a.shape[:-1]):
        raise ValueError(f"merge_state: s_a {tuple(s_a.shape)} and s_b {tuple(s_b.shape)} must both be v's shape "
                         f"without headdim, {tuple(v_a.shape[:-1])}")
    sa, sb = s_a.float(), s_b.float()
    m = torch.maximum(sa, sb)
    # Both -inf: shift by 0 so the weights are exp(-inf) = 0 rather than exp(nan).
    m = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
    wa, wb = torch.exp(sa - m), torch.exp(sb - m)
    total = wa + wb
    s = m + torch.log(total)  # log(0) = -inf where both were empty
    inv = torch.where(total > 0, 1.0 / total, torch.zeros_like(total))
    v = v_a.float() * (wa * inv).unsqueeze(-1) + v_b.float() * (wb * inv).unsqueeze(-1)
    return v.to(v_a.dtype), s

