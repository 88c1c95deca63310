"""`trnsim validate`: predicted vs published measurements, row by row, with MAPE.

Rows use the columns of shared/calibration/measurements.csv (the calibration set ships with the
package as the default). Any CSV with at least the columns id, kind, name, metric, value and unit
is read; every row trnsim cannot interpret is reported as skipped with the reason, never fatal.

Each row's ``kind`` is looked up in `KINDS`, a table of `RowKind` records (how to predict the
row, in which unit, which units it accepts). Another kind of row is one `register_kind` call away;
a kind with no record is skipped with the reason (`PENDING_KINDS` says what is still to come).

What the columns mean here:

- ``batch``, ``seq``, ``cores``, ``nodes``: the leading integer is read, so ``128 (assumed)`` is
  128 and ``224x224`` or ``224²`` is 224; a vision model's ``seq`` is ignored (its input is an
  image of the size its config gives). An empty ``seq`` is the model's default.
- ``name`` (model rows): a model trnsim's zoo knows, a checkpoint of the offline config set (an
  organisation prefix such as ``google/`` and case are ignored; see `trnsim.perf.zoo`), or a path
  to a Hugging Face ``config.json`` (relative paths are found next to the CSV first). The
  predicted value is one inference on one NeuronCore of the row's instance, end to end through
  the framework as published latencies are (host dispatch, inputs copied in and outputs out
  over PCIe around the device time: `trnsim.runtime.host_time`), or the device time alone when
  the row's metric or notes say "device time" / "device latency".
- ``dtype`` (model rows) names the model's data type as the framework held it, not compiler
  flags: ``fp32`` (or nothing) is an fp32 model compiled with the instance compiler's default
  casting, as the published runs were (neuron-cc on inf1 casts every fp32 operator to bf16,
  neuronx-cc the matmuls: `trnsim.compiler.options.default_auto_cast`); so an ``fp32`` row on inf1
  keeps neuron-cc's cast. ``bf16``/``fp16`` alone is a model held in that type (every operator in
  it: ``--auto-cast all``). Casting is changed only when the text says so: ``matmuls auto-cast to
  bf16`` (matmult), ``auto-cast all`` or ``auto-cast none`` / ``no auto-cast``.
- compiler mode (model rows on neuronx-cc instances): a ``model_type`` column if the CSV has one,
  else the default of the SDK the row names ("SDK 2.26" in its source or notes): torch-neuronx
  passes ``--model-type=transformer`` from Neuron 2.14 on, earlier runs compiled with
  neuronx-cc's default ``generic`` (`trnsim.compiler.options.MODEL_TYPES`); a row naming no SDK
  gets trnsim's default (transformer), or that of the SDK the user assumes for such rows
  (``validate(assume_sdk="2.10")``, ``--assume-sdk``: the shipped seed rows from a 2023 blog name
  none; the data stays as published and the assumption is the user's, shown in the command).
  ``validate(model_type=...)`` overrides every row. inf1 rows compile with neuron-cc, which has
  no ``--model-type``: always generic.
- ``name`` (kernel rows): a user's kernel as ``FILE.py::KERNEL SHAPES`` (or
  ``package.module::KERNEL SHAPES``), the way `trnsim kernel run` names one (SHAPES are the inputs
  in argument order, e.g. ``4096x8192,8192x8192``, the row's dtype their default dtype; a relative
  FILE.py is found next to the CSV first), or a kernel of trnsim's library by description: the NKI
  matmul tutorial's naive, hoisted loads, blocked free dimension and fully optimized variants
  (`trnsim.kernels.tutorials.predict_named_kernel`). The predicted value is the kernel's simulated
  device time on one NeuronCore of the row's instance.
- collective rows: ``name`` is the operation (all-reduce, all-gather, reduce-scatter,
  all-to-all, permute, send-recv), the message size is read from the id, name or notes
  (``512KiB``), ``cores`` is the rank count, ``nodes`` the number of instances (nccom-test's
  ``-N``), the dtype the elements' type (``fp32``). The algorithm is the runtime's choice unless
  the row names one, in an ``algorithm`` column or as "the <name> algorithm" in its notes. The
  predicted value is nccom-test's time:avg.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path

from trnsim.errors import TrnsimError

COLUMNS = ("id", "kind", "name", "instance", "cores", "dtype", "batch", "seq", "metric", "value",
           "unit", "source", "notes", "nodes")
REQUIRED_COLUMNS = ("id", "kind", "name", "metric", "value", "unit")
TIME_UNITS_PER_MS = {"ms": 1.0, "us": 1e3, "s": 1e-3}  # how many of each unit one ms is
_UNITS_TO_MS = {unit: 1.0 / per_ms for unit, per_ms in TIME_UNITS_PER_MS.items()}  # one unit in ms
_CSV_DIR = "_csv_dir"
_MODEL_TYPE_OVERRIDE = "_model_type"
_ASSUMED_SDK = "_assumed_sdk"


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


@dataclass(frozen=True)
class RowKind:
    """How rows of one kind are predicted: `predict(row)` returns the value in `native_unit`;
    `units` gives each accepted unit's size relative to the others (how many of it make one
    common reference amount, e.g. `TIME_UNITS_PER_MS`)."""

    name: str
    predict: Callable[[dict], float]
    native_unit: str
    units: Mapping[str, float]
    # predicted when no --kinds is given; False for kinds whose rows take minutes each
    by_default: bool = True

    def convert(self, value: float, unit: str) -> float:
        return value * self.units[unit] / self.units[self.native_unit]


KINDS: dict[str, RowKind] = {}
# kinds of the calibration set that no predictor handles yet, and why
PENDING_KINDS: dict[str, str] = {}


def register_kind(kind: RowKind) -> None:
    """Add (or replace) the predictor of a kind of row."""
    KINDS[kind.name] = kind


def default_csv() -> Path:
    return Path(str(resources.files("trnsim.perf") / "data" / "measurements.csv"))


def read_rows(path: str | Path) -> list[dict]:
    try:
        with open(path, newline="") as handle:
            reader = csv.DictReader(handle)
            missing = [c for c in REQUIRED_COLUMNS if c not in (reader.fieldnames or [])]
            if missing:
                raise TrnsimError(f"{path}: missing column(s) {', '.join(missing)}; expected the "
                                  f"columns of measurements.csv ({', '.join(COLUMNS)})")
            return [{k: (v or "").strip() for k, v in row.items() if k is not None}
                    for row in reader]
    except OSError as error:
        raise TrnsimError(f"cannot read {path}: {error.strerror or error}") from None
    except (csv.Error, UnicodeDecodeError) as error:
        raise TrnsimError(f"{path} is not a readable CSV: {error}") from None


# --- reading a row's fields --------------------------------------------------------------------
def leading_int(row: dict, column: str, default: int | None = None) -> int | None:
    """The integer a field starts with ('128 (assumed)' -> 128, '224x224' -> 224); `default`
    when empty; an error naming the column otherwise."""
    text = (row.get(column) or "").strip()
    if not text:
        return default
    match = re.match(r"\d+", text)
    if match is None:
        raise TrnsimError(f"{column} {text!r} does not start with a whole number")
    return int(match.group())


def _size_bytes(text: str) -> int | None:
    match = re.search(r"(\d+(?:\.\d+)?)\s*(KiB|MiB|GiB|KB|MB|GB|B)\b", text)
    if not match:
        return None
    scale = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "KB": 1e3, "MB": 1e6, "GB": 1e9}
    return int(float(match.group(1)) * scale[match.group(2)])


_CAST_TYPES = (("fp16", "fp16"), ("bf16", "bf16"), ("fp8", "fp8_e4m3"), ("tf32", "tf32"))


def auto_cast_of(dtype_text: str) -> tuple[str | None, str]:
    """(auto_cast, auto_cast_type) a model row's dtype means (module docstring); auto_cast None is
    the instance compiler's default."""
    text = " ".join((dtype_text or "").lower().replace("_", "-").split())
    cast_type = next((key for word, key in _CAST_TYPES if f"to {word}" in text), "bf16")
    if re.search(r"auto-?cast[ =]*none|no auto-?cast", text):
        return "none", "bf16"
    if re.search(r"auto-?cast[ =]*all|all (operators|ops) (auto-?)?cast", text):
        return "all", cast_type
    if "matmul" in text and "cast" in text:
        return "matmult", cast_type
    held = next((key for word, key in _CAST_TYPES if re.fullmatch(rf"{word}\b.*", text)), None)
    if held is not None and held != "tf32":
        return "all", held
    return None, "bf16"


