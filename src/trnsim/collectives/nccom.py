"""nccom-test's sweep and arithmetic: sizes, per-size rows, bandwidths and the correctness check.

Units follow the nccom-test documentation (NCCOM_DOC): ``algbw = size(B) / time`` in gibibytes
per second (2^30 bytes), printed under the heading "GB/s" — the published example agrees
(1,073,741,824 B in 18,930 us -> 52.83); ``busbw = algbw * bus_factor(op, ranks)``; the average
bus bandwidth is the mean of the busbw column. ``time`` is the steady-state time of one iteration
when iterations run back to back (`api.iteration_time_ns`); the simulation is deterministic, so
avg = p50 = p99 whatever ``-n``/``-w`` say.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from trnsim.collectives.api import iteration_time_ns
from trnsim.collectives.engine import Fabric
from trnsim.collectives.functional import make_inputs
from trnsim.collectives.ops import bus_factor, canonical_op, reference
from trnsim.collectives.records import Collective
from trnsim.errors import InvalidArgumentError, LimitExceededError
from trnsim.numerics import DType, dtype

GIB = 2**30
_UNITS = {"": 1, "b": 1, "k": 2**10, "kb": 2**10, "kib": 2**10, "m": 2**20, "mb": 2**20,
          "mib": 2**20, "g": 2**30, "gb": 2**30, "gib": 2**30}
NCCOM_TYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
CHECK_PATTERNS = ("random", "all_ones")
# The check holds every rank's buffers in memory: a limit of the simulator, not of the hardware.
CHECK_MAX_BYTES = 2**30
# A sweep prints one row per size and simulates each: nccom-test's own sweeps are tens of rows
MAX_SWEEP_ROWS = 1000
# Instances in one run: the fabric is built per node (a 64-instance UltraCluster slice is the
# largest published nccom-test run; 1024 leaves room without letting a typo exhaust memory)
MAX_NODES = 1024


def parse_size(text: str | int) -> int:
    """'32M', '1kb', '1GB', '4096' -> bytes (K, M, G are binary multiples, as nccom-test's)."""
    if isinstance(text, int):
        return text
    match = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", str(text))
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _UNITS:
        raise InvalidArgumentError(f"size {text!r} is not a byte count like 4096, 64K, 32M or 1GB")
    return int(match.group(1)) * _UNITS[unit]


def sweep(minbytes: int, maxbytes: int, factor: float | None = None,
          step: int | None = None) -> list[int]:
    """Sizes from min to max (inclusive): times `factor`, else plus `step`, else plus
    (max - min) / 10 (nccom-test's default step)."""
    if minbytes < 0 or maxbytes < 0:
        raise InvalidArgumentError(f"sizes must not be negative (got {minbytes}, {maxbytes})")
    if minbytes > maxbytes:
        raise InvalidArgumentError(f"minimum size {minbytes} B is larger than maximum "
                                   f"{maxbytes} B")
    if factor is not None and step is not None:
        raise InvalidArgumentError("give a step factor (-f) or a step in bytes (-i), not both")
    if factor is not None:
        if not math.isfinite(factor) or factor <= 1 or minbytes == 0:
            raise InvalidArgumentError(f"step factor {factor} must be a finite number above 1 and "
                                       "the minimum size must be positive")
        rows = math.floor(math.log(maxbytes / minbytes) / math.log(factor)) + 1
        if rows > MAX_SWEEP_ROWS:
            raise LimitExceededError("sizes in the sweep", rows, MAX_SWEEP_ROWS,
                                     context=f"-b {minbytes} -e {maxbytes} -f {factor}")
        sizes, size = [], float(minbytes)
        while size <= maxbytes:
            sizes.append(int(size))
            size *= factor
        return sizes
    if step is not None and step <= 0:
        raise InvalidArgumentError(f"step in bytes (-i) {step} must be positive")
    if step is not None and (maxbytes - minbytes) // step + 1 > MAX_SWEEP_ROWS:
        raise LimitExceededError("sizes in the sweep", (maxbytes - minbytes) // step + 1,
                                 MAX_SWEEP_ROWS, context=f"-b {minbytes} -e {maxbytes} -i {step}")
    if step is None:
        step = (maxbytes - minbytes) // 10
    if step <= 0:
        return [minbytes] if minbytes == maxbytes else [minbytes, maxbytes]
    return list(range(minbytes, maxbytes + 1, step))


@dataclass(frozen=True)
class Row:
    size_bytes: int
    count: int
    type: str
    time_us: float
    algbw: float  # GiB/s
    busbw: float  # GiB/s
    algorithm: str
    check_errors: int | None = None  # mismatching elements when checked


@dataclass(frozen=True)
class Report:
    rows: tuple[Row, ...]

    @property
    def avg_busbw(self) -> float:
        return float(np.mean([r.busbw for r in self.rows])) if self.rows else 0.0

    @property
    def check_errors(self) -> int:
        return sum(r.check_errors or 0 for r in self.rows)


def type_name(dt: DType) -> str:
    """The name nccom-test prints in its type column (fp32, bf16, fp16, uint8, ...)."""
    return NCCOM_TYPES.get(dt.name, dt.name)


def run(op: str, ranks: int, sizes: Sequence[int], instance: str = "trn1.32xlarge",
        nodes: int = 1, dtype_name: str = "uint8", algorithm: str | None = None,
        lnc: int | None = None, check: str | None = None) -> Report:
    """One row per size, as nccom-test prints them."""
    op = canonical_op(op)
    dt = dtype(dtype_name)
    if not 1 <= nodes <= MAX_NODES:
        raise LimitExceededError("nodes (-N)", nodes, f"1..{MAX_NODES}")
    if ranks < 1:
        raise InvalidArgumentError(f"ranks (-r) {ranks} must be positive")
    if check is not None and check not in CHECK_PATTERNS:
        raise InvalidArgumentError(f"check {check!r} is not one of {', '.join(CHECK_PATTERNS)}")
    fabric = Fabric(instance, nodes, lnc)
    rows = []
    for size in sizes:
        request = Collective(op, size, dt, ranks, algorithm)
        time_ns, result = iteration_time_ns(fabric, request)
        algbw = size / (time_ns * 1e-9) / GIB if time_ns > 0 else 0.0
        name = result.algorithm
        errors = _check(fabric, request, check) if check else None
        rows.append(Row(size, result.count, type_name(dt), time_ns / 1e3, algbw,
                        algbw * bus_factor(op, result.ranks), name, errors))
    return Report(tuple(rows))


def _check(fabric: Fabric, request: Collective, pattern: str) -> int:
    """Run the collective on data and count the elements that differ from numpy's answer."""
    dt = dtype(request.dtype)
    ranks = int(request.ranks)
    total = ranks * int(request.nbytes)
    if total > CHECK_MAX_BYTES:
        raise LimitExceededError("--check data (ranks x size, bytes)", total, CHECK_MAX_BYTES,
                                 context="the check holds every rank's buffers in memory")
    count = int(request.nbytes) // dt.itemsize
    inputs = make_inputs(request.op, count, ranks, dt, seed=0, pattern=pattern)
    functional = Collective(request.op, request.nbytes, dt, ranks, request.algorithm, inputs)
    outputs = fabric.idle_copy().run(functional).outputs
    expected = reference(request.op, inputs)
    return sum(_mismatches(got, want, dt, ranks) for got, want in zip(outputs, expected,
                                                                       strict=True))


def _mismatches(got: np.ndarray, want: np.ndarray, dt: DType, ranks: int) -> int:
    """Integers must match exactly. Float inputs lie in [-1, 1], so every partial sum is at most
    `ranks` in magnitude and each of the at most `ranks` roundings errs by at most eps times that."""
    if not dt.is_float:
        return int(np.count_nonzero(got != want))
    tolerance = ranks * ranks * float(dt.info.eps)
    return int(np.count_nonzero(np.abs(got.astype(np.float64) - want) > tolerance))
