"""Per-partition accumulator registers of the Scalar and Vector engines (`reduce_cmd`).

128 fp32 registers per engine hold running reductions across instructions:
idle = don't touch them; reset = set them to the operator's identity; reduce = fold this
instruction's per-partition result in; reset_reduce = reset, then fold; load_reduce (current NKI)
loads `initial` (when given) and then reduces, else behaves as reduce.
"""

from __future__ import annotations

import numpy as np

from trnsim.isa.instruction import Engine, ExecutionState
from trnsim.isa.ops import alu_op

REDUCE_CMDS = ("idle", "reset", "reduce", "reset_reduce", "load_reduce")


def registers(state: ExecutionState, engine: Engine, partitions: int) -> np.ndarray:
    scratch = state.engine_state(engine)
    regs = scratch.get("accumulators")
    if regs is None:
        regs = scratch["accumulators"] = np.zeros(max(partitions, 128), dtype=np.float32)
    return regs


def apply_reduce_cmd(state: ExecutionState, engine: Engine, cmd: str, op_name: str,
                     partition_start: int, per_partition: np.ndarray,
                     initial: np.ndarray | float | None = None) -> np.ndarray:
    """Update the registers for [start, start+len) and return their new values."""
    op = alu_op(op_name)
    count = per_partition.shape[0]
    regs = registers(state, engine, partition_start + count)
    window = slice(partition_start, partition_start + count)
    if cmd in ("reset", "reset_reduce"):
        regs[window] = op.identity if op.identity is not None else 0.0
    if cmd == "load_reduce" and initial is not None:
        regs[window] = np.broadcast_to(np.asarray(initial, dtype=np.float32).reshape(-1), (count,))
    if cmd in ("reduce", "reset_reduce", "load_reduce"):
        regs[window] = op(regs[window], per_partition.astype(np.float32))
    return regs[window].copy()
