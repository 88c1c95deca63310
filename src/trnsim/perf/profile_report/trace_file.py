"""Reading a trace file trnsim wrote (`trnsim.sim.perfetto`) back into columns per core.

Data only: the file is parsed as JSON and never names code to run. A Chrome trace written by
another tool reads too (its complete events become instructions), without the simulator's
summary and roofline ceilings that ``metadata.trnsim`` carries.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from trnsim.errors import InvalidArgumentError, LimitExceededError
from trnsim.sim.perfetto import TRACE_FORMAT

# A 2-million-instruction trace (a 7B model's decode step) is about 700 MB of JSON; beyond this
# the report would take minutes and more memory than a laptop has
MAX_TRACE_BYTES = 2 << 30


@dataclass
class CoreTrace:
    """One process of the trace (a core, or a graph of a training step): its instructions."""

    pid: int
    title: str
    meta: dict | None  # metadata.trnsim.cores[i] when trnsim wrote the file
    stream_names: dict[int, str]  # tid -> "tensor", "dma.q3", ...
    stream_engine: dict[int, str]  # tid -> "tensor", "dma", ...
    tid: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    done_ns: np.ndarray
    names: list[str]
    sources: list[str | None]
    waited_on: list[str]
    operands: list[list[str]]
    moved: dict[int, np.ndarray]  # DMA event -> [[start_ns, end_ns, bytes]] at constant rates
    nbytes: np.ndarray
    flops: np.ndarray
    hbm_bytes: np.ndarray
    engine: list[str] = field(default_factory=list)

    @property
    def total_ns(self) -> float:
        """From the process's first instruction (its offset in the trace) to its last result."""
        return float(self.done_ns.max() - self.offset_ns) if len(self.done_ns) else 0.0

    @property
    def offset_ns(self) -> float:
        return float((self.meta or {}).get("offset_ns", 0.0))

    def __len__(self) -> int:
        return len(self.tid)


@dataclass
class TraceFile:
    path: str
    cores: list[CoreTrace]
    text: str  # the file as read (embedded in the report for Perfetto)


