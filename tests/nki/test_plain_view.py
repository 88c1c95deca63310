"""The plain-key fast path of tile indexing (`trnsim.nki.tile._plain_view`): the same view as the
general path, field for field, and the same programs, instruction for instruction, when the
library kernels are traced with it and without it."""

import itertools

import numpy as np
import pytest

from tests.kernels.harness import ArraySpec, trace_kernel
from trnsim import hardware
from trnsim.kernels import attention, matmul, norm
from trnsim.nki import tile as tile_module
from trnsim.nki.tile import Axis, Tile
from trnsim.nki.trace import Trace, tracing


def _general(tile: Tile, key) -> Tile:
    """index_view by the general path only."""
    saved = tile_module._plain_view
    tile_module._plain_view = lambda tile, key: None
    try:
        return tile_module.index_view(tile, key)
    finally:
        tile_module._plain_view = saved


def _fields(view: Tile) -> tuple:
    return (view._storage, view._axes, view._dtype, view._poffset, view._foffset, view.name,
            tuple(view._checks), view._vector)


def _keys(shape, rng):
    """Plain keys (in-bounds ints, unit-step slices with plain-int bounds) and some that are
    not (negative indices, steps, Ellipsis, out-of-range stops), for every axis."""
    def parts(size):
        return [0, size - 1, slice(None), slice(0, size), slice(1, size), slice(None, 1),
                slice(size // 2, None), -1, slice(0, size, 2), slice(-2, None),
                np.int64(size - 1)]
    per_axis = [parts(n) for n in shape]
    keys = list(itertools.product(*per_axis))
    picks = rng.choice(len(keys), size=min(200, len(keys)), replace=False)
    return [keys[i] for i in picks] + [Ellipsis, (Ellipsis, 0), 0, slice(None)]


@pytest.mark.parametrize("buffer,shape", [("sbuf", (128, 6, 40)), ("psum", (128, 512)),
                                          ("hbm", (7, 9, 5)), ("sbuf", (64,))])
def test_plain_keys_give_the_general_paths_view(buffer, shape):
    rng = np.random.default_rng(0)
    trace = Trace("views", hardware.core("trn1"))
    with tracing(trace):
        tile = trace.allocate(shape, "bfloat16", buffer, name="t")
        taken, keys = 0, _keys(shape, rng)
        for key in keys:
            want = _general(tile, key)
            fast = tile_module._plain_view(tile, key)
            if fast is not None:
                taken += 1
                assert _fields(fast) == _fields(want), key
            assert _fields(tile_module.index_view(tile, key)) == _fields(want), key
        assert taken > len(keys) // 8  # the fast path is exercised, not only refused


def test_modulo_allocated_axes_take_the_general_path():
    trace = Trace("views", hardware.core("trn1"))
    with tracing(trace):
        tile = trace.allocate((128, 4), "float32", "sbuf", name="t")
        wrapped = Tile(trace, tile._storage, (Axis(6, 0, 4, wrap=2), *tile._axes), tile._dtype)
        assert tile_module._plain_view(wrapped, (3, slice(None), 0)) is None
        assert tile_module.index_view(wrapped, (3, slice(None), 0))._foffset == 4


def _bf16(*shape):
    return ArraySpec(shape, "bfloat16")


KERNELS = {
    "matmul": (matmul, [_bf16(640, 384), _bf16(1100, 384)], (640, 1100),
               {"transpose_b": True, "bias": _bf16(1100)}),
    "matmul-long-k": (matmul, [_bf16(256, 2304), _bf16(2304, 700)], (256, 700), {}),
    "matmul-stationary-b": (matmul, [_bf16(96, 512), _bf16(512, 1024)], (96, 1024),
                            {"stationary": "b"}),
    "rmsnorm": (norm, [_bf16(300, 1024)], (300, 1024), {"kind": "rms"}),
    "attention": (attention, [_bf16(2, 4, 256, 64)] * 3, (2, 4, 256, 64), {"scale": 0.125}),
}


@pytest.mark.parametrize("name", KERNELS)
def test_kernels_trace_to_the_same_program_with_and_without_the_fast_path(name, monkeypatch):
    fn, inputs, out_shape, attrs = KERNELS[name]
    fast_trace, _, _ = trace_kernel(fn, inputs, out_shape, "bfloat16", **attrs)
    calls = []
    monkeypatch.setattr(tile_module, "_plain_view", lambda tile, key: calls.append(key))
    plain_trace, _, _ = trace_kernel(fn, inputs, out_shape, "bfloat16", **attrs)
    fast, plain = fast_trace.builder.program, plain_trace.builder.program
    assert calls  # the kernel indexes tiles, so the comparison covers the fast path
    assert len(fast.instructions) == len(plain.instructions) > 0
    for i, (a, b) in enumerate(zip(fast.instructions, plain.instructions, strict=True)):
        assert type(a) is type(b) and a == b and a.label == b.label and a.source == b.source, i
    assert fast.tensors.keys() == plain.tensors.keys()
