"""Building one instruction's `Plan`: its facts from its pattern and the core
(`InstructionFacts`), its regions, its HBM traffic and, for DMA, its transfer and any on-chip
hand-off. `trnsim.sim.plan.Planner` decides which instructions are built and reuses the rest.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from trnsim.errors import InvalidArgumentError
from trnsim.isa import AccessPattern, Engine, Instruction, Memory
from trnsim.isa.dma import DmaCopy, contiguous_run_bytes
from trnsim.sim.dependencies import RegionIndex
from trnsim.sim.engines import STREAM_OF_ENGINE, TENSOR, TENSOR_LOAD


class DmaPlan:
    """A DMA instruction's transfer: engine-time, engines it may spread over, HBM traffic."""

    __slots__ = ("engines", "hbm_per_work", "in_place", "queue", "work")

    def __init__(self, work: float, engines: int, hbm_per_work: float, queue: int | None,
                 in_place: bool = False) -> None:
        self.work = work  # engine-ns: the transfer's time alone on one engine (descriptors included)
        self.engines = engines  # how many of the core's DMA engines it spreads over
        self.hbm_per_work = hbm_per_work  # HBM bytes moved per engine-ns
        self.queue = queue  # a pinned queue, or None for the scheduler's choice
        # a hand-off of an on-chip tensor in its own layout: no data moves (`trnsim.sim.dma`)
        self.in_place = in_place


class Plan:
    """Timing-relevant facts of one instruction; shared by all instructions equal to it."""

    __slots__ = ("busy", "code", "dma", "flops", "hbm_read", "hbm_write", "is_load", "is_matmul",
                 "is_multiply", "latency", "nbytes", "ports", "precision", "read_neighbors",
                 "reads", "uid", "write_neighbors", "writes")

    def __init__(self) -> None:
        self.uid = 0  # index among the planner's distinct plans
        self.code = 0
        self.is_load = self.is_multiply = self.is_matmul = False
        self.busy = self.latency = 0.0
        self.flops = 0
        self.precision: str | None = None  # matmul precision class of a FLOP-counting instruction
        self.nbytes = self.hbm_read = self.hbm_write = 0
        # the uids of the regions it reads and writes, and each one's overlapping regions' uids
        # (the region's own list: it grows if a region found later overlaps it)
        self.reads: tuple[int, ...] = ()
        self.writes: tuple[int, ...] = ()
        self.read_neighbors: tuple[list[int], ...] = ()
        self.write_neighbors: tuple[list[int], ...] = ()
        self.ports: tuple[int, ...] = ()  # indices into the core's `PortTable.ports`
        self.dma: DmaPlan | None = None


class PortTable:
    """The shared on-chip ports of a core version (`CoreSpec.port_conflicts`).

    Each (engine a, engine b, memory) conflict is one exclusive port: an instruction of engine a
    or b that touches that memory holds it while busy (each core books it on its own
    `BusyIntervals`, `CoreScheduler.port_busy`).
    """

    def __init__(self, core) -> None:
        self.ports: list[tuple[frozenset[int], Memory]] = []
        for first, second, memory in core.port_conflicts:
            streams = frozenset(STREAM_OF_ENGINE[Engine(name)] for name in (first, second))
            self.ports.append((streams, Memory(memory)))

    def held_by(self, code: int, memories: set[Memory]) -> tuple[int, ...]:
        return tuple(index for index, (streams, memory) in enumerate(self.ports)
                     if code in streams and memory in memories)


def _copy_plan(plan: Plan) -> Plan:
    """A copy of `plan` but for its regions, which its callers set (`Planner._templated`,
    `Planner.derived`: their own); its `DmaPlan` shared (plans never change one)."""
    copy = object.__new__(Plan)
    copy.code, copy.busy, copy.latency, copy.flops = plan.code, plan.busy, plan.latency, plan.flops
    copy.is_load, copy.is_multiply, copy.is_matmul = plan.is_load, plan.is_multiply, plan.is_matmul
    copy.precision, copy.nbytes, copy.ports, copy.dma = (plan.precision, plan.nbytes, plan.ports,
                                                         plan.dma)
    copy.hbm_read, copy.hbm_write = plan.hbm_read, plan.hbm_write
    return copy


