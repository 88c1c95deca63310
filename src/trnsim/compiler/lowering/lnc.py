"""LNC=2: each kernel of a model split over the two physical NeuronCores of a logical one.

On Trainium2/3 the default logical NeuronCore is two physical NeuronCore-v3s sharing one HBM
address space, and ``--logical-nc-config`` sets "the degree of model sharding the compiler
performs on an input graph" (about-neuron/arch/neuron-features/logical-neuroncore-config.rst).
How neuronx-cc shards is not documented. ASSUMPTION (trnsim's sharding, one rule per kernel):

- every kernel's output is cut in two along one axis, each core computing one part from the
  parts of its operands that part needs (operands broadcast against the output are cut where
  they have that axis, read whole where they do not);
- a matmul whose weight outweighs its activations (decode, small batches) is cut along the
  weight's output columns, so each core streams half of the weights; otherwise along a batch
  axis or the rows of tokens; other kernels along their first axis of two or more elements that
  the kernel does not reduce over (attention over a masked query axis is not cut: its causal
  offsets are the whole sequence's);
- a tensor-parallel rank's collectives are issued by both of its cores, as the fabric wants
  every physical core of a rank (it reads core 0's input and gives both the result);
- kernels without a rule (gather, convolution, pooling, cumsum, pad) run on core 0,
  and so does a small kernel, unless its operands are already split its way between the cores
  (then each core works on what it holds, and neither waits): one whose work on one core takes
  less than `MIN_SPLIT_STARTS` DMA start latencies (its operand bytes at the
  core's DMA rate, its matmul FLOPs at TensorE's bf16 peak; about 10 us on NeuronCore-v3). A
  hand-over costs an HBM write, a barrier and an HBM read, about three start latencies, and
  breaks the on-chip hand-off of the next kernel. The threshold was chosen on trnsim's own
  timings, not on hardware measurements: with 8, BERT-base at batch 1 is no slower than on one
  physical core; with 1 to 4, a small transformer block (64 tokens, width 256) ran up to 45%
  slower and BERT-base up to 6% slower;
- a core that reads what the other core wrote first meets it at a `CoreBarrier` on that tensor
  (the semaphore exchange the hardware needs); what a core wrote and only it reads needs none.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from trnsim import kernels
from trnsim.kernels.layout import P
from trnsim.nki.tile import Tile

CORES = 2
MIN_SPLIT_STARTS = 8  # ASSUMPTION: see the module docstring
EXACT_OVERLAP_ELEMENTS = 1 << 22  # larger tensors are compared by the span they touch
ALIGN = P  # cut long axes at a multiple of the kernels' partition tile, so tiles stay whole


@dataclass
class Part:
    """One core's share of a kernel call: its arguments (tiles already cut)."""

    args: tuple
    kwargs: dict


def split_call(fn: Callable, args: tuple, kwargs: dict) -> list[Part] | None:
    """The two cores' parts of `fn(*args, **kwargs)`, or None when it runs on core 0 alone."""
    rule = _RULES.get(fn)
    if rule is None:
        return None
    return rule(args, kwargs)


def worth_splitting(fn: Callable, args: tuple, kwargs: dict, core) -> bool:
    """Whether a kernel's work on one core outlasts `MIN_SPLIT_STARTS` DMA start latencies."""
    nbytes = sum(t.size * t.dtype_spec.itemsize for t in tiles_in((args, kwargs)))
    seconds = nbytes / core.dma.bytes_per_s
    flops = _flops(fn, args, kwargs)
    peak = core.peak_flops("bf16")
    if flops and peak:
        seconds = max(seconds, flops / peak)
    return seconds * 1e9 >= MIN_SPLIT_STARTS * core.dma.start_latency_ns


def _flops(fn: Callable, args: tuple, kwargs: dict) -> int:
    out = args[0]
    if fn is kernels.matmul:
        a = args[1]
        k = a.shape[-2] if kwargs.get("transpose_a") else a.shape[-1]
        return 2 * out.size * k
    if fn is kernels.attention:
        q, key = args[1], args[2]
        sk = key.shape[-1] if kwargs.get("k_transposed") else key.shape[-2]
        return 2 * out.size // out.shape[-1] * sk * (q.shape[-1] + out.shape[-1])
    return 0


