"""Byte-addressed memories: a core's SBUF and PSUM, and a chip's HBM.

Every memory is raw bytes (numpy ``uint8``); an access pattern becomes a strided numpy view of
its dtype over those bytes, so two access patterns over the same bytes alias exactly as on the
hardware (a bf16 tile re-read as int16 sees the same bits; a tile written through one view is
seen through any other). Views are built once per access pattern and cached.

- SBUF: ``partitions x sbuf_bytes_per_partition`` (the compiler-reserved bytes included: they
  are real memory that manual allocation may name).
- PSUM: ``partitions x banks x bank bytes`` (128 x 8 x 2 KiB).
- HBM: one flat buffer per named tensor, held by the chip so that cores can share a tensor
  (`HbmSpace`). Only declared tensors take host memory: a 96 GiB chip costs nothing until used;
  its capacity is checked against the sum of declared tensors.

Uninitialised memory is filled with 0xFF bytes. For every float format trnsim knows except fp4
this pattern is a NaN (fp32/bf16/fp16 all-ones exponent with a non-zero mantissa; float8 e4m3,
e4m3fn, e5m2 and e8m0 all-ones), so a kernel that reads memory nobody wrote gets NaN, as AWS's
NKI simulator does. Integers then read as -1 (signed) or their maximum (unsigned), and fp4
(``float4_e2m1fn_x4``, which has no NaN) reads as -6.0; AWS's simulator fills integers with 4.
"""

from __future__ import annotations

from collections.abc import Iterable
from sys import getrefcount

import numpy as np

from trnsim.errors import InvalidArgumentError, LimitExceededError
from trnsim.isa import AccessPattern, Memory, TensorDecl

UNINITIALISED_BYTE = 0xFF


class MemoryViews:
    """Cached writable and read-only numpy views of access patterns over one byte buffer."""

    def __init__(self, name: str, buffer: np.ndarray, row_bytes: int) -> None:
        self.name = name
        self.buffer = buffer  # uint8, C-contiguous
        self.row_bytes = row_bytes  # bytes per partition (0 for a flat HBM tensor)
        # (writable, read-only) view of each access pattern met: the only arrays over `buffer`
        # this object makes (`reusable` counts on it)
        self.cached: dict[AccessPattern, tuple[np.ndarray, np.ndarray]] = {}

    def views(self, ap: AccessPattern) -> tuple[np.ndarray, np.ndarray]:
        """(writable, read-only) views of `ap`; shape ap.shape, dtype ap.dtype.np_dtype."""
        found = self.cached.get(ap)
        if found is None:
            writable = self._build(ap)
            readonly = writable.view()
            readonly.flags.writeable = False
            found = self.cached[ap] = (writable, readonly)
        return found

    def _build(self, ap: AccessPattern) -> np.ndarray:
        item = ap.dtype.itemsize
        if ap.memory is Memory.HBM:
            partition_stride = ap.partition_step * item
            offset = ap.offset
        else:
            partition_stride = self.row_bytes
            offset = ap.partition_start * self.row_bytes + ap.offset
        strides = (partition_stride, *(stride * item for stride, _ in ap.dims))
        try:
            return np.ndarray(ap.shape, dtype=ap.dtype.np_dtype, buffer=self.buffer, offset=offset,
                              strides=strides)
        except (ValueError, TypeError) as error:
            low, high = ap.byte_span()
            raise LimitExceededError(f"access {ap.describe()} (bytes [{low}, {high})) in {self.name}",
                                     high, self.buffer.nbytes,
                                     context=f"{self.name} size; {error}") from None

    def reusable(self) -> bool:
        """Whether nothing outside this object holds an array over its bytes: every reference to
        the buffer is one of the cached views' (a numpy view of a view refers to the buffer
        itself), and nothing else holds a cached view. Then a later run may refill the bytes
        and keep the views (`on_chip_memory`). Each count is of an attribute or item load (a
        new reference on the stack, whatever the interpreter borrows for local names);
        `_REFERENCES_COUNTED` checks once that this reads as it should."""
        cached = self.cached
        if getrefcount(self.buffer) != 2 + 2 * len(cached):  # attribute, views, the load
            return False
        for key in cached:  # each pair held by the dict alone, each view by its pair alone
            if (getrefcount(cached[key]) != 2 or getrefcount(cached[key][0]) != 2
                    or getrefcount(cached[key][1]) != 2):
                return False
        return True


def _references_counted() -> bool:
    """`reusable` is right on this interpreter: true for a memory whose views nobody holds,
    false while a pair of views, a view, or an array over its bytes is held."""
    probe = MemoryViews("probe", np.zeros(8, dtype=np.uint8), 0)
    probe.cached[None] = (probe.buffer[:4], probe.buffer[4:])
    free = probe.reusable()
    held = [probe.cached[None]]
    pair_held = probe.reusable()
    held = [probe.cached[None][1]]
    view_held = probe.reusable()
    held = [probe.buffer[2:]]
    bytes_held = probe.reusable()
    del held
    return free and not (pair_held or view_held or bytes_held) and probe.reusable()


_REFERENCES_COUNTED = _references_counted()


