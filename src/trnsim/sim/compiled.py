"""The scheduler's loop compiled (numba): the same list scheduling, ~100x faster per instruction.

`CoreScheduler.step` (with `DmaQueues.schedule`, `reserve_pieces`, `RateTimeline` and
`BusyIntervals`) is the definition of the timing model. `run_compiled` is a line-by-line
transcription of it over arrays, for the common case of one core running a straight-line program
(no control flow, no rendezvous, no HBM timeline shared with other cores): every float is
computed by the same operations in the same order, so the records are bit-identical to the
Python loop's (IEEE doubles in both; numba does not reorder floating point without
``fastmath``). `TRNSIM_SIM_LOOP` chooses the loop:

- ``auto`` (default): compiled for programs of at least `COMPILED_FROM` instructions when numba
  is installed (the ``fast`` extra), else the Python loop. Loading numba and the compiled loop
  costs a process about as much CPU as the Python loop spends on `LOAD_AFTER` instructions, so
  it is loaded only once a process has run that many through the Python loop (or meets one
  program that large): a command that simulates one small model does not pay for it;
- ``python`` / ``compiled``: always that loop (``compiled`` still falls back without numba);
- ``check``: both, and a `SimulationMismatchError` at the first record that differs (tests).

Per-plan figures are gathered into arrays once per planned program (`PlanArrays`, kept beside
its plans by `trnsim.sim.plan.planned`), so a repeat run of a program does no per-plan Python.
"""

from __future__ import annotations

import os
from itertools import chain
from operator import attrgetter

import numpy as np

from trnsim.errors import InvalidArgumentError, TrnsimError
from trnsim.sim.collector import collector_paused

LOOP_ENV = "TRNSIM_SIM_LOOP"
LOOPS = ("auto", "python", "compiled", "check")
# Below this many instructions the Python loop is as fast as gathering arrays for the compiled one
COMPILED_FROM = 2048
# Instructions the Python loop times in about the CPU time of importing numba and loading the
# cached compiled loop (~0.7 s against ~6 us per instruction, measured on a 2-core machine)
LOAD_AFTER = 100_000
_python_instructions = 0  # timed by the Python loop in this process while the kernel was not loaded

_PORT_PRUNE_EVERY = 512  # as trnsim.sim.scheduler
_DMA_PRUNE_EVERY = 256  # as trnsim.sim.dma


class SimulationMismatchError(TrnsimError):
    """The compiled loop and the Python loop disagree (``TRNSIM_SIM_LOOP=check``): a bug."""


def use_compiled(instructions: int) -> bool:
    """Whether a timing run of a program of `instructions` should take the compiled loop (see
    the module doc); counts the instructions the Python loop takes instead."""
    global _python_instructions
    choice = loop_choice()
    if choice == "python":
        return False
    if choice == "auto":
        if instructions < COMPILED_FROM:
            return False
        if _KERNEL is None and _python_instructions + instructions < LOAD_AFTER:
            _python_instructions += instructions
            return False
    return kernel() is not None


def loop_choice() -> str:
    value = os.environ.get(LOOP_ENV, "auto").strip().lower() or "auto"
    if value not in LOOPS:
        raise InvalidArgumentError(f"{LOOP_ENV}={value!r} is not one of {', '.join(LOOPS)}")
    return value


_KERNEL = None  # the numba-compiled `_run`, or False when numba is missing


def kernel():
    """The compiled loop, or None without numba (compiled on first use, cached on disk)."""
    global _KERNEL
    if _KERNEL is None:
        with collector_paused():  # numba's import makes ~10^5 objects (see `run_with_kernel`)
            try:
                import numba
            except ImportError:
                _KERNEL = False
            else:
                # the loop's helpers are module globals: compile them first, so `_run` calls them
                for name in ("_bisect_left", "_bisect_right", "_grow"):
                    globals()[name] = numba.njit(cache=True, nogil=True)(globals()[name])
                _KERNEL = numba.njit(cache=True, nogil=True)(_run)
    return _KERNEL or None


