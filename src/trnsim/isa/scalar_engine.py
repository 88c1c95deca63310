"""ScalarE: activation(func(data * scale + bias)) with an optional free-axis reduction."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from trnsim.errors import InvalidArgumentError
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
        extra = core.costs.min_ii_cycles if self.reduce_dst is not None else 0
        return streaming_cost(core, self.engine, self.src.free_size, extra_cycles=extra,
                              strided=is_strided(core, self.src, self.dst))
