"""DMA timing: a core's 16 DMA engines and their queues, and the chip's shared HBM bandwidth.

The model (hardware.md section 6, fact 7; numbers from `CoreSpec.dma` and `ChipSpec`):

- **Queues.** Each core has ``queues_per_engine`` (16) logical queues; queue q exists on every DMA
  engine, so one DMA instruction runs on queue q of each engine it uses. Transfers on a queue are
  FIFO: one starts moving data only after the previous one on that queue finished. A DMA pinned
  with ``DmaCopy.queue`` uses that queue; otherwise the scheduler picks the queue that frees
  earliest (ties: the lowest index), as a compiler spreading DMAs over queues would.
- **Start latency.** Data starts moving ``start_latency_ns`` (~1,300 ns, semaphore to start)
  after the DMA is ready (its dependencies met). The latency of a DMA overlaps the previous
  transfer on its queue: descriptors are queued ahead.
- **Engines.** A transfer whose on-chip side covers P partitions spreads over
  ``min(engines, ceil(P / partitions_per_engine))`` engines (8 partitions per engine), each at
  ``bytes_per_s_per_engine``. Its engine-time is `DmaTransfer.engine_ns`, which charges each
  contiguous chunk a descriptor overhead, so transfers under 2 KiB per partition are
  inefficient, plus ``transfer_overhead_ns`` on each engine it uses when it moves less than
  ``ideal_transfer_bytes`` (32 KiB) per engine (the per-transfer overhead: many small DMAs cost
  more than one large one moving the same bytes). The core's engines are
  one pool: at any moment the transfers in flight share the 16 engines, each using at most its
  own spread; a transfer booked earlier in program order keeps the engines it was given (first
  come, first served; see `trnsim.sim.resources`).
- **HBM.** Every byte a DMA reads or writes in HBM also uses the chip's HBM bandwidth
  (``ChipSpec.memory_bytes_per_s``), shared by all cores of the chip; SBUF-to-SBUF DMAs use
  none. When the DMA engines of the simulated cores cannot exceed it together (one Trainium core:
  272 GB/s of DMA against 880 GB/s of HBM) the HBM timeline is skipped, as it can never bind.
- **On-chip tensors.** A tensor the compiler keeps in SBUF (`TensorDecl.on_chip`) uses no HBM
  bandwidth; a DMA that hands it over in its own layout is done when its data is ready and uses
  neither a queue nor an engine, and one that also casts it runs as a compute engine's copy
  (see `trnsim.sim.plan.build_plan`).
- Not modelled: the hardware DGE's per-instruction cost on NeuronCore-v3+ (kernels with static
  addresses use precomputed descriptors), DMA QoS classes (v4), engine-to-queue round-robin
  arbitration within a transfer (the pool shares engines evenly instead).
"""

from __future__ import annotations

from trnsim.sim.plan import Plan
from trnsim.sim.resources import RateTimeline, reserve_pieces

_PRUNE_EVERY = 256  # DMA bookings between forgetting the pool's past


def hbm_timeline(chip, cores_in_use: int) -> RateTimeline | None:
    """The chip's HBM bandwidth in bytes/ns, or None when the cores' DMA cannot saturate it."""
    dma = chip.core.dma
    demand = cores_in_use * dma.engines * dma.bytes_per_s_per_engine
    if demand <= chip.memory_bytes_per_s:
        return None
    return RateTimeline(chip.memory_bytes_per_s / 1e9)


class DmaQueues:
    """The DMA engines and queues of one core."""

    def __init__(self, core, hbm: RateTimeline | None) -> None:
        dma = core.dma
        self.latency = float(dma.start_latency_ns)
        self.pool = RateTimeline(dma.engines)  # capacity in engines
        self.hbm = hbm
        self.queue_free = [0.0] * dma.queues_per_engine
        self._bookings = 0
        # the last scheduled transfer's data movement: (start, end, share of its bytes) pieces
        self.moved: list[tuple[float, float, float]] = []

    @property
    def horizon(self) -> float:
        """No transfer of this core will start moving data before this time."""
        return min(self.queue_free)

    def schedule(self, plan: Plan, ready: float) -> tuple[int, float, float]:
        """Book a DMA that may start at `ready`: returns (queue, start, end) in ns, where start is
        when it was triggered and end when its last byte landed."""
        transfer = plan.dma
        queue_free = self.queue_free
        queue = transfer.queue
        if transfer.in_place:  # an on-chip hand-off: done when its data is (no queue, no bytes)
            self.moved = []
            return (queue or 0), ready, ready
        if queue is None:
            queue = queue_free.index(min(queue_free))
        data_start = max(ready + self.latency, queue_free[queue])
        pieces = reserve_pieces(data_start, transfer.work, transfer.engines, self.pool, self.hbm,
                                transfer.hbm_per_work)
        end = pieces[-1][1] if pieces else data_start
        self.moved = [(s, e, rate * (e - s) / transfer.work) for s, e, rate in pieces]
        queue_free[queue] = end
        self._bookings += 1
        if self._bookings % _PRUNE_EVERY == 0:
            self.pool.prune(self.horizon)
        return queue, data_start - self.latency, end
