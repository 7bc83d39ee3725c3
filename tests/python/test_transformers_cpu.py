"""The transformers adapter's plumbing without a GPU: fa4jit.transformers.attention_forward with the
kernels replaced by the float64 reference (same arguments), in tiny bf16 models on the CPU, against
transformers' own sdpa / eager attention: layouts, causal alignment in decode steps, sliding window
and softcap mapping (Gemma 2), padding through varlen. test_transformers_gpu.py runs the real kernels."""
import copy

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
pytest.importorskip("transformers", reason="transformers is not installed")

import fa4jit.transformers as fa4jit_hf  # noqa: E402
from fa4jit import _widths  # noqa: E402
from hf_static import compiled_static_decode  # noqa: E402
from reference import attention_ref  # noqa: E402


def _window(window, causal):
    if window is None:
        return None
    return (window[0], 0 if causal else window[1])


class ReferenceOps:
    """Stand-ins for fa4jit.ops.attention / attention_varlen with their argument conventions."""

    calls = []

    @classmethod
    def attention(cls, q, k, v, causal=False, window=None, softcap=0.0, softmax_scale=None, sinks=None, chunk_size=0):
        cls.calls.append(("attention", tuple(q.shape), tuple(k.shape), causal, window, v.shape[-1], chunk_size))
        o, _ = attention_ref(q, k, v, causal=causal, window=_window(window, causal), chunk=chunk_size, softcap=softcap,
                             scale=softmax_scale, sinks=sinks)
        return o.to(q.dtype).contiguous()  # as the ops' output

    @classmethod
    def attention_varlen(cls, q, k, v, cu_q, cu_k, max_q, max_seqlen_k=None, causal=False, window=None, softcap=0.0,
                         softmax_scale=None, sinks=None, chunk_size=0, seqused_k=None, **unused):
        cls.calls.append(("varlen", tuple(q.shape), tuple(k.shape), causal, window, v.shape[-1], chunk_size))
        _assert_defaults(unused)
        assert max_q == int((cu_q[1:] - cu_q[:-1]).max())
        # The key hint that sizes the split (a decode step's keys spread over the SMs): every row's keys at most
        assert max_seqlen_k is not None and max_seqlen_k >= int((cu_k[1:] - cu_k[:-1]).max())
        outs = []
        for b in range(cu_q.numel() - 1):
            qs = slice(int(cu_q[b]), int(cu_q[b + 1]))
            used = int(cu_k[b + 1] - cu_k[b]) if seqused_k is None else int(seqused_k[b])
            ks = slice(int(cu_k[b]), int(cu_k[b]) + used)
            if qs.stop == qs.start:
                continue
            o, _ = attention_ref(q[qs][None], k[ks][None], v[ks][None], causal=causal, window=_window(window, causal),
                                 chunk=chunk_size, softcap=softcap, scale=softmax_scale, sinks=sinks)
            outs.append(o[0].to(q.dtype))
        return torch.cat(outs)

    @classmethod
    def attention_paged(cls, q, k_cache, v_cache, page_table, seqused_k, causal=False, window=None, softcap=0.0,
                        softmax_scale=None, sinks=None, chunk_size=0, **unused):
        """Pages of whole rows only (page_table (B, 1)), as flash_attn_with_kvcache passes a contiguous cache."""
        cls.calls.append(("paged", tuple(q.shape), tuple(k_cache.shape), causal, window, v_cache.shape[-1],
                          chunk_size))
        _assert_defaults(unused)
        assert page_table.shape == (q.shape[0], 1)
        outs = []
        for b in range(q.shape[0]):
            row, used = int(page_table[b, 0]), int(seqused_k[b])
            o, _ = attention_ref(q[b:b + 1], k_cache[row:row + 1, :used], v_cache[row:row + 1, :used], causal=causal,
                                 window=_window(window, causal), chunk=chunk_size, softcap=softcap,
                                 scale=softmax_scale, sinks=sinks)
            outs.append(o.to(q.dtype))
        return torch.cat(outs)


def _assert_defaults(unused: dict):
    """The ops' other arguments, which the backend leaves at their defaults."""
    assert all(not value for value in unused.values()), unused


