"""Run under `python -m trnsim.run bf16_intermediates.py` with XLA_USE_BF16=1 (or
XLA_DOWNCAST_BF16=1): a step whose backward PyTorch decomposes with fp32 upcasts (layer norm,
GELU, softmax backward). Prints JSON: the dtypes of the floating IR nodes of the step graph, the
ops that made any float32 node, and how a float64 tensor is stored."""

import json

import torch
import torch.nn.functional as F
import torch_xla.core.xla_model as xm

from trnsim.runtime.xla.device import DEVICE
from trnsim.runtime.xla.translate import to_ir

torch.manual_seed(0)
device = xm.xla_device()
norm = torch.nn.LayerNorm(16).to(device)
proj = torch.nn.Linear(16, 16).to(device)
x = torch.randn(4, 16).to(device)
out = torch.softmax(F.gelu(proj(norm(x))), dim=-1)
(out * torch.arange(16.0).to(device)).sum().backward()
xm.mark_step()
graph = to_ir(DEVICE.graphs[-1])
floating = [n for n in graph.nodes if n.dtype.is_float and n.op != "scalar"]  # (weak numbers)

double = torch.tensor([1 + 2**-20 + 2**-40], dtype=torch.float64).to(device)
doubled = double * 2
xm.mark_step()
print("RESULT " + json.dumps({
    "script_dtype": str(norm.weight.grad.dtype),
    "dtypes": sorted({n.dtype.name for n in floating}),
    "float32_from": sorted({f"{n.op} ({n.source})" for n in floating
                            if n.dtype.name == "float32"}),
    "double_graph_dtypes": sorted({n.dtype.name for n in to_ir(DEVICE.graphs[-1]).nodes
                                   if n.op != "scalar"}),
    "double_values": [double.item(), doubled.item()],
}))
