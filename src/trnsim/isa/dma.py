"""DMA instructions: copies (with cast and optional add-into-destination) and 2-D transposes.

A DMA instruction describes *what* moves; `transfer(core)` summarises it for the simulator's DMA
model (bytes and descriptor size), which shares engine and HBM bandwidth among transfers in flight.
`cost(core)` is the same transfer alone on one idle DMA engine.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from trnsim.errors import IndexOutOfBoundsError, InvalidArgumentError
from trnsim.isa.access import AccessPattern, Memory
from trnsim.isa.instruction import Cost, Engine, ExecutionState, Instruction, SrcToDst


@dataclass(frozen=True)
class DmaTransfer:
    nbytes: int
    descriptor_bytes: int  # bytes per contiguous chunk (the smaller of the two sides)
    descriptors: int
    efficiency: float = 1.0  # extra factor (e.g. DMA transpose runs at 90% / 50%)

    def engine_ns(self, core) -> float:
        """Time on one DMA engine, descriptor overheads included, without start latency."""
        dma = core.dma
        d = max(self.descriptor_bytes, 1)
        rate = dma.bytes_per_s_per_engine * d / (d + dma.descriptor_overhead_bytes) * self.efficiency
        return self.nbytes / rate * 1e9


def contiguous_run_bytes(ap: AccessPattern) -> int:
    """Bytes of the longest dense run an access pattern reads without a jump."""
    run = 1
    for stride, size in reversed(ap.dims):
        if size == 1:
            continue
        if stride != run:
            break
        run *= size
    else:
        if ap.memory is Memory.HBM and ap.partition_step == run:
            run *= ap.partitions
    return run * ap.dtype.itemsize


class _Dma(Instruction):
    ENGINES: ClassVar[tuple[Engine, ...]] = (Engine.DMA,)

    def transfer(self, core) -> DmaTransfer:
        raise NotImplementedError

    def traffic(self) -> tuple[tuple[AccessPattern, ...], tuple[AccessPattern, ...]]:
        """(read, written) patterns whose bytes the DMA actually moves: its reads and writes,
        unless those name a wider region only to order dependencies (see DmaIndirect)."""
        return self.reads(), self.writes()

    def cost(self, core) -> Cost:
        ns = core.dma.start_latency_ns + self.transfer(core).engine_ns(core)
        return Cost(ns, ns)


@dataclass(frozen=True, kw_only=True)
class DmaCopy(_Dma):
    """dst = src (cast if the dtypes differ), or dst += src with accumulate (dst_rmw_op=add)."""

    OPCODE: ClassVar[str] = "DmaCopy"

    dst: AccessPattern
    src: AccessPattern
    accumulate: bool = False
    queue: int | None = None  # a DMA queue chosen by the front end; None lets the simulator pick

    def reads(self):
        return (self.src, self.dst) if self.accumulate else (self.src,)

    def writes(self):
        return (self.dst,)

    def check(self, core) -> None:
        super().check(core)
        if self.src.num_elements != self.dst.num_elements:
            self.fail(InvalidArgumentError(
                f"{self.name}: source {list(self.src.shape)} and destination {list(self.dst.shape)} "
                f"hold different numbers of elements"))

    def execute(self, state: ExecutionState) -> None:
        if self.accumulate:
            total = (state.read_compute(self.dst).reshape(-1)
                     + state.read_compute(self.src).reshape(-1))
            state.write(self.dst, total.reshape(self.dst.shape))
        elif self.src.dtype == self.dst.dtype:
            state.write(self.dst, state.read(self.src).reshape(self.dst.shape))
        else:
            state.write(self.dst, state.read_compute(self.src).reshape(self.dst.shape))

    def transfer(self, core) -> DmaTransfer:
        nbytes = max(self.src.nbytes, self.dst.nbytes)
        chunk = min(contiguous_run_bytes(self.src), contiguous_run_bytes(self.dst), nbytes)
        return DmaTransfer(nbytes, chunk, -(-nbytes // max(chunk, 1)))


@dataclass(frozen=True, kw_only=True)
class DmaTranspose(_Dma, SrcToDst):
    """2-D transpose by DMA: dst [F, P] = src [P, F] for 2- and 4-byte dtypes."""

    OPCODE: ClassVar[str] = "DmaTranspose"

    queue: int | None = None

    def check(self, core) -> None:
        super().check(core)
        if self.src.dtype.itemsize not in (2, 4):
            self.fail(InvalidArgumentError(f"{self.name}: DMA transpose handles 2- and 4-byte dtypes; "
                                           f"got {self.src.dtype.name}"))
        rows, cols = self.src.partitions, self.src.free_size
        if self.dst.partitions * self.dst.free_size != rows * cols or self.dst.partitions != cols:
            self.fail(InvalidArgumentError(f"{self.name}: destination {list(self.dst.shape)} is not the "
                                           f"transpose [{cols}, {rows}] of the source"))

    def execute(self, state: ExecutionState) -> None:
        values = state.read(self.src).reshape(self.src.partitions, -1)
        if self.src.dtype != self.dst.dtype:
            values = state.read_compute(self.src).reshape(self.src.partitions, -1)
        state.write(self.dst, np.ascontiguousarray(values.T).reshape(self.dst.shape))

    def transfer(self, core) -> DmaTransfer:
        nbytes = self.src.nbytes
        both_sbuf = self.src.memory is Memory.SBUF and self.dst.memory is Memory.SBUF
        efficiency = (core.dma.transpose_efficiency_sbuf_to_sbuf if both_sbuf
                      else core.dma.transpose_efficiency_hbm_to_sbuf)
        # ASSUMPTION: before NC-v3 (no documented DMA-transpose engine support) the transpose is
        # element-granular: one descriptor per element.
        if efficiency is None:
            item = self.src.dtype.itemsize
            return DmaTransfer(nbytes, item, nbytes // item)
        return DmaTransfer(nbytes, min(contiguous_run_bytes(self.src), nbytes),
                           max(1, nbytes // max(contiguous_run_bytes(self.src), 1)), efficiency)


@dataclass(frozen=True, kw_only=True)
class DmaCompute(_Dma):
    """dst = sum(srcs) computed in fp32 by the DMA engines (nisa.dma_compute; scales all 1.0).

    Timing: every source is read and the destination written, so the engines move
    (len(srcs) + 1) x the destination's bytes (ASSUMPTION: reads and the write share the engines).
    """

    OPCODE: ClassVar[str] = "DmaCompute"

    dst: AccessPattern
    srcs: tuple[AccessPattern, ...]
    queue: int | None = None

    def reads(self):
        return self.srcs

    def writes(self):
        return (self.dst,)

    def check(self, core) -> None:
        super().check(core)
        if not 1 <= len(self.srcs) <= 16:
            self.fail(InvalidArgumentError(f"{self.name}: 1 to 16 sources; got {len(self.srcs)}"))
        for src in self.srcs:
            if src.num_elements != self.dst.num_elements:
                self.fail(InvalidArgumentError(
                    f"{self.name}: source {list(src.shape)} and destination {list(self.dst.shape)} "
                    f"hold different numbers of elements"))

    def execute(self, state: ExecutionState) -> None:
        total = np.zeros(self.dst.num_elements, dtype=np.float32)
        for src in self.srcs:
            total = total + state.read_compute(src).reshape(-1)
        state.write(self.dst, total.reshape(self.dst.shape))

    def transfer(self, core) -> DmaTransfer:
        nbytes = self.dst.nbytes + sum(src.nbytes for src in self.srcs)
        chunk = min([contiguous_run_bytes(self.dst), *map(contiguous_run_bytes, self.srcs), nbytes])
        return DmaTransfer(nbytes, chunk, -(-nbytes // max(chunk, 1)))


@dataclass(frozen=True, kw_only=True)
class DmaIndirect(_Dma):
    """A DMA whose HBM side picks its rows per partition from an index tile (gather / scatter).

    `indexed` is "src" (gather into `dst`) or "dst" (scatter from `src`). The indexed access
    pattern describes every partition's row at index 0: partition p moves to
    ``offset + index[p] * row_step`` elements. `extent` is the whole HBM tensor (what any index may
    reach): the dependencies and bounds use it. An index outside the tensor raises, or with
    `skip_out_of_bounds` (oob_mode.skip) that partition is skipped. Timing: one descriptor per
    partition's row; accumulating, each destination row is read as well as written (twice the
    bytes; ASSUMPTION, as for DmaCompute: reads and the write share the engines).
    """

    OPCODE: ClassVar[str] = "DmaIndirect"

    dst: AccessPattern
    src: AccessPattern
    index: AccessPattern
    indexed: str
    row_step: int
    extent: AccessPattern
    skip_out_of_bounds: bool = False
    queue: int | None = None
    accumulate: bool = False  # scatter only: add into the destination rows (dst_rmw_op=add)

    def reads(self):
        if self.indexed == "dst" and self.accumulate:
            return (self.src, self.index, self.extent)
        return (self.extent, self.index) if self.indexed == "src" else (self.src, self.index)

    def writes(self):
        return (self.extent,) if self.indexed == "dst" else (self.dst,)

    def check(self, core) -> None:
        super().check(core)
        side = self.src if self.indexed == "src" else self.dst
        other = self.dst if self.indexed == "src" else self.src
        if self.indexed not in ("src", "dst") or side.memory is not Memory.HBM:
            self.fail(InvalidArgumentError(f"{self.name}: the indexed side must be an HBM tensor"))
        if self.index.memory is not Memory.SBUF or not self.index.dtype.is_int or \
                self.index.free_size != 1 or self.index.partitions != other.partitions:
            self.fail(InvalidArgumentError(
                f"{self.name}: the index must be an integer SBUF tile [{other.partitions}, 1]; got "
                f"{self.index.dtype.name}{list(self.index.shape)}"))
        if self.src.num_elements != self.dst.num_elements:
            self.fail(InvalidArgumentError(f"{self.name}: source and destination sizes differ"))

    def execute(self, state: ExecutionState) -> None:
        side = self.src if self.indexed == "src" else self.dst
        rows = np.asarray(state.read(self.index)).reshape(-1).astype(np.int64)
        limit = self.extent.byte_span()[1]
        item = side.dtype.itemsize
        other = self.dst if self.indexed == "src" else self.src
        values = state.read(other).reshape(other.partitions, -1) if self.indexed == "dst" else None
        for p, row in enumerate(rows):
            ap = dataclasses.replace(side, partitions=1, offset=side.offset + int(row) * self.row_step * item)
            low, high = ap.byte_span()
            if low < 0 or high > limit:
                if self.skip_out_of_bounds:
                    continue
                first = (low if low < 0 else max(low, limit)) // item
                error = IndexOutOfBoundsError(
                    f"index {first} is out of bounds for axis 0 with size {limit // item}")
                error.add_note(f"{self.name}: partition {p}'s row index {row} lies outside HBM "
                               f"tensor {side.tensor!r}; oob_mode=skip skips such rows")
                self.fail(error)
            if self.indexed == "src":
                target = _partition(self.dst, p)
                state.write(target, state.read(ap).reshape(target.shape))
            elif self.accumulate:
                state.write(ap, state.read(ap) + values[p].reshape(ap.shape))
            else:
                state.write(ap, values[p].reshape(ap.shape))

    def traffic(self) -> tuple[tuple[AccessPattern, ...], tuple[AccessPattern, ...]]:
        """The rows it gathers or scatters (one per partition), not the whole-tensor `extent`
        its dependencies use."""
        return (self.src, self.index), (self.dst,)

    def transfer(self, core) -> DmaTransfer:
        side = self.src if self.indexed == "src" else self.dst
        nbytes = side.nbytes
        row = max(1, nbytes // max(side.partitions, 1))
        run = min(row, contiguous_run_bytes(dataclasses.replace(side, partitions=1)))
        if self.accumulate:  # read-add-write
            return DmaTransfer(2 * nbytes, run, 2 * max(1, side.partitions))
        return DmaTransfer(nbytes, run, max(1, side.partitions))


def _partition(ap: AccessPattern, p: int) -> AccessPattern:
    """Partition `p` of an access pattern, as a one-partition pattern."""
    if ap.memory is Memory.HBM:
        return dataclasses.replace(ap, partitions=1,
                                   offset=ap.offset + p * ap.partition_step * ap.dtype.itemsize)
    return dataclasses.replace(ap, partitions=1, partition_start=ap.partition_start + p)
