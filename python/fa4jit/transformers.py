"""Hugging Face transformers backend: ``attn_implementation="fa4jit"``.

    import fa4jit.transformers
    fa4jit.transformers.register()                  # once, before loading the model
    model = AutoModelForCausalLM.from_pretrained(..., attn_implementation="fa4jit", dtype=torch.bfloat16)

``attention_forward`` has transformers' AttentionInterface signature. It reads causality from the
module (``is_causal``), ``sliding_window`` and ``softcap`` from the layer (Mistral, Gemma 2/3), and
``s_aux`` as attention sinks (gpt-oss); decode steps with a KV cache (fewer queries than keys) use
fa4jit's bottom-right causal alignment. Its mask interface (``_key_mask``, registered with it) hands
over transformers' 2-D flash-attention padding mask, which runs as varlen attention over the unpadded
tokens, and what static caches and chunked layers need beside it. Static caches (StaticCache,
``generate(cache_implementation="static")``, torch.compile) attend their buffer's rows up to the last
query's, without a host sync when there is no padding. Sequences packed into the rows of a prompt
(position_ids that restart, or transformers' cu_seq_lens kwargs) run as varlen. Values may be narrower than
queries and keys: a pair the GPU's backend has a kernel for runs it (DeepSeek-V2/V3, Kimi-K2, LongCat
MLA prefill: 192 / 128); another pair (MiniCPM3: 96 / 64) runs with V zero-padded to Q's width and O
cut back, as transformers' own flash-attention path does. Llama 4's chunked layers run chunked
attention, also past the first chunk; families that declare no flash-attention support (their masks
are more than this backend is given) are refused by name. Forward only (inference); bf16 / fp16
models.
"""
import functools
from typing import Optional, Tuple

import torch

from . import _widths, flash_attn_interface, ops
from .errors import LaunchError

NAME = "fa4jit"


