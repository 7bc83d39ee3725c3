"""A real model nobody here wrote: transformers' Llama (and Gemma 2: softcap, sliding window) from a
small config with random weights, run with attn_implementation="fa4jit" and "sdpa". Prefill logits
and 16 teacher-forced decode steps through the model's KV cache must match within bf16 tolerance:
fa4jit's distance to a float32 SDPA run of the same weights may be at most twice bf16 SDPA's own
(plus a small floor). No downloads. Skips without a GPU or transformers."""
import copy

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
transformers = pytest.importorskip("transformers", reason="transformers is not installed")

import fa4jit.transformers as fa4jit_hf  # noqa: E402
from hf_static import compiled_static_decode  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU visible to torch")

STEPS = 16


def _models(config, ref="sdpa", with_ref=True):
    """{"fa4jit": bf16, "ref": bf16 with the `ref` implementation, "fp32": `ref` in float32}, one set of weights."""
    from transformers import AutoModelForCausalLM
    fa4jit_hf.register()
    torch.manual_seed(0)
    # A config each: from_config records the attention implementation in the config object.
    base = AutoModelForCausalLM.from_config(copy.deepcopy(config), attn_implementation=ref, dtype=torch.float32)
    state = base.state_dict()
    models = {}
    for name, impl in (("fa4jit", "fa4jit"), ("ref", ref)) if with_ref else (("fa4jit", "fa4jit"),):
        m = AutoModelForCausalLM.from_config(copy.deepcopy(config), attn_implementation=impl, dtype=torch.bfloat16)
        m.load_state_dict(state)
        assert m.config._attn_implementation == impl
        models[name] = m.cuda().eval()
    models["fp32"] = base.cuda().eval()  # the yardstick for bf16 error
    return models


def _run(model, ids, attention_mask, steps, forced, cache=None):
    """Prefill, then `steps` decode steps feeding the tokens in `forced` (teacher forcing keeps every
    model on the same sequence), over cache (a function of the model's config; default a
    DynamicCache). Returns the logits of each step, float32."""
    from transformers import DynamicCache
    cache = (cache or (lambda config: DynamicCache(config=config)))(model.config)
    out = []
    with torch.no_grad():
        r = model(input_ids=ids, attention_mask=attention_mask, past_key_values=cache, use_cache=True)
        out.append(r.logits[:, -1].float())
        prefill = r.logits.float()
        mask = attention_mask
        for t in range(steps):
            nxt = forced[:, t:t + 1]
            if mask is not None:
                mask = torch.cat([mask, torch.ones_like(nxt)], dim=1)
            r = model(input_ids=nxt, attention_mask=mask, past_key_values=r.past_key_values, use_cache=True)
            out.append(r.logits[:, -1].float())
    return prefill, torch.stack(out, 1)


def _compare(models, ids, attention_mask=None, what="", ref="sdpa", cache=None):
    # The float32 model's greedy tokens drive every model.
    with torch.no_grad():
        seq = ids
        mask = attention_mask
        for _ in range(STEPS):
            logits = models["fp32"](input_ids=seq, attention_mask=mask).logits[:, -1]
            nxt = logits.argmax(-1, keepdim=True)
            seq = torch.cat([seq, nxt], 1)
            if mask is not None:
                mask = torch.cat([mask, torch.ones_like(nxt)], 1)
    forced = seq[:, ids.shape[1]:]
    res = {name: _run(m, ids, attention_mask, STEPS, forced, cache) for name, m in models.items()}
    ref_prefill, ref_steps = res["fp32"]
    valid = attention_mask.bool() if attention_mask is not None else torch.ones_like(ids, dtype=torch.bool)
    report = {}
    for name in ("fa4jit", "ref"):
        p, s = res[name]
        report[name] = ((p - ref_prefill)[valid].abs().max().item(), (s - ref_steps).abs().max().item())
    fa_p, fa_s = report["fa4jit"]
    sd_p, sd_s = report["ref"]
    direct_p = (res["fa4jit"][0] - res["ref"][0])[valid].abs().max().item()
    direct_s = (res["fa4jit"][1] - res["ref"][1]).abs().max().item()
    scale = ref_prefill.abs().max().item()
    print(f"{what}: max |logit diff| fa4jit vs {ref} (both bf16): prefill {direct_p:.4f}, {STEPS} decode steps "
          f"{direct_s:.4f}; vs float32 {ref}: fa4jit {fa_p:.4f} / {fa_s:.4f}, {ref} {sd_p:.4f} / {sd_s:.4f} "
          f"(logit scale {scale:.2f})")
    floor = 0.01 * scale
    assert fa_p <= 2 * sd_p + floor, f"{what}: prefill logits off by {fa_p} (bf16 {ref}: {sd_p})"
    assert fa_s <= 2 * sd_s + floor, f"{what}: decode logits off by {fa_s} (bf16 {ref}: {sd_s})"
    agree = (res["fa4jit"][1].argmax(-1) == res["ref"][1].argmax(-1)).float().mean().item()
    print(f"{what}: greedy token agreement fa4jit vs {ref} (bf16): {agree:.2%}")
    return report