@pytest.fixture
def reference_ops(monkeypatch):
    ReferenceOps.calls = []
    # The CPU tensors stand for an H200's: V head dims are checked against sm_90a's kernels.
    monkeypatch.setattr(_widths, "device_arch", lambda device_type, index: "sm_90a")
    monkeypatch.setattr(fa4jit_hf.ops, "attention", ReferenceOps.attention)
    monkeypatch.setattr(fa4jit_hf.ops, "attention_varlen", ReferenceOps.attention_varlen)
    monkeypatch.setattr(fa4jit_hf.ops, "attention_paged", ReferenceOps.attention_paged)
    fa4jit_hf.register()
    return ReferenceOps


def _pair(config, ref):
    from transformers import AutoModelForCausalLM
    torch.manual_seed(0)
    # A config each: from_config records the attention implementation in the config object.
    a = AutoModelForCausalLM.from_config(copy.deepcopy(config), attn_implementation="fa4jit", dtype=torch.bfloat16)
    b = AutoModelForCausalLM.from_config(copy.deepcopy(config), attn_implementation=ref, dtype=torch.bfloat16)
    b.load_state_dict(a.state_dict())
    assert (a.config._attn_implementation, b.config._attn_implementation) == ("fa4jit", ref)
    return a.eval(), b.eval()


def _decode(model, ids, mask, steps=4, cache=None, step=1):
    """Logits of the prompt's last token and of steps more forwards of step tokens each, over cache
    (a function of the model's config; default a DynamicCache)."""
    from transformers import DynamicCache
    cache = (cache or (lambda config: DynamicCache(config=config)))(model.config)
    logits = []
    with torch.no_grad():
        r = model(input_ids=ids, attention_mask=mask, past_key_values=cache, use_cache=True)
        logits.append(r.logits[:, -1].float())
        for t in range(steps):
            # fixed tokens: both models see the same
            nxt = (ids[:, :1] * 7 + 5 * t + torch.arange(step)) % model.config.vocab_size
            if mask is not None:
                mask = torch.cat([mask, torch.ones_like(nxt)], 1)
            r = model(input_ids=nxt, attention_mask=mask, past_key_values=r.past_key_values, use_cache=True)
            logits.append(r.logits[:, -1].float())
    return torch.stack(logits, 1)


def _static(max_cache_len):
    from transformers import StaticCache
    return lambda config: StaticCache(config=config, max_cache_len=max_cache_len)


def _close(la, lb):
    diff, scale = (la - lb).abs().max().item(), lb.abs().max().item()
    assert diff <= 0.05 * scale + 0.05, f"max logit diff {diff} (scale {scale})"


def _check(a, b, ids, mask=None):
    _close(_decode(a, ids, mask), _decode(b, ids, mask))


def _llama_config():
    from transformers import LlamaConfig
    return LlamaConfig(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)


def test_llama_adapter(reference_ops):
    a, b = _pair(_llama_config(), "sdpa")
    ids = torch.randint(0, 256, (2, 24))
    _check(a, b, ids)
    kinds = {c[0] for c in reference_ops.calls}
    assert kinds == {"attention"}
    prefill = reference_ops.calls[0]
    # Head dim 32 runs zero-padded to 64, sm_90a's smallest (fa4jit._widths); logits as SDPA's.
    assert prefill[1] == (2, 24, 4, 64) and prefill[2] == (2, 24, 2, 64) and prefill[3] is True
    decode = reference_ops.calls[-1]
    assert decode[1] == (2, 1, 4, 64) and decode[2] == (2, 28, 2, 64)  # Sq < Sk: bottom-right causal


def test_llama_adapter_left_padding_uses_varlen(reference_ops):
    a, b = _pair(_llama_config(), "sdpa")
    ids = torch.randint(0, 256, (2, 20))
    mask = torch.ones_like(ids)
    mask[0, :6] = 0
    _check(a, b, ids, mask)
    assert {c[0] for c in reference_ops.calls} == {"varlen"}


def test_gemma2_adapter_window_and_softcap(reference_ops):
    from transformers import Gemma2Config
    cfg = Gemma2Config(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=32, sliding_window=8,
                       attn_logit_softcapping=20.0, final_logit_softcapping=30.0, query_pre_attn_scalar=32,
                       max_position_embeddings=256)
    a, b = _pair(cfg, "eager")
    ids = torch.randint(0, 256, (2, 20))  # longer than the window
    _check(a, b, ids)
    windows = {c[4] for c in reference_ops.calls}
    assert (7, 0) in windows and None in windows  # sliding layers see W - 1 keys back; full layers none


