"""fa4jit's FlexAttention front end on a GPU: Python mods traced into snippets and tile maps derived from
masks, against the float64 reference (tests/python/reference.py) and torch's own flex_attention.
Skips without a CUDA GPU (`tools/gpu.sh python` runs it on the lent machine)."""
import itertools
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (the torch-layer tests need it)")

import fa4jit  # noqa: E402
from fa4jit import flex  # noqa: E402
from reference import REL_L2, assert_close, attention_ref, rel_l2  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="no CUDA GPU visible to torch (run tools/gpu.sh python on a GPU machine)")


def rnd(*shape, dtype=torch.bfloat16, seed=0):
    g = torch.Generator(device="cuda")
    g.manual_seed(seed)
    return torch.randn(*shape, generator=g, device="cuda", dtype=torch.float32).to(dtype)


def bhsd(B, H, Hkv, Sq, Sk, D=128, dtype=torch.bfloat16, seed=0):
    return (rnd(B, H, Sq, D, dtype=dtype, seed=seed), rnd(B, Hkv, Sk, D, dtype=dtype, seed=seed + 1),
            rnd(B, Hkv, Sk, D, dtype=dtype, seed=seed + 2))


def _grid(fn, B, H, Sq, Sk, score=None, device="cuda"):
    """fn over every (b, h, q, kv) with vmap (FlexAttention's semantics): (B, H, Sq, Sk)."""
    f = fn
    for d in ((None, None, None, 0), (None, None, 0, None), (None, 0, None, None), (0, None, None, None)):
        f = torch.vmap(f, in_dims=d if score is None else (0,) + d)
    ar = [torch.arange(n, device=device, dtype=torch.int32) for n in (B, H, Sq, Sk)]
    return f(*ar) if score is None else f(score, *ar)


def reference(q, k, v, mask_mod=None, score_mod=None, scale=None):
    """float64 reference for (B, H, S, D) inputs: returns o (B, H, Sq, D), lse (B, H, Sq)."""
    B, H, Sq, _ = q.shape
    Sk = k.shape[2]
    mask_fn = score_fn = None
    if mask_mod is not None:
        m = _grid(mask_mod, B, H, Sq, Sk).expand(B, H, Sq, Sk)
        mask_fn = lambda b, h, qi, ki: m  # noqa: E731
    if score_mod is not None:
        score_fn = lambda s, b, h, qi, ki: _grid(score_mod, B, H, Sq, Sk, score=s)  # noqa: E731
    o, lse = attention_ref(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), scale=scale, mask_fn=mask_fn,
                           score_fn=score_fn)
    return o.transpose(1, 2), lse


def torch_flex():
    fa = pytest.importorskip("torch.nn.attention.flex_attention")
    return fa, torch.compile(fa.flex_attention, dynamic=False)


# ---- FlexAttention's documented mods ----------------------------------------------------------------

def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def sliding_window(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx - kv_idx <= 256)


def prefix_lm(b, h, q_idx, kv_idx):
    return (kv_idx <= 300) | (q_idx >= kv_idx)