# --- the predictors ------------------------------------------------------------------------------
def _model_name(row: dict) -> str:
    name = row["name"]
    if name.lower().endswith(".json") and not Path(name).is_absolute() and row.get(_CSV_DIR):
        beside = Path(row[_CSV_DIR]) / name
        if beside.is_file():
            return str(beside)
    return name


def model_type_of(row: dict) -> str | None:
    """The --model-type a model row compiled with (module docstring); None: trnsim's default."""
    from trnsim.compiler.options import MODEL_TYPE_DEFAULT_SINCE_SDK, MODEL_TYPES

    named = (row.get("model_type") or "").strip().lower()
    if named:
        if named not in MODEL_TYPES:
            raise TrnsimError(f"model_type {named!r}: expected one of {', '.join(MODEL_TYPES)}")
        return named
    text = " ".join(row.get(k) or "" for k in ("source", "notes"))
    match = re.search(r"\bSDK\s*v?(\d+)\.(\d+)", text, re.IGNORECASE)
    if match is None and row.get(_ASSUMED_SDK):
        match = re.fullmatch(r"\s*(\d+)\.(\d+)\s*", row[_ASSUMED_SDK])
    if match is None:
        return None
    version = (int(match.group(1)), int(match.group(2)))
    return "transformer" if version >= MODEL_TYPE_DEFAULT_SINCE_SDK else "generic"


