"""Measure layer and head timings on the training path, in a process of their own.

`python -m trnsim.perf.scale.measure` reads a JSON request on stdin ({"instance", "precision",
"optimizer", "items": [{"kind": "layer"|"head", "shape": {...}, "path": ...}]}) and writes one
JSON timing file per item. Each item is one training step of the module on the lazy device
(`trnsim.runtime.xla`): forward, backward and the optimizer's update compiled by trnsim's
compiler and timed on the instruction-level simulator, exactly as a user's torch-xla script is.
A process of its own because the lazy device is process-wide and reads its instance and
precision from the environment.

A micro-batch whose graph trnsim's compiler cannot lower at once (an on-chip memory limit) is
split into equal chunks of sequences, each timed alone; their sum is the micro-batch's time (an
upper bound: the chunks repeat fixed costs a whole batch would amortise). The entry says so.
A single sequence too long to lower is timed at half and a quarter of its length and composed
from the layer's two parts: work linear in the tokens (projections, MLP, norms) and attention's
scores and values, quadratic in them. With x = seq/4, t(x) = a*x + b*x^2 and t(2x) give
t(4x) = 6 t(2x) - 8 t(x) (the quadratic share clamped at zero, which leaves 2 t(2x)); the
entry records `seq_split` (the optimizer's time does not depend on the sequence).
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import replace

_OPTIMIZERS = {"adamw": "AdamW", "lamb": "AdamW", "sgd": "SGD"}


def _step(kind: str, shape, optimizer: str) -> dict:
    import torch
    import torch_xla.core.xla_model as xm

    from trnsim.perf.scale.layer import build_head, build_layer
    from trnsim.runtime.xla.report import step_report

    device = xm.xla_device()
    module = (build_layer if kind == "layer" else build_head)(shape).to(device)
    opt_cls = getattr(torch.optim, _OPTIMIZERS[optimizer])
    opt = opt_cls(module.parameters(), lr=1e-4, **({"momentum": 0.9} if optimizer == "sgd"
                                                    else {}))
    b, s, h = shape.micro_batch, shape.seq, shape.hidden
    g = torch.Generator().manual_seed(0)
    if kind == "layer":
        x = torch.randn(b, s, h, generator=g).to(device).requires_grad_(True)
        loss = module(x).float().pow(2).mean()
    else:
        ids = torch.randint(0, shape.vocab, (b, s), generator=g).to(device)
        labels = torch.randint(0, shape.vocab, (b, s), generator=g).to(device)
        hidden = torch.randn(b, s, h, generator=g).to(device).requires_grad_(True)
        upstream = torch.randn(b, s, h, generator=g).to(device)
        loss = module(ids, hidden, labels, upstream)
    loss.backward()
    opt.step()
    opt.zero_grad()
    xm.mark_step()
    report = step_report(samples_per_step=b)
    flops = report.mfu * report.step_ms * 1e-3 * _peak() if report.mfu else 0.0
    return {"forward_ns": report.phase_ms["forward"] * 1e6,
            "backward_ns": report.phase_ms["backward"] * 1e6,
            "optimizer_ns": report.phase_ms["optimizer"] * 1e6, "flops": flops}


def _peak() -> float:
    from trnsim import hardware

    return hardware.instance(os.environ["TRNSIM_INSTANCE"]).chip.core.peak_flops("bf16")


def measure_one(kind: str, shape, optimizer: str) -> dict:
    from trnsim.errors import LimitExceededError

    try:
        return _measure_batch(kind, shape, optimizer)
    except LimitExceededError as error:
        if shape.micro_batch != 1 or shape.seq < 512 or shape.seq % 4:
            raise
        print(f"trnsim plan: {kind} {shape.key()}: {error}; composing from seq {shape.seq // 2}"
              f" and {shape.seq // 4}", file=sys.stderr)
    half = measure_one(kind, replace(shape, seq=shape.seq // 2), optimizer)
    quarter = measure_one(kind, replace(shape, seq=shape.seq // 4), optimizer)
    out = dict(half)
    for phase in ("forward_ns", "backward_ns", "flops"):
        out[phase] = max(6 * half[phase] - 8 * quarter[phase], 2 * half[phase])
    out["seq_split"] = out.get("seq_split", 0) + 1
    return out


def _measure_batch(kind: str, shape, optimizer: str) -> dict:
    from trnsim.errors import LimitExceededError

    chunks = 1
    while True:
        part = replace(shape, micro_batch=shape.micro_batch // chunks)
        try:
            start = time.perf_counter()
            timing = _step(kind, part, optimizer)
            break
        except LimitExceededError as error:
            if part.micro_batch % 2 or part.micro_batch == 1:
                raise
            chunks *= 2
            print(f"trnsim plan: {kind} {part.key()}: {error}; timing {chunks} chunks",
                  file=sys.stderr)
    for phase in ("forward_ns", "backward_ns", "flops"):
        timing[phase] *= chunks
    timing.update(chunks=chunks, wall_s=time.perf_counter() - start)
    return timing


def main() -> None:
    request = json.load(sys.stdin)
    os.environ["TRNSIM_INSTANCE"] = request["instance"]
    os.environ.pop("TRNSIM_XLA_SIMULATED_WORLD", None)
    if request["precision"] in ("bf16", "mixed"):
        os.environ["XLA_USE_BF16"] = "1"
    from trnsim.perf.scale.layer import HeadShape, LayerShape
    from trnsim.runtime.compile import write_json
    from trnsim.runtime.xla import api

    api.register_device()
    api.install()
    for item in request["items"]:
        cls = LayerShape if item["kind"] == "layer" else HeadShape
        shape = cls(**item["shape"])
        try:
            timing = measure_one(item["kind"], shape, request["optimizer"])
        except Exception as error:  # reported to the parent, which raises a TrnsimError
            timing = {"error": f"{type(error).__name__}: {error}"}
        write_json(__import__("pathlib").Path(item["path"]), timing)
        print(json.dumps({"done": item["path"]}), flush=True)


if __name__ == "__main__":
    main()