def _unpadded(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """(B, S, H, D) rows at flat token indices -> (tokens, H, D)."""
    B, S, H, D = x.shape
    return x.reshape(B * S, H, D).index_select(0, index)


# Families whose PreTrainedModel says _supports_flash_attn = False for a reason this backend handles:
# Llama 4's chunked layers (the chunk size read from the layer: _chunk_size; the keys cut by _key_mask).
_HANDLED_WITHOUT_FLASH = {"Llama4PreTrainedModel"}


@functools.lru_cache(maxsize=None)
def _family_without_flash(module_name: str) -> Optional[str]:
    """The PreTrainedModel of a modeling module that declares _supports_flash_attn = False (DeepSeek-V4's
    compressed keys, Doge's dynamic masks, T5's position bias: masks beyond causal, window and
    padding, which the flash-style 2-D mask this backend registers drops), unless handled here."""
    import sys
    mod = sys.modules.get(module_name)
    for c in vars(mod).values() if mod is not None else ():
        if (isinstance(c, type) and c.__module__ == module_name and c.__dict__.get("_supports_flash_attn") is False
                and c.__name__ not in _HANDLED_WITHOUT_FLASH):
            return c.__name__
    return None


@torch._dynamo.assume_constant_result  # a fact of the model's code: a constant of a compiled graph
def _refused_family(module_name: str) -> str:
    return _family_without_flash(module_name) or ""


def _chunk_size(module: torch.nn.Module) -> int:
    """Llama 4's chunked layers (config.layer_types[layer_idx] == "chunked_attention"): keys in the
    query's chunk of attention_chunk_size positions only, which transformers puts in a mask the
    flash-style one does not carry: fa4jit's chunk_size, whose chunks start at the first key. Where
    transformers' cache has dropped keys from a chunk's start, _key_mask cuts the keys before the
    first query's chunk, so the first key passed is a chunk's first."""
    cfg, i = getattr(module, "config", None), getattr(module, "layer_idx", None)
    types = getattr(cfg, "layer_types", None)
    if i is None or not types or i >= len(types) or types[i] != "chunked_attention":
        return 0
    return int(cfg.attention_chunk_size)


# _key_mask's own descriptions of the keys, int32 4-D tensors: transformers' mask creation and the
# models' code pass a 4-D mask on untouched, where some reshape a 1-D or 2-D one (GPT-2, CTRL:
# attention_mask.view(batch, -1)).
#   (B, 1, 1, 1): the keys used per row, a static cache's buffer whose later rows are unwritten;
#   (1, 1, n + 1, 1), n >= 2: the offsets of the n sequences packed into the rows (cu_seqlens).
def _keys_used(m: Optional[torch.Tensor]) -> bool:
    return m is not None and m.dim() == 4 and m.dtype == torch.int32 and m.shape[1:] == (1, 1, 1)


def _sequence_offsets(m: Optional[torch.Tensor]) -> bool:
    return (m is not None and m.dim() == 4 and m.dtype == torch.int32 and m.shape[:2] == (1, 1) and m.shape[2] >= 3
            and m.shape[3] == 1)


def _key_mask(batch_size: int, q_length: int, kv_length: int, q_offset=0, kv_offset: int = 0,
              mask_function=None, attention_mask: Optional[torch.Tensor] = None, local_size: Optional[int] = None,
              config=None, device="cpu", **kwargs):
    """transformers' mask interface for this backend (register() registers it): the keys of each row
    that attention_forward attends, in the form it runs fastest. Beside transformers' flash-attention
    mask (None, or the 2-D padding mask), three facts reach the kernels only through here:
    - a static cache passes its whole buffer as the keys; rows past the last query's position are
      not written yet. Without padding the keys up to it, q_offset + q_length - kv_offset of every
      row, are returned as a count (attention over the cache rows, no host sync, CUDA-graph safe);
      with padding the mask stays shorter than the buffer (varlen over the rows it covers, as
      transformers' flash-attention path slices them).
    - a chunked layer (Llama 4) over a cache that has dropped its oldest keys: the keys before the
      first query's chunk (transformers' own mask function, evaluated on that query's row) are masked
      out, so the kernels' chunks, which start at the first key attended, start where the model's do.
    - sequences packed into a row (a prompt whose position_ids restart; transformers folds them into
      the mask function): a token starts a sequence where it does not see the token before it, read
      off the mask function's subdiagonal, once a forward; returned as their offsets (varlen). Under
      torch.compile a device-side assert that there is one sequence a row instead: compiled prompts
      keep their graph whole, and a packed one fails rather than attend across its sequences.
    Returns None (every key real and aligned), a 2-D bool (B, keys) mask, or a description above.
    Families refused by attention_forward are refused here already: some index the mask first."""
    from transformers.masking_utils import flash_attention_mask
    family = _refused_family(type(config).__module__.replace(".configuration_", ".modeling_"))
    if family:
        raise _refusal(family)
    pad = flash_attention_mask(batch_size, q_length, kv_length, q_offset, kv_offset, mask_function, attention_mask)
    if local_size and local_size == getattr(config, "attention_chunk_size", None) and kv_offset > 0:
        b = torch.arange(batch_size, device=device).view(-1, 1)
        q = (torch.arange(1, device=device) + q_offset).view(1, 1)
        kv = (torch.arange(kv_length, device=device) + kv_offset).view(1, -1)
        seen = mask_function(b, torch.zeros_like(q), q, kv).expand(batch_size, kv_length)  # the first query's keys
        keys = seen.cumsum(1) > 0  # from its first key on: later queries' keys are in its chunk or the next ones
        return keys if pad is None else keys & pad
    if pad is not None:
        # A static cache's ones (generate's mask without padding): one host sync a forward, here rather
        # than in every layer's unpadding.
        if pad.shape[-1] < kv_length and bool(pad.all()):
            return torch.full((batch_size, 1, 1, 1), pad.shape[-1], dtype=torch.int32, device=device)
        return pad
    used = q_offset + q_length - kv_offset  # a 0-d tensor for static caches, whose length is a tensor
    if not isinstance(used, int) or used < kv_length:
        return torch.as_tensor(used, device=device).to(torch.int32).view(1, 1, 1, 1).expand(
            batch_size, 1, 1, 1).contiguous()
    # transformers folds packed sequences into the mask function (and says so: no causal skip); a
    # prompt without a cache, no padding mask.
    if (kwargs.get("allow_is_causal_skip") is False and not kwargs.get("use_vmap") and mask_function is not None
            and q_offset == 0 and kv_offset == 0 and q_length == kv_length > 1):
        b = torch.arange(batch_size, device=device).view(-1, 1)
        t = torch.arange(1, q_length, device=device).view(1, -1)
        starts = ~mask_function(b, torch.zeros_like(b), t, t - 1).expand(batch_size, q_length - 1)
        if torch.compiler.is_compiling():
            torch._assert_async(~starts.any(), "fa4jit: position_ids pack several sequences into one row, which "
                                "compiled prompts do not split: pass cu_seq_lens_q / cu_seq_lens_k / max_length_q / "
                                "max_length_k (DataCollatorWithFlattening(return_flash_attn_kwargs=True)), or run "
                                "eagerly")
        elif bool(starts.any()):
            first = torch.nn.functional.pad(starts, (1, 0), value=True).reshape(-1).nonzero().view(-1)
            offsets = torch.cat([first, first.new_tensor([batch_size * q_length])]).to(torch.int32)
            return offsets.view(1, 1, -1, 1)
    return None


def _varlen_kwargs(kwargs: dict):
    """transformers' flash-attention varlen kwargs (cu_seq_lens_q / _k, max_length_q / _k:
    DataCollatorWithFlattening(return_flash_attn_kwargs=True)): the sequences packed into the rows,
    as (cu_q, cu_k, max_q, max_k), or None."""
    given = [kwargs.get(n) for n in ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k")]
    if any(x is None for x in given):
        return None
    cu_q, cu_k, max_q, max_k = given
    return cu_q.to(torch.int32), cu_k.to(torch.int32), int(max_q), int(max_k)


def _offsets(m: torch.Tensor):
    """_key_mask's packed sequences' offsets as (cu_q, cu_k, max_q, max_k): one host read a layer."""
    cu = m.view(-1)
    longest = int(cu.diff().max())
    return cu, cu, longest, longest


def _refusal(family: str) -> LaunchError:
    return LaunchError(f"{family} declares no flash-attention support (its attention masks are more than "
                       f"causal, window and padding); fa4jit's backend would drop them: use 'sdpa' or 'eager'")


def attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask: Optional[torch.Tensor], scaling: Optional[float] = None, dropout: float = 0.0,
                      sliding_window: Optional[int] = None, softcap: Optional[float] = None,
                      s_aux: Optional[torch.Tensor] = None, **kwargs) -> Tuple[torch.Tensor, None]:
    """transformers AttentionInterface function. query/key (B, Hq|Hkv, S, D), value (B, Hkv, Sk, Dv) with Dv
    = D or a head dim the kernels pair with D (DeepSeek-V3: 192 / 128); returns (attn_output (B, Sq, Hq, Dv),
    None)."""
    family = _refused_family(type(module).__module__)
    if family:
        raise _refusal(family)
    if dropout:
        raise LaunchError(f"dropout is {dropout}: fa4jit is forward only (inference); use model.eval()")
    if kwargs.get("output_attentions"):
        raise LaunchError("output_attentions: fa4jit does not materialize attention weights; use 'eager'")
    if query.dtype == torch.float32:
        # PEFT's float32 layer norms and adapters hand a bf16 / fp16 model float32 states: cast them to
        # the autocast dtype or the model's weights' dtype, as transformers' flash-attention path does.
        from transformers.integrations.flash_attention import get_target_dtype
        target = get_target_dtype(query, module)
        if target in (torch.bfloat16, torch.float16):
            query, key, value = query.to(target), key.to(target), value.to(target)
    if query.dtype not in (torch.bfloat16, torch.float16):
        raise LaunchError(f"query has dtype {query.dtype}: fa4jit runs bf16 / fp16 models (load with dtype=torch.bfloat16, "
                          f"or run under torch.autocast)")
    is_causal = kwargs.get("is_causal")
    if is_causal is None:
        is_causal = getattr(module, "is_causal", True)
    is_causal = bool(is_causal)
    # O is V's width: DeepSeek-V3's attention passes V narrower than Q (192 / 128). Widths without a
    # kernel (MiniCPM3's 96 / 64, Phi-2's 80) run zero-padded (fa4jit._widths).
    depth, v_width = int(query.shape[-1]), int(value.shape[-1])
    wq, wv = _widths.widths_for(query, value)
    if (wq, wv) != (depth, v_width):
        scale = depth ** -0.5 if scaling is None else scaling
        o, w = attention_forward(module, _widths.pad_to(query, wq), _widths.pad_to(key, wq),
                                 _widths.pad_to(value, wv), attention_mask, scale, dropout, sliding_window, softcap,
                                 s_aux, **kwargs)
        return o[..., :v_width].contiguous(), w  # as every backend's output (AFMoE, JetMoE view it)
    q, k, v = query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2)  # (B, S, H, D) views
    B, Sq, Hq, _ = q.shape
    Sk, D = k.shape[1], v_width
    # transformers' sliding_window W: each query sees itself and the W - 1 keys before it.
    window = (sliding_window - 1, 0 if is_causal else sliding_window - 1) if sliding_window else None
    common = dict(causal=is_causal, window=window, softcap=float(softcap or 0.0), softmax_scale=scaling, sinks=s_aux,
                  chunk_size=_chunk_size(module))

    if attention_mask is None or _sequence_offsets(attention_mask):
        packed = _varlen_kwargs(kwargs) if attention_mask is None else _offsets(attention_mask)
        if packed is None:
            return ops.attention(q, k, v, **common), None
        cu_q, cu_k, max_q, max_k = packed
        o = ops.attention_varlen(q.reshape(B * Sq, Hq, -1), k.reshape(B * Sk, k.shape[2], -1),
                                 v.reshape(B * Sk, v.shape[2], -1), cu_q, cu_k, max_q, max_seqlen_k=max_k, **common)
        return o.view(B, Sq, Hq, D), None
    if _keys_used(attention_mask):  # _key_mask: a static cache's keys used per row, the rest unwritten
        rows = torch.arange(B, dtype=torch.int32, device=q.device)
        used = attention_mask.view(B)
        return flash_attn_interface.attend_cache_rows(q, k, v, rows, used, common, picked=False), None
    if attention_mask.dim() != 2 or attention_mask.shape[0] != B or attention_mask.shape[1] > Sk:
        raise LaunchError(f"attention_mask has shape {tuple(attention_mask.shape)}, keys are (batch {B}, {Sk}): "
                          f"fa4jit takes transformers' 2-D padding mask (registered by fa4jit.transformers.register())")
    if attention_mask.shape[1] < Sk:  # a static cache: rows past the mask are not written yet
        Sk = attention_mask.shape[1]
        k, v = k[:, :Sk], v[:, :Sk]
    # Padding: varlen over the unpadded tokens. The queries are the last Sq positions of each row.
    kmask = attention_mask.bool()
    qmask = kmask[:, Sk - Sq:]
    seqlens_k = kmask.sum(1, dtype=torch.int32)
    seqlens_q = qmask.sum(1, dtype=torch.int32)
    cu_k = torch.nn.functional.pad(torch.cumsum(seqlens_k, 0, dtype=torch.int32), (1, 0))
    cu_q = torch.nn.functional.pad(torch.cumsum(seqlens_q, 0, dtype=torch.int32), (1, 0))
    idx_k = kmask.reshape(-1).nonzero().squeeze(1)
    idx_q = qmask.reshape(-1).nonzero().squeeze(1)
    max_q = int(seqlens_q.max())
    if max_q == 0:
        return q.new_zeros(B, Sq, Hq, D), None
    # max_seqlen_k: the padded length bounds every row's keys, a hint with no host sync; without it a
    # padded decode step's keys would not be split over the SMs (docs/PERF.md run 84).
    o = ops.attention_varlen(_unpadded(q, idx_q), _unpadded(k, idx_k), _unpadded(v, idx_k), cu_q, cu_k, max_q,
                             max_seqlen_k=Sk, **common)
    out = q.new_zeros(B * Sq, Hq, D)
    out.index_copy_(0, idx_q, o)
    return out.view(B, Sq, Hq, D), None


def register(name: str = NAME) -> None:
    """Registers ``attention_forward`` as ``attn_implementation=name``, and ``_key_mask`` as its mask
    interface (transformers' 2-D flash-attention padding mask, and what static caches and chunked
    layers need beside it)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(name, attention_forward)
    AttentionMaskInterface.register(name, _key_mask)