def tiles_in(value):
    """Every Tile in a kernel call's (nested) arguments."""
    if isinstance(value, Tile):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from tiles_in(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from tiles_in(item)


def cut_point(size: int) -> int:
    """Where an axis of `size` is cut: the middle, rounded up to a multiple of 128 when long."""
    half = -(-size // 2)
    if size >= 4 * ALIGN:
        half = -(-half // ALIGN) * ALIGN
    return half


def _slice(tile: Tile, axis: int, part: int) -> Tile:
    size = tile.shape[axis]
    cut = cut_point(size)
    key = [slice(None)] * tile.ndim
    key[axis] = slice(0, cut) if part == 0 else slice(cut, size)
    return tile[tuple(key)]


def _aligned(tile: Tile | None, out_rank: int, out_shape, axis: int, part: int) -> Tile | None:
    """`tile` (broadcast against the output) cut where it has the output's `axis`."""
    if tile is None:
        return None
    own = axis - (out_rank - tile.ndim)
    if own < 0 or tile.shape[own] != out_shape[axis] or tile.shape[own] < 2:
        return tile
    return _slice(tile, own, part)


def _first_axis(shape, skip=()) -> int | None:
    return next((i for i, n in enumerate(shape) if n >= 2 and i not in skip), None)


def _broadcast_parts(out: Tile, axis: int, args: tuple, kwargs: dict,
                     operands: Callable[[tuple, dict], tuple[tuple, dict]]) -> list[Part]:
    """Both parts, cutting `out` on `axis` and every operand by the broadcast rule."""
    parts = []
    for part in range(CORES):
        cut = lambda t, part=part: _aligned(t, out.ndim, out.shape, axis, part)  # noqa: E731
        new_args, new_kwargs = operands(args, kwargs, cut) if operands else (args, kwargs)
        parts.append(Part((_slice(out, axis, part), *new_args[1:]), new_kwargs))
    return parts


# --- rules ----------------------------------------------------------------------------------------
def _elementwise(args, kwargs):
    out = args[0]
    axis = _first_axis(out.shape)
    if axis is None:
        return None
    return _broadcast_parts(out, axis, args, kwargs,
                            lambda a, k, cut: ((a[0], [cut(t) for t in a[1]], *a[2:]), k))


def _copy(args, kwargs):
    out = args[0]
    axis = _first_axis(out.shape)
    if axis is None or tuple(args[1].shape) != tuple(out.shape):
        return None
    return _broadcast_parts(out, axis, args, kwargs, lambda a, k, cut: ((a[0], cut(a[1])), k))


def _concat(args, kwargs):
    out = args[0]
    along = kwargs["axis"] % out.ndim
    axis = _first_axis(out.shape, skip=(along,))
    if axis is None:
        return None
    return _broadcast_parts(out, axis, args, kwargs,
                            lambda a, k, cut: ((a[0], [cut(t) for t in a[1]]), k))


def _norm(args, kwargs):
    out = args[0]
    normalized = kwargs.get("normalized", 1)
    axis = _first_axis(out.shape[:out.ndim - normalized])
    if axis is None:
        return None

    def operands(a, k, cut):
        return (a[0], cut(a[1])), {**k, "residual": cut(k.get("residual"))}
    return _broadcast_parts(out, axis, args, kwargs, operands)  # weight/bias: trailing axes, whole


def _softmax(args, kwargs):
    out = args[0]
    axis = _first_axis(out.shape, skip=(kwargs["axis"] % out.ndim,))
    if axis is None:
        return None
    return _broadcast_parts(out, axis, args, kwargs,
                            lambda a, k, cut: ((a[0], cut(a[1])), {**k, "mask": cut(k.get("mask"))}))


def _reduce(args, kwargs):
    out, x = args[0], args[1]
    reduced = {a % x.ndim for a in kwargs.get("axes", ())}
    if not reduced or kwargs.get("op") in ("argmax", "argmin"):
        return None
    axis = _first_axis(x.shape, skip=reduced)
    if axis is None:
        return None
    out_axis = axis if kwargs.get("keepdim") else axis - sum(1 for r in reduced if r < axis)
    return [Part((_slice(out, out_axis, p), _slice(x, axis, p)), kwargs) for p in range(CORES)]


def _attention(args, kwargs):
    out, q, key, v = args[:4]
    lead = out.ndim - 2
    axis = _first_axis(out.shape[:lead])
    mask = kwargs.get("mask")
    parts = []
    if axis is not None:  # batch or heads: each core its own
        for p in range(CORES):
            cut = lambda t, p=p: _aligned(t, out.ndim, out.shape, axis, p)  # noqa: E731
            parts.append(Part((_slice(out, axis, p), cut(q), cut(key), cut(v)),
                              {**kwargs, "mask": cut(mask)}))
        return parts
    if kwargs.get("mask_kind", "none") != "none" or out.shape[-2] < 2:
        return None
    for p in range(CORES):  # queries; every core reads all keys
        rows = mask
        if mask is not None and mask.ndim >= 2 and mask.shape[-2] == out.shape[-2] > 1:
            rows = _slice(mask, mask.ndim - 2, p)
        parts.append(Part((_slice(out, lead, p), _slice(q, q.ndim - 2, p), key, v),
                          {**kwargs, "mask": rows}))
    return parts


def _matmul(args, kwargs):
    out, a, b = args[0], args[1], args[2]
    ta, tb = kwargs.get("transpose_a", False), kwargs.get("transpose_b", False)
    m, n = out.shape[-2:]
    weight = b.ndim == 2 or all(s == 1 for s in b.shape[:-2])
    b_bytes = int(np.prod(b.shape)) * b.dtype_spec.itemsize
    act_bytes = (int(np.prod(a.shape)) * a.dtype_spec.itemsize
                 + int(np.prod(out.shape)) * out.dtype_spec.itemsize)
    lead = _first_axis(out.shape[:-2])
    if weight and n >= 2 and (b_bytes > act_bytes or (lead is None and m < 2)):
        return _matmul_columns(args, kwargs, tb)
    if lead is not None:
        return _broadcast_parts(out, lead, args, kwargs, _matmul_operands)
    if m >= 2:
        parts = []
        for p in range(CORES):
            a_part = _slice(a, a.ndim - 1 if ta else a.ndim - 2, p)
            cut = lambda t, p=p: _aligned(t, out.ndim, out.shape, out.ndim - 2, p)  # noqa: E731
            parts.append(Part((_slice(out, out.ndim - 2, p), a_part, b),
                              {**kwargs, "extras": [cut(e) for e in kwargs.get("extras", ())]}))
        return parts
    if n >= 2:
        return _matmul_columns(args, kwargs, tb)
    return None


def _matmul_columns(args, kwargs, tb):
    out, a, b = args[0], args[1], args[2]
    parts = []
    for p in range(CORES):
        cut = lambda t, p=p: _aligned(t, out.ndim, out.shape, out.ndim - 1, p)  # noqa: E731
        bias = kwargs.get("bias")
        parts.append(Part((_slice(out, out.ndim - 1, p), a, _slice(b, b.ndim - 2 if tb else b.ndim - 1, p)),
                          {**kwargs, "bias": _slice(bias, 0, p) if bias is not None else None,
                           "extras": [cut(e) for e in kwargs.get("extras", ())]}))
    return parts


def _matmul_operands(args, kwargs, cut):
    out, a, b = args[0], args[1], args[2]
    return (out, cut(a), cut(b)), {**kwargs, "extras": [cut(e) for e in kwargs.get("extras", ())]}


_RULES: dict[Callable, Callable] = {
    kernels.matmul: _matmul,
    kernels.elementwise: _elementwise,
    kernels.copy: _copy,
    kernels.concat: _concat,
    kernels.norm: _norm,
    kernels.softmax: _softmax,
    kernels.reduce: _reduce,
    kernels.attention: _attention,
}


# --- who wrote what -------------------------------------------------------------------------------
@dataclass
class Handover:
    """HBM tensors each core has written since the cores last met on them."""

    written: dict[str, list[list[Tile]]] = field(default_factory=dict)

    def wrote(self, core: int, tile: Tile) -> None:
        self.written.setdefault(tile._storage.name, [[] for _ in range(CORES)])[core].append(tile)

    def crossing(self, core: int, tile: Tile) -> bool:
        """Whether `core` reading `tile` reads something the other core wrote."""
        writes = self.written.get(tile._storage.name)
        if not writes:
            return False
        return any(_overlap(tile, w) for other in range(CORES) if other != core
                   for w in writes[other])

    def met(self, name: str) -> None:
        self.written.pop(name, None)


def _span(tile: Tile) -> tuple[int, int]:
    lo = hi = tile._foffset
    for axis in tile._axes:
        reach = (axis.size - 1) * axis.fstep
        lo, hi = lo + min(0, reach), hi + max(0, reach)
    return lo, hi


def _offsets(tile: Tile) -> np.ndarray:
    offsets = np.array([tile._foffset], dtype=np.int64)
    for axis in tile._axes:
        offsets = (offsets[:, None] + np.arange(axis.size, dtype=np.int64)[None, :] * axis.fstep).ravel()
    return offsets


def _overlap(a: Tile, b: Tile) -> bool:
    (lo_a, hi_a), (lo_b, hi_b) = _span(a), _span(b)
    if hi_a < lo_b or hi_b < lo_a:
        return False
    if a.size > EXACT_OVERLAP_ELEMENTS or b.size > EXACT_OVERLAP_ELEMENTS:
        return True  # conservatively: they may share elements
    lo, hi = max(lo_a, lo_b), min(hi_a, hi_b)
    window = np.zeros(hi - lo + 1, dtype=bool)
    mine = _offsets(a)
    window[mine[(mine >= lo) & (mine <= hi)] - lo] = True
    theirs = _offsets(b)
    return bool(window[theirs[(theirs >= lo) & (theirs <= hi)] - lo].any())
