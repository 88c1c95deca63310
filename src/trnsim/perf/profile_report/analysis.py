"""The figures of a profile report, computed from a trace's instructions (`CoreTrace`).

Each figure uses the simulator's own definitions (`trnsim.sim.profile`): an engine's active time
is the union of its streams' issue intervals, a stream's wait before an instruction is the gap
since everything before it on that stream finished, attributed to what the simulator says the
instruction waited on. So the report's utilisation equals `ProfileSummary.engine_utilisation`.

Kernels for the roofline: a compiled model labels each instruction "op:node" (the kernel it came
from); an NKI kernel's instructions carry API names (``nl.load``), and the whole program is the
kernel. A kernel's point: TensorE FLOPs over the HBM bytes its DMAs moved (arithmetic
intensity) against FLOPs per second of its span (first start to last result).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trnsim.perf.profile_report.trace_file import CoreTrace
from trnsim.sim.profile import merged_intervals, union_length, wait_gaps

TIMELINE_COLUMNS = 1000  # time bins of the timeline and the bandwidth chart (one per pixel)
# Trace times are microseconds as floats: back in ns they differ from the simulator's by far
# less than this, so a shorter gap between two instructions is no gap
TIME_RESOLUTION_NS = 1e-6


@dataclass(frozen=True)
class StreamRow:
    tid: int
    name: str
    engine: str
    instructions: int
    active_ns: float
    waiting_ns: dict[str, float]  # by what it waited on, largest first
    idle_after_ns: float


@dataclass(frozen=True)
class Instruction:
    """One instruction as a report row."""

    index: int
    name: str
    stream: str
    start_ns: float
    busy_ns: float
    gap_ns: float  # idle on its stream just before it
    waited_on: str
    source: str | None
    operands: list[str]


@dataclass(frozen=True)
class SourceLine:
    source: str
    instructions: int
    busy_ns: float
    engines: dict[str, float]  # busy by engine


@dataclass(frozen=True)
class Kernel:
    name: str
    instructions: int
    start_ns: float
    end_ns: float
    flops: int
    hbm_bytes: int
    precision: str | None

    @property
    def span_ns(self) -> float:
        return self.end_ns - self.start_ns

    @property
    def intensity(self) -> float | None:
        """FLOPs per HBM byte (None when it moved no HBM bytes)."""
        return self.flops / self.hbm_bytes if self.hbm_bytes else None

    @property
    def flops_per_s(self) -> float:
        return self.flops / (self.span_ns * 1e-9) if self.span_ns > 0 else 0.0


@dataclass(frozen=True)
class CoreFigures:
    total_ns: float
    engine_active_ns: dict[str, float]
    engine_utilisation: dict[str, float]
    streams: list[StreamRow]
    slowest: list[Instruction]
    stalls: list[Instruction]
    sources: list[SourceLine]
    kernels: list[Kernel]
    dma_bytes: int
    dma_engine_bytes: int  # of which moved by the DMA engines (not on-chip hand-offs)
    dma_edges_ns: np.ndarray  # bin edges of the bandwidth series
    dma_bytes_per_s: np.ndarray  # average DMA bandwidth in each bin


def engines_in_order(core: CoreTrace) -> list[str]:
    """Engines in track order (TensorE, VectorE, ..., DMA)."""
    return list(dict.fromkeys(core.stream_engine[t] for t in sorted(core.stream_engine)))


def stream_rows(core: CoreTrace, total: float) -> list[StreamRow]:
    rows = []
    end_of_run = core.offset_ns + total
    for tid in sorted(core.stream_names):
        index = np.flatnonzero(core.tid == tid)
        starts, ends = core.start_ns[index], core.end_ns[index]
        gaps = _gaps(starts - core.offset_ns, ends - core.offset_ns)
        waiting: dict[str, float] = {}
        for i, gap in zip(index.tolist(), gaps.tolist(), strict=True):
            if gap > 0:
                waiting[core.waited_on[i]] = waiting.get(core.waited_on[i], 0.0) + gap
        rows.append(StreamRow(tid, core.stream_names[tid], core.stream_engine[tid], len(index),
                              union_length(starts, ends),
                              dict(sorted(waiting.items(), key=lambda kv: -kv[1])),
                              max(end_of_run - float(ends.max()), 0.0)))
    return rows


def _instruction(core: CoreTrace, i: int, gap: float) -> Instruction:
    return Instruction(i, core.names[i], core.stream_names[int(core.tid[i])],
                       float(core.start_ns[i] - core.offset_ns),
                       float(core.end_ns[i] - core.start_ns[i]), gap, core.waited_on[i],
                       core.sources[i], core.operands[i])


def all_gaps(core: CoreTrace) -> np.ndarray:
    gaps = np.zeros(len(core))
    for tid in core.stream_names:
        index = np.flatnonzero(core.tid == tid)
        gaps[index] = _gaps(core.start_ns[index] - core.offset_ns,
                            core.end_ns[index] - core.offset_ns)
    return gaps


def _gaps(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    gaps = wait_gaps(starts, ends)
    return np.where(gaps < TIME_RESOLUTION_NS, 0.0, gaps)


def top(values: np.ndarray, count: int) -> list[int]:
    """Indices of the `count` largest values, largest first (ties: earliest first)."""
    order = np.lexsort((np.arange(len(values)), -values))
    return [int(i) for i in order[:count] if values[i] > 0]


def source_lines(core: CoreTrace, count: int) -> list[SourceLine]:
    busy = core.end_ns - core.start_ns
    table: dict[str, list] = {}
    for i, source in enumerate(core.sources):
        key = source or "(no source line)"
        row = table.setdefault(key, [0, 0.0, {}])
        row[0] += 1
        row[1] += float(busy[i])
        row[2][core.engine[i]] = row[2].get(core.engine[i], 0.0) + float(busy[i])
    ranked = sorted(table.items(), key=lambda kv: (-kv[1][1], kv[0]))[:count]
    return [SourceLine(s, n, b, dict(sorted(e.items(), key=lambda kv: -kv[1])))
            for s, (n, b, e) in ranked]


def kernels(core: CoreTrace) -> list[Kernel]:
    """Per kernel, in the order each started (see the module docstring)."""
    program = (core.meta or {}).get("program") or core.title
    precision = ((core.meta or {}).get("summary") or {}).get("tensor_precision")
    keys = [name if ":" in name else program for name in core.names]
    order: dict[str, int] = {}
    which = np.array([order.setdefault(k, len(order)) for k in keys], dtype=np.int64)
    count = len(order)
    start = np.full(count, np.inf)
    np.minimum.at(start, which, core.start_ns - core.offset_ns)
    end = np.full(count, -np.inf)
    np.maximum.at(end, which, core.done_ns - core.offset_ns)
    flops = np.bincount(which, weights=core.flops, minlength=count)
    hbm = np.bincount(which, weights=core.hbm_bytes, minlength=count)
    instructions = np.bincount(which, minlength=count)
    return [Kernel(name, int(instructions[k]), float(start[k]), float(end[k]), int(flops[k]),
                   int(hbm[k]), precision) for name, k in order.items()]


def dma_bandwidth(core: CoreTrace, total: float, columns: int = TIMELINE_COLUMNS
                  ) -> tuple[np.ndarray, np.ndarray]:
    """DMA bandwidth over time: the bytes each transfer moved in each time bin, from the pieces
    the simulator booked it on the DMA engines (constant rate within each). A DMA trnsim wrote
    without pieces used no engine (an on-chip hand-off: the data was already in place); in a
    trace from elsewhere, each DMA's bytes are spread evenly over its interval."""
    edges = np.linspace(0.0, total, columns + 1) if total > 0 else np.zeros(2)
    dma = [i for i, e in enumerate(core.engine) if e == "dma"]
    pieces = [core.moved[i] for i in dma if i in core.moved]
    if core.meta is None:
        pieces += [np.array([[core.start_ns[i], core.end_ns[i], float(core.nbytes[i])]])
                   for i in dma if i not in core.moved]
    rows = np.concatenate(pieces) if pieces else np.zeros((0, 3))
    starts, ends, nbytes = (rows[:, 0] - core.offset_ns, rows[:, 1] - core.offset_ns, rows[:, 2])
    length = ends - starts
    spread = length > 0
    rate = np.divide(nbytes, length, out=np.zeros_like(nbytes), where=spread)
    # bytes moved by time t: sum of rate * (min(t, end) - start) over the pieces under way,
    # = t * (rates started - rates ended) - (sum rate * start over started - ... over ended),
    # from sorted prefix sums; a piece of no duration lands whole at its end
    moved = (_ramp(starts, rate, edges) - _ramp(ends, rate, edges)
             + _steps(ends[~spread], nbytes[~spread], edges))
    width = np.diff(edges)
    per_bin = np.diff(moved)
    return edges, np.divide(per_bin, width * 1e-9, out=np.zeros_like(per_bin), where=width > 0)


