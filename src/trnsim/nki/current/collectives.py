"""`nki.collectives`: collectives across ranks (logical NeuronCores) of a simulated instance.

Each call emits one `CollectiveOp` (`trnsim.isa.sync`). When every rank of the replica group has
reached its matching call, the simulator runs it on the collectives fabric
(`trnsim.collectives.Fabric` via `trnsim.sim.placement.FabricPort`): functionally exact with
the chosen algorithm's per-hop rounding, timed on NeuronLink / EFA with CC-core admission. The
issuing cores do not wait for it; instructions that read the destinations do. AWS's CPU simulator
does not implement collectives; trnsim does.

Launch a collective kernel on several ranks with ``nki.simulate(kernel, world=World(ranks=N))``.
Not supported (UnsupportedError): all_gather_v, all_to_all_v and the implicit (ring-channel)
permutes, whose rank ids are only known at run time.
"""

from __future__ import annotations

from dataclasses import dataclass

from trnsim.errors import InvalidArgumentError, UnsupportedError
from trnsim.isa import CollectiveOp, RegisterMove, alu_op
from trnsim.nki.current.isa.calls import dst_arg, src_arg
from trnsim.nki.current.isa.registers import VirtualRegister
from trnsim.nki.current.tensor import NKIObject
from trnsim.nki.trace import api, current_trace

_REDUCTIONS = {"add": "sum", "max": "max", "min": "min"}


@dataclass(frozen=True, init=False)
class ReplicaGroup(NKIObject):
    """Groups of ranks that run a collective together: ReplicaGroup([[0, 1, 2, 3]])."""

    groups: tuple[tuple[int, ...], ...]

    def __init__(self, replica_groups=None, **kwargs) -> None:
        groups = replica_groups if replica_groups is not None else kwargs.get("groups", [])
        groups = tuple(tuple(int(r) for r in group) for group in groups)
        seen = [r for group in groups for r in group]
        if len(seen) != len(set(seen)):
            raise InvalidArgumentError(f"ReplicaGroup {groups}: a rank is in two groups")
        object.__setattr__(self, "groups", groups)


def _groups(replica_group) -> tuple[tuple[int, ...], ...]:
    if isinstance(replica_group, ReplicaGroup):
        return replica_group.groups
    return ReplicaGroup(replica_group).groups


def _reduction(op) -> str:
    name = alu_op(op).name
    if name not in _REDUCTIONS:
        raise InvalidArgumentError(f"collective reduction must be nl.add, nl.maximum or nl.minimum; "
                                   f"got {name}")
    return _REDUCTIONS[name]


def _emit(label: str, op: str, srcs, dsts, groups, *, reduction: str = "sum", dim: int = 0,
          pairs=()) -> None:
    sources = [src_arg(s, f"{label} srcs") for s in srcs]
    targets = [dst_arg(d, f"{label} dsts") for d in dsts]
    if not sources or len(sources) != len(targets):
        raise InvalidArgumentError(f"{label}: give the same number (>= 1) of srcs and dsts")
    if op != "all_reduce" and not 0 <= dim < sources[0].ndim:
        raise InvalidArgumentError(f"{label}: collective_dim {dim} of a rank-{sources[0].ndim} tensor")
    trace = current_trace()
    trace.flush()
    trace.emit_now(CollectiveOp, op=op, srcs=tuple(s.access() for s in sources),
                   dsts=tuple(t.access() for t in targets), groups=groups, reduction=reduction,
                   dim=int(dim), src_shape=tuple(sources[0].shape), dst_shape=tuple(targets[0].shape),
                   pairs=tuple(pairs))


@api("ncc.all_reduce")
def all_reduce(srcs, dsts, replica_group, op, priority=None, name=None) -> None:
    _emit("all_reduce", "all_reduce", srcs, dsts, _groups(replica_group), reduction=_reduction(op))


@api("ncc.all_gather")
def all_gather(srcs, dsts, replica_group, collective_dim, priority=None, name=None) -> None:
    _emit("all_gather", "all_gather", srcs, dsts, _groups(replica_group), dim=collective_dim)


@api("ncc.reduce_scatter")
def reduce_scatter(srcs, dsts, replica_group, collective_dim, op, priority=None, name=None) -> None:
    _emit("reduce_scatter", "reduce_scatter", srcs, dsts, _groups(replica_group),
          reduction=_reduction(op), dim=collective_dim)


@api("ncc.all_to_all")
def all_to_all(srcs, dsts, replica_group, collective_dim, priority=None, name=None) -> None:
    _emit("all_to_all", "all_to_all", srcs, dsts, _groups(replica_group), dim=collective_dim)


@api("ncc.collective_permute")
def collective_permute(srcs, dsts, source_target_pairs, priority=None, name=None) -> None:
    """Rank s sends its source to rank t for each (s, t); every rank of the launch takes part."""
    trace = current_trace()
    pairs = tuple((int(s), int(t)) for s, t in source_target_pairs)
    _emit("collective_permute", "permute", srcs, dsts, (tuple(range(trace.ranks)),), pairs=pairs)


@api("ncc.rank_id")
def rank_id(name=None) -> VirtualRegister:
    """A register holding this rank's id."""
    trace = current_trace()
    register = VirtualRegister(trace.new_register())
    trace.emit(RegisterMove, dst=register.number, src=trace.rank)
    return register


def _unsupported(name: str):
    def call(*args, **kwargs):
        raise UnsupportedError(f"nki.collectives.{name} is not supported by trnsim yet (its ranks or "
                               f"sizes are decided at run time)")
    call.__name__ = name
    return call


all_gather_v = _unsupported("all_gather_v")
all_to_all_v = _unsupported("all_to_all_v")
collective_permute_implicit = _unsupported("collective_permute_implicit")
collective_permute_implicit_reduce = _unsupported("collective_permute_implicit_reduce")
collective_permute_implicit_current_processing_rank_id = _unsupported(
    "collective_permute_implicit_current_processing_rank_id")

__all__ = ["ReplicaGroup", "all_gather", "all_gather_v", "all_reduce", "all_to_all", "all_to_all_v",
           "collective_permute", "collective_permute_implicit",
           "collective_permute_implicit_current_processing_rank_id",
           "collective_permute_implicit_reduce", "rank_id", "reduce_scatter"]
