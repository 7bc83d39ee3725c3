"""FlexAttention's front end over fa4jit's kernels, and tile maps derived from masks.

    from fa4jit import flex_attention, create_block_mask
    def causal(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx
    bm = create_block_mask(causal, None, None, S, S, device="cuda")
    o = flex_attention(q, k, v, block_mask=bm)            # q, k, v (B, H, S, D) as FlexAttention's

``flex_attention`` and ``create_block_mask`` have the signatures and semantics of
``torch.nn.attention.flex_attention``'s (the same (B, H, S, D) tensors, natural-log LSE (B, H, Sq),
FlexAttention's default scale 1/sqrt(D), its top-left aligned q_idx / kv_idx) and take FlexAttention's
own ``BlockMask`` too. Mods are traced into CUDA snippets (``fa4jit._trace``); the kernel is fa4jit's
with the traced custom mask and score-mod, launched with layout "bhsd" (strided views, no copies).

Tile maps. A ``BlockMask`` here is the class of every (Q block, KV block) tile: 0 empty (the kernel
skips it: no load, no MMA), 1 full (no mask evaluated in it), 2 partial (the mask runs per element).
``create_block_mask`` computes it exactly by evaluating the traced mask over every element (on the
device, in chunks of rows; dimensions the mask does not read, b or h, are evaluated once and
broadcast). The launch passes the classes as the run-time tile map (the ops' ``block_mask``,
LaunchArgs::block_mask): a kernel tile that spans several blocks takes their common class, else
partial, and each Q tile walks only the KV tiles from its first to its last non-empty block. A
Python mask_mod passed to ``fa4jit.attention`` without a ``block_mask_mod`` gets one automatically,
built once per (traced mask, shapes, block size, aux tensors' identity and version) and reused across
layers and steps (``_auto_block_mask``). CUDA graphs: build the BlockMask before capture, or let the
automatic one be built while capturing (it is made of torch ops, recorded with the launch).
"""
import ctypes
import functools
import json
import re
import threading
from collections import OrderedDict
from typing import Callable, Dict, Optional, Tuple, Union

import torch

from . import _checks, _lib, _snippets, _trace, _widths
from .errors import ConfigError

Tensor = torch.Tensor

_ALL_VISIBLE = "return true;"
_ELEMENTS_PER_CHUNK = 1 << 26  # elements of the mask evaluated at once when classifying tiles


def _block_sizes(BLOCK_SIZE) -> Tuple[int, int]:
    if isinstance(BLOCK_SIZE, int):
        bq = bk = BLOCK_SIZE
    else:
        bq, bk = BLOCK_SIZE
    if bq < 1 or bk < 1:
        raise ConfigError(f"BLOCK_SIZE: {BLOCK_SIZE!r}; expected a positive int or (q, kv) pair")
    return int(bq), int(bk)


class BlockMask:
    """Tile classes of one mask: ``classes`` uint8 (B or 1, H or 1, q blocks, kv blocks), 0 empty,
    1 full, 2 partial; ``BLOCK_SIZE`` (q, kv); ``seq_lengths`` (Q_LEN, KV_LEN); ``mask_mod`` the
    Python mask (or None: every element of a non-empty tile is visible)."""

    def __init__(self, classes: Tensor, BLOCK_SIZE, seq_lengths, mask_mod=None):
        if classes.dim() != 4 or classes.dtype != torch.uint8:
            raise ConfigError(f"BlockMask: classes must be uint8 (B, H, q blocks, kv blocks), got {classes.dtype} "
                              f"{tuple(classes.shape)}")
        self.classes = classes.contiguous()
        self.BLOCK_SIZE = _block_sizes(BLOCK_SIZE)
        self.seq_lengths = (int(seq_lengths[0]), int(seq_lengths[1]))
        self.mask_mod = mask_mod
        self._traced = None if mask_mod is None else _trace.trace(mask_mod, "mask")
        self.band = None  # (lo, hi) when the mask is exactly lo <= q_idx - kv_idx <= hi (create_block_mask)

    @property
    def shape(self):
        B, H = self.classes.shape[:2]
        return (B, H, self.seq_lengths[0], self.seq_lengths[1])

    def sparsity(self) -> float:
        """Percent of tiles that are empty (FlexAttention's BlockMask.sparsity)."""
        return 100.0 * float((self.classes == 0).float().mean())

    def to_dense(self) -> Tensor:
        """Whether each tile is computed (empty: 0), as FlexAttention's BlockMask.to_dense()."""
        return (self.classes != 0).to(torch.int32)

    def __repr__(self):
        return (f"fa4jit.BlockMask(shape={self.shape}, BLOCK_SIZE={self.BLOCK_SIZE}, "
                f"sparsity={self.sparsity():.2f}%)")


