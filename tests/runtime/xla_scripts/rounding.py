"""Run under `python -m trnsim.run`: bf16 accumulation on the device under round-to-nearest-
even and under seeded stochastic rounding (the Neuron rounding-modes page's demo, in bf16)."""

import json
import os

import torch
import torch_xla.core.xla_model as xm

from trnsim.numerics.random import reset_default_rng
from trnsim.runtime.xla.device import DEVICE
from trnsim.runtime.xla.precision import Precision


def accumulate(rounding: str, seed: str, downcast: bool = False) -> float:
    os.environ["NEURON_RT_STOCHASTIC_ROUNDING_SEED"] = seed
    reset_default_rng()
    DEVICE.precision = Precision(downcast, rounding)
    dtype = torch.float32 if downcast else torch.bfloat16
    a = torch.tensor(256.0, dtype=dtype).to(xm.xla_device())
    for _ in range(256):
        a += 0.5  # half of a quarter ulp of bf16 at 256: lost under RNE
        xm.mark_step()
    return a.item()


print("RESULT " + json.dumps({
    "rne": accumulate("rne", "0"),
    "sr_seed0": accumulate("stochastic", "0"),
    "sr_seed0_again": accumulate("stochastic", "0"),
    "sr_seed3": accumulate("stochastic", "3"),
    "downcast_rne": accumulate("rne", "0", downcast=True),
    "downcast_sr": accumulate("stochastic", "0", downcast=True),
}))
