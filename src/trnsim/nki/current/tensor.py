"""`NkiTensor`: the current API's tensor, a `Tile` view with the nki 0.3+ view methods.

All views share storage and only re-describe the addressing (per axis: size, partition step,
element step — `trnsim.nki.tile.Axis`), so every method here is a small edit of the axis list:
``slice``/``select``/``__getitem__`` move the start and shrink or drop an axis, ``permute``
reorders, ``broadcast`` gives a size-1 axis a stride of 0, ``reshape_dim``/``flatten_dims``
split and merge, ``ap`` replaces the whole pattern. On-chip tensors keep the partition
dimension at dim 0 (an integer index there keeps a size-1 partition dimension).

``ap(..., scalar_offset=r, indirect_dim=d)`` makes the view *register-addressed*: its start moves
by r times the stride of pattern dimension d at run time (`trnsim.isa.RegisterAddressed`).
"""

from __future__ import annotations

import itertools
from math import prod

from trnsim.errors import InvalidArgumentError, LimitExceededError, UnsupportedError
from trnsim.isa import Memory
from trnsim.nki.api_boundary import legacy_symbol
from trnsim.nki.indexing import IndexExpr
from trnsim.nki.tile import Axis, Tile, dtype_view, explicit_view, index_view, reshape_view
from trnsim.numerics import dtype as as_dtype


class NKIObject:
    """Base class of NKI configuration objects (nki.language.NKIObject)."""

    def __init__(self, **kwargs) -> None:
        for key, value in kwargs.items():
            setattr(self, key, value)


