"""The peers fa4jit is timed against, as callables in this process (bench/harness.py times them).

Each ``*_arm(row, data)`` returns ``fn(i)`` that runs the peer once on input set ``i`` (sets rotate
so that repeated calls do not read from L2), or raises ``Unsupported`` with the reason the peer
cannot run the row. ``data`` holds the row's tensors in fa4jit's (B, S, H, D) layout; SDPA gets
(B, H, S, D) views of the same storage (no copies), FlashAttention-4 takes BSHD as fa4jit does.

- cuDNN and FA2: PyTorch SDPA backends (``torch.nn.attention.sdpa_kernel``); GQA via enable_gqa;
  a query shorter than its keys gets SDPA's bottom-right causal bias.
- FlashAttention-4: ``flash_attn.cute`` (flash-attn-4; ``FA4_SITE`` from ../shared/bench/fa4_peer.sh).
- FlexAttention: ``torch.compile(flex_attention)`` with ``create_block_mask``, prefill rows only
  (each new shape compiles).
- FlashInfer (``FI_SITE``: ../shared/bench/flashinfer_peer.sh's $HOME/fisite), what serving engines
  (SGLang, vLLM) call, each wrapper planned once per input set outside the timed calls:
  ``flashinfer.mla.BatchMLAPagedAttentionWrapper`` on the MLA decode rows (kind "mla": the absorbed
  decode over the latent cache; it reads the cache's 512 latent and 64 rope columns as two views of
  fa4jit's (pages, page, 1, 576) cache, no copies); ``BatchDecodeWithPagedKVCacheWrapper`` on the
  decode rows, over fa4jit's own page pool and tables (NHD, any page size) or, contiguous, each
  sequence's K/V as one page of Sk rows (no copy; FP8-KV rows: the bf16 copies the other peers
  read); ``BatchPrefillWithPagedKVCacheWrapper`` (causal, bottom-right) on the speculative rows and
  the prefill rows over a paged cache (pchunk: a chunk, a continuous-batching step);
  and ``BatchPrefillWithRaggedKVCacheWrapper`` on the varlen and continuous-batching rows (packed
  K/V and cu_seqlens, as flash_attn_varlen_func; causal aligned bottom-right as fa4jit's). Where
  FlashInfer has two kernels for a row (decode on CUDA cores or on tensor cores, chosen by the
  caller: SGLang takes tensor cores from GQA group 4) the faster on this row is kept.
  The other peers have no latent-cache form and skip the MLA rows.
"""
import importlib
import itertools
import os


class Unsupported(Exception):
    """This peer cannot run this row (the reason is the message)."""


def rot(sets, i):
    """Input set i of a row's rotating copies."""
    return sets[i % len(sets)]


def _bhsd(t):
    return t.transpose(1, 2)


def _no_latent(row, who):
    """The MLA decode rows read one latent cache as K and (its first columns) V: no form here."""
    if row.latent:
        raise Unsupported(f"{who} has no latent-cache (absorbed MLA) decode")


def _sdpa_arm(backend):
    def arm(row, data):
        _no_latent(row, "SDPA")
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import sdpa_kernel
        if row.lens:
            raise Unsupported("SDPA has no varlen form")  # paged rows: it reads the contiguous copies
        if row.shape.window or row.shape.sinks or row.shape.softcap:
            raise Unsupported("SDPA has no sliding window, sinks or softcap")
        gqa = row.shape.Hq != row.shape.Hkv
        mask = None
        causal = row.Sq > 1
        if causal and row.Sq != row.Sk:  # decode with several queries: bottom-right causal
            from torch.nn.attention.bias import causal_lower_right
            mask, causal = causal_lower_right(row.Sq, row.Sk), False
        ks, vs = data["k_bf16"], data["v_bf16"]

        def fn(i):
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(_bhsd(rot(data["q"], i)), _bhsd(rot(ks, i)), _bhsd(rot(vs, i)),
                                                      attn_mask=mask, is_causal=causal, enable_gqa=gqa)
        fn(0)
        torch.cuda.synchronize()
        return fn
    return arm


