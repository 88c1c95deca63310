"""`trnsim validate`: predicted vs published measurements, row by row, with MAPE.

Rows use the columns of shared/calibration/measurements.csv (the calibration set ships with the
package as the default). Model rows run through the compiler (models built from their configs by
`trnsim.perf.zoo`), kernel rows through trnsim's kernel library or a user's kernel, collective
rows through the collectives layer. Rows trnsim cannot interpret are reported with the reason,
never fatal.

A kernel row names a user's kernel as ``FILE.py::KERNEL SHAPES`` (or ``package.module::KERNEL
SHAPES``), the way `trnsim kernel run` does: SHAPES are the inputs in argument order, e.g.
``4096x8192,8192x8192``, with the row's dtype as their default dtype; a relative FILE.py is found
next to the CSV first. The predicted value is the kernel's simulated device time on one
NeuronCore of the row's instance. Otherwise the name must describe a kernel of trnsim's library
(`trnsim.kernels.tutorials.predict_named_kernel`).
"""

from __future__ import annotations

import csv
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path

from trnsim.errors import TrnsimError

COLUMNS = ("id", "kind", "name", "instance", "cores", "dtype", "batch", "seq", "metric", "value",
           "unit", "source", "notes")
_UNITS_TO_MS = {"ms": 1.0, "us": 1e-3, "s": 1e3}
_CSV_DIR = "_csv_dir"


@dataclass
class RowResult:
    id: str
    kind: str
    name: str
    instance: str
    measured: float | None
    unit: str
    predicted: float | None = None
    error_pct: float | None = None
    status: str = "ok"  # "ok" | "skipped" | "error"
    reason: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def default_csv() -> Path:
    return Path(str(resources.files("trnsim.perf") / "data" / "measurements.csv"))


def read_rows(path: str | Path) -> list[dict]:
    with open(path, newline="") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in ("id", "kind", "name", "metric", "value", "unit") if c not in
                   (reader.fieldnames or [])]
        if missing:
            raise TrnsimError(f"{path}: missing column(s) {', '.join(missing)}; expected the "
                              f"columns of measurements.csv ({', '.join(COLUMNS)})")
        return [dict(row) for row in reader]


def _size_bytes(text: str) -> int | None:
    match = re.search(r"(\d+(?:\.\d+)?)\s*(KiB|MiB|GiB|KB|MB|GB|B)\b", text)
    if not match:
        return None
    scale = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "KB": 1e3, "MB": 1e6, "GB": 1e9}
    return int(float(match.group(1)) * scale[match.group(2)])


def _auto_cast(dtype_text: str) -> tuple[str | None, str]:
    """(auto_cast, type) from a row's dtype text; None when the row names none: the
    instance's compiler compiled with its defaults (`trnsim.compiler.options.default_auto_cast`)."""
    text = (dtype_text or "").lower()
    if not text:
        return None, "bf16"
    if "fp32" in text and "auto-cast" not in text and "bf16" not in text:
        return "none", "bf16"
    for name, key in (("fp16", "fp16"), ("fp8", "fp8_e4m3"), ("tf32", "tf32")):
        if f"to {name}" in text or text == name:
            return "matmult", key
    return "matmult", "bf16"


def predict_model(row: dict) -> float:
    """Latency in ms of a model row, compiled for the row's batch on one NeuronCore."""
    from trnsim.perf.bench import model_latency_ms

    auto_cast, cast_type = _auto_cast(row.get("dtype", ""))
    return model_latency_ms(row["name"], row["instance"], int(row.get("batch") or 1),
                            int(row.get("seq") or 0) or None, auto_cast, cast_type)


def predict_kernel(row: dict) -> float:
    """Latency in ms of a kernel row (see the module docstring for how rows name kernels)."""
    if "::" in row["name"]:
        return predict_user_kernel(row)
    from trnsim.kernels.tutorials import predict_named_kernel

    return predict_named_kernel(row["name"], row["instance"], row.get("dtype") or "bf16")


def predict_user_kernel(row: dict) -> float:
    from trnsim import hardware
    from trnsim.nki import typing as nt
    from trnsim.nki.files import load_kernel, parse_shapes

    target, _, shapes = row["name"].strip().partition(" ")
    if not shapes.strip():
        raise TrnsimError(f"kernel row {row['name']!r}: give the input shapes after the kernel, "
                          f"e.g. 'kernels.py::matmul 4096x8192,8192x8192'")
    dtype = (row.get("dtype") or "bf16").strip().lower()
    specs = parse_shapes(shapes.strip(), dtype)  # trnsim.numerics reads bf16/fp16/fp32 too
    kernel = load_kernel(target, row.get(_CSV_DIR))
    core = hardware.instance(row["instance"]).chip.core
    kernel.run(tuple(nt.tensor[list(shape), dt] for shape, dt in specs), {}, mode="timing",
               target=core)
    return kernel.last_run.latency_ns / 1e6


