"""Collectives between the ranks of a tensor-parallel model (``k.collective``).

One `CollectiveOp` over all ranks of the model copy; the simulator's rendezvous runs it on the
collectives fabric (NeuronLink inside a chip and between chips), so its time is the fabric's,
not a formula here. The issuing core does not wait; the next kernel's reads of `out` do.
"""

from __future__ import annotations

from trnsim.errors import InvalidArgumentError
from trnsim.isa import CollectiveOp
from trnsim.nki.tile import Tile
from trnsim.nki.trace import current_trace


def collective(out: Tile, x: Tile, *, kind: str, axis: int, degree: int) -> None:
    """out = the ranks' x concatenated along `axis` (all_gather) or summed (all_reduce)."""
    if kind not in ("all_gather", "all_reduce"):
        raise InvalidArgumentError(f"collective kind {kind!r}: expected all_gather or all_reduce")
    trace = current_trace()
    trace.flush()
    trace.emit_now(CollectiveOp, op=kind, srcs=(x.access(),), dsts=(out.access(),),
                   groups=(tuple(range(degree)),), reduction="sum",
                   dim=axis if kind == "all_gather" else 0, src_shape=tuple(x.shape),
                   dst_shape=tuple(out.shape))
