"""Hugging Face transformers backend: ``attn_implementation="fa4jit"``.

    import fa4jit.transformers
    fa4jit.transformers.register()                  # once, before loading the model
    model = AutoModelForCausalLM.from_pretrained(..., attn_implementation="fa4jit", dtype=torch.bfloat16)

``attention_forward`` has transformers' AttentionInterface signature. It reads causality from the
module (``is_causal``), ``sliding_window`` and ``softcap`` from the layer (Mistral, Gemma 2/3), and
``s_aux`` as attention sinks (gpt-oss); decode steps with a KV cache (fewer queries than keys) use
fa4jit's bottom-right causal alignment. Padding masks arrive as transformers' 2-D flash-attention
mask (registered for this name) and run as varlen attention over the unpadded tokens. Values may be
narrower than queries and keys: a pair the GPU's backend has a kernel for runs it (DeepSeek-V2/V3,
Kimi-K2, LongCat MLA prefill: 192 / 128); another pair (MiniCPM3: 96 / 64) runs with V zero-padded to
Q's width and O cut back, as transformers' own flash-attention path does. Llama 4's chunked layers
run chunked attention (prompts, and decode within the first chunk); families that declare no flash-attention support
(their masks are more than this backend is given) are refused by name. Forward only (inference);
bf16 / fp16 models.
"""
import functools
from typing import Optional, Tuple

import torch

from . import _widths, ops
from .errors import LaunchError

NAME = "fa4jit"


def _unpadded(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """(B, S, H, D) rows at flat token indices -> (tokens, H, D)."""
    B, S, H, D = x.shape
    return x.reshape(B * S, H, D).index_select(0, index)


# Families whose PreTrainedModel says _supports_flash_attn = False for a reason this backend handles:
# Llama 4's chunked layers (read from the layer: _chunk_size; prompts, and decode within the first chunk).
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


def _chunk_size(module: torch.nn.Module, queries: int, keys: int) -> int:
    """Llama 4's chunked layers (config.layer_types[layer_idx] == "chunked_attention"): keys in the
    query's chunk of attention_chunk_size positions only, which transformers puts in a mask the
    flash-style one does not carry: fa4jit's chunk_size, whose chunks start at key 0. That holds while
    the keys start at position 0: a prompt, and steps over a cache that has not dropped any (transformers'
    cache for these layers keeps the last chunk - 1 keys, so fewer past keys than that are all of
    them: generation within the first chunk, 8192 positions for Llama 4). Past that the interface does
    not say at which position the keys start, and the step is refused."""
    cfg, i = getattr(module, "config", None), getattr(module, "layer_idx", None)
    types = getattr(cfg, "layer_types", None)
    if i is None or not types or i >= len(types) or types[i] != "chunked_attention":
        return 0
    chunk = int(cfg.attention_chunk_size)
    if keys - queries >= chunk - 1:
        raise LaunchError(f"layer {i} is a chunked-attention layer (Llama 4) over a KV cache of {keys - queries} "
                          f"past keys: from {chunk - 1} on, the cache keeps the last chunk's keys without their "
                          f"positions, which chunks need; generate past {chunk - 1} positions with 'sdpa'")
    return chunk


def attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask: Optional[torch.Tensor], scaling: Optional[float] = None, dropout: float = 0.0,
                      sliding_window: Optional[int] = None, softcap: Optional[float] = None,
                      s_aux: Optional[torch.Tensor] = None, **kwargs) -> Tuple[torch.Tensor, None]:
    """transformers AttentionInterface function. query/key (B, Hq|Hkv, S, D), value (B, Hkv, Sk, Dv) with Dv
    = D or a head dim the kernels pair with D (DeepSeek-V3: 192 / 128); returns (attn_output (B, Sq, Hq, Dv),
    None)."""
    family = _refused_family(type(module).__module__)
    if family:
        raise LaunchError(f"{family} declares no flash-attention support (its attention masks are more than "
                          f"causal, window and padding); fa4jit's backend would drop them: use 'sdpa' or 'eager'")
    if dropout:
        raise LaunchError(f"dropout is {dropout}: fa4jit is forward only (inference); use model.eval()")
    if kwargs.get("output_attentions"):
        raise LaunchError("output_attentions: fa4jit does not materialize attention weights; use 'eager'")
    if query.dtype not in (torch.bfloat16, torch.float16):
        raise LaunchError(f"query has dtype {query.dtype}: fa4jit runs bf16 / fp16 models (load with dtype=torch.bfloat16)")
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
        return o[..., :v_width], w
    q, k, v = query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2)  # (B, S, H, D) views
    B, Sq, Hq, _ = q.shape
    Sk, D = k.shape[1], v_width
    # transformers' sliding_window W: each query sees itself and the W - 1 keys before it.
    window = (sliding_window - 1, 0 if is_causal else sliding_window - 1) if sliding_window else None
    common = dict(causal=is_causal, window=window, softcap=float(softcap or 0.0), softmax_scale=scaling, sinks=s_aux,
                  chunk_size=_chunk_size(module, Sq, Sk))

    if attention_mask is None:
        return ops.attention(q, k, v, **common), None
    if attention_mask.dim() != 2:
        raise LaunchError(f"attention_mask has shape {tuple(attention_mask.shape)}: fa4jit takes transformers' 2-D "
                          f"padding mask (registered by fa4jit.transformers.register())")
    if attention_mask.shape != (B, Sk):
        raise LaunchError(f"attention_mask has shape {tuple(attention_mask.shape)}, keys are (batch {B}, {Sk}): "
                          f"static caches with padding are not supported")
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
    """Registers ``attention_forward`` as ``attn_implementation=name`` (and transformers' 2-D
    flash-attention padding mask for it)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, flash_attention_mask

    AttentionInterface.register(name, attention_forward)
    AttentionMaskInterface.register(name, flash_attention_mask)