class InstructionFacts:
    """What an instruction's plan takes from its pattern and the core alone: `cost`, `transfer`,
    `flops`, the bytes of its HBM `traffic` and the ports it holds. All are pure functions of the
    instruction's form (its attributes and its operands' `AccessPattern.form`) and the core, so
    they are kept process-wide per pattern (`Planner.pattern`): every tile of a loop at its own
    addresses, and another program's (the same model lowered again, a serving step of another
    length, the next training step's graph), reuses them."""

    __slots__ = ("busy", "code", "dma_engines", "dma_queue", "dma_work", "flops", "hbm_read",
                 "hbm_write", "is_load", "is_matmul", "is_multiply", "latency", "nbytes", "ports",
                 "precision")


def instruction_facts(ins: Instruction, core, ports: PortTable) -> InstructionFacts:
    facts = InstructionFacts()
    reads, writes = ins.reads(), ins.writes()
    facts.flops = ins.flops()
    facts.precision = (reads[0].dtype.precision or "fp32") if facts.flops and reads else None
    # device-memory traffic, for a program without on-chip tensors (`_hbm_traffic`)
    facts.hbm_read, facts.hbm_write = _hbm_traffic(ins, reads, writes, _NONE)
    facts.busy = facts.latency = 0.0
    facts.is_load = facts.is_multiply = facts.is_matmul = False
    facts.ports = ()
    facts.dma_work, facts.dma_engines, facts.dma_queue = 0.0, 0, None
    if ins.engine is Engine.DMA:
        facts.code = -1
        _dma_facts(ins, core, reads, writes, facts)
        return facts
    cost = ins.cost(core)
    facts.busy, facts.latency = float(cost.busy_ns), float(max(cost.latency_ns, cost.busy_ns))
    facts.nbytes = sum(ap.nbytes for ap in (*reads, *writes))
    facts.code = STREAM_OF_ENGINE[ins.engine]
    if facts.code == TENSOR:
        pipeline = getattr(type(ins), "PIPELINE", "multiply")
        facts.is_load = pipeline == "load"
        facts.is_multiply = not facts.is_load
        facts.is_matmul = ins.OPCODE == "MultiplyMoving"
        if facts.is_load:
            facts.code = TENSOR_LOAD
    facts.ports = ports.held_by(facts.code, {ap.memory for ap in (*reads, *writes)})
    return facts


_NONE: Mapping[str, int] = {}  # no on-chip tensors


def _hbm_traffic(ins: Instruction, reads: tuple[AccessPattern, ...],
                 writes: tuple[AccessPattern, ...], on_chip: Mapping[str, int]) -> tuple[int, int]:
    """(bytes read, bytes written) of HBM tensors not kept on chip: the bytes moved (an indirect
    DMA's dependencies span its whole table, its traffic only the rows it moves)."""
    moved_reads, moved_writes = ins.traffic() if hasattr(ins, "traffic") else (reads, writes)
    hbm = Memory.HBM
    return (sum(ap.nbytes for ap in moved_reads if ap.memory is hbm and ap.tensor not in on_chip),
            sum(ap.nbytes for ap in moved_writes if ap.memory is hbm and ap.tensor not in on_chip))