def _ramp(at: np.ndarray, rate: np.ndarray, t: np.ndarray) -> np.ndarray:
    """sum over i with at[i] <= t of rate[i] * (t - at[i]), for each t."""
    order = np.argsort(at, kind="stable")
    at, rate = at[order], rate[order]
    rates = np.concatenate([[0.0], np.cumsum(rate)])
    weighted = np.concatenate([[0.0], np.cumsum(rate * at)])
    k = np.searchsorted(at, t, side="right")
    return t * rates[k] - weighted[k]


def _steps(at: np.ndarray, amount: np.ndarray, t: np.ndarray) -> np.ndarray:
    """sum over i with at[i] <= t of amount[i], for each t."""
    order = np.argsort(at, kind="stable")
    totals = np.concatenate([[0.0], np.cumsum(amount[order])])
    return totals[np.searchsorted(at[order], t, side="right")]


def occupancy(starts: np.ndarray, ends: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Fraction of each bin [edges[i], edges[i+1]) covered by the union of the intervals."""
    seg_start, seg_end = merged_intervals(starts, ends)
    if len(seg_start) == 0:
        return np.zeros(len(edges) - 1)
    lengths = seg_end - seg_start
    before = np.concatenate([[0.0], np.cumsum(lengths)])

    def covered(t: np.ndarray) -> np.ndarray:
        k = np.searchsorted(seg_start, t, side="right") - 1
        inside = np.clip(t - seg_start[np.maximum(k, 0)], 0.0, lengths[np.maximum(k, 0)])
        return np.where(k >= 0, before[np.maximum(k, 0)] + inside, 0.0)

    width = np.diff(edges)
    return np.divide(np.diff(covered(edges)), width, out=np.zeros_like(width), where=width > 0)


def figures(core: CoreTrace, *, top_count: int = 15) -> CoreFigures:
    total = core.total_ns
    active = {}
    for engine in engines_in_order(core):
        mask = np.array([e == engine for e in core.engine], dtype=bool)
        active[engine] = union_length(core.start_ns[mask], core.end_ns[mask])
    gaps = all_gaps(core)
    busy = core.end_ns - core.start_ns
    edges, bandwidth = dma_bandwidth(core, total)
    dma = np.array([e == "dma" for e in core.engine], dtype=bool)
    return CoreFigures(
        total_ns=total, engine_active_ns=active,
        engine_utilisation={k: (v / total if total else 0.0) for k, v in active.items()},
        streams=stream_rows(core, total),
        slowest=[_instruction(core, i, float(gaps[i])) for i in top(busy, top_count)],
        stalls=[_instruction(core, i, float(gaps[i])) for i in top(gaps, top_count)],
        sources=source_lines(core, top_count), kernels=kernels(core),
        dma_bytes=int(core.nbytes[dma].sum()),
        dma_engine_bytes=int(core.nbytes[list(core.moved)].sum()) if core.meta is not None
        else int(core.nbytes[dma].sum()),
        dma_edges_ns=edges, dma_bytes_per_s=bandwidth)