def test_widths_without_a_kernel_are_padded_to_ones_with_one():
    """Which widths run as they are is the library's list (no GPU needed to ask); others pad V to Q's
    width, or both to the next depth the backend runs."""
    w = _widths.padded_widths
    assert w("sm_90a", "bf16", 192, 128) == (192, 128)  # DeepSeek-V2/V3, Kimi-K2: a kernel of its own
    assert w("sm_80", "fp16", 192, 128) == (192, 128)
    assert w("sm_90a", "bf16", 96, 64) == (96, 96)  # MiniCPM3: V padded
    assert w("sm_90a", "bf16", 128, 64) == (128, 128)
    assert w("sm_90a", "bf16", 80, 80) == (96, 96)  # Phi-2
    assert w("sm_90a", "bf16", 32, 32) == (64, 64)
    assert w("sm_100a", "bf16", 160, 160) == (192, 192)  # sm_100a's list is its own (no 256)
    assert w("sm_90a", "bf16", 2000, 2000) is None
    assert _widths.launch_widths("", torch.bfloat16, 96, 64) == (96, 64)  # no device: as they are
    assert _widths.launch_widths("sm_90a", torch.float32, 80, 80) == (80, 80)  # the launch names the dtype


def test_padded_widths_return_a_contiguous_output(reference_ops):
    """Head dim 32 runs padded to 64 and cut back: the output is contiguous, as every backend's (AFMoE
    and JetMoE view it)."""
    q = torch.randn(1, 4, 6, 32, dtype=torch.bfloat16)
    o, _ = fa4jit_hf.attention_forward(torch.nn.Module(), q, q, q, None)
    assert o.shape == (1, 6, 4, 32) and o.is_contiguous()


def _check_v_width(cfg, reference_ops, q_width, v_passed):
    a, b = _pair(cfg, "sdpa")
    ids = torch.randint(0, cfg.vocab_size, (2, 18))
    _check(a, b, ids)
    calls = reference_ops.calls
    assert calls and all(c[1][-1] == q_width and c[2][-1] == q_width for c in calls)
    assert {c[5] for c in calls} == {v_passed}  # the V width the kernel was given


def test_deepseek_v2_runs_v_narrower_than_q(reference_ops):
    """DeepSeek-V2 (-Lite): Q/K 192 (128 + 64 rope), V 128, a pair sm_90a has a kernel for: V reaches
    the op as it is."""
    from transformers import DeepseekV2Config
    cfg = DeepseekV2Config(vocab_size=256, hidden_size=128, intermediate_size=256, moe_intermediate_size=64,
                           num_hidden_layers=2, first_k_dense_replace=2, n_routed_experts=4, num_experts_per_tok=2,
                           n_shared_experts=1, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=None,
                           kv_lora_rank=64, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
                           max_position_embeddings=256)
    _check_v_width(cfg, reference_ops, 192, v_passed=128)


def test_minicpm3_v_pair_without_a_kernel_runs_with_v_padded(reference_ops):
    """MiniCPM3: Q/K 96 (64 + 32 rope), V 64, a pair no backend has: V is zero-padded to 96 for the
    kernel and O cut back to 64 (transformers' own flash-attention path does the same); the logits
    match SDPA's."""
    _check_v_width(_minicpm3_config(), reference_ops, 96, v_passed=96)


def test_padded_v_compiles_without_graph_breaks(monkeypatch):
    """torch.compile of a MiniCPM3 forward: the V-width question is a constant of the graph
    (assume_constant_result), so the padding path adds no graph break."""
    from transformers import AutoModelForCausalLM

    def attention(q, k, v, causal=False, window=None, softcap=0.0, softmax_scale=None, sinks=None, chunk_size=0):
        assert v.shape[-1] == q.shape[-1]  # padded
        return attention_ref(q, k, v, causal=causal, scale=softmax_scale)[0].to(q.dtype)

    monkeypatch.setattr(fa4jit_hf.ops, "attention", attention)
    monkeypatch.setattr(_widths, "device_arch", lambda device_type, index: "sm_90a")
    fa4jit_hf.register()
    m = AutoModelForCausalLM.from_config(_minicpm3_config(layers=1), attn_implementation="fa4jit",
                                         dtype=torch.bfloat16).eval()
    torch._dynamo.reset()
    with torch.no_grad():
        explain = torch._dynamo.explain(m)(input_ids=torch.randint(0, 256, (1, 16)), use_cache=False)
    assert explain.graph_break_count == 0, explain.break_reasons


