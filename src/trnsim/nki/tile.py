"""Tiles and tensors as kernels see them: shaped views over HBM tensors and on-chip buffers.

A `Tile` is a view: per axis a size and how one step moves the address (partition step `pstep`
and free-element step `fstep`), plus a start (`poffset`, `foffset`). Indexing composes views; an
instruction operand becomes an `isa.AccessPattern` with `access()`. Axes remember the arange that
indexed them (`tag`) so `mask=` can shrink them.

A tile produced by an nl/nisa call is *pending* until it is placed: assigning it (``t[...] =
nl.exp(x)``) emits the instruction straight into the destination, as the NKI compiler does;
otherwise it is materialised into a fresh tile before the next instruction is emitted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from math import prod
from typing import TYPE_CHECKING

from trnsim.errors import InvalidArgumentError, LimitExceededError
from trnsim.isa import AccessPattern, Memory
from trnsim.isa.access import HBM, SBUF, interned
from trnsim.nki.indexing import DynSlice, Grid, IndexExpr, MaskedOut, Predicate
from trnsim.numerics import DType
from trnsim.numerics import dtype as as_dtype

if TYPE_CHECKING:
    from trnsim.nki.trace import Trace

MAX_FREE_DIMS = 4


@dataclass(frozen=True, init=False)
class Axis:
    size: int
    pstep: int = 0  # partitions per index step (on-chip partition axis: 1)
    fstep: int = 0  # elements per index step within a partition / within the HBM tensor
    tag: int | None = None  # uid of the arange that indexed this axis
    # modulo allocation (ncc mod_alloc's num_free_tiles / num_bank_tiles): logical block i of
    # this axis lives in physical block i % wrap; 0 is no wrapping
    wrap: int = 0

    def __init__(self, size: int, pstep: int = 0, fstep: int = 0, tag: int | None = None,
                 wrap: int = 0) -> None:
        # written straight into the instance dict: a frozen dataclass's generated __init__ calls
        # object.__setattr__ per field, and tracing builds a few axes per indexed view (half of
        # index_view's time on a Llama-2-7B layer's matmuls)
        d = self.__dict__
        d["size"], d["pstep"], d["fstep"], d["tag"], d["wrap"] = size, pstep, fstep, tag, wrap


@dataclass
class Storage:
    """What a tile's bytes live in: an HBM tensor or an on-chip allocation."""

    memory: Memory
    dtype: DType
    name: str
    buffer: str  # the NKI buffer name: sbuf, psum, hbm, shared_hbm, private_hbm
    offset: int = 0  # on-chip: byte offset within each partition
    partitions: int = 0  # on-chip: partitions allocated
    bytes_per_partition: int = 0
    scope: tuple = ()  # loop scope chain at allocation (on-chip)
    freed: bool = False
    # Byte ranges (within each partition) of a PSUM nl.zeros tile not yet written: a matmul into
    # them starts a fresh accumulation group instead of adding to a memset.
    zero_ranges: list = field(default_factory=list)
    is_input: bool = False
    source: str | None = None
    freed_by: tuple = ()  # (loop kind, iteration, loop source) once its scope ended
    free_callback: Callable[[], None] | None = field(default=None, repr=False)
    # SBUF spilling (`trnsim.nki.spill`): the bytes are in `spill` (an HBM Tile), not in SBUF
    spilled: bool = False
    spill: object = field(default=None, repr=False)


@dataclass
class Pending:
    """An instruction waiting for its destination: emit(dst_tile, accumulate) writes it there."""

    emit: Callable[[Tile, bool], None]
    buffer: str  # where to materialise if never assigned: "sbuf" or "psum"
    # where to materialise instead when `buffer` is "psum" and PSUM has no room for the tile (a
    # placement the compiler chose, not the kernel: see `Trace.materialise`)
    fallback: str | None = None
    tags: tuple[int | None, ...] = ()  # arange tags of the result axes, for masks on the destination
    matmul: bool = False  # `psum += pending` accumulates
    accumulate: bool = False  # set when placed by `+=` into a PSUM tile already holding a sum


