"""trnsim's kernel library: the kernels compiled models run, written in trnsim's (legacy) NKI.

The compiler's lowering (`trnsim.compiler.lowering`) maps each kernel-level graph node
(``k.matmul``, ``k.attention`` ... see `trnsim.compiler.kernel_ops`) onto one function here, called
inside an active NKI trace (`trnsim.nki.trace.tracing`) so every kernel of a model lands in one
program and the simulator can overlap one kernel's weight DMA with the previous kernel's compute.
Each kernel runs in its own trace scope: its SBUF/PSUM tiles are freed when it returns.

Contract: all tensors are HBM `trnsim.nki.tile.Tile` views in the current trace, row-major in
the model's logical layout, possibly strided or with stride-0 broadcast axes; `out` is written,
nothing is returned. What each kernel computes (operands, attributes, rounding, limits) is the
`doc` and `reference` of its op's record in `trnsim.compiler.kernel_ops`, which also says how
the lowering calls it; ``copy(out, x)`` (materialise a strided view; `x` may have another shape
with out's number of elements: a reshape, in row-major element order) has no op of its own.

Callables (built by the lowering from the graph's fused step programs):
- ``epilogue(acc, extras) -> Tile``: `acc` is the fp32 accumulator of one output block (a 2-D
  on-chip tile, bias already added), `extras` the blocks of `extras` in the same layout; the
  returned tile is written to out (cast to out's dtype).
- ``program(tiles) -> Tile`` and ``prologue(tiles) -> Tile``: the same for element-wise work on
  equally shaped 2-D blocks of the inputs.

The repository's ``tests/kernels/harness.py`` runs one kernel on its own (numpy arrays in, output
and profile out) for tests and benchmarks.
"""

from trnsim.kernels.attention import attention
from trnsim.kernels.collective import collective
from trnsim.kernels.conv import conv2d
from trnsim.kernels.elementwise import concat, copy, elementwise, pad
from trnsim.kernels.flash_attention import flash_attention_backward_packed, flash_attention_packed
from trnsim.kernels.gather import gather, scatter
from trnsim.kernels.matmul import matmul
from trnsim.kernels.norms import norm
from trnsim.kernels.pool import pool2d
from trnsim.kernels.reductions import cumsum, reduce, softmax, topk

__all__ = ["attention", "collective", "concat", "conv2d", "copy", "cumsum", "elementwise",
           "flash_attention_backward_packed", "flash_attention_packed", "gather", "matmul", "norm",
           "pad", "pool2d", "reduce", "scatter", "softmax", "topk"]
