"""neuron-cc pipeline stages: a kernel-level graph cut into stages that, run one after another
on the values they hand over, compute what the whole graph computes."""

import numpy as np
import pytest

from trnsim.compiler import CompileOptions, run_pipeline
from trnsim.compiler.interpret import evaluate
from trnsim.compiler.passes.pipeline import _balanced, split_stages
from trnsim.errors import InvalidArgumentError


def _front(zoo, name):
    return run_pipeline(zoo.get(name).graph, CompileOptions(instance="inf1.xlarge"),
                        stop_after="tensor_parallel")


@pytest.mark.parametrize("name, stages", [("bert", 2), ("bert", 4), ("gpt2", 3), ("mlp", 2),
                                          ("cnn", 3)])
def test_stages_run_in_turn_compute_the_whole_graph(zoo, name, stages):
    m = zoo.get(name)
    graph = _front(zoo, name)
    whole = evaluate(graph, m.flat_inputs)
    parts = split_stages(graph, stages)
    assert len(parts) == stages
    values = {n.name: v for n, v in zip(graph.inputs, m.flat_inputs, strict=True)}
    for part in parts:
        part.graph.verify()
        assert any(n.op.startswith("k.") for n in part.graph.nodes)
        values.update(zip(part.outputs, evaluate(part.graph, [values[i] for i in part.inputs]),
                          strict=True))
    for name_, want in zip(parts[-1].outputs, whole, strict=True):
        np.testing.assert_array_equal(np.asarray(values[name_]), np.asarray(want))


def test_stages_balance_weight_bytes():
    assert _balanced([10, 10, 10, 10], 2) == [0, 0, 1, 1]
    assert _balanced([40, 1, 1, 1, 1], 2) == [0, 1, 1, 1, 1]
    assert _balanced([0, 0, 0, 5], 4) == [0, 1, 2, 3]  # every stage gets a kernel


def test_more_stages_than_kernels_is_an_error(zoo):
    graph = _front(zoo, "mlp")
    kernels = sum(n.op.startswith("k.") for n in graph.nodes)
    with pytest.raises(InvalidArgumentError, match=f"expected 1 to {kernels}"):
        split_stages(graph, kernels + 1)
