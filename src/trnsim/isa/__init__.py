"""The NeuronCore instruction set: access patterns, instructions, programs.

Each opcode is one frozen dataclass declaring its operands, legality check, numpy semantics and
cost side by side (see `trnsim.isa.instruction`). The functional interpreter in `trnsim.sim` is
the executable definition of this ISA; timing is a separate consumer of the same instructions.
"""

from trnsim.isa.access import AccessPattern, Memory, hbm, psum, row_major_dims, sbuf
from trnsim.isa.debug import DevicePrint
from trnsim.isa.dma import DmaCopy, DmaTransfer, DmaTranspose
from trnsim.isa.gpsimd_engine import AffineSelect, Iota, LocalGather, Random, TensorPartitionReduce
from trnsim.isa.instruction import (
    ENGINE_MEMORIES,
    Cost,
    Engine,
    ExecutionState,
    Instruction,
    cycles_to_ns,
    streaming_cost,
)
from trnsim.isa.ops import ACTIVATIONS, ALU_OPS, AluOp, activation_function, alu_op
from trnsim.isa.program import OnChipAllocator, Program, ProgramBuilder, TensorDecl
from trnsim.isa.scalar_engine import Activation
from trnsim.isa.tensor_engine import LoadStationary, MultiplyMoving, TensorTranspose
from trnsim.isa.vector_elementwise import (
    Dropout,
    Memset,
    Reciprocal,
    ScalarTensorTensor,
    TensorCopy,
    TensorCopyPredicated,
    TensorScalar,
    TensorTensor,
    TensorTensorScan,
)
from trnsim.isa.vector_reduce import (
    BnAggr,
    BnStats,
    FindIndex8,
    MatchReplace8,
    Max8,
    RangeSelect,
    SelectReduce,
    StreamShuffle,
    TensorReduce,
    VectorTranspose,
)

OPCODES: dict[str, type[Instruction]] = {cls.OPCODE: cls for cls in (
    LoadStationary, MultiplyMoving, TensorTranspose, Activation, TensorTensor, TensorScalar,
    ScalarTensorTensor, TensorCopy, TensorCopyPredicated, Memset, Reciprocal, Dropout,
    TensorTensorScan, TensorReduce, BnStats, BnAggr, Max8, FindIndex8, MatchReplace8, SelectReduce,
    RangeSelect, VectorTranspose, StreamShuffle, TensorPartitionReduce, Iota, AffineSelect,
    LocalGather, Random, DmaCopy, DmaTranspose, DevicePrint,
)}

__all__ = [
    "ACTIVATIONS",
    "ALU_OPS",
    "ENGINE_MEMORIES",
    "OPCODES",
    "AccessPattern",
    "Activation",
    "AffineSelect",
    "AluOp",
    "BnAggr",
    "BnStats",
    "Cost",
    "DevicePrint",
    "DmaCopy",
    "DmaTransfer",
    "DmaTranspose",
    "Dropout",
    "Engine",
    "ExecutionState",
    "FindIndex8",
    "Instruction",
    "Iota",
    "LoadStationary",
    "LocalGather",
    "MatchReplace8",
    "Max8",
    "Memory",
    "Memset",
    "MultiplyMoving",
    "OnChipAllocator",
    "Program",
    "ProgramBuilder",
    "Random",
    "RangeSelect",
    "Reciprocal",
    "ScalarTensorTensor",
    "SelectReduce",
    "StreamShuffle",
    "TensorCopy",
    "TensorCopyPredicated",
    "TensorDecl",
    "TensorPartitionReduce",
    "TensorReduce",
    "TensorScalar",
    "TensorTensor",
    "TensorTensorScan",
    "TensorTranspose",
    "VectorTranspose",
    "activation_function",
    "alu_op",
    "cycles_to_ns",
    "hbm",
    "psum",
    "row_major_dims",
    "sbuf",
    "streaming_cost",
]
