"""ScalarE: activation(func(data * scale + bias)) with an optional free-axis reduction."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from trnsim.errors import InvalidArgumentError, UnsupportedError
from trnsim.isa.access import AccessPattern
from trnsim.isa.instruction import Cost, Engine, ExecutionState, Instruction, is_strided, streaming_cost
from trnsim.isa.operands import Operand, check_vector_operand, operand_aps, operand_value, same_elements
from trnsim.isa.ops import activation_function, alu_op
from trnsim.isa.registers import REDUCE_CMDS, apply_reduce_cmd


@dataclass(frozen=True, kw_only=True)
class Activation(Instruction):
    """dst = func(src * scale + bias); optionally reduce the result along the free axes.

    With `reduce_op`, the per-partition reduction feeds the engine's accumulator registers
    according to `reduce_cmd` (activation_reduce = reset_reduce) and, if `reduce_dst` is given,
    the registers are read out into it (costing one extra MIN_II).
    """

    OPCODE: ClassVar[str] = "Activation"
    ENGINES: ClassVar[tuple[Engine, ...]] = (Engine.SCALAR,)

    dst: AccessPattern
    src: AccessPattern
    func: str = "identity"
    scale: Operand = 1.0
    bias: AccessPattern | float | None = None
    reduce_op: str | None = None
    reduce_cmd: str = "idle"
    reduce_dst: AccessPattern | None = None

    def reads(self):
        return (self.src, *operand_aps(self.scale, self.bias))

    def writes(self):
        return (self.dst,) + ((self.reduce_dst,) if self.reduce_dst is not None else ())

    def check(self, core) -> None:
        super().check(core)
        activation_function(self.func)
        same_elements(self, self.src, self.dst, "input and output")
        check_vector_operand(self, self.scale, self.src, "scale")
        if self.bias is not None:
            check_vector_operand(self, self.bias, self.src, "bias")
        if self.reduce_cmd not in REDUCE_CMDS:
            self.fail(InvalidArgumentError(f"{self.name}: unknown reduce_cmd {self.reduce_cmd!r}"))
        if self.reduce_op is not None:
            alu_op(self.reduce_op)
        if self.reduce_dst is not None:
            check_vector_operand(self, self.reduce_dst, self.src, "reduce result")
        psum_src = self.src.memory.value == "psum"
        limit = core.max_free_elements_psum if psum_src else core.max_free_elements_sbuf
        self.limit("free size", self.src.free_size, limit, core)

    def execute(self, state: ExecutionState) -> None:
        x = state.read_compute(self.src)
        ndim = x.ndim
        x = x * operand_value(state, self.scale, ndim)
        if self.bias is not None:
            x = x + operand_value(state, self.bias, ndim)
        _, fn = activation_function(self.func)
        y = fn(x.astype(np.float32, copy=False))
        state.write(self.dst, y.reshape(self.dst.shape))
        if self.reduce_op is None:
            return
        op = alu_op(self.reduce_op)
        per_partition = op.reduce(y.reshape(y.shape[0], -1), axis=1)
        cmd = self.reduce_cmd if self.reduce_cmd != "idle" else "reset_reduce"
        values = apply_reduce_cmd(state, Engine.SCALAR, cmd, op.name, self.src.partition_start,
                                  per_partition)
        if self.reduce_dst is not None:
            state.write(self.reduce_dst, values.reshape(self.reduce_dst.shape))

    def cost(self, core) -> Cost:
        return activation_cost(self, core)


def activation_cost(ins, core) -> Cost:
    """ScalarE streams src once; an accumulated reduction adds one issue interval. Each scale or
    bias tile is one more SBUF/PSUM access to set up (the latency of short activations)."""
    extra = core.costs.min_ii_cycles if ins.reduce_dst is not None else 0
    accesses = 2 + len(operand_aps(getattr(ins, "scale", None), getattr(ins, "bias", None)))
    return streaming_cost(core, ins.engine, ins.src.free_size, extra_cycles=extra,
                          strided=is_strided(core, ins.src, ins.dst), accesses=accesses)


_ACTIVATE2_PAIRS = (("multiply", "add"), ("multiply", "subtract"), ("multiply", "bypass"),
                    ("add", "bypass"), ("subtract", "bypass"), ("bypass", "bypass"))


@dataclass(frozen=True, kw_only=True)
class Activate2(Instruction):
    """dst = func((src op0 imm0) op1 imm1, relu_param), with the Activation reduction tail.

    NeuronCore-v4 (nisa.activate2). ``func = "prelu"`` uses `relu_param` as the negative slope.
    The tensor-scalar stage allows the six (op0, op1) pairs the documentation lists.
    """

    OPCODE: ClassVar[str] = "Activate2"
    ENGINES: ClassVar[tuple[Engine, ...]] = (Engine.SCALAR,)

    dst: AccessPattern
    src: AccessPattern
    func: str
    op0: str = "bypass"
    imm0: Operand = 0.0
    op1: str = "bypass"
    imm1: Operand = 0.0
    relu_param: Operand = 0.0
    reverse0: bool = False
    reverse1: bool = False
    reduce_op: str | None = None
    reduce_cmd: str = "idle"
    reduce_dst: AccessPattern | None = None

    def reads(self):
        return (self.src, *operand_aps(self.imm0, self.imm1, self.relu_param))

    def writes(self):
        return (self.dst,) + ((self.reduce_dst,) if self.reduce_dst is not None else ())

    def check(self, core) -> None:
        if core.version < 4:
            self.fail(UnsupportedError(f"{self.name} needs NeuronCore-v4 (gen4, trn3); the target is "
                                       f"{core.name}"))
        super().check(core)
        if self.func != "prelu":
            activation_function(self.func)
        pair = (alu_op(self.op0).name, alu_op(self.op1).name)
        if pair not in _ACTIVATE2_PAIRS:
            self.fail(InvalidArgumentError(f"{self.name}: (op0, op1) = {pair} is not one of "
                                           f"{', '.join(str(p) for p in _ACTIVATE2_PAIRS)}"))
        same_elements(self, self.src, self.dst, "input and output")
        for value, what in ((self.imm0, "imm0"), (self.imm1, "imm1"), (self.relu_param, "relu_param")):
            check_vector_operand(self, value, self.src, what)
        if self.reduce_cmd not in REDUCE_CMDS:
            self.fail(InvalidArgumentError(f"{self.name}: unknown reduce_cmd {self.reduce_cmd!r}"))

    def execute(self, state: ExecutionState) -> None:
        x = state.read_compute(self.src)
        ndim = x.ndim
        for op_name, imm, reverse in ((self.op0, self.imm0, self.reverse0),
                                      (self.op1, self.imm1, self.reverse1)):
            op = alu_op(op_name)
            if op.name == "bypass":
                continue
            value = operand_value(state, imm, ndim)
            x = op(value, x) if reverse else op(x, value)
        x = np.asarray(x, dtype=np.float32)
        if self.func == "prelu":
            alpha = operand_value(state, self.relu_param, ndim)
            y = np.where(x > 0, x, x * alpha).astype(np.float32)
        else:
            y = activation_function(self.func)[1](x)
        state.write(self.dst, y.reshape(self.dst.shape))
        if self.reduce_op is None or self.reduce_cmd == "idle":
            return
        op = alu_op(self.reduce_op)
        per_partition = op.reduce(y.reshape(y.shape[0], -1), axis=1)
        values = apply_reduce_cmd(state, Engine.SCALAR, self.reduce_cmd, op.name,
                                  self.src.partition_start, per_partition)
        if self.reduce_dst is not None:
            state.write(self.reduce_dst, values.reshape(self.reduce_dst.shape))

    def cost(self, core) -> Cost:
        return activation_cost(self, core)
