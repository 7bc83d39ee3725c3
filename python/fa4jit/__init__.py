"""fa4jit: runtime-generated FlashAttention-4-class attention kernels, from Python.

    import torch, fa4jit
    o = fa4jit.attention(q, k, v, causal=True)          # q (B, Sq, Hq, D), k/v (B, Sk, Hkv, D)
    fa4jit.prewarm([{"depth": 128, "mask": "causal"}], archs=["sm_90a", "sm_100a"])   # no GPU

FlashAttention-3's calls (flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache) are in
``fa4jit.flash_attn_interface``; ``fa4jit.merge_state`` merges partial results (base-e LSE);
``fa4jit.mla_decode`` (FlashInfer's MLA tensors) and ``fa4jit.mla_with_kvcache`` (FlashMLA's) run
absorbed MLA decode (DeepSeek) over a paged latent cache. The library's messages (one info line per
compile) go to ``logging.getLogger("fa4jit")``.

The attention functions are PyTorch custom ops (``torch.ops.fa4jit.*``): torch.compile traces them
without graph breaks and CUDA graphs capture them. Forward only. The package talks to libfa4jit
through its C API with ctypes: no compiled Python extension, so one wheel serves every Python 3 and
every torch version; torch is needed only for the attention functions. See docs/PYTHON.md.
"""
from . import _lib
from .config import (Config, cache_key, generate_source, model_configs, prewarm, resolve, runtime_info,
                     set_compile_policy, stats)
from .errors import (CacheError, CacheMissError, CompileError, ConfigError, DriverError, Error,
                     LaunchError)

try:
    from ._version import __version__
except ImportError:  # a source tree without a build: the library's version
    __version__ = _lib.version()

library_version = _lib.version()
library_path = _lib.library_path()

try:
    import torch as _torch  # noqa: F401
except ImportError as _e:  # the config / prewarm functions work without torch
    _torch_error = _e
else:
    _torch_error = None

if _torch_error is None:
    from .ops import attention, attention_paged, attention_varlen
    from .flash_attn_interface import merge_state
    from . import ops as _ops, flex as _flex
    from .flex import BlockMask, create_block_mask, flex_attention
    from .mla import mla_decode, mla_with_kvcache
    _ops._flex = _flex  # Python mods and BlockMasks in attention / attention_varlen / attention_paged
else:
    def _needs_torch(*args, **kwargs):
        raise ImportError(f"fa4jit's attention functions need PyTorch ({_torch_error})")

    attention = attention_varlen = attention_paged = merge_state = _needs_torch
    flex_attention = create_block_mask = BlockMask = _needs_torch
    mla_decode = mla_with_kvcache = _needs_torch

__all__ = [
    "__version__", "attention", "attention_varlen", "attention_paged", "merge_state", "flex_attention",
    "create_block_mask", "BlockMask", "mla_decode", "mla_with_kvcache", "prewarm", "Config", "generate_source",
    "cache_key", "resolve", "runtime_info", "set_compile_policy", "stats", "model_configs", "Error", "ConfigError", "CompileError", "CacheError",
    "CacheMissError", "DriverError", "LaunchError",
]
