"""Auto-cast, as neuronx-cc's ``--auto-cast {none,matmult,all}`` ``--auto-cast-type T``.

- ``matmult`` (neuronx-cc's default): the fp32 operands of matrix multiplications (matmul,
  convolution, attention's two products) are cast to T; TensorE accumulates in fp32 (PSUM), and
  the result stays fp32 for the ops that follow (``out_dtype``), so nothing else changes.
  Weights are cast once at compile time (a pending cast: the HBM image is T, half of fp32 for
  bf16); activations get a ``cast`` node that the fusion passes fold into the kernel's load.
- ``all``: every fp32 tensor becomes T: inputs are cast on entry, fp32 weights and fp32-typed
  generators become T, every op then computes on T values (engines still compute in fp32
  internally and round on write); outputs are cast back to fp32 so callers get eager's dtypes.
- ``none``: nothing changes.

``tf32`` is only a TensorE operand format (stored as fp32), so ``all`` with ``tf32`` casts the
matrix-multiply operands only, exactly like ``matmult``. Integer and bool tensors never change.
"""

from __future__ import annotations

from trnsim.compiler.ir import Graph, Node, Rewriter
from trnsim.compiler.options import AUTO_CAST_TYPES
from trnsim.errors import InvalidArgumentError

# Which operands of each matrix op auto-cast converts (others, e.g. conv bias or a mask, stay).
MATRIX_OPERANDS = {"matmul": (0, 1), "conv2d": (0, 1), "sdpa": (0, 1, 2)}
# Kernel-level ops the lazy device's translation emits before this pass, whose matrix products
# take their operand type from a `compute_dtype` attribute (the result's dtype stays).
FUSED_MATRIX = ("k.flash_attention", "k.flash_attention_backward")


def auto_cast(graph: Graph, mode: str = "matmult", cast_type: str = "bf16") -> Graph:
    if mode == "none":
        return graph
    if mode not in ("matmult", "all") or cast_type not in AUTO_CAST_TYPES:
        raise InvalidArgumentError(f"auto-cast {mode!r} / {cast_type!r}")
    target = AUTO_CAST_TYPES[cast_type]
    if mode == "all" and target != "tfloat32":
        return _cast_all(graph, target)
    return _cast_matmults(graph, target)


def _cast_matmults(graph: Graph, target: str) -> Graph:
    rw = Rewriter(graph)
    for node in graph.nodes:
        if node.op in FUSED_MATRIX and node.attrs["compute_dtype"] == "float32":
            # kernel-level already (training's flash attention): its products read T operands
            rw.replace(node, rw.emit(node.op, rw.operands(node),
                                     {**node.attrs, "compute_dtype": target},
                                     source=node.source, name=node.name))
            continue
        which = MATRIX_OPERANDS.get(node.op)
        if which is None or node.dtype.name != "float32":
            rw.keep(node)
            continue
        ins = rw.operands(node)
        for i in which:
            if ins[i].dtype.name == "float32":
                ins[i] = _cast(rw, ins[i], target)
        rw.replace(node, rw.emit(node.op, ins, {**node.attrs, "out_dtype": "float32"},
                                 source=node.source, name=node.name))
    return rw.finish()


def _cast(rw: Rewriter, x: Node, target: str) -> Node:
    """A cast of x to target: a pending cast of the same data for constants, else a node."""
    if x.op in ("reshape", "permute", "expand", "slice") and _over_constant(x):
        return rw.emit(x.op, [_cast(rw, x.inputs[0], target)], dict(x.attrs), source=x.source)
    if x.op == "constant":
        data = rw.new.constants[x.attrs["ref"]].cast_to(_dt(target))
        return rw.new.add_data(data, name=f"{x.attrs['ref']}_{target}", source=x.source)
    return rw.emit("cast", [x], {"dtype": target}, source=x.source)


def _over_constant(x: Node) -> bool:
    """A view chain whose base is a constant (a transposed weight): cast the weight itself."""
    while x.op in ("reshape", "permute", "expand", "slice"):
        x = x.inputs[0]
    return x.op == "constant"


def _dt(name: str):
    from trnsim.numerics import dtype
    return dtype(name)


def _cast_all(graph: Graph, target: str) -> Graph:
    rw = Rewriter(graph)
    for node in graph.nodes:
        is_f32 = node.dtype.name == "float32"
        if node.op == "input" and is_f32:
            rw.keep(node)
            rw.replace(node, rw.emit("cast", [rw.get(node)], {"dtype": target}, source=node.source))
        elif node.op == "constant" and is_f32:
            rw.replace(node, _cast(rw, node, target))
        elif node.op in ("full", "arange", "cast") and node.attrs["dtype"] == "float32":
            rw.keep(node, attrs={**node.attrs, "dtype": target})
        else:
            rw.keep(node)
    new = rw.finish(dce=False)
    outs = []
    for old, out in zip(graph.outputs, new.outputs, strict=True):
        if old.dtype != out.dtype:
            out = new.add("cast", [out], {"dtype": old.dtype.name}, source=out.source)
        outs.append(out)
    new.outputs = outs
    from trnsim.compiler.ir import eliminate_dead
    return eliminate_dead(new)