_HELPERS: dict = {}  # numba-compiled helpers of other modules (`loaded`)


def loaded(function):
    """`function` (plain numeric Python over arrays) compiled with numba if the compiled loop
    is loaded in this process, else None: a caller that can do without it does not make a
    process load numba (see the module doc)."""
    if not _KERNEL:
        return None
    helper = _HELPERS.get(function)
    if helper is None:
        import numba

        helper = _HELPERS[function] = numba.njit(cache=True, nogil=True)(function)
    return helper


class PlanArrays:
    """The distinct plans of one planned program as columns, indexed by `Plan.uid`.

    A plan's read (write) neighbours are the neighbour lists of its read (written) regions, one
    after another (`Plan.read_neighbors`); the compiled loop reads them through the plan's region
    uids from one array of every region's list (`neighbors`, `nb_ptr`: `region_neighbors`), not
    from a copy per plan (a lowered layer's plans name ~10^7 neighbours: gathering them cost
    more CPU than the rest of these columns). Every column is read with one C-level pass
    (`np.fromiter` over `map`/`chain`): a lowered model has ~10^5-10^6 distinct plans, and a
    Python loop per plan cost seconds."""

    def __init__(self, plans, regions=None) -> None:
        n = len(plans)
        self.count = n
        self.code = _column(plans, "code", np.int64)
        self.busy = _column(plans, "busy", np.float64)
        self.latency = _column(plans, "latency", np.float64)
        self.is_load = _column(plans, "is_load", np.bool_)
        self.is_matmul = _column(plans, "is_matmul", np.bool_)
        self.dma_work = np.zeros(n, np.float64)
        self.dma_engines = np.zeros(n, np.float64)
        self.dma_queue = np.full(n, -1, np.int64)
        self.dma_in_place = np.zeros(n, np.bool_)
        movers = [plan for plan in plans if plan.dma is not None]
        if movers:
            at = _column(movers, "uid", np.int64)
            dmas = list(map(attrgetter("dma"), movers))
            self.dma_work[at] = _column(dmas, "work", np.float64)
            self.dma_engines[at] = _column(dmas, "engines", np.float64)
            self.dma_queue[at] = [-1 if dma.queue is None else dma.queue for dma in dmas]
            self.dma_in_place[at] = _column(dmas, "in_place", np.bool_)
        self.reads, self.r_ptr = _flat(list(map(attrgetter("reads"), plans)))
        self.writes, self.w_ptr = _flat(list(map(attrgetter("writes"), plans)))
        self.ports, self.p_ptr = _flat(list(map(attrgetter("ports"), plans)))
        if regions is None:  # the regions of these plans alone
            regions = {}
            for plan in plans:
                regions.update(zip(plan.reads, plan.read_neighbors, strict=True))
                regions.update(zip(plan.writes, plan.write_neighbors, strict=True))
        self.neighbors, self.nb_ptr = region_neighbors(regions)


def _column(items, name: str, dtype) -> np.ndarray:
    """Attribute `name` of every item, as an array (one C-level pass)."""
    return np.fromiter(map(attrgetter(name), items), dtype, len(items))


def region_neighbors(regions) -> tuple[np.ndarray, np.ndarray]:
    """(every region's neighbour uids one after another, where each region's start: indexed
    by region uid, one more entry at the end) of a {uid: neighbour uid list} mapping."""
    keys = np.fromiter(regions.keys(), np.int64, len(regions))
    flat, ptr = _flat(list(regions.values()))
    size = int(keys.max()) + 1 if len(keys) else 0
    if np.array_equal(keys, np.arange(size)):  # every uid once, in order: already laid out
        return flat, ptr
    counts = np.zeros(size + 1, np.int64)
    counts[1:][keys] = np.diff(ptr)
    order = np.argsort(keys, kind="stable")
    return _segments(flat, ptr, order)[0], np.cumsum(counts)


