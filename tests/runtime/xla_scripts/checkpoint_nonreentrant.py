"""Run under `python -m trnsim.run`: non-reentrant `torch.utils.checkpoint` (PyTorch's
recommended form, and Hugging Face's `gradient_checkpointing_enable()`) on the lazy device: the
gradients with and without it and on eager CPU; then errors raised by the recomputation (which
runs inside a saved-tensor unpack hook, on autograd's thread for the device) and by a backward
op there, which must reach the script as in eager PyTorch rather than abort the process."""

import json

import torch
import torch_xla.core.xla_model as xm
from torch.utils.checkpoint import CheckpointError, checkpoint

device = xm.xla_device()
torch.manual_seed(0)
host_block = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 32))
x0, upstream = torch.randn(16, 32), torch.randn(16, 32)


def gradients(block, x, checkpointed):
    x = x.clone().requires_grad_(True)
    y = checkpoint(block, x, use_reentrant=False) if checkpointed else block(x)
    y.backward(upstream.to(x.device))
    grads = [x.grad] + [p.grad for p in block.parameters()]
    out = [g.cpu().tolist() for g in grads]
    block.zero_grad(set_to_none=True)
    return out


result = {"cpu": gradients(host_block, x0, False)}
block = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 32))
block.load_state_dict(host_block.state_dict())
block = block.to(device)
result["plain"] = gradients(block, x0.to(device), False)
xm.mark_step()
result["checkpointed"] = gradients(block, x0.to(device), True)
xm.mark_step()

calls = []


def fails_on_recompute(t):
    calls.append(1)
    if len(calls) > 1:
        raise ValueError("the recomputation failed")
    return block(t)


def changes_shape_on_recompute(t):
    calls.append(1)
    return block(t if len(calls) == 1 else t[:8])


for name, fn in (("raised", fails_on_recompute), ("mismatch", changes_shape_on_recompute)):
    calls.clear()
    y = checkpoint(fn, x0.to(device).requires_grad_(True), use_reentrant=False)
    try:
        y.sum().backward()
        result[name] = "no error"
    except (ValueError, CheckpointError) as error:
        result[name] = f"{type(error).__name__}: {str(error)[:60]}"
    xm.mark_step()
    block.zero_grad(set_to_none=True)
# an op of the backward that fails on the device thread (a saved tensor's hook gives a wrong shape)
with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t[:8]):
    y = block(x0.to(device).requires_grad_(True))
try:
    y.sum().backward()
    result["backward_op"] = "no error"
except RuntimeError as error:
    result["backward_op"] = f"{type(error).__name__}: {str(error)[:40]}"
xm.mark_step()
block.zero_grad(set_to_none=True)
result["after"] = gradients(block, x0.to(device), True)  # the device still trains
print("RESULT " + json.dumps(result))
