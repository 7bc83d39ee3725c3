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
                         softmax_scale=None, sinks=None, chunk_size=0):
        cls.calls.append(("varlen", tuple(q.shape), tuple(k.shape), causal, window, v.shape[-1], chunk_size))
        assert max_q == int((cu_q[1:] - cu_q[:-1]).max())
        # The key hint that sizes the split (a decode step's keys spread over the SMs): every row's keys at most
        assert max_seqlen_k is not None and max_seqlen_k >= int((cu_k[1:] - cu_k[:-1]).max())
        outs = []
        for b in range(cu_q.numel() - 1):
            qs, ks = slice(int(cu_q[b]), int(cu_q[b + 1])), slice(int(cu_k[b]), int(cu_k[b + 1]))
            if qs.stop == qs.start:
                continue
            o, _ = attention_ref(q[qs][None], k[ks][None], v[ks][None], causal=causal, window=_window(window, causal),
                                 chunk=chunk_size, softcap=softcap, scale=softmax_scale, sinks=sinks)
            outs.append(o[0].to(q.dtype))
        return torch.cat(outs)


@pytest.fixture
def reference_ops(monkeypatch):
    ReferenceOps.calls = []
    # The CPU tensors stand for an H200's: V head dims are checked against sm_90a's kernels.
    monkeypatch.setattr(_widths, "device_arch", lambda device_type, index: "sm_90a")
    monkeypatch.setattr(fa4jit_hf.ops, "attention", ReferenceOps.attention)
    monkeypatch.setattr(fa4jit_hf.ops, "attention_varlen", ReferenceOps.attention_varlen)
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


def _decode(model, ids, mask, steps=4):
    from transformers import DynamicCache
    logits = []
    with torch.no_grad():
        r = model(input_ids=ids, attention_mask=mask, past_key_values=DynamicCache(config=model.config), use_cache=True)
        logits.append(r.logits[:, -1].float())
        for t in range(steps):
            nxt = (ids[:, t:t + 1] * 7 + 3) % model.config.vocab_size  # fixed tokens: both models see the same
            if mask is not None:
                mask = torch.cat([mask, torch.ones_like(nxt)], 1)
            r = model(input_ids=nxt, attention_mask=mask, past_key_values=r.past_key_values, use_cache=True)
            logits.append(r.logits[:, -1].float())
    return torch.stack(logits, 1)


def _check(a, b, ids, mask=None):
    la, lb = _decode(a, ids, mask), _decode(b, ids, mask)
    scale = lb.abs().max().item()
    diff = (la - lb).abs().max().item()
    assert diff <= 0.05 * scale + 0.05, f"max logit diff {diff} (scale {scale})"
    return diff


def test_llama_adapter(reference_ops):
    from transformers import LlamaConfig
    cfg = LlamaConfig(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    a, b = _pair(cfg, "sdpa")
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
    from transformers import LlamaConfig
    cfg = LlamaConfig(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    a, b = _pair(cfg, "sdpa")
    ids = torch.randint(0, 256, (2, 20))
    mask = torch.ones_like(ids)
    mask[0, :6] = 0
    la, lb = _decode(a, ids, mask), _decode(b, ids, mask)
    assert (la - lb).abs().max().item() <= 0.05 * lb.abs().max().item() + 0.05
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


def test_llama4_chunked_layers_run_chunked_attention(reference_ops, monkeypatch):
    """Llama 4's chunked layers (layer_types "chunked_attention"): each query sees the keys of its own
    chunk of attention_chunk_size positions, which transformers puts in a mask the flash-style one
    does not carry; the backend reads the chunk size from the layer. A 20-token prompt crosses two
    chunk boundaries (chunk 8) and its logits match SDPA's; decode steps match while the cache holds
    every past key (fewer than chunk - 1), and a step over a cache that has dropped keys (they come
    without their positions) is refused by name."""
    from transformers import DynamicCache, Llama4TextConfig
    cfg = Llama4TextConfig(vocab_size=256, hidden_size=128, intermediate_size=256, intermediate_size_mlp=256,
                           num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                           num_local_experts=2, num_experts_per_tok=1, attention_chunk_size=8,
                           max_position_embeddings=256)
    chunked = [i for i, t in enumerate(cfg.layer_types) if t == "chunked_attention"]
    assert 0 < len(chunked) < cfg.num_hidden_layers
    a, b = _pair(cfg, "sdpa")
    ids = torch.randint(0, 256, (2, 20))
    with torch.no_grad():
        la, lb = a(input_ids=ids, use_cache=False).logits.float(), b(input_ids=ids, use_cache=False).logits.float()
    tol = 0.05 * lb.abs().max().item() + 0.05
    assert (la - lb).abs().max().item() <= tol
    assert [c[6] for c in reference_ops.calls] == [8 if i in chunked else 0 for i in range(cfg.num_hidden_layers)]
    with monkeypatch.context() as m, torch.no_grad():  # the chunks matter here: plain causal layers differ
        m.setattr(fa4jit_hf, "_chunk_size", lambda module, queries, keys: 0)
        assert (a(input_ids=ids, use_cache=False).logits.float() - lb).abs().max().item() > tol
    la, lb = _decode(a, ids[:, :4], None, steps=3), _decode(b, ids[:, :4], None, steps=3)  # 6 past keys at most
    assert (la - lb).abs().max().item() <= 0.05 * lb.abs().max().item() + 0.05
    with torch.no_grad():
        r = a(input_ids=ids, past_key_values=DynamicCache(config=a.config), use_cache=True)
        with pytest.raises(fa4jit_hf.LaunchError, match="chunked-attention layer .* over a KV cache of 7 past keys"):
            a(input_ids=ids[:, :1], past_key_values=r.past_key_values, use_cache=True)


def test_families_without_flash_attention_support_are_refused():
    """A model whose PreTrainedModel declares _supports_flash_attn = False (DeepSeek-V4's compressed keys,
    Doge's dynamic masks, T5's position bias) has masks the flash-style one drops: the backend refuses
    it by name instead of running without them. Llama 4 (its reason, chunked layers, handled) and the
    families that support flash attention pass."""
    import sys
    import types
    name = "fa4jit_test_fake_modeling"
    fake = types.ModuleType(name)
    exec("import torch\nclass FakePreTrainedModel:\n    _supports_flash_attn = False\n"
         "class FakeAttention(torch.nn.Module):\n    pass\n", fake.__dict__)
    sys.modules[name] = fake
    try:
        assert fa4jit_hf._family_without_flash(name) == "FakePreTrainedModel"
        q = torch.zeros(1, 2, 4, 32, dtype=torch.bfloat16)
        with pytest.raises(fa4jit_hf.LaunchError, match="FakePreTrainedModel declares no flash-attention support"):
            fa4jit_hf.attention_forward(fake.FakeAttention(), q, q, q, None)
    finally:
        del sys.modules[name]
    import transformers.models.llama.modeling_llama as llama
    import transformers.models.llama4.modeling_llama4 as llama4
    assert fa4jit_hf._family_without_flash(llama.__name__) is None
    assert fa4jit_hf._family_without_flash(llama4.__name__) is None  # chunked layers: handled
    assert llama4.Llama4PreTrainedModel._supports_flash_attn is False
