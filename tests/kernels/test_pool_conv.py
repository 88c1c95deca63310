"""k.pool2d and k.conv2d against trnsim.compiler.interpret."""

import numpy as np
import pytest

from tests.kernels.conftest import assert_close, loaded
from tests.kernels.harness import run
from trnsim.compiler import interpret as ref
from trnsim.compiler.ops import conv_out
from trnsim.kernels import conv2d, pool2d
from trnsim.nki import language as nl

POOLS = [("max", (3, 3), (2, 2), (1, 1), (1, 1), False, True, None),
         ("avg", (3, 3), (2, 2), (1, 1), (1, 1), True, False, None),
         ("avg", (2, 3), (1, 2), (0, 1), (1, 1), False, True, None),
         ("max", (2, 2), (2, 2), (0, 0), (2, 1), True, True, None),
         ("avg", (3, 3), (3, 3), (1, 1), (1, 1), False, True, 5)]


@pytest.mark.parametrize("case", POOLS, ids=lambda c: f"{c[0]}-k{c[1]}-s{c[2]}-p{c[3]}")
def test_pool2d(rng, case):
    kind, k, s, p, d, ceil_mode, include, divisor = case
    x = rng.standard_normal((2, 70, 17, 23)).astype(np.float32)
    want = ref.pool2d(x, kind, k, s, p, d, ceil_mode, include, divisor)
    result = run(pool2d, [x], want.shape, "float32", kind=kind, kernel=k, stride=s, padding=p,
                 dilation=d, ceil_mode=ceil_mode, count_include_pad=include,
                 divisor_override=divisor)
    assert_close(result.output, want, "float32")


@pytest.mark.parametrize("size", [(1, 1), (5, 7)])
def test_adaptive_avg_pool(rng, size):
    x = rng.standard_normal((2, 70, 17, 23)).astype(np.float32)
    result = run(pool2d, [x], (2, 70, *size), "float32", kind="adaptive_avg", output_size=size)
    assert_close(result.output, ref.adaptive_avg_pool2d(x, size), "float32")


CONVS = [  # N, C, H, W, O, kernel, stride, padding, dilation, groups, bias, epilogue, compute
    (2, 3, 17, 19, 8, (3, 3), (2, 2), (1, 1), (1, 1), 1, True, False, "bfloat16"),
    (1, 130, 9, 10, 140, (3, 3), (1, 1), (1, 1), (1, 1), 1, False, True, "bfloat16"),
    (2, 8, 12, 12, 8, (3, 3), (1, 1), (2, 2), (2, 2), 8, True, False, "float32"),  # depthwise
    (1, 8, 12, 12, 12, (1, 1), (1, 1), (0, 0), (1, 1), 2, True, True, "float32"),
    (1, 4, 40, 40, 6, (5, 5), (3, 3), (2, 2), (1, 1), 1, False, False, "bfloat16"),
]


@pytest.mark.parametrize("case", CONVS, ids=lambda c: f"c{c[1]}-o{c[4]}-k{c[5]}-s{c[6]}-g{c[9]}")
def test_conv2d(rng, case):
    n, c, h, w, o, k, s, p, d, g, bias, epilogue, compute = case
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    weight = rng.standard_normal((o, c // g, *k)).astype(np.float32)
    b = rng.standard_normal(o).astype(np.float32)
    oh, ow = conv_out(h, k[0], s[0], p[0], d[0]), conv_out(w, k[1], s[1], p[1], d[1])
    want = ref.conv2d(loaded(x, compute), loaded(weight, compute), s, p, d, g)
    kwargs = {}
    if bias:
        kwargs["bias"] = b
        want = want + b[:, None, None]
    if epilogue:  # relu, then add a residual of the output's shape
        extra = rng.standard_normal((n, o, oh, ow)).astype(np.float32)
        kwargs.update(extras=(extra,), epilogue=lambda acc, ex: nl.add(nl.relu(acc), ex[0]))
        want = np.maximum(want, 0) + extra
    result = run(conv2d, [x, weight], (n, o, oh, ow), "float32", stride=s, padding=p,
                 dilation=d, groups=g, compute_dtype=compute, **kwargs)
    assert_close(result.output, want, "float32")


def test_conv2d_epilogue_reads_strided_and_row_broadcast_extras(rng):
    """An extra whose image rows are not adjacent (a slice of a wider tensor) or that repeats one
    row for every output row (a [1, O, 1, W] broadcast) is read as [channels, rows, columns]."""
    from trnsim.kernels.layout import broadcast_to_shape, hbm_strides, hbm_view

    n, c, h, w, o = 1, 6, 7, 9, 5
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    weight = rng.standard_normal((o, c, 3, 3)).astype(np.float32)
    wide = rng.standard_normal((n, o, h, w + 4)).astype(np.float32)
    row = rng.standard_normal((1, o, 1, w)).astype(np.float32)

    def kernel(out, x, weight, wide, row):
        sliced = hbm_view(wide, (n, o, h, w), hbm_strides(wide), offset=2)
        conv2d(out, x, weight, padding=(1, 1), compute_dtype="float32",
               extras=(sliced, broadcast_to_shape(row, (n, o, h, w))),
               epilogue=lambda acc, ex: nl.add(nl.add(acc, ex[0]), ex[1]))

    result = run(kernel, [x, weight, wide, row], (n, o, h, w), "float32")
    want = ref.conv2d(x, weight, (1, 1), (1, 1), (1, 1), 1) + wide[..., 2:2 + w] + row
    assert_close(result.output, want, "float32")
