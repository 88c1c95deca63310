"""Fused step programs: the element-wise work kernel-level operators carry as data.

A `Program` is a tuple of `Step`s (``s<j> = op(args) {attrs}``) that a ``k.elementwise`` node
computes, that ``k.reduce`` applies first (its prologue), and that ``k.matmul`` / ``k.conv2d``
apply at PSUM eviction (their epilogue: steps may also read ``acc``, the fp32 accumulator).
Steps read ``in<k>`` (operand k of the node), ``s<j>`` (an earlier step) or literals; the last
step's value is the result. All of it is plain data, so a graph can be printed, compared and
saved as JSON. The kernel-level operators themselves (``k.*``: shape rule, reference, lowering)
are records in `trnsim.compiler.kernel_ops`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trnsim.compiler.errors import IRError

if TYPE_CHECKING:
    from trnsim.compiler.ir import Graph

Arg = str | float | int | bool  # "acc", "in<k>", "s<j>", or a literal


@dataclass(frozen=True)
class Step:
    """One elementwise operation of a fused `Program`: ``s<j> = op(args) {attrs}``."""

    op: str  # an elementwise IR op (trnsim.compiler.ops.ELEMENTWISE)
    args: tuple[Arg, ...]
    attrs: tuple[tuple[str, Any], ...] = ()
    dtype: str = "float32"  # the step's result dtype

    def attr(self, key: str, default: Any = None) -> Any:
        return dict(self.attrs).get(key, default)

    def pretty(self) -> str:
        args = ", ".join(a if isinstance(a, str) else repr(a) for a in self.args)
        extra = "".join(f" {k}={v!r}" for k, v in self.attrs)
        return f"{self.op}({args}{extra})"


Program = tuple[Step, ...]


def check_program(program: Program, operands: int, *, has_acc: bool) -> None:
    for j, step in enumerate(program):
        for a in step.args:
            if not isinstance(a, str):
                continue
            if a == "acc" and has_acc:
                continue
            if a.startswith("in") and a[2:].isdigit() and int(a[2:]) < operands:
                continue
            if a.startswith("s") and a[1:].isdigit() and int(a[1:]) < j:
                continue
            raise IRError(f"program step {j} ({step.pretty()}) reads {a!r}, which is not defined")


# What a graph may hold once fusion is done (checked by `check_kernel_level`).
KERNEL_LEVEL_LEAVES = ("input", "constant", "scalar", "full", "arange")
KERNEL_LEVEL_VIEWS = ("reshape", "permute", "expand", "slice")


def check_kernel_level(graph: Graph) -> None:
    """Raise `IRError` if any node is neither a leaf, a view nor a ``k.*`` kernel."""
    from trnsim.compiler.kernel_ops import KERNEL_OPS

    allowed = set(KERNEL_LEVEL_LEAVES) | set(KERNEL_LEVEL_VIEWS) | set(KERNEL_OPS)
    stray = sorted({n.op for n in graph.nodes if n.op not in allowed})
    if stray:
        raise IRError(f"operators left unfused at kernel level: {', '.join(stray)}")
