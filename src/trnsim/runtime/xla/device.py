"""The process's lazy device: records each ATen call, cuts graphs, keys, compiles, executes.

Values are computed at once on CPU by PyTorch (see `lazy`); what the device adds is the graph
structure torch-xla would build, its compilation cache, and the simulated time of each graph.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

from trnsim.errors import UnsupportedError
from trnsim.runtime.xla.graph import StepGraph, build_graph
from trnsim.runtime.xla.lazy import (
    LIVE,
    IrNode,
    IrValue,
    XlaTensor,
    data_value,
    node_source,
    unwrap,
    user_source,
)
from trnsim.runtime.xla.metrics import METRICS

aten = torch.ops.aten
VALUES_ENV = "TRNSIM_XLA_VALUES"  # "simulated" / "shapes": see `LazyDevice.__init__`
CPU = torch.device("cpu")
META = torch.device("meta")


def _is_xla(device: Any) -> bool:
    from trnsim.runtime.xla.modes import _xla

    return _xla(device)


class LazyDevice:
    """One per process (`DEVICE`): the pending graph, the compile cache and the step history."""

    def __init__(self) -> None:
        self.executor = None  # set by `configure` (trnsim.runtime.xla.executor.Executor)
        self.graphs: list[StepGraph] = []  # every executed graph, in order
        self.precision = None  # trnsim.runtime.xla.precision.Precision, when bf16 is asked for
        self.closures: list = []  # xm.add_step_closure: run after the next mark_step
        self.pending_collectives: list[tuple[str, int, int]] = []  # (op, bytes, ranks)
        self.step_listeners: list = []  # called with each mark_step's graph (TensorBoard)
        self.pending_inputs: list[list[IrValue]] = []  # per pending collective: what it reduces
        # keep what a functional run of a graph (`functional.run_functional`) reads: the values
        # random ops drew (dropout masks), and a copy of device data as it became data (its
        # CPU tensor, or a view of it, may be written in place later; the graph reads it before)
        self.keep_values = False
        # values of each cut graph's roots from trnsim's compiled program run functionally on
        # the simulator instead of PyTorch's CPU values (slow: for checking the kernels)
        self.simulated_values = os.environ.get(VALUES_ENV) == "simulated"
        if self.simulated_values:
            self.keep_values = True
        # timing only: device tensors hold meta tensors (a shape and a dtype, no storage), so
        # every op is recorded and timed but no value is computed, and a step of any size
        # needs host memory for its graph only (the planner measures layers of 70B+ models so)
        self.shapes_only = os.environ.get(VALUES_ENV) == "shapes"

    @property
    def host(self) -> torch.device:
        """Where the device's values live on the host: CPU, or nowhere (meta) in shapes mode."""
        return META if self.shapes_only else CPU

    def note_factory(self) -> None:
        from trnsim.runtime.xla.metrics import METRICS

        METRICS.count("xla::factory")

    # --- recording ----------------------------------------------------------------------------
    def dispatch(self, func, args: tuple, kwargs: dict) -> Any:
        if func is aten._local_scalar_dense.default:
            self._readable(".item()")
            self.sync([args[0]], ".item()", user_source(3))
            return args[0].value.item()
        if func is aten._to_copy.default and not _is_xla(kwargs.get("device", "xla")):
            self._readable(".cpu()")
            self.sync([args[0]], ".cpu()", user_source(3))
            return func(unwrap(args[0]), **kwargs)
        if func in (aten.copy_.default,) and not isinstance(args[0], XlaTensor):
            self._readable(".copy_ to host")
            self.sync([args[1]], ".copy_ to host", user_source(3))
            return func(args[0], unwrap(args[1]), **kwargs)
        if func is aten.equal.default:
            self._readable("torch.equal")
        if func is aten.is_same_size.default or func is aten.equal.default:
            return func(*unwrap(args), **unwrap(kwargs))
        host = self.host
        host_kwargs = {k: (host if k == "device" and _is_xla(v) else v) for k, v in kwargs.items()}
        raw_args, raw_kwargs = unwrap(args), unwrap(host_kwargs)
        if self.precision is not None and not self.shapes_only:  # no values: nothing to round
            out = self.precision.run(func, raw_args, raw_kwargs)
        else:
            out = func(*raw_args, **raw_kwargs)
        return self._record(func, args, kwargs, out)

    def _record(self, func, args: tuple, kwargs: dict, out: Any) -> Any:
        ref = lambda x: x.ir if isinstance(x, XlaTensor) else x  # noqa: E731
        node = IrNode(func, tree_map(ref, args), tree_map(ref, kwargs), [], node_source(4))
        mutated = _written_args(func, args, kwargs)
        for i, target in mutated:
            value = IrValue(tuple(target.shape), target.dtype, node, i)
            node.outputs.append(value)
            target.ir = value
        if mutated:
            if isinstance(out, torch.Tensor) and out is not None and len(mutated) == 1:
                return mutated[0][1]
            flat = out if isinstance(out, (tuple, list)) else [out]
            return type(flat)(m for _, m in mutated) if len(flat) == len(mutated) else out
        counter = iter(range(1 << 30))
        drawn = DRAWN.get(func) if self.keep_values else None

        def wrap(x: Any) -> Any:
            if not isinstance(x, torch.Tensor):
                return x
            value = IrValue(tuple(x.shape), x.dtype, node, next(counter))
            if value.index == drawn:
                value.value = x
            node.outputs.append(value)
            return XlaTensor(x, value)

        return tree_map(wrap, out)

    def _readable(self, what: str) -> None:
        if self.shapes_only:
            raise ShapesOnlyError(what, user_source(4))

    # --- cutting ------------------------------------------------------------------------------
    def sync(self, tensors: list, why: str, source: str | None) -> StepGraph | None:
        """Execute the pending graph of `tensors` (all live tensors for a mark_step)."""
        if why != "mark_step":
            METRICS.count("aten::_local_scalar_dense" if why == ".item()" else "aten::_to_copy")
        roots, seen = [], set()
        for t in tensors:
            if isinstance(t, XlaTensor) and t.ir.node is not None and t.ir.uid not in seen:
                seen.add(t.ir.uid)
                roots.append(t.ir)
        if not roots:
            return None
        if why == "mark_step":  # a collective's inputs are outputs of the graph: their write
            for values in self.pending_inputs:  # times say when the collective may start
                for v in values:
                    if v.node is not None and v.uid not in seen:
                        seen.add(v.uid)
                        roots.append(v)
        roots.sort(key=lambda v: v.uid)  # creation order: the same program gives the same graph
        graph = build_graph(roots, why, source)
        if why == "mark_step":
            graph.collectives, self.pending_collectives = self.pending_collectives, []
            graph.collective_inputs = [[v.uid for v in values] for values in self.pending_inputs]
            self.pending_inputs = []
        if self.executor is None:
            from trnsim.runtime.xla.executor import Executor

            self.executor = Executor.from_env()
        self.executor.execute(graph)
        self.graphs.append(graph)
        done = {r.uid: r for r in roots}
        computed = {}
        if self.simulated_values:
            from trnsim.runtime.xla.functional import run_functional

            computed = dict(zip(done, run_functional(graph, self.executor.instance),
                                strict=True))
        for t in list(LIVE):
            if t.ir.uid in done:
                if computed:
                    with torch.no_grad():
                        t.value.copy_(computed[t.ir.uid])
                made = t.ir.node.source if t.ir.node is not None else t.ir.source
                t.ir = data_value(t.value, made)
        return graph

    def mark_step(self, source: str | None = None) -> None:
        METRICS.count("MarkStep")
        source = source or user_source(3)
        graph = self.sync(list(LIVE), "mark_step", source)
        closures, self.closures = self.closures, []
        for closure, args in closures:
            closure(*args)
        if graph is not None:
            for listener in self.step_listeners:
                listener(graph)

    def collective(self, op: str, nbytes: int, ranks: int, inputs: list | None = None) -> None:
        """A collective in the pending graph, reading `inputs` (IrValues); timed with the graph
        that holds it."""
        self.pending_collectives.append((op, nbytes, ranks))
        self.pending_inputs.append(list(inputs or []))


