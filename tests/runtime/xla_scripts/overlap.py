"""Run under `python -m trnsim.run overlap.py` in timing mode (TRNSIM_XLA_SIMULATED_WORLD=N):
two data-parallel steps of a four-layer MLP with torch-xla's gradient buckets
(ALLREDUCE_GRADIENTS_BUCKET_SIZE_MB); prints the step report and the parameters as JSON."""

import json

import torch
import torch_xla.core.xla_model as xm

from trnsim.runtime.xla.report import step_report

torch.manual_seed(0)
device = xm.xla_device()
layers = [torch.nn.Linear(512, 512) for _ in range(4)]
model = torch.nn.Sequential(*[m for layer in layers for m in (layer, torch.nn.Tanh())]).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
data, target = torch.randn(512, 512), torch.randn(512, 512)
for _ in range(2):
    loss = torch.nn.functional.mse_loss(model(data.to(device)), target.to(device))
    loss.backward()
    xm.optimizer_step(optimizer)
    optimizer.zero_grad()
    xm.mark_step()
report = step_report(samples_per_step=512)
print(str(report))
params = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).cpu()
print("RESULT " + json.dumps({"report": report.to_dict(), "params": params[::997].tolist()}))
