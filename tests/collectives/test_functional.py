"""Every collective and algorithm against numpy, for odd and even rank counts and element counts
that the rank count does not divide; plus the documented reduction order."""

import numpy as np
import pytest

from trnsim.collectives import SUPPORTED, Collective, Fabric, make_inputs, reference
from trnsim.errors import UnsupportedError
from trnsim.numerics import cast

# (instance, nodes, ranks): ranks is a count (default placement) or explicit NeuronCores.
PLACEMENTS = [
    ("trn1.32xlarge", 1, 1),
    ("trn1.32xlarge", 1, 2),   # the two cores of one chip
    ("trn1.32xlarge", 1, 3),   # odd, spills onto a second chip
    ("trn1.32xlarge", 1, 8),   # one torus row
    ("trn1.32xlarge", 1, 32),  # the whole 4x4 torus
    ("trn1.32xlarge", 2, 6),   # 3 ranks per node: odd groups for hier
    ("trn1.2xlarge", 3, 3),    # one rank per node, odd node count
    ("trn2.48xlarge", 1, 12),  # LNC=2: 4 ranks per chip, 3 chips
    ("inf2.24xlarge", 1, (0, 2, 4)),  # one core on each of 3 ring chips: an odd torus axis
    ("trn2-ultraserver", 1, 32),
    ("trn3-gen1-ultraserver", 1, 8),
]
COUNTS = (29, 64)  # 29: no rank count here divides it; 64 is divisible by some


def _applies(instance, nodes, ranks, op, algorithm) -> bool:
    """Whether the algorithm can run on this placement (rdh: power-of-two groups; torus2d: a full
    grid; hier: equal groups); test_unsupported_placements checks the refusals."""
    try:
        Fabric(instance, nodes).issue(Collective(op, 4 * 64, "int32", ranks, algorithm))
    except UnsupportedError:
        return False
    return True


ALL_CASES = [(inst, nodes, ranks, op, alg) for inst, nodes, ranks in PLACEMENTS
             for op, algs in SUPPORTED.items() for alg in algs]
CASES = [case for case in ALL_CASES if _applies(*case)]


def _run(instance, nodes, ranks, op, algorithm, dtype, count, seed=0, reduction="sum"):
    n = ranks if isinstance(ranks, int) else len(ranks)
    inputs = make_inputs(op, count, n, dtype, seed=seed)
    result = Fabric(instance, nodes).run(Collective(op, None, dtype, ranks, algorithm, inputs,
                                                    reduction=reduction))
    assert result.algorithm == algorithm
    return inputs, result.outputs


def test_unsupported_placements_are_refused_with_the_reason():
    refused = [case for case in ALL_CASES if case not in CASES]
    assert len(CASES) > 3 * len(refused) > 0
    reasons = {"rdh": "power-of-two", "torus2d": "fill a grid", "hier": "same number of ranks"}
    for instance, nodes, ranks, op, algorithm in refused:
        with pytest.raises(UnsupportedError, match=reasons[algorithm]):
            Fabric(instance, nodes).issue(Collective(op, 4 * 64, "int32", ranks, algorithm))


@pytest.mark.parametrize(("instance", "nodes", "ranks", "op", "algorithm"), CASES)
@pytest.mark.parametrize("count", COUNTS)
def test_integer_results_are_exact(instance, nodes, ranks, op, algorithm, count):
    inputs, outputs = _run(instance, nodes, ranks, op, algorithm, "int32", count)
    expected = reference(op, inputs)
    assert len(outputs) == len(expected)
    for got, want in zip(outputs, expected, strict=True):
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(("instance", "nodes", "ranks", "op", "algorithm"),
                         [c for c in CASES if c[3] in ("all_reduce", "reduce_scatter")])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_float_reductions_close_to_numpy(instance, nodes, ranks, op, algorithm, dtype):
    inputs, outputs = _run(instance, nodes, ranks, op, algorithm, dtype, 29, seed=1)
    n = len(inputs)
    eps = 2.0**-23 if dtype == "float32" else 2.0**-8
    for got, want in zip(outputs, reference(op, inputs), strict=True):
        assert got.dtype == inputs[0].dtype
        # inputs in [-1, 1]: partial sums <= n in magnitude, at most n roundings of eps * n each
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=0, atol=n * n * eps)