def _flat(rows: list) -> tuple[np.ndarray, np.ndarray]:
    """(the rows one after another, each row's start and one more at the end)."""
    ptr = np.zeros(len(rows) + 1, np.int64)
    ptr[1:] = np.cumsum(np.fromiter(map(len, rows), np.int64, len(rows)))
    return np.fromiter(chain.from_iterable(rows), np.int64, int(ptr[-1])), ptr


def _segments(lists: np.ndarray, ptr: np.ndarray,
              ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the segments `ptr[id]:ptr[id + 1]` of `lists` for each of `ids`, one after another;
    where each ends)."""
    starts = ptr[ids]
    lengths = ptr[ids + 1] - starts
    ends = np.cumsum(lengths)
    total = int(ends[-1]) if len(ends) else 0
    if not total:
        return lists[:0], ends
    copy = loaded(_copy_segments)  # (the compiled loop is loaded: a copy loop, no index array)
    if copy is not None:
        return copy(lists, starts, lengths, total), ends
    # the index of each gathered entry as a running sum: +1 along a segment, a jump to the next
    # one's start at its first entry. One array of the gather's length (every region's
    # neighbours), not three: fresh pages cost more than the arithmetic here.
    filled = lengths > 0
    heads, first, size = (ends - lengths)[filled], starts[filled], lengths[filled]
    index = np.ones(total, np.int64)
    index[heads[0]] = first[0]
    index[heads[1:]] = first[1:] - (first[:-1] + size[:-1] - 1)
    np.cumsum(index, out=index)
    return lists[index], ends


def _copy_segments(lists: np.ndarray, starts: np.ndarray, lengths: np.ndarray,
                   total: int) -> np.ndarray:
    """`_segments`' gather as one loop, compiled (`loaded`)."""
    out = np.empty(total, lists.dtype)
    at = 0
    for k in range(len(starts)):
        first = starts[k]
        for j in range(lengths[k]):
            out[at + j] = lists[first + j]
        at += lengths[k]
    return out


def run_with_kernel(run_kernel, scheduler, arrays: PlanArrays, uids: np.ndarray) -> int:
    """Step every instruction (plan uids in program order) on `scheduler` with the compiled loop
    and leave the scheduler as the Python loop would. Returns -1, or the index of the first
    instruction that failed (a MultiplyMoving with no stationary tile loaded: the caller raises
    the Python loop's error).

    The first call loads the cached machine code, and with it numba's typing and lowering
    registries (~10^5 new objects: numba.np, scipy.linalg for its BLAS check). Each cycle
    collection those allocations trigger walks every object of the process: after a 5.5M-
    instruction program was planned (12M objects) that was 11 of the first call's 13 CPU s. The
    call makes no garbage, so the collector waits until it returns."""
    with collector_paused():
        return _run_with_kernel(run_kernel, scheduler, arrays, uids)


