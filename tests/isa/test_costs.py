"""Cost functions against hardware.md section 6's closed forms."""

import pytest

from trnsim import hardware
from trnsim.isa import (
    Activation,
    BnAggr,
    DmaCopy,
    Iota,
    LoadStationary,
    MultiplyMoving,
    Reciprocal,
    TensorCopy,
    TensorReduce,
    TensorTensor,
    hbm,
    psum,
    sbuf,
)

V2, V3 = hardware.core("v2"), hardware.core("v3")


def cycles(ns, clock):
    return ns * clock / 1e9


@pytest.mark.parametrize("m,n,dtype,expected", [
    (128, 512, "bfloat16", 512), (128, 32, "bfloat16", 64), (16, 32, "bfloat16", 32),
    (128, 512, "float32", 2048), (128, 100, "float8_e4m3", 100),
])
def test_matmul_issue_interval(m, n, dtype, expected):
    st = sbuf(0, 128, (m,), dtype)
    mm = MultiplyMoving(dst=psum(0, m, (n,)), moving=sbuf(4096, 128, (n,), dtype), stationary=st)
    cost = mm.cost(V2)
    assert cycles(cost.busy_ns, V2.tensor.clock_hz) == pytest.approx(expected)
    assert cycles(cost.latency_ns - cost.busy_ns, V2.tensor.clock_hz) == pytest.approx(
        V2.tensor.mm_init_latency_cycles)
    assert mm.flops() == 2 * m * n * 128


@pytest.mark.parametrize("st_dtype,mv_dtype,hint,expected", [
    ("float32", "float32", "stationary", 1024), ("float32", "float32", "moving", 1024),
    ("float32", "float32", None, 2048),
    # the hint only speeds up an fp32 operand: a bf16 ones tile beside an fp32 moving gains nothing
    ("bfloat16", "float32", "stationary", 2048), ("float32", "bfloat16", "moving", 2048),
    ("bfloat16", "bfloat16", "stationary", 512),
])
def test_onezero_hint_halves_the_fp32_matmul(st_dtype, mv_dtype, hint, expected):
    """nc_matmul's is_{stationary,moving}_onezero: 2x for a float32 tile of ones and zeros."""
    mm = MultiplyMoving(dst=psum(0, 128, (512,)), moving=sbuf(4096, 1, (512,), mv_dtype),
                        stationary=sbuf(0, 1, (128,), st_dtype),
                        stationary_onezero=hint == "stationary", moving_onezero=hint == "moving")
    assert cycles(mm.cost(V2).busy_ns, V2.tensor.clock_hz) == pytest.approx(expected)


def test_512_moving_matmul_is_about_183_ns_on_v2():
    mm = MultiplyMoving(dst=psum(0, 128, (512,)), moving=sbuf(0, 128, (512,), "bfloat16"),
                        stationary=sbuf(4096, 128, (128,), "bfloat16"))
    assert mm.cost(V2).busy_ns == pytest.approx(182.86, abs=0.1)


def test_fast_load_stationary_is_a_quarter_of_its_free_size():
    ls = LoadStationary(src=sbuf(0, 128, (128,), "bfloat16"))
    assert cycles(ls.cost(V2).busy_ns, V2.tensor.clock_hz) == pytest.approx(32)


def test_double_row_fp8_on_v3_costs_like_bf16_at_k128():
    st = sbuf(0, 128, (2, 128), "float8_e4m3")
    mv = sbuf(4096, 128, (2, 512), "float8_e4m3")
    dr = MultiplyMoving(dst=psum(0, 128, (512,)), moving=mv, stationary=st, perf_mode="double_row")
    dr.check(V3)
    assert cycles(dr.cost(V3).busy_ns, V3.tensor.clock_hz) == pytest.approx(512)
    assert dr.flops() == 2 * 128 * 512 * 256


def test_streaming_min_ii_and_linear_cost():
    small = sbuf(0, 128, (16,), "float32")
    big = sbuf(0, 128, (1000,), "float32")
    costs = V2.costs
    assert cycles(Activation(dst=small, src=small, func="exp").cost(V2).busy_ns,
                  V2.scalar.clock_hz) == pytest.approx(costs.min_ii_cycles)
    act = Activation(dst=big, src=big, func="exp").cost(V2)
    assert cycles(act.busy_ns, V2.scalar.clock_hz) == pytest.approx(1000)
    # a long instruction hides its access set-ups: a dependent one waits the static overhead only
    assert cycles(act.latency_ns - act.busy_ns, V2.scalar.clock_hz) == pytest.approx(
        costs.static_overhead_cycles)
    short = Activation(dst=small, src=small, func="exp").cost(V2)
    exposed = 2 * costs.access_setup_cycles - costs.min_ii_cycles
    assert cycles(short.latency_ns - short.busy_ns, V2.scalar.clock_hz) == pytest.approx(
        costs.static_overhead_cycles + exposed)