class Tile:
    """An NKI tensor/tile view. Kernels get these for their arguments and from nl/nisa calls."""

    __array_priority__ = 1000
    # (index tile [P, 1], step in elements): an HBM view whose partition p is row index[p] of
    # the indexed dimension (legacy `t[idx_tile, i_f]`; the current API's vector_offset)
    _vector: tuple | None = None

    def __init__(self, trace: Trace, storage: Storage | None, axes: tuple[Axis, ...], dtype: DType,
                 poffset: int = 0, foffset: int = 0, pending: Pending | None = None,
                 name: str = "", checks: tuple = ()) -> None:
        self._trace = trace
        self._storage = storage
        self._axes = axes
        self._dtype = dtype
        self._poffset = poffset
        self._foffset = foffset
        self._pending = pending
        self.name = name
        # Index-expression bounds to verify once masks are known: (axis index, dim size, const,
        # ((tag, coef, size), ...)). NKI allows out-of-range index tiles where a mask cuts them.
        self._checks = checks

    # --- basic properties ----------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        axes, shape = self._shape_of
        if axes is not self._axes:  # (kernels ask a tile its shape again and again)
            axes = self._axes
            shape = tuple([a.size for a in axes])
            self._shape_of = (axes, shape)
        return shape

    _shape_of: tuple = (None, ())  # (the axes, their sizes) last computed by `shape`

    @property
    def ndim(self) -> int:
        return len(self._axes)

    @property
    def dtype(self):
        return self._trace.user_dtype(self._dtype)

    @property
    def dtype_spec(self) -> DType:
        return self._dtype

    @property
    def buffer(self) -> str:
        return self._pending.buffer if self._pending else self._storage.buffer

    @property
    def size(self) -> int:
        return prod(self.shape)

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        state = "pending" if self._pending else self.buffer
        return f"Tile({self.name or '?'}, {state}, {self._dtype.name}{list(self.shape)})"

    # --- placement of pending results ----------------------------------------------------------
    @property
    def is_pending(self) -> bool:
        return self._pending is not None

    def _become(self, other: Tile) -> None:
        """Alias this (pending) tile to `other`'s storage after the result was placed there."""
        self._storage, self._axes = other._storage, other._axes
        self._poffset, self._foffset, self._dtype = other._poffset, other._foffset, other._dtype
        self._pending = None

    def placed(self) -> Tile:
        """Materialise if pending (allocates a fresh tile in the default buffer)."""
        if self._pending is not None:
            self._trace.materialise(self)
        return self

    # --- indexing -------------------------------------------------------------------------------
    def __getitem__(self, key) -> Tile:
        self.placed()
        self._trace.check_alive(self)
        return index_view(self, key)

    def __setitem__(self, key, value) -> None:
        if isinstance(value, Tile) and value._just_written:
            value._just_written = False  # `t[i] += x`: __iadd__ already wrote the view in place
            return
        self.placed()
        self._trace.assign(index_view(self, key), value)

    def __iadd__(self, other):
        self.placed()
        self._trace.accumulate(self, other)
        self._just_written = True
        return self

    def __isub__(self, other):
        return self._inplace(other, "subtract")

    def __imul__(self, other):
        return self._inplace(other, "multiply")

    def _inplace(self, other, op: str) -> Tile:
        from trnsim.nki.language import elementwise

        self.placed()
        self._trace.assign(self, elementwise.binary(op, self, other))
        self._just_written = True
        return self

    _just_written = False

    # --- reshaping and reinterpretation ---------------------------------------------------------
    def reshape(self, *shape, **kwargs) -> Tile:
        if "shape" in kwargs:  # t.reshape(shape=(...)), as the legacy API also accepts
            shape = (kwargs.pop("shape"),)
        if kwargs or not shape:
            raise InvalidArgumentError(f"reshape takes a shape; got {shape} {kwargs}")
        shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        self.placed()
        return reshape_view(self, tuple(int(s) for s in shape))

    def view(self, dtype) -> Tile:
        self.placed()
        return dtype_view(self, as_dtype(dtype))

    def broadcast_to(self, shape) -> Tile:
        """t.broadcast_to(shape): nl.broadcast_to(t, shape)."""
        from trnsim.nki.language.memory import broadcast_to

        return broadcast_to(self, shape=shape)

    def ap(self, pattern, offset: int = 0, dtype=None) -> Tile:
        """The current API's explicit access pattern: [[stride, size], ...], partition first."""
        self.placed()
        return explicit_view(self, pattern, offset, as_dtype(dtype) if dtype is not None else None)

    # --- arithmetic operators map to nl calls ---------------------------------------------------
    def _binary(self, other, op: str, reverse: bool = False):
        from trnsim.nki.language import elementwise

        return elementwise.binary(op, other, self) if reverse else elementwise.binary(op, self, other)

    def __add__(self, o):
        return self._binary(o, "add")

    def __radd__(self, o):
        return self._binary(o, "add", True)

    def __sub__(self, o):
        return self._binary(o, "subtract")

    def __rsub__(self, o):
        return self._binary(o, "subtract", True)

    def __mul__(self, o):
        return self._binary(o, "multiply")

    def __rmul__(self, o):
        return self._binary(o, "multiply", True)

    def __truediv__(self, o):
        return self._binary(o, "divide")

    def __rtruediv__(self, o):
        return self._binary(o, "divide", True)

    def __pow__(self, o):
        return self._binary(o, "pow")

    def __neg__(self):
        return self._binary(-1.0, "multiply")

    def __lt__(self, o):
        return self._binary(o, "less")

    def __le__(self, o):
        return self._binary(o, "less_equal")

    def __gt__(self, o):
        return self._binary(o, "greater")

    def __ge__(self, o):
        return self._binary(o, "greater_equal")

    def __and__(self, o):
        return self._binary(o, "bitwise_and")

    def __or__(self, o):
        return self._binary(o, "bitwise_or")

    def __xor__(self, o):
        return self._binary(o, "bitwise_xor")

    __hash__ = object.__hash__

    # --- lowering to an access pattern ----------------------------------------------------------
    def access(self, predicate: Predicate | None = None,
               tags: tuple[int | None, ...] | None = None) -> AccessPattern:
        """This view as an instruction operand, shrunk by a mask predicate."""
        if predicate is None:  # (the common case: no mask, usually no deferred index checks)
            if self._checks:
                _run_checks(self, None)
            return to_access_pattern(self)
        if predicate.empty:
            raise MaskedOut
        view = masked_view(self, predicate, tags)
        _run_checks(self, predicate)
        return to_access_pattern(view)

    @property
    def tags(self) -> tuple[int | None, ...]:
        return tuple(a.tag for a in self._axes)