def _llama_config():
    from transformers import LlamaConfig
    return LlamaConfig(vocab_size=1024, hidden_size=512, intermediate_size=1024, num_hidden_layers=3,
                       num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=1024)


def test_llama_prefill_and_decode_match_sdpa():
    models = _models(_llama_config())
    torch.manual_seed(1)
    ids = torch.randint(0, 1024, (2, 200), device="cuda")
    _compare(models, ids, what="llama")


def test_llama_left_padded_batch_runs_varlen():
    models = _models(_llama_config())
    torch.manual_seed(2)
    ids = torch.randint(0, 1024, (3, 96), device="cuda")
    mask = torch.ones_like(ids)
    mask[0, :40] = 0  # left padding
    mask[2, :7] = 0
    _compare(models, ids, attention_mask=mask, what="llama padded")


def test_gemma2_softcap_and_sliding_window():
    from transformers import Gemma2Config
    cfg = Gemma2Config(vocab_size=1024, hidden_size=512, intermediate_size=1024, num_hidden_layers=4,
                       num_attention_heads=8, num_key_value_heads=4, head_dim=64, sliding_window=64,
                       attn_logit_softcapping=50.0, final_logit_softcapping=30.0, query_pre_attn_scalar=64,
                       max_position_embeddings=1024)
    models = _models(cfg, ref="eager")  # transformers' SDPA path has no softcap: eager is Gemma 2's reference
    torch.manual_seed(3)
    ids = torch.randint(0, 1024, (2, 150), device="cuda")  # longer than the window
    _compare(models, ids, what="gemma2", ref="eager")


def test_deepseek_v3_value_heads_narrower_than_queries():
    """DeepSeek-V3's attention (MLA, unabsorbed in transformers): Q/K 192 wide (128 + 64 rope), V 128,
    its own softmax scale; the backend gets V narrower than Q and returns O of V's width."""
    if not hasattr(transformers, "DeepseekV3Config"):
        pytest.skip(f"transformers {transformers.__version__} has no DeepSeek-V3")
    cfg = transformers.DeepseekV3Config(
        vocab_size=1024, hidden_size=512, intermediate_size=1024, moe_intermediate_size=256, num_hidden_layers=2,
        first_k_dense_replace=1, n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1, n_group=1,
        topk_group=1, num_attention_heads=8, num_key_value_heads=8, q_lora_rank=256, kv_lora_rank=128,
        qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, max_position_embeddings=1024)
    models = _models(cfg)
    torch.manual_seed(4)
    ids = torch.randint(0, 1024, (2, 130), device="cuda")
    _compare(models, ids, what="deepseek-v3")


def test_minicpm3_value_heads_without_a_pair_kernel_run_padded():
    """MiniCPM3's MLA prefill: Q/K 96 (64 + 32 rope), V 64, a pair without a kernel: the backend pads V
    to 96 and cuts O back, against SDPA."""
    if not hasattr(transformers, "MiniCPM3Config"):
        pytest.skip(f"transformers {transformers.__version__} has no MiniCPM3")
    cfg = transformers.MiniCPM3Config(
        vocab_size=1024, hidden_size=512, intermediate_size=1024, num_hidden_layers=2, num_attention_heads=8,
        num_key_value_heads=8, q_lora_rank=128, kv_lora_rank=128, qk_nope_head_dim=64, qk_rope_head_dim=32,
        v_head_dim=64, max_position_embeddings=1024)
    models = _models(cfg)
    torch.manual_seed(5)
    ids = torch.randint(0, 1024, (2, 130), device="cuda")
    _compare(models, ids, what="minicpm3")


def test_phi_head_dim_80_runs_padded():
    """Phi-2's head dim 80 (2560 / 32; partial rotary), which no kernel has: zero-padded to the next
    one and cut back, against SDPA."""
    cfg = transformers.PhiConfig(vocab_size=1024, hidden_size=640, intermediate_size=1024, num_hidden_layers=2,
                                 num_attention_heads=8, partial_rotary_factor=0.4, max_position_embeddings=1024)
    models = _models(cfg)
    torch.manual_seed(6)
    ids = torch.randint(0, 1024, (2, 130), device="cuda")
    _compare(models, ids, what="phi head dim 80")


def test_torch_compile_of_the_model_has_no_graph_break():
    models = _models(_llama_config(), with_ref=False)
    m = models["fa4jit"]
    ids = torch.randint(0, 1024, (1, 64), device="cuda")
    with torch.no_grad():
        explain = torch._dynamo.explain(m)(input_ids=ids, use_cache=False)
    print(f"llama forward: {explain.graph_count} graph(s), {explain.graph_break_count} break(s)")
    assert explain.graph_break_count == 0