def _minicpm3_config(layers=2):
    from transformers import MiniCPM3Config
    return MiniCPM3Config(vocab_size=256, hidden_size=256, intermediate_size=256, num_hidden_layers=layers,
                          num_attention_heads=4, num_key_value_heads=4, q_lora_rank=64, kv_lora_rank=64,
                          qk_nope_head_dim=64, qk_rope_head_dim=32, v_head_dim=64, max_position_embeddings=256)


def _llama4_config():
    from transformers import Llama4TextConfig
    return Llama4TextConfig(vocab_size=256, hidden_size=128, intermediate_size=256, intermediate_size_mlp=256,
                            num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                            num_local_experts=2, num_experts_per_tok=1, attention_chunk_size=8,
                            max_position_embeddings=256)


def test_llama4_chunked_layers_run_chunked_attention(reference_ops, monkeypatch):
    """Llama 4's chunked layers (layer_types "chunked_attention"): each query sees the keys of its own
    chunk of attention_chunk_size positions, which transformers puts in a mask the flash-style one
    does not carry; the backend reads the chunk size from the layer. A 20-token prompt crosses two
    chunk boundaries (chunk 8) and its logits match SDPA's, and would not without the chunks."""
    cfg = _llama4_config()
    chunked = [i for i, t in enumerate(cfg.layer_types) if t == "chunked_attention"]
    assert 0 < len(chunked) < cfg.num_hidden_layers
    a, b = _pair(cfg, "sdpa")
    ids = torch.randint(0, 256, (2, 20))
    with torch.no_grad():
        la, lb = a(input_ids=ids, use_cache=False).logits.float(), b(input_ids=ids, use_cache=False).logits.float()
    _close(la, lb)
    assert [c[6] for c in reference_ops.calls] == [8 if i in chunked else 0 for i in range(cfg.num_hidden_layers)]
    with monkeypatch.context() as m, torch.no_grad():  # the chunks matter here: plain causal layers differ
        m.setattr(fa4jit_hf, "_chunk_size", lambda module: 0)
        with pytest.raises(AssertionError):
            _close(a(input_ids=ids, use_cache=False).logits.float(), lb)


@pytest.mark.parametrize("cache", ["dynamic", "static"])
@pytest.mark.parametrize("step", [1, 3])
def test_llama4_generation_past_the_first_chunk(reference_ops, cache, step):
    """Decode over caches that have dropped the oldest keys of a chunked layer (transformers keeps
    its last chunk - 1): _key_mask cuts the keys before the first query's chunk, so the kernels'
    chunks start where the model's do. Single tokens and 3-token steps (which cross chunk boundaries:
    speculative decoding's shape), a dynamic and a static cache, a left-padded row: logits match SDPA's
    over 30 positions, almost 4 chunks of 8."""
    a, b = _pair(_llama4_config(), "sdpa")
    ids = torch.randint(0, 256, (2, 6))
    mask = torch.ones_like(ids)
    mask[1, :2] = 0
    make = None if cache == "dynamic" else _static(40)
    steps = 24 // step
    _close(_decode(a, ids, mask, steps=steps, cache=make, step=step),
           _decode(b, ids, mask, steps=steps, cache=make, step=step))
    chunked = [c for c in reference_ops.calls if c[6] == 8]
    assert chunked and all(c[0] == "varlen" for c in chunked[-steps:])  # padding, and the cut keys


