"""Run under `python -m trnsim.run`: lazy semantics of the simulated xla device, as JSON."""

import json

import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met

from trnsim.runtime.xla.device import DEVICE
from trnsim.runtime.xla.report import step_report

torch.manual_seed(0)
device = xm.xla_device()
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
model.to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loss_fn = torch.nn.CrossEntropyLoss()
data, target = torch.randn(8, 16), torch.randint(0, 4, (8,))
out = {"device_type": str(device)}

# a host read cuts the graph: only the loss's ancestors run, the rest stays pending
loss = loss_fn(model(data.to(device)), target.to(device))
before = len(DEVICE.graphs)
value = loss.item()
out["item_graphs"] = len(DEVICE.graphs) - before
out["item_why"] = DEVICE.graphs[-1].why
out["item_source_line"] = DEVICE.graphs[-1].source
loss.backward()
optimizer.step()
optimizer.zero_grad()
xm.mark_step()
losses = [value]
for _ in range(3):  # steps 2..4: the same graph, one compilation
    loss = loss_fn(model(data.to(device)), target.to(device))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    torch_xla.sync()
    losses.append(loss.item())
out["losses"] = losses
out["cache"] = [g.cache for g in DEVICE.graphs if g.why == "mark_step"]
out["counters"] = {n: met.counter_value(n) for n in met.counter_names()}
out["execute_samples"] = met.metric_data("ExecuteTime")[0]
report = step_report(samples_per_step=8)
out["report"] = {"step_ms": report.step_ms, "phase_ms": report.phase_ms,
                 "throughput": report.throughput_per_s, "hbm": report.hbm,
                 "text": str(report)}
out["short_report"] = met.short_metrics_report()

# a batch whose shape changes recompiles, and says why and where
for batch in (5, 6):
    loss = loss_fn(model(torch.randn(batch, 16).to(device)),
                   torch.randint(0, 4, (batch,)).to(device))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    xm.mark_step()
out["recompilations"] = DEVICE.executor.recompilations
try:
    xm.no_such_function()
except Exception as error:  # the test checks its type and text
    out["unknown"] = [type(error).__name__, str(error)]
# weights built on the meta device (deferred init) have no values: refused by name; once
# materialised with to_empty they train
with torch.device("meta"):
    deferred = torch.nn.Linear(16, 4)
try:
    deferred.to(device)
except Exception as error:
    out["meta"] = [type(error).__name__, str(error)]
deferred = deferred.to_empty(device=device)
torch.nn.init.normal_(deferred.weight)
torch.nn.init.zeros_(deferred.bias)
loss = deferred(torch.randn(2, 16).to(device)).square().mean()
loss.backward()
xm.mark_step()
out["materialised_loss"] = loss.item()
out["uncached_compiles"] = met.counter_value("UncachedCompile")
print("RESULT " + json.dumps(out))
