"""Which values a compiled model's integer inputs may take, read from its program.

A saved model keeps no PyTorch code, so `trnsim run` cannot ask an `nn.Embedding` its size. The
program knows it: an input used as gather indices is copied (DMA) into an SBUF tile that an
indirect DMA then reads as row numbers into a table in HBM; the table's rows bound the index.
Copies are followed from the input through HBM and SBUF; any other instruction writing a
region ends what is known about it (its values are computed, not the input's).
"""

from __future__ import annotations

from trnsim.isa import Program
from trnsim.isa.access import AccessPattern, Memory
from trnsim.isa.dma import DmaCopy, DmaIndirect


def _overlaps(a: AccessPattern, b: AccessPattern) -> bool:
    if a.memory is not b.memory:
        return False
    if a.memory is Memory.HBM:
        return a.tensor == b.tensor
    (p0, p1), (q0, q1) = a.partition_range(), b.partition_range()
    (s0, s1), (t0, t1) = a.byte_span(), b.byte_span()
    return p0 < q1 and q0 < p1 and s0 < t1 and t0 < s1


def _rows(gather: DmaIndirect) -> int:
    """Index values that keep the gather inside its table: 0 .. rows-1."""
    side = gather.src
    step = gather.row_step * side.dtype.itemsize
    end = gather.extent.byte_span()[1]
    return (end - side.byte_span()[1]) // step + 1 if step > 0 else 1


def index_limits(program: Program, inputs: list[str]) -> dict[str, int]:
    """For each input (by HBM tensor name) used as gather indices: the number of rows of the
    smallest table it indexes (valid indices are 0 .. that - 1)."""
    origin: list[tuple[AccessPattern, str]] = []  # regions holding an input's values, unchanged
    limits: dict[str, int] = {}
    for ins in program.instructions:
        if isinstance(ins, DmaIndirect) and ins.indexed == "src":
            for region, name in origin:
                if _overlaps(region, ins.index):
                    limits[name] = min(limits.get(name, _rows(ins)), _rows(ins))
        source = None
        if isinstance(ins, DmaCopy) and not ins.accumulate:
            if ins.src.memory is Memory.HBM and ins.src.tensor in inputs:
                source = ins.src.tensor
            else:
                source = next((name for region, name in origin if _overlaps(region, ins.src)), None)
        for written in ins.writes():
            if written.memory is Memory.HBM and written.tensor in inputs:
                continue
            origin = [(r, n) for r, n in origin if not _overlaps(r, written)]
            if source is not None:
                origin.append((written, source))
    return limits