def cudnn_arm(row, data):
    from torch.nn.attention import SDPBackend
    return _sdpa_arm(SDPBackend.CUDNN_ATTENTION)(row, data)


def fa2_arm(row, data):
    from torch.nn.attention import SDPBackend
    return _sdpa_arm(SDPBackend.FLASH_ATTENTION)(row, data)


_peer_modules = {}


def peer_module(name: str, site_env: str, label: str):
    """The peer's module `name` (its site directory from the environment variable `site_env`,
    whose .pth files must run before the import), or Unsupported with the import failure: the
    peer may be absent. Imported once per process."""
    if name not in _peer_modules:
        site_dir = os.environ.get(site_env)
        if site_dir:
            import site
            site.addsitedir(site_dir)
        try:
            _peer_modules[name] = importlib.import_module(name)
        except Exception as e:  # noqa: BLE001 - any import failure means "no such peer here"
            _peer_modules[name] = f"{label} not importable: {type(e).__name__}: {e}"[:140]
    if isinstance(_peer_modules[name], str):
        raise Unsupported(_peer_modules[name])
    return _peer_modules[name]


def fa4_module():
    """flash_attn.cute (FA4_SITE: ../shared/bench/fa4_peer.sh), or Unsupported."""
    return peer_module("flash_attn.cute", "FA4_SITE", "FA4")


def fa4_arm(row, data):
    _no_latent(row, "FA4")
    import torch
    m = fa4_module()
    sh = row.shape
    kw = dict(causal=True, softcap=sh.softcap)
    if sh.window:
        kw["window_size"] = (sh.window - 1, 0)
    if sh.sinks:
        kw["learnable_sink"] = data["sinks"]
    mq, mk = row.max_seqlens()
    if row.page:  # its paged form (with cu_seqlens_q on a varlen row)
        cu_q = dict(cu_seqlens_q=data["cu_q"]) if row.lens else {}

        def fn(i):
            return m.flash_attn_varlen_func(rot(data["q"], i), data["k_pages_bf16"], data["v_pages_bf16"],
                                            seqused_k=data["seqused_k"], page_table=rot(data["page_table"], i),
                                            max_seqlen_q=mq, max_seqlen_k=mk, **cu_q, **kw)
    elif row.lens:
        def fn(i):
            return m.flash_attn_varlen_func(rot(data["q"], i), rot(data["k_bf16"], i), rot(data["v_bf16"], i),
                                            cu_seqlens_q=data["cu_q"], cu_seqlens_k=data["cu_k"],
                                            max_seqlen_q=mq, max_seqlen_k=mk, **kw)
    else:
        def fn(i):
            return m.flash_attn_func(rot(data["q"], i), rot(data["k_bf16"], i), rot(data["v_bf16"], i), **kw)
    fn(0)
    torch.cuda.synchronize()
    return fn


def flex_arm(row, data):
    import torch
    if row.kind not in ("prefill",):
        raise Unsupported("timed on prefill rows only (each shape compiles)")
    if row.shape.sinks:
        raise Unsupported("no sinks")
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    fx = torch.compile(flex_attention, dynamic=False)
    w = row.shape.window
    off = row.Sk - row.Sq

    def mask_mod(b, h, q, k):
        vis = q + off >= k
        return vis & (q + off - k < w) if w else vis
    bm = create_block_mask(mask_mod, None, None, row.Sq, row.Sk)
    cap = row.shape.softcap
    score_mod = (lambda s, b, h, q, k: cap * torch.tanh(s / cap)) if cap else None
    gqa = row.shape.Hq != row.shape.Hkv

    def fn(i):
        return fx(_bhsd(rot(data["q"], i)), _bhsd(rot(data["k_bf16"], i)), _bhsd(rot(data["v_bf16"], i)),
                  block_mask=bm, score_mod=score_mod, enable_gqa=gqa)
    fn(0)
    torch.cuda.synchronize()
    return fn


