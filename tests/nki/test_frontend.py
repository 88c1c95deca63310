"""Front-end semantics: indexing, masks, operators, loops, SPMD, caching, drivers, errors."""

import json

import numpy as np
import pytest

from trnsim import nki
from trnsim.errors import LimitExceededError, TrnsimError, UndefinedBehaviourWarning, UnsupportedError
from trnsim.nki import compiler as ncc
from trnsim.nki import isa as nisa
from trnsim.nki import language as nl
from trnsim.nki import typing as nt


def test_index_tiles_slices_ds_and_ints(rng):
    x = rng.standard_normal((256, 64)).astype(np.float32)

    @nki.jit
    def pick(a):
        out = nl.ndarray((128, 16), dtype=a.dtype, buffer=nl.shared_hbm)
        i_p = nl.arange(128)[:, None]
        i_f = nl.arange(8)[None, :]
        left = nl.load(a[i_p + 64, 2 * i_f + 1])  # rows 64..191, odd columns 1..15
        right = nl.load(a[nl.ds(64, 128), 40:48])
        both = nl.ndarray((128, 16), dtype=a.dtype, buffer=nl.sbuf)
        both[:, 0:8] = left
        both[:, 8:16] = right
        nl.store(out, value=both)
        return out

    got = pick(x)
    np.testing.assert_array_equal(got[:, :8], x[64:192, 1:16:2])
    np.testing.assert_array_equal(got[:, 8:], x[64:192, 40:48])


def test_mgrid_p_and_x_and_tile_operators(rng):
    a, b = (rng.standard_normal((128, 64)).astype(np.float32) for _ in range(2))

    @nki.jit
    def ops(x, y):
        out = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
        ix = nl.mgrid[0:128, 0:64]
        s, t = nl.load(x[ix.p, ix.x]), nl.load(y[ix.p, ix.x])
        nl.store(out, value=(s + t) * 2.0 - t / 4.0)
        return out

    np.testing.assert_allclose(ops(a, b), (a + b) * 2 - b / 4, rtol=1e-6)


def test_mask_shrinks_the_instruction(rng):
    a = rng.standard_normal((128, 64)).astype(np.float32)

    @nki.jit
    def half(x):
        out = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
        i_p, i_f = nl.mgrid[0:128, 0:64]
        t = nl.load(x)
        z = nl.zeros((128, 64), dtype=x.dtype, buffer=nl.sbuf)
        z[i_p, i_f] = nl.exp(t[i_p, i_f], mask=(i_p < 64) & (i_f >= 32))
        nl.store(out, value=z)
        return out

    got = half(a)
    np.testing.assert_allclose(got[:64, 32:], np.exp(a[:64, 32:]), rtol=1e-6)
    assert np.all(got[64:] == 0) and np.all(got[:, :32] == 0)
    # the masked activation is a [64 x 32] instruction, not [128 x 64]
    records = half.last_run.profile.records
    labels = [half.last_run.profile.record(i) for i in range(len(records))]
    act = next(r for r in labels if r.opcode == "Activation")
    assert "[64,32]" in act.operands[0]


