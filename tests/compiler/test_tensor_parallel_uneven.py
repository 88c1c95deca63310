"""Tensor parallelism over degrees the model's sizes do not divide: padded heads and widths, and
key/value heads replicated over more ranks than there are of them (grouped-query attention).
Tiny Llamas whose split prefill and decode step must match eager PyTorch in fp32."""

import importlib

import numpy as np
import pytest

from trnsim.compiler import CompileOptions, run_pipeline
from trnsim.compiler.ir import Constant, Shard
from trnsim.numerics import dtype

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tp_module = importlib.import_module("trnsim.compiler.passes.tensor_parallel")


@pytest.fixture(autouse=True)
def tiny_weights_split(monkeypatch):
    monkeypatch.setenv("TRNSIM_CACHE_DIR", "off")
    monkeypatch.setattr(tp_module, "MIN_SHARD_BYTES", 0)


def test_a_shard_pads_and_replicates_chunks():
    data = np.arange(1, 7, dtype=np.float32)
    padded = Constant(data, dtype("float32")).sharded(0, 4, padded=8)
    assert padded.shape == (2,)
    assert [padded.value(r).tolist() for r in range(4)] == [[1, 2], [3, 4], [5, 6], [0, 0]]
    shared = Constant(data, dtype("float32")).sharded(0, 4, parts=2)
    assert shared.shape == (3,) and shared.shard == Shard(0, 4, 1, 2, None)
    assert [shared.value(r).tolist() for r in range(4)] == [[1, 2, 3]] * 2 + [[4, 5, 6]] * 2


def _llama(heads: int, kv_heads: int, intermediate: int):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=16 * heads, intermediate_size=intermediate,
                                      num_hidden_layers=1, num_attention_heads=heads,
                                      num_key_value_heads=kv_heads, vocab_size=250, head_dim=16)
    return transformers.LlamaForCausalLM(config).eval()


def _split_graph(model, degree, inputs, kwargs=None):
    from trnsim.compiler.capture import capture

    return run_pipeline(capture(model, inputs, kwargs), CompileOptions(
        instance="trn1.32xlarge", cores=degree, tensor_parallel=degree),
        stop_after="tensor_parallel")


def _check_prefill_and_decode(model, degree):
    """Both graphs match eager; returns the decode step's rank-local graph."""
    import trnsim
    from trnsim.compiler.decode_step import decode_step

    ids = torch.randint(0, 250, (2, 8))
    with torch.no_grad():
        want = model(ids).logits
    got = trnsim.trace(model, (ids,), instance="trn1.32xlarge", tensor_parallel=degree,
                       auto_cast="none")(ids)
    got = got.logits if hasattr(got, "logits") else got[0]
    assert float((got - want).abs().max() / want.abs().max()) < 1e-5
    step, inputs = decode_step(model, batch=2, context=7)
    with torch.no_grad():
        want = step(input_ids=inputs["input_ids"],
                    past_keys=tuple(t.clone() for t in inputs["past_keys"]),
                    past_values=tuple(t.clone() for t in inputs["past_values"]))
    got = trnsim.trace(step, (), kwargs=inputs, instance="trn1.32xlarge",
                       tensor_parallel=degree, auto_cast="none")(**inputs)
    assert float((got - want).abs().max() / want.abs().max()) < 1e-5
    return _split_graph(step, degree, (), inputs)


def _collectives(graph):
    return [n.attrs["kind"] for n in graph.nodes if n.op == "k.collective"]


def test_heads_that_do_not_divide_the_ranks_are_padded():
    """6 heads and an MLP width of 102 over 4 ranks: padded to 8 heads (2 a rank) and 104
    columns, as neuronx-distributed pads them; the padding's zero weights change no number."""
    model = _llama(heads=6, kv_heads=6, intermediate=102)
    graph = _check_prefill_and_decode(model, 4)
    shapes = {n.name.split("_proj")[0].rsplit("_", 1)[-1]: n.shape for n in graph.nodes
              if n.op == "constant" and n.name.startswith("model_model_layers_0_")
              and n.rank == 2}
    assert shapes["q"] == (32, 96) and shapes["k"] == (32, 96) and shapes["o"] == (96, 32)
    assert shapes["gate"] == (26, 96) and shapes["down"] == (96, 26)
    attention = [n for n in graph.nodes if n.op == "k.attention"]
    assert attention and all(n.attrs["batch"] == (2, 2) for n in attention)
    # per layer: attention output and MLP down all-reduced; the padded vocabulary gathered
    assert _collectives(graph) == ["all_reduce"] * 2 + ["all_gather"]