# --- view algebra ---------------------------------------------------------------------------------

def _normalise_key(key, rank: int) -> list:
    key = list(key) if isinstance(key, (tuple, Grid)) else [key]  # t[nl.mgrid[0:128, 0:512]]
    if any(k is Ellipsis for k in key):
        at = key.index(Ellipsis)
        key[at:at + 1] = [slice(None)] * (rank - len(key) + 1)
    if len(key) > rank:
        raise InvalidArgumentError(f"too many indices ({len(key)}) for a tile of rank {rank}")
    return key + [slice(None)] * (rank - len(key))


def _plain_view(tile: Tile, key) -> Tile | None:
    """`index_view` of the common key (one in-bounds integer or unit-step slice of plain ints
    per axis, no modulo-allocated axis), or None for the general path. Tracing a matmul indexes
    five views per instruction; this skips the general path's per-part dispatch."""
    parts = key if type(key) is tuple else (key,)
    axes = tile._axes
    if len(parts) != len(axes):
        return None
    poffset, foffset = tile._poffset, tile._foffset
    basic: list[Axis] = []
    for axis, part in zip(axes, parts):  # noqa: B905 - lengths checked above
        size = axis.size
        if axis.wrap:
            return None
        if type(part) is slice:
            start, stop = part.start, part.stop
            if part.step is not None:
                return None
            if start is None:
                start = 0
            elif type(start) is not int or not 0 <= start <= size:
                return None
            if stop is None:
                stop = size
            elif type(stop) is not int or not 0 <= stop <= size:
                return None
            if stop <= start:
                return None  # empty: the general path refuses it
            if stop - start == size:  # the whole axis: the same (immutable) axis
                basic.append(axis)
                continue
            poffset += start * axis.pstep
            foffset += start * axis.fstep
            basic.append(Axis(stop - start, axis.pstep, axis.fstep, axis.tag))
        elif type(part) is int and 0 <= part < size:
            poffset += part * axis.pstep
            foffset += part * axis.fstep
        else:
            return None
    if len(basic) == 1 and basic[0].pstep and tile._storage.memory is not HBM:
        basic.append(Axis(1))  # t[:, j] of an on-chip tile is the column [P, 1], as NKI keeps it
    return type(tile)(tile._trace, tile._storage, tuple(basic), tile._dtype, poffset, foffset,
                      name=tile.name, checks=tuple(tile._checks))


