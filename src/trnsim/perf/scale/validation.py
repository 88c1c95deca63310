"""Training rows of `trnsim validate` (kind ``training``), predicted by the planner.

Columns: ``name`` the model (a parenthesised remark is ignored), ``instance`` and ``nodes`` the
system, ``parallelism`` the layout (``DP32``, ``TP32 DP32 ZeRO-1``; empty: DP over every core),
``batch`` the micro-batch per core, ``seq`` the sequence length (ignored for vision models, whose
tokens are their patches), ``global_batch`` sequences per optimizer step, ``dtype`` the training
precision and ``optimizer``. The predicted value is the planner's throughput in sequences (or
images) per second for the whole job.
"""

from __future__ import annotations

import re

from trnsim.errors import TrnsimError


def precision_of(dtype_text: str) -> str:
    """``bf16 autocast with fp32 optimizer`` -> mixed; ``bf16 (+ stochastic rounding)`` ->
    bf16 (XLA_USE_BF16); ``fp32`` or nothing -> fp32."""
    text = (dtype_text or "").lower()
    if "bf16" in text and ("fp32 optim" in text or "autocast" in text or "fp32 master" in text):
        return "mixed"
    if "bf16" in text:
        return "bf16"
    return "fp32"


def _int(row: dict, column: str, default: int | None = None) -> int | None:
    text = (row.get(column) or "").strip()
    if not text:
        return default
    match = re.match(r"\d+", text)
    if match is None:
        raise TrnsimError(f"{column} {text!r} does not start with a whole number")
    return int(match.group())


def predict_training(row: dict) -> float:
    from trnsim.perf.scale import (
        Training,
        parse_layout,
        parse_system,
        plan_training,
        resolve_model,
    )

    name = re.sub(r"\s*\(.*\)\s*$", "", row["name"]).strip()
    model = resolve_model(name)
    system = parse_system(f"{row['instance']} x {_int(row, 'nodes', 1)}")
    layout = parse_layout(row.get("parallelism") or "")
    micro = _int(row, "batch", 1)
    vision = not model.vocab
    seq = model.default_seq if vision else _int(row, "seq", model.default_seq)
    cores = system.cores
    global_batch = _int(row, "global_batch", micro * cores)
    optimizer = (row.get("optimizer") or "adamw").strip().lower()
    work = Training(seq, global_batch, micro, precision_of(row.get("dtype", "")), optimizer)
    return plan_training(model, system, layout, work).sequences_per_s
