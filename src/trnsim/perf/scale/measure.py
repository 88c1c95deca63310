"""Measure layer and head timings on the training path, in a process of their own.

`python -m trnsim.perf.scale.measure` reads a JSON request on stdin ({"instance", "precision",
"optimizer", "items": [{"kind": "layer"|"head", "shape": {...}, "path": ...}]}) and writes one
JSON timing file per item. Each item is one training step of the module on the lazy device
(`trnsim.runtime.xla`): forward, backward and the optimizer's update compiled by trnsim's
compiler and timed on the instruction-level simulator, exactly as a user's torch-xla script is,
but timing only: weights and activations are meta tensors (`TRNSIM_XLA_VALUES=shapes`), so no
value is computed and host memory does not grow with the model. A layer's backward starts from
an output gradient given as device data (what the layer above hands back), so no loss of the
measurement's own is timed with it.
A process of its own because the lazy device is process-wide and reads its instance and
precision from the environment.

A shape whose graph trnsim's compiler cannot lower at once (an on-chip memory limit) is timed
in equal parts: the LM head's vocabulary in halves (as TP shards it: parallel embedding and
cross-entropy), a micro-batch in halves of its sequences; the parts' sum is the shape's time
(an upper bound: the parts repeat fixed costs a whole would amortise). The entry says so.
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


def _forget_pending() -> None:
    """Every live device tensor becomes device data, so a step that failed to compile leaves
    no pending graph behind for the next one."""
    import gc

    from trnsim.runtime.xla.device import DEVICE
    from trnsim.runtime.xla.lazy import LIVE, data_value

    gc.collect()
    for tensor in list(LIVE):
        tensor.ir = data_value(tensor.value, None)
    DEVICE.pending_collectives = []


def _step(kind: str, shape, optimizer: str) -> dict:
    import torch
    import torch_xla.core.xla_model as xm

    _forget_pending()
    from trnsim.perf.scale.layer import build_head, build_layer
    from trnsim.runtime.xla.report import step_report

    device = xm.xla_device()
    with torch.device("meta"):  # shapes only (see `main`): no weight is ever allocated
        module = (build_layer if kind == "layer" else build_head)(shape)
    module = module.to(device)
    opt_cls = getattr(torch.optim, _OPTIMIZERS[optimizer])
    opt = opt_cls(module.parameters(), lr=1e-4, **({"momentum": 0.9} if optimizer == "sgd"
                                                    else {}))
    b, s, h = shape.micro_batch, shape.seq, shape.hidden

    def data(*size, dtype=torch.float32):
        return torch.empty(size, dtype=dtype, device="meta").to(device)

    if kind == "layer":
        # the output's gradient arrives as the next layer hands it back: device data, not a
        # loss computed here (whose mean and square would add their own kernels, a broadcast
        # of the mean's gradient over every activation, to the layer's backward)
        x = data(b, shape.seq_shard, h).requires_grad_(True)  # SP: the layer's token shard
        module(x).backward(data(b, shape.seq_shard, h))
    else:
        if shape.patch:  # pixels in, one class per image
            side = shape.image_side
            ids, labels = data(b, shape.channels, side, side), data(b, dtype=torch.long)
        else:
            ids, labels = data(b, s, dtype=torch.long), data(b, s, dtype=torch.long)
        hidden = data(b, shape.seq_shard, h).requires_grad_(True)  # SP: a token shard
        loss, embedded = module(ids, hidden, labels)
        torch.autograd.backward([loss, embedded], [None, data(b, shape.seq_shard, h)])
    xm.optimizer_step(opt)
    xm.mark_step()
    opt.zero_grad()
    report = step_report(samples_per_step=b)
    flops = report.mfu * report.step_ms * 1e-3 * _peak() if report.mfu else 0.0
    return {"forward_ns": report.phase_ms["forward"] * 1e6,
            "backward_ns": report.phase_ms["backward"] * 1e6,
            "optimizer_ns": report.phase_ms["optimizer"] * 1e6, "flops": flops}


def _peak() -> float:
    from trnsim import hardware

    return hardware.instance(os.environ["TRNSIM_INSTANCE"]).chip.core.peak_flops("bf16")


def measure_one(kind: str, shape, optimizer: str) -> dict:
    """Time one shape; when the compiler cannot lower it at once, time equal parts (module
    docstring): the LM head's vocabulary in halves, a micro-batch in halves, a sequence from
    its half and quarter."""
    from trnsim.errors import LimitExceededError

    try:
        start = time.perf_counter()
        timing = _step(kind, shape, optimizer)
        timing["wall_s"] = time.perf_counter() - start
        return timing
    except LimitExceededError as error:
        reason = str(error)
    if kind == "head" and shape.vocab >= 2048:
        part = measure_one(kind, replace(shape, vocab=-(-shape.vocab // 2)), optimizer)
        how, scale = "vocabulary halves", 2
    elif shape.micro_batch > 1 and shape.micro_batch % 2 == 0:
        part = measure_one(kind, replace(shape, micro_batch=shape.micro_batch // 2), optimizer)
        how, scale = "micro-batch halves", 2
    elif shape.seq >= 512 and shape.seq % (4 * shape.sp) == 0:
        half = measure_one(kind, replace(shape, seq=shape.seq // 2), optimizer)
        quarter = measure_one(kind, replace(shape, seq=shape.seq // 4), optimizer)
        print(f"trnsim plan: {kind} {shape.key()}: {reason}; composed from seq {shape.seq // 2}"
              f" and {shape.seq // 4}", file=sys.stderr)
        out = dict(half)
        for phase in ("forward_ns", "backward_ns", "flops"):
            out[phase] = max(6 * half[phase] - 8 * quarter[phase], 2 * half[phase])
        out["seq_split"] = half.get("seq_split", 0) + 1
        return out
    else:
        raise _refused(reason)
    print(f"trnsim plan: {kind} {shape.key()}: {reason}; timed in {how}", file=sys.stderr)
    out = dict(part)
    phases = ("forward_ns", "backward_ns", "flops") + (("optimizer_ns",) if kind == "head"
                                                        and how.startswith("vocab") else ())
    for phase in phases:
        out[phase] = part[phase] * scale
    out["chunks"] = part.get("chunks", 1) * scale
    return out


def _refused(reason: str) -> Exception:
    from trnsim.errors import UnsupportedError

    return UnsupportedError(f"the simulated compiler cannot lower this shape, nor any equal "
                            f"part of it: {reason}")


def main() -> None:
    request = json.load(sys.stdin)
    os.environ["TRNSIM_INSTANCE"] = request["instance"]
    os.environ.pop("TRNSIM_XLA_SIMULATED_WORLD", None)
    if request["precision"] in ("bf16", "mixed"):
        os.environ["XLA_USE_BF16"] = "1"
    # Only the step's timing is kept, and no instruction's cost depends on a value: the lazy
    # device records shapes and dtypes only (meta tensors), so a 70B layer or LM-head shard at
    # any sequence length is timed with host memory for its graph and programs, never for its
    # weights, activations or optimizer state (tens of GB at TP8, seq 2048).
    from trnsim.runtime.xla.device import DEVICE, VALUES_ENV

    os.environ[VALUES_ENV] = "shapes"
    DEVICE.shapes_only = True  # the device was made on import, before the variable was set
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
