"""The numbers a cut graph gives when trnsim's compiled program computes them.

The lazy device hands a script PyTorch's CPU values (see `lazy`) and uses the compiled program
for time only. This module runs the same compiled program functionally on the
instruction-level simulator, so the backward and optimizer kernels trnsim emits can be checked
against `torch.autograd` and `torch.optim`: a graph whose kernels compute wrong numbers would
still train correctly on the CPU values, and nothing else would notice.
"""

from __future__ import annotations

import numpy as np
import torch

from trnsim.runtime.xla.graph import StepGraph


def device_values(tensors: list, instance, why: str = "functional check") -> list[torch.Tensor]:
    """Cut the pending graph of `tensors` (xla tensors) and return their values as trnsim's
    compiled program computes them on the simulator, in the order given."""
    from trnsim.runtime.xla.device import DEVICE
    from trnsim.runtime.xla.lazy import user_source

    uids = [t.ir.uid for t in tensors]
    graph = DEVICE.sync(list(tensors), why, user_source(2))
    if graph is None:
        return [t.value.clone() for t in tensors]
    by_uid = dict(zip((r.uid for r in graph.roots), run_functional(graph, instance),
                      strict=True))
    return [by_uid[u] if u in by_uid else t.value.clone() for u, t in zip(uids, tensors,
                                                                          strict=True)]


def run_functional(graph: StepGraph, instance) -> list[torch.Tensor]:
    """The roots of `graph` as the simulated device computes them, from its inputs' values
    (device data hold their CPU values), in root order, as torch tensors of the roots' dtypes."""
    from trnsim.compiler import options_from_env, run_pipeline
    from trnsim.compiler.aten import ir_dtype
    from trnsim.compiler.capture import tensor_to_numpy
    from trnsim.compiler.lowering import lower
    from trnsim.numerics import cast
    from trnsim.runtime.xla.translate import _device_dtype, drawn_values, to_ir
    from trnsim.sim import simulate

    ir = to_ir(graph, drawn=True)
    kernel_graph = run_pipeline(ir, options_from_env(instance=instance.name, cores=1))
    lowered = lower(kernel_graph, instance.chip.core)
    arrays = {}
    for name, value in zip(lowered.inputs, graph.inputs + drawn_values(graph), strict=True):
        array = tensor_to_numpy(value.value.detach())
        target = ir_dtype(_device_dtype(value.dtype))
        arrays[name] = (array.astype(target.np_dtype) if target.is_int or target.is_bool
                        else cast(array, target, rounding="rne"))
    produced = simulate(lowered.program, arrays, mode="functional", chip=instance.chip).outputs
    results = []
    for name, root in zip(lowered.outputs, graph.roots, strict=True):
        array = np.asarray(produced[name], dtype=np.float32 if root.dtype.is_floating_point
                           else None).reshape(root.shape)
        results.append(torch.from_numpy(np.array(array, order="C")).to(root.dtype))
    return results
