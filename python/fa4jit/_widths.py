"""Head dims without a kernel of their own, run zero-padded by the front ends that take a model's
widths as they come (the transformers backend, flex_attention): Phi-2's 80, MiniCPM3's V of 64 beside
Q/K of 96, a test model's 32. Zero columns of Q and K add nothing to Q K^T, and zero columns of V give
zero columns of O, cut off after: exact, at the cost of the padded copies. The ops themselves refuse
such widths by name (a caller who sizes buffers wants to know). Which widths a backend runs is the
library's own list, asked through resolve (no compile) and cached per arch, dtype and widths.
"""
import functools
from typing import Optional, Tuple

import torch

from . import config
from .errors import Error

_DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16"}
_MAX_DEPTH = 1024  # FA4Config's bound on depth


def _runs(arch: str, dtype: str, depth: int, depth_v: int) -> bool:
    try:
        config.resolve({"depth": depth, "depth_v": depth_v, "dtype": dtype}, arch)
    except Error:
        return False
    return True


@functools.lru_cache(maxsize=None)
def padded_widths(arch: str, dtype: str, depth: int, depth_v: int) -> Optional[Tuple[int, int]]:
    """(Q/K width, V width) to launch for (depth, depth_v) on arch: the pair itself where the backend
    runs it; else V padded to depth; else the smallest depth above both that the backend runs, both
    padded to it. None where there is none (the launch then names the field)."""
    if _runs(arch, dtype, depth, depth_v):
        return depth, depth_v
    if depth_v < depth and _runs(arch, dtype, depth, depth):
        return depth, depth
    for d in range(max(depth, depth_v) + 1, _MAX_DEPTH + 1):  # resolve takes ~25 us: once per widths
        if _runs(arch, dtype, d, d):
            return d, d
    return None


@torch._dynamo.assume_constant_result  # a fact of the device: a constant of a compiled graph
def device_arch(device_type: str, index: Optional[int]) -> str:
    """The arch of a tensor's device; "" where there is none to ask (not a CUDA tensor, or no driver:
    fake tensors while tracing), so nothing is padded and the launch says what is wrong."""
    if device_type != "cuda":
        return ""
    from .ops import _arch
    try:
        return _arch(index or 0)
    except Error:
        return ""


@torch._dynamo.assume_constant_result  # a fact of the arch and shapes: a constant of a compiled graph
def launch_widths(arch: str, dtype: torch.dtype, depth: int, depth_v: int) -> Tuple[int, int]:
    """padded_widths, or the widths as they are where nothing can be asked or nothing runs."""
    if not arch or dtype not in _DTYPES:
        return depth, depth_v
    return padded_widths(arch, _DTYPES[dtype], depth, depth_v) or (depth, depth_v)


def widths_for(q: torch.Tensor, v: torch.Tensor) -> Tuple[int, int]:
    """(Q/K width, V width) to launch q's and v's head dims with on q's device."""
    return launch_widths(device_arch(q.device.type, q.device.index), q.dtype, int(q.shape[-1]), int(v.shape[-1]))


def pad_to(t: torch.Tensor, width: int) -> torch.Tensor:
    """t with its last dimension zero-padded to width (t itself where it is that wide)."""
    return t if t.shape[-1] >= width else torch.nn.functional.pad(t, (0, width - t.shape[-1]))