@pytest.mark.parametrize("max_cache_len", [40, 37])
def test_static_cache_matches_sdpa(reference_ops, max_cache_len):
    """A StaticCache passes its whole buffer as the keys, rows past the last query not yet written
    (zeros, or a previous generation's). Without padding the backend attends the rows up to it, a
    count per row with no host sync (a paged cache whose pages are the buffer's rows; a buffer of
    37 rows goes through varlen with seqused_k); with padding, varlen over the rows the mask covers.
    Logits match SDPA's over the same cache, before and after a stale generation fills the buffer."""
    a, b = _pair(_llama_config(), "sdpa")
    ids = torch.randint(0, 256, (2, 12))
    for mask in (None, torch.ones_like(ids)):
        reference_ops.calls = []
        _close(_decode(a, ids, mask, cache=_static(max_cache_len)), _decode(b, ids, mask, cache=_static(max_cache_len)))
        assert {c[0] for c in reference_ops.calls} == {"paged" if max_cache_len % 8 == 0 else "varlen"}
    padded = torch.ones_like(ids)
    padded[0, :5] = 0
    reference_ops.calls = []
    _close(_decode(a, ids, padded, cache=_static(max_cache_len)), _decode(b, ids, padded, cache=_static(max_cache_len)))
    assert {c[0] for c in reference_ops.calls} == {"varlen"}
    assert all(c[2][0] < 2 * max_cache_len for c in reference_ops.calls)  # the rows past the mask are not read
    # With autograd on (a forward outside torch.no_grad()), as the other paths run
    _close(*[m(input_ids=ids, past_key_values=_static(max_cache_len)(m.config), use_cache=True).logits.detach().float()
             for m in (a, b)])


def test_static_cache_reused_after_a_longer_generation(reference_ops):
    """The rows past the last query hold the previous generation's keys when a static cache is reset
    and reused (they are not zeroed): attending them would be silently wrong."""
    from transformers import StaticCache
    a, b = _pair(_llama_config(), "sdpa")
    ids = torch.randint(0, 256, (1, 16))
    out = []
    for m in (a, b):
        cache = StaticCache(config=m.config, max_cache_len=32)
        with torch.no_grad():
            m(input_ids=torch.randint(0, 256, (1, 30)), past_key_values=cache, use_cache=True)
            cache.reset()
            m(input_ids=torch.randint(0, 256, (1, 30)), past_key_values=cache, use_cache=True)  # rows 0..29 set
            cache.reset()
            out.append(m(input_ids=ids, past_key_values=cache, use_cache=True).logits.float())
    _close(*out)


def _gpt2_config():
    from transformers import GPT2Config
    return GPT2Config(vocab_size=256, n_embd=128, n_layer=2, n_head=4, n_positions=256)


@pytest.mark.parametrize("config", [_llama_config, _gpt2_config])
@pytest.mark.parametrize("padded", [False, True])
def test_generate_with_a_static_cache(reference_ops, padded, config):
    """generate(cache_implementation="static") builds each step's masks ahead of the forward
    (compileable caches) and passes them back in as the attention mask: _key_mask's count is a 4-D
    tensor, which mask creation and GPT-2's own reshape of a 1-D or 2-D mask leave as it is. Greedy
    tokens and logits match SDPA's until the first near-tie of these random models."""
    a, b = _pair(config(), "sdpa")
    ids = torch.randint(0, 256, (2, 12))
    mask = torch.ones_like(ids)
    if padded:
        mask[0, :3] = 0
    kw = dict(attention_mask=mask, max_new_tokens=12, do_sample=False, cache_implementation="static",
              output_logits=True, return_dict_in_generate=True, pad_token_id=0)
    ga, gb = a.generate(ids, **kw), b.generate(ids, **kw)
    agree = int((ga.sequences == gb.sequences).all(0)[ids.shape[1]:].cumprod(0).sum())
    assert agree >= 6, f"the greedy tokens part after {agree} steps"
    _close(torch.stack(ga.logits[:agree + 1], 1).float(), torch.stack(gb.logits[:agree + 1], 1).float())
    assert {c[0] for c in reference_ops.calls} == {"varlen"}  # 23 rows a buffer: varlen over its rows


