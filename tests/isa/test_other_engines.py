"""ScalarE, GpSimd and DMA semantics against numpy references."""

import numpy as np
import pytest

from tests.isa.conftest import ref_cast, tile
from trnsim.isa import (
    Activation,
    AffineSelect,
    DmaCopy,
    DmaTranspose,
    Iota,
    LocalGather,
    TensorPartitionReduce,
)

rng = np.random.default_rng(3)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_activation_scale_bias_then_function(state, dtype):
    a = rng.standard_normal((8, 64)).astype(np.float32)
    bias = rng.standard_normal((8, 1)).astype(np.float32)
    scale = rng.standard_normal((8, 1)).astype(np.float32)
    x = state.put(tile((8, 64), dtype), a)
    b, s = state.put(tile((8, 1)), bias), state.put(tile((8, 1)), scale)
    out = tile((8, 64), dtype)
    Activation(dst=out, src=x, func="exp", scale=s, bias=b).execute(state)
    stored = ref_cast(a, dtype).astype(np.float32)
    want = ref_cast(np.exp(stored * scale + bias), dtype).astype(np.float32)
    np.testing.assert_allclose(state.read(out).astype(np.float32), want, rtol=1e-2 if dtype != "float32"
                               else 2e-6)


def test_activation_reduce_and_accumulator_registers(state):
    a = rng.standard_normal((4, 32)).astype(np.float32)
    x = state.put(tile((4, 32)), a)
    out, res = tile((4, 32)), tile((4, 1))
    Activation(dst=out, src=x, func="square", reduce_op="add", reduce_cmd="reset_reduce").execute(state)
    Activation(dst=out, src=x, func="square", reduce_op="add", reduce_cmd="reduce",
               reduce_dst=res).execute(state)
    np.testing.assert_allclose(state.read(res)[:, 0], 2 * (a**2).sum(axis=1), rtol=1e-5)


def test_partition_reduce(state):
    a = rng.standard_normal((64, 16)).astype(np.float32)
    x = state.put(tile((64, 16)), a)
    out = tile((1, 16))
    TensorPartitionReduce(dst=out, src=x, op="max").execute(state)
    np.testing.assert_array_equal(state.read(out)[0], a.max(axis=0))


def test_iota_affine_values(state):
    out = tile((4, 3, 5), "int32")
    Iota(dst=out, base=7, partition_step=100, steps=(10, 1)).execute(state)
    p, i, j = np.indices((4, 3, 5))
    np.testing.assert_array_equal(state.read(out), 7 + 100 * p + 10 * i + j)


def test_affine_select_causal_mask(state):
    a = rng.standard_normal((16, 16)).astype(np.float32)
    x = state.put(tile((16, 16)), a)
    out = tile((16, 16))
    # keep where p - j >= 0 (lower triangle), else -inf-ish fill
    AffineSelect(dst=out, src=x, cmp="greater_equal", partition_step=1, steps=(-1,),
                 fill=-9999.0).execute(state)
    np.testing.assert_array_equal(state.read(out), np.where(np.tri(16, dtype=bool), a, -9999.0))


def test_local_gather_per_16_partition_group(state):
    src_np = rng.standard_normal((32, 64)).astype(np.float32)
    index_np = rng.integers(0, 16, (32, 2)).astype(np.uint16) * 4  # element offsets
    src, index = state.put(tile((32, 64)), src_np), state.put(tile((32, 2), "uint16"), index_np)
    out = tile((32, 32, 4))
    LocalGather(dst=out, src=src, index=index, elems_per_index=4).execute(state)
    got = state.read(out)
    for g in (0, 16):
        flat = index_np[g:g + 16].flatten(order="F").astype(np.int64)
        for j, start in enumerate(flat):
            np.testing.assert_array_equal(got[g:g + 16, j], src_np[g:g + 16, start:start + 4])


def test_dma_copy_casts_and_accumulates(state):
    a = rng.standard_normal((8, 16)).astype(np.float32)
    src = state.put(tile((8, 16)), a)
    dst = tile((8, 16), "bfloat16")
    DmaCopy(dst=dst, src=src).execute(state)
    np.testing.assert_array_equal(state.read(dst).view(np.uint16), ref_cast(a, "bfloat16").view(np.uint16))
    acc = state.put(tile((8, 16)), np.ones((8, 16)))
    DmaCopy(dst=acc, src=src, accumulate=True).execute(state)
    np.testing.assert_allclose(state.read(acc), a + 1, rtol=1e-6)


def test_dma_transpose(state):
    a = rng.standard_normal((8, 16)).astype(np.float32)
    src = state.put(tile((8, 16), "bfloat16"), a)
    dst = tile((16, 8), "bfloat16")
    DmaTranspose(dst=dst, src=src).execute(state)
    np.testing.assert_array_equal(state.read(dst), state.read(src).T)