def flashinfer_module(name="flashinfer"):
    """flashinfer (FI_SITE: ../shared/bench/flashinfer_peer.sh's $HOME/fisite), or Unsupported."""
    return peer_module(name, "FI_SITE", "FlashInfer")


def _fi_workspace(dev):
    import torch
    return torch.empty(128 << 20, dtype=torch.int8, device=dev)


def _faster(fns, calls=10):
    """The fastest of ``fns`` (each already run once) over a few calls of input set 0: for a peer
    whose caller picks among kernels, the pick that serves this row best."""
    import torch
    if len(fns) == 1:
        return fns[0]
    times = []
    for fn in fns:
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(calls):
            fn(0)
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    return fns[times.index(min(times))]


def _fi_features(sh, who):
    if sh.sinks:
        raise Unsupported(f"{who}: no attention sinks here")
    if sh.dv != sh.D:
        raise Unsupported(f"{who}: one head dim for K and V")
    return dict(window_left=sh.window - 1 if sh.window else -1, logits_soft_cap=sh.softcap or None,
                sm_scale=sh.softmax_scale)


def _flashinfer_mla(row, data):
    m = flashinfer_module("flashinfer.mla")
    import torch
    sh = row.shape
    B, Sq, H = row.B, row.Sq, sh.Hq
    ckv_dim, kpe_dim = sh.dv, sh.D - sh.dv  # 512 latent, 64 rope
    dev = data["kv_pages"].device
    cache = data["kv_pages"][:, :, 0]  # (pages, page, 576)
    ckv, kpe = cache[..., :ckv_dim], cache[..., ckv_dim:]
    per_seq = row.Sk // row.page
    i32 = dict(dtype=torch.int32, device=dev)
    qo_indptr = torch.arange(B + 1, **i32) * Sq
    kv_indptr = torch.arange(B + 1, **i32) * per_seq
    kv_len = data["seqused_k"]
    wrappers = []
    for table in data["page_table"]:  # one plan per input set's page table
        w = m.BatchMLAPagedAttentionWrapper(_fi_workspace(dev))
        w.plan(qo_indptr, kv_indptr, table.reshape(-1), kv_len, H, ckv_dim, kpe_dim, row.page, True,
               sh.softmax_scale, data["q"][0].dtype, cache.dtype)
        wrappers.append(w)

    def fn(i):
        q = rot(data["q"], i).reshape(B * Sq, H, sh.D)
        return rot(wrappers, i).run(q[..., :ckv_dim], q[..., ckv_dim:], ckv, kpe).view(B, Sq, H, ckv_dim)
    fn(0)
    torch.cuda.synchronize()
    return fn


