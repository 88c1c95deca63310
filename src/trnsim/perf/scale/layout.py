"""A parallel layout (how the ranks split the work) and a training workload, with their parser.

Layout strings are the published form: ``TP32 DP32 ZeRO-1``, ``TP8 PP4 DP32``, ``TP8 PP8 M32
1F1B`` (M: micro-batches per step per data-parallel rank), ``SP``, ``EP4``, ``LNC1``, ``RC``
(full activation recomputation), ``V2`` (interleaved pipeline stages per rank).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from trnsim.errors import InvalidArgumentError

SCHEDULES = ("1f1b", "interleaved", "gpipe")
OPTIMIZERS = ("adamw", "lamb", "sgd")
# Bytes per parameter of weights, gradients and optimizer state by training precision:
#   fp32  - everything fp32; Adam keeps two fp32 moments.
#   bf16  - XLA_USE_BF16=1 (with stochastic rounding): every float tensor is bf16, moments too.
#   mixed - bf16 compute, fp32 master weights and moments in the optimizer ("BF16 + FP32
#           optimizer" in Neuron's tables): bf16 weights and gradients, 4+4+4 bytes of state
#           (ZeRO paper's K=12).
PRECISIONS = {"fp32": (4, 4, 8), "bf16": (2, 2, 4), "mixed": (2, 2, 12)}
ACTIVATION_BYTES = {"fp32": 4, "bf16": 2, "mixed": 2}


@dataclass(frozen=True)
class Layout:
    tp: int = 1
    pp: int = 1
    dp: int | None = None  # None: whatever the system's cores leave (cores / (tp * pp * ep))
    sp: bool = False  # sequence parallel (with TP)
    ep: int = 1  # expert parallel (mixture of experts)
    lnc: int | None = None
    schedule: str = "1f1b"
    virtual_stages: int = 1  # interleaved 1F1B: model chunks per pipeline rank
    microbatches: int | None = None  # per step per DP rank; None: from the global batch
    zero1: bool = False
    recompute: bool = False  # full activation checkpointing of every layer
    # Share of the last micro-batch's backward that the data-parallel gradient reduction may
    # hide under. 0 (default) is what torch-xla and NxD do: gradients are reduced after the
    # backward (xm.reduce_gradients / the ZeRO-1 optimizer's step); 1 is bucketed overlap.
    dp_overlap: float = 0.0

    def label(self) -> str:
        parts = [f"TP{self.tp}"]
        if self.pp > 1:
            parts.append(f"PP{self.pp}")
        parts.append(f"DP{self.dp}" if self.dp else "DP*")
        for flag, text in ((self.sp, "SP"), (self.ep > 1, f"EP{self.ep}"),
                           (self.zero1, "ZeRO-1"), (self.recompute, "RC"),
                           (self.dp_overlap > 0, "OVERLAP"),
                           (self.virtual_stages > 1, f"V{self.virtual_stages}"),
                           (self.pp > 1 and self.schedule == "gpipe", "GPipe"),
                           (self.lnc is not None, f"LNC{self.lnc}")):
            if flag:
                parts.append(text)
        return " ".join(parts)


@dataclass(frozen=True)
class Training:
    seq: int
    global_batch: int  # sequences per optimizer step, whole job
    micro_batch: int = 1  # sequences per core per micro-step
    precision: str = "mixed"
    optimizer: str = "adamw"

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise InvalidArgumentError(f"precision {self.precision!r}: one of "
                                       f"{', '.join(PRECISIONS)}")
        if self.optimizer not in OPTIMIZERS:
            raise InvalidArgumentError(f"optimizer {self.optimizer!r}: one of "
                                       f"{', '.join(OPTIMIZERS)}")
        for what, value in (("seq", self.seq), ("global batch", self.global_batch),
                            ("micro-batch", self.micro_batch)):
            if value < 1:
                raise InvalidArgumentError(f"{what} must be at least 1, got {value}")


@dataclass(frozen=True)
class Inference:
    prompt: int
    output: int
    batch: int = 1


_TOKEN = re.compile(r"^(TP|PP|DP|EP|LNC|M|V)(\d+)$")


def parse_layout(text: str) -> Layout:
    """A layout from its published form (module docstring); unknown words are an error."""
    layout = Layout()
    for word in text.replace(",", " ").split():
        upper = word.upper().replace("_", "-")
        match = _TOKEN.match(upper)
        if match:
            key, value = match.group(1), int(match.group(2))
            if value < 1:
                raise InvalidArgumentError(f"layout {text!r}: {word} must be at least 1")
            field = {"TP": "tp", "PP": "pp", "DP": "dp", "EP": "ep", "LNC": "lnc",
                     "M": "microbatches", "V": "virtual_stages"}[key]
            layout = replace(layout, **{field: value})
            if key == "V" and value > 1:
                layout = replace(layout, schedule="interleaved")
        elif upper in ("ZERO-1", "ZERO1"):
            layout = replace(layout, zero1=True)
        elif upper == "SP":
            layout = replace(layout, sp=True)
        elif upper in ("RC", "RECOMPUTE"):
            layout = replace(layout, recompute=True)
        elif upper == "OVERLAP":
            layout = replace(layout, dp_overlap=1.0)
        elif upper.lower() in SCHEDULES:
            layout = replace(layout, schedule=upper.lower())
        else:
            raise InvalidArgumentError(f"layout {text!r}: unknown word {word!r} (TPn PPn DPn EPn "
                                       "LNCn Mn Vn SP ZeRO-1 RC OVERLAP 1F1B/interleaved/gpipe)")
    return layout
