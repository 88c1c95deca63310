"""Run under `torchrun --nproc_per_node=4 -m trnsim.run data_parallel.py`: one data-parallel
step; rank 0 prints JSON comparing every rank's parameters with a one-process step on the
concatenated batch."""

import copy
import json

import torch
import torch.distributed as dist
import torch_xla.core.xla_model as xm
import torch_xla.distributed.xla_backend  # noqa: F401 - registers the "xla" backend
import torch_xla.runtime as xr

dist.init_process_group("xla", init_method="xla://")
rank, world = xr.global_ordinal(), xr.world_size()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
data, target = torch.randn(4 * world, 8), torch.randn(4 * world, 2)
single = copy.deepcopy(model)  # the reference: one process, the whole batch
torch.nn.functional.mse_loss(single(data), target).backward()
with torch.no_grad():
    for p in single.parameters():
        p -= 0.1 * p.grad

device = xm.xla_device()
model.to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
mine = slice(4 * rank, 4 * rank + 4)
loss = torch.nn.functional.mse_loss(model(data[mine].to(device)), target[mine].to(device))
loss.backward()
xm.optimizer_step(optimizer)
xm.mark_step()
flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).cpu()
gathered = [torch.zeros_like(flat) for _ in range(world)]
dist.all_gather(gathered, flat)
if rank == 0:
    from trnsim.runtime.xla.device import DEVICE
    from trnsim.runtime.xla.report import step_report

    want = torch.cat([p.detach().reshape(-1) for p in single.parameters()])
    print("RESULT " + json.dumps({
        "ranks_identical": all(torch.equal(g, gathered[0]) for g in gathered),
        "error_vs_single": float((gathered[0] - want).abs().max()),
        "collectives": DEVICE.graphs[-2].collectives if len(DEVICE.graphs) > 1 else [],
        "report": str(step_report(samples_per_step=4)),
        "collective_ms": step_report(samples_per_step=4).phase_ms["collectives"]}))
dist.destroy_process_group()