def _classify(graph: Callable, uses, B: int, H: int, Q_LEN: int, KV_LEN: int, bq: int, bk: int, device,
              band_out: Optional[list] = None) -> Tensor:
    """The classes of every tile of a mask: evaluates it over every element (vmap over b, h, q, kv;
    a dimension the mask does not read is evaluated at 0 and broadcast), in chunks of q blocks.
    band_out: a list that gets (lo, hi) when the mask is exactly lo <= q_idx - kv_idx <= hi (a
    causal or sliding-window band, which fa4jit's built-in masks compute), else None."""
    Bm = B if "b" in uses else 1
    Hm = H if "h" in uses else 1
    nq, nk = -(-Q_LEN // bq), -(-KV_LEN // bk)
    f = graph
    f = torch.vmap(f, in_dims=(None, None, None, 0))
    f = torch.vmap(f, in_dims=(None, None, 0, None))
    f = torch.vmap(f, in_dims=(None, 0, None, None))
    f = torch.vmap(f, in_dims=(0, None, None, None))
    bt = torch.arange(Bm, dtype=torch.int32, device=device)
    ht = torch.arange(Hm, dtype=torch.int32, device=device)
    kt = torch.arange(KV_LEN, dtype=torch.int32, device=device)
    out = torch.empty((Bm, Hm, nq, nk), dtype=torch.uint8, device=device)
    rows_per = max(1, _ELEMENTS_PER_CHUNK // max(1, Bm * Hm * bq * nk * bk)) * bq
    pad_k = nk * bk - KV_LEN
    band = None if Bm * Hm != 1 or band_out is None else [None]
    for q0 in range(0, Q_LEN, rows_per):
        q1 = min(Q_LEN, q0 + rows_per)
        qt = torch.arange(q0, q1, dtype=torch.int32, device=device)
        m = f(bt, ht, qt, kt)
        if m.dtype != torch.bool:
            m = m != 0
        m = m.expand(Bm, Hm, q1 - q0, KV_LEN)
        if band is not None:
            try:
                band = _band_check(m[0, 0], q0, band)
            except Exception:  # noqa: BLE001 - values not readable (fake tensors while tracing): no band
                band = None
        pad_q = -(-(q1 - q0) // bq) * bq - (q1 - q0)
        # Elements outside the sequence do not exist: they count as visible for "full", as hidden for "any".
        anyv = torch.nn.functional.pad(m, (0, pad_k, 0, pad_q), value=False)
        allv = torch.nn.functional.pad(m, (0, pad_k, 0, pad_q), value=True)
        n = anyv.shape[2] // bq
        anyv = anyv.view(Bm, Hm, n, bq, nk, bk).any(dim=5).any(dim=3)
        allv = allv.view(Bm, Hm, n, bq, nk, bk).all(dim=5).all(dim=3)
        out[:, :, q0 // bq:q0 // bq + n] = torch.where(allv, 1, torch.where(anyv, 2, 0)).to(torch.uint8)
    if band_out is not None:
        band_out.append(band[0] if band is not None and band[0] is not None and band[0] != "empty" else None)
    return out


def _band_check(m: Tensor, q0: int, band):
    """Whether the rows q0.. of a (rows, KV_LEN) mask keep it a band lo <= q - kv <= hi; band is [None]
    (no row seen), [(lo, hi)], ["empty"] (no visible element yet), or None (not a band)."""
    rows, K = m.shape
    d = torch.arange(q0, q0 + rows, device=m.device)[:, None] - torch.arange(K, device=m.device)[None, :]
    if band[0] is None or band[0] == "empty":
        if not bool(m.any()):
            return ["empty"] if band[0] is None or band[0] == "empty" else band
        vis = d[m]
        lo, hi = int(vis.min()), int(vis.max())
        if band[0] == "empty" and q0 > 0:
            return None  # earlier rows saw nothing: not one band over every row
    else:
        lo, hi = band[0]
    ok = bool(torch.equal(m, (d >= lo) & (d <= hi)))
    return [(lo, hi)] if ok else None


def create_block_mask(mask_mod: Callable, B: Optional[int], H: Optional[int], Q_LEN: int, KV_LEN: int,
                      device="cuda", BLOCK_SIZE: Union[int, Tuple[int, int]] = 128, _compile=False) -> BlockMask:
    """FlexAttention's create_block_mask: the tile classes of ``mask_mod(b, h, q_idx, kv_idx)`` for
    B batches and H heads (None: the mask does not depend on it, broadcast) over Q_LEN x KV_LEN, in
    tiles of BLOCK_SIZE (an int, or (q, kv)). Exact: every element is evaluated once."""
    traced = _trace.trace(mask_mod, "mask")
    bq, bk = _block_sizes(BLOCK_SIZE)
    B1 = 1 if B is None else int(B)
    H1 = 1 if H is None else int(H)
    band: list = []
    with torch.no_grad():
        classes = _classify(traced.graph, traced.uses, B1, H1, int(Q_LEN), int(KV_LEN), bq, bk, torch.device(device),
                            band)
    bm = BlockMask(classes, (bq, bk), (Q_LEN, KV_LEN), mask_mod)
    bm.band = band[0]
    return bm


# ---- FlexAttention's own BlockMask ----------------------------------------------------------------

_from_torch: Dict[int, Tuple[object, BlockMask]] = {}


def _dense(num_blocks: Tensor, indices: Tensor, nk: int) -> Tensor:
    """(B, H, nq) counts and (B, H, nq, n) KV block indices -> (B, H, nq, nk) bool."""
    n = indices.shape[-1]
    valid = torch.arange(n, device=indices.device) < num_blocks.unsqueeze(-1)
    dense = torch.zeros(indices.shape[:-1] + (max(nk, n) + 1,), dtype=torch.bool, device=indices.device)
    idx = torch.where(valid, indices.long(), max(nk, n))
    dense.scatter_(-1, idx, True)
    return dense[..., :nk]


def from_torch_block_mask(bm) -> BlockMask:
    """fa4jit's BlockMask of a torch.nn.attention.flex_attention.BlockMask (cached per object)."""
    hit = _from_torch.get(id(bm))
    if hit is not None and hit[0] is bm:
        return hit[1]
    Q_LEN, KV_LEN = bm.seq_lengths
    bq, bk = bm.BLOCK_SIZE
    nk = -(-KV_LEN // bk)
    partial = _dense(bm.kv_num_blocks, bm.kv_indices, nk)
    classes = torch.where(partial, 2, 0)
    if bm.full_kv_num_blocks is not None:
        full = _dense(bm.full_kv_num_blocks, bm.full_kv_indices, nk)
        classes = torch.where(full, 1, classes)
    nq = -(-Q_LEN // bq)
    classes = classes[:, :, :nq].to(torch.uint8)
    mm = bm.mask_mod
    if mm is not None and getattr(mm, "__name__", "") == "noop_mask":
        mm = None
    out = BlockMask(classes, (bq, bk), (Q_LEN, KV_LEN), mm)
    if len(_from_torch) > 256:
        _from_torch.clear()
    _from_torch[id(bm)] = (bm, out)
    return out


def _as_block_mask(bm) -> Optional[BlockMask]:
    if bm is None or isinstance(bm, BlockMask):
        return bm
    if hasattr(bm, "kv_num_blocks") and hasattr(bm, "kv_indices"):
        return from_torch_block_mask(bm)
    raise ConfigError(f"block_mask: expected an fa4jit or FlexAttention BlockMask, got {type(bm).__name__}")


# ---- lowering traced mods into the attention functions' arguments ---------------------------------

def _merge_aux(aux, *dicts) -> Dict[str, Tensor]:
    if aux is None:
        merged: Dict[str, Tensor] = {}
    elif isinstance(aux, dict):
        merged = dict(aux)
    else:
        raise ConfigError("aux: with Python mask_mod / score_mod, pass aux as a dict (name -> tensor) or not at "
                          "all: the traced mods add their captured tensors under their own names")
    for d in dicts:
        for n, t in d.items():
            if n in merged and merged[n] is not t:
                raise ConfigError(f"aux: '{n}' is used by a traced mod; name your aux tensors otherwise")
            merged[n] = t
    if len(merged) > 4:
        raise ConfigError(f"the traced mods and aux need {len(merged)} aux tensors ({', '.join(merged)}); a kernel "
                          f"reads at most 4: capture fewer tensors (e.g. stack them into one)")
    return merged


_auto: "OrderedDict[tuple, BlockMask]" = OrderedDict()
_auto_lock = threading.Lock()
_AUTO_MAX = 64
AUTO_BLOCK = 128  # block size of automatic tile maps: a kernel tile (64..192 rows) combines whole blocks


def _auto_block_mask(traced: _trace.TracedMod, B, H, Q_LEN, KV_LEN, device) -> BlockMask:
    """The tile map of a traced mask for these shapes, reused while the mask's aux tensors are the
    same tensors at the same version (an in-place write bumps torch's version counter: rebuilt)."""
    Bm = B if "b" in traced.uses else 1
    Hm = H if "h" in traced.uses else 1
    key = (id(traced), Bm, Hm, Q_LEN, KV_LEN, str(device),
           tuple((n, t.data_ptr(), t._version) for n, t in traced.aux.items()))
    with _auto_lock:
        bm = _auto.get(key)
        if bm is not None and bm._traced is traced:
            _auto.move_to_end(key)
            return bm
    with torch.no_grad():
        classes = _classify(traced.graph, traced.uses, Bm, Hm, Q_LEN, KV_LEN, AUTO_BLOCK, AUTO_BLOCK, device)
    bm = BlockMask(classes, AUTO_BLOCK, (Q_LEN, KV_LEN), None)
    bm._traced = traced
    if _capturing():
        return bm  # captured, not run yet: not for later eager calls
    with _auto_lock:
        _auto[key] = bm
        while len(_auto) > _AUTO_MAX:
            _auto.popitem(last=False)
    return bm


def clear_block_mask_cache():
    with _auto_lock:
        _auto.clear()
        _snippet_maps.clear()
    _from_torch.clear()


class _Lowered:
    """What lower() needs of a traced mod inside a torch.compile graph: its snippet and its aux tensors
    fetched from the function there (graph inputs)."""

    def __init__(self, snippet: str, aux: Dict[str, Tensor]):
        self.snippet, self.aux = snippet, aux


@torch._dynamo.assume_constant_result
def _compile_plan(fn, kind: str) -> tuple:
    """(snippet, sources) of a mod (_trace.TracedMod.sources), constants for torch.compile, which then
    never traces the tracing (make_fx) itself; ("", None) when a captured tensor has no source."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    with unset_fake_temporarily():  # make_fx's own fake mode, not the compiler's, traces the mod
        t = _trace.trace(fn, kind)
    return (t.snippet, t.sources) if t.sources is not None else ("", None)


def _traced(fn, kind: str):
    if isinstance(fn, _trace.TracedMod):
        return fn
    if torch.compiler.is_compiling():
        snippet, sources = _compile_plan(fn, kind)
        if snippet:
            return _Lowered(snippet, {name: _trace.fetch(fn, where, key, steps) for name, where, key, steps in sources})
    return _trace.trace(fn, kind)  # a captured tensor held otherwise (an attribute): dynamo breaks the graph


def is_traced(mod) -> bool:
    return mod is not None and not isinstance(mod, str) and (callable(mod) or isinstance(mod, _trace.TracedMod))


def lower(mask_mod, block_mask_mod, score_mod, aux, block_mask=None, tiles=None):
    """Python mods (and a BlockMask) as the snippets and aux dict of fa4jit's attention functions, with
    the BlockMask (given or automatic) as block_mask_mod: the tile map ops._prepare launches with.
    tiles: (B, H, Q_LEN, KV_LEN, device) to build the automatic tile map of a traced mask without a
    block_mask_mod or BlockMask (dense attention only); None: no automatic map."""
    dicts = []
    mask_snippet = mask_mod
    if is_traced(mask_mod):
        tm = _traced(mask_mod, "mask")
        mask_snippet = tm.snippet
        if tm.aux:
            dicts.append(tm.aux)
        if block_mask is None and not block_mask_mod and tiles is not None:
            block_mask = _auto_block_mask(tm, *tiles)
    if block_mask is not None:
        if block_mask_mod:
            raise ConfigError("block_mask and block_mask_mod: pass one tile classifier")
        block_mask_mod = block_mask  # the launch's run-time tile map (ops._prepare)
        if not mask_snippet:
            mask_snippet = _ALL_VISIBLE
    score_snippet = score_mod
    if is_traced(score_mod):
        ts = _traced(score_mod, "score")
        score_snippet = ts.snippet
        if ts.aux:
            dicts.append(ts.aux)
    if not dicts:
        return mask_snippet, block_mask_mod, score_snippet, aux  # snippets only: the caller's aux as given
    return mask_snippet, block_mask_mod, score_snippet, _merge_aux(aux, *dicts)


# ---- traced bands: fa4jit's built-in causal / window masks ------------------------------------------

class Band(str):
    """A traced mask that is exactly the band lo <= q_idx - kv_idx <= hi, or that band or kv_idx <
    prefix (prefix LM; a window's sink keys), at every position a call can have, passed down as the
    call's mask_mod: ops._prepare launches fa4jit's built-in causal / window mask (with the config's
    mask.prefix and the launch's mask_prefix) instead of the snippet (no tile map, no per-element
    snippet; 5-10% faster than the snippet with its tile map, docs/PERF.md runs 78-79), aligned
    top-left as FlexAttention's positions are. The string (the plan key's part) names the band, and
    no snippet reads like it."""

    def __new__(cls, lo: int, hi: int, q_bound: int, k_bound: int, top_left: bool, prefix: int = 0):
        left = -1 if hi >= q_bound - 1 else hi  # -1: unbounded
        right = -1 if lo <= -(k_bound - 1) else -lo
        b = super().__new__(cls, f"\0fa4jit band {left} {right} {'top-left' if top_left else 'bottom-right'}"
                                 f"{f' prefix {prefix}' if prefix else ''}")
        b.causal = right == 0
        b.window = None if (b.causal or right < 0) and left < 0 else (left, right)  # None, not causal: no mask
        b.top_left = top_left
        b.prefix = prefix if b.causal or b.window else 0  # no mask: every key visible already
        return b


def _difference_only(gm) -> bool:
    """Whether a traced mask's graph reads nothing but q_idx - kv_idx: no b, h or captured tensor, and
    q_idx and kv_idx only as the two operands of one subtraction or comparison (so its value at
    (q, kv) is its value at (q - kv, 0))."""
    nodes = list(gm.graph.nodes)
    ph = [n for n in nodes if n.op == "placeholder"]
    if len(ph) != 4 or any(n.op == "get_attr" for n in nodes) or ph[0].users or ph[1].users:
        return False
    q, kv = ph[2], ph[3]
    aten = torch.ops.aten
    pairwise = (aten.sub.Tensor, aten.ge.Tensor, aten.gt.Tensor, aten.le.Tensor, aten.lt.Tensor, aten.eq.Tensor,
                aten.ne.Tensor)
    return all(u.op == "call_function" and u.target in pairwise and not u.kwargs and len(u.args) == 2 and
               set(u.args) == {q, kv} for x in (q, kv) for u in x.users)


def _operand(gm, node):
    """A GraphModule computing ``node`` of the traced mask ``gm`` (its ancestors only; the same four
    placeholders)."""
    g = torch.fx.Graph()
    env = {}
    for n in gm.graph.nodes:  # in topological order: every ancestor comes before node
        env[n] = g.node_copy(n, lambda x: env[x])
        if n is node:
            break
    g.output(env[node])
    g.eliminate_dead_code()
    return torch.fx.GraphModule(gm, g)


def _prefix_or_band(gm):
    """(keys, band): the two sides of a traced mask that is ``A | B``, A reading kv_idx alone and B
    q_idx - kv_idx alone (``_difference_only``), as GraphModules; None for any other mask. Prefix LM
    (``kv_idx < P | q_idx >= kv_idx``, FlexAttention's or_masks of its prefix and causal masks)."""
    out = next((n for n in gm.graph.nodes if n.op == "output"), None)
    root = out.args[0] if out is not None and len(out.args) == 1 else None
    if (not isinstance(root, torch.fx.Node) or root.target not in (torch.ops.aten.bitwise_or.Tensor,
                                                                     torch.ops.aten.logical_or.default)
            or root.kwargs or len(root.args) != 2 or any(n.op == "get_attr" for n in gm.graph.nodes)):
        return None
    sides = [_operand(gm, a) for a in root.args if isinstance(a, torch.fx.Node)]
    if len(sides) != 2:
        return None
    for keys, band in (sides, sides[::-1]):
        ph = [n for n in keys.graph.nodes if n.op == "placeholder"]
        if len(ph) == 4 and not (ph[0].users or ph[1].users or ph[2].users) and _difference_only(band):
            return keys, band
    return None


def _band_of(mod, q_bound: int, k_bound: int):
    """(lo, hi) of a difference-only traced mask over every q_idx < q_bound and kv_idx < k_bound: its
    one contiguous run of visible differences, holding the diagonal; None otherwise."""
    d = torch.arange(-(k_bound - 1), q_bound, dtype=torch.int32)
    zero = torch.zeros((), dtype=torch.int32)
    with torch.no_grad():
        v = torch.vmap(mod, in_dims=(None, None, 0, None))(zero, zero, d, zero).to(torch.bool).expand(d.shape)
    idx = v.nonzero().flatten()
    if idx.numel() and int(idx[-1] - idx[0]) + 1 == idx.numel():  # one contiguous run
        lo, hi = int(d[idx[0]]), int(d[idx[-1]])
        if lo <= 0 <= hi:
            return lo, hi
    return None


def _prefix_of(mod, k_bound: int) -> Optional[int]:
    """P where a traced mask of kv_idx alone is kv_idx < P over every kv_idx < k_bound (0 <= P <
    k_bound); None otherwise (not a run from key 0, or every key)."""
    kv = torch.arange(k_bound, dtype=torch.int32)
    zero = torch.zeros((), dtype=torch.int32)
    with torch.no_grad():
        v = torch.vmap(mod, in_dims=(None, None, None, 0))(zero, zero, zero, kv).to(torch.bool).expand(kv.shape)
    p = int(v.sum())
    return p if p < k_bound and bool(v[:p].all()) else None


def _band_bound(n: int) -> int:
    """A bound rounded up to a power of two (at least 1024): a band found over the larger range holds
    over every smaller one, so varlen calls whose totals change every step evaluate a mask a few
    times, not once per step, and a mask's memo stays small."""
    return max(1024, 1 << (int(n) - 1).bit_length())


def traced_band(tm, q_bound: int, k_bound: int, top_left: bool = True) -> Optional[Band]:
    """The Band of a traced mask over every q_idx < q_bound and kv_idx < k_bound, or None: not a
    function of q_idx - kv_idx alone (or of it or'ed with one of kv_idx alone that is a run of keys
    from 0: a prefix), not one band that holds the diagonal, or nothing visible. Evaluated over the
    1-D ranges of the difference and the key, on the CPU, once per mask and rounded bounds
    (_band_bound)."""
    if not isinstance(tm, _trace.TracedMod) or q_bound < 1 or k_bound < 1:
        return None
    q_bound, k_bound = _band_bound(q_bound), _band_bound(k_bound)
    key = ("band", q_bound, k_bound, top_left)
    if key in tm.memo:
        return tm.memo[key]
    band = None
    if _difference_only(tm.graph):
        lohi = _band_of(tm.graph, q_bound, k_bound)
        band = Band(*lohi, q_bound, k_bound, top_left) if lohi else None
    else:
        sides = _prefix_or_band(tm.graph)
        if sides is not None:
            prefix, lohi = _prefix_of(sides[0], k_bound), _band_of(sides[1], q_bound, k_bound)
            if prefix is not None and lohi is not None:
                band = Band(*lohi, q_bound, k_bound, top_left, prefix)
    tm.memo[key] = band
    return band


def _call_bounds(q: Tensor, k: Tensor, layout: Optional[str]) -> Tuple[int, int, bool]:
    """(the most query rows, the most keys a sequence of this call can have, whether they are the
    call's exact lengths): dense (B, S, H, D) / (B, H, S, D) tensors, varlen's packed (total, H, D),
    paged's k_cache (pages, page_size, H, D) with q (B, Sq, H, D) or packed."""
    if layout is not None:  # dense
        sq, sk = (q.shape[2], k.shape[2]) if layout == "bhsd" else (q.shape[1], k.shape[1])
        return sq, sk, True
    sq = q.shape[1] if q.dim() == 4 else q.shape[0]
    sk = k.shape[0] * k.shape[1] if k.dim() == 4 else k.shape[0]
    return sq, sk, False


def lower_call(q: Tensor, k: Tensor, layout: Optional[str], mask_mod, block_mask_mod, score_mod, aux,
               builtin_mask: bool = False):
    """fa4jit.attention's / attention_varlen's / attention_paged's hook for Python mods, BlockMasks
    (``block_mask_mod`` may be a BlockMask) and CUDA C++ mask snippets without a block snippet.
    layout: "bshd" / "bhsd" for dense attention (an automatic tile map), None for varlen and paged
    calls (sequence lengths live on the device: the mask runs on every tile, unless a
    block_mask_mod says otherwise). A traced mask that is a band (``traced_band``) comes back as a
    ``Band`` (the built-in mask), unless the call also has a built-in mask (builtin_mask: causal, a
    window or chunks) or a BlockMask of another mask."""
    bm = None
    if block_mask_mod is not None and not isinstance(block_mask_mod, str):
        bm = _as_block_mask(block_mask_mod)
        block_mask_mod = None
        if mask_mod is None and bm._traced is not None:
            mask_mod = bm._traced
    if (is_traced(mask_mod) and not builtin_mask and isinstance(q, Tensor) and isinstance(k, Tensor)
            and not torch.compiler.is_compiling()):
        tm = _traced(mask_mod, "mask")
        if bm is None or bm._traced is tm:
            sq, sk, exact = _call_bounds(q, k, layout)
            band = traced_band(tm, sq, sk, top_left=not (exact and sq == sk))
            if band is not None:
                _, _, s, a = lower(None, None, score_mod, aux)
                return band, None, s or None, a or None
    tiles = None
    dense = layout is not None and isinstance(q, Tensor) and isinstance(k, Tensor) and q.dim() == 4 and k.dim() == 4
    if dense and torch.compiler.is_compiling():
        dense = False  # no automatic map inside a compiled graph (pass a BlockMask made before)
    if dense:
        B, Sq, H = (q.shape[0], q.shape[2], q.shape[1]) if layout == "bhsd" else q.shape[:3]
        Sk = k.shape[2] if layout == "bhsd" else k.shape[1]
        tiles = (B, H, Sq, Sk, q.device)
        if bm is not None and bm.seq_lengths != (Sq, Sk):
            raise ConfigError(f"block_mask_mod: the BlockMask was created for (Q_LEN, KV_LEN) = {bm.seq_lengths}, "
                              f"the call has ({Sq}, {Sk})")
        if bm is None and isinstance(mask_mod, str) and mask_mod and not block_mask_mod:
            qs, ks = (q.transpose(1, 2), k.transpose(1, 2)) if layout == "bhsd" else (q, k)
            bm, aux = _snippet_block_mask(qs, ks, mask_mod, score_mod, aux)
    m, blk, s, a = lower(mask_mod, block_mask_mod, score_mod, aux, block_mask=bm, tiles=tiles)
    return m or None, blk or None, s or None, a or None


# ---- tile maps of CUDA C++ mask snippets (the library's generated classifier, jit::build_tile_map) --

_snippet_maps: "OrderedDict[tuple, BlockMask]" = OrderedDict()


@functools.lru_cache(maxsize=1024)
def _snippet_facts(snippet: str, score_mod) -> tuple:
    """(reads b, reads h, usable: no scalars / params, the undeclared names the snippets index) of a
    mask snippet (cached: this runs on every call of a snippet mask)."""
    texts = [t for t in (snippet, score_mod) if isinstance(t, str) and t]
    usable = not (_reads(snippet, "scalars") or _reads(snippet, "params"))
    positional = any(_reads(t, "aux") or _reads(t, f"aux{i}") for t in texts for i in range(4))
    return (_reads(snippet, "b"), _reads(snippet, "h"), usable, tuple(_snippets._names_in_any(texts, ())),
            positional)


def _capturing() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def _reads(snippet: str, name: str) -> bool:
    return re.search(rf"(?<![\w.>:]){name}(?!\w)", _snippets._STRIP.sub(" ", snippet)) is not None


def _eager_cuda(*ts) -> bool:
    from . import ops
    return all(isinstance(t, Tensor) and t.is_cuda for t in ts) and ops._eager(ts[0], ts[1], ts[1], None)


def call_tile_map(q: Tensor, k: Tensor, typed_snippet: str, aux: list, out_ptr: int, bq: int, bk: int, per_b: bool,
                  per_h: bool, arch: str, stream: int, device: int):
    """fa4jit_tile_map: the classes of a (typed) custom mask snippet for (B, S, H, D) q / k into
    out_ptr (uint8 (B or 1, H or 1, ceil(Sq / bq), ceil(Sk / bk)) on the device), on `stream`."""
    fn = _lib.lib.fa4jit_tile_map
    from . import ops
    # The launch's fields by name (launch_table.FIELDS; the others take the table's defaults).
    f = ops._packed_tensors(q=q, k=k, v=k, o=q)
    f.update(size=_lib.LAUNCH_ARGS_SIZE, device=device,
             aux_ptr=[t.data_ptr() for t in aux] + [0] * (4 - len(aux)))
    buf = _lib.LAUNCH_ARGS.pack(*_lib.launch_values(f))
    cfg = {"dtype": ops._DTYPE_NAME[q.dtype], "depth": q.shape[3], "mask": {"kind": "custom", "snippet": typed_snippet}}
    fn.restype = ctypes.c_int32
    fn.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32,
                   ctypes.c_int32, ctypes.c_int32, ctypes.c_void_p]
    code = fn(json.dumps(cfg).encode(), arch.encode(), buf, out_ptr, bq, bk, int(per_b), int(per_h), stream)
    if code:
        _lib.raise_last(code)


def _snippet_block_mask(q: Tensor, k: Tensor, snippet: str, score_mod, aux):
    """(BlockMask or None, aux) for a CUDA C++ mask snippet on (B, S, H, D) q / k: its tile classes,
    computed by the library's classifier kernel (fa4jit_tile_map) on q's stream, kept while the aux
    tensors are the same at the same version. None where it cannot apply (no GPU call, scalars read
    by the mask, aux names the snippets do not determine, other dtypes): the mask then runs on every
    tile, as before. A list aux becomes the dict it binds (the snippet's undeclared names)."""
    fn = getattr(_lib.lib, "fa4jit_tile_map", None)
    if fn is None or not _eager_cuda(q, k) or q.dtype not in (torch.bfloat16, torch.float16) or k.dtype != q.dtype:
        return None, aux
    per_b, per_h, usable, names, positional = _snippet_facts(snippet, score_mod if isinstance(score_mod, str) else None)
    if not usable:
        return None, aux
    if aux is None:
        named: Dict[str, Tensor] = {}
    elif isinstance(aux, dict):
        named = dict(aux)
    else:
        tensors = [aux] if isinstance(aux, Tensor) else list(aux)
        if len(names) != len(tensors) or positional:
            return None, aux
        named = dict(zip(names, tensors))
    if len(named) >= 4 or any(not isinstance(t, Tensor) or not t.is_cuda for t in named.values()):
        return None, aux
    B, Sq, H, D = q.shape
    Sk = k.shape[1]
    key = (snippet, q.dtype, D, B if per_b else 1, H if per_h else 1, Sq, Sk, q.device,
           tuple((n, t.data_ptr(), t._version, str(t.dtype)) for n, t in named.items()))
    with _auto_lock:
        hit = _snippet_maps.get(key)
        if hit is not None:
            _snippet_maps.move_to_end(key)
            return hit, named
    from . import ops
    vals = list(named.values())
    typed = ops._snippet_texts(vals, ",".join(named), snippet, "", "")[0]
    bq = bk = AUTO_BLOCK
    classes = torch.empty((B if per_b else 1, H if per_h else 1, -(-Sq // bq), -(-Sk // bk)), dtype=torch.uint8,
                          device=q.device)
    dev = q.device.index if q.device.index is not None else torch.cuda.current_device()
    call_tile_map(q, k, typed, vals, classes.data_ptr(), bq, bk, per_b, per_h, ops._arch(dev), ops._stream(dev), dev)
    bm = BlockMask(classes, (bq, bk), (Sq, Sk), None)
    if _capturing():
        return bm, named  # captured, not run yet: not for later eager calls
    with _auto_lock:
        _snippet_maps[key] = bm
        while len(_snippet_maps) > _AUTO_MAX:
            _snippet_maps.popitem(last=False)
    return bm, named


def mods_need_lowering(mask_mod, block_mask_mod, score_mod) -> bool:
    """Python mods, a BlockMask, or a CUDA C++ mask snippet without a block snippet (an automatic map);
    not a Band (lowered already)."""
    return any(m is not None and not isinstance(m, str) for m in (mask_mod, block_mask_mod, score_mod)) or (
        isinstance(mask_mod, str) and bool(mask_mod) and not block_mask_mod and not isinstance(mask_mod, Band))


_NUM = r"(-?[0-9.]+(?:e[-+]?[0-9]+)?)f"
_SOFTCAP = [re.compile(p) for p in (
    rf"const float t0 = score / {_NUM};\nconst float t1 = tanh\(t0\);\nconst float t2 = (?:t1 \* {_NUM}|{_NUM} \* t1);"
    rf"\nreturn t2;",
    rf"const float t0 = score \* {_NUM};\nconst float t1 = tanh\(t0\);\nconst float t2 = (?:t1 \* {_NUM}|{_NUM} \* t1);"
    rf"\nreturn t2;")]


def _builtin_softcap(score_snippet) -> float:
    """The cap of a traced score-mod that is exactly cap * tanh(score / cap) (Gemma 2's softcap, which
    fa4jit computes built in), else 0."""
    if not isinstance(score_snippet, str):
        return 0.0
    for i, pat in enumerate(_SOFTCAP):
        m = pat.fullmatch(score_snippet)
        if m:
            inner = float(m.group(1))
            outer = float(m.group(2) or m.group(3))
            cap = inner if i == 0 else (1.0 / inner if inner else 0.0)
            if cap > 0 and abs(outer - cap) <= 1e-6 * cap:
                return outer
    return 0.0


_ATEN = torch.ops.aten
_DTYPE_MOVES = (_ATEN._to_copy.default, _ATEN.clone.default, _ATEN.alias.default)


def _bare(n):
    """A graph node without the dtype / device moves around it (a mod that captures a CUDA tensor is
    traced with its arguments moved to that device, _trace._capture_device)."""
    while isinstance(n, torch.fx.Node) and n.target in _DTYPE_MOVES:
        n = n.args[0]
    return n


def _alibi_terms(gm):
    """(X, sign, distance, h) of a traced score-mod graph whose result is score + sign * X * D, X a node
    or number that depends on h alone, D q_idx - kv_idx (distance 1), kv_idx - q_idx (-1) or the
    absolute value of either (0), h the graph's head placeholder; None for any other graph."""
    ph = [n for n in gm.graph.nodes if n.op == "placeholder"]
    out = next(n for n in gm.graph.nodes if n.op == "output").args[0]
    if len(ph) != 5 or not isinstance(out, torch.fx.Node):
        return None
    score, _, h, q, kv = ph

    def call(n, *targets):
        return isinstance(n, torch.fx.Node) and n.op == "call_function" and n.target in targets and \
            all(v == 1 for k, v in n.kwargs.items() if k == "alpha") and set(n.kwargs) <= {"alpha"}

    def distance(n):
        n = _bare(n)
        if call(n, _ATEN.abs.default):
            return 0 if distance(n.args[0]) in (1, -1) else None
        if call(n, _ATEN.sub.Tensor) and tuple(map(_bare, n.args)) in ((q, kv), (kv, q)):
            return 1 if _bare(n.args[0]) is q else -1
        return None

    def reads_only_h(x):
        seen, todo = set(), [x]
        while todo:
            n = todo.pop()
            if not isinstance(n, torch.fx.Node) or n in seen:
                continue
            seen.add(n)
            if n.op == "placeholder" and n is not h:
                return False
            todo.extend(n.all_input_nodes)
        return True

    if call(out, _ATEN.sub.Tensor) and _bare(out.args[0]) is score:
        sign, term = -1, out.args[1]
    elif call(out, _ATEN.add.Tensor) and score in map(_bare, out.args):
        sign, term = 1, out.args[1] if _bare(out.args[0]) is score else out.args[0]
    else:
        return None
    term = _bare(term)
    if not call(term, _ATEN.mul.Tensor):
        return None
    for x, d in (term.args, term.args[::-1]):
        dist = distance(d)
        if dist is not None and reads_only_h(x):
            return x, sign, dist, h
    return None


def _builtin_alibi(ts, H: int, causal: bool, device) -> Optional[Tensor]:
    """The slopes m[h] (float32 [H]) of a traced score-mod that is ALiBi, score - m[h] * |q_idx - kv_idx|
    (or, under a causal mask, score + m[h] * (kv_idx - q_idx) and its equivalents), which fa4jit computes
    built in (score_mod "alibi", one conversion per row and tile, not one per element); else None.
    Decided once per (mod, H, device, causal): slopes from h and constants are computed then and kept;
    slopes read from a captured float32 [H] tensor are that tensor (read at each launch, as the snippet
    would)."""
    memo = ts.memo.setdefault("alibi", {})
    key = (H, str(device), causal)
    if key not in memo:
        if _capturing():
            return None  # made inside a CUDA graph's capture, the slopes would stay unwritten until its replay
        memo[key] = _alibi_slopes(ts, H, causal, device)
    return memo[key]


def _alibi_slopes(ts, H: int, causal: bool, device) -> Optional[Tensor]:
    found = _alibi_terms(ts.graph)
    if found is None or (found[2] != 0 and not causal):
        return None
    x, sign, dist, h = found
    # At q_idx 1, kv_idx 0 and score 0 every accepted form reads -m[h]; m[h] = X[h] when sign * D(1, 0) is -1.
    if isinstance(x, torch.fx.Node) and x.op == "call_function" and x.target == _ATEN.index.Tensor and \
            sign * (dist or 1) == -1:
        base, idx = x.args
        t = getattr(ts.graph, base.target, None) if base.op == "get_attr" else None
        # The aux tensor the snippet reads t through (_trace.read_root), where t views all of it in
        # its order. The head index may come moved to the captured tensor's device (_bare).
        root = None if t is None else _trace.read_root(t)
        a = None if root is None or not _trace.views_whole(t, root) else next(
            (a for a in ts.aux.values() if a is root), None)
        if a is not None and len(idx) == 1 and _bare(idx[0]) is h and \
                a.dtype == torch.float32 and a.dim() == 1 and a.numel() == H and a.device == torch.device(device):
            return a
    if any(n.op == "get_attr" for n in ts.graph.graph.nodes):
        return None  # a captured tensor read otherwise: kept live through the snippet
    f = torch.vmap(ts.graph, in_dims=(None, None, 0, None, None))
    zero, one = torch.zeros((), dtype=torch.int32, device=device), torch.ones((), dtype=torch.int32, device=device)
    m = -f(torch.zeros((), device=device), zero, torch.arange(H, dtype=torch.int32, device=device), one, zero)
    return m.to(torch.float32).expand(H).contiguous()


def _builtin_band(bm: Optional[BlockMask], Sq: int, Sk: int) -> Optional[dict]:
    """fa4jit.attention's causal / window arguments for a BlockMask whose mask is the band
    lo <= q_idx - kv_idx <= hi (FlexAttention's positions are top-left aligned, fa4jit's built-in masks
    bottom-right: the same when Sq == Sk), or None."""
    if bm is None or bm.band is None or Sq != Sk or bm._traced is None:
        return None
    lo, hi = bm.band
    if lo > 0:
        return None  # the diagonal itself hidden: no built-in mask says so
    left = -1 if hi >= Sq - 1 else hi
    right = -1 if lo <= -(Sk - 1) else -lo
    if right == 0:
        return dict(causal=True, window=None if left < 0 else (left, 0))
    if left < 0 and right < 0:
        return {}
    return dict(window=(left, right))


# ---- flex_attention ---------------------------------------------------------------------------------

def flex_attention(query: Tensor, key: Tensor, value: Tensor, score_mod: Optional[Callable] = None,
                   block_mask=None, scale: Optional[float] = None, enable_gqa: bool = False,
                   return_lse: bool = False, kernel_options=None, *, return_aux=None):
    """FlexAttention's flex_attention (forward only) on fa4jit's kernels.

    query (B, Hq, Sq, D), key / value (B, Hkv, Sk, D) (Hq != Hkv needs enable_gqa=True);
    score_mod(score, b, h, q_idx, kv_idx) a Python function (traced into a CUDA snippet);
    block_mask an fa4jit BlockMask (create_block_mask) or FlexAttention's, whose mask_mod is the
    element mask and whose empty tiles are skipped; scale default 1/sqrt(D). Returns out
    (B, Hq, Sq, D), or (out, lse) with lse float32 (B, Hq, Sq) (natural log) when return_lse, or
    (out, AuxOutput(lse=...)) with return_aux=AuxRequest(lse=True), FlexAttention's newer spelling.
    AuxRequest(max_scores=True) is refused: the kernels do not write the row maxima.
    """
    from .ops import attention
    if return_aux is not None:
        if return_lse:  # as FlexAttention
            raise ConfigError("return_lse and return_aux: pass one (return_aux=AuxRequest(lse=True) replaces "
                              "return_lse)")
        if getattr(return_aux, "max_scores", False):
            raise ConfigError("return_aux: max_scores is not computed by fa4jit's kernels (they write out and "
                              "lse only); request AuxRequest(lse=True)")
        if not hasattr(return_aux, "lse"):
            raise ConfigError(f"return_aux: expected torch.nn.attention.flex_attention.AuxRequest, got "
                              f"{type(return_aux).__name__}")
        r = flex_attention(query, key, value, score_mod, block_mask, scale, enable_gqa,
                           return_lse=bool(return_aux.lse), kernel_options=kernel_options)
        out, lse = r if return_aux.lse else (r, None)
        return out, _aux_output(lse)
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, Tensor) or t.dim() != 4:
            raise ConfigError(f"{name}: expected a 4-D (B, H, S, D) tensor")
    B, Hq, Sq, D = query.shape
    Hkv, Sk = key.shape[1], key.shape[2]
    if Hq != Hkv and not enable_gqa:
        raise ConfigError(f"query has {Hq} heads, key/value {Hkv}: pass enable_gqa=True for GQA (as FlexAttention)")
    wq, wv = _widths.widths_for(query, value)  # head dims without a kernel (16, 32, 80 ...) run zero-padded
    if (wq, wv) != (D, value.shape[-1]):
        r = flex_attention(_widths.pad_to(query, wq), _widths.pad_to(key, wq), _widths.pad_to(value, wv), score_mod,
                           block_mask, D ** -0.5 if scale is None else scale, enable_gqa, return_lse, kernel_options)
        o = (r[0] if return_lse else r)[..., :value.shape[-1]]
        return (o, r[1]) if return_lse else o
    bm = _as_block_mask(block_mask)
    mask_mod = None
    if bm is not None:
        if bm.seq_lengths != (Sq, Sk):
            raise ConfigError(f"block_mask was created for (Q_LEN, KV_LEN) = {bm.seq_lengths}, but the query and key "
                              f"lengths are ({Sq}, {Sk})")
        bB, bH = bm.classes.shape[:2]
        if bB not in (1, B) or bH not in (1, Hq):
            raise ConfigError(f"block_mask has batch {bB} and heads {bH}; expected 1 or {B}, 1 or {Hq}")
        mask_mod = bm._traced
    builtin = _builtin_band(bm, Sq, Sk)
    if builtin is not None:  # a causal or sliding-window mask: fa4jit's built-in mask computes it
        bm = mask_mod = None
    elif bm is not None and not torch.compiler.is_compiling():  # a band of q_idx - kv_idx (or'ed with a key
        band = traced_band(bm._traced, Sq, Sk, top_left=Sq != Sk)  # prefix): the built-in mask
        if band is not None:
            bm, mask_mod = None, band
    slopes = None
    if is_traced(score_mod) and Sq == Sk and _checks._eager(query, key, value, None):
        slopes = _builtin_alibi(_traced(score_mod, "score"), Hq, bool(builtin and builtin.get("causal")),
                                query.device)
    if slopes is not None:  # ALiBi: fa4jit's built-in score-mod with these slopes
        score_mod = None
        builtin = dict(builtin or {}, alibi_slopes=slopes)
    mask_s, block_s, score_s, aux = lower(mask_mod, None, score_mod, None, block_mask=bm)  # a Band passes as is
    cap = _builtin_softcap(score_s)
    if cap:  # cap * tanh(score / cap): fa4jit's built-in softcap
        score_s = None
        builtin = dict(builtin or {}, softcap=cap)
    return attention(query, key, value, softmax_scale=scale, mask_mod=mask_s or None, block_mask_mod=block_s or None,
                     score_mod=score_s or None, aux=aux or None, return_lse=return_lse, layout="bhsd",
                     **(builtin or {}))


def _aux_output(lse: Optional[Tensor]):
    """FlexAttention's AuxOutput (max_scores None: never requested here)."""
    try:
        from torch.nn.attention.flex_attention import AuxOutput
    except ImportError:  # a PyTorch before AuxOutput (2.9) has no return_aux to ask for it
        raise ConfigError("return_aux: this PyTorch has no AuxOutput; use return_lse=True") from None
    return AuxOutput(lse=lse, max_scores=None)


__all__ = ["BlockMask", "create_block_mask", "flex_attention", "from_torch_block_mask"]
