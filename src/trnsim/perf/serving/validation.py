"""`trnsim validate`'s generation rows: TTFT, TPOT or output-token throughput of a published LLM
run, predicted by timing the same generation (`generation.time_generation`).

A row names the model (a Hugging Face id trnsim ships a config for), the instance, the
parallelism (``TP32``), ``input_tokens``, ``output_tokens`` and ``concurrency`` (the batch), and
``seq`` (the compiled maximum length, transformers-neuronx's ``n_positions``). Buckets are
Neuron's defaults: powers of two from 128 up to ``seq``. The published tables give p50 figures,
so TPOT is the median of the per-token step times. The model runs in the row's ``dtype`` (bf16 or
fp16: its activations and KV cache in 16 bits, as the published runs loaded it), its matmuls
auto-cast to bf16 by the compiler's default; ``bf16+int8`` (any model dtype ``+int8``) stores
its linear weights as int8, the published "Weight Storage Data Type" int8
(`trnsim.compiler.passes.quantize`); so does a row whose notes transcribe that column as
"weight storage int8", as the calibration set's rows do.
A model of more than one layer is composed from simulated one- and two-layer models
(`StepTimer(compose_layers=True)`), which keeps a 32-layer 8B model's rows to minutes.
"""

from __future__ import annotations

import re

from trnsim.compiler.options import QUANTIZE_DTYPES
from trnsim.errors import InvalidArgumentError

_WEIGHT_STORAGE = re.compile(r"weight storage(?: data type)?\s+(int\d+)", re.IGNORECASE)

# Hugging Face ids of published rows -> the config trnsim ships (trnsim/perf/data/models).
HF_MODELS = {"meta-llama/meta-llama-3-8b": "llama-3-8b", "meta-llama/llama-2-7b-hf": "llama-2-7b"}
METRICS = ("ttft", "tpot", "throughput")
DTYPES = {"": None, "fp32": None, "float32": None, "bf16": "bfloat16", "bfloat16": "bfloat16",
          "fp16": "float16", "float16": "float16"}


def _int(row: dict, key: str, default: int | None = None) -> int:
    value = (row.get(key) or "").strip()
    if not value:
        if default is None:
            raise InvalidArgumentError(f"generation row needs a {key!r} value")
        return default
    try:
        return int(float(value))
    except ValueError:
        raise InvalidArgumentError(f"generation row: {key} {value!r} is not a number") from None


def tensor_parallel(text: str) -> int:
    match = re.fullmatch(r"\s*TP\s*(\d+)\s*", text or "TP1", flags=re.IGNORECASE)
    if not match:
        raise InvalidArgumentError(f"parallelism {text!r}: write TP<N>, e.g. TP32")
    return int(match.group(1))


def predict_generation(row: dict, timers: dict | None = None) -> float:
    """The row's metric in ms (ttft, tpot) or output tokens/s (throughput)."""
    from trnsim import hardware
    from trnsim.perf.serving.buckets import power_of_two_buckets
    from trnsim.perf.serving.generation import time_generation
    from trnsim.perf.serving.models import resolve_model
    from trnsim.perf.serving.steps import Deployment, StepTimer

    metric = row["metric"].strip().lower()
    if metric not in METRICS:
        raise InvalidArgumentError(f"generation metric {metric!r}: known {', '.join(METRICS)}")
    name = HF_MODELS.get(row["name"].strip().lower(), row["name"].strip())
    if name.endswith(".json") and row.get("_csv_dir"):  # a config file next to the CSV
        from pathlib import Path

        beside = Path(row["_csv_dir"]) / name
        name = str(beside) if beside.is_file() else name
    tp = tensor_parallel(row.get("parallelism", ""))
    inputs, outputs = _int(row, "input_tokens"), _int(row, "output_tokens")
    batch = _int(row, "concurrency", _int(row, "batch", 1))
    length = _int(row, "seq", inputs + outputs)
    spec = hardware.instance(row["instance"])
    dtype_text = (row.get("dtype") or "").strip().lower()
    dtype_text, _, quantize = dtype_text.partition("+")
    if dtype_text not in DTYPES or quantize not in ("", *QUANTIZE_DTYPES):
        raise InvalidArgumentError(f"generation row dtype {row.get('dtype')!r}: known "
                                   f"{', '.join(k for k in DTYPES if k)}, optionally followed by "
                                   f"+{' or +'.join(QUANTIZE_DTYPES)} (weight storage)")
    noted = _WEIGHT_STORAGE.search(row.get("notes") or "")
    if not quantize and noted:  # the published "Weight Storage Data Type", kept in the notes
        quantize = noted.group(1).lower()
        if quantize not in QUANTIZE_DTYPES:
            raise InvalidArgumentError(f"generation row notes name weight storage {quantize!r}: "
                                       f"trnsim stores weights as {' or '.join(QUANTIZE_DTYPES)}")
    dtype, quantize = DTYPES[dtype_text], quantize or None
    key = (name, spec.name, tp, dtype, quantize)
    timers = timers if timers is not None else _TIMERS
    if key not in timers:
        source = resolve_model(name)
        timers[key] = StepTimer(source.name, source.build, source.config,
                                Deployment(spec.name, tp, dtype=dtype, quantize=quantize),
                                compose_layers=True)
    buckets = power_of_two_buckets(length)
    if metric == "ttft":  # the prompt's step alone: no decode step needs simulating
        from trnsim.perf.serving.buckets import bucket_for

        return timers[key].prefill_ms(batch, bucket_for(inputs, buckets, "prompt"))
    timing = time_generation(timers[key], instance=spec.name, tensor_parallel=tp, lnc=None,
                             batch=batch, input_tokens=inputs, output_tokens=outputs,
                             prefill_buckets=buckets, decode_buckets=buckets)
    if metric == "tpot":
        return timing.percentile_tpot_ms(50)
    return timing.tokens_per_s


_TIMERS: dict = {}