def build_plan(ins: Instruction, core, regions: RegionIndex, ports: PortTable, *,
               on_chip: Mapping[str, int] = _NONE, facts: InstructionFacts | None = None,
               operands: tuple | None = None) -> Plan:
    """`on_chip`: tensors that live in SBUF (`TensorDecl.on_chip`: intermediates the compiler
    keeps, a pipeline stage's cached weights): no HBM traffic, and their same-layout hand-offs
    move nothing (see `_dma_facts`). `facts`, `operands` (its reads and writes): the
    instruction's, if known."""
    if facts is None:
        facts = instruction_facts(ins, core, ports)
    plan = Plan()
    reads, writes = operands if operands is not None else (ins.reads(), ins.writes())
    plan.reads, plan.read_neighbors = regions.regions_of(reads)
    plan.writes, plan.write_neighbors = regions.regions_of(writes)
    plan.flops = facts.flops
    plan.precision = facts.precision
    if on_chip and (facts.hbm_read or facts.hbm_write):
        plan.hbm_read, plan.hbm_write = _hbm_traffic(ins, reads, writes, on_chip)
    else:
        plan.hbm_read, plan.hbm_write = facts.hbm_read, facts.hbm_write
    plan.code = facts.code
    plan.nbytes = facts.nbytes
    if plan.code == -1:
        hand_off = (_hand_off(reads, writes, on_chip, core.partitions)
                    if on_chip and isinstance(ins, DmaCopy) and not ins.accumulate else None)
        if hand_off == "cast":
            return _engine_cast(plan, reads, writes, core, ports)
        in_place = hand_off == "same"
        work = facts.dma_work
        hbm_bytes = plan.hbm_read + plan.hbm_write
        plan.dma = DmaPlan(0.0 if in_place else work, facts.dma_engines,
                           hbm_bytes / work if work > 0 else 0.0, facts.dma_queue, in_place)
        return plan
    plan.busy, plan.latency = facts.busy, facts.latency
    plan.is_load, plan.is_multiply, plan.is_matmul = facts.is_load, facts.is_multiply, facts.is_matmul
    plan.ports = facts.ports
    return plan


