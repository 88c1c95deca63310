"""Access patterns: operands as the hardware addresses them.

SBUF and PSUM are 2-D: a partition range (no partition stride) times up to four free dimensions of
(stride, size) in elements inside each partition, starting at a byte offset within the partition.
HBM is flat bytes: the partition axis of an HBM operand is just one more (stride, size) pair,
`partition_step` elements apart, inside a named HBM tensor.

An access pattern's logical shape is ``(partitions, *free sizes)``. A stride of 0 broadcasts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from math import prod

from trnsim.numerics import DType
from trnsim.numerics import dtype as as_dtype

MAX_FREE_DIMS = 4
MAX_FREE_SIZE = 65535  # uint16 size fields
MIN_STRIDE, MAX_STRIDE = -32768, 32767  # int16 stride fields


class Memory(str, Enum):
    HBM = "hbm"
    SBUF = "sbuf"
    PSUM = "psum"

    def __str__(self) -> str:
        return self.value


# the members as module globals, for hot paths: reading one through its class (`Memory.HBM`) goes
# through the enum's metaclass each time, several times an instruction while tracing
HBM, SBUF, PSUM = Memory.HBM, Memory.SBUF, Memory.PSUM

# every access-pattern form met in this process, numbered (`AccessPattern.form`)
_FORMS: dict[tuple, int] = {}


@dataclass(frozen=True)
class AccessPattern:
    memory: Memory
    dtype: DType
    partitions: int
    dims: tuple[tuple[int, int], ...]  # (stride, size) in elements, outermost first
    offset: int = 0  # bytes: within each partition (SBUF/PSUM) or within the tensor (HBM)
    partition_start: int = 0  # SBUF/PSUM only
    partition_step: int = 0  # HBM only: elements between consecutive partitions
    tensor: str = ""  # HBM tensor name; for SBUF/PSUM an optional label for profiles
    _hash: int = field(default=0, init=False, repr=False, compare=False)
    # elements per partition, computed once: the simulator's planning and every check and cost
    # function ask for it (and for nbytes) many times per pattern
    _free_size: int = field(default=0, init=False, repr=False, compare=False)
    _span: tuple[int, int] | None = field(default=None, init=False, repr=False, compare=False)
    _form: int | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", self._identity_hash(self.offset, self.tensor))
        object.__setattr__(self, "_free_size", prod(size for _, size in self.dims))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        """The dataclass's equality (the compared fields, in order), the cached hashes first:
        equal patterns from two traces (each interns its own, `interned`) meet in dict keys."""
        if self is other:
            return True
        if other.__class__ is not AccessPattern:
            return NotImplemented
        return (self._hash == other._hash and self.offset == other.offset
                and self.tensor == other.tensor and self.dims == other.dims
                and self.memory == other.memory
                and (self.dtype is other.dtype or self.dtype == other.dtype)
                and self.partitions == other.partitions
                and self.partition_start == other.partition_start
                and self.partition_step == other.partition_step)

    def form(self) -> int:
        """The pattern without its place, as a number: equal for two patterns of the same
        memory, dtype, partition count, free dims and HBM row step, whatever their offset, start
        partition or tensor (computed once). Costs are functions of the form; the simulator plans
        the timing of equal-form instructions once (`trnsim.sim.plan`)."""
        form = self._form
        if form is None:
            # (a dtype by its name: one registry, `trnsim.numerics.dtype`, and a cheap hash)
            shape = (self.memory, self.dtype.name, self.partitions, self.dims, self.partition_step)
            form = _FORMS.setdefault(shape, len(_FORMS))
            object.__setattr__(self, "_form", form)
        return form

    def same_form(self, other: AccessPattern) -> bool:
        """``self.form() == other.form()``, decided from the fields `form` numbers without
        computing either (renamed copies have not computed theirs)."""
        return (self.memory is other.memory and self.dtype.name == other.dtype.name
                and self.partitions == other.partitions and self.dims == other.dims
                and self.partition_step == other.partition_step)

    def renamed(self, tensor: str) -> AccessPattern:
        """The same pattern on another tensor (what `dataclasses.replace(ap, tensor=...)` gives,
        without re-deriving what the name does not change: the lowering renames thousands)."""
        return self._placed(self.offset, tensor, self._span)

    def moved(self, by: int) -> AccessPattern:
        """The same pattern `by` bytes further (what `dataclasses.replace(ap, offset=...)` gives,
        keeping what the offset does not change, the form and free size: loop-body stamping,
        `trnsim.nki.stamp`, moves thousands). Its byte span moves by the same bytes: the span is
        the offset plus what the dims reach, which a move does not change."""
        span = self._span
        return self._placed(self.offset + by, self.tensor,
                            None if span is None else (span[0] + by, span[1] + by))

    def moved_in(self, patterns: dict, by: int) -> AccessPattern:
        """`moved`, as the one pattern of its fields in `patterns` (see `interned`); a move
        made before in `Patterns` is looked up by two integers (`Patterns.moves`)."""
        moves = getattr(patterns, "moves", None)
        if moves is not None:
            made = moves.get((id(self), by))
            if made is not None and made[0] is self:
                return made[1]
        key = (self.memory, self.dtype, self.partitions, self.dims, self.offset + by,
               self.partition_start, self.partition_step, self.tensor)
        ap = patterns.get(key)
        if ap is None:
            ap = patterns[key] = self.moved(by)
        if moves is not None:
            moves[(id(self), by)] = (self, ap)
        return ap

    def _placed(self, offset: int, tensor: str, span: tuple[int, int] | None) -> AccessPattern:
        new = object.__new__(AccessPattern)
        fields = new.__dict__
        fields.update(self.__dict__)
        fields["offset"] = offset
        fields["tensor"] = tensor
        fields["_span"] = span
        fields["_hash"] = self._identity_hash(offset, tensor)
        return new

    def _identity_hash(self, offset: int, tensor: str) -> int:
        """The hash of the compared fields, with this offset and tensor."""
        return hash((self.memory, self.dtype, self.partitions, self.dims, offset,
                     self.partition_start, self.partition_step, tensor))

    # --- shape ---------------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return (self.partitions, *(size for _, size in self.dims))

    @property
    def free_shape(self) -> tuple[int, ...]:
        return tuple(size for _, size in self.dims)

    @property
    def free_size(self) -> int:
        """Elements per partition: the N of the engines' cost formulas."""
        return self._free_size

    @property
    def num_elements(self) -> int:
        return self.partitions * self.free_size

    @property
    def nbytes(self) -> int:
        return self.num_elements * self.dtype.itemsize

    @property
    def innermost_stride_bytes(self) -> int:
        if not self.dims:
            return self.dtype.itemsize
        stride, size = self.dims[-1]
        return abs(stride) * self.dtype.itemsize if size > 1 else self.dtype.itemsize

    @property
    def is_contiguous(self) -> bool:
        """True if each partition's elements are one dense run (free dims row-major, stride 1)."""
        expected = 1
        for stride, size in reversed(self.dims):
            if size == 1:
                continue
            if stride != expected:
                return False
            expected *= size
        return True

    @property
    def on_chip(self) -> bool:
        return self.memory is not HBM

    # --- footprint (for dependencies and bounds) ---------------------------------------------
    def element_span(self) -> tuple[int, int]:
        """(lowest, highest+1) element offsets touched inside one partition (HBM: the whole tile)."""
        low = high = 0
        dims = list(self.dims)
        if self.memory is HBM:
            dims.append((self.partition_step, self.partitions))
        for stride, size in dims:
            if size <= 0:
                return (0, 0)
            reach = stride * (size - 1)
            if reach >= 0:
                high += reach
            else:
                low += reach
        return (low, high + 1)

    def byte_span(self) -> tuple[int, int]:
        """Bytes touched: per partition for SBUF/PSUM, within the tensor for HBM (computed once:
        checks, bounds and dependency tracking all ask)."""
        span = self._span
        if span is None:
            low, high = self.element_span()
            size = self.dtype.itemsize
            span = (self.offset + low * size, self.offset + high * size)
            object.__setattr__(self, "_span", span)
        return span

    def partition_range(self) -> tuple[int, int]:
        if self.memory is HBM:
            return (0, 1)
        return (self.partition_start, self.partition_start + self.partitions)

    def describe(self) -> str:
        """Short human form for errors and profiles, e.g. sbuf[0:128, 512 B+2048] bfloat16[128,1024]."""
        p0, p1 = self.partition_range()
        shape = ",".join(str(s) for s in self.shape)
        where = self.tensor or str(self.memory)
        if self.memory is HBM:
            return f"{where}@{self.offset} {self.dtype.name}[{shape}]"
        return f"{where}[{p0}:{p1}]+{self.offset}B {self.dtype.name}[{shape}]"

    # --- construction helpers ----------------------------------------------------------------
    def with_dtype(self, dtype) -> AccessPattern:
        """Reinterpret the same bytes as another dtype of equal size (a `.view(dtype)`)."""
        new = as_dtype(dtype)
        if new.itemsize != self.dtype.itemsize:
            raise ValueError("with_dtype needs equal item sizes; reshape the free dims instead")
        return _replace(self, dtype=new)


