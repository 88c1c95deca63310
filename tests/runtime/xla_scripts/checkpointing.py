"""Run under `python -m trnsim.run`: an MLP's activation (SiLU(gate) * up) with and without
`torch.utils.checkpoint` (reentrant, as torch_xla's checkpoint is): the gradients and each
step's backward time."""

import json

import torch
import torch_xla.core.xla_model as xm
from torch.utils.checkpoint import checkpoint

from trnsim.runtime.xla.report import step_report


def activation(gate, up):
    return torch.nn.functional.silu(gate) * up


device = xm.xla_device()
torch.manual_seed(0)
up = torch.nn.Linear(64, 256, bias=False).to(device)
down = torch.nn.Linear(128, 64, bias=False).to(device)
x0, upstream = torch.randn(128, 64), torch.randn(128, 64)
result = {}
for name, checkpointed in (("plain", False), ("checkpointed", True)):
    x = x0.clone().to(device).requires_grad_(True)
    gate, value = up(x).chunk(2, dim=-1)
    h = (checkpoint(activation, gate, value, use_reentrant=True) if checkpointed
         else activation(gate, value))
    down(h).backward(upstream.to(device))
    xm.mark_step()
    report = step_report(samples_per_step=1)
    result[name] = {"grad": x.grad.cpu().tolist(), "backward_ms": report.phase_ms["backward"]}
    up.weight.grad = down.weight.grad = None
print("RESULT " + json.dumps(result))
