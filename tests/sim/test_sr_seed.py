"""NEURON_RT_STOCHASTIC_ROUNDING_SEED seeds the simulator's stochastic rounding, as the runtime's
does: the same seed gives the same bits, another seed other bits."""

import numpy as np

import trnsim.nki.language as nl
from trnsim import nki


@nki.jit
def to_bf16(a):
    out = nl.ndarray((128, 512), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    nl.store(out, value=nl.copy(nl.load(a), dtype=nl.bfloat16))
    return out


def test_the_environment_seed_reaches_the_simulated_core(monkeypatch):
    a = (np.random.default_rng(0).standard_normal((128, 512)) * 1.001).astype(np.float32)
    monkeypatch.setenv("NEURON_RT_STOCHASTIC_ROUNDING_EN", "1")
    runs = {}
    for seed in ("1", "2"):
        monkeypatch.setenv("NEURON_RT_STOCHASTIC_ROUNDING_SEED", seed)
        runs[seed] = [np.asarray(to_bf16(a)).view(np.uint16) for _ in range(2)]
    assert np.array_equal(runs["1"][0], runs["1"][1])
    assert not np.array_equal(runs["1"][0], runs["2"][0])