class Patterns(dict):
    """A trace's operands by their fields (`interned`), and the moves `moved_in` made of them:
    (id of the moved pattern, bytes) -> (that pattern, the one it moved to). Loop-body stamping
    moves the same operands by the same multiples in every run of a loop (a matmul's K loop per
    output block); the key of two integers skips the field tuple's hash (its dtype's and dims')."""

    __slots__ = ("moves",)

    def __init__(self) -> None:
        super().__init__()
        self.moves: dict[tuple[int, int], tuple[AccessPattern, AccessPattern]] = {}


def interned(patterns: dict, fields: tuple) -> AccessPattern:
    """The one AccessPattern of `fields` (memory, dtype, partitions, dims, offset, partition
    start, partition step, tensor: the compared fields in order) in `patterns`, made on first
    use. A trace names the same operand again and again (a Llama-2-7B layer: 15k distinct
    patterns among 60k uses): one object skips the frozen dataclass's construction, keeps what
    it caches (hash, byte span, form) for every later check and lookup, and leaves fewer objects
    for the garbage collector to walk."""
    ap = patterns.get(fields)
    if ap is None:
        # what `AccessPattern(*fields)` makes, without the frozen dataclass's per-field
        # object.__setattr__: the hash of the compared fields is the hash of `fields` itself
        ap = object.__new__(AccessPattern)
        ap.__dict__.update(zip(_COMPARED, fields, strict=True))
        ap.__dict__.update(_hash=hash(fields), _free_size=prod(size for _, size in fields[3]))
        patterns[fields] = ap
    return ap


