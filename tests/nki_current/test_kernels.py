"""The project's current-API kernels (tests/nki_current/kernels) against numpy references."""

import ml_dtypes
import numpy as np
import pytest

from tests.nki_current.kernels import matmul, mx, norms
from trnsim.nki.current import Kernel

TARGETS = ("trn1", "trn2", "trn3")


def on(kernel, target):
    return Kernel(kernel.fn, platform_target=target)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("kernel", [matmul.matmul_ap, matmul.matmul_explicit_accumulate,
                                    matmul.matmul_views], ids=lambda k: k.fn.__name__)
def test_matmul_with_access_patterns(rng, kernel, target):
    a = rng.standard_normal((256, 256)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((256, 1024)).astype(ml_dtypes.bfloat16)
    if kernel is matmul.matmul_views:  # one [128 x 512] output tile
        a, b = a[:, :128].copy(), b[:, :512].copy()
    got = on(kernel, target)(a, b)
    np.testing.assert_allclose(got, matmul.reference(a, b), rtol=1e-4, atol=1e-3)


def test_auto_accumulate_restarts_after_the_psum_tile_is_read(rng):
    """accumulate=None: a matmul into PSUM that was read since its last matmul starts over."""
    a = rng.standard_normal((128, 256)).astype(np.float32)
    b = rng.standard_normal((128, 1024)).astype(np.float32)
    got = matmul.matmul_explicit_accumulate(a, b)
    np.testing.assert_allclose(got, matmul.reference(a, b), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("kernel", [norms.softmax, norms.softmax_values], ids=lambda k: k.fn.__name__)
def test_softmax(rng, kernel, target):
    x = (rng.standard_normal((256, 300)) * 3).astype(np.float32)
    np.testing.assert_allclose(on(kernel, target)(x), norms.softmax_reference(x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("target", TARGETS)
def test_layernorm(rng, target):
    x = (rng.standard_normal((256, 700)) * 2 + 1).astype(np.float32)
    g, b = (rng.standard_normal((1, 700)).astype(np.float32) for _ in range(2))
    got = on(norms.layernorm, target)(x, g, b)
    np.testing.assert_allclose(got, norms.layernorm_reference(x, g, b), rtol=1e-4, atol=1e-4)


def test_mxfp8_matmul_on_gen4(rng):
    k, m, n = 1024, 128, 512
    a = rng.standard_normal((k, m)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    sa = mx.interleave(a).astype(ml_dtypes.bfloat16)
    sb = mx.interleave(b).astype(ml_dtypes.bfloat16)
    got = mx.mxfp8_matmul(sa, sb)
    # exact against the dequantised operands (fp8 x fp8 x 2^k products are exact in fp32) ...
    np.testing.assert_allclose(got, mx.reference(sa, sb), rtol=1e-4, atol=1e-3)
    # ... and within MXFP8's error of the bf16 product
    exact = a.T @ b
    assert np.abs(got - exact).max() / np.abs(exact).max() < 0.08


def test_mx_matmul_contracts_4x_more_per_instruction_than_bf16(rng):
    """MX: K=512 in the time BF16 takes for K=128 (the MultiplyMoving busy times are equal)."""
    sa = mx.interleave(rng.standard_normal((512, 128)).astype(np.float32)).astype(ml_dtypes.bfloat16)
    sb = mx.interleave(rng.standard_normal((512, 512)).astype(np.float32)).astype(ml_dtypes.bfloat16)
    mx.mxfp8_matmul(sa, sb)
    a = rng.standard_normal((512, 128)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((512, 512)).astype(ml_dtypes.bfloat16)
    mx.bf16_matmul(a, b)
    mx_mm = [r for r in mx.mxfp8_matmul.last_run.profile.records if r.opcode == "MultiplyMovingMx"]
    bf_mm = [r for r in mx.bf16_matmul.last_run.profile.records if r.opcode == "MultiplyMoving"]
    assert len(mx_mm) == 1 and len(bf_mm) == 4
    assert mx_mm[0].busy_ns == pytest.approx(bf_mm[0].busy_ns)
    assert mx_mm[0].flops == sum(r.flops for r in bf_mm)


def test_sbuf_tiles_are_freed_after_their_last_use_when_scopes_do_not_fit(rng):
    """A chain of [128, 16384] fp32 tiles (64 KiB per partition each): five live to the end of
    the kernel's scope exceed every core's SBUF; freed after their last use (the compiler's
    liveness-based allocation, as the legacy front end does) at most two are live."""
    from trnsim.nki.current import jit
    from trnsim.nki.current import language as nl

    @jit
    def chain(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        t = nl.load(a)
        for _ in range(4):
            t = nl.multiply(t, 2.0)
        nl.store(out, t)
        return out

    x = rng.standard_normal((128, 16384)).astype(np.float32)
    for target in TARGETS:
        np.testing.assert_array_equal(on(chain, target)(x), x * 16.0)
