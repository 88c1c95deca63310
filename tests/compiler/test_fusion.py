"""Fusion passes: attention, matmul/conv epilogues, norms, softmax and elementwise groups are
recognised in the real models, and fusing never changes the numbers (auto-cast off)."""

import numpy as np
import pytest

from tests.compiler.zoo import LAYERS
from trnsim.compiler.fused import check_kernel_level
from trnsim.compiler.interpret import evaluate
from trnsim.compiler.options import CompileOptions
from trnsim.compiler.passes import run_pipeline

torch = pytest.importorskip("torch")
FP32 = CompileOptions(auto_cast="none")


def kernels(zoo, name, options=FP32):
    m = zoo.get(name)
    return m, run_pipeline(m.graph, options, stop_after="fuse_elementwise")


def of(graph, kernel, **attrs):
    return [n for n in graph.nodes if n.op == kernel and all(n.attrs.get(k) == v
                                                        for k, v in attrs.items())]


@pytest.mark.parametrize("name,mask", [
    ("bert", "none"), ("roberta", "none"), ("distilbert", "none"), ("electra", "none"),
    ("gpt2", "causal"), ("gpt2_eager", "causal"), ("vit", "none"), ("bert_eager_mask", "bias"),
])
def test_one_attention_kernel_per_layer(zoo, name, mask):
    m, k = kernels(zoo, name)
    found = of(k, "k.attention")
    assert len(found) == LAYERS
    assert {a.attrs["mask_kind"] for a in found} == {mask}
    assert all(a.attrs["sq"] == a.attrs["sk"] for a in found)
    assert not of(k, "k.softmax")  # the softmax went into the attention kernel
    check_kernel_level(k)
    ref = evaluate(m.graph, m.flat_inputs)
    out = evaluate(k, m.flat_inputs)
    for a, b in zip(ref, out, strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=2e-5)


def test_attention_scale_and_layout_in_bert(zoo):
    _, k = kernels(zoo, "bert")
    att = of(k, "k.attention")[0]
    assert att.attrs["scale"] == pytest.approx(1 / np.sqrt(16))
    assert att.attrs["batch"] == (2, 4) and att.attrs["d"] == 16
    assert all(i.op == "permute" for i in att.inputs[:3])  # head split read by DMA


def test_bert_matmuls_absorb_bias_gelu_and_residual(zoo):
    _, k = kernels(zoo, "bert")
    mms = of(k, "k.matmul")
    assert len(mms) == 6 * LAYERS + 1 and all(mm.attrs["bias"] for mm in mms)
    assert all(mm.attrs["transpose_b"] for mm in mms)  # nn.Linear weights stay [out, in]
    ops = [tuple(s.op for s in mm.attrs["epilogue"]) for mm in mms]
    assert ops.count(("gelu",)) == LAYERS
    assert ops.count(("add",)) == 2 * LAYERS  # residual adds
    assert ops.count(("tanh",)) == 1  # pooler
    assert len(of(k, "k.norm", kind="layer")) == 2 * LAYERS + 1


def test_gpt2_gelu_tanh_epilogue(zoo):
    _, k = kernels(zoo, "gpt2")
    gelus = [mm for mm in of(k, "k.matmul") if mm.attrs["epilogue"] and
             mm.attrs["epilogue"][0].op == "gelu"]
    assert len(gelus) == LAYERS
    assert all(mm.attrs["epilogue"][0].attr("approximate") == "tanh" for mm in gelus)


def test_conv_batchnorm_relu_fold_in_cnn_and_resnet(zoo):
    m, k = kernels(zoo, "cnn")
    (first, second) = of(k, "k.conv2d")
    assert first.attrs["folded_bn"] and [s.op for s in first.attrs["epilogue"]] == ["relu"]
    assert not second.attrs["folded_bn"]
    assert {p.attrs["kind"] for p in of(k, "k.pool2d")} == {"max", "avg"}
    assert len(of(k, "k.reduce", op="mean")) == 1  # AdaptiveAvgPool2d(1) is a mean
    m2, k2 = kernels(zoo, "resnet")
    assert len(of(k2, "k.conv2d")) == 16 and all(c.attrs["folded_bn"] for c in of(k2, "k.conv2d"))
    assert "batch_norm" not in k2.op_counts()
    residual = [c for c in of(k2, "k.conv2d")
                if [s.op for s in c.attrs["epilogue"]] == ["add", "relu"]]
    assert len(residual) == 4
    for mm, kk in ((m, k), (m2, k2)):
        for a, b in zip(evaluate(mm.graph, mm.flat_inputs), evaluate(kk, mm.flat_inputs), strict=True):
            np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)


class RMSNorm(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.rand(d) + 0.5)

    def forward(self, x):
        var = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(var + 1e-6))


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = RMSNorm(8)
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x, mask):
        h = self.fc(self.norm(x))
        p = torch.softmax(x * 0.5 + mask, dim=-1)
        return torch.sigmoid(p * 2.0 - 1.0).exp() + h.abs()


def test_rmsnorm_softmax_and_elementwise_groups():
    from trnsim.compiler.capture import capture

    torch.manual_seed(0)
    x, mask = torch.randn(2, 4, 8), torch.randn(4, 8)
    model = Block().eval()
    with torch.no_grad():
        want = model(x, mask).numpy()
    g = capture(model, (x, mask))
    k = run_pipeline(g, FP32, stop_after="fuse_elementwise")
    (norm,) = of(k, "k.norm")
    assert norm.attrs["kind"] == "rms" and norm.attrs["weight"]
    (sm,) = of(k, "k.softmax")
    assert sm.attrs["scale"] == 0.5 and sm.attrs["mask_kind"] == "bias"
    groups = of(k, "k.elementwise")
    assert len(groups) == 1  # p * 2 - 1, sigmoid, exp: one kernel
    assert [s.op for s in groups[0].attrs["program"]] == ["mul", "sub", "sigmoid", "exp"]
    (fc,) = of(k, "k.matmul")  # h.abs() + that, during the linear layer's PSUM eviction
    assert [s.op for s in fc.attrs["epilogue"]] == ["abs", "add"]
    np.testing.assert_allclose(evaluate(k, [x, mask])[0], want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["bert", "gpt2", "vit", "resnet"])
def test_fused_autocast_graph_matches_the_unfused_autocast_graph(zoo, name):
    m = zoo.get(name)
    options = CompileOptions(auto_cast="matmult")
    cast_only = run_pipeline(m.graph, options, stop_after="auto_cast")
    fused = run_pipeline(m.graph, options, stop_after="fuse_elementwise")
    mms = of(fused, "k.matmul") + of(fused, "k.attention") + of(fused, "k.conv2d")
    assert mms and all(n.attrs["compute_dtype"] == "bfloat16" for n in mms)
    for a, b in zip(evaluate(cast_only, m.flat_inputs), evaluate(fused, m.flat_inputs), strict=True):
        scale = float(np.max(np.abs(a))) + 1e-6
        assert float(np.max(np.abs(a - b))) / scale < 2e-2
