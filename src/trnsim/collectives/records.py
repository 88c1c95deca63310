"""What callers hand the fabric (`Collective`) and what they get back (`CollectiveResult`,
`Timeline`). Times are ns on the fabric's clock; sizes are bytes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Collective:
    """One collective operation to run.

    op: "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "permute", "sendrecv" (or
    nccom-test's short names). nbytes: the operation's buffer, nccom-test's size(B) (see
    `trnsim.collectives.ops`); optional when `inputs` are given. ranks: a rank count (default
    placement) or the NeuronCore (endpoint) each rank runs on; defaults to len(inputs).
    algorithm: None lets the chooser pick. inputs: one array per rank for a functional run; None
    for timing only. pairs: source -> target ranks for permute / sendrecv.
    """

    op: str
    nbytes: int | None = None
    dtype: Any = "float32"
    ranks: int | Sequence[int] | None = None
    algorithm: str | None = None
    inputs: Sequence[np.ndarray] | None = None
    pairs: Sequence[tuple[int, int]] | None = None
    reduction: str = "sum"


@dataclass(frozen=True)
class TimelineEvent:
    """A span on the fabric's clock: a whole collective ("collective"), the wait before the
    CC-cores admit it ("queued"), or one algorithm step ("step": latency, then data)."""

    collective: int  # the issuing ticket's id
    kind: str
    name: str
    start_ns: float
    end_ns: float
    nbytes: int = 0  # bytes the step put on the wire (all ranks together)

    @property
    def duration_ns(self) -> float:
        return self.end_ns - self.start_ns


@dataclass
class Timeline:
    """Events in the order they ended; one per step, not per flow, so it grows with the schedule."""

    events: list[TimelineEvent] = field(default_factory=list)

    @property
    def end_ns(self) -> float:
        return max((e.end_ns for e in self.events), default=0.0)

    def of(self, collective: int) -> list[TimelineEvent]:
        return [e for e in self.events if e.collective == collective]

    def extend(self, other: Timeline) -> None:
        self.events.extend(other.events)


@dataclass(frozen=True)
class CollectiveResult:
    """A finished collective: when it ran, how, and (for a functional run) each rank's output."""

    ticket: int
    op: str
    algorithm: str
    detail: str  # sub-algorithms of "hier", else ""
    cores: tuple[int, ...]  # endpoint of each rank
    nbytes: int
    count: int
    dtype: str
    issue_ns: float
    start_ns: float  # admitted by the CC-cores
    end_ns: float
    steps: int
    outputs: list[np.ndarray] | None
    events: tuple[TimelineEvent, ...]

    @property
    def ranks(self) -> int:
        return len(self.cores)

    @property
    def duration_ns(self) -> float:
        """Issue to completion, including any wait for CC-cores."""
        return self.end_ns - self.issue_ns


@dataclass(frozen=True)
class Ticket:
    """Handle of an issued collective; pass it to `Fabric.wait`."""

    id: int