def test_static_cache_decode_compiles_without_graph_breaks(monkeypatch):
    """transformers' compiled generation runs decode steps over a StaticCache: the keys used per row
    (_key_mask's count) stay on the device, so a step is one graph, and its logits match SDPA's."""
    def attention_paged(q, k_cache, v_cache, page_table, seqused_k, causal=False, softmax_scale=None, **unused):
        # A contiguous cache's rows as pages, written with tensor ops only (traceable).
        _assert_defaults({n: x for n, x in unused.items() if n not in ("window", "softcap", "sinks")})
        k, v = k_cache[page_table[:, 0].long()], v_cache[page_table[:, 0].long()]
        B, Sq, Hq, D = q.shape
        S, g = k.shape[1], Hq // k.shape[2]
        s = torch.einsum("bqhd,bkhd->bhqk", q.float(), k.repeat_interleave(g, 2).float()) * (softmax_scale or D ** -0.5)
        used = seqused_k.view(B, 1, 1).long()
        kv = torch.arange(S).view(1, 1, S)
        s = s.masked_fill(~((kv < used) & (kv <= used - Sq + torch.arange(Sq).view(1, Sq, 1)))[:, None], float("-inf"))
        return torch.einsum("bhqk,bkhd->bqhd", s.softmax(-1), v.repeat_interleave(g, 2).float()).to(q.dtype)

    monkeypatch.setattr(fa4jit_hf.ops, "attention_paged", attention_paged)
    monkeypatch.setattr(_widths, "device_arch", lambda device_type, index: "sm_90a")
    a, b = _pair(_llama_config(), "sdpa")
    logits, explain = compiled_static_decode(a, b, torch.randint(0, 256, (1, 12)), 40, steps=3)
    for la, lb in logits:
        _close(la, lb)
    assert explain.graph_break_count == 0, explain.break_reasons


def test_gemma2_static_cache_past_the_window(reference_ops):
    """Gemma 2's sliding layers over a StaticCache (a buffer of sliding_window rows, rolled once full):
    a 6-token prompt and 8 steps cross the window of 8; logits match eager attention's."""
    from transformers import Gemma2Config
    cfg = Gemma2Config(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=32, sliding_window=8,
                       attn_logit_softcapping=20.0, final_logit_softcapping=30.0, query_pre_attn_scalar=32,
                       max_position_embeddings=256)
    a, b = _pair(cfg, "eager")
    ids = torch.randint(0, 256, (2, 6))
    _close(_decode(a, ids, None, steps=8, cache=_static(24)), _decode(b, ids, None, steps=8, cache=_static(24)))


def test_float32_states_of_a_bf16_model_are_cast_back(reference_ops):
    """PEFT's float32 adapters (or layer norms) hand a bf16 model float32 q, k, v: they run in the
    weights' dtype, as transformers' flash-attention path casts them; a float32 model is refused by
    name."""
    a, b = _pair(_llama_config(), "sdpa")
    for layer in a.model.layers:  # as adapters whose float32 outputs are added to the projections' (exactly)
        for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
            proj.register_forward_hook(lambda mod, args, out: out.float())
    _check(a, b, torch.randint(0, 256, (2, 16)))
    assert reference_ops.calls and all(c[0] == "attention" for c in reference_ops.calls)
    with pytest.raises(fa4jit_hf.LaunchError, match="query has dtype torch.float32"):
        q = torch.zeros(1, 2, 4, 64)
        fa4jit_hf.attention_forward(a.model.layers[0].self_attn.float(), q, q, q, None)


def _persimmon_config():
    from transformers import PersimmonConfig
    return PersimmonConfig(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                           num_attention_heads=4, max_position_embeddings=256)