def _run_with_kernel(run_kernel, scheduler, arrays: PlanArrays, uids: np.ndarray) -> int:
    from trnsim.sim.engines import DMA_BASE

    dma = scheduler.dma
    ports = scheduler.port_busy
    port_streams = np.zeros((max(len(ports), 1), DMA_BASE), np.bool_)
    for index, (streams, _) in enumerate(scheduler.ports.ports):
        for stream in streams:
            port_streams[index, stream] = True
    width = max([len(p.starts) for p in ports] + [16])
    port_starts = np.zeros((max(len(ports), 1), width), np.float64)
    port_ends = np.zeros_like(port_starts)
    port_len = np.zeros(max(len(ports), 1), np.int64)
    for index, port in enumerate(ports):
        port_len[index] = len(port.starts)
        port_starts[index, :len(port.starts)] = port.starts
        port_ends[index, :len(port.ends)] = port.ends
    f64 = lambda values: np.array(values, np.float64)  # noqa: E731
    i64 = lambda values: np.array(values, np.int64)  # noqa: E731
    w_ready, w_engine = f64(scheduler.w_ready), i64(scheduler.w_engine)
    r_done, r_engine = f64(scheduler.r_done), i64(scheduler.r_engine)
    stream_free, queue_free = f64(scheduler.stream_free), f64(dma.queue_free)
    pool = dma.pool
    scalars = np.array([scheduler.last_multiply_start, float(scheduler.stationary_loaded),
                        scheduler.clock, pool.capacity, pool.eps, dma.latency], np.float64)
    counters = np.array([scheduler._port_bookings, dma._bookings], np.int64)
    a = arrays
    (failed, starts, ends, dones, codes, causes, moved_record, moved_times, pool_times,
     pool_used, port_starts, port_ends) = run_kernel(
        uids, a.code, a.busy, a.latency, a.is_load, a.is_matmul, a.dma_work, a.dma_engines,
        a.dma_queue, a.dma_in_place, a.neighbors, a.nb_ptr, a.reads, a.r_ptr,
        a.writes, a.w_ptr, a.ports, a.p_ptr, w_ready, w_engine, r_done, r_engine, stream_free,
        queue_free, f64(pool.times), f64(pool.used), port_starts, port_ends, port_len,
        port_streams, scalars, counters)
    done = len(starts)
    offset = len(scheduler.uids)
    for name, column in (("uids", uids[:done]), ("starts", starts), ("ends", ends),
                         ("dones", dones), ("codes", codes), ("causes", causes)):
        # a fresh scheduler keeps the arrays (`Profile` reads them as such); else append
        records = getattr(scheduler, name)
        setattr(scheduler, name, column if not len(records) else [*records, *column.tolist()])
    scheduler.moved_record.frombytes((moved_record + offset).tobytes())
    scheduler.moved_times.frombytes(moved_times.tobytes())
    scheduler.w_ready, scheduler.w_engine = w_ready.tolist(), w_engine.tolist()
    scheduler.r_done, scheduler.r_engine = r_done.tolist(), r_engine.tolist()
    scheduler.stream_free = stream_free.tolist()
    dma.queue_free = queue_free.tolist()
    pool.times, pool.used = pool_times.tolist(), pool_used.tolist()
    for index, port in enumerate(ports):
        port.starts = port_starts[index, :port_len[index]].tolist()
        port.ends = port_ends[index, :port_len[index]].tolist()
    scheduler.last_multiply_start = float(scalars[0])
    scheduler.stationary_loaded = bool(scalars[1])
    scheduler.clock = float(scalars[2])
    scheduler._port_bookings, dma._bookings = int(counters[0]), int(counters[1])
    return int(failed)


_COMPARED = ("uids", "starts", "ends", "dones", "codes", "causes", "moved_record", "moved_times")


def compare(reference, scheduler, program) -> None:
    """Raise `SimulationMismatchError` unless `scheduler` (compiled loop) recorded exactly what
    `reference` (Python loop) did: every record and DMA piece, bit for bit, and the final state."""
    for name in (*_COMPARED, "w_ready", "w_engine", "r_done", "r_engine", "stream_free"):
        ours, theirs = np.asarray(getattr(scheduler, name)), np.asarray(getattr(reference, name))
        if ours.shape != theirs.shape:
            raise SimulationMismatchError(f"compiled loop: {name} has {ours.shape} entries, the "
                                          f"Python loop {theirs.shape} ({program.name})")
        differ = np.flatnonzero(ours != theirs)
        if len(differ):
            at = int(differ[0])
            raise SimulationMismatchError(f"compiled loop: {name}[{at}] is {ours[at]!r}, the "
                                          f"Python loop's {theirs[at]!r} ({program.name})")