DRAWN = {aten.native_dropout.default: 1}  # random op -> the output its generator drew (the mask)


def _written_args(func, args: tuple, kwargs: dict | None = None) -> list[tuple[int, XlaTensor]]:
    """The XlaTensor arguments an in-place or `out=` op writes (schema alias info), with their
    position in the schema."""
    written = []
    for i, arg in enumerate(func._schema.arguments):
        info = arg.alias_info
        if info is not None and info.is_write and (i < len(args) or arg.name in (kwargs or {})):
            value = args[i] if i < len(args) else kwargs[arg.name]
            if isinstance(value, XlaTensor):
                written.append((i, value))
            elif isinstance(value, (list, tuple)):  # _foreach_*_ ops write every list element
                written += [(i, v) for v in value if isinstance(v, XlaTensor)]
    return written


class MetaTensorError(UnsupportedError):
    """A tensor on PyTorch's meta device (deferred init: `torch.device("meta")`, accelerate's
    `init_empty_weights`) moved to the xla device: it has a shape but no values, and the lazy
    device computes every value a script can read."""

    def __init__(self, shape: tuple, source: str | None) -> None:
        super().__init__(
            f"moving a tensor of shape {list(shape)} from the meta device to the xla device: "
            "it has no values (weights built on the meta device / init_empty_weights). "
            "Materialise the model first: model.to_empty(device=device) and initialise it "
            f"(or load its weights), or set {VALUES_ENV}=shapes to time the step without values",
            source=source)


class ShapesOnlyError(UnsupportedError):
    """A host read of a device value under TRNSIM_XLA_VALUES=shapes, where none is computed."""

    def __init__(self, what: str, source: str | None) -> None:
        super().__init__(f"{what} reads a device value, but {VALUES_ENV}=shapes computes none "
                         "(timing only: shapes and dtypes); unset it to compute values",
                         source=source)


DEVICE = LazyDevice()


def to_device(tensor: torch.Tensor, index: int = 0) -> XlaTensor:
    """A host tensor moved to the device: device data (a transfer, no graph)."""
    if isinstance(tensor, XlaTensor):
        return tensor
    start = time.perf_counter()
    if DEVICE.shapes_only:  # a shape and a dtype: from the meta device, or from a host tensor
        value = torch.empty_strided(tensor.shape, tensor.stride(), dtype=tensor.dtype,
                                    device=META)
    elif tensor.is_meta:
        raise MetaTensorError(tuple(tensor.shape), user_source(3))
    else:
        value = tensor.detach().clone()
    if DEVICE.precision is not None and not DEVICE.shapes_only:
        value = DEVICE.precision.after_transfer(value)
    out = XlaTensor(value, None, index)
    METRICS.sample("TransferToDeviceTime", (time.perf_counter() - start) * 1e9)
    METRICS.count("CreateXlaTensor")
    if tensor.requires_grad:
        out.requires_grad_(True)
    return out


def flatten_tensors(tree: Any) -> list:
    return [x for x in tree_flatten(tree)[0] if isinstance(x, XlaTensor)]


def _stderr(message: str) -> None:
    print(message, file=sys.stderr)