# the compared (init) fields of an AccessPattern, in order (`interned`'s `fields`)
_COMPARED = ("memory", "dtype", "partitions", "dims", "offset", "partition_start", "partition_step",
             "tensor")


def _replace(ap: AccessPattern, **changes) -> AccessPattern:
    values = {name: getattr(ap, name) for name in _COMPARED}
    values.update(changes)
    return AccessPattern(**values)


def row_major_dims(free_shape: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    """(stride, size) pairs for a dense row-major free shape."""
    dims = []
    stride = 1
    for size in reversed(free_shape):
        dims.append((stride, size))
        stride *= size
    dims.reverse()
    return tuple(dims) if dims else ((1, 1),)


def sbuf(offset: int, partitions: int, free_shape: tuple[int, ...], dtype, *, partition_start: int = 0,
         label: str = "", memory: Memory = Memory.SBUF) -> AccessPattern:
    """A dense tile in SBUF (or PSUM with memory=Memory.PSUM) at a byte offset within each partition."""
    return AccessPattern(memory=memory, dtype=as_dtype(dtype), partitions=partitions,
                         dims=row_major_dims(tuple(free_shape)), offset=offset,
                         partition_start=partition_start, tensor=label)


def psum(offset: int, partitions: int, free_shape: tuple[int, ...], dtype="float32", *,
         partition_start: int = 0, label: str = "") -> AccessPattern:
    return sbuf(offset, partitions, free_shape, dtype, partition_start=partition_start, label=label,
                memory=Memory.PSUM)


def hbm(tensor: str, shape: tuple[int, ...], dtype, *, offset_elements: int = 0,
        row_elements: int | None = None) -> AccessPattern:
    """A dense row-major block of an HBM tensor: dim 0 is the partition axis.

    `row_elements` is the stride between rows (defaults to the block's own row length), so a block
    of a larger [R, C] tensor is ``hbm(name, (p, f), dt, offset_elements=r0*C+c0, row_elements=C)``.
    """
    dt = as_dtype(dtype)
    partitions, *free = shape
    free_dims = row_major_dims(tuple(free))
    step = row_elements if row_elements is not None else prod(free) if free else 1
    if row_elements is not None and len(free) == 1:
        free_dims = ((1, free[0]),)
    return AccessPattern(memory=Memory.HBM, dtype=dt, partitions=partitions, dims=free_dims,
                         offset=offset_elements * dt.itemsize, partition_step=step, tensor=tensor)
