"""Instructions that synchronise NeuronCores: core barriers, LNC send/receive, collectives.

They have ``KIND = "sync"``: a core that reaches one waits at it until every participant has
reached its matching instruction; the simulator's rendezvous (`trnsim.sim.sync`) then moves the
data and decides when each participant continues. ``execute`` is never called for them: their
data movement spans several cores' memories. Participants are named by the front end:

- `CoreBarrier`: physical cores (``program_id`` values) of one logical NeuronCore (LNC=2);
- `SendRecv`: the same, the peers it sends to and receives from;
- `CollectiveOp`: ranks (logical NeuronCores) of the world the kernel was launched on, in
  replica groups; each rank's share is read from / written to its own tensors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from trnsim.errors import InvalidArgumentError, UnsupportedError
from trnsim.isa.access import AccessPattern, Memory
from trnsim.isa.dma import DmaTransfer, contiguous_run_bytes
from trnsim.isa.instruction import Cost, Engine, ExecutionState, Instruction

COLLECTIVE_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "permute")
# gpsimd_dma sendrecv limits per partition (nki.isa.sendrecv), by element size in bytes.
GPSIMD_DMA_BYTES_PER_PARTITION = {4: 1024, 2: 512, 1: 256}


class _Sync(Instruction):
    KIND: ClassVar[str] = "sync"

    def execute(self, state: ExecutionState) -> None:
        raise InvalidArgumentError(f"{self.name}: a synchronising instruction runs through the "
                                   f"simulator's rendezvous")

    def _check_lnc_core(self, core) -> None:
        if core.version < 3:
            self.fail(UnsupportedError(f"{self.name} needs NeuronCore-v3 or newer (logical "
                                       f"NeuronCores); the target is {core.name}"))


@dataclass(frozen=True, kw_only=True)
class CoreBarrier(_Sync):
    """Every core in `cores` waits here until all have arrived (semaphores across the pair).

    ``data`` is the shared HBM tensor the cores synchronise on: the barrier orders this core's
    earlier writes to it before any participant's later accesses. Cost: ASSUMPTION, one DMA
    semaphore-to-start latency (``DmaSpec.start_latency_ns``) after the last core arrives: a
    remote semaphore write travels the same path as a DMA trigger.
    """

    OPCODE: ClassVar[str] = "CoreBarrier"
    ENGINES: ClassVar[tuple[Engine, ...]] = (Engine.GPSIMD, Engine.VECTOR, Engine.SCALAR,
                                             Engine.SYNC, Engine.TENSOR)

    data: AccessPattern
    cores: tuple[int, ...] = (0, 1)

    def reads(self):
        return (self.data,)

    def writes(self):
        return (self.data,)

    def check(self, core) -> None:
        self._check_lnc_core(core)
        if self.engine not in self.ENGINES:
            self.fail(InvalidArgumentError(f"{self.name}: engine {self.engine} cannot wait on a "
                                           f"barrier"))
        if self.data.memory is not Memory.HBM:
            self.fail(InvalidArgumentError(f"{self.name}: data must be a shared HBM tensor; got "
                                           f"{self.data.describe()}"))
        if len(set(self.cores)) != len(self.cores) or len(self.cores) < 1:
            self.fail(InvalidArgumentError(f"{self.name}: cores {self.cores} must be distinct"))

    def cost(self, core) -> Cost:
        ns = core.dma.start_latency_ns
        return Cost(ns, ns)


@dataclass(frozen=True, kw_only=True)
class SendRecv(_Sync):
    """Send `src` to core `send_to`'s `dst` while receiving core `recv_from`'s `src` into `dst`.

    Both tiles are in SBUF (the two physical cores of a logical NeuronCore share an HBM stack,
    and their DMA engines reach each other's SBUF). Operations with the same `pipe` pair up in
    order. Timing: each send is an SBUF-to-SBUF DMA by the sending core, started when both
    cores have arrived.
    """

    OPCODE: ClassVar[str] = "SendRecv"
    ENGINES: ClassVar[tuple[Engine, ...]] = (Engine.SYNC, Engine.GPSIMD)

    src: AccessPattern
    dst: AccessPattern
    send_to: int
    recv_from: int
    pipe: int = 0

    def reads(self):
        return (self.src,)

    def writes(self):
        return (self.dst,)

    def check(self, core) -> None:
        self._check_lnc_core(core)
        for ap, what in ((self.src, "src"), (self.dst, "dst")):
            if ap.memory is not Memory.SBUF:
                self.fail(InvalidArgumentError(f"{self.name}: {what} must be in SBUF; got "
                                               f"{ap.describe()}"))
            self.limit("partition count", ap.partitions, core.partitions, core)
        if self.src.dtype != self.dst.dtype or self.src.shape != self.dst.shape:
            self.fail(InvalidArgumentError(
                f"{self.name}: src {self.src.dtype.name}{list(self.src.shape)} and dst "
                f"{self.dst.dtype.name}{list(self.dst.shape)} must have the same dtype and shape"))
        if self.engine is Engine.GPSIMD:
            limit = GPSIMD_DMA_BYTES_PER_PARTITION.get(self.src.dtype.itemsize, 1024)
            self.limit("bytes per partition over the GpSimd DMA",
                       self.src.free_size * self.src.dtype.itemsize, limit, core)

    def transfer(self, core) -> DmaTransfer:
        nbytes = self.src.nbytes
        chunk = min(contiguous_run_bytes(self.src), contiguous_run_bytes(self.dst), nbytes)
        return DmaTransfer(nbytes, chunk, -(-nbytes // max(chunk, 1)))

    def transfer_ns(self, core) -> float:
        """One send on the sending core's DMA engines (spread over ceil(P/8) of them)."""
        dma = core.dma
        engines = min(dma.engines, max(1, -(-self.src.partitions // dma.partitions_per_engine)))
        return dma.start_latency_ns + self.transfer(core).engine_ns(core) / engines

    def cost(self, core) -> Cost:
        ns = self.transfer_ns(core)
        return Cost(ns, ns)


@dataclass(frozen=True, kw_only=True)
class CollectiveOp(_Sync):
    """A collective over the ranks of `groups` containing this core's rank (nki.collectives).

    `srcs` / `dsts` are this rank's tensors (several = coalesced: concatenated in order). `dim`
    is the collective dimension of all_gather / reduce_scatter / all_to_all (of the first source's
    logical shape, given as `shape`); `pairs` are permute's (source, target) ranks. The
    rendezvous times it on the collectives fabric (`trnsim.collectives.Fabric`).
    """

    OPCODE: ClassVar[str] = "Collective"
    ENGINES: ClassVar[tuple[Engine, ...]] = (Engine.SYNC,)

    op: str
    srcs: tuple[AccessPattern, ...]
    dsts: tuple[AccessPattern, ...]
    groups: tuple[tuple[int, ...], ...] = ()
    reduction: str = "sum"
    dim: int = 0
    src_shape: tuple[int, ...] = ()
    dst_shape: tuple[int, ...] = ()
    pairs: tuple[tuple[int, int], ...] = ()

    def reads(self):
        return self.srcs

    def writes(self):
        return self.dsts

    def check(self, core) -> None:
        if self.op not in COLLECTIVE_OPS:
            self.fail(InvalidArgumentError(f"{self.name}: unknown collective {self.op!r}"))
        aps = (*self.srcs, *self.dsts)
        if not self.srcs or not self.dsts:
            self.fail(InvalidArgumentError(f"{self.name}: needs at least one source and destination"))
        memories = {ap.memory for ap in aps}
        if len(memories) > 1 or Memory.PSUM in memories:
            self.fail(InvalidArgumentError(
                f"{self.name}: tensors must be all in HBM or all in SBUF; got "
                f"{', '.join(sorted(m.value for m in memories))}"))
        if len({ap.dtype for ap in aps}) > 1:
            self.fail(InvalidArgumentError(f"{self.name}: sources and destinations need one dtype"))
        if Memory.SBUF in memories and (len(self.srcs) > 1 or len(self.dsts) > 1):
            self.fail(InvalidArgumentError(f"{self.name}: coalesced (several-tensor) collectives "
                                           f"need HBM tensors"))

    def cost(self, core) -> Cost:
        return Cost(0.0, 0.0)  # the collectives fabric decides when it ends
