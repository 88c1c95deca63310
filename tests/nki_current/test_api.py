"""The current API's surface: the `nki` shim, nki.simulate, frameworks, dtypes, tile sizes,
NkiTensor views, memory checks, and errors for the other API's symbols."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from trnsim.errors import (
    IndexOutOfBoundsError,
    InvalidArgumentError,
    LimitExceededError,
    TrnsimError,
    UndefinedBehaviourWarning,
    UnsupportedError,
)
from trnsim.nki import compat
from trnsim.nki.api_boundary import ApiMismatchError
from trnsim.nki.current import isa as nisa
from trnsim.nki.current import jit, simulate
from trnsim.nki.current import language as nl

SCRIPT = textwrap.dedent('''
    import numpy as np
    import nki
    import nki.isa as nisa
    import nki.language as nl
    import nki.collectives as ncc
    from nki.typing import tensor

    @nki.jit
    def add_kernel(a_ptr, b_ptr):
        a = nl.load(a_ptr)
        b = nl.load(b_ptr)
        out = nl.ndarray(a_ptr.shape, dtype=a_ptr.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.add(a, b))
        return out

    a = np.random.rand(128, 512).astype(np.float32)
    b = np.random.rand(128, 512).astype(np.float32)
    np.testing.assert_allclose(nki.simulate(add_kernel)(a, b), a + b, rtol=1e-5)
    assert isinstance(ncc.ReplicaGroup([[0, 1]]), object)
    print("ok")
''')


def test_unmodified_current_api_script_runs_via_trnsim_run(tmp_path):
    path = tmp_path / "kernel_script.py"
    path.write_text(SCRIPT)
    env = {**__import__("os").environ, "TRNSIM_NKI": "1", "NKI_SIMULATOR": "1",
           "PYTHONPATH": ":".join(sys.path)}
    result = subprocess.run([sys.executable, "-m", "trnsim.run", str(path)], capture_output=True,
                            text=True, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "ok"


def test_install_maps_every_nki_module(nki_modules):
    import nki.collectives
    import nki.isa
    import nki.language
    import nki.typing

    from trnsim.nki import current

    assert nki_modules is current and nki.language is nl and nki.isa is nisa
    assert nki.collectives is current.collectives and nki.typing.tensor is not None


def test_simulate_returns_numpy_and_torch_in_gives_torch_out():
    torch = pytest.importorskip("torch")

    @jit(platform_target="trn2")
    def double(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.multiply(nl.load(x), 2.0))
        return out

    x = np.arange(64, dtype=np.float32).reshape(8, 8)
    got = simulate(double)(x)
    assert isinstance(got, np.ndarray) and np.array_equal(got, 2 * x)
    t = torch.arange(64, dtype=torch.bfloat16).reshape(8, 8)
    out = simulate(double)(t)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16
    assert torch.equal(out, t * 2)
    assert torch.equal(double(t), t * 2)  # @nki.jit on torch tensors simulates too


def test_kernels_may_write_their_inputs_and_callers_see_it():
    @jit(platform_target="trn2")
    def scatter_into(src, output):
        t = nl.load(src)
        nisa.dma_copy(dst=output[2:4, :], src=t)
        return output

    src = np.ones((2, 4), np.float32)
    output = np.zeros((6, 4), np.float32)
    got = scatter_into(src, output)
    assert output[2:4].sum() == 8 and output.sum() == 8 and np.array_equal(got, output)


def test_dtypes_are_names_and_cover_the_mx_types():
    assert nl.float32 == "float32" and nl.bfloat16 == "bfloat16"
    for name in ("float8_e4m3fn", "float8_e8m0fnu", "float8_e4m3fn_x4", "float8_e5m2_x4",
                 "float4_e2m1fn_x4", "tfloat32", "bool_", "uint16"):
        assert getattr(nl, name) == name

    @jit(platform_target="trn3")
    def probe(x):
        t = nl.ndarray((128, 4), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
        assert t.dtype == nl.float8_e4m3fn_x4 and t.buffer == nl.sbuf and x.buffer == nl.shared_hbm
        assert nl.is_on_chip(t.buffer) and nl.is_hbm(x.buffer) and not nl.is_psum(t.buffer)
        return x

    probe(np.zeros((2, 2), np.float32))


@pytest.mark.parametrize(("target", "per_partition"), [("trn1", 192 * 1024), ("trn2", 224 * 1024),
                                                       ("trn3", 256 * 1024)])
def test_tile_size_byte_fields_follow_the_target(target, per_partition):
    seen = {}

    @jit(platform_target=target)
    def probe(x):
        ts = nl.tile_size
        seen.update(pmax=ts.pmax, bank=ts.psum_bank_fmax, bank_bytes=ts.psum_bank_fmax_bytes,
                    banks=ts.psum_num_banks, sbuf=ts.sbuf_size_bytes, fmax_bytes=ts.sbuf_fmax_bytes,
                    fmax=ts.sbuf_fmax, moving=ts.gemm_moving_fmax, stationary=ts.gemm_stationary_fmax)
        return x

    probe(np.zeros((2, 2), np.float32))
    assert seen["pmax"] == 128 and seen["bank"] == 512 and seen["bank_bytes"] == 2048
    assert seen["banks"] == 8 and seen["moving"] == 512 and seen["stationary"] == 128
    assert seen["sbuf"] == 128 * per_partition
    assert seen["fmax_bytes"] == per_partition - 16 * 1024 and seen["fmax"] == seen["fmax_bytes"] // 4


def test_views_slice_select_permute_reshape_broadcast_and_ap(rng):
    x = rng.standard_normal((4, 16, 8)).astype(np.float32)

    @jit(platform_target="trn2")
    def views(t):
        out = nl.ndarray((16, 8, 4), dtype=t.dtype, buffer=nl.shared_hbm)
        assert t.select(0, 2).shape == (16, 8) and t[1].shape == (16, 8)
        assert t.slice(1, 4, 12, 2).shape == (4, 4, 8)
        assert t.reshape_dim(2, (2, 4)).shape == (4, 16, 2, 4)
        assert t.flatten_dims(1, 2).shape == (4, 128) and t.get_pattern() == [[128, 4], [8, 16], [1, 8]]
        sb = nl.ndarray((16, 4, 8), dtype=t.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=sb, src=t.permute((1, 0, 2)))
        assert sb[3].shape == (1, 4, 8)  # an int on the partition dim keeps it
        assert sb.expand_dim(1).shape == (16, 1, 4, 8) and sb.expand_dim(1).squeeze_dim(1).shape == sb.shape
        col = nl.ndarray((16, 1), dtype=t.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=col, src=sb[:, 0, 0:1])
        wide = nl.ndarray((16, 8, 4), dtype=t.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=wide, src=sb.permute((0, 2, 1)))
        nisa.tensor_tensor(dst=wide, data1=wide, data2=col.expand_dim(2).broadcast(1, 8).broadcast(2, 4),
                           op=nl.subtract)
        nisa.dma_copy(dst=out, src=wide)
        return out

    got = views(x)
    moved = x.transpose(1, 2, 0)  # [16, 8, 4]
    np.testing.assert_allclose(got, moved - x[0, :, 0][:, None, None], rtol=1e-6)


def test_uninitialised_reads_are_nan_and_capacity_is_checked():
    @jit(platform_target="trn2")
    def reads_garbage(x):
        t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    with pytest.warns(UndefinedBehaviourWarning, match=r"test_api.py:\d+: nisa.dma_copy reads sbuf"):
        assert np.isnan(reads_garbage(np.zeros((1, 1), np.float32))).all()

    @jit(platform_target="trn2")
    def too_big(x):  # one tile larger than the whole SBUF (tiles that fit one by one spill)
        nl.ndarray((128, 60000), dtype=nl.float32, buffer=nl.sbuf)
        return x

    with pytest.raises(LimitExceededError, match=r"sbuf allocation.*NeuronCore-v3"):
        too_big(np.zeros((1, 1), np.float32))

    @jit(platform_target="trn2")
    def too_many_partitions(x):
        nl.ndarray((256, 4), dtype=nl.float32, buffer=nl.sbuf)
        return x

    with pytest.raises(LimitExceededError, match=r"partition dimension.*256 exceeds limit 128"):
        too_many_partitions(np.zeros((1, 1), np.float32))


def test_outputs_must_be_shared_hbm():
    @jit(platform_target="trn2")
    def returns_sbuf(x):
        return nl.load(x)

    with pytest.raises(InvalidArgumentError, match=r"nl\.shared_hbm"):
        returns_sbuf(np.zeros((4, 4), np.float32))


@pytest.mark.parametrize("name", ["mgrid", "arange", "par_dim", "spmd_dim", "nc"])
def test_legacy_nl_symbols_through_the_current_api_name_their_api(name):
    with pytest.raises(ApiMismatchError, match=f"nl.{name} belongs to the legacy neuronxcc.nki API; "
                                               "in nki 0.3\\+ use"):
        getattr(nl, name)


def test_legacy_call_forms_through_the_current_api():
    with pytest.raises(ApiMismatchError, match="legacy"):
        from trnsim.nki import current
        current.simulate_kernel  # noqa: B018

    @jit(platform_target="trn2")
    def masked(x):
        t = nl.load(x)
        return nl.exp(t, mask=None)

    with pytest.raises(ApiMismatchError, match=r"mask=.*legacy.*slicing"):
        masked(np.zeros((4, 4), np.float32))

    @jit(platform_target="trn2")
    def returns_result(x):
        t = nl.load(x)
        nisa.tensor_copy(t)

    with pytest.raises(ApiMismatchError, match=r"destination given first.*legacy"):
        returns_result(np.zeros((4, 4), np.float32))


def test_current_symbols_through_the_legacy_api_name_their_api():
    from trnsim import nki as legacy_nki
    from trnsim.nki import isa as legacy_isa
    from trnsim.nki import language as legacy_nl

    for module, name in ((legacy_nl, "fori_loop"), (legacy_isa, "nc_matmul_mx"),
                         (legacy_isa, "register_alloc"), (legacy_nki, "simulate")):
        with pytest.raises(ApiMismatchError, match="belongs to the current nki API"):
            getattr(module, name)

    @legacy_nki.jit
    def dst_first(x):
        t = legacy_nl.load(x)
        legacy_isa.tensor_copy(dst=t, src=t)

    with pytest.raises(ApiMismatchError, match=r"dst=.*current nki API.*returned tile"):
        dst_first(np.zeros((4, 4), np.float32))


def test_gen4_instruction_on_gen2_names_the_target():
    @jit(platform_target="trn1")
    def mx(x):
        t = nl.ndarray((128, 4), dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.quantize_mx(dst=t, src=t, dst_scale=t)
        return x

    with pytest.raises(UnsupportedError, match=r"quantize_mx needs NeuronCore-v4 .*target is "
                                               r"NeuronCore-v2 \(gen2"):
        mx(np.zeros((2, 2), np.float32))


def test_errors_carry_the_users_source_line():
    @jit(platform_target="trn2")
    def bad(x):
        t = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
        u = nl.ndarray((64, 8), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=t, data1=t, data2=u, op=nl.add)
        return x

    with pytest.raises(TrnsimError, match=r"test_api.py:\d+"):
        bad(np.zeros((2, 2), np.float32))


def test_compat_uninstall_removes_the_aliases():
    compat.install("nki")
    compat.uninstall()
    assert "nki" not in sys.modules and "nki.language" not in sys.modules


def test_hand_placed_tensors_are_checked_for_overlap():
    @jit(platform_target="trn2")
    def placed(x):
        a = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf, address=(0, 4096), name="a")
        b = nl.ndarray((64, 16), dtype=nl.float32, buffer=nl.sbuf, address=(64, 8192), name="b")
        assert a.shape == (128, 64) and b.access().partition_start == 64
        nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf, address=(0, 4200), name="c")
        return x

    with pytest.raises(InvalidArgumentError, match=r"'c' overlap live tensor 'a'"):
        placed(np.zeros((2, 2), np.float32))


def test_nl_operations_as_values(rng):
    x = rng.standard_normal((64, 32)).astype(np.float32)
    y = rng.standard_normal((32, 48)).astype(np.float32)

    @jit(platform_target="trn2")
    def values(a, b):
        ta, tb = nl.load(a), nl.load(b)
        prod = nl.ndarray((64, 48), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=prod, src=nl.matmul(ta, tb))  # a @ b (a transposed on TensorE)
        picked = nl.where(nl.greater(ta, 0.0), ta, nl.multiply(ta, 0.1))  # float condition
        rows = nl.sum(nl.exp(ta), axis=1, keepdims=True)
        out = nl.ndarray((64, 81), dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(out[:, 0:48], value=prod)
        nl.store(out[:, 48:80], value=picked)
        nl.store(out[:, 80:81], value=rows)
        return out

    got = values(x, y)
    np.testing.assert_allclose(got[:, :48], x @ y, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got[:, 48:80], np.where(x > 0, x, 0.1 * x), rtol=1e-6)
    np.testing.assert_allclose(got[:, 80], np.exp(x).sum(axis=1), rtol=1e-5)


@jit(platform_target="trn2")
def _gather_rows(table, idx_hbm):
    """Rows of an HBM table picked by per-partition indices (vector_offset DMA)."""
    p, f = idx_hbm.shape[0], table.shape[1]
    out = nl.ndarray((p, f), dtype=table.dtype, buffer=nl.shared_hbm)
    idx = nl.ndarray((p, 1), dtype=nl.uint32, buffer=nl.sbuf)
    nisa.dma_copy(dst=idx, src=idx_hbm)
    rows = nl.ndarray((p, f), dtype=table.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=rows, src=table.ap(pattern=[[f, p], [1, f]], vector_offset=idx, indirect_dim=0))
    nisa.dma_copy(dst=out, src=rows)
    return out


def test_vector_offset_gather_and_scatter_by_dma(rng):
    data = rng.standard_normal((32, 16)).astype(np.float32)
    indices = rng.permutation(32)[:8].reshape(8, 1).astype(np.uint32)
    gather = _gather_rows

    np.testing.assert_array_equal(gather(data, indices), data[indices[:, 0]])

    @jit(platform_target="trn2")
    def scatter(src_data, idx_hbm, output):
        p, f = src_data.shape
        src = nl.load(src_data)
        idx = nl.ndarray((p, 1), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.dma_copy(dst=idx, src=idx_hbm)
        nisa.dma_copy(dst=output.ap(pattern=[[f, p], [1, f]], vector_offset=idx, indirect_dim=0), src=src)
        return output

    rows = rng.standard_normal((8, 16)).astype(np.float32)
    output = np.zeros((32, 16), np.float32)
    scatter(rows, indices, output)
    np.testing.assert_array_equal(output[indices[:, 0]], rows)
    assert np.count_nonzero(output.any(axis=1)) == 8

    bad = indices.copy()
    bad[3, 0] = 40  # past the table
    with pytest.raises(IndexOutOfBoundsError, match=r"index 640 is out of bounds") as caught:
        gather(data, bad)
    assert "row index 40" in caught.value.__notes__[0]


def test_vector_offset_gather_from_a_table_over_65535_elements(rng):
    """An embedding-sized table (the whole-tensor extent does not fit one uint16 size field)."""
    data = rng.standard_normal((1000, 96)).astype(np.float32)
    indices = np.array([[999], [0], [512], [3]], dtype=np.uint32)
    np.testing.assert_array_equal(_gather_rows(data, indices), data[indices[:, 0]])


def test_oob_mode_skip_drops_out_of_bounds_register_addressed_copies(rng):
    x = rng.standard_normal((4, 8)).astype(np.float32)

    @jit(platform_target="trn2")
    def copy_rows(t, skip):
        out = nl.ndarray((6, 8), dtype=t.dtype, buffer=nl.shared_hbm)
        zero = nl.zeros((6, 8), dtype=t.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=out, src=zero)
        row = nl.ndarray((1, 8), dtype=t.dtype, buffer=nl.sbuf)

        def body(i):
            nisa.memset(dst=row, value=-1.0)
            mode = nisa.oob_mode.skip if skip else nisa.oob_mode.error
            nisa.dma_copy(dst=row, src=t.ap([[8, 1], [1, 8]], scalar_offset=i, indirect_dim=0),
                          oob_mode=mode)
            nisa.dma_copy(dst=out.ap([[8, 1], [1, 8]], scalar_offset=i, indirect_dim=0), src=row)

        nl.fori_loop(0, 6, body)  # rows 4 and 5 of t do not exist
        return out

    got = copy_rows(x, True)
    np.testing.assert_array_equal(got[:4], x)
    assert np.all(got[4:] == -1.0)
    with pytest.raises(LimitExceededError, match="reaches byte"):
        copy_rows(x, False)
