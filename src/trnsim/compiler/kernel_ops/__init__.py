"""The kernel-level operators (``k.*``): one `KernelOp` record each, found in `KERNEL_OPS`.

After the fusion passes a graph holds only leaves (``input``, ``constant``, ``scalar``,
``full``, ``arange``), views (``reshape``, ``permute``, ``expand``, ``slice``: resolved by the
lowering into DMA access patterns, or a copy where a view node says ``fold="copy"``) and these
operators. Each record holds the op's attributes, shape rule, reference semantics (its
executable contract) and lowering onto one `trnsim.kernels` kernel (see `record`). The IR's
operator table (`trnsim.compiler.ops.OPS`), the reference interpreter
(`trnsim.compiler.interpret.EVAL`) and the lowering all look ops up here.

Adding a kernel-level op: one `KernelOp` in a module of this package (listed in `_MODULES`'
`OPS`), plus its kernel in `trnsim.kernels` if it is new, plus the pass that emits it.

Added by the last passes (see `trnsim.compiler.passes`): views get ``fold`` ("alias" | "dma" |
"copy") and ``access`` ((element offset, ((stride, size), ...)) into the base buffer); ``k.*``
nodes get ``prefetch`` (constant refs whose HBM -> SBUF loads should start while the kernel
runs: a record, see `trnsim.compiler.passes.schedule`); the graph gets meta["memory_plan"]
(`MemoryPlan`) and meta["schedule"] (kernels in order).
"""

from __future__ import annotations

from trnsim.compiler.kernel_ops import data, flash, linear, normalize
from trnsim.compiler.kernel_ops.data import COLLECTIVE_KINDS
from trnsim.compiler.kernel_ops.normalize import MASK_KINDS
from trnsim.compiler.kernel_ops.record import KernelOp, load, run_program

_MODULES = (linear, normalize, data, flash)
KERNEL_OPS: dict[str, KernelOp] = {op.name: op for module in _MODULES for op in module.OPS}

__all__ = ["COLLECTIVE_KINDS", "KERNEL_OPS", "MASK_KINDS", "KernelOp", "load", "run_program"]
