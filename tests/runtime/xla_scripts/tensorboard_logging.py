"""Run under `python -m trnsim.run LOGDIR [STEP_TRACE]`: a torch-xla training loop that logs its
loss with TensorBoard's SummaryWriter, as Neuron's training tutorials do; prints what it saw as
JSON. With STEP_TRACE (and TRNSIM_XLA_PROFILE_DIR set), also writes the last step's trace."""

import json
import os
import sys

import torch
import torch_xla.core.xla_model as xm
from torch.utils.tensorboard import SummaryWriter

from trnsim.runtime.xla.report import step_report, write_step_trace

torch.manual_seed(0)
device = xm.xla_device()
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
model.to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loss_fn = torch.nn.CrossEntropyLoss()
writer = SummaryWriter(log_dir=sys.argv[1])
losses, step_ms = [], []
for step in range(1, 4):
    data, target = torch.randn(8, 16), torch.randint(0, 4, (8,))
    loss = loss_fn(model(data.to(device)), target.to(device))
    loss.backward()
    xm.optimizer_step(optimizer)
    optimizer.zero_grad()
    xm.mark_step()
    losses.append(loss.item())
    writer.add_scalar("loss", losses[-1], step)
    report = step_report()
    step_ms.append(report.step_ms)
writer.close()
if len(sys.argv) > 2:
    write_step_trace(sys.argv[2], os.environ["TRNSIM_XLA_PROFILE_DIR"])
print("RESULT " + json.dumps({
    "losses": losses, "step_ms": step_ms, "mfu": report.mfu,
    "throughput": report.throughput_per_s, "is_summary_writer": isinstance(
        writer, sys.modules["torch.utils.tensorboard.writer"].SummaryWriter)}))
