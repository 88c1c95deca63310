"""Forms public legacy kernels use (AWS's documentation tests and nki-samples), each checked
against numpy: returning nl.hbm tensors, reshape(shape=...), masks over sliced operands,
late-added nisa calls."""

import numpy as np
import pytest

from trnsim import nki
from trnsim.errors import IndexOutOfBoundsError
from trnsim.nki import isa as nisa
from trnsim.nki import language as nl


def test_a_kernel_may_return_an_nl_hbm_tensor(rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)

    @nki.jit
    def copy(a):
        b = nl.empty_like(a, buffer=nl.hbm)
        nl.store(b, value=nl.load(a))
        return b

    np.testing.assert_array_equal(nki.simulate_kernel(copy, x), x)


def test_reshape_takes_a_shape_keyword(rng):
    x = rng.standard_normal((2, 3, 8, 16)).astype(np.float32)

    @nki.jit
    def flat(a):
        out = nl.ndarray((2, 3, 8, 16), dtype=a.dtype, buffer=nl.shared_hbm)
        src = a.reshape(shape=(6, 128))
        dst = out.reshape(shape=(6, 128))
        nl.store(dst, value=nl.multiply(nl.load(src), 2.0))
        return out

    np.testing.assert_allclose(flat(x), 2 * x)


def test_a_mask_bounds_sliced_axes_by_position(rng):
    """A slice reaching past a 32-row tensor, masked by a [P, 1, 1] index tile at position 0:
    only the rows the mask keeps move (nki-samples' adaptive pooling does this)."""
    x = rng.standard_normal((32, 4, 4)).astype(np.float32)

    @nki.jit
    def masked_copy(a):
        out = nl.ndarray((32, 4, 4), dtype=a.dtype, buffer=nl.shared_hbm)
        i_p = nl.arange(128)[:, None, None]
        buf = nl.zeros((nl.par_dim(128), 4, 4), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(src=a[0:128, 0:4, 0:4], dst=buf[:, 0:4, 0:4], mask=(i_p < 32))
        nl.store(out[0:128, :, :], value=buf, mask=(i_p < 32))
        return out

    np.testing.assert_array_equal(masked_copy(x), x)


def test_tensor_scalar_cumulative_in_the_legacy_api(rng):
    x = rng.standard_normal((128, 64)).astype(np.float32)
    start = rng.standard_normal((128, 1)).astype(np.float32)

    @nki.jit
    def scan(a, s):
        out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.hbm)
        dst = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar_cumulative(src=nl.load(a), dst=dst, op0=nl.multiply, op1=nl.add,
                                      imm0=2.0, imm1=nl.load(s),
                                      reduce_cmd=nisa.reduce_cmd.load_reduce)
        nl.store(out, value=dst)
        return out

    np.testing.assert_allclose(scan(x, start), start + np.cumsum(2 * x, axis=1), rtol=1e-5,
                               atol=1e-5)


def test_sequence_bounds_in_the_legacy_api():
    ids = np.array([[0, 1, 1, 2, 2, 2, 0, 3, 3]], dtype=np.float32)

    @nki.jit
    def bounds(s):
        out = nl.ndarray((1, 2, 9), dtype=s.dtype, buffer=nl.shared_hbm)
        tile = nl.ndarray((1, 2, 9), dtype=s.dtype, buffer=nl.sbuf)
        tile[...] = nisa.sequence_bounds(segment_ids=nl.load(s))
        nl.store(out, value=tile)
        return out

    expected = [[[9, 1, 1, 3, 3, 3, 9, 7, 7], [-1, 3, 3, 6, 6, 6, -1, 9, 9]]]
    np.testing.assert_array_equal(bounds(ids), np.array(expected, dtype=np.float32))


def test_an_index_tile_gathers_and_scatters_rows(rng):
    data = rng.standard_normal((128, 64)).astype(np.float32)
    rows = rng.permutation(128)[:32].astype(np.int32)

    @nki.jit
    def gather_scatter(x, idx):
        gathered = nl.ndarray((32, 64), dtype=x.dtype, buffer=nl.shared_hbm)
        scattered = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
        i_p = nl.arange(32)[:, None]
        i_f = nl.arange(64)[None, :]
        index = nl.load(idx[i_p])
        tile = nl.load(x[index[i_p, 0], i_f])
        nl.store(gathered, value=tile)
        nl.store(scattered, value=nl.zeros((128, 64), dtype=x.dtype, buffer=nl.sbuf))
        nisa.dma_copy(dst=scattered[index, i_f], src=tile, dst_rmw_op=np.add)
        return gathered, scattered

    gathered, scattered = gather_scatter(data, rows)
    np.testing.assert_array_equal(gathered, data[rows])
    expected = np.zeros_like(data)
    expected[rows] = data[rows]
    np.testing.assert_array_equal(scattered, expected)


def test_an_out_of_bounds_gather_row_raises_or_is_skipped(rng):
    data = rng.standard_normal((16, 8)).astype(np.float32)

    def make(mode):
        @nki.jit
        def gather(x):
            out = nl.ndarray((8, 8), dtype=x.dtype, buffer=nl.shared_hbm)
            idx = nisa.iota(3 * nl.arange(8)[:, None], dtype=np.int32)  # rows 0, 3, ..., 21
            tile = nisa.memset(shape=(8, 8), value=-1.0, dtype=x.dtype)
            i_f = nl.arange(8)[None, :]
            nisa.dma_copy(src=x[idx, i_f], dst=tile, oob_mode=mode)
            nl.store(out, value=tile)
            return out
        return gather

    skipped = make(nisa.oob_mode.skip)(data)
    np.testing.assert_array_equal(skipped[:6], data[0:16:3])
    np.testing.assert_array_equal(skipped[6:], -1.0)
    with pytest.raises(IndexOutOfBoundsError, match="index 144 is out of bounds") as caught:
        make(nisa.oob_mode.error)(data)
    assert isinstance(caught.value, IndexError)
