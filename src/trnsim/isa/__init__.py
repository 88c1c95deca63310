"""The NeuronCore instruction set: access patterns, instructions, programs.

Each opcode is one frozen dataclass declaring its operands, legality check, numpy semantics and
cost side by side (see `trnsim.isa.instruction`); defining the class registers it in `OPCODES`
(serialisation, profiles). Adding an instruction: its class in one module of this package (a
new module is imported below, its names exported). The functional interpreter in `trnsim.sim` is
the executable definition of this ISA; timing is a separate consumer of the same instructions.
"""

from trnsim.isa.access import AccessPattern, Memory, hbm, psum, row_major_dims, sbuf
from trnsim.isa.control import (
    Branch,
    Jump,
    RegisterAddressed,
    RegisterAlu,
    RegisterFile,
    RegisterLoad,
    RegisterMove,
    RegisterOffset,
    RegisterStore,
    UnknownRegisterValue,
    register_ref,
)
from trnsim.isa.debug import DevicePrint
from trnsim.isa.dma import DmaCompute, DmaCopy, DmaIndirect, DmaTransfer, DmaTranspose
from trnsim.isa.gpsimd_engine import AffineSelect, Iota, LocalGather, Random, TensorPartitionReduce
from trnsim.isa.gpsimd_more import NGather, NonzeroWithCount, SequenceBounds, TopK
from trnsim.isa.instruction import (
    ENGINE_MEMORIES,
    OPCODES,
    Cost,
    Engine,
    ExecutionState,
    Instruction,
    cycles_to_ns,
    field_names,
    operand_fields,
    streaming_cost,
)
from trnsim.isa.instruction_list import InstructionList
from trnsim.isa.mx import LoadStationaryMx, MultiplyMovingMx, QuantizeMx
from trnsim.isa.ops import ACTIVATIONS, ALU_OPS, AluOp, activation_function, alu_op
from trnsim.isa.program import OnChipAllocator, Program, ProgramBuilder, Repeats, TensorDecl
from trnsim.isa.scalar_engine import Activate2, Activation
from trnsim.isa.sync import CollectiveOp, CoreBarrier, SendRecv
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
from trnsim.isa.vector_more import (
    Exponential,
    RandomBits,
    RandomRange,
    RngSeed,
    RngState,
    TensorScalarCumulative,
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

__all__ = [
    "ACTIVATIONS",
    "ALU_OPS",
    "ENGINE_MEMORIES",
    "OPCODES",
    "AccessPattern",
    "Activate2",
    "Activation",
    "AffineSelect",
    "AluOp",
    "BnAggr",
    "BnStats",
    "Branch",
    "CollectiveOp",
    "CoreBarrier",
    "Cost",
    "DevicePrint",
    "DmaCompute",
    "DmaCopy",
    "DmaIndirect",
    "DmaTransfer",
    "DmaTranspose",
    "Dropout",
    "Engine",
    "ExecutionState",
    "Exponential",
    "FindIndex8",
    "Instruction",
    "InstructionList",
    "Iota",
    "Jump",
    "LoadStationary",
    "LoadStationaryMx",
    "LocalGather",
    "MatchReplace8",
    "Max8",
    "Memory",
    "Memset",
    "MultiplyMoving",
    "MultiplyMovingMx",
    "NGather",
    "NonzeroWithCount",
    "OnChipAllocator",
    "Program",
    "ProgramBuilder",
    "QuantizeMx",
    "Random",
    "RandomBits",
    "RandomRange",
    "RangeSelect",
    "Reciprocal",
    "RegisterAddressed",
    "RegisterAlu",
    "RegisterFile",
    "RegisterLoad",
    "RegisterMove",
    "RegisterOffset",
    "RegisterStore",
    "Repeats",
    "RngSeed",
    "RngState",
    "ScalarTensorTensor",
    "SelectReduce",
    "SendRecv",
    "SequenceBounds",
    "StreamShuffle",
    "TensorCopy",
    "TensorCopyPredicated",
    "TensorDecl",
    "TensorPartitionReduce",
    "TensorReduce",
    "TensorScalar",
    "TensorScalarCumulative",
    "TensorTensor",
    "TensorTensorScan",
    "TensorTranspose",
    "TopK",
    "UnknownRegisterValue",
    "VectorTranspose",
    "activation_function",
    "alu_op",
    "cycles_to_ns",
    "field_names",
    "hbm",
    "operand_fields",
    "psum",
    "register_ref",
    "row_major_dims",
    "sbuf",
    "streaming_cost",
]
