"""Forms public legacy kernels use (AWS's documentation tests and nki-samples), each checked
against numpy: returning nl.hbm tensors, reshape(shape=...), masks over sliced operands,
late-added nisa calls."""

import numpy as np
import pytest

from trnsim import nki
from trnsim.errors import IndexOutOfBoundsError
from trnsim.nki import compiler as ncc
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


def test_misplaced_operands_are_staged_by_copies_as_the_compiler_does(rng):
    """TensorE cannot write SBUF and GpSimd cannot read PSUM: neuronx-cc stages the operand
    through a VectorE copy, which takes time like any other instruction."""
    a = rng.standard_normal((128, 128)).astype(np.float32)

    @nki.jit
    def staged(x):
        out = nl.ndarray((2, 128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
        t = nl.load(x)
        product = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
        product[...] = nisa.nc_matmul(t, t)  # result written to PSUM, then copied to SBUF
        nl.store(out[0], value=product)
        in_psum = nisa.nc_matmul(t, t)
        i_p, i_f = nl.mgrid[0:128, 0:128]
        nl.store(out[1], value=nisa.affine_select(i_p >= i_f, in_psum, 0.0))  # GpSimd reads PSUM
        return out

    got = staged(a)
    np.testing.assert_allclose(got[0], a.T @ a, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got[1], np.tril(a.T @ a), rtol=1e-4, atol=1e-4)
    profile = staged.last_run.profile
    copies = [r for r in profile.records if "staging copy" in r.label]
    assert len(copies) == 2 and all(r.end_ns > r.start_ns for r in copies)


def test_a_mask_known_at_trace_time(rng):
    """mask=True keeps the instruction; mask=False (e.g. a causal tile test on loop indices)
    drops it, so the accumulation below adds one product, not two."""
    x = rng.standard_normal((128, 128)).astype(np.float32)

    @nki.jit
    def masked(a):
        out = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.load(a)
        acc = nl.zeros((128, 128), dtype=nl.float32, buffer=nl.psum)
        for i in nl.affine_range(2):
            acc[...] += nisa.nc_matmul(t, t, mask=(i == 0))
        done = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.sbuf)
        done[...] = nl.copy(acc, mask=True)
        nl.store(out, value=done)
        return out

    np.testing.assert_allclose(masked(x), x.T @ x, rtol=1e-4, atol=1e-4)


def test_binary_ops_broadcast_across_partitions_and_free_axes(rng):
    a = rng.standard_normal((128, 64)).astype(np.float32)
    row = rng.standard_normal((1, 64)).astype(np.float32)
    col = rng.standard_normal((128, 1)).astype(np.float32)
    cube = rng.integers(0, 3, (128, 8, 3, 3)).astype(np.float32)

    @nki.jit
    def bcast(x, r, c, q):
        out = nl.ndarray((4, 128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        hits = nl.ndarray((128, 8, 3, 3), dtype=nl.float32, buffer=nl.shared_hbm)
        tx, tr, tc = nl.load(x), nl.load(r), nl.load(c)
        nl.store(out[0], value=nl.add(tx, tr))  # [1, F] across partitions
        nl.store(out[1], value=nl.add(tc, tr))  # [P, 1] + [1, F]
        nl.store(out[2], value=nl.add(tx, nl.load(r[0:1, 0:1])))  # [1, 1]
        nl.store(out[3], value=nl.multiply(tx, tc))  # [P, 1] column
        cubes = nl.load(q)
        nl.store(hits, value=nl.equal(cubes, cubes[:, :, 0:1, 0:1], dtype=nl.float32))
        return out, hits

    got, hits = bcast(a, row, col, cube)
    np.testing.assert_allclose(got[0], a + row, rtol=1e-6)
    np.testing.assert_allclose(got[1], col + row, rtol=1e-6)
    np.testing.assert_allclose(got[2], a + row[0, 0], rtol=1e-6)
    np.testing.assert_allclose(got[3], a * col, rtol=1e-6)
    np.testing.assert_array_equal(hits, (cube == cube[:, :, 0:1, 0:1]).astype(np.float32))


def test_loop_reduce_folds_each_iteration_into_its_destination(rng):
    x = rng.standard_normal((3, 128, 32)).astype(np.float32)

    @nki.jit
    def total(a):
        out = nl.ndarray((128, 32), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.zeros((128, 32), dtype=nl.float32, buffer=nl.sbuf)
        for i in nl.affine_range(3):
            acc[...] = nl.loop_reduce(nl.load(a[i]), op=np.add, loop_indices=(i,))
        nl.store(out, value=acc)
        return out

    np.testing.assert_allclose(total(x), x.sum(axis=0), rtol=1e-5, atol=1e-5)


def test_a_column_of_an_on_chip_tile_keeps_its_free_axis(rng):
    x = rng.standard_normal((128, 4)).astype(np.float32)

    @nki.jit
    def column(a):
        out = nl.ndarray((128, 1), dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.load(a)
        col = t[:, 2]
        assert col.shape == (128, 1)
        nl.store(out, value=nl.add(col[:, 0], 1.0))
        return out

    np.testing.assert_allclose(column(x), x[:, 2:3] + 1.0)


def test_spmd_dims_spread_instances_over_cores(rng):
    x = rng.standard_normal((4, 2, 1, 8)).astype(np.float32)

    @nki.jit
    def copy(a):
        b = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        i, j = nl.program_id(0), nl.program_id(1)
        nl.store(b[i, j], nl.load(a[i, j]))
        return b

    for grid in ((nl.spmd_dim(nl.nc(2), 2), 2), (nl.nc(2) * 2, 2), (2 * nl.nc(2), 2)):
        launch = copy[grid]
        np.testing.assert_array_equal(launch(x), x)
        assert len(launch.last_run.results) == 2  # two NeuronCores


def test_placement_by_an_allocation_function_and_an_mgrid_key(rng):
    x = rng.standard_normal((128, 64)).astype(np.float32)

    def at(base):
        return lambda idx, pdim_size, fdim_size: (0, base)  # (partition, byte)

    @nki.jit
    def placed(a):
        out = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((nl.par_dim(128), 64), dtype=a.dtype, buffer=ncc.sbuf.alloc(at(2048)))
        t[...] = nl.load(a[nl.mgrid[0:128, 0:64]])
        nl.store(out, value=t)
        return out

    np.testing.assert_array_equal(placed(x), x)
    assert "+2048B" in placed.last_run.profile.record(0).operands[0]


def test_store_a_constant_gather_flattened_and_an_odd_start_partition(rng):
    data = rng.standard_normal((32, 64)).astype(np.float32)
    picks = np.tile(np.arange(10, dtype=np.uint32) * 5, (32, 1))

    @nki.jit
    def kernel(d):
        filled = nl.ndarray((8, 16), dtype=nl.float32, buffer=nl.shared_hbm)
        gathered = nl.ndarray((32, 10), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(filled, 7.0)
        indices = nl.zeros((32, 10), dtype=nl.uint32)
        for i in nl.static_range(32):  # single-partition writes at partitions 1..31:
            for j in nl.static_range(10):  # staged through partition 0 by DMA
                indices[i, j] = j * 5
        nl.store(gathered, value=nl.gather_flattened(data=nl.load(d), indices=indices))
        return filled, gathered

    filled, gathered = kernel(data)
    np.testing.assert_array_equal(filled, 7.0)
    np.testing.assert_array_equal(gathered, np.take_along_axis(data, picks.astype(np.int64), 1))


def test_partition_broadcast_and_onezero_hints_run_the_fp32_matmul_at_twice_the_rate(rng):
    """nl.broadcast_to crosses partitions as nc_matmul(ones, x, is_stationary_onezero=True) (arch
    guide, TensorE "Alternative Use Case"); the hint halves an fp32 matmul (nki.isa.nc_matmul)."""
    row = rng.standard_normal((1, 512)).astype(np.float32)

    @nki.jit
    def spread(r):
        out = nl.ndarray((3, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        x = nl.load(r)
        ones = nl.full((1, 128), 1.0, dtype=nl.float32)
        nl.store(out[0], value=nl.broadcast_to(x, (128, 512)))
        nl.store(out[1], value=nisa.nc_matmul(ones, x, is_stationary_onezero=True))
        nl.store(out[2], value=nisa.nc_matmul(ones, x))
        return out

    got = spread(row)
    for i in range(3):
        np.testing.assert_array_equal(got[i], np.broadcast_to(row, (128, 512)))
    mms = [r for r in spread.last_run.profile.records if r.opcode == "MultiplyMoving"]
    assert len(mms) == 3
    assert mms[0].busy_ns == pytest.approx(mms[1].busy_ns)
    assert mms[2].busy_ns == pytest.approx(2 * mms[1].busy_ns)


def test_broadcast_to_as_a_tile_method_and_with_a_positional_shape(rng):
    row = rng.standard_normal((1, 96)).astype(np.float32)
    col = rng.standard_normal((128, 1)).astype(np.float32)

    @nki.jit
    def spread(r, c):
        out = nl.ndarray((2, 128, 96), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out[0], value=nl.broadcast_to(nl.load(r), (128, 96)))
        nl.store(out[1], value=nl.load(c).broadcast_to((128, 96)))
        return out

    got = spread(row, col)
    np.testing.assert_array_equal(got[0], np.broadcast_to(row, (128, 96)))
    np.testing.assert_array_equal(got[1], np.broadcast_to(col, (128, 96)))


def test_psum_plus_equals_into_fresh_psum_starts_an_accumulation_group(rng):
    """`acc += nc_matmul(...)` on an uninitialised nl.ndarray PSUM tile: the compiler infers the
    first write overwrites and later ones accumulate (nki.isa.nc_matmul, "accumulation mode")."""
    x = rng.standard_normal((2, 128, 128)).astype(np.float32)

    @nki.jit
    def gemm(a):
        out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum)
        for k in nl.affine_range(2):
            t = nl.load(a[k])
            acc += nisa.nc_matmul(t, t)
        nl.store(out, value=nl.copy(acc))
        return out

    expected = x[0].T @ x[0] + x[1].T @ x[1]
    np.testing.assert_allclose(gemm(x), expected, rtol=1e-4, atol=1e-3)
