"""Run under `python -m trnsim.run` twice, with and without TRNSIM_XLA_VALUES=shapes: a small
MLP's training step, weights built on the meta device when shapes only. Prints the step's
phases, whether device values are meta, and what reading a value raises."""

import json
import os

import torch
import torch_xla.core.xla_model as xm

from trnsim.runtime.xla.report import step_report

shapes = os.environ.get("TRNSIM_XLA_VALUES") == "shapes"
device = xm.xla_device()
torch.manual_seed(0)
with torch.device("meta" if shapes else "cpu"):
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(),
                                torch.nn.Linear(128, 64), torch.nn.LayerNorm(64))
model = model.to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
x = torch.randn(8, 64).to(device)  # a host tensor moved: only its shape travels when shapes only
scale = torch.ones(64).to(device)
# a device tensor moved to the device again (Hugging Face's rotary embedding does this)
loss = (model(x) * scale.to(device=x.device, dtype=torch.float)).pow(2).mean()
loss.backward()
xm.optimizer_step(optimizer)
xm.mark_step()
read = "ok"
try:
    loss.item()
except Exception as error:  # the named error, with this line
    read = f"{type(error).__name__}: {error}"
print("RESULT " + json.dumps({"phase_ms": step_report(samples_per_step=8).phase_ms,
                              "meta": model[0].weight.value.is_meta, "read": read}))
