"""A compiled decode step over a transformers StaticCache, for the transformers backend's CPU test
(kernels replaced by a traceable stand-in) and GPU test (the kernels themselves)."""
import torch


def compiled_static_decode(model, ref, ids, max_cache_len: int, steps: int):
    """Prefills ids into a StaticCache of max_cache_len for model and ref, then runs steps decode steps
    through torch.compile(model) and ref eagerly. Returns [(model's logits, ref's logits)] a step
    (float32) and torch._dynamo.explain of one more step of model."""
    from transformers import StaticCache
    caches = [StaticCache(config=m.config, max_cache_len=max_cache_len) for m in (model, ref)]
    with torch.no_grad():
        for m, c in zip((model, ref), caches):
            m(input_ids=ids, past_key_values=c, use_cache=True)
        torch._dynamo.reset()
        step = torch.compile(model)
        logits = []
        for t in range(steps):
            nxt = ids[:, t:t + 1]
            logits.append((step(input_ids=nxt, past_key_values=caches[0], use_cache=True).logits.float(),
                           ref(input_ids=nxt, past_key_values=caches[1], use_cache=True).logits.float()))
        torch._dynamo.reset()
        explain = torch._dynamo.explain(model)(input_ids=ids[:, :1], past_key_values=caches[0], use_cache=True)
    return logits, explain
