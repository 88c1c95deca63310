"""What the compiler does with a kernel's results that the kernel leaves to it: partition broadcasts
stay in PSUM where TensorE wrote them (trnsim.nki.language.memory.broadcast_to), and a result
computed again from unchanged inputs is kept, not recomputed (trnsim.nki.invariant)."""

import numpy as np

from trnsim import hardware
from trnsim.nki import jit as legacy_jit
from trnsim.nki import language as legacy_nl
from trnsim.nki.current import Kernel as CurrentKernel
from trnsim.nki.current import isa as nisa
from trnsim.nki.current import language as nl

STEPS, FREE = 3, 256


def _records(kernel):
    return kernel.last_run.results[0].profile.records


def _opcodes(kernel, opcode):
    return [r for r in _records(kernel) if r.opcode == opcode]


def _invariant_product(modify_input=False, modify_result=False):
    """out[i] = a * b + c[i]: a * b is the same in every iteration unless the kernel changes `a`
    (`modify_input`) or the product in place (`modify_result`)."""
    def kernel(a, b, c):
        out = nl.ndarray((STEPS, 128, FREE), dtype=a.dtype, buffer=nl.shared_hbm)
        a_t = nl.ndarray((128, FREE), dtype=a.dtype, buffer=nl.sbuf)
        b_t = nl.ndarray((128, FREE), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a_t, src=a)
        nisa.dma_copy(dst=b_t, src=b)
        for i in nl.affine_range(STEPS):
            c_t = nl.ndarray((128, FREE), dtype=a.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=c_t, src=c[i])
            product = nl.ndarray((128, FREE), dtype=a.dtype, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=product, data1=a_t, data2=b_t, op=nl.multiply)
            if modify_result:
                nisa.tensor_tensor(dst=product, data1=product, data2=c_t, op=nl.add)
            total = nl.ndarray((128, FREE), dtype=a.dtype, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=total, data1=product, data2=c_t, op=nl.add)
            nisa.dma_copy(dst=out[i], src=total)
            if modify_input:
                nisa.tensor_scalar(dst=a_t, data=a_t, op0=nl.add, operand0=1.0)
        return out

    return kernel


def _expected(a, b, c, modify_input=False, modify_result=False):
    a = a.copy()
    out = []
    for i in range(STEPS):
        product = a * b
        if modify_result:
            product = product + c[i]
        out.append(product + c[i])
        if modify_input:
            a = a + np.float32(1.0)
    return np.stack(out)


def _inputs(rng):
    return (rng.standard_normal((128, FREE)).astype(np.float32),
            rng.standard_normal((128, FREE)).astype(np.float32),
            rng.standard_normal((STEPS, 128, FREE)).astype(np.float32))


def test_a_loop_invariant_product_is_computed_once(rng):
    a, b, c = _inputs(rng)
    kernel = CurrentKernel(_invariant_product(), platform_target="trn1")
    np.testing.assert_array_equal(kernel(a, b, c), _expected(a, b, c))
    assert len(_opcodes(kernel, "TensorTensor")) == 1 + STEPS  # one product, one add per step


def test_a_product_whose_input_changes_is_computed_again(rng):
    a, b, c = _inputs(rng)
    kernel = CurrentKernel(_invariant_product(modify_input=True), platform_target="trn1")
    np.testing.assert_array_equal(kernel(a, b, c), _expected(a, b, c, modify_input=True))
    assert len(_opcodes(kernel, "TensorTensor")) == 2 * STEPS


def test_a_product_changed_in_place_is_computed_again(rng):
    a, b, c = _inputs(rng)
    kernel = CurrentKernel(_invariant_product(modify_result=True), platform_target="trn1")
    np.testing.assert_array_equal(kernel(a, b, c), _expected(a, b, c, modify_result=True))
    assert len(_opcodes(kernel, "TensorTensor")) == 3 * STEPS


def test_legacy_api_keeps_an_invariant_result_too(rng):
    a, b, c = _inputs(rng)

    @legacy_jit
    def kernel(a, b, c):
        out = legacy_nl.ndarray((STEPS, 128, FREE), dtype=a.dtype, buffer=legacy_nl.shared_hbm)
        a_t, b_t = legacy_nl.load(a), legacy_nl.load(b)
        for i in legacy_nl.affine_range(STEPS):
            legacy_nl.store(out[i], value=legacy_nl.add(legacy_nl.multiply(a_t, b_t),
                                                         legacy_nl.load(c[i])))
        return out

    np.testing.assert_array_equal(kernel(a, b, c), _expected(a, b, c))
    assert len(_opcodes(kernel, "TensorTensor")) == 1 + STEPS