@pytest.mark.parametrize("config", [_llama_config, _persimmon_config])
def test_packed_sequences_run_varlen(reference_ops, config):
    """Sequences packed into rows without padding (a prompt whose position_ids restart; two rows
    packed differently): each attends only itself, as transformers' masks fold them in without a
    cache, found from the mask function (Persimmon does not pass position_ids to its attention), and
    as its flash-attention varlen kwargs (cu_seq_lens_q / _k, max_length_q / _k) give them. Logits
    match each sequence run alone, as SDPA's do."""
    a, b = _pair(config(), "sdpa")
    ids = torch.randint(0, 256, (2, 20))
    pieces = ((8, 12), (5, 15))
    pos = torch.stack([torch.cat([torch.arange(n) for n in row]) for row in pieces])
    with torch.no_grad():
        alone = torch.stack([torch.cat([b(input_ids=x, use_cache=False).logits[0] for x in ids[r:r + 1].split(row, 1)])
                             for r, row in enumerate(pieces)]).float()
        _close(b(input_ids=ids, position_ids=pos, use_cache=False).logits.float(), alone)  # SDPA's own packing
        reference_ops.calls = []
        _close(a(input_ids=ids, position_ids=pos, use_cache=False).logits.float(), alone)
        assert {c[:2] for c in reference_ops.calls} == {("varlen", (40, 4, 64))}
        cu = torch.tensor([0, 8, 20], dtype=torch.int32)
        _close(a(input_ids=ids[:1], position_ids=pos[:1], use_cache=False, cu_seq_lens_q=cu, cu_seq_lens_k=cu,
                 max_length_q=12, max_length_k=12).logits.float(), alone[:1])
        with pytest.raises(AssertionError):  # packing matters here
            _close(a(input_ids=ids, use_cache=False).logits.float(), alone)


def test_packed_position_ids_fail_under_torch_compile(monkeypatch):
    """Compiled prompts keep their graph whole (no host read of where sequences start): packed
    position_ids there fail by a device-side assert rather than attend across sequences; unpacked
    ones run."""
    def attention(q, k, v, causal=False, window=None, softcap=0.0, softmax_scale=None, sinks=None, chunk_size=0):
        return attention_ref(q, k, v, causal=causal, scale=softmax_scale)[0].to(q.dtype)

    monkeypatch.setattr(fa4jit_hf.ops, "attention", attention)
    monkeypatch.setattr(_widths, "device_arch", lambda device_type, index: "sm_90a")
    a, _ = _pair(_llama_config(), "sdpa")
    torch._dynamo.reset()
    compiled = torch.compile(a, fullgraph=False)
    ids = torch.randint(0, 256, (1, 16))
    with torch.no_grad():
        compiled(input_ids=ids, position_ids=torch.arange(16)[None], use_cache=False)
        with pytest.raises(RuntimeError, match="pack several sequences"):
            compiled(input_ids=ids, position_ids=torch.cat([torch.arange(8), torch.arange(8)])[None], use_cache=False)


def test_families_without_flash_attention_support_are_refused():
    """A model whose PreTrainedModel declares _supports_flash_attn = False (DeepSeek-V4's compressed keys,
    Doge's dynamic masks, T5's position bias) has masks the flash-style one drops: the backend refuses
    it by name instead of running without them. Llama 4 (its reason, chunked layers, handled) and the
    families that support flash attention pass. The mask interface refuses them already, as some
    (DeepSeek-V3.2's indexer) index the mask before their attention runs."""
    import sys
    import types
    name, config_name = "fa4jit_test.modeling_fake", "fa4jit_test.configuration_fake"
    fake, fake_config = types.ModuleType(name), types.ModuleType(config_name)
    exec("import torch\nclass FakePreTrainedModel:\n    _supports_flash_attn = False\n"
         "class FakeAttention(torch.nn.Module):\n    pass\n", fake.__dict__)
    exec("class FakeConfig:\n    pass\n", fake_config.__dict__)
    sys.modules[name], sys.modules[config_name] = fake, fake_config
    try:
        assert fa4jit_hf._family_without_flash(name) == "FakePreTrainedModel"
        q = torch.zeros(1, 2, 4, 32, dtype=torch.bfloat16)
        with pytest.raises(fa4jit_hf.LaunchError, match="FakePreTrainedModel declares no flash-attention support"):
            fa4jit_hf.attention_forward(fake.FakeAttention(), q, q, q, None)
        with pytest.raises(fa4jit_hf.LaunchError, match="FakePreTrainedModel declares no flash-attention support"):
            fa4jit_hf._key_mask(1, 4, 4, config=fake_config.FakeConfig())
    finally:
        del sys.modules[name], sys.modules[config_name]
        fa4jit_hf._family_without_flash.cache_clear()
    import transformers.models.llama.modeling_llama as llama
    import transformers.models.llama4.modeling_llama4 as llama4
    assert fa4jit_hf._family_without_flash(llama.__name__) is None
    assert fa4jit_hf._family_without_flash(llama4.__name__) is None  # chunked layers: handled
    assert llama4.Llama4PreTrainedModel._supports_flash_attn is False