# --- the loop (plain Python that numba compiles; run uncompiled it is merely slow) -----------------
# Codes as in trnsim.sim.engines (numba reads module globals as constants)
_TENSOR_LOAD, _TENSOR, _DMA_BASE = 0, 1, 6
_NO_WAIT, _PIPELINE, _PORT, _QUEUE = -1, -2, -3, -4


def _bisect_right(values, n, t):
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi) // 2
        if t < values[mid]:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _bisect_left(values, n, t):
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi) // 2
        if values[mid] < t:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _grow(values, need):
    if need <= len(values):
        return values
    out = np.zeros(max(need, 2 * len(values)), values.dtype)
    out[:len(values)] = values
    return out


def _run(uids, code_of, busy_of, latency_of, is_load_of, is_matmul_of, dma_work, dma_engines,
         dma_queue, dma_in_place, neighbors, nb_ptr, reads, r_ptr, writes, w_ptr,
         ports_of, p_ptr, w_ready, w_engine, r_done, r_engine, stream_free, queue_free,
         pool_times_in, pool_used_in, port_starts, port_ends, port_len, port_streams, scalars,
         counters):
    n = len(uids)
    starts = np.empty(n, np.float64)
    ends = np.empty(n, np.float64)
    dones = np.empty(n, np.float64)
    codes = np.empty(n, np.int64)
    causes = np.empty(n, np.int64)
    moved_record = np.empty(1024, np.int64)
    moved_times = np.empty(3 * 1024, np.float64)
    moved = 0
    pool_times = _grow(pool_times_in.copy(), len(pool_times_in) + 64)
    pool_used = _grow(pool_used_in.copy(), len(pool_used_in) + 64)
    pool_n = len(pool_times_in)
    piece_start = np.empty(64, np.float64)
    piece_end = np.empty(64, np.float64)
    piece_rate = np.empty(64, np.float64)
    last_multiply_start = scalars[0]
    stationary_loaded = scalars[1] != 0.0
    clock = scalars[2]
    capacity = scalars[3]
    eps = scalars[4]
    dma_latency = scalars[5]
    port_bookings = counters[0]
    dma_bookings = counters[1]
    n_queues = len(queue_free)
    failed = -1
    done_count = n
    for index in range(n):
        uid = uids[index]
        code = code_of[uid]
        # --- dependencies ---
        ready = 0.0
        cause = _NO_WAIT
        for j in range(r_ptr[uid], r_ptr[uid + 1]):  # each read region's neighbours, in order
            region = reads[j]
            for k in range(nb_ptr[region], nb_ptr[region + 1]):
                other = neighbors[k]
                if w_ready[other] > ready:
                    ready = w_ready[other]
                    cause = w_engine[other]
        if w_ptr[uid + 1] > w_ptr[uid]:
            if code >= 0:
                same = code
            elif dma_queue[uid] >= 0:
                same = _DMA_BASE + dma_queue[uid]
            else:
                same = -99
            for j in range(w_ptr[uid], w_ptr[uid + 1]):
                region = writes[j]
                for k in range(nb_ptr[region], nb_ptr[region + 1]):
                    other = neighbors[k]
                    if r_done[other] > ready:
                        ready = r_done[other]
                        cause = r_engine[other]
                    if w_ready[other] > ready and w_engine[other] != same:
                        ready = w_ready[other]
                        cause = w_engine[other]
        # --- stream, pipeline, ports ---
        if code < 0:
            queue = dma_queue[uid]
            if dma_in_place[uid]:
                if queue < 0:
                    queue = 0
                start = ready
                end = ready
            else:
                if queue < 0:
                    queue = 0
                    for q in range(1, n_queues):
                        if queue_free[q] < queue_free[queue]:
                            queue = q
                data_start = ready + dma_latency
                if queue_free[queue] > data_start:
                    data_start = queue_free[queue]
                # reserve_pieces on the engine pool (no shared HBM timeline)
                work = dma_work[uid]
                max_rate = dma_engines[uid]
                pieces = 0
                if work > 0:
                    t = data_start
                    i = _bisect_right(pool_times, pool_n, t) - 1
                    if i < 0:
                        i = 0
                    floor = max_rate * 1e-9
                    while True:
                        rate = capacity - pool_used[i]
                        if max_rate <= rate:
                            rate = max_rate
                        following = pool_times[i + 1] if i + 1 < pool_n else np.inf
                        if rate > floor:
                            finish = t + work / rate
                            if pieces == len(piece_start):
                                piece_start = _grow(piece_start, pieces + 1)
                                piece_end = _grow(piece_end, pieces + 1)
                                piece_rate = _grow(piece_rate, pieces + 1)
                            if finish <= following:
                                piece_start[pieces] = t
                                piece_end[pieces] = finish
                                piece_rate[pieces] = rate
                                pieces += 1
                                t = finish
                                break
                            work -= rate * (following - t)
                            piece_start[pieces] = t
                            piece_end[pieces] = following
                            piece_rate[pieces] = rate
                            pieces += 1
                        t = following
                        if i + 1 < pool_n and pool_times[i + 1] <= t:
                            i += 1
                    for p in range(pieces):
                        # RateTimeline.add
                        s, e, amount = piece_start[p], piece_end[p], piece_rate[p]
                        if e <= s:
                            continue
                        cut_start = 0
                        cut_end = 0
                        for c in range(2):
                            tc = s if c == 0 else e
                            at = _bisect_left(pool_times, pool_n, tc)
                            if not (at < pool_n and pool_times[at] == tc):
                                if pool_n + 1 > len(pool_times):
                                    pool_times = _grow(pool_times, pool_n + 1)
                                    pool_used = _grow(pool_used, pool_n + 1)
                                for m in range(pool_n, at, -1):
                                    pool_times[m] = pool_times[m - 1]
                                    pool_used[m] = pool_used[m - 1]
                                pool_times[at] = tc
                                pool_used[at] = pool_used[at - 1] if at else 0.0
                                pool_n += 1
                            if c == 0:
                                cut_start = at
                            else:
                                cut_end = at
                        for m in range(cut_start, cut_end):
                            pool_used[m] += amount
                        for c in range(2):
                            at = cut_end if c == 0 else cut_start  # as RateTimeline.add: j, then i
                            if 0 < at < pool_n and abs(pool_used[at] - pool_used[at - 1]) <= eps:
                                for m in range(at, pool_n - 1):
                                    pool_times[m] = pool_times[m + 1]
                                    pool_used[m] = pool_used[m + 1]
                                pool_n -= 1
                end = piece_end[pieces - 1] if pieces else data_start
                total = dma_work[uid]
                if moved + pieces > len(moved_record):
                    moved_record = _grow(moved_record, moved + pieces)
                    moved_times = _grow(moved_times, 3 * len(moved_record))
                for p in range(pieces):
                    moved_record[moved] = index
                    moved_times[3 * moved] = piece_start[p]
                    moved_times[3 * moved + 1] = piece_end[p]
                    moved_times[3 * moved + 2] = piece_rate[p] * (piece_end[p] - piece_start[p]) / total
                    moved += 1
                queue_free[queue] = end
                dma_bookings += 1
                if dma_bookings % _DMA_PRUNE_EVERY == 0:
                    horizon = queue_free[0]
                    for q in range(1, n_queues):
                        if queue_free[q] < horizon:
                            horizon = queue_free[q]
                    cut = _bisect_right(pool_times, pool_n, horizon) - 1
                    if cut > 0:
                        for m in range(cut, pool_n):
                            pool_times[m - cut] = pool_times[m]
                            pool_used[m - cut] = pool_used[m]
                        pool_n -= cut
                start = data_start - dma_latency
            code = _DMA_BASE + queue
            if start > ready:
                cause = _QUEUE
            done = end
        else:
            start = stream_free[code]
            if ready > start:
                start = ready
            else:
                cause = _NO_WAIT
            if code <= _TENSOR:
                if is_load_of[uid]:
                    if last_multiply_start > start:
                        start = last_multiply_start
                        cause = _PIPELINE
                    stationary_loaded = True
                else:
                    if is_matmul_of[uid] and not stationary_loaded:
                        failed = index
                        done_count = index
                        break
                    load_done = stream_free[_TENSOR_LOAD]
                    if load_done > start:
                        start = load_done
                        cause = _PIPELINE
                    last_multiply_start = start
            if p_ptr[uid + 1] > p_ptr[uid]:
                busy = busy_of[uid]
                while True:
                    moved_to = start
                    for k in range(p_ptr[uid], p_ptr[uid + 1]):
                        port = ports_of[k]
                        # BusyIntervals.earliest
                        length = port_len[port]
                        j = _bisect_right(port_ends[port], length, moved_to)
                        while j < length:
                            if port_starts[port, j] >= moved_to + busy:
                                break
                            if port_ends[port, j] > moved_to:
                                moved_to = port_ends[port, j]
                            j += 1
                    if moved_to == start:
                        break
                    start = moved_to
                    cause = _PORT
                for k in range(p_ptr[uid], p_ptr[uid + 1]):
                    port = ports_of[k]
                    # BusyIntervals.book
                    s, e = start, start + busy
                    if e <= s:
                        continue
                    length = port_len[port]
                    if length == port_starts.shape[1]:
                        wider = np.zeros((port_starts.shape[0], 2 * length), np.float64)
                        wider[:, :length] = port_starts
                        port_starts = wider
                        wider = np.zeros((port_ends.shape[0], 2 * length), np.float64)
                        wider[:, :length] = port_ends
                        port_ends = wider
                    j = _bisect_left(port_starts[port], length, s)
                    for m in range(length, j, -1):
                        port_starts[port, m] = port_starts[port, m - 1]
                        port_ends[port, m] = port_ends[port, m - 1]
                    port_starts[port, j] = s
                    port_ends[port, j] = e
                    port_len[port] = length + 1
                port_bookings += 1
                if port_bookings % _PORT_PRUNE_EVERY == 0:
                    for port in range(len(port_len)):
                        horizon = np.inf
                        for s_code in range(port_streams.shape[1]):
                            if port_streams[port, s_code] and stream_free[s_code] < horizon:
                                horizon = stream_free[s_code]
                        length = port_len[port]
                        cut = _bisect_right(port_ends[port], length, horizon)
                        if cut:
                            for m in range(cut, length):
                                port_starts[port, m - cut] = port_starts[port, m]
                                port_ends[port, m - cut] = port_ends[port, m]
                            port_len[port] = length - cut
            end = start + busy_of[uid]
            done = start + latency_of[uid]
            stream_free[code] = end
        # --- commit ---
        for k in range(r_ptr[uid], r_ptr[uid + 1]):
            region = reads[k]
            if end > r_done[region]:
                r_done[region] = end
                r_engine[region] = code
        for k in range(w_ptr[uid], w_ptr[uid + 1]):
            region = writes[k]
            if done > w_ready[region]:
                w_ready[region] = done
            w_engine[region] = code
        if start > clock:
            clock = start
        starts[index] = start
        ends[index] = end
        dones[index] = done
        codes[index] = code
        causes[index] = cause
    scalars[0] = last_multiply_start
    scalars[1] = 1.0 if stationary_loaded else 0.0
    scalars[2] = clock
    counters[0] = port_bookings
    counters[1] = dma_bookings
    return (failed, starts[:done_count], ends[:done_count], dones[:done_count],
            codes[:done_count], causes[:done_count], moved_record[:moved],
            moved_times[:3 * moved].copy(), pool_times[:pool_n].copy(), pool_used[:pool_n].copy(),
            port_starts, port_ends)
