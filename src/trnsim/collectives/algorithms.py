"""The named algorithms, as nccom-test's ``--show-algorithm`` names them, and what each builds.

================  ============================================================================
name              schedule
================  ============================================================================
``ring``          one ring through every rank in snake order (`placement`); all-to-all: the
                  shifted pairwise exchange on that ring
``kangaring``     KangaRing as INTRANODE_DOC describes it: on every chip one rank is the
                  primary of each cycle and its chip-mates are secondaries; only primaries form
                  the ring (one hop per chip, not per rank), and a primary reads its
                  secondaries' chunks and duplicates its writes to them within its own DMAs
                  (a fused step: no latency, no port time). Each rank of a chip is primary of
                  one cycle; the cycles alternate direction round the snake ring (edge-disjoint
                  as directed links: the doc's non-overlapping cycles). Needs two or more chips
                  with the same number (>= 2) of ranks each; otherwise the bidirectional ring
``rdh``           recursive halving (reduce-scatter) / doubling (all-gather) over hypercube
                  labels on the torus (power-of-two rank counts)
``mesh``          direct: one step per reduce-scatter or all-gather (every rank writes to every
                  rank, routed); all-to-all, permute and sendrecv in one step
``torus2d``       one phase per grid axis the ranks span — on-chip cores, torus columns,
                  torus rows, UltraServer servers, nodes — each a bidirectional ring (half the
                  data each way, so the cores of a chip that send along the same axis share
                  both directions of its links), reduce-scatter innermost axis first (the first
                  phase moves the most data over the shortest path), all-gather in reverse;
                  needs the ranks to fill that grid
``hier``          the Neuron docs' hierarchical algorithm: outer groups are nodes (with -N > 1),
                  else the servers of an UltraServer, else chips; reduce-scatter inside the
                  groups, then across them on 1/Y of the data, all-gather in reverse; each level
                  runs the algorithm the chooser picks for its group and message size
================  ============================================================================
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from trnsim.collectives.exchange import all_to_all_schedule, point_to_point_schedule
from trnsim.collectives.ops import POINT_TO_POINT
from trnsim.collectives.phases import GridPlan, Phase, build_grid_schedule
from trnsim.collectives.placement import Machine, compact_grid, outer_groups
from trnsim.collectives.schedule import Schedule
from trnsim.errors import UnknownNameError, UnsupportedError

ALGORITHMS = ("ring", "kangaring", "rdh", "mesh", "torus2d", "hier")
SUPPORTED = {
    "all_reduce": ALGORITHMS,
    "reduce_scatter": ALGORITHMS,
    "all_gather": ALGORITHMS,
    "all_to_all": ("mesh", "ring"),
    "permute": ("mesh",),
    "sendrecv": ("mesh",),
}
_PHASE_OF = {"ring": "ring", "kangaring": "biring", "rdh": "rdh", "mesh": "mesh"}


def check_algorithm(op: str, algorithm: str) -> str:
    name = str(algorithm).strip().lower()
    if name not in ALGORITHMS:
        raise UnknownNameError("collective algorithm", algorithm, ALGORITHMS)
    if name not in SUPPORTED[op]:
        raise UnsupportedError(f"algorithm {name!r} does not implement {op}; "
                               f"{op} supports: {', '.join(SUPPORTED[op])}")
    return name


def build(op: str, algorithm: str, n: int, machine: Machine, cores: Sequence[int],
          pairs: Sequence[tuple[int, int]] = (), level_algorithms: tuple[str, str] | None = None,
          ) -> Schedule:
    """The schedule of `op` on n elements for ranks on `cores` (rank i on cores[i]).

    level_algorithms: for ``hier``, the (intra-group, inter-group) algorithms; `chooser.choose`
    supplies them when the caller does not.
    """
    algorithm = check_algorithm(op, algorithm)
    ranks = len(cores)
    if op in POINT_TO_POINT:
        return point_to_point_schedule(op, n, ranks, pairs)
    if op == "all_to_all":
        positions = machine.ring_positions(cores) if algorithm == "ring" else None
        return all_to_all_schedule(n, ranks, algorithm, positions)
    if algorithm == "torus2d":
        return build_grid_schedule(op, n, torus_plan(machine, cores), "torus2d")
    if algorithm == "hier":
        inner, outer = level_algorithms or ("ring", "ring")
        plan = hier_plan(machine, cores, inner, outer)
        return build_grid_schedule(op, n, plan, "hier", detail=f"intra {inner}, inter {outer}")
    plan = kangaring_plan(machine, cores) if algorithm == "kangaring" else None
    if plan is None:
        plan = GridPlan(flat_coordinates(machine, cores, algorithm)[:, None], (ranks,),
                        (Phase(0, _PHASE_OF[algorithm]),),
                        channels=2 if algorithm == "kangaring" else 1)
    return build_grid_schedule(op, n, plan, algorithm)


def kangaring_plan(machine: Machine, cores: Sequence[int]) -> GridPlan | None:
    """Axes (rank on its chip, chip on the ring): a fused exchange among a chip's ranks, then a
    ring of primaries per on-chip index; None unless >= 2 chips hold >= 2 ranks each, equally."""
    chip = machine.global_chip(np.asarray(cores))
    _, chip_index, per_chip = np.unique(chip, return_inverse=True, return_counts=True)
    chip_index = chip_index.reshape(-1)
    if len(per_chip) < 2 or per_chip.min() < 2 or per_chip.min() != per_chip.max():
        return None
    position = machine.ring_positions(cores)
    first = np.full(len(per_chip), np.iinfo(np.int64).max)
    np.minimum.at(first, chip_index, position)
    chip_on_ring = np.argsort(np.argsort(first))[chip_index]
    order = np.lexsort((position, chip_index))
    local = np.empty(len(cores), dtype=np.int64)
    local[order] = np.arange(len(cores)) % int(per_chip[0])
    values = np.column_stack([local, chip_on_ring])
    return GridPlan(values, (int(per_chip[0]), len(per_chip)),
                    (Phase(0, "mesh", fused=True), Phase(1, "altring")))


def flat_coordinates(machine: Machine, cores: Sequence[int], algorithm: str) -> np.ndarray:
    """Each rank's position in a one-axis group: snake-ring position, hypercube label, or index."""
    ranks = len(cores)
    if algorithm in ("ring", "kangaring"):
        return machine.ring_positions(cores)
    if algorithm == "rdh":
        _require_power_of_two("rdh", ranks)
        labels = machine.hypercube_labels(cores)
        return labels if labels is not None else np.arange(ranks)
    return np.arange(ranks)


