"""`InstructionList`: a program's instruction list whose replayed spans are built when read.

A lowered Llama-2-7B prefill holds 5.5M instructions, 96% of them replays of a traced kernel
call (`trnsim.compiler.lowering.replay`) that differ from it only in their label, source and HBM
operands. Building each as an object costs about a microsecond and 300 bytes, and the timing
path reads only the few that touch HBM: the planner copies the others' plans from the traced call
(`isa.Repeats`). So the lowering appends a replay as a deferred span (`defer`): a maker
(`Deferred`) that builds any one of its instructions, or all of them at once. A position is built
on its first read and kept, so every read of it returns the same object, as a list's would; a
read of many (iteration, a slice, comparison) builds the spans it covers in bulk. Reads and writes
otherwise behave as a list's; `changes` counts writes, for holders that must know whether the
list is still the one they saw (`trnsim.sim.plan`)."""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable, Iterator, MutableSequence
from itertools import repeat
from typing import Protocol


class Deferred(Protocol):
    """What builds a deferred span's instructions (a replayed kernel call)."""

    def one(self, offset: int):
        """The span's instruction at `offset`."""

    def all(self) -> list:
        """Every instruction of the span, in order."""


class InstructionList(MutableSequence):
    """A list of instructions some of whose spans are not built yet (see the module doc)."""

    __slots__ = ("_deferred", "_items", "_lock", "_starts", "changes")

    def __init__(self, items: Iterable = ()) -> None:
        self._items: list = list(items)  # an instruction, or None where a span is not built
        self._starts: list[int] = []  # first position of each deferred span, ascending
        # first position -> (length, maker, {offset: instruction built alone})
        self._deferred: dict[int, tuple[int, Deferred, dict]] = {}
        self.changes = 0
        self._lock = threading.RLock()

    # --- deferred spans

    def defer(self, length: int, maker: Deferred) -> None:
        """Append `length` instructions that `maker` builds when they are read."""
        if length <= 0:
            return
        start = len(self._items)
        self._items += repeat(None, length)
        self._starts.append(start)
        self._deferred[start] = (length, maker, {})
        self.changes += 1

    def built(self, index: int):
        """The instruction at `index` if it is built, else None (without building it)."""
        return self._items[index]

    def built_offsets(self, start: int):
        """The offsets built so far (read or written) of the deferred span at `start`, or None
        when no span not built in full starts there."""
        found = self._deferred.get(start)
        return None if found is None else found[2].keys()

    @property
    def pending(self) -> int:
        """How many spans are not built in full."""
        return len(self._starts)

    def build(self) -> None:
        """Build every deferred span."""
        with self._lock:
            for start in list(self._starts):
                self._build_span(start)

    def _span_of(self, index: int) -> int:
        return self._starts[bisect.bisect_right(self._starts, index) - 1]

    # (builds hold the lock: two threads reading one position get one object, and a span is
    # built once)
    def _build_one(self, index: int):
        with self._lock:
            ins = self._items[index]
            if ins is None:
                start = self._span_of(index)
                _, maker, alone = self._deferred[start]
                ins = alone[index - start] = self._items[index] = maker.one(index - start)
            return ins

    def _build_span(self, start: int) -> None:
        with self._lock:
            found = self._deferred.pop(start, None)
            if found is None:  # another thread built it
                return
            length, maker, alone = found
            del self._starts[bisect.bisect_left(self._starts, start)]
            made = maker.all()
            for offset, ins in alone.items():  # what was read before stays the object it was
                made[offset] = ins
            self._items[start:start + length] = made

    def _build_range(self, first: int, end: int) -> None:
        with self._lock:
            starts = self._starts
            if not starts or end <= first:
                return
            k = max(bisect.bisect_right(starts, first) - 1, 0)
            covered = []
            while k < len(starts) and starts[k] < end:
                start = starts[k]
                if start + self._deferred[start][0] > first:
                    covered.append(start)
                k += 1
            for start in covered:
                self._build_span(start)

    # --- the list interface

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, index):
        if isinstance(index, slice):
            if self._starts:
                first, end, step = index.indices(len(self._items))
                if step > 0:
                    self._build_range(first, end)
                else:
                    self.build()
            return self._items[index]
        ins = self._items[index]
        if ins is None:
            ins = self._build_one(index if index >= 0 else index + len(self._items))
        return ins

    def __setitem__(self, index, value) -> None:
        if isinstance(index, slice):
            self.build()
            self._items[index] = value
        else:
            with self._lock:
                self._items[index] = value
                if self._starts:  # in a span not built in full: its build keeps the value
                    index = index if index >= 0 else index + len(self._items)
                    k = bisect.bisect_right(self._starts, index) - 1
                    if k >= 0:
                        start = self._starts[k]
                        length, _, alone = self._deferred[start]
                        if index < start + length:
                            alone[index - start] = value
        self.changes += 1

    def __delitem__(self, index) -> None:
        self.build()
        del self._items[index]
        self.changes += 1

    def insert(self, index: int, value) -> None:
        self.build()
        self._items.insert(index, value)
        self.changes += 1

    def append(self, value) -> None:
        self._items.append(value)
        self.changes += 1

    def extend(self, values: Iterable) -> None:
        self._items.extend(values)
        self.changes += 1

    def __iadd__(self, values: Iterable) -> InstructionList:
        self.extend(values)
        return self

    def __iter__(self) -> Iterator:
        if self._starts:
            self.build()
        return iter(self._items)

    def __reversed__(self) -> Iterator:
        if self._starts:
            self.build()
        return reversed(self._items)

    def __contains__(self, value) -> bool:
        return value in iter(self)

    def __add__(self, other: Iterable) -> list:
        return [*self, *other]

    def __radd__(self, other: Iterable) -> list:
        return [*other, *self]

    def __eq__(self, other) -> bool:
        if isinstance(other, InstructionList | list):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other,
                                                                          strict=True))
        return NotImplemented

    __hash__ = None  # mutable, as a list

    def copy(self) -> list:
        return list(self)

    def __repr__(self) -> str:
        return repr(list(self))

    def __reduce__(self):
        return (InstructionList, (list(self),))