@pytest.mark.parametrize("algorithm", ["ring", "kangaring", "rdh", "mesh", "torus2d", "hier"])
def test_all_reduce_gives_every_rank_the_same_bits(algorithm):
    _, outputs = _run("trn1.32xlarge", 1, 16, "all_reduce", algorithm, "bfloat16", 1000, 2)
    for out in outputs[1:]:
        assert out.tobytes() == outputs[0].tobytes()
    _, again = _run("trn1.32xlarge", 1, 16, "all_reduce", algorithm, "bfloat16", 1000, 2)
    assert again[0].tobytes() == outputs[0].tobytes()


def _ring_order_sum(inputs, owner, dtype):
    """The documented ring order for the block owned by ring position `owner`:
    x[owner+1] + x[owner+2] + ... + x[owner], each addition in fp32 rounded to `dtype`."""
    n = len(inputs)
    acc = inputs[(owner + 1) % n]
    for k in range(2, n + 1):
        acc = cast(acc.astype(np.float32) + inputs[(owner + k) % n].astype(np.float32), dtype)
    return acc


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_ring_reduction_order_is_the_documented_one(dtype):
    # 8 ranks on chips 0-3 (one torus row): the snake ring is the rank order 0..7.
    n, count = 8, 8 * 5
    inputs = make_inputs("reduce_scatter", count, n, dtype, seed=4)
    result = Fabric("trn1.32xlarge").run(Collective("reduce_scatter", None, dtype, n, "ring",
                                                    inputs))
    for r in range(n):
        segments = [x[r * 5:(r + 1) * 5] for x in inputs]
        expected = _ring_order_sum(segments, r, dtype)
        assert result.outputs[r].tobytes() == expected.tobytes()
    # and the order matters: the numpy sum (another order) differs somewhere in bfloat16
    if dtype == "bfloat16":
        plain = [cast(np.sum([s.astype(np.float32) for s in
                              [x[r * 5:(r + 1) * 5] for x in inputs]], axis=0), dtype)
                 for r in range(n)]
        assert any(p.tobytes() != o.tobytes() for p, o in zip(plain, result.outputs, strict=True))


def test_max_and_min_reductions_and_integer_wraparound():
    inputs = [np.array([250, 3, 7], dtype=np.uint8), np.array([10, 9, 1], dtype=np.uint8)]
    fabric = Fabric("trn1.32xlarge")
    total = fabric.run(Collective("allr", None, "uint8", 2, "ring", inputs)).outputs[0]
    np.testing.assert_array_equal(total, [4, 12, 8])  # 260 wraps to 4
    biggest = fabric.run(Collective("allr", None, "uint8", 2, "mesh", inputs,
                                    reduction="max")).outputs[1]
    np.testing.assert_array_equal(biggest, [250, 9, 7])
    smallest = fabric.run(Collective("allr", None, "uint8", 2, "rdh", inputs,
                                     reduction="min")).outputs[0]
    np.testing.assert_array_equal(smallest, [10, 3, 1])


def test_permute_and_sendrecv_pairs():
    inputs = make_inputs("permute", 7, 4, "float32", seed=5)
    fabric = Fabric("trn1.32xlarge")
    shifted = fabric.run(Collective("permute", None, "float32", 4, inputs=inputs)).outputs
    for i in range(4):
        np.testing.assert_array_equal(shifted[(i + 1) % 4], inputs[i])
    one_way = fabric.run(Collective("sendrecv", None, "float32", 4, inputs=inputs,
                                    pairs=[(3, 0)])).outputs
    np.testing.assert_array_equal(one_way[0], inputs[3])
    assert not one_way[1].any() and not one_way[3].any()
