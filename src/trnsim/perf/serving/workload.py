"""Serving workloads: requests with an arrival time and prompt/output lengths.

Arrivals are Poisson (exponential gaps) or at a fixed rate, or read from a trace file (CSV or
JSON lines with ``arrival_s`` or ``arrival_ms``, ``input_tokens``, ``output_tokens``; loading a
trace reads numbers only). Lengths are fixed or drawn from a named distribution
(``uniform:LO:HI``, ``normal:MEAN:STD``, clipped to at least one token). The published Neuron
vLLM benchmarks use 1500 prompt and 250 output tokens (`NEURON_VLLM_WORKLOAD`).
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trnsim.errors import InvalidArgumentError, LimitExceededError

NEURON_VLLM_WORKLOAD = (1500, 250)  # input, output tokens of the published vLLM-on-Neuron runs
MAX_REQUESTS = 1_000_000  # a bound on what one simulation holds in memory


@dataclass(frozen=True)
class Request:
    id: int
    arrival_ms: float
    input_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class LengthDistribution:
    kind: str  # "fixed" | "uniform" | "normal"
    a: float
    b: float = 0.0

    @classmethod
    def parse(cls, text: str | int) -> LengthDistribution:
        text = str(text).strip().lower()
        name, _, rest = text.partition(":")
        try:
            if not rest:
                return cls("fixed", int(name))
            lo, _, hi = rest.partition(":")
            dist = cls(name, float(lo), float(hi))
        except ValueError:
            raise InvalidArgumentError(f"length {text!r}: write N, uniform:LO:HI or "
                                       f"normal:MEAN:STD") from None
        if dist.kind not in ("uniform", "normal"):
            raise InvalidArgumentError(f"length distribution {name!r}: known fixed, uniform, "
                                       f"normal")
        return dist

    def sample(self, count: int, rng: np.random.Generator) -> np.ndarray:
        if self.kind == "fixed":
            values = np.full(count, self.a)
        elif self.kind == "uniform":
            values = rng.integers(int(self.a), int(self.b) + 1, count)
        else:
            values = np.rint(rng.normal(self.a, self.b, count))
        return np.maximum(values, 1).astype(np.int64)


def _check_count(count: int) -> None:
    if count < 1:
        raise InvalidArgumentError(f"request count must be >= 1; got {count}")
    if count > MAX_REQUESTS:
        raise LimitExceededError("request count", count, MAX_REQUESTS)


def synthetic(count: int, rate_per_s: float, inputs: LengthDistribution,
              outputs: LengthDistribution, *, arrivals: str = "poisson", seed: int = 0
              ) -> list[Request]:
    """`count` requests arriving at `rate_per_s` (Poisson or evenly spaced)."""
    _check_count(count)
    if rate_per_s <= 0:
        raise InvalidArgumentError(f"request rate must be > 0 per second; got {rate_per_s}")
    rng = np.random.default_rng(seed)
    if arrivals == "poisson":
        gaps = rng.exponential(1e3 / rate_per_s, count)
        times = np.cumsum(gaps) - gaps[0]
    elif arrivals == "fixed":
        times = np.arange(count) * (1e3 / rate_per_s)
    else:
        raise InvalidArgumentError(f"arrivals {arrivals!r}: known poisson, fixed")
    ins, outs = inputs.sample(count, rng), outputs.sample(count, rng)
    return [Request(i, float(t), int(a), int(b))
            for i, (t, a, b) in enumerate(zip(times, ins, outs, strict=True))]


def read_trace(path: str | Path) -> list[Request]:
    """Requests from a CSV or JSON-lines trace (columns in the module docstring)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise InvalidArgumentError(f"trace {path}: {error}") from None
    if path.suffix in (".jsonl", ".json"):
        try:
            rows = [json.loads(line) for line in text.splitlines() if line.strip()]
        except ValueError as error:
            raise InvalidArgumentError(f"trace {path}: not JSON lines ({error})") from None
    else:
        rows = list(csv.DictReader(text.splitlines()))
    _check_count(len(rows))
    requests = []
    for number, row in enumerate(rows, start=1):
        try:
            arrival = (float(row["arrival_ms"]) if "arrival_ms" in row
                       else float(row["arrival_s"]) * 1e3)
            request = Request(len(requests), arrival, int(row["input_tokens"]),
                              int(row["output_tokens"]))
        except (KeyError, TypeError, ValueError) as error:
            raise InvalidArgumentError(f"trace {path} row {number}: needs arrival_s or "
                                       f"arrival_ms, input_tokens, output_tokens ({error})"
                                       ) from None
        if request.input_tokens < 1 or request.output_tokens < 1 or arrival < 0:
            raise InvalidArgumentError(f"trace {path} row {number}: lengths must be >= 1 and "
                                       f"the arrival >= 0")
        requests.append(request)
    requests.sort(key=lambda r: r.arrival_ms)
    return [Request(i, r.arrival_ms, r.input_tokens, r.output_tokens)
            for i, r in enumerate(requests)]
