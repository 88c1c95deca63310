"""Capture: every model of the issue's list (tiny configs) becomes a verified graph whose
reference interpretation matches eager PyTorch; structures, sources, and capture errors."""

import numpy as np
import pytest

from tests.compiler.zoo import max_error
from trnsim.compiler.errors import CaptureError, InputShapeError, UnsupportedOperatorError
from trnsim.compiler.interpret import evaluate
from trnsim.compiler.signature import check_inputs

torch = pytest.importorskip("torch")

MODELS = ["mlp", "cnn", "bert", "bert_eager_mask", "roberta", "distilbert", "electra", "gpt2",
          "gpt2_eager", "vit", "resnet"]


@pytest.mark.parametrize("name", MODELS)
def test_captured_graph_verifies_and_matches_eager(zoo, name):
    m = zoo.get(name)
    g = m.graph.verify()
    assert len(g.inputs) == len(m.flat_inputs)
    assert g.output_structure.tensor_count() == len(m.eager_leaves)
    assert max_error(evaluate(g, m.flat_inputs), m.eager_leaves) < 1e-4


@pytest.mark.parametrize("name,kind,fields", [
    ("bert", "model_output", ("last_hidden_state", "pooler_output")),
    ("electra", "model_output", ("logits",)),
    ("mlp", "tensor", ()),
])
def test_output_structure_rebuilds_the_eager_type(zoo, name, kind, fields):
    m = zoo.get(name)
    s = m.graph.output_structure
    assert s.kind == kind and s.keys == fields
    rebuilt = s.rebuild(evaluate(m.graph, m.flat_inputs))
    assert type(rebuilt) is type(m.eager) or kind == "tensor"
    if fields:
        assert np.allclose(np.asarray(rebuilt[fields[0]]), m.eager[fields[0]].numpy(), atol=1e-4)


def test_weights_are_not_copied(zoo):
    m = zoo.get("bert")
    param = dict(m.model.named_parameters())["encoder.layer.0.attention.self.query.weight"]
    ref = next(k for k, c in m.graph.constants.items() if c.origin.endswith("layer.0.attention."
                                                                            "self.query.weight"))
    assert np.shares_memory(m.graph.constants[ref].data, param.detach().numpy())


def test_int64_inputs_narrow_to_int32_and_remember_torch_dtype(zoo):
    (ids,) = zoo.get("bert").graph.inputs
    assert ids.dtype.name == "int32" and ids.attrs["torch_dtype"] == "torch.int64"


def test_every_op_node_has_a_model_source_line(zoo):
    g = zoo.get("bert").graph
    ops = [n for n in g.nodes if n.op not in ("input", "constant", "scalar")]
    with_source = [n for n in ops if n.source and "modeling_bert.py:" in n.source]
    assert len(with_source) >= 0.9 * len(ops)


def test_calling_with_other_shapes_shows_traced_and_given(zoo):
    m = zoo.get("bert")
    ids = m.flat_inputs[0]
    assert len(check_inputs(m.graph, (ids,))) == 1
    with pytest.raises(InputShapeError, match=r"traced with int64\[2, 16\], called with "
                                              r"int64\[2, 8\]"):
        check_inputs(m.graph, (ids[:, :8],))
    with pytest.raises(InputShapeError, match="float32"):
        check_inputs(m.graph, (ids.float(),))


def test_training_mode_and_cache_flags_are_restored(zoo):
    from trnsim.compiler.capture import capture

    model = zoo.specs["gpt2"][0]().train()
    assert model.config.use_cache is True
    capture(model, zoo.specs["gpt2"][1]())
    assert model.training and model.config.use_cache is True


def test_an_eval_model_inside_a_train_mode_wrapper_stays_in_eval():
    from trnsim.compiler.capture import capture

    class Wrapper(torch.nn.Module):  # a new module is in train mode
        def __init__(self):
            super().__init__()
            self.inner = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5)).eval()

        def forward(self, x):
            return self.inner(x)

    wrapper = Wrapper()
    capture(wrapper, torch.ones(2, 4))
    assert wrapper.training and not wrapper.inner.training
    assert not any(m.training for m in wrapper.inner.modules())


