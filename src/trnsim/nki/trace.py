"""The tracing machine behind both NKI front ends.

A kernel is ordinary Python run once per signature inside a `Trace`: loops and ifs are unrolled
and specialised, and every nl/nisa call emits `isa` instructions into a `ProgramBuilder`. The trace
also plays the compiler's other roles: it allocates SBUF/PSUM tiles (next-fit in a ring, so
consecutive loop iterations get different buffers and can overlap, as the compiler's
multi-buffering allows), frees a loop iteration's tiles when the iteration ends, and attaches the
user's source line to every instruction and error.
"""

from __future__ import annotations

import os
import sys
import threading
import warnings
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import lru_cache, wraps
from math import prod

import numpy as np

from trnsim.errors import (
    InvalidArgumentError,
    LimitExceededError,
    TrnsimError,
    UndefinedBehaviourWarning,
    UnsupportedError,
)
from trnsim.isa import Instruction, Memory, ProgramBuilder
from trnsim.isa.access import HBM, PSUM, SBUF, Patterns
from trnsim.isa.instruction import built
from trnsim.nki import legalise
from trnsim.nki.indexing import MaskedOut
from trnsim.nki.tile import Axis, Pending, Storage, Tile
from trnsim.numerics import DType
from trnsim.numerics import dtype as as_dtype

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_state = threading.local()


def current_trace(required: bool = True) -> Trace | None:
    trace = getattr(_state, "trace", None)
    if trace is None and required:
        raise TrnsimError("this NKI call needs a kernel being traced; call it inside an @nki.jit "
                          "kernel")
    return trace


@contextmanager
def tracing(trace: Trace):
    previous = getattr(_state, "trace", None)
    _state.trace = trace
    try:
        yield trace
    finally:
        _state.trace = previous


def user_location() -> str | None:
    """file:line of the innermost frame outside trnsim (the kernel's line), or in the file of
    the kernel being traced when that kernel is one of trnsim's own (a tutorial kernel run by
    `trnsim kernel run`: its line, not the command-line machinery's that called it)."""
    trace = getattr(_state, "trace", None)
    kernel_file = getattr(trace, "kernel_file", None)
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename == kernel_file or (not filename.startswith(_PACKAGE_DIR)
                                       and "<frozen" not in filename):
            return f"{os.path.basename(filename)}:{frame.f_lineno}"
        frame = frame.f_back
    return None


def api(label: str):
    """Decorate an nl/nisa function: record its label and the user's line for what it emits."""
    def wrap(fn: Callable):
        @wraps(fn)
        def call(*args, **kwargs):
            trace = current_trace(required=False)
            if trace is None or trace.label is not None:
                return fn(*args, **kwargs)
            trace.label, trace.source = label, user_location()
            trace.begin_call()
            try:
                return fn(*args, **kwargs)
            except MaskedOut:  # its mask selects nothing: the compiler drops the instruction
                return None
            except TrnsimError as error:
                raise error.at(trace.source) from None
            finally:
                trace.label = trace.source = None
        call.nki_label = label
        return call
    return wrap