def test_ops_as_values_numpy_and_nl(rng):
    a = rng.standard_normal((64, 32)).astype(np.float32)

    @nki.jit
    def k(x):
        out = nl.ndarray((64, 32), dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        u = nisa.tensor_tensor(t, t, op=np.add)
        v = nisa.tensor_scalar(u, nl.multiply, 3.0, op1=nl.maximum, operand1=0.0)
        w = nisa.activation(op=np.tanh, data=v)
        nl.store(out, value=w)
        return out

    np.testing.assert_allclose(k(a), np.tanh(np.maximum(a * 2 * 3, 0)), rtol=1e-6)


def test_reshape_and_view(rng):
    a = rng.standard_normal((128, 64)).astype(np.float32)

    @nki.jit
    def k(x):
        out = nl.ndarray((128, 8, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x.reshape((128, 8, 8)))
        bits = t.view(nl.int32)
        same = nisa.tensor_copy(bits).view(nl.float32)
        nl.store(out, value=same)
        return out

    np.testing.assert_array_equal(k(a), a.reshape(128, 8, 8))


def test_program_id_num_programs_and_ndim():
    seen = []

    @nki.jit
    def k(x):
        seen.append((nl.program_id(0), nl.program_id(1), nl.num_programs(), nl.num_programs(1),
                     nl.program_ndim()))
        out = nl.ndarray((1, 1), dtype=x.dtype, buffer=nl.shared_hbm)
        return out

    k[2, 3](np.zeros((1, 1), np.float32))
    assert [s[:2] for s in seen] == [(i, j) for i in range(2) for j in range(3)]
    assert all(s[2:] == (6, 3, 2) for s in seen)


def test_traces_are_cached_by_signature():
    calls = []

    @nki.jit
    def k(x, scale=1.0):
        calls.append(1)
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.multiply(nl.load(x), scale))
        return out

    a = np.ones((8, 8), np.float32)
    k(a)
    k(a + 1)
    assert len(calls) == 1
    k(a, scale=2.0)
    k(np.ones((8, 16), np.float32))
    assert len(calls) == 3


def test_drivers_simulate_benchmark_profile(tmp_path, rng):
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.exp(nl.load(x)))
        return out

    a = rng.standard_normal((128, 256)).astype(np.float32)
    np.testing.assert_allclose(nki.simulate_kernel(nki.jit(kernel), a), np.exp(a), rtol=1e-6)
    bench = nki.benchmark(warmup=2, iters=5)(kernel)
    assert bench(nt.tensor[[128, 256], nl.float32]) is None
    latency = bench.benchmark_result.nc_latency
    assert latency.get_latency_percentile(50) == latency.get_latency_percentile(99) > 1.0  # us
    prof = nki.profile(working_directory=str(tmp_path), save_trace_name="k.json")(kernel)
    np.testing.assert_allclose(prof(a), np.exp(a), rtol=1e-6)
    trace = json.loads((tmp_path / "k.json").read_text())
    assert trace["traceEvents"]
    assert json.loads((tmp_path / "k.summary.json").read_text())["summary"]["total_ns"] > 0
    bare = nki.baremetal(kernel)
    np.testing.assert_allclose(bare(a), np.exp(a), rtol=1e-6)


def test_platform_target_from_argument_and_environment(monkeypatch):
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.load(x))
        return out

    a = np.ones((128, 64), np.float32)
    k2 = nki.jit(kernel, platform_target="trn2")
    k2(a)
    assert k2.last_run.profile.core.name == "NeuronCore-v3"
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "gen4")
    k4 = nki.jit(kernel)
    k4(a)
    assert k4.last_run.profile.core.name == "NeuronCore-v4"


def test_manual_allocation_with_mod_alloc():
    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=ncc.sbuf.mod_alloc(base_addr=4096))
        t[...] = nl.load(x)
        nl.store(out, value=t)
        return out

    a = np.arange(128 * 4, dtype=np.float32).reshape(128, 4)
    np.testing.assert_array_equal(k(a), a)
    ops = k.last_run.profile.record(0).operands
    assert "+4096B" in ops[0]


def _error(kernel, *arrays):
    with pytest.raises(TrnsimError) as info:
        nki.jit(kernel)(*arrays)
    return info.value


def test_error_partition_dimension_over_128_names_the_line():
    def k(x):
        t = nl.ndarray((256, 4), dtype=nl.float32, buffer=nl.sbuf)
        return t

    error = _error(k, np.zeros((1, 1), np.float32))
    assert isinstance(error, LimitExceededError)
    assert "256 exceeds limit 128" in str(error) and "test_frontend.py:" in str(error)


def test_error_tile_too_large_for_sbuf():
    def k(x):
        return nl.ndarray((128, 100_000), dtype=nl.float32, buffer=nl.sbuf)

    error = _error(k, np.zeros((1, 1), np.float32))
    assert "sbuf allocation of 400000 bytes per partition" in str(error)


def test_error_dtype_not_supported_by_target():
    def k(x):
        t = nl.load(x)
        return nisa.tensor_copy(t, dtype="float8_e4m3fn")

    error = _error(k, np.zeros((128, 8), np.float32))
    assert isinstance(error, UnsupportedError) and "NeuronCore-v2" in str(error)


