"""Every family of opcodes through the byte-addressed CoreState, against the same semantics run on
a plain dict of numpy arrays: what the simulator adds (views, casts on write, read-only inputs,
PSUM, engine scratch state) must not change a single bit."""

import numpy as np
import pytest

from tests.sim.helpers import builder
from trnsim.isa import (
    AffineSelect,
    BnStats,
    DmaCopy,
    Iota,
    Max8,
    Memory,
    Memset,
    Reciprocal,
    ScalarTensorTensor,
    TensorCopy,
    TensorCopyPredicated,
    TensorPartitionReduce,
    TensorReduce,
    TensorScalar,
    TensorTensorScan,
    TensorTranspose,
)
from trnsim.numerics import cast, to_compute
from trnsim.sim import simulate


class DictState:
    """Each access pattern owns an array: the semantics alone, no memory model."""

    def __init__(self, core):
        self.core = core
        self.arrays = {}
        self.scratch = {}

    def read(self, ap):
        return self.arrays[ap]

    def read_compute(self, ap):
        return to_compute(self.arrays[ap], ap.dtype)

    def write(self, ap, values):
        self.arrays[ap] = np.broadcast_to(cast(np.asarray(values), ap.dtype), ap.shape).copy()

    def accumulate(self, ap, values):
        self.arrays[ap] = self.arrays[ap] + values

    def fp32_out(self, ap, shape):
        return None  # no shared storage: compute, then write

    def engine_state(self, engine):
        return self.scratch.setdefault(engine, {})

    def random_uniform(self, shape):
        raise AssertionError("not used by these cases")


CASES = {  # name -> instruction built from tiles t(name, shape, dtype, memory); inputs start with "i"
    "tensor_reduce": lambda t: TensorReduce(dst=t("o", (128, 1)), src=t("i"), op="max"),
    "bn_stats": lambda t: BnStats(dst=t("o", (128, 6)), src=t("i")),
    "max8": lambda t: Max8(dst=t("o", (128, 8)), src=t("i")),
    "reciprocal": lambda t: Reciprocal(dst=t("o"), src=t("i")),
    "scan": lambda t: TensorTensorScan(dst=t("o"), in0=t("i0"), in1=t("i1"), initial=0.5,
                                       op0="multiply", op1="add"),
    "predicated": lambda t: TensorCopyPredicated(dst=t("o"), src=t("i0"), predicate=t("ip")),
    "memset_bf16": lambda t: Memset(dst=t("o", dtype="bfloat16"), value=3.0),
    "iota": lambda t: Iota(dst=t("o", dtype="int32"), base=1, partition_step=16, steps=(1,)),
    "affine_select": lambda t: AffineSelect(dst=t("o"), src=t("i"), cmp="greater", partition_step=1,
                                            steps=(-1,), fill=-9.0),
    "partition_reduce": lambda t: TensorPartitionReduce(dst=t("o", (1, 16)), src=t("i"), op="add"),
    "tensor_scalar_vector_operand": lambda t: TensorScalar(
        dst=t("o", dtype="bfloat16"), src=t("i"), op0="subtract", operand0=t("i1", (128, 1)),
        op1="multiply", operand1=2.0),
    "scalar_tensor_tensor": lambda t: ScalarTensorTensor(dst=t("o"), src=t("i0"), op0="add",
                                                         operand0=1.0, op1="max", in1=t("i1")),
    "pe_transpose_into_psum": lambda t: TensorTranspose(dst=t("o", (16, 128), memory=Memory.PSUM),
                                                        src=t("i")),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_opcode_through_the_memory_model_matches_the_plain_semantics(case):
    b = builder()
    tiles: dict[str, object] = {}

    def t(name, shape=(128, 16), dtype="float32", memory=Memory.SBUF):
        tiles[name] = b.tile(shape, dtype, memory=memory, name=name)
        return tiles[name]

    ins = CASES[case](t)
    rng = np.random.default_rng(5)
    values = {}
    for name, ap in tiles.items():
        if name.startswith("i"):
            data = rng.standard_normal(ap.shape).astype(np.float32)
            if name == "ip":
                data = (data > 0).astype(np.float32)
            values[name] = cast(data, ap.dtype)
            decl = b.input(name, ap.shape, ap.dtype)
            b.emit(DmaCopy(dst=ap, src=decl.block()))
    b.emit(ins)
    out = tiles["o"]
    if out.memory is Memory.PSUM:  # DMA cannot read PSUM: evict through VectorE first
        evicted = b.tile(out.shape, out.dtype, name="evicted")
        b.emit(TensorCopy(dst=evicted, src=out))
        out = evicted
    b.emit(DmaCopy(dst=b.output("o", out.shape, out.dtype).block(), src=out))
    if "predicated" in case:  # the destination keeps its old values where the predicate is 0
        b.program.instructions.insert(0, Memset(dst=tiles["o"], value=7.0))
    result = simulate(b.build(), values).outputs["o"]

    reference = DictState(b.core)
    for name, ap in tiles.items():
        if name.startswith("i"):
            reference.arrays[ap] = values[name]
    if "predicated" in case:
        reference.write(tiles["o"], np.full(tiles["o"].shape, 7.0, np.float32))
    ins.execute(reference)
    expected = reference.arrays[tiles["o"]]
    np.testing.assert_array_equal(result.reshape(expected.shape).view(np.uint8),
                                  np.ascontiguousarray(expected).view(np.uint8))
