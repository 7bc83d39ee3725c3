"""The benchmark zoo: fa4jit against its peers on the attention shapes of real models, in one process.

    python3 bench/zoo.py --list                         # the rows, no GPU needed
    python3 bench/zoo.py --rows decode --models llama3_8b,qwen2_5_7b --out zoo.json
    python3 bench/zoo.py --bias                         # the thermal bias the harness removes
    python3 bench/zoo.py --flex all --out flex.json     # FlexAttention's mods: fa4jit.flex_attention vs
                                                        # torch.compile(flex_attention) and fa4jit's built-ins

Models are Hugging Face config.json files (tests/models/); each is cut into the per-GPU shape of
every tensor-parallel degree in ``MODELS`` (Hq/TP query heads, max(1, Hkv/TP) KV heads), once for
its full-attention layers and once for its sliding-window layers (``window``: Gemma 2 / 3, gpt-oss,
Mistral 7B v0.1, Phi-3-mini; ``fa4jit.model_configs`` says which layers slide). Rows
(``ROWSETS``): prefill (one 2k and one 16k prompt, a varlen batch of mixed lengths), decode
(batch 1, 32 and 128 over 4k and 32k keys), paged decode (pages of 1, 16 and 64), speculative decode
(4 queries), FP8-KV decode, a continuous-batching step (48 decode rows and two prefill chunks in
one varlen call), prefill over a page-16 cache (``pchunk``: a 2k chunk of a 16k prompt and the
continuous-batching step, vLLM's shapes), and head dim 512 (``d512``: one synthetic GQA shape, no
model file having it).
Models with multi-head latent attention (DeepSeek-V3, Kimi-K2) get the prefill
rows of their unabsorbed heads (Q/K 192, V 128) and, for decode, the ``mla`` rows: the absorbed
decode serving engines run over the latent cache (one KV head of 576 columns in pages of 64, V its
first 512 columns, every query head of the GPU; fa4jit passes V as a view of the cache, FlashInfer's
MLA wrapper takes the 512 latent and 64 rope columns). Rows of models with the same per-GPU shape are
measured once and name every model. Every row runs fa4jit (``fa4jit.attention`` / ``attention_paged`` /
``attention_varlen``, in this process), fa4jit again under another name (the A/A arm: the table is
noise if it reads outside 1 +- 2%), and every peer of bench/peers.py that supports the row, in
interleaved rounds at steady state (bench/harness.py). Each measurement records the SM clock, the
power and the energy per call. The table is sorted worst row first: the ratio is the best peer's
time over fa4jit's (>1: fa4jit is faster), per call and back to back. For paged rows the peers
without a paged form run on contiguous copies of the same keys, and for FP8-KV rows on the bf16 keys:
what a user would otherwise run.
"""
import argparse
import collections
import dataclasses
import itertools
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from peers import rot  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL_DIR = os.path.join(HERE, "..", "tests", "models")

# model file (tests/models/NAME.json, or SHAPE_ONLY below) -> tensor-parallel degrees to shard it into.
MODELS = {
    "llama3_8b": [1], "llama3_1_70b": [1, 8], "llama3_1_405b": [8], "mistral_7b_v01": [1],
    "mistral_nemo": [1], "mixtral_8x7b": [1, 8], "qwen2_7b": [1], "qwen2_5_7b": [1, 2], "qwen2_5_32b": [1, 4],
    "qwen2_5_72b": [8], "qwen3_8b": [1], "qwen3_30b_a3b": [1], "gemma2_9b": [1], "gemma3_4b": [1],
    "gemma3_27b": [1], "phi4": [1], "gpt_oss_20b": [1], "gpt_oss_120b": [1, 4], "command_r": [1],
    "deepseek_v3": [1, 8], "kimi_k2": [1, 8], "phi3_mini_4k": [1],
    "qwen2_5_1_5b": [1, 2], "glm4_9b": [1], "qwen3_235b_a22b": [1, 4], "llama3_2_1b": [1],  # SHAPE_ONLY
}
# Models whose config.json is not in tests/models: the attention fields the zoo reads (heads, KV
# heads, head dim), as their config.json on the Hub states them, for shapes no file above has: a
# group of 6 (Qwen2.5-1.5B: 12/2), 16 over 2 and 4 KV heads (GLM-4-9B: 32/2; Qwen3-235B-A22B:
# 64/4) and head dim 64 without sinks (Llama-3.2-1B: 32/8).
SHAPE_ONLY = {"qwen2_5_1_5b": (12, 2, 128), "glm4_9b": (32, 2, 128), "qwen3_235b_a22b": (64, 4, 128),
              "llama3_2_1b": (32, 8, 64)}
VARLEN_LENS = tuple((n, n) for n in (7000, 3000, 2048, 1500, 1200, 800, 400, 100))  # a prefill batch
# A continuous-batching step as serving engines issue it: 48 decode rows over 4.1k-8.7k keys and two
# prefill chunks of 2048, in one varlen call.
MIXED_LENS = tuple([(1, 4100 + (i * 2749) % 4600) for i in range(48)] + [(2048, 2048)] * 2)
# A step with no prefill chunk waiting: the mixed step's 48 decode rows as one varlen call over packed
# keys (cu_seqlens_k), as flash_attn_varlen_func takes them.
VARLEN_DECODE_LENS = MIXED_LENS[:48]
# Prefill over a paged cache as vLLM and SGLang issue it (the pchunk rows): pages of PCHUNK_PAGE rows,
# a chunk of PCHUNK_Q queries at the end of a PCHUNK_K-key prompt (chunked prefill), and the
# continuous-batching step (MIXED_LENS) with every sequence's keys in the pages.
PCHUNK_PAGE, PCHUNK_Q, PCHUNK_K = 16, 2048, 16384
MAX_KV_GIB = 40  # rows whose K/V would not fit beside their copies are listed as skipped


@dataclasses.dataclass(frozen=True)
class Shape:
    """One attention layer as one GPU sees it."""
    Hq: int
    Hkv: int
    D: int
    sinks: bool = False
    softcap: float = 0.0
    window: int = 0  # keys a query sees, itself included (0: all)
    Dv: int = 0  # V's and O's head dim (0: D); DeepSeek-V3 prefill: D 192, Dv 128
    scale: float = 0.0  # softmax scale (0: 1/sqrt(D)); MLA's absorbed decode keeps 1/sqrt(192)

    @property
    def dv(self):
        return self.Dv or self.D

    @property
    def softmax_scale(self):
        return self.scale or 1.0 / math.sqrt(self.D)

    @property
    def label(self):
        extra = "".join([" sinks" if self.sinks else "", f" softcap {self.softcap:g}" if self.softcap else "",
                         f" window {self.window}" if self.window else ""])
        d = f"d{self.D}" if self.dv == self.D else f"d{self.D}/v{self.dv}"
        return f"{self.Hq}/{self.Hkv} {d}{extra}"