def index_view(tile: Tile, key) -> Tile:
    view = _plain_view(tile, key)
    if view is not None:
        return view
    parts = _normalise_key(key, tile.ndim)
    poffset, foffset = tile._poffset, tile._foffset
    basic: list[Axis] = []
    advanced: dict[int, Axis] = {}
    checks = list(tile._checks)
    rank = 0
    vector = None
    for dim, (axis, part) in enumerate(zip(tile._axes, parts, strict=True)):
        if isinstance(part, Tile):
            vector = _vector_index(tile, part, axis, vector)
            advanced[0] = Axis(part.shape[0], 0, 0, part._axes[0].tag)
            rank = max(rank, min(part.ndim, 2))
            continue
        if isinstance(part, DynSlice):
            part = part.as_slice()
        if axis.wrap:
            part = _wrapped(part, axis)
        if isinstance(part, slice):
            start, stop, step, past_end = _checked_slice(part, axis.size)
            if past_end is not None:  # legal only where a mask cuts the access back (checked then)
                checks.append((_PAST_END, past_end))
            size = max(0, (stop - start + (step - (1 if step > 0 else -1))) // step)
            if size == 0:
                raise InvalidArgumentError(f"empty slice {part} of an axis of size {axis.size}")
            poffset += start * axis.pstep
            foffset += start * axis.fstep
            basic.append(Axis(size, axis.pstep * step, axis.fstep * step, axis.tag))
        elif isinstance(part, IndexExpr):
            checks.append((dim, axis.size, part.const,
                           tuple((ix.uid, coef, ix.size) for ix, coef in part.terms.items())))
            poffset += part.const * axis.pstep
            foffset += part.const * axis.fstep
            rank = max(rank, part.ndim)
            for ix, coef in part.terms.items():
                new = Axis(ix.size, coef * axis.pstep, coef * axis.fstep, ix.uid)
                old = advanced.get(ix.position)
                if old is not None:
                    if old.tag != ix.uid:
                        raise InvalidArgumentError("two different index tiles on the same broadcast "
                                                   "dimension (a diagonal access) are not supported")
                    new = Axis(ix.size, old.pstep + new.pstep, old.fstep + new.fstep, ix.uid)
                advanced[ix.position] = new
        else:
            index = int(part)
            if index < 0:
                index += axis.size
            if not 0 <= index < axis.size:
                raise LimitExceededError("index", index, axis.size - 1,
                                         context=f"axis of size {axis.size}")
            poffset += index * axis.pstep
            foffset += index * axis.fstep
    axes = [advanced.get(p, Axis(1)) for p in range(rank)] + basic
    if len(axes) == 1 and axes[0].pstep and tile._storage.memory is not HBM:
        axes.append(Axis(1))  # t[:, j] of an on-chip tile is the column [P, 1], as NKI keeps it
    view = type(tile)(tile._trace, tile._storage, tuple(axes), tile._dtype, poffset, foffset,
                      name=tile.name, checks=tuple(checks))
    if vector is not None:
        view._vector = vector
    return view


def _wrapped(part, axis: Axis):
    """An index of a modulo-allocated block axis, moved to its physical block (i % wrap)."""
    if isinstance(part, IndexExpr) and not part.terms:
        part = part.const
    if isinstance(part, slice):
        start, stop, step, _ = _checked_slice(part, axis.size)
        if step == 1 and stop - start <= axis.wrap - start % axis.wrap:  # within one wrap
            return slice(start % axis.wrap, start % axis.wrap + stop - start)
    elif not isinstance(part, (IndexExpr, Tile, DynSlice)):
        index = int(part)
        return (index + axis.size if index < 0 else index) % axis.wrap \
            if -axis.size <= index < axis.size else index
    raise _at_user(InvalidArgumentError(
        f"{part!r} indexes a modulo-allocated block axis ({axis.size} logical blocks in "
        f"{axis.wrap} physical ones); index its blocks one at a time or within one wrap"))


def _vector_index(tile: Tile, index: Tile, axis: Axis, earlier) -> tuple:
    """`hbm[idx, ...]` with an on-chip integer index tile [P, 1]: partition p of the view is
    row idx[p] of that dimension, gathered or scattered by DMA (dynamic, indirect addressing)."""
    if tile._storage.memory is not HBM or tile._vector is not None or earlier is not None:
        raise InvalidArgumentError("an index tile can index one dimension of an HBM tensor (a DMA "
                                   "gather / scatter); use nl.arange/mgrid index tiles on chip")
    index = tile._trace.read_ready(index)
    if index._storage.memory is HBM or not index.dtype_spec.is_int or \
            index.size != index.shape[0]:
        raise InvalidArgumentError(f"an index tile must be an on-chip integer tile [P, 1]; got "
                                   f"{index.buffer} {index.dtype_spec.name}{list(index.shape)}")
    return (index, axis.fstep)


_PAST_END = "slice past the end"  # tag of a deferred check: the error, raised if no mask cuts it


def _checked_slice(part: slice, size: int) -> tuple[int, int, int, Exception | None]:
    """A slice's (start, stop, step) on an axis of `size`, refusing what Python would quietly
    clip or reject with a bare error: a non-integer bound, step 0, a bound past the axis (the
    NKI compiler reports an out-of-bounds access; clipping would return fewer elements). A stop
    past the end is returned as the error to raise unless a mask bounds the access (public
    kernels slice a whole tile and mask the rows past a tensor's end)."""
    start, stop, step = part.start, part.stop, part.step
    if (start is None or (type(start) is int and -size <= start <= size)) \
            and (stop is None or (type(stop) is int and -size <= stop <= size)) \
            and (step is None or (type(step) is int and step != 0)):
        return (*part.indices(size), None)  # plain in-bounds integers: nothing to refuse
    for what, value in (("start", part.start), ("stop", part.stop), ("step", part.step)):
        if value is not None and (isinstance(value, bool) or not hasattr(value, "__index__")):
            raise _at_user(InvalidArgumentError(f"slice {what} {value!r} is not an integer"))
    if part.step is not None and part.step.__index__() == 0:
        raise _at_user(InvalidArgumentError("slice step cannot be zero"))
    past_end = None
    for what, value in (("start", part.start), ("stop", part.stop)):
        if value is None or -size <= value.__index__() <= size:
            continue
        error = _at_user(LimitExceededError(f"slice {what}", value.__index__(), size,
                                            context=f"out of bounds of an axis of size {size}"))
        if what == "start" or value.__index__() < 0 or (part.step or 1) < 0:
            raise error
        past_end = error  # a stop past the end: NKI kernels mask such accesses back in bounds
    return (*part.indices(size), past_end)


def _at_user(error):
    """Attach the kernel's source line (indexing is not an nl call, so nothing else does)."""
    from trnsim.nki.trace import user_location

    return error.at(user_location())


def _run_checks(tile: Tile, predicate: Predicate | None) -> None:
    """Index tiles must stay inside the tensor once the mask has cut them."""
    bounds = predicate.bounds if predicate is not None else {}
    for check in tile._checks:
        if check[0] is _PAST_END:
            if predicate is None:
                raise check[1]
            continue
        dim, size, const, terms = check
        low = high = const
        for tag, coef, axis_size in terms:
            bound = bounds.get(tag)
            first, last = (bound.low, bound.high - 1) if bound is not None else (0, axis_size - 1)
            if last < first:
                return
            low += min(coef * first, coef * last)
            high += max(coef * first, coef * last)
        if low < 0 or high >= size:
            raise LimitExceededError(
                f"index range [{low}, {high}] on dimension {dim} of {tile.name or 'a tensor'}: end",
                high, size - 1, context="out of bounds; mask the access or shrink the index tile")


def masked_view(tile: Tile, predicate: Predicate, tags: tuple[int | None, ...] | None) -> Tile:
    """Shrink axes whose arange the predicate bounds. Untagged axes take `tags` by position."""
    axes = list(tile._axes)
    poffset, foffset = tile._poffset, tile._foffset
    by_position = {b.axis.position: b for b in predicate.bounds.values()
                   if b.axis.ndim == len(axes)}
    for i, axis in enumerate(axes):
        tag = axis.tag if axis.tag is not None else (tags[i] if tags and i < len(tags) else None)
        bound = predicate.bounds.get(tag) if tag is not None else None
        if bound is None and tag is None:
            # a sliced axis: the mask's index tile at the same position of the same rank bounds
            # it (the compiler turns slices into index tiles of the instruction's iteration space)
            bound = by_position.get(i)
        if bound is None:
            continue
        low, high = bound.low, min(bound.high, axis.size)
        if high <= low:
            raise MaskedOut
        poffset += low * axis.pstep
        foffset += low * axis.fstep
        axes[i] = replace(axis, size=max(high - low, 0))
    return type(tile)(tile._trace, tile._storage, tuple(axes), tile._dtype, poffset, foffset, name=tile.name,
                checks=tile._checks)


def to_access_pattern(tile: Tile) -> AccessPattern:
    """The view as an instruction operand. Under SBUF spilling the access holds its tile for the
    current call and reloads it first if it was spilled (`trnsim.nki.spill`)."""
    spiller = getattr(tile._trace, "spiller", None)
    if spiller is not None and tile._storage.memory is SBUF:
        spiller.touch(tile._storage)
    return to_access_pattern_raw(tile)


def to_access_pattern_raw(tile: Tile) -> AccessPattern:
    """The view as an operand, in one pass over its axes: size-1 axes dropped, the partition axis
    (on chip) or the first axis (HBM) taken out, the rest merged into free dims (`_merge`'s rule,
    inline: tracing turns every operand of every instruction into a pattern here)."""
    storage = tile._storage
    hbm = storage.memory is HBM
    first = part = None
    partition_axes = 0
    dims: list[tuple[int, int]] = []
    for a in tile._axes:
        size = a.size
        if size == 1:
            continue
        if size == 0:
            raise InvalidArgumentError("the mask selects no elements of this operand")
        if hbm:
            if first is None:
                first = a
                continue
        elif a.pstep != 0:
            partition_axes += 1
            if part is None:
                part = a
            continue
        fstep = a.fstep
        if dims and dims[-1][0] == fstep * size:
            dims[-1] = (fstep, dims[-1][1] * size)
        else:
            dims.append((fstep, size))
    dtype = tile._dtype
    free = tuple(dims) if dims and len(dims) <= MAX_FREE_DIMS else _free_dims(dims, tile)
    if hbm:
        if first is None:
            first = Axis(1, 0, 1)
        key = (HBM, dtype, first.size, free, tile._foffset * dtype.itemsize,
               0, first.fstep, storage.name)
    else:
        if partition_axes > 1 or (part is not None and part.pstep != 1):
            raise InvalidArgumentError(f"operand {tile.name or ''} strides over partitions; on-chip "
                                       f"operands have one contiguous partition dimension")
        if part is not None and part.fstep != 0:
            raise InvalidArgumentError(f"on-chip operand {tile.name or ''} mixes its partition "
                                       f"dimension with free elements")
        # Block dimensions before the partition dimension (e.g. (4, par_dim(128), 512)) address
        # free elements; the hardware walks partitions outermost, so the operand is P-major.
        foffset = tile._foffset
        key = (storage.memory, dtype, 1 if part is None else part.size, free,
               storage.offset + foffset * dtype.itemsize if foffset else storage.offset,
               tile._poffset, 0, storage.name)
    patterns = tile._trace.patterns
    ap = patterns.get(key)  # (`interned`'s lookup, inline: most operands were named before)
    return ap if ap is not None else interned(patterns, key)


def _free_dims(dims: list[tuple[int, int]], tile: Tile) -> tuple[tuple[int, int], ...]:
    if not dims:
        return ((1, 1),)
    if len(dims) > MAX_FREE_DIMS:
        _check_dims(dims, tile)
    return tuple(dims)


def _merge(axes: list[Axis]) -> tuple[tuple[int, int], ...]:
    dims: list[tuple[int, int]] = []
    for axis in axes:
        fstep, size = axis.fstep, axis.size
        if dims and dims[-1][0] == fstep * size:
            dims[-1] = (fstep, dims[-1][1] * size)
        else:
            dims.append((fstep, size))
    return tuple(dims)


def _check_dims(dims, tile: Tile) -> None:
    if len(dims) > MAX_FREE_DIMS:
        raise LimitExceededError(f"free dimensions of operand {tile.name or ''} (after merging)",
                                 len(dims), MAX_FREE_DIMS, context="access patterns have 4 free dims")


def reshape_view(tile: Tile, shape: tuple[int, ...]) -> Tile:
    if prod(shape) != tile.size:
        raise InvalidArgumentError(f"cannot reshape {list(tile.shape)} to {list(shape)}")
    storage = tile._storage
    axes = [a for a in tile._axes if a.size != 1]
    on_chip = storage.memory is not Memory.HBM
    lead: list[Axis] = []
    if on_chip and axes and axes[0].pstep:
        lead, axes = [axes[0]], axes[1:]
        if not shape or shape[0] != lead[0].size:
            raise InvalidArgumentError(f"reshape of an on-chip tile keeps its partition dimension "
                                       f"({lead[0].size}); got {list(shape)}")
        shape = shape[1:]
    dims = _merge(axes)
    if len(dims) > 1 or (dims and dims[0][0] != 1):
        raise InvalidArgumentError("reshape needs a dense view; copy the data first")
    new, step = [], 1
    for size in reversed(shape):
        new.append(Axis(size, 0, step))
        step *= size
    return type(tile)(tile._trace, storage, tuple(lead + new[::-1]), tile._dtype, tile._poffset,
                tile._foffset, name=tile.name)


def dtype_view(tile: Tile, dtype: DType) -> Tile:
    old = tile._dtype
    if dtype.itemsize == old.itemsize:
        return type(tile)(tile._trace, tile._storage, tile._axes, dtype, tile._poffset, tile._foffset,
                    name=tile.name)
    last = tile._axes[-1]
    if last.fstep != 1 or (last.size * old.itemsize) % dtype.itemsize:
        raise InvalidArgumentError(f"view({dtype.name}) of a {old.name} tile needs a dense last dimension")
    ratio_num, ratio_den = old.itemsize, dtype.itemsize
    axes = [replace(a, fstep=a.fstep * ratio_num // ratio_den) for a in tile._axes[:-1]]
    axes.append(Axis(last.size * ratio_num // ratio_den, 0, 1, None))
    foffset = tile._foffset * ratio_num // ratio_den
    return type(tile)(tile._trace, tile._storage, tuple(axes), dtype, tile._poffset, foffset, name=tile.name)


def explicit_view(tile: Tile, pattern, offset: int, dtype: DType | None) -> Tile:
    """[[partition_step, partitions], [stride, size], ...] relative to the tile's start."""
    dtype = dtype or tile._dtype
    axes = []
    for i, (stride, size) in enumerate(pattern):
        on_chip_partition = i == 0 and tile._storage.memory is not Memory.HBM
        axes.append(Axis(int(size), 1 if on_chip_partition else 0,
                         0 if on_chip_partition else int(stride)))
    return type(tile)(tile._trace, tile._storage, tuple(axes), dtype, tile._poffset,
                tile._foffset + int(offset), name=tile.name)