def predict_model(row: dict) -> float:
    """Latency in ms of a model row, compiled for the row's batch on one NeuronCore."""
    from trnsim.perf.bench import model_latency_ms
    from trnsim.perf.zoo import zoo_model

    name = _model_name(row)
    entry = zoo_model(name)
    seq = None if entry.family == "vision" else leading_int(row, "seq")
    auto_cast, cast_type = auto_cast_of(row.get("dtype", ""))
    model_type = row.get(_MODEL_TYPE_OVERRIDE) or model_type_of(row)
    return model_latency_ms(name, row["instance"], leading_int(row, "batch", 1), seq, auto_cast,
                            cast_type, model_type, end_to_end=not is_device_time(row))


def is_device_time(row: dict) -> bool:
    """Whether a model row measured device time only (its metric or notes say "device time" or
    "device latency"); otherwise it is end to end through the framework, as published latencies
    are (module docstring)."""
    text = " ".join((row.get(k) or "").lower().replace("_", " ") for k in ("metric", "notes"))
    return re.search(r"\bdevice (time|latency)\b", text) is not None


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


_COLLECTIVE_NAMES = {"all-reduce": "all_reduce", "allreduce": "all_reduce",
                     "all-gather": "all_gather", "allgather": "all_gather",
                     "reduce-scatter": "reduce_scatter", "reducescatter": "reduce_scatter",
                     "all-to-all": "all_to_all", "alltoall": "all_to_all",
                     "permute": "permute", "send-recv": "sendrecv", "sendrecv": "sendrecv"}


def collective_algorithm(row: dict) -> str | None:
    """The algorithm a collective row names (an ``algorithm`` column, or "the X algorithm" in
    its notes), else None: the runtime's choice."""
    from trnsim.collectives import ALGORITHMS

    named = (row.get("algorithm") or "").strip().lower()
    if not named:
        match = re.search(r"\b([a-z0-9]+)\s+algorithm", (row.get("notes") or "").lower())
        named = match.group(1) if match and match.group(1) in ALGORITHMS else ""
    return named or None


def predict_collective(row: dict) -> float:
    """nccom-test time:avg (us) of a collective row (module docstring)."""
    from trnsim.collectives import Collective, Fabric, iteration_time_ns

    text = " ".join(row.get(k, "") for k in ("id", "name", "notes"))
    size = _size_bytes(text)
    if size is None:
        raise TrnsimError("no message size (e.g. 1MiB) in the row's id, name or notes")
    op = _COLLECTIVE_NAMES.get(row["name"].lower().replace("_", "-").replace(" ", "-"))
    if op is None:
        raise TrnsimError(f"unknown collective {row['name']!r}; known: "
                          f"{', '.join(sorted(set(_COLLECTIVE_NAMES) - {'allreduce'}))}")
    ranks = leading_int(row, "cores", 2)
    nodes = leading_int(row, "nodes", 1)
    dtype = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}.get(
        (row.get("dtype") or "").lower(), row.get("dtype") or "uint8")
    collective = Collective(op, size, dtype, ranks, algorithm=collective_algorithm(row))
    time_ns, _ = iteration_time_ns(Fabric(row["instance"], nodes=nodes), collective)
    return time_ns / 1e3


def predict_generation(row: dict) -> float:
    """TTFT or TPOT (ms) of an LLM generation row (`trnsim.perf.serving.validation`)."""
    from trnsim.perf.serving.validation import predict_generation as predict

    return predict(row)


def predict_training(row: dict) -> float:
    """Throughput (sequences or images per second) of a training row, from the planner
    (`trnsim.perf.scale.validation`)."""
    from trnsim.perf.scale.validation import predict_training as predict

    return predict(row)


THROUGHPUT_UNITS = {"seq/s": 1.0, "img/s": 1.0, "samples/s": 1.0}