def dilated(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & ((q_idx - kv_idx) % 3 == 0)


def strided(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & ((kv_idx // 128) % 2 == 0) | (q_idx // 128 == kv_idx // 128) & (q_idx >= kv_idx)


def softcap(score, b, h, q_idx, kv_idx):
    return 20.0 * torch.tanh(score / 20.0)


def alibi(score, b, h, q_idx, kv_idx):
    return score - torch.exp2(-(h + 1) * 8.0 / 8) * (q_idx - kv_idx).abs()


def doc_ids(B, S, seed, device="cuda"):
    g = torch.Generator().manual_seed(seed)
    ids = torch.zeros(B, S, dtype=torch.int32)
    for b in range(B):
        cuts = sorted(torch.randperm(S - 1, generator=g)[:5].add(1).tolist())
        for c in cuts:
            ids[b, c:] += 1
    return ids.to(device)


MASKS = [causal, sliding_window, prefix_lm, dilated, strided, None]
SCORES = [None, softcap, alibi]


@pytest.mark.parametrize("mask_mod", MASKS, ids=lambda m: getattr(m, "__name__", "none"))
@pytest.mark.parametrize("score_mod", SCORES, ids=lambda m: getattr(m, "__name__", "none"))
def test_documented_mods_against_reference_and_flex(mask_mod, score_mod):
    B, H, S = 2, 4, 1024
    q, k, v = bhsd(B, H, H, S, S, seed=1)
    bm = None if mask_mod is None else fa4jit.create_block_mask(mask_mod, None, None, S, S, device="cuda")
    o, lse = fa4jit.flex_attention(q, k, v, score_mod=score_mod, block_mask=bm, return_lse=True)
    ref_o, ref_lse = reference(q, k, v, mask_mod, score_mod)
    assert_close(o, ref_o, torch.bfloat16, lse, ref_lse, what=f"{mask_mod} {score_mod}")
    fa, flex_c = torch_flex()
    tbm = None if mask_mod is None else fa.create_block_mask(mask_mod, None, None, S, S, device="cuda")
    theirs = flex_c(q, k, v, score_mod=score_mod, block_mask=tbm)
    assert rel_l2(o, theirs) <= 2 * REL_L2[torch.bfloat16]
    if tbm is not None:  # FlexAttention's own BlockMask: the same results
        o2, lse2 = fa4jit.flex_attention(q, k, v, score_mod=score_mod, block_mask=tbm, return_lse=True)
        assert_close(o2, ref_o, torch.bfloat16, lse2, ref_lse, what=f"{mask_mod} {score_mod}, torch's BlockMask")
    if hasattr(fa, "AuxRequest"):  # FlexAttention's newer spelling of return_lse
        o3, aux = fa4jit.flex_attention(q, k, v, score_mod=score_mod, block_mask=bm, return_aux=fa.AuxRequest(lse=True))
        assert_close(o3, ref_o, torch.bfloat16, aux.lse, ref_lse, what=f"{mask_mod} {score_mod}, return_aux")


def test_alibi_with_captured_slopes_runs_the_built_in_alibi_and_reads_them_live():
    """FlexAttention's documented ALiBi (score + slopes[h] * (kv_idx - q_idx) under a causal mask) runs
    fa4jit's built-in score-mod with the captured slopes tensor itself: written in place, the next
    call sees the new slopes, as the traced snippet would."""
    B, H, Hkv, S = 2, 8, 2, 640
    q, k, v = bhsd(B, H, Hkv, S, S, seed=9)
    slopes = torch.exp2(-torch.arange(1, H + 1, device="cuda", dtype=torch.float32))

    def alibi_documented(score, b, h, q_idx, kv_idx):
        return score + slopes[h] * (kv_idx - q_idx)

    bm = fa4jit.create_block_mask(causal, None, None, S, S, device="cuda")
    assert flex._builtin_alibi(flex._traced(alibi_documented, "score"), H, True, q.device) is slopes
    kr, vr = k.repeat_interleave(H // Hkv, 1), v.repeat_interleave(H // Hkv, 1)
    for step in range(2):
        if step:
            slopes.copy_(torch.rand(H, device="cuda") * 0.2)
        o, lse = fa4jit.flex_attention(q, k, v, score_mod=alibi_documented, block_mask=bm, enable_gqa=True,
                                       return_lse=True)
        ref_o, ref_lse = reference(q, kr, vr, causal, alibi_documented)
        assert_close(o, ref_o, torch.bfloat16, lse, ref_lse, what=f"documented alibi, step {step}")


def test_captured_scalar_tensors_are_read_live():
    """A shape-() tensor on the GPU captured by a mod (a scale, an index) is an aux tensor like any
    other: written in place, the next call sees the new value (it used to be baked into the snippet
    at its first trace). A constant made in the mod's body stays a literal."""
    B, H, S = 2, 4, 384
    q, k, v = bhsd(B, H, H, S, S, seed=11)
    temp = torch.tensor(0.5, device="cuda")
    row = torch.tensor(1, device="cuda")
    bias = torch.randn(3, S, device="cuda")

    def mod(score, b, h, q_idx, kv_idx):
        return score * temp + bias[row, kv_idx] + torch.tensor(0.25)

    from fa4jit import _trace
    t = _trace.trace(mod, "score")
    assert len(t.aux) == 3 and "0.25f" in t.snippet, t.snippet
    for step in range(2):
        if step:
            temp.fill_(1.5)
            row.fill_(2)
        o, lse = fa4jit.flex_attention(q, k, v, score_mod=mod, block_mask=None, return_lse=True)
        ref_o, ref_lse = reference(q, k, v, None, mod)
        assert_close(o, ref_o, torch.bfloat16, lse, ref_lse, what=f"live scalars, step {step}")


def test_gpt_fast_decode_with_a_sliced_block_mask():
    """gpt-fast's FlexAttention decode over a static cache: the causal BlockMask of the whole cache,
    sliced to the query's block row each step (block_mask[:, :, input_pos // 128]), its mask_mod
    offset by the position (input_pos[0], a view of a device tensor, captured) and its seq_lengths
    set to (1, max_seq_length). The offset is read live: one traced mod serves every step."""
    fa, _ = torch_flex()
    B, H, S = 2, 4, 1024
    _, k, v = bhsd(B, H, H, 1, S, seed=12)
    whole = fa.create_block_mask(causal, None, None, S, S, device="cuda")
    input_pos = torch.zeros(1, dtype=torch.long, device="cuda")

    def offset(mask_mod, off):
        def shifted(b, h, q_idx, kv_idx):
            return mask_mod(b, h, q_idx + off, kv_idx)
        return shifted

    shifted = offset(causal, input_pos[0])
    for pos in (0, 127, 128, 700, S - 1):
        input_pos.fill_(pos)
        q = rnd(B, H, 1, 128, seed=pos)
        m = whole[:, :, input_pos // 128]
        m.mask_mod = shifted
        m.seq_lengths = (1, S)
        o, lse = fa4jit.flex_attention(q, k, v, block_mask=m, return_lse=True)
        ref_o, ref_lse = reference(q, k, v, lambda b, h, q_idx, kv_idx: kv_idx <= q_idx + pos)
        assert_close(o, ref_o, torch.bfloat16, lse, ref_lse, what=f"gpt-fast decode at {pos}")


def test_relative_position_bias_captured_tensor_and_gqa():
    B, H, Hkv, Sq, Sk = 2, 8, 2, 384, 640
    q, k, v = bhsd(B, H, Hkv, Sq, Sk, seed=2)
    rel = torch.randn(H, Sq + Sk, device="cuda")

    def relpos(score, b, h, q_idx, kv_idx):
        return score + rel[h, q_idx - kv_idx + Sk]

    o, lse = fa4jit.flex_attention(q, k, v, score_mod=relpos, enable_gqa=True, return_lse=True, scale=0.07)
    kr, vr = k.repeat_interleave(H // Hkv, 1), v.repeat_interleave(H // Hkv, 1)
    ref_o, ref_lse = reference(q, kr, vr, None, relpos, scale=0.07)
    assert_close(o, ref_o, torch.bfloat16, lse, ref_lse, what="relpos gqa")


def test_short_vectors_and_views_of_one_base():
    """Mods over captured rows (a Euclidean distance over (S, 3) positions, a rope dot product, top-k
    KV tiles per Q tile with .any()) and views of one table (four aux reads of one base), against the
    float64 reference; the tile map of the top-k mask (automatic) skips the unselected tiles; an
    in-place write to the viewed base reaches the next call."""
    B, H, S = 2, 4, 640
    q, k, v = bhsd(B, H, H, S, S, seed=12)
    g = torch.Generator(device="cuda").manual_seed(12)
    pos = torch.randn(S, 3, device="cuda", generator=g)
    rope_q, rope_k = (torch.randn(B, S, 16, device="cuda", generator=g) for _ in range(2))
    topk = torch.randint(0, S // 128, (B, S // 128, 2), device="cuda", generator=g, dtype=torch.int32)
    table = torch.randn(H, 4, 8, device="cuda", generator=g)
    steps = [table[:, n] for n in range(4)]

    def geometry(score, b, h, q_idx, kv_idx):
        d = (pos[q_idx] - pos[kv_idx]).pow(2).sum(-1).sqrt()
        return score - 0.5 * d + 0.1 * torch.dot(rope_q[b, q_idx], rope_k[b, kv_idx])

    def path(score, b, h, q_idx, kv_idx):
        total = score
        for n, step in enumerate(steps):
            total = total + step[h, (q_idx + n * kv_idx) % 8]
        return total

    def selected(b, h, q_idx, kv_idx):
        return (topk[b, q_idx // 128] == (kv_idx // 128).unsqueeze(-1)).any(dim=-1) | (q_idx // 128 == kv_idx // 128)

    bm = fa4jit.create_block_mask(selected, B, None, S, S, device="cuda")
    assert 0 < bm.sparsity() < 100
    for score_mod in (geometry, path):
        o, lse = fa4jit.flex_attention(q, k, v, score_mod=score_mod, block_mask=bm, return_lse=True)
        ref_o, ref_lse = reference(q, k, v, selected, score_mod)
        assert_close(o, ref_o, torch.bfloat16, lse, ref_lse, what=score_mod.__name__)
    table.mul_(-1)  # the views' base, written in place: read live
    o, lse = fa4jit.flex_attention(q, k, v, score_mod=path, block_mask=bm, return_lse=True)
    ref_o, ref_lse = reference(q, k, v, selected, path)
    assert_close(o, ref_o, torch.bfloat16, lse, ref_lse, what="path after the write")


@pytest.mark.parametrize("dims", [(32, 32), (80, 80), (64, 32)], ids=str)
def test_head_dims_without_a_kernel_run_padded(dims):
    """Head dims no kernel has (FlexAttention's tests use 16 and 32; Phi-2 80; V narrower than Q) run
    zero-padded and cut back, against the float64 reference."""
    D, Dv = dims
    B, H, S = 2, 4, 300
    q, k, _ = bhsd(B, H, H, S, S, D=D, seed=21)
    v = rnd(B, H, S, Dv, seed=24)
    bm = fa4jit.create_block_mask(causal, None, None, S, S, device="cuda")
    o, lse = fa4jit.flex_attention(q, k, v, score_mod=softcap, block_mask=bm, return_lse=True)
    assert o.shape == (B, H, S, Dv)
    ref_o, ref_lse = reference(q, k, v, causal, softcap)
    assert_close(o, ref_o, torch.bfloat16, lse, ref_lse, what=f"widths {dims}")


def test_aux_dependent_document_mask_tile_map_follows_aux_contents():
    """fa4jit.attention with a Python mask: the tile map is built automatically, reused while the
    document ids are unchanged, and rebuilt when they are written in place."""
    flex.clear_block_mask_cache()
    B, H, S = 2, 4, 2048
    q, k, v = bhsd(B, H, H, S, S, seed=3)
    doc = doc_ids(B, S, seed=5)

    def docmask(b, h, q_idx, kv_idx):
        return (doc[b, q_idx] == doc[b, kv_idx]) & (q_idx >= kv_idx)

    # Three steps: the third call of the signature launches the plan the second one made (one plan for
    # every map of these shapes), with the new map's pointer.
    for step, seed in enumerate((5, 6, 7)):
        if step:
            doc.copy_(doc_ids(B, S, seed=seed))  # in place: the same tensor, a new version
        out = torch.full((B, H, S, 128), float("nan"), device="cuda", dtype=torch.bfloat16)  # poisoned
        fa4jit.attention(q, k, v, mask_mod=docmask, layout="bhsd", out=out)
        ref_o, _ = reference(q, k, v, docmask)
        assert_close(out, ref_o, torch.bfloat16, what=f"document mask step {step}")
        maps = [bm.classes.clone() for bm in flex._auto.values()]
        assert len(maps) == step + 1
    assert not torch.equal(maps[0], maps[1]) and not torch.equal(maps[1], maps[2])  # maps follow the aux
    assert (maps[1] == 0).float().mean() > 0.3  # empty tiles skipped


def test_noop_and_fully_masked_rows():
    S = 512
    q, k, v = bhsd(1, 2, 2, S, S, seed=4)

    def nothing_first_rows(b, h, q_idx, kv_idx):
        return (q_idx >= 200) & (kv_idx <= q_idx)

    bm = fa4jit.create_block_mask(nothing_first_rows, 1, 2, S, S, device="cuda")
    o, lse = fa4jit.flex_attention(q, k, v, block_mask=bm, return_lse=True)
    assert (o[:, :, :200] == 0).all() and torch.isneginf(lse[:, :, :200]).all()
    ref_o, ref_lse = reference(q, k, v, nothing_first_rows)
    assert_close(o, ref_o, torch.bfloat16, lse, ref_lse, what="masked rows")


def test_varlen_and_paged_take_traced_mods():
    lens = [300, 129, 512]
    H, D = 4, 128
    total = sum(lens)
    q = rnd(total, H, D, seed=7)
    k = rnd(total, H, D, seed=8)
    v = rnd(total, H, D, seed=9)
    cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32, device="cuda")
    o = fa4jit.attention_varlen(q, k, v, cu, cu, max(lens), mask_mod=sliding_window, score_mod=softcap)
    off = 0
    for L in lens:
        ref_o, _ = reference(q[off:off + L].transpose(0, 1)[None], k[off:off + L].transpose(0, 1)[None],
                             v[off:off + L].transpose(0, 1)[None], sliding_window, softcap)
        assert_close(o[off:off + L], ref_o[0].transpose(0, 1), torch.bfloat16, what=f"varlen {L}")
        off += L
    # Paged decode-style chunk: 16 queries over 1024 keys in pages of 64, a strided mask.
    B, Sq, Sk, P = 2, 16, 1024, 64
    qd = rnd(B, Sq, H, D, seed=10)
    kd, vd = rnd(B, Sk, H, D, seed=11), rnd(B, Sk, H, D, seed=12)
    perm = torch.randperm(B * Sk // P, generator=torch.Generator().manual_seed(0)).cuda()
    kc = torch.empty(B * Sk // P, P, H, D, device="cuda", dtype=torch.bfloat16)
    vc = torch.empty_like(kc)
    table = perm.view(B, Sk // P).to(torch.int32)
    kc[table.long()] = kd.view(B, Sk // P, P, H, D)
    vc[table.long()] = vd.view(B, Sk // P, P, H, D)
    used = torch.full((B,), Sk, dtype=torch.int32, device="cuda")

    def tail(b, h, q_idx, kv_idx):
        return kv_idx % 4 != 1

    o = fa4jit.attention_paged(qd, kc, vc, table, used, mask_mod=tail, score_mod=alibi)
    ref_o, _ = reference(qd.transpose(1, 2), kd.transpose(1, 2), vd.transpose(1, 2), tail, alibi)
    assert_close(o, ref_o.transpose(1, 2), torch.bfloat16, what="paged")


def test_paged_attention_takes_a_block_mask_of_its_logical_positions():
    """FlexAttention's PagedAttention pattern on fa4jit's paged path: a traced, aux-dependent document
    mask over logical positions with its tile map (a BlockMask as block_mask_mod) on a cache in
    shuffled pages, GQA, a length no tile divides; the output is poisoned first."""
    B, Hq, Hkv, S, D, P = 2, 8, 2, 1000, 128, 64
    q, k, v = bhsd(B, Hq, Hkv, S, S, D, seed=21)
    doc = torch.zeros(B, S, dtype=torch.int32, device="cuda")
    doc[0, 300:], doc[0, 700:], doc[1, 517:] = 1, 2, 1

    def document(b, h, q_idx, kv_idx):
        return (doc[b, q_idx] == doc[b, kv_idx]) & (q_idx >= kv_idx)
    pages = -(-S // P)
    table = torch.randperm(B * pages, generator=torch.Generator().manual_seed(4)).view(B, pages).cuda()
    kc = torch.zeros(B * pages, P, Hkv, D, device="cuda", dtype=torch.bfloat16)
    vc = torch.zeros_like(kc)
    for b in range(B):
        for c, t in ((kc, k), (vc, v)):
            rows = torch.zeros(pages * P, Hkv, D, device="cuda", dtype=torch.bfloat16)
            rows[:S] = t[b].transpose(0, 1)
            c[table[b]] = rows.view(pages, P, Hkv, D)
    used = torch.full((B,), S, dtype=torch.int32, device="cuda")
    bm = fa4jit.create_block_mask(document, B, None, S, S, device="cuda")
    assert 0.3 < bm.sparsity() / 100 < 0.9  # empty tiles to skip, partial and full ones to run
    out = torch.full((B, S, Hq, D), float("nan"), device="cuda", dtype=torch.bfloat16)
    fa4jit.attention_paged(q.transpose(1, 2), kc, vc, table.to(torch.int32), used, mask_mod=document,
                           block_mask_mod=bm, out=out)
    ref_o, _ = reference(q, k.repeat_interleave(Hq // Hkv, 1), v.repeat_interleave(Hq // Hkv, 1), document)
    assert_close(out, ref_o.transpose(1, 2), torch.bfloat16, what="paged, document BlockMask")


def _top_left_kernels():
    from fa4jit import ops
    return {(k.causal, k.window) for k in ops._kernels if k.top_left and not k.mask_snippet}


def _check_paged_chunks(mod, seed, H=4, Hkv=2, D=128, P=64, Sq=300, lens=(1000, 700)):
    """attention_paged with the traced mask ``mod``: Sq queries of each sequence over lens keys in
    shuffled pages of P, against the float64 reference per sequence (FlexAttention's top-left
    positions), the output poisoned first."""
    q = rnd(len(lens), Sq, H, D, seed=seed)
    pages = -(-max(lens) // P)
    gen = torch.Generator().manual_seed(seed)
    table = torch.randperm(len(lens) * pages, generator=gen).view(len(lens), pages).cuda()
    kc = torch.randn(len(lens) * pages, P, Hkv, D, device="cuda").to(torch.bfloat16)
    vc = torch.randn_like(kc)
    used = torch.tensor(lens, dtype=torch.int32, device="cuda")
    out = torch.full_like(q, float("nan"))
    fa4jit.attention_paged(q, kc, vc, table.to(torch.int32), used, mask_mod=mod, out=out)
    for b, n in enumerate(lens):
        kb = kc[table[b]].reshape(-1, Hkv, D)[:n].repeat_interleave(H // Hkv, 1)
        vb = vc[table[b]].reshape(-1, Hkv, D)[:n].repeat_interleave(H // Hkv, 1)
        ref_o, _ = reference(q[b:b + 1].transpose(1, 2), kb[None].transpose(1, 2), vb[None].transpose(1, 2), mod)
        assert_close(out[b], ref_o[0].transpose(0, 1), torch.bfloat16, what=f"paged {mod.__name__} seq {b}")


def _check_varlen(mod, lq, lk, seed, H=4, Hkv=2, D=128):
    """attention_varlen with the traced mask ``mod`` over sequences of lq queries and lk keys, against
    the float64 reference per sequence, the output poisoned first."""
    cq = torch.tensor([0] + list(itertools.accumulate(lq)), dtype=torch.int32, device="cuda")
    ck = torch.tensor([0] + list(itertools.accumulate(lk)), dtype=torch.int32, device="cuda")
    qv = rnd(sum(lq), H, D, seed=seed)
    kv_, vv = rnd(sum(lk), Hkv, D, seed=seed + 1), rnd(sum(lk), Hkv, D, seed=seed + 2)
    out = torch.full_like(qv, float("nan"))
    fa4jit.attention_varlen(qv, kv_, vv, cq, ck, max(lq), mask_mod=mod, max_seqlen_k=max(lk), out=out)
    for i in range(len(lq)):
        qs, ks = slice(cq[i].item(), cq[i + 1].item()), slice(ck[i].item(), ck[i + 1].item())
        ref_o, _ = reference(qv[qs].transpose(0, 1)[None], kv_[ks].repeat_interleave(H // Hkv, 1).transpose(0, 1)[None],
                             vv[ks].repeat_interleave(H // Hkv, 1).transpose(0, 1)[None], mod)
        assert_close(out[qs], ref_o[0].transpose(0, 1), torch.bfloat16, what=f"varlen {mod.__name__} seq {i}")


def test_traced_bands_run_the_built_in_masks_aligned_top_left():
    """A traced mask of q_idx - kv_idx alone that is one band runs fa4jit's built-in causal / window
    mask aligned top-left (FlexAttention's positions) on paged, varlen and dense Sq != Sk calls:
    checked against the float64 reference with FlexAttention's semantics, outputs poisoned first."""
    H, Hkv = 4, 2

    def window(b, h, q_idx, kv_idx):
        return (q_idx - kv_idx <= 100) & (kv_idx - q_idx <= 3)

    # Paged chunks: 300 queries over 1000 and 700 keys (top-left: query i sees keys up to i; the
    # sliding window of 256 bites from query 257 on).
    for mod in (causal, sliding_window, window):
        _check_paged_chunks(mod, seed=31)
    assert {(True, False), (True, True), (False, True)} <= _top_left_kernels()
    # Varlen: queries and keys of unequal lengths per sequence.
    _check_varlen(window, [50, 130], [300, 129], seed=32)
    # Dense flex_attention with Sq != Sk.
    qd, kd, vd = bhsd(2, H, Hkv, 200, 500, seed=35)
    bm = fa4jit.create_block_mask(sliding_window, None, None, 200, 500, device="cuda")
    o = fa4jit.flex_attention(qd, kd, vd, block_mask=bm, enable_gqa=True)
    ref_o, _ = reference(qd, kd.repeat_interleave(H // Hkv, 1), vd.repeat_interleave(H // Hkv, 1), sliding_window)
    assert_close(o, ref_o, torch.bfloat16, what="flex_attention Sq != Sk")


def test_traced_prefix_masks_run_the_built_in_mask_with_a_prefix():
    """Prefix LM (FlexAttention's or_masks of a key prefix and causal) and a sliding window with sink
    keys run fa4jit's built-in causal / window mask with a prefix (the config's mask.prefix, the
    launch's mask_prefix), not the snippet: dense Sq == Sk and Sq != Sk, paged, varlen, each against the
    float64 reference (the paged and varlen outputs poisoned first)."""
    from fa4jit import ops
    H, Hkv = 4, 2

    def sink_window(b, h, q_idx, kv_idx):
        return ((q_idx >= kv_idx) & (q_idx - kv_idx < 100)) | (kv_idx < 4)

    for mod in (prefix_lm, sink_window):
        for Sq, Sk in ((700, 700), (300, 900)):
            q, k, v = bhsd(2, H, Hkv, Sq, Sk, seed=41)
            bm = fa4jit.create_block_mask(mod, None, None, Sq, Sk, device="cuda")
            o, lse = fa4jit.flex_attention(q, k, v, block_mask=bm, enable_gqa=True, return_lse=True)
            kr, vr = k.repeat_interleave(H // Hkv, 1), v.repeat_interleave(H // Hkv, 1)
            ref_o, ref_lse = reference(q, kr, vr, mod)
            assert_close(o, ref_o, torch.bfloat16, lse, ref_lse, what=f"{mod.__name__} {Sq}x{Sk}")
    prefixed = {(k.causal, k.window, k.top_left) for k in ops._kernels if k.prefix and not k.mask_snippet}
    assert {(True, False, False), (True, False, True), (True, True, False), (True, True, True)} <= prefixed
    # Paged: 300 queries over 1000 and 700 keys in shuffled pages; varlen: unequal lengths.
    for mod in (prefix_lm, sink_window):
        _check_paged_chunks(mod, seed=42)
    _check_varlen(prefix_lm, [50, 400], [600, 401], seed=43)


def test_cuda_graph_capture_with_block_mask():
    B, H, S = 1, 4, 1024
    q, k, v = bhsd(B, H, H, S, S, seed=13)
    bm = fa4jit.create_block_mask(sliding_window, None, None, S, S, device="cuda")  # outside capture
    fa4jit.flex_attention(q, k, v, block_mask=bm, score_mod=softcap)
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fa4jit.flex_attention(q, k, v, block_mask=bm, score_mod=softcap)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fa4jit.flex_attention(q, k, v, block_mask=bm, score_mod=softcap)
    nq, nk, nv = bhsd(B, H, H, S, S, seed=14)
    q.copy_(nq), k.copy_(nk), v.copy_(nv)
    g.replay()
    torch.cuda.synchronize()
    ref_o, _ = reference(nq, nk, nv, sliding_window, softcap)
    assert_close(out, ref_o, torch.bfloat16, what="graph replay")


def test_block_mask_as_block_mask_mod_of_attention():
    S = 768
    q, k, v = bhsd(2, 4, 4, S, S, seed=15)
    bm = fa4jit.create_block_mask(prefix_lm, None, None, S, S, device="cuda", BLOCK_SIZE=(64, 128))
    o = fa4jit.attention(q, k, v, block_mask_mod=bm, layout="bhsd")
    ref_o, _ = reference(q, k, v, prefix_lm)
    assert_close(o, ref_o, torch.bfloat16, what="BlockMask as block_mask_mod")


def test_cuda_snippet_mask_gets_a_tile_map_from_the_library_classifier():
    """A CUDA C++ mask snippet (no block snippet): jit::build_tile_map classifies its tiles on the GPU;
    the map equals the traced mask's, follows the aux contents, and the results match the reference."""
    flex.clear_block_mask_cache()
    B, H, S = 2, 4, 2048
    q, k, v = bhsd(B, H, H, S, S, seed=16)
    doc = doc_ids(B, S, seed=7)
    snippet = "return doc[b * %d + q_idx] == doc[b * %d + kv_idx] && q_idx >= kv_idx;" % (S, S)

    def traced(b, h, q_idx, kv_idx):
        return (doc[b, q_idx] == doc[b, kv_idx]) & (q_idx >= kv_idx)

    for step in range(2):
        if step:
            doc.copy_(doc_ids(B, S, seed=8))
        out = torch.full((B, H, S, 128), float("nan"), device="cuda", dtype=torch.bfloat16)
        fa4jit.attention(q, k, v, mask_mod=snippet, aux=[doc], layout="bhsd", out=out)
        ref_o, _ = reference(q, k, v, traced)
        assert_close(out, ref_o, torch.bfloat16, what=f"snippet document mask step {step}")
        mine = list(flex._snippet_maps.values())[-1]
        assert mine.classes.shape == (B, 1, S // 128, S // 128)  # the snippet reads b, not h
        want = fa4jit.create_block_mask(traced, B, None, S, S, device="cuda")
        assert torch.equal(mine.classes, want.classes)
    assert len(flex._snippet_maps) == 2  # rebuilt after the in-place write


@pytest.mark.parametrize("block", [(64, 64), (128, 256), (192, 96)], ids=str)
def test_block_sparse_map_with_holes_per_head_and_gqa(block):
    """A per-head tile map with empty KV blocks between non-empty ones and empty rows, in blocks that
    are not the kernel's tiles: each Q tile walks only from its first to its last non-empty block and
    skips the holes; rows without a visible key get 0 and LSE -inf. GQA (packed when short)."""
    B, H, Hkv, Sq, Sk = 2, 8, 2, 700, 1500

    def holes(b, h, q_idx, kv_idx):
        band = (kv_idx // 100 + h + b) % 4 != 1  # whole 100-key stripes hidden, shifted per head
        return band & (q_idx >= 50 * (h % 3)) & (kv_idx <= q_idx + 800)

    for sq in (Sq, 3):  # prefill, and a decode-like query count (GQA packed)
        q, k, v = bhsd(B, H, Hkv, sq, Sk, seed=17)
        bm = fa4jit.create_block_mask(holes, B, H, sq, Sk, device="cuda", BLOCK_SIZE=block)
        assert bm.classes.shape[:2] == (B, H) and (bm.classes == 0).any()
        o, lse = fa4jit.flex_attention(q, k, v, block_mask=bm, enable_gqa=True, return_lse=True)
        kr, vr = k.repeat_interleave(H // Hkv, 1), v.repeat_interleave(H // Hkv, 1)
        ref_o, ref_lse = reference(q, kr, vr, holes)
        assert_close(o, ref_o, torch.bfloat16, lse, ref_lse, what=f"holes {block} sq {sq}")


def test_torch_compile_fullgraph_with_captured_tensors():
    """Mods that capture tensors (document ids in a closure, a bias table) inside torch.compile with
    fullgraph=True: the snippets are constants of the graph and the captured tensors its inputs, so
    nothing breaks the graph; new document ids (an in-place write) reach the kernel on the next call."""
    torch._dynamo.reset()
    B, H, S = 2, 4, 1024
    q, k, v = bhsd(B, H, H, S, S, seed=21)
    doc = doc_ids(B, S, seed=22)
    rel = torch.randn(H, 2 * S, device="cuda") * 0.1

    def docmask(b, h, q_idx, kv_idx):
        return (doc[b, q_idx] == doc[b, kv_idx]) & (q_idx >= kv_idx)

    def relbias(score, b, h, q_idx, kv_idx):
        return score + rel[h, q_idx - kv_idx + S]

    fn = torch.compile(lambda q, k, v: fa4jit.attention(q, k, v, mask_mod=docmask, score_mod=relbias,
                                                        layout="bhsd"), fullgraph=True)
    for step in range(2):
        if step:
            doc.copy_(doc_ids(B, S, seed=23))
        out = fn(q, k, v)
        ref_o, _ = reference(q, k, v, docmask, relbias)
        assert_close(out, ref_o, torch.bfloat16, what=f"compiled captured tensors, step {step}")