def _fi_pages(row, data):
    """The row's K/V as FlashInfer's paged cache (NHD): (page size, the flat page indices of each
    input set (every sequence's pages in order), its kv_indptr, its last-page lengths, cache(i): set
    i's (K, V) pages). A paged row's own pool and tables (a varlen row's table rows are padded past
    each sequence's pages: cut); a contiguous row's (B, Sk, Hkv, D) tensors are B pages of Sk rows (no
    copy), every set's table the identity."""
    import torch
    dev = data["q"][0].device
    page = row.page or row.Sk
    counts = [-(-k // page) for _, k in row.seqs()]
    if row.page:
        tables = [torch.cat([t[:c] for t, c in zip(table, counts)]) for table in data["page_table"]]
        cache = lambda i: (data["k_pages_bf16"], data["v_pages_bf16"])  # noqa: E731
    else:
        tables = [torch.arange(row.B, dtype=torch.int32, device=dev)]
        cache = lambda i: (rot(data["k_bf16"], i), rot(data["v_bf16"], i))  # noqa: E731
    i32 = dict(dtype=torch.int32, device=dev)
    indptr = torch.tensor(list(itertools.accumulate(counts, initial=0)), **i32)
    last = torch.tensor([k - (c - 1) * page for (_, k), c in zip(row.seqs(), counts)], **i32)
    return page, tables, indptr, last, cache


def _flashinfer_paged(row, data):
    """Rows over paged or contiguous K/V: the decode wrapper (the faster of its CUDA-core and
    tensor-core kernels) for one query per sequence, the paged prefill wrapper (causal, bottom-right)
    for several (speculative rows, prefill chunks, a continuous-batching step over a paged cache)."""
    feats = _fi_features(row.shape, "FlashInfer paged")
    fi = flashinfer_module()
    import torch
    sh = row.shape
    dev = data["q"][0].device
    page, tables, indptr, last, cache = _fi_pages(row, data)
    dtypes = dict(q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)
    work = _fi_workspace(dev)
    if not row.lens and row.Sq == 1:
        def make(tensor_cores):
            return fi.BatchDecodeWithPagedKVCacheWrapper(work, "NHD", use_tensor_cores=tensor_cores)

        def plan(w, table):
            w.plan(indptr, table, last, sh.Hq, sh.Hkv, sh.D, page, **dtypes, **feats)
        modes = (False, True)
    else:
        qo = itertools.accumulate((q for q, _ in row.seqs()), initial=0)
        qo_indptr = torch.tensor(list(qo), dtype=torch.int32, device=dev)

        def make(_):
            return fi.BatchPrefillWithPagedKVCacheWrapper(work, "NHD")

        def plan(w, table):
            w.plan(qo_indptr, indptr, table, last, sh.Hq, sh.Hkv, sh.D, page, causal=True, **dtypes, **feats)
        modes = (True,)
    fns, reason = [], ""
    for mode in modes:
        try:
            wrappers = []
            for table in tables:  # one plan per input set's page table
                wrappers.append(make(mode))
                plan(wrappers[-1], table)

            def fn(i, wrappers=wrappers):
                q = rot(data["q"], i)
                return rot(wrappers, i).run(q.reshape(-1, sh.Hq, sh.D), cache(i)).view(q.shape)
            fn(0)
            torch.cuda.synchronize()
            fns.append(fn)
        except Exception as e:  # noqa: BLE001 - a group its CUDA-core decode does not take: the other kernel
            reason = f"FlashInfer paged (tensor cores {mode}): {type(e).__name__}: {e}"[:140]
    if not fns:
        raise Unsupported(reason)
    return _faster(fns)


def _flashinfer_ragged(row, data):
    feats = _fi_features(row.shape, "FlashInfer ragged prefill")
    fi = flashinfer_module()
    import torch
    sh = row.shape
    w = fi.BatchPrefillWithRaggedKVCacheWrapper(_fi_workspace(data["cu_q"].device), "NHD")
    w.plan(data["cu_q"], data["cu_k"], sh.Hq, sh.Hkv, sh.D, causal=True, q_data_type=torch.bfloat16,
           kv_data_type=torch.bfloat16, **feats)

    def fn(i):
        return w.run(rot(data["q"], i), rot(data["k_bf16"], i), rot(data["v_bf16"], i))
    fn(0)
    torch.cuda.synchronize()
    return fn


def flashinfer_arm(row, data):
    if row.latent:  # mla and mla8 (whose peers read a bf16 cache of the same values)
        return _flashinfer_mla(row, data)
    if row.lens and not row.page:
        return _flashinfer_ragged(row, data)
    if row.page or row.kind in ("decode", "spec", "fp8kv"):
        return _flashinfer_paged(row, data)
    raise Unsupported("timed on the MLA, decode (paged, contiguous, speculative), varlen and paged prefill rows")


PEERS = {"cudnn": cudnn_arm, "fa2": fa2_arm, "fa4": fa4_arm, "flex": flex_arm, "flashinfer": flashinfer_arm}