def _static(max_cache_len):
    from transformers import StaticCache
    return lambda config: StaticCache(config=config, max_cache_len=max_cache_len)


@pytest.mark.parametrize("max_cache_len", [128, 85])
def test_static_cache_matches_sdpa(max_cache_len):
    """A StaticCache passes its whole buffer as the keys, the rows past the last query unwritten: the
    backend attends the rows up to it (a count per row: paged over the buffer's rows, or varlen with
    seqused_k for a buffer of 85 rows), and with a left-padded batch varlen over the rows the mask
    covers."""
    models = _models(_llama_config())
    torch.manual_seed(7)
    ids = torch.randint(0, 1024, (2, 48), device="cuda")
    _compare(models, ids, what=f"static cache of {max_cache_len}", cache=_static(max_cache_len))
    mask = torch.ones_like(ids)
    mask[0, :11] = 0
    _compare(models, ids, mask, what=f"static cache of {max_cache_len}, left padding", cache=_static(max_cache_len))


def test_static_cache_decode_compiles_without_graph_breaks():
    """torch.compile of a decode step over a StaticCache (transformers' compiled generation): the
    keys used per row stay on the device, so the step is one graph, and its logits match SDPA's."""
    models = _models(_llama_config())
    ids = torch.randint(0, 1024, (1, 40), device="cuda")
    logits, explain = compiled_static_decode(models["fa4jit"], models["ref"], ids, 96, steps=4)
    for la, lb in logits:
        assert (la - lb).abs().max().item() <= 0.05 * lb.abs().max().item() + 0.05
    assert explain.graph_break_count == 0, explain.break_reasons


@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_llama4_generation_past_the_first_chunk(cache):
    """Llama 4's chunked layers (chunk 32 here) generating past the first chunk, where transformers'
    cache for them has dropped the oldest keys: the keys before the query's chunk are cut, so the
    kernels' chunks start where the model's do. 40-token prompts, one left-padded, and 16 steps."""
    cfg = transformers.Llama4TextConfig(vocab_size=1024, hidden_size=512, intermediate_size=1024,
                                        intermediate_size_mlp=1024, num_hidden_layers=4, num_attention_heads=8,
                                        num_key_value_heads=2, head_dim=64, num_local_experts=2,
                                        num_experts_per_tok=1, attention_chunk_size=32, max_position_embeddings=1024)
    models = _models(cfg)
    torch.manual_seed(8)
    ids = torch.randint(0, 1024, (2, 40), device="cuda")
    mask = torch.ones_like(ids)
    mask[1, :5] = 0
    _compare(models, ids, mask, what=f"llama4 chunked layers, {cache} cache",
             cache=None if cache == "dynamic" else _static(64))


def test_packed_sequences_match_each_alone():
    """Three sequences packed into one row (a prompt without a cache, position_ids restarting): each
    attends only itself, as transformers' masks have it."""
    m = _models(_llama_config(), with_ref=False)["fa4jit"]
    torch.manual_seed(9)
    lengths = (70, 33, 150)
    ids = torch.randint(0, 1024, (1, sum(lengths)), device="cuda")
    pos = torch.cat([torch.arange(n, device="cuda") for n in lengths])[None]
    with torch.no_grad():
        packed = m(input_ids=ids, position_ids=pos, use_cache=False).logits.float()
        alone = torch.cat([m(input_ids=x, use_cache=False).logits for x in ids.split(lengths, 1)], 1).float()
    diff = (packed - alone).abs().max().item()
    print(f"packed vs alone: max |logit diff| {diff:.4f} (scale {alone.abs().max().item():.2f})")
    assert diff <= 0.02 * alone.abs().max().item()


def test_generate_with_a_static_cache_matches_sdpa():
    """generate(cache_implementation="static") (which may compile the decode step): each step's mask is
    built ahead of the forward and passed back in; greedy tokens match SDPA's and the logits match
    until the first near-tie."""
    models = _models(_llama_config())
    torch.manual_seed(10)
    ids = torch.randint(0, 1024, (2, 40), device="cuda")
    kw = dict(attention_mask=torch.ones_like(ids), max_new_tokens=16, do_sample=False, pad_token_id=0,
              cache_implementation="static", output_logits=True, return_dict_in_generate=True)
    with torch.no_grad():
        ga, gb = models["fa4jit"].generate(ids, **kw), models["ref"].generate(ids, **kw)
    agree = int((ga.sequences == gb.sequences).all(0)[ids.shape[1]:].cumprod(0).sum())
    la, lb = torch.stack(ga.logits[:agree + 1], 1).float(), torch.stack(gb.logits[:agree + 1], 1).float()
    diff = (la - lb).abs().max().item()
    print(f"generate, static cache: {agree} steps agree; max |logit diff| {diff:.4f}")
    assert agree >= 8 and diff <= 0.05 * lb.abs().max().item() + 0.05
