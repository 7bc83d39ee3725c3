"""fa4jit.flash_attn_interface on a GPU, called exactly as FlashAttention-3's own tests and vLLM's
FlashAttention backend call it, against fa4jit's ops (the same kernels: equal outputs) and the float64
reference (tests/python/reference.py); KV append, rotary embedding and merge_state on the device.
Skips without a CUDA GPU (`tools/gpu.sh python` runs it on the lent machine)."""
import math

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (the torch-layer tests need it)")
import fa4jit  # noqa: E402
from fa4jit.flash_attn_interface import (apply_rotary_emb, flash_attn_func, flash_attn_varlen_func,  # noqa: E402
                                         flash_attn_with_kvcache, merge_state)
from reference import REL_L2, assert_close, attention_ref, rel_l2  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="no CUDA GPU visible to torch (run tools/gpu.sh python on a GPU machine)")

DTYPES = [torch.bfloat16, torch.float16]


def rnd(*shape, dtype=torch.bfloat16, seed=0):
    g = torch.Generator(device="cuda")
    g.manual_seed(seed)
    return torch.randn(*shape, generator=g, device="cuda", dtype=torch.float32).to(dtype)


def ref_varlen(q, k, v, cu_q, cu_k, causal, window=None, seqused_k=None):
    """Float64 reference per packed sequence: (total_q, Hq, D) and lse (Hq, total_q)."""
    outs, lses = [], []
    for b in range(cu_q.shape[0] - 1):
        qs, qe, ks, ke = int(cu_q[b]), int(cu_q[b + 1]), int(cu_k[b]), int(cu_k[b + 1])
        used = None if seqused_k is None else seqused_k[b:b + 1]
        o, lse = attention_ref(q[qs:qe].unsqueeze(0), k[ks:ke].unsqueeze(0), v[ks:ke].unsqueeze(0), causal=causal,
                               window=window, seqused_k=used)
        outs.append(o[0])
        lses.append(lse[0])
    return torch.cat(outs), torch.cat(lses, dim=1)


# ---- flash_attn_func, as FlashAttention-3's tests call it ------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("window_size", [(-1, -1), (64, 0)])
@pytest.mark.parametrize("softcap", [0.0, 15.0])
def test_flash_attn_func_as_fa3_tests_call_it(dtype, causal, window_size, softcap):
    B, Sq, Sk, Hq, Hkv, D = 2, 197, 333, 8, 2, 128
    q, k, v = rnd(B, Sq, Hq, D, dtype=dtype, seed=1), rnd(B, Sk, Hkv, D, dtype=dtype, seed=2), \
        rnd(B, Sk, Hkv, D, dtype=dtype, seed=3)
    out, lse = flash_attn_func(q, k, v, causal=causal, window_size=window_size, softcap=softcap,
                               return_attn_probs=True)
    only = flash_attn_func(q, k, v, None, causal, window_size=window_size, softcap=softcap)
    window = None if window_size == (-1, -1) else window_size
    o2, lse2 = fa4jit.attention(q, k, v, causal=causal, window=window, softcap=softcap, return_lse=True)
    torch.cuda.synchronize()
    assert torch.equal(out, o2) and torch.equal(lse, lse2) and torch.equal(only, out), "the same kernel as the op"
    ref, ref_lse = attention_ref(q, k, v, causal=causal, window=window, softcap=softcap)
    assert_close(out, ref, dtype, lse, ref_lse, what="flash_attn_func vs float64")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [False, True])
def test_flash_attn_varlen_func_as_fa3_tests_call_it(dtype, causal):
    lens_q, lens_k = [5, 0, 130, 64], [300, 17, 130, 64]
    Hq, Hkv, D = 8, 2, 128
    cu_q = torch.tensor([0] + lens_q, device="cuda").cumsum(0).to(torch.int32)
    cu_k = torch.tensor([0] + lens_k, device="cuda").cumsum(0).to(torch.int32)
    q = rnd(sum(lens_q), Hq, D, dtype=dtype, seed=4)
    k, v = rnd(sum(lens_k), Hkv, D, dtype=dtype, seed=5), rnd(sum(lens_k), Hkv, D, dtype=dtype, seed=6)
    out, lse = flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), causal=causal,
                                      return_attn_probs=True)
    o2, lse2 = fa4jit.attention_varlen(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), causal=causal, return_lse=True)
    torch.cuda.synchronize()
    assert torch.equal(out, o2) and torch.equal(lse, lse2)
    ref, ref_lse = ref_varlen(q, k, v, cu_q.cpu(), cu_k.cpu(), causal)
    assert_close(out, ref, dtype, lse, ref_lse, what="flash_attn_varlen_func vs float64")


# ---- vLLM's FlashAttention backend: varlen queries over the paged cache ---------------------------------

