"""`KernelOp`: one kernel-level operator (``k.*``) declared once: its attributes, shape rule,
reference semantics and lowering side by side, the way `trnsim.isa` declares an opcode with
its semantics and cost.

- ``shape(inputs, attrs, graph) -> (shape, dtype)``: the IR's shape and dtype rule; raises
  `IRError` on operands that do not fit (registered in `trnsim.compiler.ops.OPS`).
- ``reference(node, args, graph) -> ndarray``: what the kernel must compute, including where
  it rounds (registered in `trnsim.compiler.interpret.EVAL`: the executable contract).
- ``lower(lowering, node, out)``: the call of a `trnsim.kernels` kernel that computes it, made
  through the lowering (`trnsim.compiler.lowering`: ``tile``, ``call``, ``epilogue``, ...).
- ``doc``: the node's operands and attributes and the kernel's contract, in prose.

Shared rounding conventions of the references: matmul and conv operands are cast (RNE) to
``compute_dtype`` on load, products accumulate in fp32 (PSUM), epilogues and softmax/norm
statistics run in fp32 (the engines' arithmetic), and only the final value is rounded to the
node's dtype. Attention casts its probabilities to ``compute_dtype`` before the second matmul,
as a bf16 attention kernel does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from trnsim.compiler.errors import IRError
from trnsim.compiler.fused import Program, check_program
from trnsim.numerics import DType, cast, dtype

F32 = np.float32


@dataclass(frozen=True)
class KernelOp:
    name: str  # "k.matmul"
    attrs: tuple[str, ...]  # attributes every node of this op carries
    shape: Callable
    reference: Callable
    lower: Callable
    doc: str = ""


def ref():
    """The reference interpreter (imported on use: it imports this package's table)."""
    from trnsim.compiler import interpret

    return interpret


def broadcast(*shapes):
    from trnsim.compiler.ops import broadcast as rule

    return rule(*shapes)


def out_dtype(attrs: dict[str, Any]) -> DType:
    return dtype(attrs["dtype"])


def same_as(op: str) -> tuple[Callable, Callable]:
    """Shape rule and reference of a kernel op that means what IR op `op` means."""
    def shape(inputs, attrs, graph):
        from trnsim.compiler.ops import OPS

        found, _ = OPS[op].rule(list(inputs), attrs, graph)
        return found, out_dtype(attrs)

    def reference(node, args, graph):
        interpret = ref()
        return interpret.store(interpret.EVAL[op](node, args, graph), node.dtype)

    return shape, reference


def epilogue_shape(out: tuple[int, ...], extras: Sequence, attrs: dict[str, Any],
                   total: int) -> tuple[int, ...]:
    check_program(tuple(attrs["epilogue"]), total, has_acc=True)
    for e in extras:
        if broadcast(out, e.shape) != out:
            raise IRError(f"epilogue operand {e.shape} does not broadcast to the output {out}")
    return out


def run_program(program: Program, operands: Sequence[np.ndarray], acc: np.ndarray | None = None
                ) -> np.ndarray:
    """Evaluate a fused elementwise program; float intermediates stay fp32 (engine precision)."""
    interpret = ref()
    results: list[np.ndarray] = []
    value = acc
    for step in program:
        args = [_arg(a, operands, results, acc) for a in step.args]
        out = dtype(step.dtype)
        keep = dtype("float32") if out.is_float else out
        value = interpret.elementwise(step.op, args, dict(step.attrs), keep)
        results.append(value)
    assert value is not None, "an empty program reads nothing"
    return value


def _arg(a: Any, operands: Sequence[np.ndarray], results: list[np.ndarray],
         acc: np.ndarray | None) -> np.ndarray:
    if isinstance(a, str):
        if a == "acc":
            assert acc is not None
            return acc
        if a.startswith("in"):
            return operands[int(a[2:])]
        return results[int(a[1:])]
    if isinstance(a, bool):
        return np.asarray(a)
    if isinstance(a, int):
        return np.asarray(a, np.int64)
    return np.asarray(a, F32)


def load(x: np.ndarray, compute_dtype: str) -> np.ndarray:
    """An operand as TensorE reads it: rounded (RNE) to compute_dtype, values in fp32."""
    interpret = ref()
    v = interpret.compute(x, True)
    if compute_dtype == "float32":
        return v
    return interpret.compute(np.asarray(cast(v, compute_dtype, rounding="rne")), True)


def kernels():
    """`trnsim.kernels` (imported on use: lowering is the only step that needs the library)."""
    from trnsim import kernels as library

    return library


def to_callable(program, **kwargs):
    from trnsim.compiler.lowering.steps import to_callable as build

    return build(program, **kwargs)
