"""The one adapter between the lazy device and trnsim's compiler: StepGraph -> compiler IR.

Each recorded ATen call is translated by `trnsim.compiler.aten.TRANSLATIONS` when it has an
entry; otherwise PyTorch's own decomposition (`torch._decomp.core_aten_decompositions`, the
table torch.export uses) breaks it into ops that have one. That is how the backward ops autograd
recorded (`native_layer_norm_backward`, `_softmax_backward_data`, `embedding_dense_backward`,
`nll_loss_backward`, `gelu_backward` ...) reach kernels the compiler already lowers. In-place
ops are recorded as the out-of-place op whose result replaces the written tensor's value.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

from trnsim.compiler.aten import TRANSLATIONS, Translator, ir_dtype
from trnsim.compiler.aten_training import TRAINING
from trnsim.compiler.capture import aten_kind
from trnsim.compiler.errors import UnsupportedOp, UnsupportedOperatorError
from trnsim.compiler.ir import Graph, Node
from trnsim.errors import TrnsimError
from trnsim.runtime.xla.graph import StepGraph
from trnsim.runtime.xla.lazy import IrValue

aten = torch.ops.aten


@functools.cache
def _decompositions() -> dict:
    from torch._decomp import core_aten_decompositions

    table = dict(core_aten_decompositions())
    return {op: fn for op, fn in table.items() if _name(op) not in TRANSLATIONS}


def _name(op: Any) -> str:
    if not hasattr(op, "_schema"):
        return str(op)
    namespace, name = op._schema.name.split("::")
    return f"{namespace}.{name}.{op._overloadname}"


def functional(op: Any) -> Any:
    """`add_.Tensor` -> `add.Tensor`; `copy_` -> `copy`; `maximum.out` -> `maximum.default`;
    ops without a functional twin stay."""
    base = op._schema.name.split("::")[1]
    overload = op._overloadname
    if overload == "out" or overload.endswith("_out"):
        packet = getattr(aten, base, None)
        name = "default" if overload == "out" else overload[:-len("_out")]
        return getattr(packet, name, op) if packet is not None else op
    if not base.endswith("_") or base.startswith("_foreach"):
        return op
    packet = getattr(aten, base[:-1], None)
    if packet is None:
        return op
    return getattr(packet, op._overloadname, op)


def _device_dtype(dtype: torch.dtype) -> torch.dtype:
    from trnsim.runtime.xla.device import DEVICE

    return DEVICE.precision.device_dtype(dtype) if DEVICE.precision is not None else dtype


def drawn_values(step: StepGraph) -> list[IrValue]:
    """The random draws of `step` the device kept (`LazyDevice.keep_values`), in node order."""
    from trnsim.runtime.xla.device import DRAWN

    return [node.outputs[DRAWN[node.op]] for node in step.nodes if node.op in DRAWN
            and node.outputs[DRAWN[node.op]].value is not None]


def to_ir(step: StepGraph, name: str = "step", drawn: bool = False) -> Graph:
    """The compiler IR of a cut graph: inputs are its device data, outputs its roots (float32
    tensors are bf16 on the device under XLA_USE_BF16 / XLA_DOWNCAST_BF16). With `drawn`, the
    masks random ops drew (`drawn_values`) are inputs after the device data, in place of the
    device generator's draw, so that a functional run computes with PyTorch's masks."""
    graph = Graph(name)
    cx = Translator(graph)
    env: dict[int, Node] = {}
    for i, value in enumerate(step.inputs):
        env[value.uid] = graph.add("input", (), {"index": i, "name": f"in{i}", "shape": value.shape,
                                                 "dtype": ir_dtype(_device_dtype(value.dtype)).name,
                                                 "torch_dtype": str(value.dtype)}, name=f"in{i}")
    masks = {v.uid: v for v in drawn_values(step)} if drawn else {}
    unsupported: list[UnsupportedOp] = []
    for node in step.nodes:
        cx.source = node.source
        if node.op is aten.native_dropout.default and node.outputs[1].uid in masks:
            env[node.outputs[0].uid], env[node.outputs[1].uid] = _dropout_with_mask(
                cx, env[node.args[0].uid], node.args[1], node.outputs[1],
                len(graph.inputs))
            continue
        if any(isinstance(v, IrValue) and v.uid not in env
               for v in tree_flatten((node.args, node.kwargs))[0]):
            continue  # reads an op already reported as unsupported
        try:
            op = functional(node.op)
            kwargs = {k: v for k, v in node.kwargs.items() if k != "out"} \
                if op is not node.op else node.kwargs
            results = _translate_call(cx, op, node.args, kwargs, env,
                                      [(v.shape, _device_dtype(v.dtype)) for v in node.outputs])
        except TrnsimError as exc:
            unsupported.append(UnsupportedOp(aten_kind(_name(node.op)), node.source, exc.message))
            continue
        if len(results) > len(node.outputs):  # outputs PyTorch left undefined (an output_mask's
            results = [r for r in results if r is not None]  # False) were never recorded
        for value, result in zip(node.outputs, results, strict=False):
            env[value.uid] = result
    if unsupported:
        raise UnsupportedOperatorError(unsupported)
    graph.outputs = [env[r.uid] for r in step.roots]
    return graph.verify()


def _dropout_with_mask(cx: Translator, x: Node, p: float, mask: IrValue, index: int
                       ) -> tuple[Node, Node]:
    keep = cx.graph.add("input", (), {"index": index, "name": f"in{index}", "shape": mask.shape,
                                      "dtype": "bool_", "torch_dtype": str(mask.dtype)},
                        name=f"in{index}")
    scaled = cx.emit("mul", [cx.emit("where", [keep, x, cx.tensor(0.0)]),
                             cx.tensor(1.0 / (1.0 - p))])
    if scaled.dtype != x.dtype:
        scaled = cx.emit("cast", [scaled], dtype=x.dtype.name)
    return scaled, keep


def _stored(value: Any) -> Any:
    """A decomposition's intermediate as the device holds it. PyTorch's decompositions upcast
    bf16 operands to float32 (`_to_copy(dtype=float32)`) and compute in float32; under
    XLA_USE_BF16 / XLA_DOWNCAST_BF16 torch-xla stores every float32 tensor as bf16, those
    intermediates included, so they are bf16 in the IR too (and the upcast a no-op)."""
    if isinstance(value, torch.Tensor) and _device_dtype(value.dtype) != value.dtype:
        return torch.empty(value.shape, dtype=_device_dtype(value.dtype), device="meta")
    return value


def _meta(value: IrValue) -> torch.Tensor:
    return torch.empty(value.shape, dtype=_device_dtype(value.dtype), device="meta")


def _translate_call(cx: Translator, op: Any, args: Any, kwargs: Any, env: dict[int, Node],
                    outs: list[tuple]) -> list[Node]:
    """IR nodes for one ATen call whose tensor operands are `IrValue`s (or host tensors)."""
    target = _name(op)
    fn = TRAINING.get(target) or TRANSLATIONS.get(target)
    if fn is not None and not _host_tensors((args, kwargs)):
        cx.current_target = target
        expected = [torch.empty(s, dtype=d, device="meta") for s, d in outs]
        cx.expected = expected[0] if len(expected) == 1 else tuple(expected)
        if target.startswith("aten.copy."):  # copy(dst, src): the value is src cast/broadcast
            args = (args[0], args[1])
        result = fn(cx, *_lookup((args, kwargs), env, cx)[0], **_lookup((args, kwargs), env, cx)[1])
        results = list(result) if isinstance(result, (tuple, list)) else [result]
        return [r for r in results if isinstance(r, Node) or r is None]
    return _decomposed(cx, op, args, kwargs, env)


def _host_tensors(tree: Any) -> bool:
    return any(isinstance(x, torch.Tensor) for x in tree_flatten(tree)[0])


def _lookup(tree: Any, env: dict[int, Node], cx: Translator) -> Any:
    def get(x: Any) -> Any:
        if isinstance(x, IrValue):
            return env[x.uid]
        if isinstance(x, torch.Tensor):  # a host tensor operand: a graph constant
            from trnsim.compiler.capture import tensor_to_numpy

            return cx.graph.add_constant(tensor_to_numpy(x), origin="host")
        return x

    return tree_map(get, tree)


_TRACED: dict = {}  # (op, argument shapes) -> its decomposed FX graph (layers repeat)


def _shape_of(x: Any) -> Any:
    if isinstance(x, (IrValue, torch.Tensor)):
        return ("T", tuple(x.shape), str(x.dtype))
    return x


def _decomposed(cx: Translator, op: Any, args: Any, kwargs: Any, env: dict[int, Node]
                ) -> list[Node]:
    """Trace `op` with PyTorch's decomposition table and translate the ops it becomes."""
    from torch.fx.experimental.proxy_tensor import make_fx

    leaves, spec = tree_flatten((args, kwargs))
    positions = [i for i, x in enumerate(leaves) if isinstance(x, (IrValue, torch.Tensor))]
    examples = [_meta(leaves[i]) if isinstance(leaves[i], IrValue) else leaves[i].to("meta")
                for i in positions]

    def call(*tensors: torch.Tensor) -> Any:
        filled = list(leaves)
        for i, t in zip(positions, tensors, strict=True):
            filled[i] = t
        a, k = tree_unflatten(filled, spec)
        return op(*a, **k)

    signature = (str(op), repr(tree_map(_shape_of, (args, kwargs))))
    fx = _TRACED.get(signature)
    if fx is None:
        try:
            fx = make_fx(call, decomposition_table=_decompositions())(*examples)
        except Exception as exc:  # torch raises many types; the op is then unsupported
            raise TrnsimError(f"{_name(op)} cannot be decomposed: {exc}") from exc
        _TRACED[signature] = fx
    inner: dict[str, Any] = {}
    placeholders = [n for n in fx.graph.nodes if n.op == "placeholder"]
    for p, i in zip(placeholders, positions, strict=True):
        x = leaves[i]
        inner[p.name] = env[x.uid] if isinstance(x, IrValue) else _lookup(x, env, cx)
    for fx_node in fx.graph.nodes:
        if fx_node.op == "call_function":
            target = str(fx_node.target)
            if "getitem" in target:
                inner[fx_node.name] = inner[fx_node.args[0].name][fx_node.args[1]]
                continue
            fn = TRAINING.get(target) or TRANSLATIONS.get(target)
            if fn is None:
                raise TrnsimError(f"{_name(op)} decomposes into {target}, which trnsim does "
                                  "not translate")
            cx.current_target = target
            cx.expected = tree_map(_stored, fx_node.meta.get("val"))
            a = tree_map(lambda n: inner[n.name] if hasattr(n, "op") and hasattr(n, "name")
                         else n, (fx_node.args, fx_node.kwargs))
            inner[fx_node.name] = fn(cx, *a[0], **a[1])
        elif fx_node.op == "get_attr":
            from trnsim.compiler.capture import tensor_to_numpy

            constant = getattr(fx, fx_node.target)
            inner[fx_node.name] = cx.graph.add_constant(
                tensor_to_numpy(constant.to(_device_dtype(constant.dtype))),
                origin="decomposition")
        elif fx_node.op == "output":
            result = tree_map(lambda n: inner[n.name] if hasattr(n, "name") else n,
                              fx_node.args[0])
            results = list(result) if isinstance(result, (tuple, list)) else [result]
            return [r for r in results]
    return []