def _dma_facts(ins: Instruction, core, reads: tuple[AccessPattern, ...],
               writes: tuple[AccessPattern, ...], facts: InstructionFacts) -> None:
    """Engine-time from the instruction's `transfer(core)`; the spread over engines from the
    on-chip side's partitions (``partitions_per_engine`` each, at most all engines).

    A DMA between SBUF and a tensor the compiler keeps on chip (`TensorDecl.on_chip`) moves no
    HBM bytes. When it also keeps the layout the producer stored (rows on partitions: each
    partition's elements one contiguous run of the tensor, row r on partition r mod 128) and the
    dtype, it is an in-place hand-off: the producer's tile is the consumer's, so no data moves
    (`DmaPlan.in_place`, decided per program by `build_plan`); when it keeps the layout but casts,
    a compute engine does it (`_engine_cast`). Any other access re-lays out the data and is
    charged as an SBUF-to-SBUF DMA."""
    dma = core.dma
    queue = getattr(ins, "queue", None)
    if queue is not None and not 0 <= queue < dma.queues_per_engine:
        ins.fail(InvalidArgumentError(f"{ins.name}: DMA queue {queue} does not exist on {core.name} "
                                      f"(queues 0..{dma.queues_per_engine - 1})"))
    transfer = getattr(ins, "transfer", None)
    if transfer is not None:
        moved = transfer(core)
        work, facts.nbytes = moved.engine_ns(core), moved.nbytes
    else:  # a DMA-engine instruction without a transfer model: its cost alone on one engine
        work = ins.cost(core).busy_ns - dma.start_latency_ns
        facts.nbytes = max((ap.nbytes for ap in (*reads, *writes)), default=0)
    sides = [ap.partitions for ap in (*writes, *reads) if ap.memory is not Memory.HBM]
    partitions = sides[0] if sides else (writes[0].partitions if writes else 1)
    engines = min(dma.engines, max(1, -(-partitions // dma.partitions_per_engine)))
    work = max(float(work), 0.0)
    if work > 0 and facts.nbytes < engines * dma.ideal_transfer_bytes:
        work += engines * dma.transfer_overhead_ns  # a small transfer: its overhead shows
    facts.dma_work, facts.dma_engines, facts.dma_queue = work, engines, queue


def _hand_off(reads: tuple[AccessPattern, ...], writes: tuple[AccessPattern, ...],
              on_chip: Mapping[str, int], partitions: int) -> str | None:
    """A plain copy whose HBM-declared operands are all on chip, each read or written one
    partition's run at a time, with SBUF on the other side (see `_dma_facts`): "same" when
    nothing changes (in place), "cast" when only the dtype does; None otherwise (data moves
    across partitions or to or from HBM: a DMA)."""
    operands = (*reads, *writes)
    declared = [ap for ap in operands if ap.memory is Memory.HBM]
    if not declared or any(ap.tensor not in on_chip for ap in declared):
        return None
    sides = [ap for ap in operands if ap.memory is Memory.SBUF]
    if not sides:
        return None
    lane = sides[0].partition_start
    for ap in declared:
        per_partition = ap.nbytes // max(ap.partitions, 1)
        if _row_run_bytes(ap) < per_partition:
            return None
        # row r of the tensor sits on partition r mod 128 (rows on partitions, as stored): the
        # SBUF side must start on the first row's partition, else the data crosses lanes
        start = on_chip[ap.tensor]
        row = (ap.offset - start) // ap.dtype.itemsize // ap.partition_step \
            if ap.partition_step else 0
        if (row - lane) % partitions:
            return None
    return "cast" if len({ap.dtype for ap in operands}) > 1 else "same"


# contiguous run of one partition's row of an HBM pattern, by what it depends on: (dims,
# partition step, item size); cleared when it holds this many (a bound on memory)
_ROW_RUNS: dict[tuple, int] = {}
_ROW_RUNS_KEPT = 100_000


def _row_run_bytes(ap: AccessPattern) -> int:
    """`contiguous_run_bytes` of one partition of the HBM pattern `ap` (found once per dims,
    partition step and item size: a replayed call's renamed patterns share them)."""
    key = (ap.dims, ap.partition_step, ap.dtype.itemsize)
    run = _ROW_RUNS.get(key)
    if run is None:
        if len(_ROW_RUNS) >= _ROW_RUNS_KEPT:
            _ROW_RUNS.clear()
        run = _ROW_RUNS[key] = contiguous_run_bytes(dataclasses.replace(ap, partitions=1))
    return run


def _engine_cast(plan: Plan, reads: tuple[AccessPattern, ...],
                 writes: tuple[AccessPattern, ...], core, ports: PortTable) -> Plan:
    """A cast of an on-chip tensor in its own layout: SBUF to SBUF, partition by partition. The
    compiler does it with a compute engine's copy, not the DMA engines ("if both src and dst
    tiles are in SBUF, consider using nisa.tensor_copy instead for better performance",
    nki.isa.dma_copy; tensor_copy runs on VectorE or GpSimd on NeuronCore-v2). trnsim puts it on
    GpSimd, which a compiled model otherwise leaves idle (VectorE and ScalarE carry its norms,
    softmax and PSUM evictions), at `TensorCopy`'s cost; its dependencies are the DMA's own."""
    from trnsim.isa import TensorCopy

    engine = Engine.GPSIMD if core.gpsimd is not None else Engine.VECTOR
    dst = next((ap for ap in writes if ap.memory is Memory.SBUF), None)
    src = next((ap for ap in reads if ap.memory is Memory.SBUF), None)
    if dst is None:  # SBUF -> on-chip tensor: the on-chip tensor takes the SBUF side's layout
        dst = dataclasses.replace(src, dtype=writes[0].dtype)
    if src is None:
        src = dataclasses.replace(dst, dtype=reads[0].dtype)
    cost = TensorCopy(dst=dst, src=src, engine=engine).cost(core)
    plan.code = STREAM_OF_ENGINE[engine]
    plan.busy, plan.latency = float(cost.busy_ns), float(max(cost.latency_ns, cost.busy_ns))
    plan.ports = ports.held_by(plan.code, {Memory.SBUF})
    return plan