def test_error_out_of_bounds_index():
    def k(x):
        i_p = nl.arange(128)[:, None]
        return nl.load(x[i_p + 64, 0:4])

    error = _error(k, np.zeros((128, 4), np.float32))
    assert "out of bounds" in str(error) and "[64, 191]" in str(error)


def test_error_tile_used_after_its_loop_iteration():
    def k(x):
        for _i in nl.affine_range(2):
            t = nl.load(x)
        return nl.exp(t)

    error = _error(k, np.zeros((8, 8), np.float32))
    assert "freed when that iteration ended" in str(error)


def test_a_kernel_writing_its_argument_updates_the_callers_array(rng):
    """The legacy tests' style: results land in an argument array (simulate_kernel(k, a, b))."""
    a = rng.standard_normal((4, 128, 32)).astype(np.float32)
    b = np.zeros((4, 1, 32), np.float32)

    @nki.trace
    def reduce_into(x, out):
        for i in nl.affine_range(x.shape[0]):
            nl.store(out[i], nisa.tensor_partition_reduce(np.add, nl.load(x[i])))

    assert nki.simulate_kernel(reduce_into, a, b) is None
    np.testing.assert_allclose(b, a.sum(axis=1, keepdims=True), rtol=1e-5)


def test_uninitialised_sbuf_reads_are_nan():
    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        garbage = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nl.store(out, value=garbage)
        return out

    with pytest.warns(UndefinedBehaviourWarning, match=r"test_frontend.py:\d+: nl.store reads sbuf"):
        assert np.isnan(k(np.zeros((4, 4), np.float32))).all()


def test_reading_psum_nothing_wrote_warns_with_the_line():
    @nki.jit
    def k(x):
        out = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum)  # never written
        nl.store(out, value=nl.copy(acc))
        return out

    with pytest.warns(UndefinedBehaviourWarning, match=r"test_frontend.py:\d+: nl.copy reads psum"):
        assert np.isnan(k(np.ones((128, 128), np.float32))).all()


def test_device_print(capsys):
    @nki.jit
    def k(x):
        t = nl.load(x)
        nl.device_print("t=", t)
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=t)
        return out

    k(np.full((2, 2), 7.0, np.float32))
    assert "t=[[7. 7.]" in capsys.readouterr().out


def test_subkernel_called_inside_a_kernel_is_inlined(rng):
    @nki.jit(mode="trace")
    def double(t):
        return nl.multiply(t, 2.0)

    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=double(nl.load(x)))
        return out

    a = rng.standard_normal((8, 8)).astype(np.float32)
    np.testing.assert_allclose(k(a), 2 * a)


def test_reduce_last_axis_of_a_dense_3d_tile(rng):
    """The access pattern merges (4, 128) into 512 elements; the reduction still splits there."""
    a = rng.standard_normal((128, 4, 128)).astype(np.float32)

    @nki.jit
    def k(x):
        out = nl.ndarray((128, 4), dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nisa.tensor_reduce(np.max, nl.load(x), axis=(2,)))
        return out

    np.testing.assert_array_equal(k(a), a.max(axis=2))


def test_iota_keeps_an_axis_with_a_zero_coefficient():
    """`i_f + 0 * i_p` spans the partitions: every partition holds the column numbers."""

    @nki.jit
    def columns(x):
        out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        i_p, i_f = nl.mgrid[0:128, 0:64]
        nl.store(out, value=nisa.iota(i_f + 0 * i_p, dtype=nl.float32))
        return out

    got = columns(np.zeros((1,), np.float32))
    np.testing.assert_array_equal(got, np.tile(np.arange(64, dtype=np.float32), (128, 1)))


def test_sbuf_fragmentation_is_reported_as_such():
    from trnsim.isa import Memory
    from trnsim.nki.trace import RingAllocator

    ring = RingAllocator(Memory.SBUF, 1000, core_name="NeuronCore-v2")
    first, _second, third = (ring.allocate(300, n, 4) for n in ("a", "b", "c"))
    ring.free(first)
    ring.free(third)
    ring.allocate(100, "d", 4)  # at the cursor (after c's old place): the free space is split
    with pytest.raises(LimitExceededError, match=r"contiguous bytes per partition 500 exceeds "
                                                 r"limit \d+ .*fragments"):
        ring.allocate(500, "big", 4)