@dataclasses.dataclass
class Row:
    kind: str  # prefill | varlen | mixed | decode | paged | spec | fp8kv | mla (latent-cache decode, paged) | mla8
    # (mla over an e4m3 latent cache; the peers read a bf16 cache of the same values) | chunk (a prefill
    # chunk: Sq queries at the end of Sk keys). page > 0: K/V in a paged cache (decode, chunk and mixed)
    shape: Shape
    B: int
    Sq: int
    Sk: int
    page: int = 0
    lens: tuple = ()  # varlen rows: (Sq, Sk) of every sequence
    models: list = dataclasses.field(default_factory=list)

    @property
    def name(self):
        s = self.shape.label
        paged = f"paged{self.page} " if self.page and self.kind in ("mixed", "chunk") else ""
        if self.kind == "chunk":
            return f"{paged}chunk {self.Sq // 1024}k of {self.B}x{self.Sk // 1024}k, {s}"
        if self.kind == "varlen":
            return f"varlen {len(self.lens)} seqs {sum(q for q, _ in self.lens)} tok, {s}"
        if self.kind == "mixed" and all(q == 1 for q, _ in self.lens):
            return f"varlen decode {len(self.lens)} seqs, {s}"
        if self.kind == "mixed":
            return f"{paged}mixed step {sum(q == 1 for q, _ in self.lens)} decode + {sum(q > 1 for q, _ in self.lens)} chunks, {s}"
        if self.kind == "prefill":
            return f"prefill {self.B}x{self.Sk // 1024}k, {s}"
        if self.latent:
            what = ("mla decode" if self.Sq == 1 else f"mla Sq{self.Sq}") + (" e4m3 cache" if self.kind == "mla8" else "")
            return f"{what} {self.B}x{self.Sk // 1024}k, {s}"
        what = {"decode": "decode", "paged": f"paged{self.page} decode", "spec": f"spec Sq{self.Sq}",
                "fp8kv": "fp8kv decode"}[self.kind]
        return f"{what} {self.B}x{self.Sk // 1024}k, {s}"

    @property
    def latent(self):
        """MLA decode over the latent cache (its rows are K, their first columns V)."""
        return self.kind in ("mla", "mla8")

    @property
    def memory_bound(self):
        """Judged by K/V bytes per second (a mixed step's bytes are mostly its decode rows')."""
        return self.kind not in ("prefill", "varlen", "chunk")

    def max_seqlens(self):
        """(longest query, longest key sequence)."""
        return max(q for q, _ in self.seqs()), max(k for _, k in self.seqs())

    def seqs(self):
        """(Sq, Sk) of every sequence."""
        return list(self.lens) if self.lens else [(self.Sq, self.Sk)] * self.B

    def flops(self):
        """Attention FLOPs: 2 * (D + Dv) * Hq per visible (query, key) pair (causal, bottom-right);
        MLA decode rows count every (query, key) pair, 2 * B * Hq * Sq * keys * (576 + 512), as
        FlashMLA and FlashInfer report theirs."""
        if self.latent:
            pairs = sum(q * k for q, k in self.seqs())
        else:
            pairs = sum(visible_pairs(q, k, self.shape.window) for q, k in self.seqs())
        return 2 * (self.shape.D + self.shape.dv) * self.shape.Hq * pairs

    def kv_bytes(self):
        """K and V bytes a call reads; MLA decode reads the latent cache once (V is its first
        columns): B * keys * 576 * 2 (1 over an e4m3 cache)."""
        if self.latent:
            return self.shape.Hkv * self.shape.D * (1 if self.kind == "mla8" else 2) * sum(k for _, k in self.seqs())
        per = 1 if self.kind == "fp8kv" else 2
        w = self.shape.window  # a windowed layer reads the keys its last queries see
        keys = sum(min(k, w + q - 1) if w else k for q, k in self.seqs())
        return self.shape.Hkv * (self.shape.D + self.shape.dv) * per * keys


def visible_pairs(sq, sk, window=0):
    """(query, key) pairs a causal, bottom-right aligned mask lets through (with a window: the last
    ``window`` keys up to each query's own position)."""
    total = 0
    for i in range(sq):
        last = sk - sq + i + 1  # keys 0 .. last-1 are visible to query i
        total += min(last, window) if window else last
    return total


def text_config(cfg):
    return cfg.get("text_config", cfg)


def model_shape(name):
    """(Shape, note) of a model's full-attention layers at TP 1; note is why it has no rows."""
    if name in SHAPE_ONLY:
        return Shape(*SHAPE_ONLY[name]), ""
    with open(os.path.join(MODEL_DIR, name + ".json"), encoding="utf-8") as f:
        cfg = text_config(json.load(f))
    hq = cfg["num_attention_heads"]
    if "kv_lora_rank" in cfg:  # MLA as transformers runs it (not absorbed): Q/K nope + rope, V v_head_dim
        d = cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]
        return Shape(hq, cfg.get("num_key_value_heads") or hq, d, Dv=cfg["v_head_dim"]), ""

    hkv = cfg.get("num_key_value_heads") or hq
    d = cfg.get("head_dim") or cfg["hidden_size"] // hq
    sinks = cfg.get("model_type") == "gpt_oss"
    softcap = float(cfg.get("attn_logit_softcapping") or 0.0)
    return Shape(hq, hkv, d, sinks, softcap), ""


def mla_shape(name):
    """The absorbed MLA decode's Shape at TP 1 (Q/K kv_lora_rank + qk_rope_head_dim, V kv_lora_rank,
    one KV head, the unabsorbed head dim's softmax scale), or None for a model without a latent cache."""
    if name in SHAPE_ONLY:
        return None
    with open(os.path.join(MODEL_DIR, name + ".json"), encoding="utf-8") as f:
        cfg = text_config(json.load(f))
    if "kv_lora_rank" not in cfg:
        return None
    rank, rope = cfg["kv_lora_rank"], cfg["qk_rope_head_dim"]
    return Shape(cfg["num_attention_heads"], 1, rank + rope, Dv=rank,
                 scale=1.0 / math.sqrt(cfg["qk_nope_head_dim"] + rope))


