"""Training rows of `trnsim validate` (kind ``training``), predicted by the planner.

Columns: ``name`` the model (a parenthesised remark is ignored), ``instance`` and ``nodes`` the
system, ``parallelism`` the layout (``DP32``, ``TP32 DP32 ZeRO-1``; empty: DP over every core),
``batch`` the micro-batch per core, ``seq`` the sequence length (ignored for vision models, whose
tokens are their patches), ``global_batch`` sequences per optimizer step, ``dtype`` the training
precision and ``optimizer``. The predicted value is the planner's throughput in sequences (or
images) per second for the whole job.

A row run with NeuronX Distributed (its name says so) and tensor parallelism runs sequence
parallelism with it: NxD's pretraining scripts pass ``--sequence_parallel_enabled`` (Llama 3.1
8B's ``tp_zero1_llama3_8B_hf_pretrain.sh``, the 70B TP+PP scripts) and its tutorials list
"Sequence Parallel" among the optimizations the published configurations apply.
"""

from __future__ import annotations

import re
from dataclasses import replace

from trnsim.errors import TrnsimError
from trnsim.perf.scale.layout import Layout, parse_layout

_NXD = re.compile(r"neuronx[ -]distributed|\bnxd\b", re.IGNORECASE)


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


def row_layout(row: dict) -> Layout:
    """The row's parallelism, with what its framework runs by default (module docstring)."""
    layout = parse_layout(row.get("parallelism") or "")
    if _NXD.search(row.get("name") or "") and layout.tp > 1:
        layout = replace(layout, sp=True)
    return layout


def predict_training(row: dict) -> float:
    from trnsim.perf.scale import (
        Training,
        parse_system,
        plan_training,
        resolve_model,
    )

    name = re.sub(r"\s*\(.*\)\s*$", "", row["name"]).strip()
    model = resolve_model(name)
    system = parse_system(f"{row['instance']} x {_int(row, 'nodes', 1)}")
    layout = row_layout(row)
    micro = _int(row, "batch", 1)
    vision = not model.vocab
    seq = model.default_seq if vision else _int(row, "seq", model.default_seq)
    cores = system.cores
    global_batch = _int(row, "global_batch", micro * cores)
    optimizer = (row.get("optimizer") or "adamw").strip().lower()
    work = Training(seq, global_batch, micro, precision_of(row.get("dtype", "")), optimizer)
    return plan_training(model, system, layout, work).sequences_per_s