def paged_cache(lens_k, Hkv, D, page, dtype, seed):
    """A shuffled paged cache holding each sequence's keys, its block table, and the dense keys."""
    pages = [math.ceil(n / page) for n in lens_k]
    max_pages = max(pages)
    num_blocks = sum(pages) + 3
    perm = torch.randperm(num_blocks, generator=torch.Generator().manual_seed(seed)).tolist()
    table = torch.zeros(len(lens_k), max_pages, dtype=torch.int32)
    kc = rnd(num_blocks, page, Hkv, D, dtype=dtype, seed=seed)
    vc = rnd(num_blocks, page, Hkv, D, dtype=dtype, seed=seed + 1)
    n = 0
    for b, p in enumerate(pages):
        table[b, :p] = torch.tensor(perm[n:n + p])
        table[b, p:] = perm[n]  # entries past a sequence's pages: still valid page indices
        n += p
    table = table.cuda()
    dense_k = torch.cat([kc[table[b]].reshape(-1, Hkv, D)[:lens_k[b]] for b in range(len(lens_k))])
    dense_v = torch.cat([vc[table[b]].reshape(-1, Hkv, D)[:lens_k[b]] for b in range(len(lens_k))])
    return kc, vc, table, dense_k, dense_v


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("sliding_window", [None, 128])
def test_flash_attn_varlen_func_as_vllm_calls_it(dtype, sliding_window):
    # vllm/v1/attention/backends/flash_attn.py: chunked prefill and decode in one batch, k/v the paged
    # cache, out given, descale factors None (bf16/fp16 cache).
    query_lens, seq_lens = [1, 1, 37, 200], [513, 64, 300, 200]
    Hq, Hkv, D, block_size = 16, 4, 128, 16
    kc, vc, block_table, dense_k, dense_v = paged_cache(seq_lens, Hkv, D, block_size, dtype, seed=7)
    cu_seqlens_q = torch.tensor([0] + query_lens, device="cuda").cumsum(0).to(torch.int32)
    seqused_k = torch.tensor(seq_lens, dtype=torch.int32, device="cuda")
    query = rnd(sum(query_lens), Hq, D, dtype=dtype, seed=9)
    output = torch.empty_like(query)
    window_size = (-1, -1) if sliding_window is None else (sliding_window - 1, 0)
    scale = D ** -0.5
    flash_attn_varlen_func(
        q=query, k=kc, v=vc, out=output, cu_seqlens_q=cu_seqlens_q, max_seqlen_q=max(query_lens),
        seqused_k=seqused_k, max_seqlen_k=max(seq_lens), softmax_scale=scale, causal=True, alibi_slopes=None,
        window_size=window_size, block_table=block_table, softcap=0, scheduler_metadata=None, fa_version=3,
        q_descale=None, k_descale=None, v_descale=None, num_splits=0, s_aux=None)
    direct = fa4jit.attention_paged(query, kc, vc, block_table, seqused_k, causal=True, cu_seqlens_q=cu_seqlens_q,
                                    max_seqlen_q=max(query_lens), softmax_scale=scale,
                                    window=None if sliding_window is None else window_size,
                                    max_seqlen_k=max(seq_lens))
    torch.cuda.synchronize()
    assert torch.equal(output, direct), "the same kernel as attention_paged"
    cu_k = torch.tensor([0] + seq_lens).cumsum(0)
    ref, _ = ref_varlen(query, dense_k, dense_v, cu_seqlens_q.cpu(), cu_k, True,
                        window=None if sliding_window is None else window_size)
    assert_close(output, ref, dtype, what="vLLM paged varlen vs float64")

    if sliding_window is not None:
        return
    # Cascade attention as vLLM does it: the shared prefix and the rest, each with its LSE, merged.
    prefix = 64  # the first 4 pages of sequence 0, decode query 0 only
    q0 = query[:1]
    cu1 = torch.tensor([0, 1], dtype=torch.int32, device="cuda")
    o_a, s_a = flash_attn_varlen_func(q=q0, k=kc, v=vc, cu_seqlens_q=cu1, max_seqlen_q=1,
                                      seqused_k=torch.tensor([prefix], dtype=torch.int32, device="cuda"),
                                      max_seqlen_k=prefix, causal=False, block_table=block_table[:1],
                                      return_softmax_lse=True)
    rest_table = block_table[:1, prefix // block_size:].contiguous()
    o_b, s_b = flash_attn_varlen_func(q=q0, k=kc, v=vc, cu_seqlens_q=cu1, max_seqlen_q=1,
                                      seqused_k=torch.tensor([seq_lens[0] - prefix], dtype=torch.int32,
                                                             device="cuda"),
                                      max_seqlen_k=seq_lens[0] - prefix, causal=False, block_table=rest_table,
                                      return_softmax_lse=True)
    merged, _ = merge_state(o_a, s_a.t(), o_b, s_b.t())  # varlen lse (H, total_q) -> (total_q, H)
    assert rel_l2(merged, output[:1]) <= 2 * REL_L2[dtype], "cascade merge vs one pass"


# ---- flash_attn_with_kvcache, as FlashAttention's kvcache test and vLLM's decode call it ----------------

def cos_sin(seqlen_ro, rotary_dim):
    inv = 1.0 / 10000.0 ** (torch.arange(0, rotary_dim, 2, device="cuda", dtype=torch.float32) / rotary_dim)
    ang = torch.outer(torch.arange(seqlen_ro, device="cuda", dtype=torch.float32), inv)
    return ang.cos(), ang.sin()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("paged", [False, True])
@pytest.mark.parametrize("rotary_interleaved", [False, True])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("has_batch_idx", [False, True])
def test_flash_attn_with_kvcache_as_fa_tests_call_it(dtype, paged, rotary_interleaved, causal, has_batch_idx):
    if paged and has_batch_idx:
        pytest.skip("FlashAttention has no cache_batch_idx with a paged cache either")
    B, Sq, S_new, S_cache, Hq, Hkv, D, page = 3, 4, 4, 256, 8, 2, 128, 16
    rotary_dim = D // 2
    q = rnd(B, Sq, Hq, D, dtype=dtype, seed=10)
    k, v = rnd(B, S_new, Hkv, D, dtype=dtype, seed=11), rnd(B, S_new, Hkv, D, dtype=dtype, seed=12)
    cache_seqlens = torch.tensor([0, 100, S_cache - S_new], dtype=torch.int32, device="cuda")
    rotary_cos, rotary_sin = cos_sin(S_cache, rotary_dim)
    if paged:
        num_blocks = B * S_cache // page
        k_cache, v_cache = rnd(num_blocks, page, Hkv, D, dtype=dtype, seed=13), \
            rnd(num_blocks, page, Hkv, D, dtype=dtype, seed=14)
        block_table = torch.randperm(num_blocks, device="cuda").to(torch.int32).view(B, S_cache // page)
        kw = dict(block_table=block_table)
        dense = lambda c: c[block_table.long()].reshape(B, S_cache, Hkv, D)  # noqa: E731
    else:
        k_cache, v_cache = rnd(B + 1, S_cache, Hkv, D, dtype=dtype, seed=13), \
            rnd(B + 1, S_cache, Hkv, D, dtype=dtype, seed=14)
        batch_idx = torch.tensor([2, 0, 3], dtype=torch.int32, device="cuda") if has_batch_idx else None
        kw = dict(cache_batch_idx=batch_idx)
        rows = batch_idx.long() if has_batch_idx else torch.arange(B, device="cuda")
        dense = lambda c: c[rows]  # noqa: E731
    k_before, v_before = dense(k_cache).clone(), dense(v_cache).clone()
    out, lse = flash_attn_with_kvcache(q, k_cache, v_cache, k, v, rotary_cos=rotary_cos, rotary_sin=rotary_sin,
                                       cache_seqlens=cache_seqlens, causal=causal,
                                       rotary_interleaved=rotary_interleaved, return_softmax_lse=True, **kw)
    torch.cuda.synchronize()
    # The expected cache: the old one with the rotated new keys (and the plain new values) appended.
    k_rot = apply_rotary_emb(k, rotary_cos, rotary_sin, rotary_interleaved, seqlen_offsets=cache_seqlens)
    # q: token i at cache_seqlens + i when causal, every token at cache_seqlens otherwise (FA's rule).
    if causal:
        q_rot = apply_rotary_emb(q, rotary_cos, rotary_sin, rotary_interleaved, seqlen_offsets=cache_seqlens)
    else:
        q_rot = torch.cat([apply_rotary_emb(q[:, i:i + 1], rotary_cos, rotary_sin, rotary_interleaved,
                                            seqlen_offsets=cache_seqlens) for i in range(Sq)], dim=1)
    k_want, v_want = k_before.clone(), v_before.clone()
    for b in range(B):
        s = int(cache_seqlens[b])
        k_want[b, s:s + S_new], v_want[b, s:s + S_new] = k_rot[b], v[b]
    assert torch.equal(dense(k_cache), k_want) and torch.equal(dense(v_cache), v_want)
    used = cache_seqlens + S_new
    ref, ref_lse = attention_ref(q_rot, k_want, v_want, causal=causal, seqused_k=used)
    assert_close(out, ref, dtype, lse, ref_lse, what="flash_attn_with_kvcache vs float64")
    # The existing op over the updated cache of the sequence that fills it, with the rotated q.
    direct = fa4jit.attention(q_rot[2:], k_want[2:], v_want[2:], causal=causal)
    assert int(used[2]) == S_cache and rel_l2(out[2:], direct) <= 2 * REL_L2[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
def test_flash_attn_with_kvcache_decode_as_vllm_calls_it(dtype):
    # vLLM's decode: q.unsqueeze(1) over the paged cache, block_table, cache_seqlens, out given.
    seq_lens = [1, 77, 1024, 300]
    Hq, Hkv, D, block_size = 32, 8, 128, 16
    kc, vc, block_table, dense_k, dense_v = paged_cache(seq_lens, Hkv, D, block_size, dtype, seed=20)
    decode_query = rnd(len(seq_lens), Hq, D, dtype=dtype, seed=21)
    out = torch.empty(len(seq_lens), 1, Hq, D, dtype=dtype, device="cuda")
    scale = D ** -0.5
    cache_seqlens = torch.tensor(seq_lens, dtype=torch.int32, device="cuda")
    r = flash_attn_with_kvcache(q=decode_query.unsqueeze(1), k_cache=kc, v_cache=vc, block_table=block_table,
                                cache_seqlens=cache_seqlens, softmax_scale=scale, causal=True, window_size=(-1, -1),
                                alibi_slopes=None, softcap=0.0, out=out)
    direct = fa4jit.attention_paged(decode_query.unsqueeze(1), kc, vc, block_table, cache_seqlens, causal=True,
                                    softmax_scale=scale)
    torch.cuda.synchronize()
    assert r is out and torch.equal(out, direct)
    cu_q = torch.arange(len(seq_lens) + 1)
    cu_k = torch.tensor([0] + seq_lens).cumsum(0)
    ref, _ = ref_varlen(decode_query, dense_k, dense_v, cu_q, cu_k, True)
    assert_close(out.squeeze(1), ref, dtype, what="vLLM decode vs float64")


# ---- FP8: descale factors of any stride ------------------------------------------------------------------

def test_fp8_descale_expanded_like_vllm_matches_contiguous():
    if not hasattr(torch, "float8_e4m3fn") or torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("FP8 inputs run on sm_90a (Hopper) only")
    fp8 = torch.float8_e4m3fn
    query_lens, seq_lens = [1, 64], [300, 64]
    Hq, Hkv, D, block_size = 8, 2, 128, 16
    kc, vc, block_table, _, _ = paged_cache(seq_lens, Hkv, D, block_size, torch.bfloat16, seed=30)
    kc8, vc8 = (kc * 4).to(fp8), (vc * 4).to(fp8)
    q = rnd(sum(query_lens), Hq, D, seed=31)
    q8 = (q * 4).to(fp8)
    cu_q = torch.tensor([0] + query_lens, device="cuda").cumsum(0).to(torch.int32)
    seqused = torch.tensor(seq_lens, dtype=torch.int32, device="cuda")
    scale = torch.tensor([0.25], device="cuda")
    shape = (len(seq_lens), Hkv)  # vLLM: (cu_seqlens_q.shape[0] - 1, num_kv_heads)
    out = flash_attn_varlen_func(q=q8, k=kc8, v=vc8, cu_seqlens_q=cu_q, max_seqlen_q=max(query_lens),
                                 seqused_k=seqused, max_seqlen_k=max(seq_lens), causal=True, block_table=block_table,
                                 q_descale=scale.expand(shape), k_descale=scale.expand(shape),
                                 v_descale=scale.expand(shape))
    full = torch.full(shape, 0.25, device="cuda")
    direct = fa4jit.attention_paged(q8, kc8, vc8, block_table, seqused, causal=True, cu_seqlens_q=cu_q,
                                    max_seqlen_q=max(query_lens), descale_q=full, descale_k=full, descale_v=full,
                                    max_seqlen_k=max(seq_lens))
    torch.cuda.synchronize()
    assert torch.equal(out, direct)


# ---- merge_state on the device ------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
def test_merge_state_of_two_key_halves_is_attention_over_all(dtype):
    B, Sq, Sk, Hq, Hkv, D = 2, 64, 1000, 8, 2, 128
    q, k, v = rnd(B, Sq, Hq, D, dtype=dtype, seed=40), rnd(B, Sk, Hkv, D, dtype=dtype, seed=41), \
        rnd(B, Sk, Hkv, D, dtype=dtype, seed=42)
    o_a, lse_a = fa4jit.attention(q, k[:, :384], v[:, :384], return_lse=True)
    o_b, lse_b = fa4jit.attention(q, k[:, 384:], v[:, 384:], return_lse=True)
    o, lse = fa4jit.attention(q, k, v, return_lse=True)
    vm, sm = fa4jit.merge_state(o_a, lse_a.transpose(1, 2), o_b, lse_b.transpose(1, 2))
    torch.cuda.synchronize()
    assert vm.dtype == dtype and rel_l2(vm, o) <= 2 * REL_L2[dtype]
    assert (sm - lse.transpose(1, 2)).abs().max().item() < 1e-3