def predict_collective(row: dict) -> float:
    """nccom-test time (us) of a collective row: size from the id/name/notes, ranks from cores."""
    from trnsim.collectives import Collective, Fabric, iteration_time_ns

    text = " ".join(row.get(k, "") for k in ("id", "name", "notes"))
    size = _size_bytes(text)
    if size is None:
        raise TrnsimError("no message size (e.g. 1MiB) in the row's id, name or notes")
    op = {"all-reduce": "all_reduce", "all-gather": "all_gather",
          "reduce-scatter": "reduce_scatter", "all-to-all": "all_to_all"}.get(row["name"].lower())
    if op is None:
        raise TrnsimError(f"unknown collective {row['name']!r}")
    ranks = int(row.get("cores") or 2)
    dtype = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}.get(row.get("dtype", ""),
                                                                          row.get("dtype") or "uint8")
    time_ns, _ = iteration_time_ns(Fabric(row["instance"]), Collective(op, size, dtype, ranks))
    return time_ns / 1e3


def predict_generation(row: dict) -> float:
    """TTFT or TPOT (ms) of an LLM generation row (`trnsim.perf.serving.validation`)."""
    from trnsim.perf.serving.validation import predict_generation as predict

    return predict(row)


PREDICTORS: dict[str, Callable[[dict], float]] = {
    "model": predict_model, "kernel": predict_kernel, "collective": predict_collective,
    "generation": predict_generation}


def validate(path: str | Path | None = None, *, kinds: tuple[str, ...] | None = None,
             ids: set[str] | None = None,
             progress: Callable[[str], None] | None = None) -> list[RowResult]:
    """Predict every row (of `kinds`, with an id in `ids`, when given) of a measurements CSV."""
    results = []
    path = Path(path or default_csv())
    for row in read_rows(path):
        row[_CSV_DIR] = str(path.parent)  # where a row's relative kernel file is looked for
        if ids is not None and row.get("id") not in ids:
            continue
        result = _row_result(row)
        if result.status == "ok" and (kinds is None or row["kind"] in kinds):
            if progress:
                progress(row["id"])
            _predict(row, result)
        elif kinds is not None and row.get("kind") not in kinds and result.status == "ok":
            result.status, result.reason = "skipped", f"kind {row['kind']!r} not selected"
        results.append(result)
    return results


def _row_result(row: dict) -> RowResult:
    try:
        measured = float(row["value"])
    except (TypeError, ValueError):
        return RowResult(row.get("id", "?"), row.get("kind", "?"), row.get("name", "?"),
                         row.get("instance", ""), None, row.get("unit", ""), status="skipped",
                         reason=f"value {row.get('value')!r} is not a number")
    result = RowResult(row["id"], row["kind"], row["name"], row.get("instance", ""), measured,
                       row["unit"])
    if row["kind"] not in PREDICTORS:
        result.status, result.reason = "skipped", f"unknown kind {row['kind']!r}"
    elif row["unit"] not in _UNITS_TO_MS:
        result.status, result.reason = "skipped", f"unit {row['unit']!r} is not a time"
    return result


def _predict(row: dict, result: RowResult) -> None:
    try:
        value = PREDICTORS[row["kind"]](row)
    except TrnsimError as error:
        result.status, result.reason = "skipped", str(error)
        return
    except Exception as error:  # a bug must not hide the other rows; it is reported as such
        result.status, result.reason = "error", f"{type(error).__name__}: {error}"
        return
    native_ms = {"model": 1.0, "kernel": 1.0, "collective": 1e-3, "generation": 1.0}[row["kind"]]
    result.predicted = value * native_ms / _UNITS_TO_MS[row["unit"]]
    result.error_pct = 100.0 * (result.predicted - result.measured) / result.measured


def mape(results: list[RowResult], kind: str | None = None) -> float | None:
    errors = [abs(r.error_pct) for r in results
              if r.error_pct is not None and (kind is None or r.kind == kind)]
    return sum(errors) / len(errors) if errors else None