class NkiTensor(Tile):
    """A tensor or a view of one, on SBUF, PSUM or HBM."""

    _dynamic: tuple | None = None  # (register number, step in elements, skip out of bounds)
    _vector: tuple | None = None  # (index tile [P, 1], step in elements): per-partition rows

    # --- properties ------------------------------------------------------------------------
    @property
    def buffer(self):
        from trnsim.nki.current.language.buffers import region

        return region(super().buffer)

    @property
    def on_chip(self) -> bool:
        return self._storage is not None and self._storage.memory is not Memory.HBM

    @property
    def strides(self) -> tuple[int, ...]:
        return tuple(self._stride(a) for a in self._axes)

    @property
    def offset(self) -> int:
        return self._foffset

    def _stride(self, axis: Axis) -> int:
        if axis.pstep and self._storage is not None:
            return self._storage.bytes_per_partition // self._dtype.itemsize
        return axis.fstep

    def get_pattern(self) -> list[list[int]]:
        return [[self._stride(a), a.size] for a in self._axes]

    def is_contiguous(self) -> bool:
        axes = self._axes[1:] if self.on_chip else self._axes
        expected = 1
        for axis in reversed(axes):
            if axis.size == 1:
                continue
            if axis.fstep != expected:
                return False
            expected *= axis.size
        return True

    def is_indirect(self) -> bool:
        return self._dynamic is not None or self._vector is not None

    def _with(self, axes, poffset=None, foffset=None, dtype=None) -> NkiTensor:
        view = NkiTensor(self._trace, self._storage, tuple(axes), dtype or self._dtype,
                         self._poffset if poffset is None else poffset,
                         self._foffset if foffset is None else foffset, name=self.name)
        view._dynamic, view._vector = self._dynamic, self._vector
        return view

    def _dim(self, dim: int, *, allow_partition: bool = False) -> int:
        if not -self.ndim <= dim < self.ndim:
            raise InvalidArgumentError(f"dimension {dim} of a rank-{self.ndim} tensor")
        dim %= self.ndim
        if dim == 0 and self.on_chip and not allow_partition:
            raise InvalidArgumentError("this view cannot change dim 0 of an on-chip tensor (the "
                                       "partition dimension)")
        return dim

    # --- indexing ------------------------------------------------------------------------------
    def __getitem__(self, key) -> NkiTensor:
        self.placed()
        self._trace.check_alive(self)
        parts = list(key) if isinstance(key, tuple) else [key]
        for part in parts:
            if isinstance(part, IndexExpr):
                raise legacy_symbol("nl.arange")
            if isinstance(part, Tile):
                raise InvalidArgumentError("indexing with a tensor is dynamic addressing; use "
                                           "t.ap(pattern, scalar_offset=...) or t.select(dim, index)")
        if self.on_chip and parts and isinstance(parts[0], int):
            index = parts[0] + (self.shape[0] if parts[0] < 0 else 0)
            parts[0] = slice(index, index + 1)
        view = index_view(self, tuple(parts))
        view._dynamic = self._dynamic
        if self.on_chip and view.ndim < 2:
            view = view._with((*view._axes, Axis(1)))
        return view

    def slice(self, dim: int, start: int, end: int, step: int = 1) -> NkiTensor:
        dim = self._dim(dim, allow_partition=True)
        if not (0 <= start < end <= self.shape[dim]) or step < 1:
            raise LimitExceededError(f"slice [{start}:{end}:{step}] of dimension {dim}: end", end,
                                     self.shape[dim], context="0 <= start < end <= size, step >= 1")
        key = [slice(None)] * self.ndim
        key[dim] = slice(start, end, step)
        return self[tuple(key)]

    def select(self, dim: int, index) -> NkiTensor:
        dim = self._dim(dim, allow_partition=True)
        if isinstance(index, int):
            key = [slice(None)] * self.ndim
            key[dim] = index
            view = index_view(self, tuple(key))
            view._dynamic = self._dynamic
            return view
        if self.on_chip and dim == 0:
            raise InvalidArgumentError("a dynamic select cannot choose an on-chip partition")
        stride = self._axes[dim].fstep
        axes = [a for i, a in enumerate(self._axes) if i != dim]
        return self._with(axes)._indirect(index, stride, skip=False)

    def permute(self, dims) -> NkiTensor:
        dims = tuple(int(d) % self.ndim for d in dims)
        if sorted(dims) != list(range(self.ndim)):
            raise InvalidArgumentError(f"permute{dims} is not a permutation of 0..{self.ndim - 1}")
        if self.on_chip and dims[0] != 0:
            raise InvalidArgumentError("permute keeps the partition dimension (dim 0) of an on-chip "
                                       "tensor first")
        return self._with([self._axes[d] for d in dims])

    def broadcast(self, dim: int, size: int) -> NkiTensor:
        dim = self._dim(dim)
        if self.shape[dim] != 1:
            raise InvalidArgumentError(f"broadcast needs a size-1 dimension; dim {dim} has size "
                                       f"{self.shape[dim]}")
        axes = list(self._axes)
        axes[dim] = Axis(int(size), 0, 0)
        return self._with(axes)

    def expand_dim(self, dim: int) -> NkiTensor:
        if not 0 <= dim <= self.ndim or (self.on_chip and dim == 0):
            raise InvalidArgumentError(f"expand_dim({dim}) of a rank-{self.ndim} tensor")
        axes = list(self._axes)
        axes.insert(dim, Axis(1))
        return self._with(axes)

    def squeeze_dim(self, dim: int) -> NkiTensor:
        dim = self._dim(dim)
        if self.shape[dim] != 1:
            raise InvalidArgumentError(f"squeeze_dim({dim}): the dimension has size {self.shape[dim]}")
        return self._with([a for i, a in enumerate(self._axes) if i != dim])

    def reshape_dim(self, dim: int, shape) -> NkiTensor:
        dim = self._dim(dim, allow_partition=len(tuple(shape)) == 1)
        sizes = list(int(s) for s in shape)
        if sizes.count(-1) == 1:
            known = prod(s for s in sizes if s != -1)
            sizes[sizes.index(-1)] = self.shape[dim] // max(known, 1)
        if prod(sizes) != self.shape[dim]:
            raise InvalidArgumentError(f"reshape_dim({dim}, {tuple(shape)}): the sizes multiply to "
                                       f"{prod(sizes)}, not {self.shape[dim]}")
        axis = self._axes[dim]
        new, step = [], axis.fstep
        for size in reversed(sizes):
            new.append(Axis(size, 0, step))
            step *= size
        axes = list(self._axes)
        axes[dim:dim + 1] = reversed(new)
        return self._with(axes)

    def flatten_dims(self, start_dim: int, end_dim: int) -> NkiTensor:
        start, end = self._dim(start_dim), self._dim(end_dim)
        group = self._axes[start:end + 1]
        for outer, inner in itertools.pairwise(group):
            if outer.fstep != inner.fstep * inner.size:
                raise InvalidArgumentError(f"flatten_dims({start_dim}, {end_dim}): the dimensions "
                                           f"are not contiguous in memory")
        merged = Axis(prod(a.size for a in group), 0, group[-1].fstep)
        return self._with([*self._axes[:start], merged, *self._axes[end + 1:]])

    def reshape(self, *shape) -> NkiTensor:
        shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        self.placed()
        view = reshape_view(self, tuple(int(s) for s in shape))
        view._dynamic = self._dynamic
        return view

    def view(self, dtype) -> NkiTensor:
        self.placed()
        return dtype_view(self, as_dtype(dtype))

    reinterpret_cast = view

    def rearrange(self, src_pattern, dst_pattern, fixed_sizes=None) -> NkiTensor:
        raise UnsupportedError("NkiTensor.rearrange is not supported by trnsim; compose "
                               "reshape_dim, permute and flatten_dims")

    def vector_select(self, dim: int, vector_offset) -> NkiTensor:
        """Partition p of the view reads row vector_offset[p] of dimension `dim` (HBM only)."""
        if dim != 0 or self.on_chip:
            raise InvalidArgumentError("vector_select indexes dim 0 of an HBM tensor")
        rows = vector_offset.shape[0]
        view = self._with((Axis(rows, 0, self._axes[0].fstep), *self._axes[1:]))
        return view._by_partition(vector_offset, self._axes[0].fstep)

    def _by_partition(self, index, step_elements: int) -> NkiTensor:
        if self.is_indirect():
            raise InvalidArgumentError("a view can be indirect only once (is_indirect() is True)")
        if self.on_chip:
            raise InvalidArgumentError("vector_offset indexes an HBM tensor (gather/scatter by DMA)")
        view = self._with(self._axes)
        view._vector = (index, step_elements)
        return view

    def indirect(self, index, num_elem=None) -> NkiTensor:
        raise UnsupportedError("tensor indirection (.indirect, NeuronCore-v4) is not supported by "
                               "trnsim yet")

    # --- explicit access patterns ------------------------------------------------------------
    def ap(self, pattern=None, offset: int | None = None, scalar_offset=None, vector_offset=None,
           indirect_dim: int = 0, dtype=None) -> NkiTensor:
        """Replace the view's pattern: [[stride, count], ...] in elements (on-chip: the first
        pair is the partition dimension), from the view's start plus `offset` elements. A
        `scalar_offset` (register or [1, 1] tensor) moves the start at run time by its value
        times the stride of this tensor's dimension `indirect_dim`."""
        self.placed()
        if scalar_offset is not None and vector_offset is not None:
            raise InvalidArgumentError("ap(): scalar_offset and vector_offset are mutually exclusive")
        if pattern is None:
            pattern = self.get_pattern()
        new_dtype = as_dtype(dtype) if dtype is not None else self._dtype
        base = self
        if new_dtype.itemsize != self._dtype.itemsize:
            byte_offset = self._foffset * self._dtype.itemsize
            if byte_offset % new_dtype.itemsize:
                raise InvalidArgumentError(f"ap(dtype={new_dtype.name}): the view starts at byte "
                                           f"{byte_offset}, not a multiple of {new_dtype.itemsize}")
            base = self._with(self._axes, foffset=byte_offset // new_dtype.itemsize, dtype=new_dtype)
        view = explicit_view(base, pattern, int(offset or 0), new_dtype)
        view._dynamic = self._dynamic
        if scalar_offset is None and vector_offset is None:
            return view
        if not 0 <= indirect_dim < self.ndim:
            raise InvalidArgumentError(f"indirect_dim {indirect_dim} of a rank-{self.ndim} tensor")
        if self.on_chip and indirect_dim == 0:
            raise InvalidArgumentError("a scalar offset cannot move an on-chip partition")
        # the offset counts steps of dimension `indirect_dim` of this tensor (not of the pattern)
        step = self._axes[indirect_dim].fstep * self._dtype.itemsize // new_dtype.itemsize
        if vector_offset is not None:
            return view._by_partition(vector_offset, step)
        return view._indirect(scalar_offset, step, skip=False)

    def _indirect(self, index, step_elements: int, *, skip: bool) -> NkiTensor:
        from trnsim.nki.current.isa.registers import as_register

        if self._dynamic is not None:
            raise InvalidArgumentError("a view can be indirect only once (is_indirect() is True)")
        view = self._with(self._axes)
        view._dynamic = (as_register(index, "scalar_offset"), step_elements, skip)
        return view

    def access(self, predicate=None, tags=None):
        if self._vector is not None and not self._trace.allow_vector_offset:
            raise UnsupportedError("a vector_offset (per-partition) view can only be copied by "
                                   "nisa.dma_copy (gather / scatter)")
        ap = super().access(predicate, tags)
        if self._dynamic is not None:
            register, step, skip = self._dynamic
            self._trace.bind_register_offset(ap, register, step * ap.dtype.itemsize, skip)
        return ap

    def __repr__(self) -> str:
        state = "pending" if self._pending else str(super().buffer)
        return f"NkiTensor({self.name or '?'}, {state}, {self._dtype.name}{list(self.shape)})"

