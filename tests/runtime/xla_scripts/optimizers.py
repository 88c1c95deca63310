"""Run under `python -m trnsim.run optimizers.py` with TRNSIM_XLA_VALUES=simulated: each
optimizer takes several steps of a small model on the lazy device, every graph's values
computed by trnsim's compiled program on the simulator (forward, backward and the optimizer's
kernels), against torch.optim on CPU. Prints JSON: optimizer -> largest parameter error
relative to the largest parameter."""

import copy
import json
import sys

import torch
import torch_xla.core.xla_model as xm

STEPS = 3
OPTIMIZERS = {
    "sgd_momentum": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.01),
    "sgd_nesterov": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True,
                                               dampening=0.0, weight_decay=0.01),
    "adam": lambda ps: torch.optim.Adam(ps, lr=0.01, weight_decay=0.01),
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.1),
    "adamw_amsgrad": lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.1, amsgrad=True),
}


def train(model, make, device=None):
    optimizer = make(model.parameters())
    generator = torch.Generator().manual_seed(1)
    for _ in range(STEPS):
        data, target = torch.randn(6, 8, generator=generator), torch.randn(6, 3, generator=generator)
        if device is not None:
            data, target = data.to(device), target.to(device)
        loss = torch.nn.functional.mse_loss(model(data), target)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if device is not None:
            xm.mark_step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


torch.manual_seed(0)
base = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
errors = {}
for name in sys.argv[1:] or list(OPTIMIZERS):
    want = train(copy.deepcopy(base), OPTIMIZERS[name])
    device = xm.xla_device()
    got = train(copy.deepcopy(base).to(device), OPTIMIZERS[name], device).cpu()
    start = torch.cat([p.detach().reshape(-1) for p in base.parameters()])
    errors[name] = {"error": float((got - want).abs().max() / want.abs().max()),
                    "moved": float((want - start).abs().max())}
print("RESULT " + json.dumps(errors))
