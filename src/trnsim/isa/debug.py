"""DevicePrint: nl.device_print — print a tile's values when the simulator reaches it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from trnsim.isa.access import AccessPattern
from trnsim.isa.instruction import Cost, Engine, ExecutionState, Instruction


@dataclass(frozen=True, kw_only=True)
class DevicePrint(Instruction):
    """Zero-cost on the Sync engine; the functional simulator prints `prefix` and the values."""

    OPCODE: ClassVar[str] = "DevicePrint"
    ENGINES: ClassVar[tuple[Engine, ...]] = (Engine.SYNC,)

    src: AccessPattern
    prefix: str = ""

    def reads(self):
        return (self.src,)

    def check(self, core) -> None:  # reads any memory; nothing else to check
        return None

    def execute(self, state: ExecutionState) -> None:
        values = state.read(self.src)
        with np.printoptions(threshold=64, edgeitems=4):
            print(f"{self.prefix}{values}", flush=True)

    def cost(self, core) -> Cost:
        return Cost(0.0, 0.0)