for _kind in (RowKind("model", predict_model, "ms", TIME_UNITS_PER_MS),
              RowKind("training", predict_training, "seq/s", THROUGHPUT_UNITS,
                      by_default=False),
              RowKind("kernel", predict_kernel, "ms", TIME_UNITS_PER_MS),
              RowKind("collective", predict_collective, "us", TIME_UNITS_PER_MS),
              RowKind("generation", predict_generation, "ms", TIME_UNITS_PER_MS,
                      by_default=False)):
    register_kind(_kind)


# --- the run -----------------------------------------------------------------------------------
def validate(path: str | Path | None = None, *, kinds: tuple[str, ...] | None = None,
             ids: set[str] | None = None, configs: tuple[str, ...] = (),
             model_type: str | None = None, assume_sdk: str | None = None,
             progress: Callable[[str], None] | None = None) -> list[RowResult]:
    """Predict every row (of `kinds`, with an id in `ids`, when given) of a measurements CSV;
    A row named in `ids` is predicted whatever its kind's `by_default`; an id no row has is an
    `UnknownNameError` naming it (raised before any prediction).
    `configs`: Hugging Face config.json files that model names may also resolve to.
    `model_type`: the --model-type of every model row (default: per row).
    `assume_sdk`: the Neuron SDK (``"2.10"``) assumed for model rows that name none."""
    if assume_sdk is not None and not re.fullmatch(r"\s*\d+\.\d+\s*", assume_sdk):
        from trnsim.errors import InvalidArgumentError

        raise InvalidArgumentError(f"assume_sdk={assume_sdk!r}: expected a Neuron SDK version "
                                   "such as 2.10")
    if configs:
        from trnsim.perf.zoo import register_config

        for config in configs:
            register_config(config)
    results = []
    path = Path(path or default_csv())
    rows = read_rows(path)
    if ids is not None:
        from trnsim.errors import UnknownNameError

        known = {row.get("id") or "" for row in rows}
        for wanted in sorted(ids):
            if wanted not in known:
                raise UnknownNameError(f"row id (in {path.name})", wanted, known - {""})
    for row in rows:
        row[_CSV_DIR] = str(path.parent)  # where a row's relative kernel file is looked for
        if model_type:
            row[_MODEL_TYPE_OVERRIDE] = model_type
        if assume_sdk:
            row[_ASSUMED_SDK] = assume_sdk
        if ids is not None and row.get("id") not in ids:
            continue
        result = _row_result(row)
        if result.status == "ok" and kinds is not None and row["kind"] not in kinds:
            result.status, result.reason = "skipped", f"kind {row['kind']!r} not selected"
        elif (result.status == "ok" and kinds is None and ids is None
              and not KINDS[row["kind"]].by_default):
            result.status, result.reason = "skipped", (
                f"{row['kind']} rows take minutes each (they compose simulated tensor-parallel "
                f"steps of a large model): ask for them with --kinds {row['kind']}")
        if result.status == "ok":
            if progress:
                progress(row["id"])
            _predict(row, result)
        results.append(result)
    return results


def _row_result(row: dict) -> RowResult:
    result = RowResult(row.get("id") or "?", row.get("kind") or "?", row.get("name") or "?",
                       row.get("instance", ""), None, row.get("unit", ""))
    try:
        result.measured = float(row["value"])
    except (TypeError, ValueError):
        result.status, result.reason = "skipped", f"value {row.get('value')!r} is not a number"
        return result
    kind = KINDS.get(row["kind"])
    if kind is None:
        result.status = "skipped"
        result.reason = PENDING_KINDS.get(row["kind"], f"unknown kind {row['kind']!r} (known: "
                                          f"{', '.join(KINDS)})")
    elif row["unit"] not in kind.units:
        result.status = "skipped"
        result.reason = (f"unit {row['unit']!r} is not one {kind.name} rows are predicted in "
                         f"({', '.join(kind.units)})")
    return result


def _predict(row: dict, result: RowResult) -> None:
    kind = KINDS[row["kind"]]
    try:
        value = kind.predict(row)
    except TrnsimError as error:
        result.status, result.reason = "skipped", str(error)
        return
    except Exception as error:  # a bug must not hide the other rows; it is reported as such
        result.status, result.reason = "error", f"{type(error).__name__}: {error}"
        return
    result.predicted = kind.convert(value, row["unit"])
    result.error_pct = 100.0 * (result.predicted - result.measured) / result.measured


def mape(results: list[RowResult], kind: str | None = None) -> float | None:
    errors = [abs(r.error_pct) for r in results
              if r.error_pct is not None and (kind is None or r.kind == kind)]
    return sum(errors) / len(errors) if errors else None
