"""The transformers adapter's plumbing without a GPU: fa4jit.transformers.attention_forward with the
kernels replaced by the float64 reference (same arguments), in tiny bf16 models on the CPU, against
transformers' own sdpa / eager attention: layouts, causal alignment in decode steps, sliding window
and softcap mapping (Gemma 2), padding through varlen. test_transformers_gpu.py runs the real kernels."""
import copy

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
pytest.importorskip("transformers", reason="transformers is not installed")

import fa4jit.transformers as fa4jit_hf  # noqa: E402
from reference import attention_ref  # noqa: E402


def _window(window, causal):
    if window is None:
        return None
    return (window[0], 0 if causal else window[1])


class ReferenceOps:
    """Stand-ins for fa4jit.ops.attention / attention_varlen with their argument conventions."""

    calls = []

    @classmethod
    def attention(cls, q, k, v, causal=False, window=None, softcap=0.0, softmax_scale=None, sinks=None):
        cls.calls.append(("attention", tuple(q.shape), tuple(k.shape), causal, window))
        o, _ = attention_ref(q, k, v, causal=causal, window=_window(window, causal), softcap=softcap,
                             scale=softmax_scale, sinks=sinks)
        return o.to(q.dtype)

    @classmethod
    def attention_varlen(cls, q, k, v, cu_q, cu_k, max_q, max_seqlen_k=None, causal=False, window=None, softcap=0.0,
                         softmax_scale=None, sinks=None):
        cls.calls.append(("varlen", tuple(q.shape), tuple(k.shape), causal, window))
        assert max_q == int((cu_q[1:] - cu_q[:-1]).max())
        # The key hint that sizes the split (a decode step's keys spread over the SMs): every row's keys at most
        assert max_seqlen_k is not None and max_seqlen_k >= int((cu_k[1:] - cu_k[:-1]).max())
        outs = []
        for b in range(cu_q.numel() - 1):
            qs, ks = slice(int(cu_q[b]), int(cu_q[b + 1])), slice(int(cu_k[b]), int(cu_k[b + 1]))
            if qs.stop == qs.start:
                continue
            o, _ = attention_ref(q[qs][None], k[ks][None], v[ks][None], causal=causal, window=_window(window, causal),
                                 softcap=softcap, scale=softmax_scale, sinks=sinks)
            outs.append(o[0].to(q.dtype))
        return torch.cat(outs)


@pytest.fixture
def reference_ops(monkeypatch):
    ReferenceOps.calls = []
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
    assert prefill[1] == (2, 24, 4, 32) and prefill[2] == (2, 24, 2, 32) and prefill[3] is True
    decode = reference_ops.calls[-1]
    assert decode[1] == (2, 1, 4, 32) and decode[2] == (2, 28, 2, 32)  # Sq < Sk: bottom-right causal


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
