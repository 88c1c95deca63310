"""The pass list as a whole: order and reasons, --dump-after, verification, and every model
compiled to a kernel-level graph that computes what eager PyTorch computes."""

import time

import numpy as np
import pytest

from tests.compiler.test_capture import MODELS
from tests.compiler.zoo import max_error
from trnsim.compiler.errors import IRError
from trnsim.compiler.fused import KERNEL_LEVEL_LEAVES, KERNEL_LEVEL_VIEWS
from trnsim.compiler.interpret import evaluate
from trnsim.compiler.ir import Rewriter
from trnsim.compiler.kernel_ops import KERNEL_OPS as KERNELS
from trnsim.compiler.options import CompileOptions
from trnsim.compiler.passes import PASS_NAMES, PIPELINE, describe, run_pipeline
from trnsim.errors import InvalidArgumentError, UnknownNameError


def test_pipeline_is_one_ordered_list_with_a_reason_each():
    assert PASS_NAMES == ("fold", "canonicalize", "expand_attention", "auto_cast",
                          "fuse_attention", "fuse_matmul",
                          "fuse_norms", "fuse_elementwise", "quantize_weights", "tensor_parallel",
                          "layout", "plan_memory", "schedule")
    assert all(len(p.reason) > 20 for p in PIPELINE)
    assert describe().count("\n") == len(PIPELINE) - 1


def test_dump_after_prints_the_ir_after_that_pass(zoo):
    printed = []
    run_pipeline(zoo.get("mlp").graph, dump_after=["fuse_matmul"], dump=printed.append)
    (text,) = printed
    assert text.startswith("# after fuse_matmul:") and "k.matmul" in text
    with pytest.raises(UnknownNameError, match="did you mean 'fuse_matmul'"):
        run_pipeline(zoo.get("mlp").graph, dump_after=["fuse_matmull"])


@pytest.mark.parametrize("name", MODELS)
def test_every_model_compiles_to_kernels_that_match_eager(zoo, name):
    m = zoo.get(name)
    k = run_pipeline(m.graph, CompileOptions(auto_cast="none"))
    allowed = set(KERNEL_LEVEL_LEAVES) | set(KERNEL_LEVEL_VIEWS) | set(KERNELS)
    assert set(k.op_counts()) <= allowed
    assert max_error(evaluate(k, m.flat_inputs), m.eager_leaves) < 1e-4
    plan = k.meta["memory_plan"]
    assert 0 < plan.activation_bytes <= plan.naive_activation_bytes
    n_weights = len({n.attrs["ref"] for n in k.nodes if n.op == "constant"})
    assert k.weight_bytes() <= plan.weight_bytes < k.weight_bytes() + 64 * n_weights


def test_default_options_store_matmul_weights_in_bf16(zoo):
    m = zoo.get("bert")
    k = run_pipeline(m.graph)
    weights = [k.constant(mm.inputs[1]) for mm in k.nodes if mm.op == "k.matmul"]
    assert weights and all(w.dtype.name == "bfloat16" and w.pending is not None for w in weights)
    assert all(mm.attrs["weight_layout"] == "kn" for mm in k.nodes if mm.op == "k.matmul")
    out = evaluate(k, m.flat_inputs)[0]
    assert 1e-5 < float(np.max(np.abs(out - m.eager_leaves[0]))) < 0.1


@pytest.mark.slow
def test_bert_large_captures_and_compiles_quickly():
    """Issue 7's budget: trace + compile + one simulation of BERT-large (bs 1, seq 128) in 30 s
    on this machine; the front end must leave most of it to the simulation."""
    import torch
    import transformers as T

    from trnsim.compiler.capture import capture

    torch.manual_seed(0)
    model = T.BertModel(T.BertConfig(hidden_size=1024, num_hidden_layers=24,
                                     num_attention_heads=16, intermediate_size=4096)).eval()
    ids = torch.randint(0, 30000, (1, 128))
    start = time.perf_counter()
    graph = capture(model, (ids,))
    k = run_pipeline(graph, CompileOptions())
    elapsed = time.perf_counter() - start
    assert sum(1 for n in k.nodes if n.op == "k.attention") == 24
    assert elapsed < 15, elapsed


def test_the_result_is_verified_by_default_and_every_pass_in_check_mode(zoo, monkeypatch):
    """A pass that leaves a wrong type is caught: at the end by default, right after it under
    TRNSIM_PASSES=check (the tests' setting) or verify=True; verify=False checks nothing."""
    import trnsim.compiler.passes as passes

    def corrupt(graph, options):  # a copy whose output claims a wrong shape
        rw = Rewriter(graph)
        for node in graph.nodes:
            rw.keep(node)
        out = rw.finish()
        out.outputs[0].shape = (*out.outputs[0].shape, 7)
        return out

    broken = (passes.Pass("fold", corrupt, "a broken pass"), *PIPELINE[1:])
    monkeypatch.setattr(passes, "PIPELINE", broken)
    graph = zoo.get("mlp").graph
    with pytest.raises(IRError, match="rule gives"):
        run_pipeline(graph)  # TRNSIM_PASSES=check: right after the pass
    monkeypatch.delenv("TRNSIM_PASSES")
    with pytest.raises(IRError, match="rule gives"):
        run_pipeline(zoo.get("mlp").graph, stop_after="fold")  # default: the result
    run_pipeline(zoo.get("mlp").graph, stop_after="fold", verify=False)


def test_an_unknown_pass_check_mode_is_refused_before_any_pass(zoo, monkeypatch):
    monkeypatch.setenv("TRNSIM_PASSES", "chek")
    with pytest.raises(InvalidArgumentError, match="TRNSIM_PASSES='chek' is not one of result, check"):
        run_pipeline(zoo.get("mlp").graph)
    monkeypatch.setenv("TRNSIM_PASSES", "result")
    run_pipeline(zoo.get("mlp").graph, stop_after="fold")