def torus_plan(machine: Machine, cores: Sequence[int]) -> GridPlan:
    found = compact_grid(machine.grid_coordinates(cores), with_axes=True)
    if found is None:
        raise UnsupportedError("torus2d needs the ranks to fill a grid of whole torus rows, "
                               f"columns and chips; {len(cores)} ranks on {machine.instance.name} "
                               "do not (try ring or hier)")
    values, sizes, axes = found
    order = sorted(range(len(axes)), key=lambda i: -axes[i])  # innermost axis (core) first
    return GridPlan(values, sizes, tuple(Phase(i, "biring") for i in order), channels=2)


def hier_plan(machine: Machine, cores: Sequence[int], inner: str, outer: str) -> GridPlan:
    """Two axes: the outer group (node, else server, else chip) and the rank's place inside it."""
    for name in (inner, outer):
        if name not in _PHASE_OF:
            raise UnsupportedError(f"hier levels run ring, kangaring, rdh or mesh, not {name!r}")
    coords = machine.grid_coordinates(cores)
    group = outer_groups(coords)
    if group is None:
        raise UnsupportedError(f"hier needs the same number of ranks on every node, server or "
                               f"chip; {len(cores)} ranks on {machine.instance.name} are not")
    members = np.bincount(group)
    inner_size, outer_size = int(members[0]), len(members)
    local = _inner_positions(machine, cores, group, inner, inner_size)
    if outer == "rdh":
        _require_power_of_two("rdh (between groups)", outer_size)
    values = np.column_stack([group, local])
    phases = (Phase(1, _PHASE_OF[inner]), Phase(0, _PHASE_OF[outer]))
    return GridPlan(values, (outer_size, inner_size), phases,
                    channels=2 if "kangaring" in (inner, outer) else 1)


def _inner_positions(machine: Machine, cores: Sequence[int], group: np.ndarray, inner: str,
                     size: int) -> np.ndarray:
    """Position of each rank inside its group, in the order `inner` walks it."""
    if inner == "rdh":
        _require_power_of_two("rdh (inside groups)", size)
    if inner == "mesh":
        key = np.arange(len(cores))
    elif inner == "rdh":
        labels = machine.hypercube_labels(cores)
        key = labels if labels is not None else np.arange(len(cores))
    else:
        key = machine.ring_positions(cores)
    order = np.lexsort((key, group))
    local = np.empty(len(cores), dtype=np.int64)
    local[order] = np.arange(len(cores)) % size
    return local


def _require_power_of_two(what: str, count: int) -> None:
    if count & (count - 1):
        raise UnsupportedError(f"{what} needs a power-of-two number of ranks, got {count}")

