"""Tensor parallelism: the sharding pass, and tiny models split over 2-4 simulated cores that
must still match eager PyTorch (metric as tests/compiler/test_lowering_models.py)."""

import importlib
from pathlib import Path

import numpy as np
import pytest

from tests.compiler.test_lowering_models import _call, _compare, _leaves
from trnsim.compiler import CompileOptions, ModelTooLargeError, run_pipeline
from trnsim.errors import InvalidArgumentError

tp_module = importlib.import_module("trnsim.compiler.passes.tensor_parallel")
memory_module = importlib.import_module("trnsim.compiler.passes.memory")


@pytest.fixture(autouse=True)
def no_cache(monkeypatch):
    monkeypatch.setenv("TRNSIM_CACHE_DIR", "off")


@pytest.fixture
def shard_everything(monkeypatch):
    """Tiny models' weights are far below the size worth splitting; split them anyway."""
    monkeypatch.setattr(tp_module, "MIN_SHARD_BYTES", 0)


@pytest.mark.parametrize("src, dst, axis, degree, want", [
    ((16, 64), (1, 16, 4, 16), 1, 2, 2),  # split heads out of the hidden axis
    ((1, 16, 2, 16), (16, 32), 2, 2, 1),  # merge them back
    ((4, 16), (64,), 1, 2, None),  # an inner axis of a merge is not one chunk
    ((64,), (2, 32), 0, 4, None),  # the outer output axis does not divide
    ((8, 6), (8, 1, 6), 0, 2, 0),  # unit axes are skipped
])
def test_reshape_keeps_chunks_only_when_contiguous(src, dst, axis, degree, want):
    assert tp_module.reshape_axis(src, dst, axis, degree) == want


def _kernel_graph(zoo, name, **options):
    m = zoo.get(name)
    return run_pipeline(m.graph, CompileOptions(instance="inf2.xlarge", **options),
                        stop_after="tensor_parallel")


def test_bert_layers_cost_two_all_reduces_and_split_every_weight(zoo, shard_everything):
    whole = _kernel_graph(zoo, "bert")
    split = _kernel_graph(zoo, "bert", cores=2, tensor_parallel=2)
    kinds = [n.attrs["kind"] for n in split.nodes if n.op == "k.collective"]
    assert kinds.count("all_reduce") == 2 * 2  # attention output and FFN down, per layer
    assert kinds.count("all_gather") == 1  # the pooler's columns, at the end
    assert split.meta["tensor_parallel"] == 2
    heads = [n.attrs["batch"] for n in split.nodes if n.op == "k.attention"]
    assert heads and all(b[-1] == 2 for b in heads)  # 4 heads, 2 per rank
    matmul_weights = sum(n.nbytes for n in whole.nodes if n.op == "constant" and n.rank == 2
                         and n.dtype.name == "bfloat16")
    saved = whole.weight_bytes() - split.weight_bytes()
    assert saved == pytest.approx(matmul_weights / 2, rel=0.05)  # (and half their biases)


def test_a_fused_qkv_projection_is_split_per_part(zoo, shard_everything):
    split = _kernel_graph(zoo, "gpt2", cores=2, tensor_parallel=2)
    kinds = [n.attrs["kind"] for n in split.nodes if n.op == "k.collective"]
    assert kinds == ["all_reduce"] * 2 * 2  # c_attn's q, k, v each split by heads: no gathers
    c_attn = [split.constant(n) for n in split.nodes if n.op == "constant"
              and "c_attn_weight" in n.name]
    assert c_attn[0].shard[:3] == (1, 2, 3) and c_attn[0].shard.chunks == 2
    whole = c_attn[0].data
    q_rank1 = c_attn[0].value(1)[:, :32]  # rank 1's half of q's 64 columns
    np.testing.assert_array_equal(q_rank1, np.asarray(whole[:, 32:64]).astype(q_rank1.dtype))