class Branchy(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x * 2
        return x


class BadView(torch.nn.Module):
    def forward(self, x):
        return x.view(5, -1)


def test_data_dependent_control_flow_is_explained_with_its_line():
    from trnsim.compiler.capture import capture

    with pytest.raises(CaptureError, match="data-dependent control flow") as info:
        capture(Branchy(), torch.randn(3))
    assert "torch.where" in str(info.value)
    assert info.value.source.endswith("test_capture.py:" + str(Branchy.forward.__code__
                                                                .co_firstlineno + 1))


def test_a_model_error_during_export_names_the_model_line():
    from trnsim.compiler.capture import capture

    with pytest.raises(CaptureError, match="RuntimeError: shape '\\[5, -1\\]' is invalid") as info:
        capture(BadView(), torch.randn(3))
    assert "test_capture.py:" in info.value.source


class TwoUnsupported(torch.nn.Module):
    def forward(self, x):
        a = torch.nn.functional.adaptive_max_pool2d(x, (2, 2))
        b = torch.nn.functional.adaptive_max_pool2d(x + 1, (1, 1))
        return a.sum() + b.sum() + torch.linalg.det(x[0, 0, :3, :3])


def test_unsupported_operator_error_lists_every_call_with_its_line():
    from trnsim.compiler.capture import capture

    with pytest.raises(UnsupportedOperatorError) as info:
        capture(TwoUnsupported(), torch.randn(1, 2, 4, 4))
    ops = info.value.ops
    pools = [op for op in ops if op.kind == "aten::adaptive_max_pool2d"]
    assert len(pools) == 2
    first = TwoUnsupported.forward.__code__.co_firstlineno
    assert [p.source.rsplit(":", 1)[1] for p in pools] == [str(first + 1), str(first + 2)]
    assert len(ops) >= 3  # det decomposes to something trnsim lacks too
    assert "adaptive_max_pool2d" in str(info.value) and "analyze" in str(info.value)


def test_custom_operator_is_reported_unsupported():
    from trnsim.compiler.capture import capture

    @torch.library.custom_op("trnsim_test::scale", mutates_args=())
    def scale(x: torch.Tensor) -> torch.Tensor:
        return x * 3

    @scale.register_fake
    def _(x):
        return torch.empty_like(x)

    class Custom(torch.nn.Module):
        def forward(self, x):
            return scale(x) + 1

    with pytest.raises(UnsupportedOperatorError, match="trnsim_test::scale"):
        capture(Custom(), torch.randn(3))


@pytest.mark.parametrize("name", ["bert", "gpt2", "resnet", "bert_eager_mask"])
def test_direct_and_decomposed_capture_agree(zoo, name):
    from trnsim.compiler.capture import capture
    from trnsim.compiler.options import CompileOptions
    from trnsim.compiler.passes import run_pipeline

    m = zoo.get(name)
    assert m.graph.meta["capture_path"] == "direct"
    core = capture(m.model, m.example, decompose=True)
    assert core.meta["capture_path"] == "core_aten"
    for a, b in zip(evaluate(m.graph, m.flat_inputs), evaluate(core, m.flat_inputs), strict=True):
        np.testing.assert_array_equal(a, b)
    kinds = [{k: v for k, v in run_pipeline(g, CompileOptions(auto_cast="none")).op_counts().items()
              if k.startswith("k.")} for g in (m.graph, core)]
    assert kinds[0] == kinds[1]


class NoGradBlocks(torch.nn.Module):
    """Linear layers with a no_grad block each (as Llama's rotary embedding has): export records
    the grad-mode switches and splits the graph around them, then inlines it back."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(3))

    def forward(self, x):
        for layer in self.layers:
            with torch.no_grad():
                scale = torch.arange(4.0) + 1
            x = layer(x) * scale
        return x


def test_export_generates_graph_module_code_once(monkeypatch):
    """torch.export's intermediate graph modules are lazy (`export_context.lazy_graph_modules`): their
    Python source is generated only if run, so capture generates it once, for the exported
    program's own module, which still runs as the model does."""
    from torch.fx import GraphModule

    from trnsim.compiler.capture import export

    generated = []
    real = GraphModule.recompile
    monkeypatch.setattr(GraphModule, "recompile", lambda gm: generated.append(gm) or real(gm))
    model, x = NoGradBlocks().eval(), torch.randn(2, 4)
    exported = export(model, (x,), {}, decompose=False)
    assert len(generated) == 1 and generated[0] is exported.graph_module
    with torch.no_grad():
        torch.testing.assert_close(exported.module()(x), model(x))


def test_export_without_torch_lazy_graph_modules_gives_the_same_graph(monkeypatch):
    """The lazy switch is private to torch.fx: without it, export generates code eagerly."""
    import torch.fx._lazy_graph_module as lazy

    from trnsim.compiler.capture import capture

    model, x = NoGradBlocks().eval(), torch.randn(2, 4)
    lazily = capture(model, x).pretty()
    monkeypatch.delattr(lazy, "_use_lazy_graph_module")
    assert capture(model, x).pretty() == lazily
