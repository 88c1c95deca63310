"""`Profile`: what a run took, one record per instruction plus a summary.

Records are kept as numpy columns (start, end, done, stream, ...) so a 100,000-instruction run
costs a few MB; `records` builds `InstructionRecord` objects (with operand descriptions and the
user's source line) only when asked. Times are ns from the start of the run:

- ``start_ns``: the instruction starts (for DMA: is triggered; data moves ``start_latency_ns``
  later);
- ``end_ns``: its stream is free again (the issue interval; for DMA: the last byte landed);
- ``done_ns``: its results are visible to dependent instructions (start + latency).

The summary (`ProfileSummary`) gives total latency, per-stream and per-engine active time and
utilisation, where idle time went (what each stream waited on), TensorE FLOP utilisation
against the core's peak for the dominant matmul precision (AWS's "hardware FLOPs utilisation"),
DMA and HBM bytes and bandwidth, and SBUF/PSUM peak use.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, field
from functools import cached_property

import numpy as np

from trnsim.sim.engines import CAUSE_NAMES, DMA_BASE, engine_name, stream_name

_PLAN_COLUMNS = ("flops", "nbytes", "hbm_read", "hbm_write")  # integer figures of each plan


@dataclass(frozen=True)
class InstructionRecord:
    index: int
    opcode: str
    label: str
    engine: str  # "tensor", "vector", "scalar", "gpsimd", "sync", "dma"
    stream: str  # the track: "tensor.load", "tensor", ..., "dma.q3"
    queue: int | None  # DMA queue, None for engines
    start_ns: float
    end_ns: float
    done_ns: float
    operands: tuple[str, ...]  # written operands first, then read ones (AccessPattern.describe())
    bytes: int  # DMA: bytes moved; engines: bytes read + written
    flops: int
    source: str | None
    waited_on: str  # what set its start: a producer's engine, "in order", "tensor pipeline", ...
    pc: int | None = None  # the program's instruction index (differs from index under loops)

    @property
    def busy_ns(self) -> float:
        return self.end_ns - self.start_ns


@dataclass(frozen=True)
class StreamSummary:
    name: str
    engine: str
    instructions: int
    active_ns: float
    utilisation: float  # active / total latency
    waiting_ns: dict[str, float]  # idle before an instruction, by what it waited on
    idle_after_ns: float  # from the stream's last instruction to the end of the run


@dataclass(frozen=True)
class ProfileSummary:
    core: str
    total_ns: float
    instructions: int
    streams: dict[str, StreamSummary]
    engine_active_ns: dict[str, float]  # union of an engine's streams' busy intervals
    engine_utilisation: dict[str, float]
    tensor_flops: int
    tensor_precision: str | None  # the matmul precision with the most FLOPs
    tensor_peak_flops: float | None  # FLOP/s of the core for that precision
    tensor_flops_utilisation: float  # FLOPs / (total time x peak)
    dma_bytes: int
    dma_transfers: int
    dma_bytes_per_s: float  # over the whole run
    dma_active_ns: float  # time any DMA was in flight (trigger to last byte)
    dma_active_bytes_per_s: float  # while any DMA was in flight
    hbm_read_bytes: int
    hbm_write_bytes: int
    hbm_bytes_per_s: float
    sbuf_peak_bytes_per_partition: int
    sbuf_bytes_per_partition: int
    psum_peak_bytes_per_partition: int
    psum_bytes_per_partition: int
    flops_by_precision: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def _gathered(name: str) -> cached_property:
    """`Profile`'s per-record column `name`: each record's plan's figure, gathered when read."""
    return cached_property(lambda profile: profile._plan_columns[name][profile._uids])


