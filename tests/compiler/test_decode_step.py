"""decode_step: one generated token against a KV cache compiles and matches eager PyTorch."""

import pytest

import trnsim
from trnsim.errors import InvalidArgumentError

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

_TINY = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=500)


def _model(kind: str):
    torch.manual_seed(0)
    config = {
        "llama": lambda: transformers.LlamaConfig(**_TINY),
        # context 40 > window 16: the sliding-window mask must reach the compiled step
        "mistral": lambda: transformers.MistralConfig(**_TINY, sliding_window=16),
        # context 40 < window 64: every key is in the window, the cache is written in place
        "mistral-in-window": lambda: transformers.MistralConfig(**_TINY, sliding_window=64),
        "gpt2": lambda: transformers.GPT2Config(n_embd=128, n_layer=2, n_head=4, vocab_size=500),
    }[kind]()
    return transformers.AutoModelForCausalLM.from_config(config).eval()


def _appending_reference(model, inputs):
    """The next token's logits the Hugging Face way: a DynamicCache of the cached positions,
    appended to with torch.cat."""
    cache = transformers.DynamicCache(config=model.config)
    for layer, (k, v) in enumerate(zip(inputs["past_keys"], inputs["past_values"], strict=True)):
        cache.update(k[:, :, :-1].clone(), v[:, :, :-1].clone(), layer)
    with torch.no_grad():
        return model(input_ids=inputs["input_ids"], past_key_values=cache,
                     use_cache=True).logits[:, -1]


@pytest.mark.parametrize("kind", ["llama", "mistral", "mistral-in-window", "gpt2"])
def test_decode_step_matches_eager(kind):
    model = _model(kind)
    step, inputs = trnsim.decode_step(model, batch=2, context=40)
    assert inputs["input_ids"].shape == (2, 1)
    assert inputs["past_keys"][0].shape[2] == 41  # 40 cached positions and the new token's
    expected = _appending_reference(model, inputs)
    with torch.no_grad():
        torch.testing.assert_close(step(**inputs), expected, rtol=1e-5, atol=1e-5)
    compiled = trnsim.trace(step, (), kwargs=inputs, instance="trn1.2xlarge", auto_cast="none")
    got = compiled(**inputs)
    assert got.shape == expected.shape == (2, 500)
    assert float((got - expected).abs().max()) <= 1e-5 * float(expected.abs().max())
    # the user's eager model answers as before (GPT-2's dropout stays off after the trace)
    with torch.no_grad():
        assert torch.equal(step(**inputs), expected)


def test_a_longer_context_costs_more_time():
    model = _model("llama")
    times = []
    for context in (64, 1024):
        step, inputs = trnsim.decode_step(model, batch=8, context=context)
        times.append(trnsim.trace(step, (), kwargs=inputs, instance="inf2.xlarge").report()
                     .latency_ms)
    assert times[1] > times[0]


def test_a_meta_model_is_timed_with_a_zero_cache():
    with trnsim.empty_weights():
        model = _model("llama")
    step, inputs = trnsim.decode_step(model, batch=1, context=16)
    assert all(not k.any() for k in inputs["past_keys"])
    report = trnsim.trace(step, (), kwargs=inputs, instance="inf2.xlarge").report()
    assert report.latency_ms > 0


def test_bad_arguments_are_named():
    with pytest.raises(InvalidArgumentError, match="causal LM"):
        trnsim.decode_step(torch.nn.Linear(2, 2))
    model = _model("gpt2")  # 1024 positions
    with pytest.raises(InvalidArgumentError, match="max_position_embeddings"):
        trnsim.decode_step(model, context=1024)
    with pytest.raises(InvalidArgumentError, match="context 0"):
        trnsim.decode_step(model, context=0)


def test_grouped_query_heads_read_shared_k_and_v_without_copies():
    """Llama's repeat_kv (4 query heads per KV head here) must not copy the cache once per
    query head: at a decode step (no mask) the 4 query heads are the 4 query rows of one
    attention problem per (batch, KV head), over the cache as it is."""
    from trnsim.compiler.capture import capture
    from trnsim.compiler.options import CompileOptions
    from trnsim.compiler.passes import run_pipeline

    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(transformers.LlamaConfig(
        **{**_TINY, "num_attention_heads": 8})).eval()
    step, inputs = trnsim.decode_step(model, batch=2, context=300)
    graph = capture(step, (), inputs)
    fused = run_pipeline(graph, CompileOptions(auto_cast="none"), stop_after="fuse_elementwise")
    attention = [n for n in fused.nodes if n.op == "k.attention"]
    assert len(attention) == 2
    assert all(a.attrs["batch"] == (2, 2) and a.attrs["sq"] == 4 for a in attention)
    assert not [n for n in fused.nodes if n.op == "expand"]
    with torch.no_grad():
        expected = step(**inputs)
    got = trnsim.trace(step, (), kwargs=inputs, instance="inf2.xlarge", auto_cast="none")(**inputs)
    assert float((got - expected).abs().max()) <= 1e-5 * float(expected.abs().max())


@pytest.mark.parametrize("batch, heads", [(2, 2), (4, 2)])
def test_keys_broadcast_over_the_batch_are_not_taken_for_grouped_heads(batch, heads):
    """One prompt's K/V expanded over a batch is not repeat_kv: stacking query heads on it would
    mix batch items (or fail)."""
    torch.manual_seed(0)

    class Shared(torch.nn.Module):
        def forward(self, q, k, v):
            shape = (batch, heads, k.shape[-2], k.shape[-1])
            return torch.nn.functional.scaled_dot_product_attention(q, k.expand(shape),
                                                                    v.expand(shape))

    q, k, v = torch.randn(batch, heads, 3, 16), torch.randn(1, heads, 40, 16), torch.randn(
        1, heads, 40, 16)
    compiled = trnsim.trace(Shared(), (q, k, v), instance="trn1.2xlarge", auto_cast="none")
    torch.testing.assert_close(compiled(q, k, v), Shared()(q, k, v), rtol=1e-5, atol=1e-5)
