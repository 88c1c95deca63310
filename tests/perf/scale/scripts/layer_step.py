"""A torch-xla training step of one planner layer (shape in $LAYER_SHAPE), run by
`python -m trnsim.run`: what simulating that layer on one NeuronCore gives."""

import json
import os

import torch
import torch_xla.core.xla_model as xm

from trnsim.perf.scale.layer import LayerShape, build_layer
from trnsim.runtime.xla.report import step_report

shape = LayerShape(**json.loads(os.environ["LAYER_SHAPE"]))
device = xm.xla_device()
layer = build_layer(shape).to(device)
optimizer = torch.optim.AdamW(layer.parameters(), lr=1e-4)
x = torch.randn(shape.micro_batch, shape.seq, shape.hidden).to(device).requires_grad_(True)
upstream = torch.randn(shape.micro_batch, shape.seq, shape.hidden).to(device)
layer(x).backward(upstream)  # the gradient the layer above would hand back
xm.optimizer_step(optimizer)
xm.mark_step()
print("RESULT " + json.dumps(step_report(samples_per_step=shape.micro_batch).phase_ms))
