"""The algorithm chooser's documented rules, and forcing an algorithm."""

import pytest

from trnsim import hardware
from trnsim.collectives import Collective, Fabric, choose, simulate
from trnsim.collectives.placement import Machine
from trnsim.errors import UnknownNameError, UnsupportedError

MIB = 2**20


def _choice(instance, ranks, nbytes, op="all_reduce", nodes=1):
    machine = Machine.build(hardware.instance(instance), nodes)
    return choose(op, nbytes, machine, machine.place(ranks))


@pytest.mark.parametrize(("ranks", "nbytes", "expected"), [
    (32, 64 * 1024, "mesh"),          # < 1 MiB
    (32, 1 * MIB, "rdh"),             # 1-56 MiB, power-of-two ranks
    (32, 56 * MIB, "rdh"),
    (32, 57 * MIB, "kangaring"),      # > 56 MiB, every chip holds 2 ranks
    (24, 8 * MIB, "kangaring"),       # not a power of two: no rdh
    (3, 8 * MIB, "ring"),             # chip 1 holds one rank: no kangaring
    (1, 8 * MIB, "mesh"),             # nothing to move
])
def test_single_node_rules(ranks, nbytes, expected):
    assert _choice("trn1.32xlarge", ranks, nbytes).algorithm == expected


def test_multi_node_rules():
    small = _choice("trn2.48xlarge", 128, 64 * 1024, nodes=2)
    assert small.algorithm == "hier" and small.levels == ("mesh", "mesh")
    big = _choice("trn2.48xlarge", 1024, 2**30, nodes=16)
    assert big.algorithm == "hier" and big.levels == ("kangaring", "rdh")  # 16 MiB per node group
    huge = _choice("trn2.48xlarge", 384, 2**34, nodes=6)
    assert huge.levels == ("kangaring", "ring")  # 6 nodes: not a power of two
    assert _choice("trn1.32xlarge", 4, 2**30, nodes=4).algorithm == "ring"  # one rank per node
    assert _choice("trn1.32xlarge", 16, 4 * MIB, nodes=16).algorithm == "rdh"
    assert _choice("trn1.32xlarge", 16, 4096, nodes=16).algorithm == "rdh"  # mesh only to 8 nodes
    assert _choice("trn1.32xlarge", 4, 4096, nodes=4).algorithm == "mesh"


@pytest.mark.parametrize("op", ["all_to_all", "permute", "sendrecv"])
def test_data_movement_ops_go_direct(op):
    assert _choice("trn1.32xlarge", 8, 2**30, op=op).algorithm == "mesh"


def test_simulate_reports_the_chosen_and_the_forced_algorithm():
    results, _ = simulate("allr", [4096, 8 * MIB, 2**30], 32, "trn1.32xlarge", 1, "float32")
    assert [r.algorithm for r in results] == ["mesh", "rdh", "kangaring"]
    forced, _ = simulate("allr", 4096, 32, "trn1.32xlarge", 1, "float32", "ring")
    assert forced[0].algorithm == "ring" and forced[0].steps == 62
    hier, _ = simulate("allr", 2**30, 64, "trn1.32xlarge", 2, "float32", "hier")
    assert hier[0].detail == "intra kangaring, inter rdh"  # 32 MiB per inter-node group


def test_unknown_and_inapplicable_algorithms_raise():
    fabric = Fabric("trn1.32xlarge")
    with pytest.raises(UnknownNameError, match="did you mean 'ring'"):
        fabric.issue(Collective("all_reduce", 4096, "float32", 8, "rnig"))
    with pytest.raises(UnsupportedError, match="all_to_all supports: mesh, ring"):
        fabric.issue(Collective("all_to_all", 4096, "float32", 8, "rdh"))
    with pytest.raises(UnsupportedError, match="power-of-two number of ranks, got 6"):
        fabric.issue(Collective("all_reduce", 4096, "float32", 6, "rdh"))