def test_expert_weights_split_like_an_mlps(zoo, shard_everything):
    """Each expert's up projection column-parallel, its down projection row-parallel (one
    all-reduce of the experts' partial products), the sum over experts kept split between."""
    whole = _kernel_graph(zoo, "mixtral")
    split = _kernel_graph(zoo, "mixtral", cores=2, tensor_parallel=2)
    experts = [n for n in whole.nodes if n.op == "constant" and n.rank == 3]
    assert experts  # [E, 2I, H] gate/up and [E, H, I] down, per layer
    local = {n.name: n.shape for n in split.nodes if n.op == "constant" and n.rank == 3}
    assert sorted(local.values()) == sorted((e, a // 2, b) if a > b else (e, a, b // 2)
                                            for e, a, b in (n.shape for n in experts))
    assert split.weight_bytes() < 0.6 * whole.weight_bytes()


@pytest.mark.parametrize("name, degree", [("bert", 2), ("gpt2", 2), ("mlp", 4),
                                          ("bert_eager_mask", 2), ("mixtral", 2)])
def test_split_models_match_eager(zoo, shard_everything, name, degree):
    import trnsim

    m = zoo.get(name)
    compiled = trnsim.trace(m.model, m.example, instance="trn1.32xlarge", tensor_parallel=degree)
    assert compiled.tensor_parallel == degree
    _compare(_leaves(_call(compiled, m.example)), m.eager_leaves, rel=2e-2, cosine=0.999)
    programs = compiled.programs()
    assert len(programs) == degree and programs[1].instructions is programs[0].instructions
    sharded = [t for t in programs[0].tensors.values() if getattr(t.data, "sharded", False)]
    assert sharded
    assert not np.array_equal(programs[0].tensors[sharded[0].name].values(),
                              programs[1].tensors[sharded[0].name].values())


def test_report_profile_and_artifact_of_a_split_model(zoo, shard_everything, tmp_path):
    import json

    import trnsim

    m = zoo.get("bert")
    single = trnsim.trace(m.model, m.example, instance="inf2.xlarge")
    split = trnsim.trace(m.model, m.example, instance="inf2.xlarge", tensor_parallel=2)
    report = split.report()
    assert report.by_op["k.collective"]["kernels"] == 5
    assert report.copies == 1 and "tensor parallel" in report.notes[0]
    # a tiny model gains nothing from halving its weights: the collectives' latency shows
    assert report.latency_ms > single.report().latency_ms
    trace = json.loads(Path(split.profile(tmp_path / "tp.json")).read_text())
    assert len({e.get("pid") for e in trace["traceEvents"] if e.get("ph") == "X"}) == 2
    loaded = trnsim.load(split.save(tmp_path / "tp.trnsim"))
    assert loaded.tensor_parallel == 2
    for got, want in zip(_leaves(_call(loaded, m.example)), _leaves(_call(split, m.example)),
                         strict=True):
        np.testing.assert_array_equal(got, want)


def test_a_model_too_large_for_one_core_is_split_over_the_cores(zoo, monkeypatch):
    import trnsim

    m = zoo.get("bert")
    total = _kernel_graph(zoo, "bert").weight_bytes()
    budget = int(total * 0.8)  # one core holds 80% of it: two halves fit
    monkeypatch.setattr(memory_module, "device_budget",
                        lambda instance, cores=1, lnc=None: (budget * cores, instance))
    monkeypatch.setattr(tp_module, "MIN_SHARD_BYTES", 0)
    compiled = trnsim.trace(m.model, m.example, instance="inf2.xlarge", cores=2)
    assert compiled.tensor_parallel == 2
    _compare(_leaves(_call(compiled, m.example)), m.eager_leaves, rel=2e-2, cosine=0.999)
    with pytest.raises(ModelTooLargeError, match="tensor parallel"):
        trnsim.trace(m.model, m.example, instance="inf2.xlarge")
    four = trnsim.trace(m.model, m.example, instance="trn1.32xlarge", cores=4)
    assert four.tensor_parallel == 2  # the fewest ranks that hold it; the rest make copies


def test_tensor_parallel_must_divide_the_cores():
    with pytest.raises(InvalidArgumentError, match="divides cores=4"):
        CompileOptions(cores=4, tensor_parallel=3)
    assert CompileOptions(cores=4, tensor_parallel=2).key()["tensor_parallel"] == 2


@pytest.mark.parametrize("name", ["bert", "gpt2", "distilbert"])
def test_the_reference_interpreter_runs_every_rank(zoo, shard_everything, name):
    from trnsim.compiler.interpret import evaluate

    m = zoo.get(name)
    whole = evaluate(_kernel_graph(zoo, name), m.flat_inputs)
    split_graph = _kernel_graph(zoo, name, cores=4, tensor_parallel=4)
    assert any(n.op == "k.collective" for n in split_graph.nodes)
    for got, want in zip(evaluate(split_graph, m.flat_inputs), whole, strict=True):
        _compare([np.asarray(got, np.float32)], [np.asarray(want, np.float32)], rel=1e-2,
                 cosine=0.9999)


def test_inferentia_has_no_collectives_for_tensor_parallel(zoo, shard_everything):
    import trnsim
    from trnsim.errors import UnsupportedError

    m = zoo.get("mlp")
    with pytest.raises(UnsupportedError, match=r"tensor parallel over 2 cores of inf1\.xlarge"):
        trnsim.trace(m.model, m.example, instance="inf1.xlarge", tensor_parallel=2)


@pytest.mark.parametrize("instance, degree", [("trn2.48xlarge", 8), ("trn1.32xlarge", 4)])
def test_ranks_spanning_chips_and_logical_cores(zoo, shard_everything, instance, degree):
    """8 logical NeuronCores of trn2 (LNC=2) span two chips; 4 ranks of trn1 span two chips:
    the all-reduces cross NeuronLink and the results still match."""
    import trnsim

    m = zoo.get("bert")
    compiled = trnsim.trace(m.model, m.example, instance=instance, tensor_parallel=degree)
    _compare(_leaves(_call(compiled, m.example)), m.eager_leaves, rel=2e-2, cosine=0.999)
    physical = 2 if instance.startswith("trn2") else 1  # LNC=2: a rank is two NeuronCore-v3s
    assert compiled.plan.physical == physical
    assert len(compiled.rank_timings()) == degree * physical


def test_rotary_embeddings_keep_heads_split(shard_everything):
    """Llama's rotate_half concatenates halves of head_dim: with heads split over the ranks, each
    rank joins its own chunks. Before, every layer all-gathered Q and K (Llama-2-7B on
    trn1.32xlarge with tp8: 39 ms, 18 ms without)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    import trnsim
    from trnsim.compiler.capture import capture

    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=4,
                                      vocab_size=500)
    model = transformers.LlamaModel(config).eval()
    ids = torch.randint(0, 500, (2, 32))
    graph = run_pipeline(capture(model, (ids,)), CompileOptions(
        instance="trn1.2xlarge", cores=2, tensor_parallel=2), stop_after="tensor_parallel")
    kinds = [n.attrs["kind"] for n in graph.nodes if n.op == "k.collective"]
    assert kinds.count("all_reduce") == 2 * 2 and kinds.count("all_gather") == 0
    with torch.no_grad():
        want = model(ids).last_hidden_state
    got = trnsim.trace(model, (ids,), instance="trn1.2xlarge", tensor_parallel=2,
                       auto_cast="none")(ids).last_hidden_state
    assert float((got - want).abs().max() / want.abs().max()) < 1e-5


def test_gathered_expert_weights_split_by_rows(shard_everything):
    """batched_mm experts gather each token's expert matrices: each rank gathers its rows of
    every matrix and multiplies them, so no rank holds whole experts."""
    import torch

    import trnsim

    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = transformers.MixtralModel(transformers.MixtralConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=100, num_local_experts=4, num_experts_per_tok=2,
        use_cache=False)).eval()
    model.set_experts_implementation("batched_mm")
    ids = torch.randint(0, 100, (2, 8))
    compiled = trnsim.trace(model, (ids,), instance="trn1.32xlarge", auto_cast="none",
                            tensor_parallel=2)
    want = model(ids).last_hidden_state.detach()
    got = compiled(ids)
    got = got.last_hidden_state if hasattr(got, "last_hidden_state") else got[0]
    assert torch.allclose(got, want, atol=1e-5 * float(want.abs().max()))
    experts = [t for t in compiled.programs()[0].tensors.values()
               if getattr(t.data, "sharded", False) and len(t.shape) == 3]
    assert len(experts) == 2 and all(t.shape[1] in (128, 32) for t in experts)