def shard(s, tp):
    return dataclasses.replace(s, Hq=s.Hq // tp, Hkv=max(1, s.Hkv // tp))


# MLA decode rows: (batch, queries, keys), pages of MLA_PAGE; the latent kernel packs 8..128 heads.
MLA_ROWS = ((64, 1, 4096), (8, 1, 32768), (132, 1, 2048), (64, 4, 4096))
MLA_PAGE = 64
MLA_HEADS = (8, 128)


def rows_of(shape, rowsets):
    out = []
    if "prefill" in rowsets:
        out += [Row("prefill", shape, 1, s, s) for s in (2048, 16384)]
        out.append(Row("varlen", shape, len(VARLEN_LENS), 0, 0, lens=VARLEN_LENS))
    if "mixed" in rowsets:
        out += [Row("mixed", shape, len(lens), 0, 0, lens=lens) for lens in (MIXED_LENS, VARLEN_DECODE_LENS)]
    for kind, page in (("decode", 0), ("paged", 1), ("paged", 16), ("paged", 64)):
        if kind in rowsets:
            out += [Row(kind, shape, b, 1, k, page=page) for b in (1, 32, 128) for k in (4096, 32768)]
    if "spec" in rowsets:
        out += [Row("spec", shape, 32, 4, k) for k in (4096, 32768)]
    if "fp8kv" in rowsets:
        out.append(Row("fp8kv", shape, 32, 1, 32768))
    if "pchunk" in rowsets:
        out += [Row("chunk", shape, 1, PCHUNK_Q, PCHUNK_K, page=PCHUNK_PAGE),
                Row("mixed", shape, len(MIXED_LENS), 0, 0, page=PCHUNK_PAGE, lens=MIXED_LENS)]
    return out


def mla_rows(shape, kind="mla"):
    return [Row(kind, shape, b, sq, k, page=MLA_PAGE) for b, sq, k in MLA_ROWS]


# Head dim 512 (MAX's mha_depth512 family; no model file here has it): one GQA shape, 16 query and 4
# KV heads, on prefill (2k, 16k), decode and paged-64 decode (32 x 4k) rows.
D512 = Shape(16, 4, 512)


def d512_rows():
    return [Row("prefill", D512, 1, s, s) for s in (2048, 16384)] + \
           [Row(kind, D512, 32, 1, 4096, page=page) for kind, page in (("decode", 0), ("paged", 64))]


ROWSETS = ("prefill", "decode", "paged", "spec", "fp8kv", "mixed", "pchunk", "mla", "mla8", "d512")
MODEL_FREE = ("mla", "mla8", "d512")  # row sets a model's own layers do not make


def model_shapes(name):
    """([Shape], note): the shape of each kind of attention layer the model has at TP 1: its
    full-attention layers and its sliding-window layers (Shape.window = config.json's sliding_window),
    as fa4jit.model_configs (generator/model.cpp: which family slides which layers) finds them."""
    base, why = model_shape(name)
    if base is None or name in SHAPE_ONLY:
        return ([base] if base else []), why
    from fa4jit.config import model_configs
    path = os.path.join(MODEL_DIR, name + ".json")
    kinds = {k["config"]["mask"]["kind"] if isinstance(k["config"].get("mask"), dict) else k["config"].get("mask")
             for k in model_configs(path, dtype="bf16") if k["config"].get("depth") == base.D}
    shapes = [base] if "causal" in kinds else []
    if "sliding_window" in kinds:
        with open(path, encoding="utf-8") as f:
            window = text_config(json.load(f))["sliding_window"]
        shapes.append(dataclasses.replace(base, window=window))
    return shapes, why


def zoo(models=None, rowsets=ROWSETS):
    """(rows, pending): the deduplicated rows of ``models`` (default all), each naming its models
    with their TP degree, and the models without rows with the reason."""
    by_key, pending = {}, []
    for m in models or MODELS:
        shapes, why = model_shapes(m)
        if not shapes:
            pending.append((m, why))
            continue
        latent = mla_shape(m)
        # MLA models decode over the latent cache (absorbed up-projections): the mla rows. Their
        # unabsorbed heads (Q/K 192, V 128) are timed on the prefill rows.
        keep = ("prefill", "mla", "mla8") if latent else tuple(k for k in ROWSETS if k not in MODEL_FREE)
        sets = tuple(k for k in rowsets if k in keep)
        left = [k for k in rowsets if k not in sets and k not in MODEL_FREE]
        if latent and left:
            pending.append((m, f"{', '.join(left)} rows: MLA decodes over the latent cache (the mla rows)"))
        for tp in MODELS[m]:
            tag = m if tp == 1 else f"{m}@tp{tp}"
            rows = [r for base in shapes for r in rows_of(shard(base, tp), sets)]
            if "mla" in sets or "mla8" in sets:
                heads = latent.Hq // tp
                if MLA_HEADS[0] <= heads <= MLA_HEADS[1]:
                    rows += [r for kind in ("mla", "mla8") if kind in sets for r in mla_rows(shard(latent, tp), kind)]
                else:
                    pending.append((tag, f"mla rows: {heads} heads per GPU, the latent kernel packs "
                                         f"{MLA_HEADS[0]}..{MLA_HEADS[1]}"))
            for r in rows:
                key = (r.kind, r.shape, r.B, r.Sq, r.Sk, r.page, r.lens)
                by_key.setdefault(key, r).models.append(tag)
    out = list(by_key.values())
    if "d512" in rowsets:
        for r in d512_rows():
            r.models.append("head dim 512")
            out.append(r)
    return out, pending


# ---- inputs and arms (GPU) -------------------------------------------------------------------------

def make_data(row, sets):
    """The row's tensors, ``sets`` copies of each input that changes between calls (rotation keeps
    repeated calls out of L2)."""
    import torch
    sh = row.shape
    dev = "cuda"
    bf = torch.bfloat16

    def rnd(*shape):
        return torch.randn(*shape, device=dev, dtype=bf)
    d = {}
    if row.latent:
        # One latent cache (pages, page, 1 KV head, 576): fa4jit's V is its first 512 columns (a
        # view), FlashInfer reads the 512 latent and 64 rope columns as two views of it. mla8: fa4jit
        # reads an e4m3 cache (factor 1), the peers a bf16 cache of the same values.
        per_seq = row.Sk // row.page
        n = row.B * per_seq
        d["q"] = [rnd(row.B, row.Sq, sh.Hq, sh.D) for _ in range(sets)]
        d["kv_pages"] = rnd(sets * n, row.page, 1, sh.D)
        if row.kind == "mla8":
            d["kv_pages_fp8"] = d["kv_pages"].to(torch.float8_e4m3fn)
            d["kv_pages"] = d["kv_pages_fp8"].to(bf)
            d["descale"] = torch.ones(row.B, 1, device=dev, dtype=torch.float32)
        perm = torch.randperm(n, device=dev, dtype=torch.int64)
        d["page_table"] = [(perm + s * n).to(torch.int32).reshape(row.B, per_seq).contiguous() for s in range(sets)]
        d["seqused_k"] = torch.full((row.B,), row.Sk, dtype=torch.int32, device=dev)
        return d
    if row.lens:
        tq, tk = sum(q for q, _ in row.lens), sum(k for _, k in row.lens)
        d["q"] = [rnd(tq, sh.Hq, sh.D) for _ in range(sets)]
        if not row.page:  # paged: _paged_lens below
            d["k_bf16"] = [rnd(tk, sh.Hkv, sh.D) for _ in range(sets)]
            d["v_bf16"] = [rnd(tk, sh.Hkv, sh.dv) for _ in range(sets)]
        for name, col in (("cu_q", 0), ("cu_k", 1)):
            cu = itertools.accumulate((pair[col] for pair in row.lens), initial=0)
            d[name] = torch.tensor(list(cu), dtype=torch.int32, device=dev)
    else:
        d["q"] = [rnd(row.B, row.Sq, sh.Hq, sh.D) for _ in range(sets)]
        d["k_bf16"] = [rnd(row.B, row.Sk, sh.Hkv, sh.D) for _ in range(sets)]
        d["v_bf16"] = [rnd(row.B, row.Sk, sh.Hkv, sh.dv) for _ in range(sets)]
    if row.page and row.lens:
        _paged_lens(row, d, sets)
    elif row.page:
        per_seq = row.Sk // row.page
        n = row.B * per_seq
        # Each set's table points at its own pages, in shuffled order (as a long-running cache is).
        d["k_pages_bf16"] = torch.cat([k.reshape(n, row.page, sh.Hkv, sh.D) for k in d["k_bf16"]])
        d["v_pages_bf16"] = torch.cat([v.reshape(n, row.page, sh.Hkv, sh.dv) for v in d["v_bf16"]])
        perm = torch.randperm(n, device=dev, dtype=torch.int64)
        d["page_table"] = []
        for s in range(sets):
            order = (perm + s * n).to(torch.int32)
            d["page_table"].append(order.reshape(row.B, per_seq).contiguous())
        # The contiguous K/V the peers read must be the paged cache's rows: gather them.
        d["k_bf16"] = [d["k_pages_bf16"][t.long()].reshape(row.B, row.Sk, sh.Hkv, sh.D) for t in d["page_table"]]
        d["v_bf16"] = [d["v_pages_bf16"][t.long()].reshape(row.B, row.Sk, sh.Hkv, sh.dv) for t in d["page_table"]]
        d["seqused_k"] = torch.full((row.B,), row.Sk, dtype=torch.int32, device=dev)
    if row.kind == "fp8kv":
        e4 = torch.float8_e4m3fn
        d["k_fp8"] = [k.to(e4) for k in d["k_bf16"]]
        d["v_fp8"] = [v.to(e4) for v in d["v_bf16"]]
        # The peers read bf16 K/V holding the same values (what a user without an FP8 cache runs).
        d["k_bf16"] = [k.to(bf) for k in d["k_fp8"]]
        d["v_bf16"] = [v.to(bf) for v in d["v_fp8"]]
        d["descale"] = torch.ones(row.B, sh.Hkv, device=dev, dtype=torch.float32)
    if sh.sinks:
        d["sinks"] = torch.randn(sh.Hq, device=dev, dtype=torch.float32)
    return d


def _paged_lens(row, d, sets):
    """A varlen row's keys in a paged cache: sequence b's ceil(Sk_b / page) pages, every set's own,
    shuffled (a long-running cache's order); its page-table row padded with its last page (entries
    past a sequence's pages must be valid). The peers' packed K/V (cu_seqlens_k) are gathered back
    from the pages, so every arm reads the same keys."""
    import torch
    sh, dev = row.shape, d["q"][0].device
    counts = [-(-k // row.page) for _, k in row.lens]
    n, width = sum(counts), max(counts)
    first = list(itertools.accumulate(counts[:-1], initial=0))  # each sequence's first page
    d["k_pages_bf16"] = torch.randn(sets * n, row.page, sh.Hkv, sh.D, device=dev, dtype=torch.bfloat16)
    d["v_pages_bf16"] = torch.randn(sets * n, row.page, sh.Hkv, sh.dv, device=dev, dtype=torch.bfloat16)
    perm = torch.randperm(n, device=dev, dtype=torch.int64)
    d["page_table"], d["k_bf16"], d["v_bf16"] = [], [], []
    cols = torch.arange(width, device=dev)
    for s in range(sets):
        order = perm + s * n
        table = torch.stack([order[a + cols.clamp(max=c - 1)] for a, c in zip(first, counts)])
        d["page_table"].append(table.to(torch.int32).contiguous())
        for name in ("k", "v"):
            pool = d[f"{name}_pages_bf16"]
            d[f"{name}_bf16"].append(torch.cat([pool[t[:c]].flatten(0, 1)[:k] for t, c, (_, k)
                                                in zip(table, counts, row.lens)]))
    d["seqused_k"] = torch.tensor([k for _, k in row.lens], dtype=torch.int32, device=dev)


def fa4jit_arm(row, data, pack=None, bf16_cache=False, num_splits=0):
    """fa4jit on this row; pack: the op's pack_gqa (None: its automatic choice); bf16_cache: an mla8
    row's bf16 copy of its e4m3 cache (the 16-bit latent kernel on the same values); num_splits: the
    op's split-KV count (0: its automatic choice)."""
    import fa4jit
    import torch
    sh = row.shape
    kw = dict(causal=True, softcap=sh.softcap)
    if num_splits:
        kw["num_splits"] = num_splits
    if pack is not None and not row.latent:
        kw["pack_gqa"] = pack
    if sh.window:
        kw["window"] = (sh.window - 1, 0)
    if sh.sinks:
        kw["sinks"] = data["sinks"]
    r = rot
    if row.latent:
        fp8 = row.kind == "mla8" and not bf16_cache
        cache = data["kv_pages_fp8"] if fp8 else data["kv_pages"]
        latent = cache[..., :sh.dv]  # V: the cache's first 512 columns (same storage, same strides)
        if fp8:
            kw.update(descale_k=data["descale"], descale_v=data["descale"])

        # Every query head over the one KV head, packed (the kernel `prewarm --model` derives).
        def fn(i):
            return fa4jit.attention_paged(r(data["q"], i), cache, latent, r(data["page_table"], i), data["seqused_k"],
                                          max_seqlen_k=row.Sk, softmax_scale=sh.softmax_scale, pack_gqa=True, **kw)
    elif row.lens and row.page:
        mq, mk = row.max_seqlens()

        def fn(i):
            return fa4jit.attention_paged(r(data["q"], i), data["k_pages_bf16"], data["v_pages_bf16"],
                                          r(data["page_table"], i), data["seqused_k"], cu_seqlens_q=data["cu_q"],
                                          max_seqlen_q=mq, max_seqlen_k=mk, **kw)
    elif row.lens:
        mq, mk = row.max_seqlens()

        def fn(i):
            return fa4jit.attention_varlen(r(data["q"], i), r(data["k_bf16"], i), r(data["v_bf16"], i), data["cu_q"],
                                           data["cu_k"], mq, mk, **kw)
    elif row.page:
        def fn(i):
            return fa4jit.attention_paged(r(data["q"], i), data["k_pages_bf16"], data["v_pages_bf16"],
                                          r(data["page_table"], i), data["seqused_k"], max_seqlen_k=row.Sk, **kw)
    elif row.kind == "fp8kv":
        def fn(i):
            return fa4jit.attention(r(data["q"], i), r(data["k_fp8"], i), r(data["v_fp8"], i), descale_k=data["descale"],
                                    descale_v=data["descale"], **kw)
    else:
        def fn(i):
            return fa4jit.attention(r(data["q"], i), r(data["k_bf16"], i), r(data["v_bf16"], i), **kw)
    fn(0)
    torch.cuda.synchronize()
    return fn


def check_against(ours, peer, tol=2e-2):
    """Relative L2 difference of fa4jit's output from a peer's on the same inputs: a fast kernel
    that computes the wrong function must not enter the table."""
    a, b = ours(0), peer(0)
    a = a[0] if isinstance(a, tuple) else a
    b = b[0] if isinstance(b, tuple) else b
    if a.shape != b.shape:  # SDPA returns (B, H, S, D) views' layout
        b = b.transpose(1, 2)
    a, b = a.float(), b.float()
    err = ((a - b).norm() / b.norm()).item()
    return err, err <= tol


def run_row(row, nvml, peers, rounds, iters, graph=True, pack_ab=False, layout_ab=False, splits_ab=()):
    import peers as P
    import torch
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    one_set = row.kv_bytes() + 2 * row.shape.Hq * (row.shape.D + row.shape.dv) * sum(q for q, _ in row.seqs())
    sets = max(1, min(12, math.ceil(3 * l2 / max(one_set, 1))))
    if one_set * sets * 2.5 > MAX_KV_GIB * (1 << 30):
        return {"skipped": f"K/V {row.kv_bytes() / 2**30:.0f} GiB with its copies passes {MAX_KV_GIB} GiB"}
    data = make_data(row, sets)
    arms, errors, checks, ran = {}, {}, {}, []
    arms["fa4jit"] = fa4jit_arm(row, data)
    arms["fa4jit A/A"] = arms["fa4jit"]

    def add(name, make):
        """Arm `name` (make() builds it) if it runs and computes what fa4jit's does: a fast kernel
        that computes the wrong function must not enter the table."""
        try:
            fn = make()
        except Exception as e:  # noqa: BLE001 - Unsupported, or a peer failing on this row
            errors[name] = f"{type(e).__name__}: {e}"[:140]
            return
        err, ok = check_against(arms["fa4jit"], fn)
        checks[name] = round(err, 5)
        if not ok:
            errors[name] = f"outputs differ from fa4jit's by rel L2 {err:.3g}"
            return
        arms[name] = fn
        ran.append(name)

    for name in peers:
        add(name, lambda name=name: P.PEERS[name](row, data))
    # fa4jit's own arms beside the peers (they count as peers in the table):
    if pack_ab and row.shape.Hq > row.shape.Hkv and not row.latent:  # the automatic pack_gqa choice's two sides
        add("fa4jit packed", lambda: fa4jit_arm(row, data, pack=True))
        add("fa4jit unpacked", lambda: fa4jit_arm(row, data, pack=False))
    if layout_ab and row.page and not row.latent:  # --layout-ab: paging's own cost, the same keys contiguous
        add("fa4jit contiguous", lambda: fa4jit_arm(dataclasses.replace(row, page=0), data))
    if row.memory_bound:  # --splits-ab: the automatic split count against fixed ones
        for n in splits_ab:
            add(f"fa4jit splits {n}", lambda n=n: fa4jit_arm(row, data, num_splits=n))
    if row.kind == "mla8":  # the 16-bit latent kernel on a bf16 cache of the same values
        add("fa4jit bf16 cache", lambda: fa4jit_arm(row, data, bf16_cache=True))
    out_bytes = 2 * row.shape.Hq * row.shape.dv * sum(q for q, _ in row.seqs())
    max_calls = int(min(400, max(8, (2 << 30) // out_bytes)))  # graph outputs stay under ~2 GiB
    s = harness.measure_row(arms, nvml, "fa4jit", "fa4jit A/A", ran, rounds=rounds,
                            iters=iters, graph=graph, max_calls=max_calls)
    s.update({"errors": errors, "checks": checks, "sets": sets})
    del data, arms
    torch.cuda.empty_cache()
    return s


# ---- the table -------------------------------------------------------------------------------------

def fmt_ratio(t):
    m, lo, hi = t
    return "-" if math.isnan(m) else f"{m:.3f} ({lo:.2f}-{hi:.2f})"


def rate(row, ms):
    if row.memory_bound:
        return f"{row.kv_bytes() / ms / 1e9:.2f} TB/s"
    return f"{row.flops() / ms / 1e9:.0f} TFLOP/s"


def peer_label(row, peer):
    """A peer's name in the table, with what it ran where that is not the row's own layout."""
    if peer and row.page and not row.latent and peer not in ("fa4", "flashinfer"):
        return peer + " (contiguous)"
    if peer and row.kind in ("fp8kv", "mla8") and peer != "fa4jit bf16 cache":
        return peer + " (bf16 KV)"
    return peer


def table(results, shown=None):
    """Markdown, worst row first (the lower of the per-call and back-to-back ratios); shown: which
    (row, summary) pairs get a line (default all; the A/A verdict always judges every row)."""
    def worst(item):
        s = item[1]
        vals = [s.get("vs_best", (float("nan"),))[0], s.get("vs_best_b2b", (float("nan"),))[0]]
        vals = [v for v in vals if not math.isnan(v)]
        return min(vals) if vals else float("inf")
    lines = ["| row | models | fa4jit ms | fa4jit rate | best peer | vs best, per call | vs best, back to back | "
             "J/call fa4jit / peer | SM MHz, W | A/A |", "|---|---|---|---|---|---|---|---|---|---|"]
    aa_dev = []
    for row, s in sorted(results, key=worst):
        listed = shown is None or shown(row, s)
        if "skipped" in s:
            if not listed:
                continue
            lines.append(f"| {row.name} | {', '.join(row.models)} | skipped: {s['skipped']} |||||||")
            continue
        o = s["arms"].get("fa4jit", {})
        if "ms" not in o:
            if listed:
                lines.append(f"| {row.name} | {', '.join(row.models)} | error: {o.get('error', '?')} |||||||")
            continue
        best = s.get("best_peer")
        p = s["arms"].get(best, {}) if best else {}
        j = f"{o.get('j_call', float('nan')):.4f} / {p.get('j_call', float('nan')):.4f}" if best else \
            f"{o.get('j_call', float('nan')):.4f}"
        aa = s.get("aa", (float("nan"),) * 3)
        aa2 = s.get("aa_b2b", (float("nan"),) * 3)
        dev = harness.aa_deviation(s)
        aa_dev.append(dev)
        if not listed:
            continue
        label = peer_label(row, best) if best else "none runs it"
        b2b_peer = s.get("best_peer_b2b", best)
        against = ""  # the back-to-back leader, where it is not the per-call one
        if b2b_peer and b2b_peer != best:
            against = f" vs {peer_label(row, b2b_peer)}" + (", medians" if s.get("b2b_medians") else "")
        lines.append(f"| {row.name} | {', '.join(row.models)} | {o['ms']:.4f} | {rate(row, o['ms'])} | {label} | "
                     f"{fmt_ratio(s.get('vs_best', (float('nan'),) * 3))} | "
                     f"{fmt_ratio(s.get('vs_best_b2b', (float('nan'),) * 3))} ({o.get('mode', '')}{against}) | {j} | "
                     f"{o.get('sm_mhz') or 0:.0f}, {o.get('power_w') or 0:.0f} | {aa[0]:.3f} / {aa2[0]:.3f}"
                     f"{' (noisy)' if dev > 0.02 else ''} |")
    devs = sorted(d for d in aa_dev if not math.isnan(d))
    mid = harness.median(devs) if devs else float("nan")
    verdict = "within" if mid <= 0.02 else "OUTSIDE"
    lines.append(f"\nA/A (the same fa4jit kernel as two arms, per call / back to back): median row {mid * 100:.1f}% "
                 f"from 1, {verdict} +-2%; {sum(d > 0.02 for d in devs)} of {len(devs)} rows past 2% (noisy), "
                 f"worst {max(devs, default=float('nan')) * 100:.1f}%.")
    return "\n".join(lines)


def with_b2b_leader(s):
    """A summary written before they named the back-to-back leader (harness.summarize's
    best_peer_b2b, 2026-12-05), whose back-to-back ratio is against the per-call leader: the peer
    with the lowest back-to-back median leads, and where that is another peer the ratio is of the
    two arms' medians (``b2b_medians``: those runs kept no rounds to pair)."""
    if "best_peer_b2b" in s or "ms_b2b" not in s.get("arms", {}).get("fa4jit", {}):
        return s
    arms = s["arms"]
    peers = [p for p, a in arms.items() if p not in ("fa4jit", "fa4jit A/A") and "ms_b2b" in a]
    lead = min(peers, key=lambda p: arms[p]["ms_b2b"]) if peers else None
    s = dict(s, best_peer_b2b=lead)
    if lead and lead != s.get("best_peer"):
        r = arms[lead]["ms_b2b"] / arms["fa4jit"]["ms_b2b"]
        s.update(vs_best_b2b=[r, r, r], b2b_medians=True)
    return s


def load_results(path):
    """(head, [(Row, summary)]) of an --out file (with_b2b_leader applied)."""
    with open(path, encoding="utf-8") as f:
        j = json.load(f)
    out = []
    for r in j["rows"]:
        d = dict(r["row"])
        d["shape"] = Shape(**d["shape"])
        d["lens"] = tuple(tuple(p) for p in d["lens"])
        out.append((Row(**d), with_b2b_leader({k: v for k, v in r.items() if k not in ("row", "name")})))
    return j["head"], out


def combined_runs(paths):
    """(each run's state line, the (row, summary) pairs) of several runs (subsets run in separate
    calls); a row in several files is taken from the newest run (by the heads' date and time, a run
    without a time first on its date; ties: the later argument)."""
    heads, rows = [], {}
    runs = [(p, *load_results(p)) for p in paths]
    runs.sort(key=lambda run: (run[1].get("date", ""), run[1].get("time", "")))  # stable: ties keep their order
    for p, head, rs in runs:
        w = head.get("warm", {})
        heads.append(f"- `{os.path.basename(p)}`: {head['gpu']}, {head['date']}, torch {head['torch']}; copy "
                     f"{head['copy_tbs']:.2f} TB/s, bf16 GEMM {head['gemm_tflops']:.0f} TFLOP/s (both warm); warmed "
                     f"{w.get('seconds', 0):.0f} s to {w.get('sm_mhz')} MHz, {w.get('power_w', 0):.0f} W")
        rows.update({r.name: (r, summary) for r, summary in rs})  # a row measured again: the later file's
    return heads, list(rows.values())


def combined_table(paths):
    """The rows of several runs in one table (combined_runs), each run's state above."""
    heads, rows = combined_runs(paths)
    return "\n".join(heads) + "\n\n" + table(rows)


# docs/PERF.md's generated block: between these lines, rewritten by --table ... --perf-md.
PERF_BEGIN = "<!-- zoo table: generated by `python3 bench/zoo.py --table docs/perf/*.json --perf-md docs/PERF.md` -->"
PERF_END = "<!-- end of the zoo table -->"
PERF_BAR = 0.97  # the rows the block lists: below this back to back (the issues' goal)


# docs/PERF.md's summary: the measured rows by kind, in this order (summary_kind).
SUMMARY_KINDS = (
    "decode, batch 32 and 128", "decode, batch 1", "paged decode, page 64", "paged decode, pages 1 and 16",
    "speculative decode, 4 queries", "FP8-KV decode (peers on bf16 K/V)", "prefill, one prompt",
    "varlen prefill batch (8 lengths, 16k tokens)", "continuous-batching step (48 decode rows + 2 chunks)",
    "varlen decode (a step's 48 decode rows alone)", "MLA decode over the latent cache",
    "MLA decode over an e4m3 latent cache", "sliding-window layers: decode, paged and speculative",
    "sliding-window layers: prefill, one prompt", "sliding-window layers: varlen prefill batch",
    "sliding-window layers: continuous-batching step and its decode rows",
    "prefill over a page-16 cache: a 2k chunk of a 16k prompt, the continuous-batching step")


def summary_kind(row):
    """The line of the summary (SUMMARY_KINDS) a row counts in."""
    if row.latent:
        return SUMMARY_KINDS[10 if row.kind == "mla" else 11]
    if row.page and row.kind in ("chunk", "mixed"):
        return SUMMARY_KINDS[16]
    step = row.kind == "mixed" and any(q > 1 for q, _ in row.lens)
    if row.shape.window:
        if row.kind in ("decode", "paged", "spec", "fp8kv"):
            return SUMMARY_KINDS[12]
        return SUMMARY_KINDS[{"prefill": 13, "varlen": 14}.get(row.kind, 15)]
    if row.kind == "decode":
        return SUMMARY_KINDS[1 if row.B == 1 else 0]
    if row.kind == "paged":
        return SUMMARY_KINDS[2 if row.page >= 64 else 3]
    return SUMMARY_KINDS[{"spec": 4, "fp8kv": 5, "prefill": 6, "varlen": 7}.get(row.kind, 8 if step else 9)]


def summary(rows):
    """Markdown: per kind of row (summary_kind) the measured rows, the worst and median ratio against
    the best peer per call and back to back (worst in bold below PERF_BAR), and which peers led."""
    by_kind = {}
    for row, s in rows:
        if "skipped" in s or "vs_best" not in s or "ms" not in s["arms"].get("fa4jit", {}):
            continue
        by_kind.setdefault(summary_kind(row), []).append((row, s))
    lines = ["| rows | n | per call: worst, median | back to back: worst, median | led by (rows) |",
             "|---|---|---|---|---|"]
    for kind in SUMMARY_KINDS:
        got = by_kind.get(kind)
        if not got:
            continue
        call = [s["vs_best"][0] for _, s in got]
        b2b = [s["vs_best_b2b"][0] for _, s in got]
        worst = f"{min(b2b):.2f}"
        if min(b2b) < PERF_BAR:
            worst = f"**{worst}**"
        leaders = collections.Counter(s["best_peer"] for _, s in got)
        led = ", ".join(f"{peer} {n}" for peer, n in sorted(leaders.items(), key=lambda kv: (-kv[1], kv[0])))
        lines.append(f"| {kind} | {len(got)} | {min(call):.2f}, {harness.median(call):.2f} | {worst}, "
                     f"{harness.median(b2b):.2f} | {led} |")
    return "\n".join(lines)


def perf_block(paths):
    """The runs' states, the counts of measured rows by their back-to-back ratio against the best
    peer, the summary per kind of row, and the rows below PERF_BAR, worst first, with the A/A verdict
    over every row. The files
    are taken in name order (runs of one date and no time then keep it), whatever order a shell's
    locale gives a glob."""
    heads, rows = combined_runs(sorted(paths, key=os.path.basename))
    measured = [(r, s) for r, s in rows if "skipped" not in s and "ms" in s["arms"].get("fa4jit", {})]

    def b2b(s):
        return s.get("vs_best_b2b", (float("nan"),))[0]
    ratios = [b2b(s) for _, s in measured]
    below = sum(v < PERF_BAR for v in ratios)
    near = sum(PERF_BAR <= v < 1.0 for v in ratios)
    ahead = sum(v >= 1.0 for v in ratios)
    total = len(zoo(None, ROWSETS)[0])
    counts = (f"{len(measured)} rows measured of the zoo's {total}: {below} below {PERF_BAR} back to back (listed, "
              f"worst first), {near} at {PERF_BAR}-1.0, {ahead} at or above 1.0, {len(measured) - below - near - ahead} "
              f"run by no peer.")
    listed = table(rows, shown=lambda r, s: "skipped" not in s and b2b(s) < PERF_BAR)
    kinds = ("**Summary, per kind of row** (ratio = the best peer's time / fa4jit's; >1: fa4jit faster; per "
             "call against the peer fastest per call, back to back against the one fastest back to back; the "
             "peer that led each row, by its per-call time):")
    return "\n".join([PERF_BEGIN, *heads, "", counts, "", kinds, "", summary(rows), "", listed, PERF_END])


def update_perf_md(doc, paths):
    """Rewrites doc's generated block (PERF_BEGIN ... PERF_END) from the runs; True if it changed."""
    with open(doc, encoding="utf-8") as f:
        text = f.read()
    start, end = text.find(PERF_BEGIN), text.find(PERF_END)
    if start < 0 or end < start:
        raise SystemExit(f"--perf-md: {doc} has no generated block ({PERF_BEGIN!r} ... {PERF_END!r})")
    new = text[:start] + perf_block(paths) + text[end + len(PERF_END):]
    if new != text:
        with open(doc, "w", encoding="utf-8") as f:
            f.write(new)
    return new != text


# ---- FlexAttention's front end: fa4jit.flex_attention vs torch.compile(flex_attention) ----------------
# The masks and score-mods of FlexAttention's documentation at the shape (B4 H16 S8192 D128,
# bf16), each run three ways in one process: fa4jit.flex_attention with the mods traced into
# snippets and fa4jit's exact tile map (create_block_mask), torch.compile(flex_attention) with
# FlexAttention's create_block_mask, and fa4jit's built-in variant where one is equivalent.
# The paged row (paged_arms) runs FlexAttention's PagedAttention recipe against attention_paged.

FLEX_SHAPE = (4, 16, 8192, 128)  # B, H, S, D
FLEX_MODS = ("causal", "sliding_window", "prefix_lm", "document", "alibi", "softcap", "relative_bias", "dilated",
             "strided", "paged")
FLEX_PAGE = 128  # the paged row's page size: FlexAttention's PagedAttention needs it equal to its KV block


def flex_mods(name, B, H, S, device="cuda"):
    """(mask_mod, score_mod, fa4jit.attention keywords of the built-in equivalent or None)."""
    import torch

    def causal(b, h, q, kv):
        return q >= kv
    if name == "causal":
        return causal, None, dict(causal=True)
    if name == "sliding_window":
        def mask(b, h, q, kv):
            return (q >= kv) & (q - kv < 1024)
        return mask, None, dict(causal=True, window=(1023, 0))
    if name == "prefix_lm":
        def mask(b, h, q, kv):
            return (kv < 2048) | (q >= kv)
        return mask, None, None
    if name == "document":
        g = torch.Generator().manual_seed(0)
        doc = torch.zeros(B, S, dtype=torch.int32)
        for b in range(B):  # documents of random lengths, about 1k tokens each
            for c in sorted(torch.randperm(S - 1, generator=g)[:S // 1024 - 1].add(1).tolist()):
                doc[b, c:] += 1
        doc = doc.to(device)

        def mask(b, h, q, kv):
            return (doc[b, q] == doc[b, kv]) & (q >= kv)
        return mask, None, None
    if name == "alibi":
        def score(s, b, h, q, kv):
            return s - torch.exp2(-(h + 1) * 8.0 / H) * (q - kv).abs()
        return causal, score, dict(causal=True, score_mod="alibi")
    if name == "softcap":
        def score(s, b, h, q, kv):
            return 30.0 * torch.tanh(s / 30.0)
        return causal, score, dict(causal=True, softcap=30.0)
    if name == "relative_bias":
        rel = torch.randn(H, 2 * S, device=device) * 0.1

        def score(s, b, h, q, kv):
            return s + rel[h, q - kv + S]
        return causal, score, None
    if name == "dilated":
        def mask(b, h, q, kv):
            return (q >= kv) & (q - kv < 4096) & ((q - kv) % 2 == 0)
        return mask, None, None
    if name == "strided":  # Sparse Transformer's strided pattern: a local window and every 256th key back
        def mask(b, h, q, kv):
            return (q >= kv) & ((q - kv < 256) | ((q - kv) % 256 == 0))
        return mask, None, None
    raise ValueError(name)


def flex_arms(name, q, k, v):
    """(arms, fa4jit's BlockMask, FlexAttention's) of a row on (B, H, S, D) q / k / v."""
    import fa4jit
    import torch
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    B, H, S, _ = q.shape
    mask, score, builtin = flex_mods(name, B, H, S)
    bb = B if name == "document" else None
    ours_bm = fa4jit.create_block_mask(mask, bb, None, S, S, device="cuda")
    theirs_bm = create_block_mask(mask, bb, None, S, S, device="cuda")
    fx = torch.compile(flex_attention, dynamic=False)
    arms = {"fa4jit": lambda i: fa4jit.flex_attention(q, k, v, score_mod=score, block_mask=ours_bm),
            "flex": lambda i: fx(q, k, v, score_mod=score, block_mask=theirs_bm)}
    if builtin is not None:
        qb, kb, vb = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        arms["builtin"] = lambda i: fa4jit.attention(qb, kb, vb, **builtin).transpose(1, 2)
    return arms, ours_bm, theirs_bm


def paged_caches(k, v, page, seed=1):
    """k / v (B, H, S, D) in shuffled pages two ways: fa4jit's (pages, page, H, D) with its page table
    (B, S / page), and FlexAttention's PagedAttention cache (1, H, pages x page, D) over the same
    physical pages, with its page table and physical-to-logical map set to that permutation (the
    state its reserve() leaves, for another free-page order)."""
    import torch
    from torch.nn.attention.experimental._paged_attention import PagedAttention
    B, H, S, D = k.shape
    per, n = S // page, B * S // page
    table = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).view(B, per).to(k.device)
    pages = []
    for t in (k, v):
        c = torch.empty(n, page, H, D, device=t.device, dtype=t.dtype)
        c[table] = t.transpose(1, 2).reshape(B, per, page, H, D)
        pages.append(c)
    pa = PagedAttention(n, page, B, device=k.device)
    pa.page_table[:, :per] = table
    pa.physical_to_logical[torch.arange(B, device=k.device)[:, None], table] = torch.arange(
        per, device=k.device).expand(B, per)
    pa.capacity[:] = S
    pa.empty_pages = []
    flat = [c.permute(2, 0, 1, 3).reshape(1, H, n * page, D) for c in pages]
    return pages, table.to(torch.int32), pa, flat


def paged_arms(q, k, v):
    """The PagedAttention row: causal attention over a KV cache in shuffled pages of FLEX_PAGE.
    FlexAttention runs its documented PagedAttention recipe (torch.nn.attention.experimental:
    the logical block mask and mask_mod converted through the page table, one physical cache
    shared by the batch); fa4jit runs attention_paged with the traced logical mask and its tile
    map (a BlockMask as block_mask_mod), and with the built-in causal mask."""
    import fa4jit
    import torch
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    B, H, S, _ = q.shape

    def causal(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx
    (kc, vc), table, pa, (kf, vf) = paged_caches(k, v, FLEX_PAGE)
    used = torch.full((B,), S, dtype=torch.int32, device=q.device)
    ours_bm = fa4jit.create_block_mask(causal, None, None, S, S, device="cuda")
    logical = create_block_mask(causal, B, None, S, S, device="cuda", BLOCK_SIZE=FLEX_PAGE)
    theirs_bm = pa.convert_logical_block_mask(logical)
    fx = torch.compile(flex_attention, dynamic=False)
    qs = q.transpose(1, 2)
    arms = {"fa4jit": lambda i: fa4jit.attention_paged(qs, kc, vc, table, used, mask_mod=causal,
                                                       block_mask_mod=ours_bm).transpose(1, 2),
            "flex": lambda i: fx(q, kf, vf, block_mask=theirs_bm),
            "builtin": lambda i: fa4jit.attention_paged(qs, kc, vc, table, used, causal=True).transpose(1, 2)}
    return arms, ours_bm, logical


def run_flex_row(name, nvml, rounds, iters, graph=True):
    import torch
    B, H, S, D = FLEX_SHAPE
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    # torch.compile recompiles flex_attention for each mod (a guard on its code); past dynamo's
    # default limit of 8 it falls back to eager flex_attention, 70x slower (the 9th mod of --flex all).
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    arms, ours_bm, theirs_bm = paged_arms(q, k, v) if name == "paged" else flex_arms(name, q, k, v)
    arms["fa4jit A/A"] = arms["fa4jit"]
    checks, errors = {}, {}
    for a in ("flex", "builtin"):
        if a in arms:
            err, ok = check_against(arms["fa4jit"], arms[a])
            checks[a] = round(err, 5)
            if not ok:
                errors[a] = f"outputs differ from fa4jit's by rel L2 {err:.3g}"
    torch.cuda.synchronize()
    rd = harness.run_rounds(arms, nvml, rounds=rounds, iters=iters, graph=graph, max_calls=64)
    s = harness.summarize(rd, "fa4jit", "fa4jit A/A", [p for p in ("flex", "builtin") if p in arms])
    s["vs_flex"] = harness.spread(harness.paired(rd, "flex", "fa4jit", "ms"))
    s["vs_builtin"] = harness.spread(harness.paired(rd, "builtin", "fa4jit", "ms")) if "builtin" in arms else None
    s.update({"checks": checks, "errors": errors, "sparsity": round(ours_bm.sparsity(), 2),
              "flex_sparsity": round(float(theirs_bm.sparsity()), 2)})
    del q, k, v, arms
    torch.cuda.empty_cache()
    return s


def flex_table(results):
    """Markdown: per mod, fa4jit's time, FlexAttention's over it (goal >= 1.3) and the built-in's over it
    (goal >= 0.95: within 5%), per call, median (min-max) over paired rounds."""
    lines = [f"B{FLEX_SHAPE[0]} H{FLEX_SHAPE[1]} S{FLEX_SHAPE[2]} D{FLEX_SHAPE[3]} bf16, forward",
             "", "| mod | fa4jit flex ms | flex ms | flex / fa4jit (goal >= 1.3) | built-in ms | built-in / fa4jit "
             "(goal >= 0.95) | empty tiles fa4jit / flex | rel L2 vs flex | A/A |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, s in results:
        a = s.get("arms", {})
        o = a.get("fa4jit", {})
        if "ms" not in o:
            lines.append(f"| {name} | error: {o.get('error', s.get('error', '?'))} ||||||||")
            continue
        f = a.get("flex", {})
        b = a.get("builtin", {})
        vf, vb = s.get("vs_flex"), s.get("vs_builtin")
        goal = "" if vf is None or math.isnan(vf[0]) else (" ok" if vf[0] >= 1.3 else " BELOW")
        goal_b = "" if not vb or math.isnan(vb[0]) else (" ok" if vb[0] >= 0.95 else " BELOW")
        lines.append(f"| {name} | {o['ms']:.3f} | {f.get('ms', float('nan')):.3f} | {fmt_ratio(vf)}{goal} | "
                     f"{b.get('ms', float('nan')):.3f} | {fmt_ratio(vb) if vb else '-'}{goal_b} | "
                     f"{s.get('sparsity')}% / {s.get('flex_sparsity')}% | {s.get('checks', {}).get('flex')} | "
                     f"{s.get('aa', (float('nan'),))[0]:.3f} |")
    return "\n".join(lines)


def flex_main(a, nvml, head):
    import torch
    mods = [m for m in a.flex.split(",") if m] if a.flex != "all" else list(FLEX_MODS)
    results = []
    for name in mods:
        try:
            s = run_flex_row(name, nvml, a.rounds, a.iters, graph=not a.no_graph)
        except Exception as e:  # noqa: BLE001 - one row's failure is reported, the run goes on
            torch.cuda.synchronize()
            s = {"error": f"{type(e).__name__}: {e}"[:300]}
        results.append((name, s))
        print(f"{name}: {json.dumps({k: s.get(k) for k in ('vs_flex', 'vs_builtin', 'sparsity', 'errors', 'error')})}",
              flush=True)
    print()
    print(f"{head['gpu']}, {head['date']}, fa4jit {head.get('fa4jit')}, torch {head['torch']}")
    print(flex_table(results))
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"head": head, "flex": [{"mod": n, **s} for n, s in results]}, f, indent=1, default=str)
    return 0


# ---- the bias this harness removes ----------------------------------------------------------------

def bias_demo(nvml):
    """The same fa4jit kernel timed after 2 s idle and at steady state: the ~15% a bench that
    times kernels in different thermal states misreads (docs/PERF.md)."""
    import torch
    row = Row("prefill", Shape(16, 16, 128), 16, 2048, 2048)
    data = make_data(row, 1)
    fn = fa4jit_arm(row, data)
    out = {}
    time.sleep(2.0)
    out["after 2 s idle"] = {"ms": harness.per_call(fn, iters=5, warm=1), **nvml.state()}
    w = harness.warm_until_stable(lambda: fn(0), nvml, min_s=3.0)
    out["steady state"] = {"ms": harness.per_call(fn, iters=5, warm=1), **nvml.state(), "warm_s": w["seconds"]}
    for k, v in out.items():
        v["tflops"] = row.flops() / v["ms"] / 1e9
    torch.cuda.synchronize()
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--list", action="store_true", help="print the rows and exit (no GPU)")
    ap.add_argument("--models", default="", help="comma-separated model names (default: all)")
    ap.add_argument("--rows", default=",".join(ROWSETS), help=f"comma-separated row sets of {ROWSETS}")
    ap.add_argument("--batches", default="",
                    help="keep only decode / paged / fp8kv / mla rows of these batch sizes (e.g. 1,32)")
    ap.add_argument("--pages", default="", help="keep only paged rows of these page sizes (e.g. 64)")
    ap.add_argument("--kinds", default="", help="keep only rows of these kinds (e.g. varlen,mixed of --rows prefill,mixed)")
    ap.add_argument("--match", default="", help="keep only rows whose name contains this text (e.g. 'window 128')")
    ap.add_argument("--peers", default="cudnn,fa2,fa4,flex,flashinfer")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--budget", type=float, default=540.0, help="seconds; rows left when it runs out are listed")
    ap.add_argument("--no-graph", action="store_true", help="back to back from eager calls, not CUDA graphs")
    ap.add_argument("--pack-ab", action="store_true",
                    help="GQA rows: two more fa4jit arms, pack_gqa forced on and off (the automatic choice's "
                         "evidence; they count as peers in the table)")
    ap.add_argument("--layout-ab", action="store_true",
                    help="paged rows: one more fa4jit arm on contiguous copies of the same keys (paging's own "
                         "cost; it counts as a peer in the table)")
    ap.add_argument("--splits-ab", default="", metavar="N,...",
                    help="memory-bound rows: one more fa4jit arm per split-KV count (num_splits=N; the "
                         "automatic count's evidence: paged launches fill two CTA slots per SM, contiguous "
                         "16-bit ones one; they count as peers in the table)")
    ap.add_argument("--bias", action="store_true", help="show the thermal bias (idle vs steady state) and exit")
    ap.add_argument("--out", default="", help="write every number here as JSON")
    ap.add_argument("--flex", default="", metavar="MODS",
                    help=f"the FlexAttention table instead of the zoo: 'all' or some of {','.join(FLEX_MODS)}")
    ap.add_argument("--table", nargs="+", metavar="JSON", help="print one table of the rows of earlier --out files")
    ap.add_argument("--perf-md", default="", metavar="DOC",
                    help=f"with --table: rewrite DOC's generated block (the runs, the counts, the rows below "
                         f"{PERF_BAR} back to back) instead of printing the table")
    a = ap.parse_args(argv)
    if a.perf_md and not a.table:
        ap.error("--perf-md needs --table JSON...")
    if a.table and a.perf_md:
        print(f"{a.perf_md}: {'rewritten' if update_perf_md(a.perf_md, a.table) else 'already current'}")
        return 0
    if a.table:
        print(combined_table(a.table))
        return 0
    models = [m for m in a.models.split(",") if m] or None
    unknown = [m for m in models or [] if m not in MODELS]
    if unknown:
        ap.error(f"--models: unknown {unknown}; known: {sorted(MODELS)}")
    rowsets = [r for r in a.rows.split(",") if r]
    bad = [r for r in rowsets if r not in ROWSETS]
    if bad:
        ap.error(f"--rows: unknown {bad}; use {ROWSETS}")
    rows, pending = zoo(models, rowsets)
    if a.batches:
        keep = {int(b) for b in a.batches.split(",")}
        rows = [r for r in rows if r.kind not in ("decode", "paged", "fp8kv", "mla", "mla8") or r.B in keep]
    if a.pages:
        keep_p = {int(p) for p in a.pages.split(",")}
        rows = [r for r in rows if r.kind != "paged" or r.page in keep_p]
    if a.kinds:
        rows = [r for r in rows if r.kind in a.kinds.split(",")]
    if a.match:
        rows = [r for r in rows if a.match in r.name]
    if a.list:
        for r in rows:
            print(f"{r.name:48s} {', '.join(r.models)}")
        for m, why in pending:
            print(f"{m}: {why}")
        print(f"{len(rows)} rows")
        return 0
    import torch
    nvml = harness.Nvml()
    t0 = time.time()
    head = {"gpu": torch.cuda.get_device_name(0), "date": time.strftime("%Y-%m-%d"), "time": time.strftime("%H:%M"),
            "torch": torch.__version__,
            "nvml": nvml.why or "ok"}
    try:
        import fa4jit
        head["fa4jit"] = fa4jit.__version__
    except Exception as e:  # noqa: BLE001
        head["fa4jit"] = f"not importable: {e}"
    if a.bias:
        res = bias_demo(nvml)
        print(json.dumps({**head, "bias": res}, indent=1))
        return 0
    heat = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    head["warm"] = harness.warm_until_stable(lambda: heat @ heat, nvml, min_s=3.0, max_s=20.0, block_s=0.2)
    del heat
    head["gemm_tflops"] = harness.gemm_tflops()  # the ceilings, measured warm
    head["copy_tbs"] = harness.copy_rate_tbs(nvml)
    print(json.dumps(head), flush=True)
    if a.flex:
        return flex_main(a, nvml, head)
    peers = [p for p in a.peers.split(",") if p]
    results, left = [], []
    for row in rows:
        if time.time() - t0 > a.budget:
            left.append(row)
            continue
        try:
            s = run_row(row, nvml, peers, a.rounds, a.iters, graph=not a.no_graph, pack_ab=a.pack_ab,
                        layout_ab=a.layout_ab, splits_ab=[int(n) for n in a.splits_ab.split(",") if n])
        except Exception as e:  # noqa: BLE001 - one row's failure is reported, the run goes on
            torch.cuda.synchronize()
            s = {"arms": {"fa4jit": {"error": f"{type(e).__name__}: {e}"[:200]}}}
        results.append((row, s))
        o = s.get("arms", {}).get("fa4jit", {})
        print(f"{row.name}: fa4jit {o.get('ms', float('nan')):.4f} ms, best {s.get('best_peer')} "
              f"{s.get('vs_best', ('-',))[0]}, A/A {s.get('aa', ('-',))[0]} {s.get('errors', '')}"
              f"{s.get('skipped', '')}", flush=True)
    print()
    print(f"{head['gpu']}, {head['date']}, fa4jit {head.get('fa4jit')}, torch {head['torch']}; copy "
          f"{head['copy_tbs']:.2f} TB/s, bf16 GEMM {head['gemm_tflops']:.0f} TFLOP/s; warmed {head['warm']['seconds']:.1f} s "
          f"to {head['warm']['sm_mhz']} MHz, {head['warm']['power_w']} W")
    print(table(results))
    for m, why in pending:
        print(f"- {m}: {why}")
    if left:
        print(f"- {len(left)} rows not run (--budget {a.budget:.0f} s): " + "; ".join(r.name for r in left[:8]))
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"head": head, "rows": [{"row": dataclasses.asdict(r), "name": r.name, **s} for r, s in results],
                       "pending": pending, "left": [r.name for r in left]}, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