class RingAllocator:
    """Next-fit allocation of per-partition byte ranges, wrapping around at the end.

    PSUM tiles of at most one bank never straddle a bank boundary; larger ones start on one
    (a matmul writes one bank: each bank-wide slice of an accumulator must be a whole bank).
    """

    def __init__(self, memory: Memory, capacity: int, *, bank_bytes: int | None = None,
                 core_name: str = "") -> None:
        self.memory, self.capacity, self.bank = memory, capacity, bank_bytes
        self.core_name = core_name
        self.live: dict[int, tuple[int, str]] = {}
        self.cursor = 0
        self.peak = 0
        self.overcommit = False  # a probe trace: place what does not fit over other tiles

    def allocate(self, nbytes: int, name: str, align: int) -> int:
        nbytes = max(nbytes, 1)
        for start in (self.cursor, 0):
            offset = self._fit_from(start, nbytes, align)
            if offset is not None:
                self.live[offset] = (nbytes, name)
                self.cursor = offset + nbytes
                self.peak = max(self.peak, sum(s for s, _ in self.live.values()))
                return offset
        if self.overcommit and nbytes <= self.capacity:
            return 0
        used = sum(s for s, _ in self.live.values())
        if used + nbytes <= self.capacity:
            raise LimitExceededError(
                f"{self.memory} allocation for tile {name!r}: contiguous bytes per partition",
                nbytes, self._largest_gap(),
                context=f"the largest free range of {self.core_name} {self.memory}: {used} bytes "
                        f"live in {len(self.live)} tiles leave only fragments")
        raise LimitExceededError(
            f"{self.memory} allocation of {nbytes} bytes per partition for tile {name!r} "
            f"({used} bytes live in {len(self.live)} tiles): needs", used + nbytes, self.capacity,
            context=f"{self.core_name} {self.memory} bytes per partition")

    def search_start(self) -> int:
        """Where the next allocation effectively starts looking, whatever its size: a cursor at
        the end looks from 0, as one at 0 does; a cursor on a bank boundary inside a live tile
        moves to that tile's end before anything else (a bank-aligned candidate does not
        straddle, and that tile is its first clash), as one at the tile's end does. Stamping
        compares it (`trnsim.nki.stamp`): a loop body that allocates and frees a tile per free
        PSUM bank leaves the ring where it found it."""
        cursor, bank = self.cursor, self.bank
        for _ in range(len(self.live) + 1):
            if cursor >= self.capacity:
                cursor = 0
            if not bank or cursor % bank:
                break
            end = next((o + s for o, (s, _) in self.live.items() if o <= cursor < o + s), None)
            if end is None:
                break
            cursor = end
        return cursor

    def _fit_from(self, start: int, nbytes: int, align: int) -> int | None:
        offset = -(-start // align) * align
        spans = sorted(self.live.items())
        while offset + nbytes <= self.capacity:
            straddles = self.bank and offset // self.bank != (offset + nbytes - 1) // self.bank
            if straddles and (nbytes <= self.bank or offset % self.bank):
                offset = -(-offset // self.bank) * self.bank
                continue
            clash = next(((o, s) for o, (s, _) in spans if o < offset + nbytes and offset < o + s), None)
            if clash is None:
                return offset
            offset = -(-(clash[0] + clash[1]) // align) * align
        return None

    def fits(self, sizes: list[int], align: int = 4) -> bool:
        """Whether tiles of `sizes` bytes per partition, allocated now in order, would all fit
        (a kernel sizes its buffers to what is contiguous, not only to what is free)."""
        saved = dict(self.live), self.cursor, self.peak
        try:
            for i, nbytes in enumerate(sizes):
                self.allocate(nbytes, f"probe{i}", align)
            return True
        except LimitExceededError:
            return False
        finally:
            self.live, self.cursor, self.peak = saved

    def _largest_gap(self) -> int:
        edges = sorted((o, o + s) for o, (s, _) in self.live.items())
        gaps, end = [], 0
        for start, stop in edges:
            gaps.append(start - end)
            end = max(end, stop)
        return max([*gaps, self.capacity - end])

    def free(self, offset: int) -> None:
        self.live.pop(offset, None)


@dataclass
class Scope:
    loop: int
    iteration: int
    kind: str
    source: str | None
    tiles: list
    placements: dict = field(default_factory=dict)  # manual placements per source line so far


class Trace:
    def __init__(self, name: str, core, *, dtype_style: str = "legacy",
                 tile_class: type[Tile] = Tile) -> None:
        self.builder = ProgramBuilder(name, core)
        # every instruction is checked as it is emitted (`emit_now`), at the user's line: the
        # simulator's planner does not check them again
        self.builder.program.checked = True
        self.tile_ids = 0  # tile names numbered per trace, so tracing twice gives equal programs
        self.tile_class = tile_class  # the API's tensor type (legacy Tile or current NkiTensor)
        self.core = self.builder.core
        self.dtype_style = dtype_style
        usable = self.core.sbuf_usable_bytes_per_partition
        self.sbuf = RingAllocator(Memory.SBUF, usable, core_name=self.core.name)
        self.psum = RingAllocator(Memory.PSUM, self.core.psum_bytes_per_partition,
                                  bank_bytes=self.core.psum_bank_bytes_per_partition,
                                  core_name=self.core.name)
        self.scopes: list[Scope] = []
        self._loop_placements: dict[tuple, tuple] = {}  # see loop_placement
        self.pending: Tile | None = None
        # PSUM tiles the compiler chose to hold a result in (not the kernel): an instruction that
        # may not read two PSUM inputs gets one of these staged to SBUF (`legalise.staged`)
        self.compiler_psum: set[str] = set()
        self.compiler_psum_allowed = True  # False: such results go to SBUF (`jit.trace_fitting_sbuf`)
        self.constants: dict[tuple, Tile] = {}  # tiles the compiler makes once per kernel
        # results kept for reuse (`trnsim.nki.invariant`) and how often each on-chip tile was
        # written (a result is reusable while its inputs' and its own counts stand)
        self.invariants: dict[tuple, tuple[Tile, int | None]] = {}
        self.write_versions: dict[str, int] = {}
        self.invariants_prune_at = 0  # when to drop results whose tiles were freed
        self.label: str | None = None
        self.source: str | None = None
        self.kernel_file: str | None = None  # the traced function's file (see `user_location`)
        self.exact_int = False  # see `exact_integers`
        self.hbm_tiles: dict[str, Tile] = {}
        self.program_ids: tuple[int, ...] = ()
        self.grid: tuple[int, ...] = ()
        # Output tensors are shared by every SPMD instance (and every core): the i-th output an
        # instance allocates is the i-th one the first instance allocated.
        self.shared_outputs: list[tuple[str, tuple[int, ...], DType]] = []
        self.output_cursor = 0
        self.written_inputs: set[str] = set()  # kernel arguments the kernel writes
        self._written_onchip: set[str] = set()  # SBUF/PSUM tiles some instruction has written
        self._warned: set[tuple] = set()
        # PSUM rectangles written, per tile (a dict as an ordered set: a kernel writes the
        # same rectangles of its rotating PSUM tiles over and over)
        self._psum_spans: dict[str, dict[tuple[int, int, int, int], None]] = {}
        # SBUF liveness (see `free_after_last_use`): per automatically allocated SBUF tile, in
        # allocation order, the last nl/nisa call whose instructions touched it (calls are
        # counted, not instructions: staging copies may differ between traces, calls do not)
        self.last_use: list[int] = []
        self.uses: list[list[int]] = []  # every call that touched it, per tile (for spilling)
        self._free_at: dict[int, list[Storage]] | None = None
        self._planned_last_use: list[int] = []
        self._sbuf_by_name: dict[str, int] = {}
        self.calls = 0
        self.spiller = None  # a `trnsim.nki.spill.Spiller` once `enable_spilling` was called
        # loop-body stamping (`trnsim.nki.stamp`): the events of the iteration being recorded,
        # and how often a lazily zeroed PSUM tile was settled (a change stamping cannot replay)
        self.stampable = True
        self.stamp_log: list | None = None
        # stamped instructions that passed `check`, as (`stamp_keys` number of the template
        # instruction without its names, iteration): equal ones skip it (`stamp._check_key`)
        self.stamp_checked: set = set()
        self.stamp_keys: dict = {}
        self.stamp_templates: dict = {}  # a stamped loop's last template (`trnsim.nki.stamp`)
        self.patterns = Patterns()  # operands by their fields, one object each (`isa.access.interned`)
        self.zero_claims = 0

    def enable_spilling(self, uses: list[list[int]]) -> None:
        """Spill resident SBUF tiles to HBM when an allocation does not fit, and reload them at
        their next use, as the compiler's allocator does (`trnsim.nki.spill`); `uses`: the calls
        that touch each tile, from a previous trace of the same kernel."""
        from trnsim.nki.spill import Spiller

        self.spiller = Spiller(self, uses)

    def free_after_last_use(self, last_use: list[int]) -> None:
        """Free each automatically allocated SBUF tile once the last nl/nisa call using it is
        done (`last_use` from a previous trace of the same kernel), as the compiler's
        liveness-based allocator does, instead of when its loop iteration ends."""
        self._free_at = {}
        self._planned_last_use = list(last_use)

    def begin_call(self) -> None:
        """A kernel's nl/nisa call starts: free the SBUF tiles whose last use was earlier (the
        simulator orders the reuse of their bytes by the dependencies)."""
        self.calls += 1
        if self.spiller is not None:
            self.spiller.new_call()
        if not self._free_at:
            return
        for call in [c for c in self._free_at if c < self.calls]:
            for storage in self._free_at.pop(call):
                if not storage.freed:
                    storage.freed = True
                    storage.freed_by = ("last use", call, self.source)
                    storage.free_callback()
                    for scope in self.scopes:
                        if storage in scope.tiles:
                            scope.tiles.remove(storage)

    # --- dtypes as users see them ---------------------------------------------------------------
    def user_dtype(self, dt: DType):
        if self.dtype_style == "legacy":
            if dt.name == "tfloat32":
                from trnsim.nki.language.dtypes import tfloat32
                return tfloat32
            return dt.np_dtype
        return dt.name

    # --- emission -------------------------------------------------------------------------------
    def emit(self, cls: type[Instruction], **fields) -> Instruction:
        """Build, check (errors point at the user's line) and append one instruction."""
        self.flush()
        return self.emit_now(cls, **fields)

    def emit_now(self, cls: type[Instruction], **fields) -> Instruction:
        if self.exact_int and "exact_int" in getattr(cls, "__dataclass_fields__", ()):
            fields.setdefault("exact_int", True)
        instruction = built(cls, self.source, self.label or "", fields)
        steps = legalise.staged(self, instruction, fields)
        if steps is None:
            instruction.check(self.core)
            self.note_accesses(instruction)
            self.builder.emit(instruction)
            return instruction
        for step in steps:  # the compiler's staging copies around the instruction
            step.check(self.core)
            self.note_accesses(step)
            self.builder.emit(step)
        return next(s for s in steps if type(s) is type(instruction) and s.label == instruction.label)

    def defer(self, shape: tuple[int, ...], dtype, emit: Callable[[Tile, bool], None], *,
              buffer: str = "sbuf", fallback: str | None = None,
              tags: tuple = (), matmul: bool = False) -> Tile:
        """Return a pending tile whose instruction is emitted once its destination is known
        (`fallback`: the buffer to use when `buffer` is a PSUM the tile does not fit in now)."""
        self.flush()
        tile = self.tile_class(self, None, _shared_axes(tuple(shape), None), as_dtype(dtype),
                    pending=Pending(emit=emit, buffer=buffer, fallback=fallback, tags=tuple(tags),
                                    matmul=matmul),
                    name=f"{_label_stem(self.label)}_{self._new_tile_id()}")
        tile._pending_source, tile._pending_label = self.source, self.label
        self.pending = tile
        return tile

    def flush(self) -> None:
        if self.pending is not None:
            self.materialise(self.pending)

    def materialise(self, tile: Tile) -> None:
        if tile._pending is None:
            return
        buffer = tile._pending.buffer
        if buffer == "psum" and tile._pending.fallback is not None:
            free = prod(tile.shape[1:]) if len(tile.shape) > 1 else 1
            if not self.psum.fits([free * as_dtype(tile.dtype_spec).itemsize]):
                buffer = tile._pending.fallback
        dst = self.allocate(tile.shape, tile.dtype_spec, buffer, name=tile.name)
        if buffer == "psum" and tile._pending.fallback is not None:
            self.compiler_psum.add(dst._storage.name)
            self._track_sbuf(dst._storage)  # freed after its last use, as SBUF tiles are
        self._place(tile, dst)

    def _place(self, tile: Tile, dst: Tile) -> bool:
        """Emit a pending result into dst; False if its mask selected nothing (not emitted)."""
        pending = tile._pending
        if self.pending is tile:
            self.pending = None
        label, source = self.label, self.source
        self.label = tile._pending_label or label
        self.source = tile._pending_source or source
        emitted = True
        try:
            pending.emit(dst, pending.accumulate)
        except MaskedOut:
            emitted = False
        finally:
            self.label, self.source = label, source
        tile._become(dst)
        return emitted

    def note_accesses(self, instruction: Instruction) -> None:
        """Record an emitted instruction's accesses. Warn (once per line and tile) where the
        kernel reads on-chip memory nothing has written, or accumulates into PSUM nothing has
        written: undefined in the NKI docs, NaN here, as AWS's simulator warns."""
        inner = getattr(instruction, "inner", instruction)
        accumulating = getattr(inner, "accumulate", False) and getattr(inner, "dst", None)
        written = inner.writes()  # a destination listed as read keeps what it does not write
        reads = inner.reads()
        onchip, by_name = self._written_onchip, self._sbuf_by_name
        # one pass over the operands for both the tracked tiles they use (`_serials`) and the
        # reads of unwritten tiles (the cheap tests first: most operands are HBM or written)
        serials, unwritten = [], []
        for ap in reads:
            if ap.memory is not HBM:
                tensor = ap.tensor
                if tensor and tensor not in onchip and ap not in written:
                    unwritten.append((ap, "reads"))
                serial = by_name.get(tensor)
                if serial is not None:
                    serials.append(serial)
        for ap in written:
            if ap.memory is not HBM:
                serial = by_name.get(ap.tensor)
                if serial is not None:
                    serials.append(serial)
        if accumulating and not (accumulating.memory is HBM or not accumulating.tensor
                                 or accumulating.tensor in onchip):
            unwritten.append((accumulating, "accumulates into"))
        for ap, what in unwritten:
            key = (instruction.source, ap.tensor)
            if key not in self._warned:
                self._warned.add(key)
                warnings.warn(UndefinedBehaviourWarning(
                    f"{instruction.source or self.builder.program.name}: {instruction.name} {what} "
                    f"{ap.memory} tile {ap.tensor!r} before anything wrote it (undefined behaviour; "
                    f"the simulated values are NaN)"), stacklevel=2)
        self.note_emitted(tuple(serials), written)

    def note_emitted(self, serials: tuple[int, ...], written) -> None:
        """Record an emitted instruction's uses of the tracked tiles `serials` and its writes
        `written`: all `trnsim.nki.stamp` replays for a stamped instruction (the same tiles as
        the traced iterations', which gave any warning)."""
        if self.stamp_log is not None:
            self.stamp_log.append(("i", self.calls))
        if serials:
            calls, last_use, uses = self.calls, self.last_use, self.uses  # (`note_serials`)
            for serial in serials:
                last_use[serial] = calls
                used = uses[serial]
                if not used or used[-1] != calls:
                    used.append(calls)
        versions = self.write_versions
        for ap in written:
            memory = ap.memory
            if memory is not HBM:
                tensor = ap.tensor
                self._written_onchip.add(tensor)
                versions[tensor] = versions.get(tensor, 0) + 1
                if memory is PSUM:
                    spans = self._psum_spans.get(tensor)
                    if spans is None:
                        spans = self._psum_spans[tensor] = {}
                    low, high = ap._span or ap.byte_span()  # (`_span`, inline)
                    start = ap.partition_start
                    spans[(start, start + ap.partitions, low, high)] = None

    def note_uses(self, aps) -> None:
        """Record the current call as the latest use of the tracked tiles of these operands (also
        where a call reads a tile without an instruction: a reused result, `trnsim.nki.invariant`;
        the tile must stay alive while the kernel names it)."""
        self.note_used(self._serials(aps))

    def note_used(self, serials: tuple[int, ...]) -> None:
        """`note_uses` of the tracked tiles `serials` (as `trnsim.nki.stamp` records it)."""
        if self.stamp_log is not None:
            self.stamp_log.append(("u", self.calls, serials))
        self.note_serials(serials)

    def _serials(self, aps) -> tuple[int, ...]:
        by_name = self._sbuf_by_name
        return tuple(serial for ap in aps if ap.memory is not HBM
                     and (serial := by_name.get(ap.tensor)) is not None)

    def _new_tile_id(self) -> int:
        """The next number of an unnamed tile (`tile_ids` counts them; stamping advances it)."""
        number = self.tile_ids
        self.tile_ids = number + 1
        return number

    def note_serials(self, serials: tuple[int, ...]) -> None:
        """The current call uses the tracked tiles numbered `serials`."""
        calls = self.calls
        for serial in serials:
            self.last_use[serial] = calls
            uses = self.uses[serial]
            if not uses or uses[-1] != calls:
                uses.append(calls)

    def psum_written(self, tile: Tile) -> bool:
        """Has any instruction written bytes of this PSUM view? (`psum += matmul` into bytes
        nothing wrote starts an accumulation group: the compiler's inferred accumulate flag,
        "first write overwrites, subsequent writes accumulate".)"""
        ap = tile.access()
        span = _span(ap)
        written = self._psum_spans.get(ap.tensor, {})
        if span in written and _overlap(span, span):  # the common case: the same rectangle again
            return True
        return any(_overlap(span, other) for other in written)

    # --- assignment -----------------------------------------------------------------------------
    def assign(self, dst: Tile, value) -> None:
        """dst[...] = value: place a pending result there, else copy / store / fill."""
        self.check_alive(dst)
        self._check_writable(dst)
        if isinstance(value, Tile) and value.is_pending:
            if value.shape != dst.shape and prod(value.shape) != prod(dst.shape):
                raise InvalidArgumentError(f"cannot assign a {list(value.shape)} result to a "
                                           f"{list(dst.shape)} view")
            self._mark_written(dst)
            self._place(value, dst)
            return
        from trnsim.nki.language import memory as nl_memory

        self._mark_written(dst)
        if isinstance(value, Tile):
            nl_memory.copy_into(dst, value)
        elif isinstance(value, (int, float, np.number, bool)):
            nl_memory.fill(dst, float(value))
        elif isinstance(value, np.ndarray):
            raise InvalidArgumentError("assigning a numpy array inside a kernel is not supported; "
                                       "load it from an HBM tensor or use nl.shared_constant")
        else:
            raise InvalidArgumentError(f"cannot assign {type(value).__name__} to a tile")

    def accumulate(self, dst: Tile, value) -> None:
        """dst += value: matmuls accumulate in PSUM; anything else is an add into dst."""
        self.check_alive(dst)
        if isinstance(value, Tile) and value.is_pending and value._pending.matmul:
            if dst.buffer != "psum":
                raise InvalidArgumentError("matmul results accumulate in PSUM: `+=` a matmul into a "
                                           f"{dst.buffer} tile is not supported")
            zeros = list(dst._storage.zero_ranges)
            value._pending.accumulate = (self._claim_zeros(dst) != "fresh"
                                         and self.psum_written(dst))
            if not self._place(value, dst):
                dst._storage.zero_ranges = zeros  # masked out: nothing was written
            return
        from trnsim.nki.language import elementwise

        self.assign(dst, elementwise.binary("add", dst, value))

    def _mark_written(self, dst: Tile) -> None:
        self._claim_zeros(dst)

    def _claim_zeros(self, tile: Tile, *, reading: bool = False) -> str:
        """Settle a lazily zeroed PSUM tile before `tile` touches it.

        "fresh": the access covers only never-written bytes, exactly (a matmul may overwrite);
        "zeroed": some never-written bytes were memset now; "none": nothing was pending.
        """
        storage = tile._storage
        if storage is None or not storage.zero_ranges:
            return "none"
        ap = tile.access()
        lo, hi = ap.byte_span()
        pieces = [(max(a, lo), min(b, hi)) for a, b in storage.zero_ranges if a < hi and lo < b]
        if not pieces:
            return "none"
        exact = (not reading and sum(b - a for a, b in pieces) == hi - lo and ap.is_contiguous
                 and ap.partitions == storage.partitions)
        remaining = []
        for a, b in storage.zero_ranges:
            remaining += [(a, min(b, lo))] if a < lo else []
            remaining += [(max(a, hi), b)] if b > hi else []
        storage.zero_ranges = [(a, b) for a, b in remaining if b > a]
        self.zero_claims += 1
        if exact:
            return "fresh"
        from trnsim.nki.language import memory as nl_memory

        item = storage.dtype.itemsize
        for a, b in pieces:
            piece = Tile(self, storage, (Axis(storage.partitions, 1, 0), Axis((b - a) // item, 0, 1)),
                         storage.dtype, foffset=(a - storage.offset) // item, name=storage.name)
            nl_memory.fill(piece, 0.0)
        return "zeroed"

    def _check_writable(self, dst: Tile) -> None:
        """Kernels may write their HBM arguments (the legacy tests' style: results land in an
        argument array); the run copies such inputs back to the caller's arrays."""
        if dst._storage is not None and dst._storage.is_input:
            self.written_inputs.add(dst._storage.name)

    def read_ready(self, tile: Tile) -> Tile:
        """Prepare a tile for reading: place pending results, zero-fill untouched PSUM zeros."""
        tile.placed()
        self.check_alive(tile)
        self._claim_zeros(tile, reading=True)
        return tile

    # --- allocation -----------------------------------------------------------------------------
    def allocate(self, shape: tuple[int, ...], dtype, buffer: str, *, name: str = "",
                 par_axis: int = 0, offset: int | None = None, wrap: tuple[int, ...] = (),
                 block_strides: tuple[int, ...] | None = None) -> Tile:
        """An on-chip tile (or HBM tensor). `wrap`: per leading block axis, the physical blocks
        a modulo allocation keeps (logical block i in physical block i % n). `block_strides`:
        bytes between consecutive blocks along each leading block axis, where an allocation
        function spread them out (None: packed one after another)."""
        dt = as_dtype(dtype)
        name = name or f"t{self._new_tile_id()}"
        if buffer in ("hbm", "shared_hbm", "private_hbm"):
            return self.hbm_tensor(name, shape, dt, kind="output" if buffer == "shared_hbm" else "internal",
                                   buffer=buffer)
        memory = PSUM if buffer == "psum" else SBUF
        if not shape:
            shape = (1,)
        partitions = shape[par_axis]
        if partitions > self.core.partitions:
            raise LimitExceededError(f"partition dimension of tile {name!r}", partitions,
                                     self.core.partitions, context=self.core.name)
        if wrap:
            wrap = tuple(min(int(n), s) for n, s in zip(wrap, shape[:par_axis], strict=False))
            physical = tuple(wrap) + tuple(shape[len(wrap):])
        else:
            physical = tuple(shape)
        free = [s for i, s in enumerate(physical) if i != par_axis]
        nbytes = prod(free) * dt.itemsize if free else dt.itemsize
        if block_strides is not None:
            if any(stride % dt.itemsize for stride in block_strides):
                raise UnsupportedError(f"tile {name!r}: blocks {list(block_strides)} bytes apart "
                                       f"are not whole {dt.name} elements apart")
            nbytes = prod(free[par_axis:]) * dt.itemsize + sum(
                (n - 1) * stride for n, stride in zip(physical[:par_axis], block_strides,
                                                      strict=True))
        placed = offset is not None
        if offset is not None:
            ring = self.psum if memory is PSUM else self.sbuf
            ring.live[offset] = (nbytes, name)
            if offset + nbytes > ring.capacity:
                raise LimitExceededError(f"{memory} tile {name!r} at offset {offset} ends at",
                                         offset + nbytes, ring.capacity, context=self.core.name)
        elif memory is PSUM:
            offset = self.psum.allocate(nbytes, name, align=max(4, dt.itemsize))
        elif self.spiller is not None and name != legalise.STAGING:
            offset = self.spiller.allocate(nbytes, name, align=max(4, dt.itemsize))
        else:
            offset = self.sbuf.allocate(nbytes, name, align=max(4, dt.itemsize))
        storage = Storage(memory=memory, dtype=dt, name=name, buffer=buffer, offset=offset,
                          partitions=partitions, bytes_per_partition=nbytes,
                          scope=self._scope_key(), source=self.source)
        ring = self.psum if memory is PSUM else self.sbuf
        storage.free_callback = lambda: ring.free(offset)
        if memory is SBUF and self.spiller is not None:
            storage.free_callback = lambda: self._free_sbuf(storage)
        if memory is SBUF and not placed and name != legalise.STAGING:
            self._track_sbuf(storage)  # (staging copies depend on addresses: not counted)
        if self.scopes:
            self.scopes[-1].tiles.append(storage)
        self.builder.program.sbuf_peak_bytes_per_partition = self.sbuf.peak
        self.builder.program.psum_peak_bytes_per_partition = self.psum.peak
        axes = _shared_axes(physical, par_axis)
        if block_strides is not None:
            axes = tuple(replace(a, fstep=block_strides[i] // dt.itemsize) if i < par_axis else a
                         for i, a in enumerate(axes))
        if wrap:  # logical sizes, physical strides
            axes = tuple(Axis(size, a.pstep, a.fstep, a.tag,
                              wrap[i] if i < len(wrap) and wrap[i] < size else 0)
                         for i, (a, size) in enumerate(zip(axes, shape, strict=True)))
        return self.tile_class(self, storage, axes, dt, name=name)

    def _free_sbuf(self, storage: Storage) -> None:
        """Free a tile's SBUF bytes where it now lives (a reload may have moved it; a spilled
        tile holds none)."""
        self.spiller.forget(storage)
        if not storage.spilled:
            self.sbuf.free(storage.offset)

    def _track_sbuf(self, storage: Storage) -> None:
        serial = len(self.last_use)
        self.last_use.append(-1)
        self.uses.append([])
        self._sbuf_by_name[storage.name] = serial
        if self.spiller is not None and storage.memory is Memory.SBUF:
            self.spiller.track(storage, serial)
        if self._free_at is not None and serial < len(self._planned_last_use):
            last = self._planned_last_use[serial]
            if last >= self.calls:  # (never used: -1, freed with its scope)
                self._free_at.setdefault(last, []).append(storage)

    def release(self, tile: Tile) -> None:
        """Free a compiler temporary now (it never outlives the instruction sequence using it)."""
        storage = tile._storage
        if storage is not None and not storage.freed:
            storage.freed = True
            storage.freed_by = ("temporary", 0, None)
            storage.free_callback()
            if self.scopes and storage in self.scopes[-1].tiles:
                self.scopes[-1].tiles.remove(storage)

    def full_view(self, storage: Storage) -> Tile:
        free = storage.bytes_per_partition // storage.dtype.itemsize
        return self.tile_class(self, storage, (Axis(storage.partitions, 1, 0), Axis(free, 0, 1)),
                               storage.dtype, name=storage.name)

    def hbm_tensor(self, name: str, shape: tuple[int, ...], dtype, *, kind: str,
                   buffer: str = "shared_hbm", data=None) -> Tile:
        dt = as_dtype(dtype)
        if kind == "output":
            return self._shared_output(name, tuple(shape), dt, buffer)
        return self._new_hbm_tensor(name, shape, dt, kind=kind, buffer=buffer, data=data)

    def _shared_output(self, name: str, shape: tuple[int, ...], dt: DType, buffer: str) -> Tile:
        cursor = self.output_cursor
        self.output_cursor += 1
        if cursor >= len(self.shared_outputs):
            tile = self._new_hbm_tensor(name, shape, dt, kind="output", buffer=buffer)
            self.shared_outputs.append((tile._storage.name, shape, dt))
            return tile
        known, known_shape, known_dtype = self.shared_outputs[cursor]
        if (known_shape, known_dtype) != (shape, dt):
            raise InvalidArgumentError(
                f"SPMD instances must allocate the same outputs: output {cursor} is "
                f"{known_dtype.name}{list(known_shape)} in the first instance, {dt.name}{list(shape)} here")
        if known in self.hbm_tiles:
            return self.hbm_tiles[known]
        return self._new_hbm_tensor(known, shape, dt, kind="output", buffer=buffer)

    def _new_hbm_tensor(self, name: str, shape, dt: DType, *, kind: str, buffer: str,
                        data=None) -> Tile:
        base, i = name, 1
        while name in self.builder.program.tensors:
            name, i = f"{base}_{i}", i + 1
        self.builder.tensor(name, tuple(shape), dt, kind, data=data)
        storage = Storage(memory=Memory.HBM, dtype=dt, name=name, buffer=buffer,
                          is_input=kind == "input", source=self.source)
        tile = self.tile_class(self, storage, _hbm_axes(tuple(shape)), dt, name=name)
        self.hbm_tiles[name] = tile
        return tile

    # --- loop scopes ----------------------------------------------------------------------------
    def loop_placement(self, placed: tuple) -> tuple:
        """Where a manual placement (ncc.*.mod_alloc / alloc) made inside a loop body puts its
        tile. NKI traces an affine / sequential loop's body once, with a symbolic index, so
        Python arithmetic in the body (a running `cur_addr += ...`) runs once and every
        iteration's tile sits where that one trace put it; trnsim runs the body per iteration,
        so each placement takes what the first iteration computed at the same line and
        occurrence."""
        if not self.scopes:
            return placed
        scope = self.scopes[-1]
        occurrence = scope.placements.get(self.source, 0)
        scope.placements[self.source] = occurrence + 1
        key = (tuple(s.source for s in self.scopes), self.source, occurrence)
        return self._loop_placements.setdefault(key, placed)

    def _scope_key(self) -> tuple:
        return tuple((s.loop, s.iteration) for s in self.scopes)

    def enter(self, loop: int, iteration: int, kind: str, source: str | None) -> None:
        self.flush()  # a result pending from before the loop belongs to the enclosing scope
        self.scopes.append(Scope(loop, iteration, kind, source, []))

    def exit(self) -> None:
        self.flush()
        scope = self.scopes.pop()
        for storage in scope.tiles:
            storage.freed = True
            storage.free_callback()
            storage.freed_by = (scope.kind, scope.iteration, scope.source)

    def check_alive(self, tile: Tile) -> None:
        storage = tile._storage
        if storage is not None and storage.freed:
            kind, iteration, source = storage.freed_by
            raise InvalidArgumentError(
                f"tile {storage.name!r} was allocated in iteration {iteration} of the {kind} at "
                f"{source}; its buffer was freed when that iteration ended, so it cannot be used "
                f"here (allocate it outside the loop to keep it)")


# axes of tiles by (shape, partition axis or None for a pending result's sizes only), shared
_SHARED_AXES: dict[tuple, tuple[Axis, ...]] = {}
_SHARED_AXES_LIMIT = 4096  # shapes kept: a bound on memory, not on correctness


def _shared_axes(shape: tuple[int, ...], par_axis: int | None) -> tuple[Axis, ...]:
    """A new tile's axes. Axes are immutable, so tiles of one shape of plain ints share them: a
    kernel allocates tiles, and defers a result per call, of a few shapes over and over (a
    numpy integer size is kept as given, never swapped for an equal int)."""
    if not all(type(s) is int for s in shape):
        return _new_axes(shape, par_axis)
    key = (shape, par_axis)
    axes = _SHARED_AXES.get(key)
    if axes is None:
        axes = _new_axes(shape, par_axis)
        if len(_SHARED_AXES) < _SHARED_AXES_LIMIT:
            _SHARED_AXES[key] = axes
    return axes


def _new_axes(shape: tuple[int, ...], par_axis: int | None) -> tuple[Axis, ...]:
    return tuple(Axis(s) for s in shape) if par_axis is None else _dense_axes(shape, par_axis)


@lru_cache(maxsize=1024)
def _label_stem(label: str | None) -> str:
    """The last dotted part of a call's label, naming the tiles its results get (a trace defers
    a result per call and its labels repeat)."""
    return (label or "tile").split(".")[-1]


def _dense_axes(shape: tuple[int, ...], par_axis: int) -> tuple[Axis, ...]:
    free_sizes = [s for i, s in enumerate(shape) if i != par_axis]
    steps, step = [], 1
    for size in reversed(free_sizes):
        steps.append(step)
        step *= size
    steps.reverse()
    axes, k = [], 0
    for i, size in enumerate(shape):
        if i == par_axis:
            axes.append(Axis(size, 1, 0))
        else:
            axes.append(Axis(size, 0, steps[k]))
            k += 1
    return tuple(axes)


def _hbm_axes(shape: tuple[int, ...]) -> tuple[Axis, ...]:
    axes, step = [], 1
    for size in reversed(shape):
        axes.append(Axis(size, 0, step))
        step *= size
    return tuple(reversed(axes))


def _span(ap) -> tuple[int, int, int, int]:
    p0, p1 = ap.partition_range()
    lo, hi = ap.byte_span()
    return p0, p1, lo, hi


def _overlap(a: tuple, b: tuple) -> bool:
    return a[0] < b[1] and b[0] < a[1] and a[2] < b[3] and b[2] < a[3]