def _number(value, what: str, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgumentError(f"trace {path}: {what} {value!r} is not a number")
    return float(value)


def read_trace(path: str | Path) -> TraceFile:
    """Parse a trace file into `CoreTrace`s; a clear error for anything but a trace."""
    path = Path(path)
    if not path.is_file():
        raise InvalidArgumentError(f"trace {path}: no such file")
    size = path.stat().st_size
    if size > MAX_TRACE_BYTES:
        raise LimitExceededError("trace file bytes", size, MAX_TRACE_BYTES, context=str(path))
    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise InvalidArgumentError(f"trace {path}: not JSON ({error.msg} at line {error.lineno}, "
                                   f"column {error.colno})") from None
    except RecursionError:
        raise InvalidArgumentError(f"trace {path}: JSON nested too deeply") from None
    events = document.get("traceEvents") if isinstance(document, dict) else document
    if not isinstance(events, list):
        raise InvalidArgumentError(f"trace {path}: no traceEvents list (a Chrome/Perfetto JSON "
                                   f"trace such as `trnsim kernel run --trace` writes)")
    metadata = document.get("metadata") if isinstance(document, dict) else None
    meta = metadata.get("trnsim") if isinstance(metadata, dict) else None
    if meta is not None:
        _check_meta(meta, str(path))
    cores = _cores(events, meta, str(path))
    if not cores:
        raise InvalidArgumentError(f"trace {path}: no instructions (no complete 'X' events)")
    return TraceFile(str(path), cores, text)


# metadata.trnsim.cores[i]: the fields the report reads, and their types
_CORE_FIELDS = {"pid": int, "title": str, "program": str, "core": str, "core_index": int,
                "chip": str, "mode": str, "offset_ns": (int, float), "summary": dict,
                "peak_flops": dict, "memory_bytes_per_s": (int, float)}
_SUMMARY_FIELDS = {"tensor_flops_utilisation": (int, float), "hbm_read_bytes": int,
                   "hbm_write_bytes": int, "sbuf_peak_bytes_per_partition": int,
                   "sbuf_bytes_per_partition": int, "total_ns": (int, float)}


def _check_meta(meta, path: str) -> None:
    """metadata.trnsim as `trnsim.sim.perfetto` writes it, or a named error."""
    if not isinstance(meta, dict) or not isinstance(meta.get("cores"), list):
        raise InvalidArgumentError(f"trace {path}: metadata.trnsim has no cores list")
    if not isinstance(meta.get("format"), int) or meta["format"] > TRACE_FORMAT:
        raise InvalidArgumentError(f"trace {path}: trnsim trace format {meta.get('format')!r} "
                                   f"is not one this trnsim reads (1 to {TRACE_FORMAT})")
    for core in meta["cores"]:
        for fields, where in ((_CORE_FIELDS, core), (_SUMMARY_FIELDS, (core or {}).get("summary"))):
            for name, kind in fields.items():
                value = where.get(name) if isinstance(where, dict) else None
                if not isinstance(value, kind) or isinstance(value, bool):
                    raise InvalidArgumentError(f"trace {path}: metadata.trnsim field {name} is "
                                               f"{value!r}")


def ints(key: str, args: list[dict]) -> np.ndarray:
    return np.array([int(a.get(key, 0) or 0) if isinstance(a.get(key, 0), int | float) else 0
                     for a in args], dtype=np.int64)


def _moved(pieces, nbytes: int, path: str) -> np.ndarray:
    """A DMA's ``moved`` pieces [start_us, end_us, share] as rows [start_ns, end_ns, bytes]."""
    if not isinstance(pieces, list) or not all(isinstance(p, list) and len(p) == 3 for p in pieces):
        raise InvalidArgumentError(f"trace {path}: a DMA's moved is not [[start, end, share]]")
    rows = np.array([[_number(v, "moved", path) for v in p] for p in pieces])
    return np.column_stack([rows[:, 0] * 1e3, rows[:, 1] * 1e3, rows[:, 2] * nbytes])


def _cores(events: list, meta: dict | None, path: str) -> list[CoreTrace]:
    titles: dict[int, str] = {}
    streams: dict[tuple[int, int], str] = {}
    rows: dict[int, list[dict]] = {}
    for event in events:
        if not isinstance(event, dict):
            raise InvalidArgumentError(f"trace {path}: an event is not an object: {event!r:.80}")
        phase, pid, tid = event.get("ph"), event.get("pid", 0), event.get("tid", 0)
        if not isinstance(pid, int) or not isinstance(tid, int):
            continue  # string pids/tids: not a trace trnsim wrote; their events are skipped
        args = event.get("args") if isinstance(event.get("args"), dict) else {}
        if phase == "M" and event.get("name") == "process_name":
            titles[pid] = str(args.get("name", f"process {pid}"))
        elif phase == "M" and event.get("name") == "thread_name":
            streams[(pid, tid)] = str(args.get("name", f"track {tid}"))
        elif phase == "X":
            rows.setdefault(pid, []).append(event)
    by_pid = {m.get("pid"): m for m in (meta or {}).get("cores", []) if isinstance(m, dict)}
    cores = []
    for pid in sorted(rows):
        items = rows[pid]
        start = np.array([_number(e.get("ts"), "ts", path) for e in items]) * 1e3
        dur = np.array([_number(e.get("dur", 0.0), "dur", path) for e in items]) * 1e3
        args = [e.get("args") if isinstance(e.get("args"), dict) else {} for e in items]
        done = np.array([_number(a.get("done_us", (s + d) / 1e3), "done_us", path)
                         for a, s, d in zip(args, start, dur, strict=True)]) * 1e3
        nbytes = ints("bytes", args)
        moved = {i: _moved(a["moved"], int(nbytes[i]), path) for i, a in enumerate(args)
                 if a.get("moved")}
        tids = np.array([e.get("tid", 0) for e in items], dtype=np.int64)
        engines = [str(e.get("cat", "")) or "other" for e in items]
        names = {t: streams.get((pid, t), f"track {t}") for t in sorted(set(tids.tolist()))}
        engine_of = {}
        for t, engine in zip(tids.tolist(), engines, strict=True):
            engine_of.setdefault(t, engine)

        cores.append(CoreTrace(
            pid=pid, title=titles.get(pid, f"process {pid}"), meta=by_pid.get(pid),
            stream_names=names, stream_engine=engine_of, tid=tids, start_ns=start,
            end_ns=start + dur, done_ns=np.maximum(done, start + dur),
            moved=moved,
            names=[str(e.get("name", "")) for e in items],
            sources=[str(a["source"]) if a.get("source") else None for a in args],
            waited_on=[str(a.get("waited_on", "")) for a in args],
            operands=[[str(o) for o in a.get("operands", [])][:4] for a in args],
            nbytes=nbytes, flops=ints("flops", args), hbm_bytes=ints("hbm_bytes", args),
            engine=engines))
    return cores