class Profile:
    """The timeline of one core's run. Built by `trnsim.sim.simulate`."""

    def __init__(self, *, program, core, chip, core_index: int, mode: str, scheduler) -> None:
        self.program = program
        self.core = core
        self.chip = chip
        self.core_index = core_index
        self.mode = mode
        # the compiled loop leaves arrays (a 5.5M-instruction run: 44 MB each), taken as they
        # are: nothing writes a record after its run, and a copy's fresh pages cost ~0.2 s each
        self.start_ns = np.asarray(scheduler.starts, dtype=np.float64)
        self.end_ns = np.asarray(scheduler.ends, dtype=np.float64)
        self.done_ns = np.asarray(scheduler.dones, dtype=np.float64)
        self.stream = np.asarray(scheduler.codes, dtype=np.int32)
        self.cause = np.asarray(scheduler.causes, dtype=np.int32)
        # how each DMA's data moved: pieces at a constant rate (the share of the DMA engines it
        # held between its start latency and its last byte): the record of each piece, and its
        # (start, end, share of the record's bytes)
        self.moved_record = np.frombuffer(scheduler.moved_record, dtype=np.int64)
        self.moved_pieces = np.frombuffer(scheduler.moved_times, dtype=np.float64).reshape(-1, 3)
        # programs with control flow: record i ran instruction pcs[i] (concrete: resolved operands)
        self.pcs = np.array(scheduler.pcs, dtype=np.int64) if scheduler.pcs is not None else None
        self.concrete = scheduler.concrete
        # per-instruction figures: each record's plan id, and each distinct plan's figures (the
        # per-record columns are gathered from them when first read: see `_gathered`)
        planner = scheduler.planner
        distinct = planner.distinct
        self._uids = uids = np.asarray(scheduler.uids, dtype=np.int64)
        self._plan_columns = {name: planner.column(name) for name in _PLAN_COLUMNS}
        counts = np.bincount(uids, minlength=len(distinct)) if len(uids) else np.zeros(0, np.int64)
        self._runs = counts  # how many records ran each distinct plan
        by_precision: dict[str, int] = defaultdict(int)
        for uid in np.flatnonzero(self._plan_columns["flops"][:len(counts)]
                                  * counts[:len(distinct)]):
            plan = distinct[uid]
            by_precision[plan.precision or "fp32"] += plan.flops * int(counts[uid])
        self.flops_by_precision = dict(by_precision)
        regions = scheduler.regions
        self.sbuf_peak_bytes_per_partition = (program.sbuf_peak_bytes_per_partition
                                              or regions.sbuf.max_column)
        self.psum_peak_bytes_per_partition = (program.psum_peak_bytes_per_partition
                                              or regions.psum.max_column)

    def __len__(self) -> int:
        return len(self.start_ns)

    # --- per-record figures of the plans (gathered when read: a loaded run's profiles, whose
    # totals alone are read, never gather them; a 5.5M-record column is 44 MB) ---------------
    flops = _gathered("flops")
    nbytes = _gathered("nbytes")  # DMA: bytes moved; engines: bytes read + written
    hbm_read = _gathered("hbm_read")
    hbm_write = _gathered("hbm_write")

    def column(self, name: str, records: np.ndarray) -> np.ndarray:
        """Per-record column `name` (flops, nbytes, hbm_read, hbm_write) at `records` (a mask
        or indices), gathered from the plans' figures, not from the whole column."""
        if "_plan_columns" not in self.__dict__:  # a profile made from its columns alone
            return getattr(self, name)[records]
        return self._plan_columns[name][self._uids[records]]

    def total(self, name: str, records: np.ndarray | None = None) -> int:
        """The sum of per-record column `name` over the run, or over `records`: each distinct
        plan's figure times the records that ran it (integers: exactly the column's sum)."""
        if records is not None or "_plan_columns" not in self.__dict__:
            return int(self.column(name, slice(None) if records is None else records).sum())
        counts = self._runs
        return int(self._plan_columns[name][:len(counts)] @ counts)

    def __repr__(self) -> str:
        return (f"Profile({self.program.name!r} on {self.core.name} core {self.core_index}: "
                f"{len(self)} instructions, {self.total_ns:,.0f} ns)")

    @property
    def total_ns(self) -> float:
        """Latency of the run: when the last result became visible."""
        return float(self.done_ns.max()) if len(self) else 0.0

    # --- records -------------------------------------------------------------------------------
    def record(self, index: int) -> InstructionRecord:
        pc = int(self.pcs[index]) if self.pcs is not None else index
        ins = self.concrete.get(index) or self.program.instructions[pc]
        code = int(self.stream[index])
        cause = int(self.cause[index])
        operands = tuple(ap.describe() for ap in (*ins.writes(), *ins.reads()))
        return InstructionRecord(
            index=index, opcode=ins.OPCODE, label=ins.label, engine=engine_name(code),
            stream=stream_name(code), queue=code - DMA_BASE if code >= DMA_BASE else None,
            start_ns=float(self.start_ns[index]), end_ns=float(self.end_ns[index]),
            done_ns=float(self.done_ns[index]), operands=operands, bytes=int(self.nbytes[index]),
            flops=int(self.flops[index]), source=ins.source, waited_on=_cause_name(cause), pc=pc)

    @property
    def records(self) -> list[InstructionRecord]:
        return [self.record(i) for i in range(len(self))]

    # --- summary -------------------------------------------------------------------------------
    @cached_property
    def summary(self) -> ProfileSummary:
        return summarise(self)

    @cached_property
    def stream_records(self) -> dict[int, np.ndarray]:
        """Each stream's record indices in record order, by stream code (in code order): one
        stable sort of the codes, not a pass over every record for each of the ~20 streams."""
        return indices_by_code(self.stream)

    def busy_intervals(self, codes) -> tuple[np.ndarray, np.ndarray]:
        """The union of the busy intervals [start, end) of the records of streams `codes`, as
        sorted disjoint (starts, ends), kept for the summary and the report to share. Several
        streams' union is merged from each stream's: a union of unions has the same segments,
        end points and all, when no interval ends before it starts."""
        codes = tuple(c for c in sorted(set(codes)) if c in self.stream_records)
        if codes not in self._busy:
            if len(codes) == 1:
                index = self.stream_records[codes[0]]
                return self.stream_busy(codes[0], self.start_ns[index], self.end_ns[index])
            if len(codes) > 1 and self._ordered:
                parts = [self.busy_intervals((c,)) for c in codes]
                starts = np.concatenate([part[0] for part in parts])
                ends = np.concatenate([part[1] for part in parts])
            else:
                index = np.sort(np.concatenate([np.zeros(0, np.int64),
                                                *(self.stream_records[c] for c in codes)]))
                starts, ends = self.start_ns[index], self.end_ns[index]
            self._busy[codes] = merged_intervals(starts, ends)
        return self._busy[codes]

    def stream_busy(self, code: int, starts: np.ndarray, ends: np.ndarray,
                    reach: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """`busy_intervals((code,))` from the stream's starts and ends in record order (and
        their running maximum of ends, `reach`), which the summary has gathered already."""
        if (code,) not in self._busy:
            self._busy[(code,)] = merged_intervals(starts, ends, reach)
        return self._busy[(code,)]

    @cached_property
    def _busy(self) -> dict:
        """`busy_intervals` by their stream codes."""
        return {}

    @cached_property
    def _ordered(self) -> bool:
        """No record ends before it starts."""
        return bool(np.all(self.end_ns >= self.start_ns))

    def summary_table(self, width: int = 110) -> str:
        from trnsim.sim.report import summary_table

        return summary_table(self, width)

    def to_dict(self, *, records: bool = False) -> dict:
        """JSON-ready summary (and, with records=True, every instruction record)."""
        out = {"program": self.program.name, "core": self.core.name, "core_index": self.core_index,
               "chip": self.chip.name, "mode": self.mode, "summary": self.summary.to_dict()}
        if records:
            out["records"] = [asdict(r) for r in self.records]
        return out

    def to_perfetto(self, path) -> None:
        """Write a Chrome trace-event JSON file (open it in https://ui.perfetto.dev)."""
        from trnsim.sim.perfetto import write_trace

        write_trace([self], path)


def _cause_name(cause: int) -> str:
    return engine_name(cause) if cause >= 0 else CAUSE_NAMES.get(cause, "unknown")


def merged_intervals(starts: np.ndarray, ends: np.ndarray,
                     reach: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals [starts[i], ends[i]) as sorted disjoint (starts, ends). Intervals
    already in order of start (an in-order stream's) are not sorted again (a stable sort would
    leave them as they are); `reach`: `np.maximum.accumulate(ends)`, if the caller has it."""
    if len(starts) == 0:
        return np.zeros(0), np.zeros(0)
    in_order = bool(np.all(starts[1:] >= starts[:-1]))
    if in_order:
        s, e = starts, ends
        reach = np.maximum.accumulate(e) if reach is None else reach
    else:
        order = np.argsort(starts, kind="stable")
        s, e = starts[order], ends[order]
        reach = np.maximum.accumulate(e)
    opens = np.empty(len(s), dtype=bool)
    opens[0] = True
    np.greater(s[1:], reach[:-1], out=opens[1:])
    first = np.flatnonzero(opens)
    if in_order and np.all(e >= s):
        # a segment's largest end is the running maximum at its last interval: each segment
        # opens past every earlier end, and its first interval ends no earlier than it starts
        return s[first], reach[np.append(first[1:], len(s)) - 1]
    return s[first], np.maximum.reduceat(e, first)


def union_length(starts: np.ndarray, ends: np.ndarray) -> float:
    """Total length of the union of intervals [starts[i], ends[i])."""
    return merged_length(merged_intervals(starts, ends))


def merged_length(intervals: tuple[np.ndarray, np.ndarray]) -> float:
    """Total length of sorted disjoint intervals (`merged_intervals`' result)."""
    starts, ends = intervals
    return float(np.sum(ends - starts))


def wait_gaps(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Idle time of an in-order stream before each of its instructions (in program order):
    from when everything before it had finished to its start."""
    return _gaps(starts, np.maximum.accumulate(ends))


def _gaps(starts: np.ndarray, reach: np.ndarray) -> np.ndarray:
    """`wait_gaps` from the running maximum of the ends (`reach`): start - (0, reach[:-1]),
    clipped at 0, computed in place."""
    gaps = np.empty(len(starts))
    if len(starts):
        np.subtract(starts[:1], 0.0, out=gaps[:1], dtype=np.float64)
        np.subtract(starts[1:], reach[:-1], out=gaps[1:], dtype=np.float64)
    return np.clip(gaps, 0.0, None, out=gaps)


def indices_by_code(codes: np.ndarray) -> dict[int, np.ndarray]:
    """`{code: np.flatnonzero(codes == code)}` for each code present, in code order (stream or
    cause codes: small integers, grouped by one stable radix sort)."""
    if not len(codes):
        return {}
    small = codes.astype(np.int16) if codes.min() >= -2**15 and codes.max() < 2**15 else codes
    order = np.argsort(small, kind="stable")  # a radix sort for 16-bit integers
    ordered = codes[order]
    heads = np.flatnonzero(np.concatenate([[True], ordered[1:] != ordered[:-1]]))
    tails = np.append(heads[1:], len(order))
    return {int(ordered[h]): order[h:t] for h, t in zip(heads.tolist(), tails.tolist(),
                                                       strict=True)}


def _stream_summary(profile: Profile, code: int, total: float) -> StreamSummary:
    index = profile.stream_records[code]
    starts, ends = profile.start_ns[index], profile.end_ns[index]
    reach = np.maximum.accumulate(ends)  # shared by the waits and the busy union
    gaps = _gaps(starts, reach)
    waiting: dict[str, float] = defaultdict(float)
    for cause, of_cause in indices_by_code(profile.cause[index]).items():
        waited = float(gaps[of_cause].sum())  # the same gaps in the same order as a mask's
        if waited > 0:
            waiting[_cause_name(cause)] += waited
    active = merged_length(profile.stream_busy(code, starts, ends, reach))
    return StreamSummary(name=stream_name(code), engine=engine_name(code), instructions=len(index),
                         active_ns=active, utilisation=active / total if total else 0.0,
                         waiting_ns=dict(sorted(waiting.items(), key=lambda kv: -kv[1])),
                         idle_after_ns=max(total - float(ends.max()), 0.0))


def summarise(profile: Profile) -> ProfileSummary:
    total = profile.total_ns
    codes = list(profile.stream_records)
    streams = {stream_name(c): _stream_summary(profile, c, total) for c in codes}
    engine_active: dict[str, float] = {}
    for engine in dict.fromkeys(engine_name(c) for c in codes):
        engine_active[engine] = merged_length(profile.busy_intervals(
            [c for c in codes if engine_name(c) == engine]))
    by_precision = profile.flops_by_precision
    precision = max(by_precision, key=by_precision.get) if by_precision else None
    peak = profile.core.peak_flops(precision) if precision else None
    tensor_flops = profile.total("flops")
    seconds = total * 1e-9
    dma = profile.stream >= DMA_BASE
    dma_bytes = profile.total("nbytes", dma)
    dma_active = merged_length(profile.busy_intervals([c for c in codes if c >= DMA_BASE]))
    hbm_read, hbm_write = profile.total("hbm_read"), profile.total("hbm_write")
    core = profile.core
    return ProfileSummary(
        core=core.name, total_ns=total, instructions=len(profile), streams=streams,
        engine_active_ns=engine_active,
        engine_utilisation={k: (v / total if total else 0.0) for k, v in engine_active.items()},
        tensor_flops=tensor_flops, tensor_precision=precision, tensor_peak_flops=peak,
        tensor_flops_utilisation=(tensor_flops / (seconds * peak)) if peak and seconds else 0.0,
        dma_bytes=dma_bytes, dma_transfers=int(dma.sum()),
        dma_bytes_per_s=dma_bytes / seconds if seconds else 0.0,
        dma_active_ns=dma_active,
        dma_active_bytes_per_s=dma_bytes / (dma_active * 1e-9) if dma_active else 0.0,
        hbm_read_bytes=hbm_read, hbm_write_bytes=hbm_write,
        hbm_bytes_per_s=(hbm_read + hbm_write) / seconds if seconds else 0.0,
        sbuf_peak_bytes_per_partition=int(profile.sbuf_peak_bytes_per_partition),
        sbuf_bytes_per_partition=core.sbuf_bytes_per_partition,
        psum_peak_bytes_per_partition=int(profile.psum_peak_bytes_per_partition),
        psum_bytes_per_partition=core.psum_bytes_per_partition,
        flops_by_precision=dict(by_precision))
