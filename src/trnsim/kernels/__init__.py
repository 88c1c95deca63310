"""trnsim's kernel library: the kernels compiled models run, written in trnsim's (legacy) NKI.

The compiler's lowering (`trnsim.compiler.lowering`) maps each kernel-level graph node
(``k.matmul``, ``k.attention`` ... see `trnsim.compiler.fused`) onto one function here, called
inside an active NKI trace (`trnsim.nki.trace.tracing`) so every kernel of a model lands in one
program and the simulator can overlap one kernel's weight DMA with the previous kernel's compute.
Each kernel runs in its own trace scope: its SBUF/PSUM tiles are freed when it returns.

Contract (all tensors are HBM `trnsim.nki.tile.Tile` views in the current trace, row-major in the
model's logical layout, possibly strided or with stride-0 broadcast axes; `out` is written,
nothing is returned):

- ``matmul(out, a, b, *, bias=None, extras=(), transpose_a=False, transpose_b=False,
  compute_dtype="bfloat16", stationary="a", epilogue=None)``:
  out[*batch, m, n] = epilogue(A @ B + bias, extras) with A = a (or a^T: a stored [.., k, m]) and
  B = b (or b^T: b stored [.., n, k]); batch dims broadcast; bias is [n]; operands are read in
  `compute_dtype` (cast on load), accumulation is fp32 in PSUM. `stationary` says which operand
  the compiler wants held in the PE array; "b" is honoured for m <= 512 (out^T is computed and
  transposed back); for larger m both orientations cost the same matmul cycles and "a" is used.
  `extras` are HBM tensors broadcastable to out.
- ``conv2d(out, x, w, *, bias=None, extras=(), stride, padding, dilation, groups, compute_dtype,
  epilogue=None)``: NCHW / OIHW; output rows up to 512 columns.
- ``attention(out, q, k, v, *, scale, mask=None, mask_kind="none", k_transposed=False,
  compute_dtype="bfloat16")``: out = softmax(q k^T * scale + mask) v, softmax in fp32; mask_kind
  "causal" (no operand), "bias" (additive, broadcastable to [*b, sq, sk]) or "bool" (True keeps);
  the last batch axis is read as heads. Head dim <= 128, keys <= 2048.
- ``softmax(out, x, *, axis, scale=1.0, log=False, mask=None)``.
- ``norm(out, x, *, kind="layer"|"rms", normalized=1, eps, residual=None, weight=None,
  bias=None)``: statistics in fp32 over the trailing `normalized` axes of x (+ residual).
- ``elementwise(out, inputs, *, program)``: inputs broadcast to out.
- ``reduce(out, x, *, op, axes, keepdim, correction=None, prologue=None)``: empty `axes`
  reduces nothing (numpy's axis=()), except argmax/argmin, which then reduce everything.
- ``gather(out, table, *indices, kind, axis=0, dims=())``: embedding rows, index_select,
  torch.gather (`kind="gather"`), integer advanced indexing (`kind="index"` on `dims`); indices
  are integer tensors known only at run time (indirect DMA / GpSimd gather).
- ``scatter(out, x, values, index)``: x with rows index[i] of axis 0 set to values[i] (indirect
  DMA writes; a repeated index keeps the last).
- ``pool2d(out, x, *, kind, kernel, stride, padding, dilation, ceil_mode, count_include_pad,
  divisor_override, output_size)``.
- ``topk(out, x, *, k, axis, largest=True, part="values")``: the k largest (smallest) along
  `axis`, best first, ties to the lower index; `part` "indices" writes their positions (int32).
- ``cumsum(out, x, *, axis)``, ``concat(out, inputs, *, axis)``, ``pad(out, x, *, pads, value)``,
  ``copy(out, x)`` (materialise a strided view; `x` may have another shape with out's number of
  elements: a reshape, in row-major element order).
- ``collective(out, x, *, kind, axis, degree)``: all-gather along `axis` or all-reduce (sum)
  over the `degree` ranks of a tensor-parallel model (one `CollectiveOp`, timed by the fabric).

Callables (built by the lowering from the graph's fused step programs):
- ``epilogue(acc, extras) -> Tile``: `acc` is the fp32 accumulator of one output block (a 2-D
  on-chip tile, bias already added), `extras` the blocks of `extras` in the same layout; the
  returned tile is written to out (cast to out's dtype).
- ``program(tiles) -> Tile`` and ``prologue(tiles) -> Tile``: the same for element-wise work on
  equally shaped 2-D blocks of the inputs.

`trnsim.kernels.harness.run` runs one kernel on its own (numpy arrays in, output and profile out)
for tests and benchmarks.
"""

from trnsim.kernels.attention import attention
from trnsim.kernels.collective import collective
from trnsim.kernels.conv import conv2d
from trnsim.kernels.elementwise import concat, copy, elementwise, pad
from trnsim.kernels.gather import gather, scatter
from trnsim.kernels.matmul import matmul
from trnsim.kernels.norms import norm
from trnsim.kernels.pool import pool2d
from trnsim.kernels.reductions import cumsum, reduce, softmax, topk

__all__ = ["attention", "collective", "concat", "conv2d", "copy", "cumsum", "elementwise", "gather", "matmul",
           "norm", "pad", "pool2d", "reduce", "scatter", "softmax", "topk"]
