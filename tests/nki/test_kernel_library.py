"""The project's own NKI kernels (tests/nki/kernels) against numpy references."""

import ml_dtypes
import numpy as np
import pytest

from tests.nki.conftest import TOL, as_dtype
from tests.nki.kernels import attention, elementwise, matmul, norms, scan
from trnsim.nki import language as nl


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_tensor_add_with_masked_tail(rng, dtype):
    a, b = (as_dtype(rng.standard_normal((300, 256)), dtype) for _ in range(2))
    out = elementwise.tensor_add(a, b)
    want = as_dtype(a.astype(np.float32) + b.astype(np.float32), dtype)
    assert out.dtype == a.dtype
    np.testing.assert_array_equal(out.view(np.uint8), want.view(np.uint8))


def test_tensor_add_spmd_grid_and_two_cores(rng):
    a, b = (rng.standard_normal((256, 1024)).astype(np.float32) for _ in range(2))
    serial = elementwise.tensor_add_spmd[2, 2]
    np.testing.assert_array_equal(serial(a, b), a + b)
    two_cores = elementwise.tensor_add_spmd[nl.nc(2), 2]
    np.testing.assert_array_equal(two_cores(a, b), a + b)
    assert len(two_cores.last_run.results) == 2 and len(serial.last_run.results) == 1
    # half the instances per core, running concurrently: faster than all four on one core
    assert two_cores.last_run.latency_ns < serial.last_run.latency_ns


def test_transposes(rng):
    x = rng.standard_normal((256, 384)).astype(np.float32)
    np.testing.assert_array_equal(elementwise.transpose2d(x), x.T)
    small = rng.standard_normal((64, 128)).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(elementwise.transpose2d_dma(small), small.T)


def test_avgpool_with_mgrid(rng):
    img = rng.standard_normal((64, 16, 24)).astype(np.float32)
    np.testing.assert_allclose(elementwise.avgpool2d(img, 4), elementwise.avgpool2d_reference(img, 4),
                               rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("kernel", [norms.softmax_rows, norms.softmax_by_hand])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_softmax(rng, kernel, dtype):
    x = as_dtype(rng.standard_normal((256, 300)) * 3, dtype)
    np.testing.assert_allclose(kernel(x).astype(np.float32), norms.softmax_reference(x), **TOL[dtype])


@pytest.mark.parametrize("kernel", [norms.layernorm_by_hand, norms.layernorm_bn])
def test_layernorm(rng, kernel):
    x = rng.standard_normal((256, 700)).astype(np.float32) * 2 + 1
    g, b = (rng.standard_normal((1, 700)).astype(np.float32) for _ in range(2))
    np.testing.assert_allclose(kernel(x, g, b), norms.layernorm_reference(x, g, b), rtol=1e-4, atol=1e-4)


def test_rmsnorm(rng):
    x = rng.standard_normal((128, 1100)).astype(np.float32)
    w = rng.standard_normal((1, 1100)).astype(np.float32)
    np.testing.assert_allclose(norms.rmsnorm(x, w), norms.rmsnorm_reference(x, w), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_fused_attention(rng, causal):
    q, k, v = (rng.standard_normal((256, 64)).astype(np.float32) for _ in range(3))
    out = attention.attention_fwd(q.T.copy(), k.T.copy(), v, causal=causal)
    np.testing.assert_allclose(out, attention.attention_reference(q, k, v, causal), rtol=1e-4, atol=1e-5)


def test_fused_attention_bf16(rng):
    q, k, v = (rng.standard_normal((256, 64)).astype(ml_dtypes.bfloat16) for _ in range(3))
    out = attention.attention_fwd(q.T.copy(), k.T.copy(), v)
    ref = attention.attention_reference(q, k, v)
    assert np.abs(out.astype(np.float32) - ref).max() < 0.05


def test_selective_scan(rng):
    c, t, n = 64, 96, 4
    x = rng.standard_normal((c, t)).astype(np.float32)
    delta = np.abs(rng.standard_normal((c, t))).astype(np.float32) * 0.1
    a = -np.abs(rng.standard_normal((c, n))).astype(np.float32)
    b, cm = (rng.standard_normal((n, t)).astype(np.float32) for _ in range(2))
    np.testing.assert_allclose(scan.selective_scan(x, delta, a, b, cm),
                               scan.selective_scan_reference(x, delta, a, b, cm), rtol=1e-4, atol=1e-5)


def test_topk16(rng):
    x = rng.permutation(np.arange(64 * 256, dtype=np.float32)).reshape(64, 256)
    values, indices = scan.topk16(x)
    order = np.argsort(-x, axis=1)[:, :16]
    np.testing.assert_array_equal(values, np.take_along_axis(x, order, 1))
    np.testing.assert_array_equal(indices.astype(np.int64), order)


VARIANTS = [matmul.matmul_naive, matmul.matmul_hoisted, matmul.matmul_blocked]


@pytest.mark.parametrize("kernel", [*VARIANTS, matmul.matmul_optimized])
def test_matmul_variants_compute_the_same_product(rng, kernel):
    a = rng.standard_normal((512, 256)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((512, 1024)).astype(ml_dtypes.bfloat16)
    kwargs = {matmul.matmul_optimized: dict(tiles_in_block_m=2, tiles_in_block_n=2, tiles_in_block_k=2),
              matmul.matmul_blocked: dict(tiles_in_n=2)}.get(kernel, {})
    out = kernel(a, b, **kwargs).astype(np.float32)
    ref = matmul.reference(a, b)
    # bf16 output (and bf16 partial sums across K blocks in the optimised kernel)
    assert np.abs(out - ref).max() / np.abs(ref).max() < 2e-2


def test_nl_matmul_transposes_its_left_operand(rng):
    x = rng.standard_normal((64, 128)).astype(np.float32)
    y = rng.standard_normal((128, 256)).astype(np.float32)
    np.testing.assert_allclose(matmul.matmul_nl(x, y), x @ y, rtol=1e-4, atol=1e-4)


def test_matmul_variants_get_faster_in_order_for_visible_reasons():
    from trnsim.nki import typing as nt

    shape_a, shape_b = nt.tensor[[2048, 1024], nl.bfloat16], nt.tensor[[2048, 2048], nl.bfloat16]
    latencies, profiles = [], []
    for kernel, kwargs in [(matmul.matmul_naive, {}), (matmul.matmul_hoisted, {}),
                           (matmul.matmul_blocked, {}),
                           (matmul.matmul_optimized, dict(tiles_in_block_m=8, tiles_in_block_k=8))]:
        kernel.run((shape_a, shape_b), kwargs, mode="timing")
        latencies.append(kernel.last_run.latency_ns)
        profiles.append(kernel.last_run.profile)
    assert latencies == sorted(latencies, reverse=True), latencies
    # the reason is visible: the naive kernel moves far more bytes and keeps TensorE idler
    naive, best = profiles[0].summary, profiles[-1].summary
    assert naive.dma_bytes > 3 * best.dma_bytes
    assert naive.tensor_flops_utilisation < 0.5 * best.tensor_flops_utilisation