def test_dependent_scalar_chain_step_is_near_the_measured_264_cycles():
    # the perf guide's chain: one-element activations with scale/bias (a bias tile) enabled
    small = sbuf(0, 128, (1,), "float32")
    bias = sbuf(4096, 128, (1,), "float32")
    cost = Activation(dst=small, src=small, func="identity", scale=2.0, bias=bias).cost(V2)
    measured = V2.costs.measured_scalar_chain_cycles
    assert cycles(cost.latency_ns, V2.scalar.clock_hz) == pytest.approx(measured, rel=0.1)


def test_dependent_vector_step_adds_the_documented_100_cycles():
    # arch guide: a VectorE instruction depending on its predecessor's output costs its
    # streaming cycles + a static overhead of 100 cycles
    a, b, c = (sbuf(o, 128, (512,), "float32") for o in (0, 4096, 8192))
    cost = TensorTensor(dst=c, in0=a, in1=b, op="multiply").cost(V2)
    assert cycles(cost.latency_ns, V2.vector.clock_hz) == pytest.approx(2 * 512 + 100)


def test_tensor_tensor_2n_except_fast_bf16_and_psum_cases():
    f32 = sbuf(0, 128, (1024,), "float32")
    bf = sbuf(0, 128, (1024,), "bfloat16")
    ps = psum(0, 128, (1024,))
    clock = V2.vector.clock_hz
    assert cycles(TensorTensor(dst=f32, in0=f32, in1=f32, op="add").cost(V2).busy_ns, clock) == 2048
    assert cycles(TensorTensor(dst=bf, in0=bf, in1=bf, op="add").cost(V2).busy_ns, clock) == 1024
    assert cycles(TensorTensor(dst=bf, in0=bf, in1=bf, op="divide").cost(V2).busy_ns, clock) == 2048
    assert cycles(TensorTensor(dst=f32, in0=f32, in1=ps, op="max").cost(V2).busy_ns, clock) == 1024


def test_special_factors():
    x = sbuf(0, 128, (900,), "float32")
    clock = V2.vector.clock_hz
    assert cycles(Reciprocal(dst=x, src=x).cost(V2).busy_ns, clock) == pytest.approx(8 * 900)
    stats = sbuf(0, 128, (900,), "float32")
    assert cycles(BnAggr(dst=sbuf(8192, 128, (2,), "float32"), src=stats).cost(V2).busy_ns,
                  clock) == pytest.approx(13 * 300)
    bf = sbuf(0, 128, (900,), "bfloat16")
    red = TensorReduce(dst=sbuf(8192, 128, (1,), "bfloat16"), src=bf, op="add")
    assert cycles(red.cost(V2).busy_ns, clock) == pytest.approx(450)
    iota = Iota(dst=sbuf(0, 128, (500,), "int32"), steps=(1,), engine="gpsimd")
    assert cycles(iota.cost(V2).busy_ns, V2.gpsimd.clock_hz) == pytest.approx(150 + 500)


def test_stride_over_16_bytes_halves_the_rate():
    dense = sbuf(0, 128, (1024,), "float32")
    strided = dense.__class__(memory=dense.memory, dtype=dense.dtype, partitions=128,
                              dims=((8, 1024),), offset=0)
    clock = V2.vector.clock_hz
    base = cycles(TensorCopy(dst=dense, src=dense).cost(V2).busy_ns, clock)
    slow = cycles(TensorCopy(dst=dense, src=strided).cost(V2).busy_ns, clock)
    assert slow == pytest.approx(2 * base)


def test_v3_vector_perf_mode_for_bf16_copies():
    bf = sbuf(0, 128, (2048,), "bfloat16")
    f32 = sbuf(0, 128, (2048,), "float32")
    v3_clock = V3.vector.clock_hz
    assert cycles(TensorCopy(dst=bf, src=bf).cost(V3).busy_ns, v3_clock) == pytest.approx(512)
    assert cycles(TensorCopy(dst=f32, src=f32).cost(V3).busy_ns, v3_clock) == pytest.approx(2048)


def test_dma_cost_has_start_latency_and_descriptor_efficiency():
    src = hbm("x", (128, 1024), "float32")  # 4 KiB per partition, contiguous overall
    dst = sbuf(0, 128, (1024,), "float32")
    big = DmaCopy(dst=dst, src=src).transfer(V2)
    assert big.descriptor_bytes == 4096 and big.nbytes == 128 * 4096
    narrow_src = hbm("x", (128, 16), "float32", row_elements=1024)  # 64-byte rows
    narrow = DmaCopy(dst=sbuf(0, 128, (16,), "float32"), src=narrow_src).transfer(V2)
    assert narrow.descriptor_bytes == 64
    per_byte_big = big.engine_ns(V2) / big.nbytes
    per_byte_narrow = narrow.engine_ns(V2) / narrow.nbytes
    assert per_byte_narrow > 4 * per_byte_big  # small descriptors are inefficient
    cost = DmaCopy(dst=dst, src=src).cost(V2)
    assert cost.busy_ns > V2.dma.start_latency_ns
