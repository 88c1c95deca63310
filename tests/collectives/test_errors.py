"""Bad requests raise specific TrnsimErrors that name the limit and the value."""

import numpy as np
import pytest

from trnsim.collectives import Collective, Fabric, simulate
from trnsim.errors import (
    InvalidArgumentError,
    LimitExceededError,
    TrnsimError,
    UnknownNameError,
    UnsupportedError,
)


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    (dict(ranks=33), LimitExceededError, "ranks 33 exceeds limit 32"),
    (dict(ranks=65, nodes=2), LimitExceededError, "ranks 65 exceeds limit 64"),
    (dict(ranks=5, nodes=2), InvalidArgumentError, "do not divide evenly over 2 nodes"),
    (dict(ranks=0), InvalidArgumentError, "at least 1"),
    (dict(op="allreduse"), UnknownNameError, "did you mean 'all_reduce'"),
    (dict(dtype="fp33"), UnknownNameError, "unknown dtype 'fp33'"),
    (dict(dtype="float8_e4m3fn_x4"), UnsupportedError, "packs 4"),
    (dict(sizes=6), InvalidArgumentError, "not a whole number of float32 elements"),
    (dict(sizes=-4), InvalidArgumentError, "negative"),
    (dict(instance="inf1.24xlarge"), UnsupportedError, "not modelled on Inferentia"),
    (dict(instance="inf2.48xlarge", nodes=2), UnsupportedError, "need EFA"),
    (dict(instance="trn1.32xlarge", lnc=2), UnsupportedError, "logical NeuronCore config 2"),
    (dict(instance="trn1n.32xlarge", nodes=0), InvalidArgumentError, "nodes must be at least 1"),
    (dict(algorithm="flat"), UnknownNameError, "collective algorithm 'flat'"),
])
def test_simulate_refuses(kwargs, error, message):
    args = dict(op="allr", sizes=4096, ranks=4, instance="trn1.32xlarge", nodes=1,
                dtype="float32") | kwargs
    with pytest.raises(error, match=message) as info:
        simulate(**args)
    assert isinstance(info.value, TrnsimError)


def test_fabric_request_errors():
    fabric = Fabric("trn1.32xlarge")
    with pytest.raises(LimitExceededError, match="NeuronCore index 40 exceeds limit 31"):
        fabric.issue(Collective("allr", 64, "float32", (0, 40)))
    with pytest.raises(InvalidArgumentError, match="hosts two ranks"):
        fabric.issue(Collective("allr", 64, "float32", (3, 3)))
    with pytest.raises(InvalidArgumentError, match="rank 1 input has 3 elements, expected 4"):
        fabric.issue(Collective("allr", None, "float32", 2,
                                inputs=[np.zeros(4, np.float32), np.zeros(3, np.float32)]))
    with pytest.raises(InvalidArgumentError, match="inputs hold 4 elements but nbytes 32"):
        fabric.issue(Collective("allr", 32, "float32", 2, inputs=[np.zeros(4, np.float32)] * 2))
    with pytest.raises(InvalidArgumentError, match="is int32, the collective's dtype float32"):
        fabric.run(Collective("allr", None, "float32", 2, inputs=[np.zeros(4, np.int32)] * 2))
    with pytest.raises(InvalidArgumentError, match="reduction 'mean'"):
        fabric.issue(Collective("allr", 64, "float32", 2, reduction="mean"))
    with pytest.raises(InvalidArgumentError, match=r"outside 0\.\.3"):
        fabric.issue(Collective("permute", 64, "float32", 4, pairs=[(0, 4)]))
    with pytest.raises(InvalidArgumentError, match="more than one target"):
        fabric.issue(Collective("permute", 64, "float32", 4, pairs=[(0, 1), (0, 2)]))
    with pytest.raises(InvalidArgumentError, match="more than one source"):
        fabric.issue(Collective("sendrecv", 64, "float32", 4, pairs=[(0, 1), (2, 1)]))
    with pytest.raises(InvalidArgumentError, match="give nbytes or inputs"):
        fabric.issue(Collective("allr", None, "float32", 2))