class OnChipMemory(MemoryViews):
    """SBUF or PSUM of one core: partitions x bytes per partition, filled with NaN bytes."""

    def __init__(self, memory: Memory, partitions: int, bytes_per_partition: int) -> None:
        buffer = np.full((partitions, bytes_per_partition), UNINITIALISED_BYTE, dtype=np.uint8)
        super().__init__(str(memory), buffer, bytes_per_partition)
        self.memory = memory


# SBUF/PSUM memories of finished runs, with their views, by (memory, partitions, bytes): a
# functional run of a compiled model meets the same access patterns on every call. At most
# `KEPT_MEMORIES` of each shape (one run of a logical core's cores) and `KEPT_VIEWS` views each.
KEPT_MEMORIES = 2
KEPT_VIEWS = 1 << 17
_FREE: dict[tuple[Memory, int, int], list[OnChipMemory]] = {}


def on_chip_memory(memory: Memory, partitions: int, bytes_per_partition: int) -> OnChipMemory:
    """A NaN-filled SBUF or PSUM: a finished run's (`release`), bytes refilled, views kept, or
    a new one."""
    free = _FREE.get((memory, partitions, bytes_per_partition))
    if free:
        found = free.pop()
        found.buffer.fill(UNINITIALISED_BYTE)
        return found
    return OnChipMemory(memory, partitions, bytes_per_partition)


def release(memory: OnChipMemory) -> None:
    """Hand a finished run's SBUF or PSUM to later runs, unless an array over it is still held
    (a result or scratch that outlived the run: its values must not change) or enough are kept."""
    free = _FREE.setdefault((memory.memory, *memory.buffer.shape), [])
    if len(free) >= KEPT_MEMORIES or not (_REFERENCES_COUNTED and memory.reusable()):
        return
    if len(memory.cached) > KEPT_VIEWS:
        memory.cached.clear()
    free.append(memory)


class HbmSpace:
    """A chip's device memory: named tensors as flat byte buffers, shared by the chip's cores.

    `capacity_bytes` is the chip's memory; allocating beyond it raises a LimitExceededError that
    names the tensor. Tensors are allocated lazily (`tensor()`), so timing-only runs need none.
    """

    def __init__(self, capacity_bytes: int, chip_name: str = "") -> None:
        self.capacity = capacity_bytes
        self.chip_name = chip_name
        self.used = 0
        self._tensors: dict[str, MemoryViews] = {}
        self._decls: dict[str, TensorDecl] = {}

    def reserve(self, key: str, decl: TensorDecl) -> None:
        """Account for a tensor's bytes (without allocating them) and check the capacity."""
        if key in self._decls:
            known = self._decls[key]
            if known.shape != decl.shape or known.dtype != decl.dtype:
                raise InvalidArgumentError(
                    f"shared HBM tensor {decl.name!r} is declared as {known.dtype.name}"
                    f"{list(known.shape)} and as {decl.dtype.name}{list(decl.shape)} by different cores")
            return
        if self.used + decl.nbytes > self.capacity:
            raise LimitExceededError(f"HBM use after allocating tensor {decl.name!r} "
                                     f"({decl.nbytes} bytes)", self.used + decl.nbytes, self.capacity,
                                     context=f"{self.chip_name} device memory bytes")
        self.used += decl.nbytes
        self._decls[key] = decl

    def tensor(self, key: str, *, fill: bool = True) -> MemoryViews:
        """The byte buffer of a reserved tensor, allocated on first use: NaN-filled, or left
        unfilled (`fill=False`) when the caller is about to overwrite all of it."""
        views = self._tensors.get(key)
        if views is None:
            decl = self._decls[key]
            buffer = (np.full(decl.nbytes, UNINITIALISED_BYTE, dtype=np.uint8) if fill
                      else np.empty(decl.nbytes, dtype=np.uint8))
            views = self._tensors[key] = MemoryViews(f"HBM tensor {decl.name!r}", buffer, 0)
        return views

    def adopt(self, key: str, data: np.ndarray) -> bool:
        """Use `data` (a constant in the tensor's dtype and shape) as the tensor's bytes without
        copying; read-only, so a run can never change the caller's array. False if it cannot be
        adopted (another layout, or already allocated)."""
        decl = self._decls[key]
        if (key in self._tensors or data.dtype != decl.dtype.np_dtype or data.size * data.itemsize
                != decl.nbytes or not data.flags.c_contiguous):
            return False
        buffer = data.reshape(-1).view(np.uint8)
        buffer.flags.writeable = False
        self._tensors[key] = MemoryViews(f"HBM tensor {decl.name!r}", buffer, 0)
        return True

    def array(self, key: str, *, fill: bool = True) -> np.ndarray:
        """The tensor's bytes as a numpy array of its declared shape and dtype (a view)."""
        decl = self._decls[key]
        return self.tensor(key, fill=fill).buffer.view(decl.dtype.np_dtype).reshape(decl.shape)

    @property
    def allocated_bytes(self) -> int:
        return sum(v.buffer.nbytes for v in self._tensors.values())

    def keys(self) -> Iterable[str]:
        return self._decls.keys()
