"""convolution_backward's translation (`trnsim.compiler.aten_conv_backward`) run by the reference
interpreter against PyTorch's own `aten.convolution_backward`, for the geometries models use."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from trnsim.compiler.aten import TRANSLATIONS, Translator  # noqa: E402
from trnsim.compiler.interpret import evaluate  # noqa: E402
from trnsim.compiler.ir import Graph  # noqa: E402

BACKWARD = "aten.convolution_backward.default"

# (name, x shape, w shape, stride, padding, dilation, groups)
CASES = [
    ("patchify", (2, 3, 8, 8), (6, 3, 4, 4), (4, 4), (0, 0), (1, 1), 1),
    ("pointwise", (2, 8, 5, 5), (6, 8, 1, 1), (1, 1), (0, 0), (1, 1), 1),
    ("3x3 same", (2, 3, 6, 7), (4, 3, 3, 3), (1, 1), (1, 1), (1, 1), 1),
    ("3x3 stride 2, ragged", (2, 3, 9, 8), (5, 3, 3, 3), (2, 2), (1, 1), (1, 1), 1),
    ("stem 7x7 stride 2", (1, 3, 16, 16), (4, 3, 7, 7), (2, 2), (3, 3), (1, 1), 1),
    ("1x1 stride 2", (2, 4, 7, 7), (3, 4, 1, 1), (2, 2), (0, 0), (1, 1), 1),
    ("dilated", (1, 3, 9, 9), (4, 3, 3, 2), (1, 2), (2, 1), (2, 2), 1),
    ("grouped", (2, 4, 7, 7), (6, 2, 3, 3), (2, 2), (1, 1), (1, 1), 2),
    ("depthwise", (2, 4, 6, 6), (4, 1, 3, 3), (1, 1), (1, 1), (1, 1), 4),
    ("padding past the kernel", (1, 2, 6, 6), (3, 2, 1, 1), (2, 2), (2, 2), (1, 1), 1),
]


def backward_graph(x_shape, w_shape, grad_shape, stride, padding, dilation, groups, mask):
    graph = Graph("conv_backward")
    cx = Translator(graph)
    nodes = [graph.add("input", (), {"index": i, "name": name, "shape": shape,
                                     "dtype": "float32"}, name=name)
             for i, (name, shape) in enumerate((("grad", grad_shape), ("x", x_shape),
                                                ("w", w_shape)))]
    results = TRANSLATIONS[BACKWARD](cx, *nodes, [w_shape[0]], stride, padding, dilation, False,
                                     [0] * len(stride), groups, mask)
    graph.outputs = [r for r in results if r is not None]
    return graph.verify()


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_gradients_match_pytorch(case):
    _, x_shape, w_shape, stride, padding, dilation, groups = case
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(x_shape, generator=gen)
    w = torch.randn(w_shape, generator=gen)
    out = torch.nn.functional.conv2d(x, w, None, stride, padding, dilation, groups)
    grad = torch.randn(out.shape, generator=gen)
    want = torch.ops.aten.convolution_backward(grad, x, w, [w_shape[0]], stride, padding,
                                               dilation, False, [0, 0], groups,
                                               [True, True, True])
    graph = backward_graph(x_shape, w_shape, tuple(out.shape), stride, padding, dilation, groups,
                           [True, True, True])
    got = evaluate(graph, [grad.numpy(), x.numpy(), w.numpy()])
    for g, ref in zip(got, want, strict=True):
        np.testing.assert_allclose(g, ref.numpy(), rtol=1e-5, atol=1e-5 * float(ref.abs().max()))


def test_conv1d_and_an_output_mask():
    gen = torch.Generator().manual_seed(1)
    x, w = torch.randn(2, 3, 10, generator=gen), torch.randn(4, 3, 3, generator=gen)
    grad = torch.randn(2, 4, 5, generator=gen)
    want = torch.ops.aten.convolution_backward(grad, x, w, None, [2], [1], [1], False, [0], 1,
                                               [False, True, False])
    graph = backward_graph(x.shape, w.shape, grad.shape, [2], [1], [1], 1, [False, True, False])
    (gw,) = evaluate(graph, [grad.numpy(), x.numpy(), w.numpy()])
    assert want[0] is None and want[2] is None
    np.testing.assert_allclose(gw, want[1].numpy(), rtol=1e-5, atol=1e-5)


def test_transposed_convolution_backward_is_refused():
    from trnsim.errors import UnsupportedError

    graph = Graph("t")
    cx = Translator(graph)
    g, x, w = (graph.add("input", (), {"index": i, "name": f"in{i}", "shape": s,
                                       "dtype": "float32"}) for i, s in
               enumerate(((1, 2, 5, 5), (1, 3, 3, 3), (3, 2, 3, 3))))
    with pytest.raises(UnsupportedError, match="transposed convolution"):
        TRANSLATIONS[BACKWARD](cx, g, x, w, None, [1, 1], [0, 0], [1, 1], True, [0, 0], 1,
                               [True, True, False])


def test_a_patch_gradient_arriving_as_rows_is_read_in_place():
    """ViT's patch embedding hands its convolution the gradient of `flatten(2).transpose(1, 2)`:
    a view of [N, patches, O] rows. The weight's and the bias's gradients read those rows in
    place; the one view materialised is the pixels' patches (the forward's im2col)."""
    from trnsim.compiler.passes import run_pipeline

    n, o, c, k, side = 2, 256, 3, 4, 32
    p = side // k
    graph = Graph("patch_backward")
    cx = Translator(graph)
    rows = graph.add("input", (), {"index": 0, "name": "g", "shape": (n, p * p, o),
                                   "dtype": "float32"}, name="g")
    x = graph.add("input", (), {"index": 1, "name": "x", "shape": (n, c, side, side),
                                "dtype": "float32"}, name="x")
    w = graph.add("input", (), {"index": 2, "name": "w", "shape": (o, c, k, k),
                                "dtype": "float32"}, name="w")
    grad = cx.emit("reshape", [cx.emit("permute", [rows], dims=(0, 2, 1))], shape=(n, o, p, p))
    results = TRANSLATIONS[BACKWARD](cx, grad, x, w, [o], (k, k), (0, 0), (1, 1), False,
                                     [0, 0], 1, [False, True, True])
    graph.outputs = [r for r in results if r is not None]
    laid_out = run_pipeline(graph.verify(), stop_after="layout")
    copies = [v for v in laid_out.nodes if v.op in ("reshape", "permute")
              and v.attrs.get("fold") == "copy"]
    assert len(copies) == 1 and copies[0].shape == (n, p, p, c, k, k)
