"""SBUF spill and reload: what the compiler's allocator does when a kernel's live tiles exceed SBUF.

neuronx-cc does not refuse a kernel whose live SBUF tiles do not fit: it spills some to device
memory and reloads them before their next use (the fused Mamba tutorial's ``mamba_v2`` at
seq_len 8192: "new DMA activity rows qSyncSpillReload0 and qVectorSpillReload0 ... data spill
from SBUF into device memory or reload back to SBUF", 53 ms against 28 ms once re-tiled;
nki/guides/tutorials/fused_mamba.rst). trnsim's trace does the same as its last resort
(`trnsim.nki.jit.trace_fitting_sbuf`: only when freeing every tile after its last use still does
not fit), so the spill traffic is charged as the DMAs it is:

- An allocation that does not fit spills resident tiles, the one next used furthest ahead
  first (Belady's choice, the one register and buffer allocators approximate; the uses come
  from the probe trace that found the last uses; the current nl/nisa call's own operands and
  results are never chosen), until it fits: each victim that
  holds data is copied to a private HBM scratch tensor (``<tile>_spill``) by one DMA labelled
  ``spill``, and its SBUF bytes are freed (the simulator orders their reuse after that copy).
- The next access to a spilled tile reloads it first, into wherever it now fits, by one DMA
  labelled ``reload``; every view of the tile follows it (views address its storage).

A tile larger than the whole SBUF, or a call whose own operands do not fit together, still
raises the allocation's `LimitExceededError`.
"""

from __future__ import annotations

import bisect
import math
from typing import TYPE_CHECKING

from trnsim.errors import LimitExceededError
from trnsim.isa import DmaCopy

if TYPE_CHECKING:
    from trnsim.nki.tile import Storage
    from trnsim.nki.trace import Trace


class Spiller:
    """The spill state of one trace: which automatically allocated SBUF tiles are resident, which
    the current call holds, and the scratch each spilled tile went to."""

    def __init__(self, trace: Trace, uses: list[list[int]]) -> None:
        self.trace = trace
        self.uses = uses  # per tile serial, the calls that touch it (a previous trace's)
        self.resident: dict[int, Storage] = {}  # by id(storage)
        self.serial: dict[int, int] = {}  # id(storage) -> its index in `trace.last_use`
        self.pinned: set[int] = set()  # storages the current nl/nisa call reads or writes
        self.spills = 0
        self.reloads = 0

    def new_call(self) -> None:
        self.pinned.clear()

    def track(self, storage: Storage, serial: int) -> None:
        """A new tile: resident, and held by the call that allocated it."""
        self.resident[id(storage)] = storage
        self.serial[id(storage)] = serial
        self.pinned.add(id(storage))

    def forget(self, storage: Storage) -> None:
        self.resident.pop(id(storage), None)

    def allocate(self, nbytes: int, name: str, align: int) -> int:
        """An SBUF offset for `nbytes` per partition, spilling resident tiles until it fits."""
        ring = self.trace.sbuf
        while True:
            try:
                return ring.allocate(nbytes, name, align=align)
            except LimitExceededError:
                if nbytes > ring.capacity or not self._spill_one():
                    raise

    def touch(self, storage: Storage) -> None:
        """An operand of the current call: hold it, and reload it first if it was spilled."""
        self.pinned.add(id(storage))
        if storage.spilled:
            self._reload(storage)

    def _spill_one(self) -> bool:
        trace = self.trace
        candidates = [(-self._next_use(self.serial[key]), -s.bytes_per_partition,
                       self.serial[key], s)
                      for key, s in self.resident.items() if key not in self.pinned]
        if not candidates:
            return False
        *_, victim = min(candidates, key=lambda c: c[:3])
        if victim.name in trace._written_onchip:  # undefined bytes need no copy
            if victim.spill is None:
                free = victim.bytes_per_partition // victim.dtype.itemsize
                victim.spill = trace.hbm_tensor(f"{victim.name}_spill",
                                                (victim.partitions, free), victim.dtype,
                                                kind="internal", buffer="private_hbm")
            self._copy(victim, to_hbm=True)
        trace.sbuf.free(victim.offset)
        victim.spilled = True
        self.forget(victim)
        self.spills += 1
        return True

    def _next_use(self, serial: int) -> float:
        """The next call that touches tile `serial` (infinity: none; without a plan for it, the
        least recently used goes first)."""
        calls = self.trace.calls
        if serial >= len(self.uses):
            return calls - self.trace.last_use[serial]
        at = bisect.bisect_right(self.uses[serial], calls)
        return self.uses[serial][at] if at < len(self.uses[serial]) else math.inf

    def _reload(self, storage: Storage) -> None:
        trace = self.trace
        storage.offset = self.allocate(storage.bytes_per_partition, storage.name,
                                       align=max(4, storage.dtype.itemsize))
        storage.spilled = False
        self.resident[id(storage)] = storage
        trace.builder.program.sbuf_peak_bytes_per_partition = trace.sbuf.peak
        if storage.spill is not None:
            self._copy(storage, to_hbm=False)
            self.reloads += 1

    def _copy(self, storage: Storage, *, to_hbm: bool) -> None:
        """One DMA between the tile's SBUF bytes (all of them) and its HBM scratch."""
        from trnsim.nki.tile import to_access_pattern_raw

        trace = self.trace
        sbuf = to_access_pattern_raw(trace.full_view(storage))
        hbm = to_access_pattern_raw(storage.spill)
        dst, src = (hbm, sbuf) if to_hbm else (sbuf, hbm)
        instruction = DmaCopy(dst=dst, src=src, source=trace.source,
                              label="spill" if to_hbm else "reload")
        instruction.check(trace.core)
        trace.builder.emit(instruction)