def test_kv_heads_are_replicated_over_more_ranks_than_heads():
    """2 KV heads, 8 query heads over 8 ranks: each rank holds one query head and the KV head
    it reads (KV heads on 4 ranks each); attention and the cache are per rank, no gathers."""
    model = _llama(heads=8, kv_heads=2, intermediate=64)
    graph = _check_prefill_and_decode(model, 8)
    k_proj = [graph.constant(n) for n in graph.nodes if n.op == "constant"
              and "k_proj" in n.name]
    assert k_proj and all(c.shape == (16, 128) and c.shard.chunks == 2 for c in k_proj)
    attention = [n for n in graph.nodes if n.op == "k.attention"]
    assert all(n.attrs["batch"] == (2, 1) and n.attrs["sq"] == 1 for n in attention)
    # the KV cache inputs: each rank is given (and updates in place) its KV head's chunk only
    caches = [n for n in graph.inputs if n.name.startswith("past_")]
    assert len(caches) == 2 and all(n.shape == (2, 1, 8, 16) and n.attrs["tp_shard"]
                                    == (1, 8, 1, 2, None) for n in caches)
    assert not any(n.op == "k.gather" and n.attrs["kind"] == "index_select"
                   for n in graph.nodes)
    assert _collectives(graph) == ["all_reduce"] * 2 + ["all_gather"]


def test_a_model_with_its_kv_cache_split_saves_and_loads(tmp_path):
    """The artifact records how each rank's cache chunk is cut from the caller's cache."""
    import trnsim
    from trnsim.compiler.decode_step import decode_step

    step, inputs = decode_step(_llama(heads=6, kv_heads=6, intermediate=102), batch=1,
                               context=7)
    compiled = trnsim.trace(step, (), kwargs=inputs, instance="trn1.32xlarge",
                            tensor_parallel=4, auto_cast="none")
    assert [s.shard for s in compiled.inputs[1:]] == [(1, 4, 1, 4, 8)] * 2
    assert compiled.inputs[1].shape == (1, 6, 8, 16)
    loaded = trnsim.load(compiled.save(tmp_path / "decode.trnsim"))
    assert loaded.inputs == compiled.inputs
    np.testing.assert_array_equal(loaded(**inputs).numpy(), compiled(**inputs).numpy())


def test_row_parallel_sums_are_reduced_in_the_models_dtype():
    """transformers-neuronx (all_reduce_dtype=None) and NxD Inference (rpl_reduce_dtype=None)
    all-reduce a row-parallel layer's partial sums in its input's dtype: bf16 for a model
    loaded in bf16 (half the bytes of fp32), fp32 for an fp32 model."""
    model = _llama(heads=4, kv_heads=4, intermediate=64)
    ids = torch.randint(0, 250, (1, 8))
    fp32 = _split_graph(model, 4, (ids,))
    bf16 = _split_graph(model.to(torch.bfloat16), 4, (ids,))

    def reduced(graph):
        return [n.attrs["dtype"] for n in graph.nodes if n.op == "k.collective"
                and n.attrs["kind"] == "all_reduce"]

    assert reduced(fp32) == ["float32"] * 2
    assert reduced(bf16) == ["bfloat16"] * 2


def test_query_heads_padded_per_group_over_replicated_kv_heads():
    """8 query heads and 2 KV heads over 6 ranks (Llama-3-8B on 24 ranks in miniature: 32 and
    8): each KV head on 3 ranks, its 4 query heads padded to 6 at the group's end (NxD's
    interleaved padding), two a rank, so attention stays split in prefill and decode; only the
    output projection, the MLP and the vocabulary cost collectives."""
    model = _llama(heads=8, kv_heads=2, intermediate=96)
    graph = _check_prefill_and_decode(model, 6)
    weights = {n.name.split("_proj")[0].rsplit("_", 1)[-1]: graph.constant(n)
               for n in graph.nodes if n.op == "constant" and "_proj" in n.name
               and "self_attn" in n.name}
    assert weights["q"].shape == (32, 128) and weights["o"].shape == (128, 32)
    # rank 2 holds group 0's padding slots 4 and 5: zero query rows and output columns
    assert not weights["q"].value(2).any() and not weights["o"].value(2).any()
    q_all = np.concatenate([weights["q"].value(r) for r in range(6)])
    real = q_all.reshape(2, 6, 16, 128)[:, :4].reshape(128, 128).astype(np.float32)
    np.testing.assert_allclose(real, model.model.layers[0].self_attn.q_proj.weight.detach(),
                               rtol=1e-2, atol=1e-3)  # the bf16 (auto-cast) image of the rows
    attention = [n for n in graph.nodes if n.op == "k.attention"]
    assert attention and all(n.attrs["batch"] == (2, 1) and n.attrs["sq"] == 2
                             for n in attention)
    assert _collectives(graph) == ["all_reduce"] * 2 + ["all_gather"]
    ids = torch.randint(0, 250, (2, 8))
    assert _collectives(_split_graph(model, 6, (ids,))) == ["all_reduce"] * 2 + ["all_gather"]