def _broadcast_scale(with_psum_operand=False):
    """out[i] = x * row[i] broadcast over 128 partitions (optionally x read from PSUM)."""
    def kernel(x, rows):
        out = nl.ndarray((STEPS, 128, FREE), dtype=x.dtype, buffer=nl.shared_hbm)
        x_t = nl.ndarray((128, FREE), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x_t, src=x)
        if with_psum_operand:  # x copied into PSUM: the kernel's own PSUM input
            x_p = nl.ndarray((128, FREE), dtype=x.dtype, buffer=nl.psum)
            nisa.tensor_copy(dst=x_p, src=x_t)
            x_t = x_p
        for i in nl.affine_range(STEPS):
            row = nl.ndarray((1, FREE), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=row, src=rows[i:i + 1, :])
            scaled = nl.ndarray((128, FREE), dtype=x.dtype, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=scaled, data1=x_t, data2=nl.broadcast_to(row, (128, FREE)),
                               op=nl.multiply)
            nisa.dma_copy(dst=out[i], src=scaled)
        return out

    return kernel


def test_a_partition_broadcast_is_read_from_psum_without_a_copy(rng):
    x = rng.standard_normal((128, FREE)).astype(np.float32)
    rows = rng.standard_normal((STEPS, FREE)).astype(np.float32)
    kernel = CurrentKernel(_broadcast_scale(), platform_target="trn1")
    np.testing.assert_array_equal(kernel(x, rows), np.stack([x * r for r in rows]))
    multiplies = _opcodes(kernel, "TensorTensor")
    assert len(multiplies) == STEPS and not _opcodes(kernel, "TensorCopy")
    assert len(_opcodes(kernel, "Memset")) == 1  # the row of ones, once per kernel
    assert len(_opcodes(kernel, "MultiplyMoving")) == STEPS
    # one PSUM input: N VectorE cycles, not 2N (nki.isa.tensor_tensor cost table)
    clock = hardware.core("trn1").vector.clock_hz
    assert all(abs(r.busy_ns - FREE * 1e9 / clock) < 1e-6 for r in multiplies)


def test_a_broadcast_meeting_the_kernels_own_psum_operand_is_staged(rng):
    x = rng.standard_normal((128, FREE)).astype(np.float32)
    rows = rng.standard_normal((STEPS, FREE)).astype(np.float32)
    kernel = CurrentKernel(_broadcast_scale(with_psum_operand=True), platform_target="trn1")
    np.testing.assert_array_equal(kernel(x, rows), np.stack([x * r for r in rows]))
    copies = _opcodes(kernel, "TensorCopy")
    assert len(copies) == 1 + STEPS  # the kernel's copy into PSUM, one staging copy per step


def test_more_live_broadcasts_than_psum_holds_still_run(rng):
    """Twelve [128, 512] fp32 broadcasts live at once (PSUM holds eight such banks), next to the
    kernel's own PSUM accumulator: the ones that do not fit go to SBUF; the result is exact."""
    count = 12

    def kernel(x, rows):
        out = nl.ndarray((128, 512), dtype=x.dtype, buffer=nl.shared_hbm)
        acc = nl.ndarray((128, 512), dtype=x.dtype, buffer=nl.psum)
        x_t = nl.ndarray((128, 512), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x_t, src=x)
        nisa.tensor_copy(dst=acc, src=x_t)
        wide = []
        for i in range(count):
            row = nl.ndarray((1, 512), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=row, src=rows[i:i + 1, :])
            wide.append(nl.broadcast_to(row, (128, 512)))
        total = nl.ndarray((128, 512), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=total, src=acc)
        for w in wide:
            nisa.tensor_tensor(dst=total, data1=total, data2=w, op=nl.add)
        nisa.dma_copy(dst=out, src=total)
        return out

    x = rng.standard_normal((128, 512)).astype(np.float32)
    rows = rng.standard_normal((count, 512)).astype(np.float32)
    expected = x.copy()
    for r in rows:
        expected = expected + r
    np.testing.assert_array_equal(CurrentKernel(kernel, platform_target="trn1")(x, rows), expected)
