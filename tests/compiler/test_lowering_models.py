"""End to end: every model the issue names (tiny configs) traced, lowered onto trnsim.kernels,
run on a simulated NeuronCore, and compared with eager PyTorch on CPU.

Metric (auto-cast matmult bf16): per output, max |error| / max |reference| < 2e-2 and cosine
similarity >= 0.999. With auto-cast off the lowering must match much tighter (fp32 TensorE).
"""

import numpy as np
import pytest

MODELS = ["mlp", "cnn", "bert", "bert_eager_mask", "roberta", "distilbert", "electra", "gpt2",
          "gpt2_eager", "vit", "resnet"]


@pytest.fixture(autouse=True)
def no_cache(monkeypatch):
    monkeypatch.setenv("TRNSIM_CACHE_DIR", "off")


def _leaves(value):
    import torch
    import torch.utils._pytree as pytree

    return [t.detach().float().numpy() for t in pytree.tree_leaves(value) if isinstance(t, torch.Tensor)]


def _compare(outputs, reference, rel, cosine):
    assert len(outputs) == len(reference)
    for got, want in zip(outputs, reference, strict=True):
        assert got.shape == want.shape
        scale = max(float(np.abs(want).max()), 1e-6)
        assert float(np.abs(got - want).max()) / scale < rel
        a, b = got.ravel().astype(np.float64), want.ravel().astype(np.float64)
        denom = np.linalg.norm(a) * np.linalg.norm(b)
        if denom > 0:
            assert float(a @ b / denom) >= cosine


def _call(compiled, example):
    return compiled(**example) if isinstance(example, dict) else compiled(*example)


@pytest.mark.parametrize("name", MODELS)
def test_model_matches_eager_within_bf16_tolerance(zoo, name):
    import trnsim

    m = zoo.get(name)
    compiled = trnsim.trace(m.model, m.example, instance="inf2.xlarge")
    out = _call(compiled, m.example)
    assert type(out).__name__ == type(m.eager).__name__  # same structure (ModelOutput, tensor...)
    _compare(_leaves(out), m.eager_leaves, rel=2e-2, cosine=0.999)
    report = compiled.report()
    assert report.latency_ms > 0 and report.kernels
    assert set(report.by_op) <= {"k.matmul", "k.conv2d", "k.attention", "k.softmax", "k.norm",
                                 "k.pool2d", "k.gather", "k.elementwise", "k.reduce", "k.cumsum",
                                 "k.concat", "k.pad", "reshape", "permute", "expand", "slice",
                                 "output"}


@pytest.mark.parametrize("name", ["mlp", "bert"])
def test_without_auto_cast_results_are_fp32_accurate(zoo, name):
    import trnsim

    m = zoo.get(name)
    compiled = trnsim.trace(m.model, m.example, auto_cast="none")
    _compare(_leaves(_call(compiled, m.example)), m.eager_leaves, rel=1e-4, cosine=0.999999)


def test_bert_layers_are_traced_once_and_replayed(zoo):
    """Identical kernels (the same layer twice) are traced once: the second layer's kernels are
    the first layer's instructions on other tensors, so both layers cost the same."""
    import trnsim
    from trnsim.perf import kernel_times

    m = zoo.get("bert")
    compiled = trnsim.trace(m.model, m.example)
    times = kernel_times(compiled.timing())
    by_source = {}
    for k in times:
        by_source.setdefault((k.op, k.source), []).append(k)
    repeated = [ks for ks in by_source.values() if len(ks) == 2]
    assert repeated  # every layer kernel appears once per layer
    for first, second in repeated:
        assert first.instructions == second.instructions
        assert first.flops == second.flops


@pytest.mark.parametrize("name", ["bert", "gpt2", "vit"])
def test_models_run_on_inferentia_without_gpsimd(zoo, name):
    """NeuronCore-v1 has no GpSimd: identity, causal masks and column numbers come from HBM
    constants instead, and side work runs on VectorE; the numbers must not change."""
    import trnsim

    m = zoo.get(name)
    compiled = trnsim.trace(m.model, m.example, instance="inf1.xlarge")
    program = compiled.program
    assert not any(i.engine.name == "GPSIMD" for i in program.instructions)
    _compare(_leaves(_call(compiled, m.example)), m.eager_leaves, rel=2e-2, cosine=0.999)


def test_internal_hbm_tensors_share_buffers(zoo):
    """Intermediates that fit stay in SBUF (all of this small BERT's do); the others share
    device memory when dead by the next layer (tests/compiler/test_onchip.py covers both)."""
    import trnsim
    from trnsim.compiler.lowering.hbm import SLOT_PREFIX

    m = zoo.get("bert")
    compiled = trnsim.trace(m.model, m.example, instance="inf2.xlarge")
    tensors = compiled.program.tensors.values()
    internal = [t for t in tensors if t.kind == "internal" and not t.on_chip]
    assert all(t.name.startswith(SLOT_PREFIX) for t in internal)
    written = {ap.tensor for ins in compiled.program.instructions for ap in ins.writes()
               if ap.tensor.startswith(SLOT_PREFIX)}
    # more intermediates were written than there are buffers holding them (in SBUF or HBM)
    on_chip = [t for t in tensors if t.on_chip]
    kernels_writing_hbm = len([k for k in compiled.kernels if k.op != "output"])
    assert len(written) == len(internal)
    assert on_chip and len(internal) + len(on_chip) < kernels_writing_hbm
