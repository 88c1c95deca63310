"""Stochastic rounding: unbiased, always one of the two neighbours, reproducible per seed."""

from __future__ import annotations

import numpy as np
import pytest

from tests.numerics.bitref import (
    BF16,
    E4M3,
    E4M3FN,
    E5M2,
    FORMATS,
    FP16,
    TF32,
    Format,
    decode,
    encode,
    tf32_bits,
)
from trnsim.errors import InvalidArgumentError, UnsupportedError
from trnsim.hardware import core
from trnsim.numerics import CounterRNG, cast, default_rounding, reset_default_rng, round_tf32

ROUNDS = 100_000


def _codes(result: np.ndarray) -> np.ndarray:
    return result.view(np.uint16 if result.itemsize == 2 else np.uint8).astype(np.int64)


def _neighbours(x: np.ndarray, fmt: Format) -> tuple[np.ndarray, np.ndarray]:
    """Codes of the neighbour toward zero and the next one away from zero (sign kept)."""
    low = encode(x, fmt, "rtz")
    return low, low + 1


# (format, value): inside a binade, in the subnormals, below the smallest subnormal, negative,
# near max finite (the upper neighbour is the overflow), and a value with p near 1.
CASES = [
    (BF16, 1 + 2.0 ** -9), (BF16, -(3 + 2.0 ** -10)), (BF16, 2.0 ** -130 * 1.3), (BF16, 1e-3),
    (FP16, 1 + 2.0 ** -12), (FP16, 2.0 ** -20 * 1.3), (FP16, -2.0 ** -26), (FP16, 65504.0 + 8.0),
    (E4M3, 1.06), (E4M3, 2.0 ** -8 * 0.7), (E4M3, 2.0 ** -12), (E4M3, 236.0),
    (E4M3FN, 0.3), (E4M3FN, -2.0 ** -10 * 1.5), (E4M3FN, 440.0), (E4M3FN, 2.0 ** -14),
    (E5M2, 1.2), (E5M2, 2.0 ** -17 * 1.25), (E5M2, -0.99), (E5M2, 57344.0 + 4096.0),
]


@pytest.mark.parametrize("fmt, value", CASES, ids=lambda c: getattr(c, "name", repr(c)))
def test_mean_of_rounds_is_the_input(fmt, value):
    x = np.full(ROUNDS, value, dtype=np.float32)
    exact = float(x[0])
    low, high = _neighbours(x[:1], fmt)
    lo, hi = decode(low, fmt)[0], decode(high, fmt)[0]
    got = cast(x, fmt.name, rounding="stochastic", rng=CounterRNG(2024))
    codes = _codes(got)
    assert set(np.unique(codes).tolist()) <= {int(low[0]), int(high[0])}
    up = np.mean(codes == high[0])
    p = (exact - lo) / (hi - lo) if np.isfinite(hi) else (exact - lo) / (
        2.0 ** ((fmt.max_code >> fmt.mantissa_bits) - fmt.bias - fmt.mantissa_bits))
    standard_error = np.sqrt(p * (1 - p) / ROUNDS)
    assert 0 < p < 1
    assert abs(up - p) <= 4 * standard_error, (up, p, standard_error)
    if np.isfinite(hi):
        mean = float(np.mean(got.astype(np.float64)))
        assert abs(mean - exact) <= 4 * standard_error * abs(hi - lo)


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_every_result_is_one_of_the_two_neighbours(fmt):
    rng = np.random.default_rng(5)
    bits = rng.integers(0, 1 << 32, 1_000_000, dtype=np.uint32)
    x = bits.view(np.float32)
    x = x[np.isfinite(x)]
    got = _codes(cast(x, fmt.name, rounding="stochastic", rng=CounterRNG(9)))
    low, high = _neighbours(x, fmt)
    exact = decode(low, fmt) == x
    assert np.all((got == low) | (got == high))
    assert np.all(got[exact] == low[exact]), "representable values must not move"


def test_tf32_stochastic_rounding_stays_between_neighbours():
    x = np.random.default_rng(6).standard_normal(200_000).astype(np.float32)
    got = round_tf32(x, rounding="stochastic", rng=CounterRNG(3)).view(np.uint32)
    low, high = _neighbours(x, TF32)
    assert np.all((got == tf32_bits(low)) | (got == tf32_bits(high)))
    assert 0.3 < np.mean(got == tf32_bits(high)) < 0.7


def test_nan_and_inf_pass_through():
    x = np.array([np.nan, -np.inf, np.inf, -np.nan], dtype=np.float32)
    for name in ("bfloat16", "float16", "float8_e5m2", "float8_e4m3", "tfloat32"):
        got = cast(x, name, "stochastic", CounterRNG(1)).astype(np.float32)
        assert np.isnan(got[[0, 3]]).all() and got[1] == -np.inf and got[2] == np.inf
    assert np.isnan(cast(x, "float8_e4m3fn", "stochastic", CounterRNG(1)).astype(np.float32)).all()


def test_same_seed_same_bits_and_different_seeds_differ():
    x = np.random.default_rng(7).standard_normal(50_001).astype(np.float32)
    for name in ("bfloat16", "float16", "float8_e4m3"):
        a = cast(x, name, "stochastic", CounterRNG(42))
        b = cast(x, name, "stochastic", CounterRNG(42))
        c = cast(x, name, "stochastic", CounterRNG(43))
        d = cast(x, name, "stochastic", CounterRNG(42, stream=1))
        assert a.tobytes() == b.tobytes()
        assert a.tobytes() != c.tobytes()
        assert a.tobytes() != d.tobytes()


def test_a_generator_advances_so_repeated_casts_draw_fresh_bits():
    x = np.full(10_000, 1 + 2.0 ** -9, dtype=np.float32)
    rng = CounterRNG(5)
    first = cast(x, "bfloat16", "stochastic", rng)
    second = cast(x, "bfloat16", "stochastic", rng)
    assert first.tobytes() != second.tobytes()
    rng.seek(0)
    assert cast(x, "bfloat16", "stochastic", rng).tobytes() == first.tobytes()


def test_shape_is_kept_and_elements_are_independent_of_the_array_shape():
    x = np.random.default_rng(8).standard_normal((64, 33)).astype(np.float32)
    flat = cast(x.reshape(-1), "float8_e5m2", "stochastic", CounterRNG(4))
    shaped = cast(x, "float8_e5m2", "stochastic", CounterRNG(4))
    assert shaped.shape == x.shape
    assert shaped.reshape(-1).tobytes() == flat.tobytes()


class TestProcessWideSetting:
    """NEURON_RT_STOCHASTIC_ROUNDING_EN / _SEED switch the default, as on the real runtime."""

    @pytest.fixture(autouse=True)
    def _fresh_generator(self, monkeypatch):
        monkeypatch.delenv("NEURON_RT_STOCHASTIC_ROUNDING_EN", raising=False)
        monkeypatch.delenv("NEURON_RT_STOCHASTIC_ROUNDING_SEED", raising=False)
        reset_default_rng()
        yield
        reset_default_rng()

    def test_default_is_rne(self):
        assert default_rounding() == "rne"
        x = np.full(1000, 1 + 2.0 ** -9, dtype=np.float32)
        assert (cast(x, "bfloat16").astype(np.float32) == 1.0).all()

    @pytest.mark.parametrize("value, mode", [("1", "stochastic"), ("true", "stochastic"),
                                             ("0", "rne"), ("false", "rne")])
    def test_env_values(self, monkeypatch, value, mode):
        monkeypatch.setenv("NEURON_RT_STOCHASTIC_ROUNDING_EN", value)
        assert default_rounding() == mode

    def test_bad_env_value_is_an_error(self, monkeypatch):
        monkeypatch.setenv("NEURON_RT_STOCHASTIC_ROUNDING_EN", "maybe")
        with pytest.raises(InvalidArgumentError, match="NEURON_RT_STOCHASTIC_ROUNDING_EN"):
            cast(np.ones(2, np.float32), "bfloat16")

    def test_env_enables_sr_seeded_by_env(self, monkeypatch):
        monkeypatch.setenv("NEURON_RT_STOCHASTIC_ROUNDING_EN", "1")
        monkeypatch.setenv("NEURON_RT_STOCHASTIC_ROUNDING_SEED", "77")
        x = np.full(4096, 1 + 2.0 ** -9, dtype=np.float32)
        first = cast(x, "bfloat16")
        second = cast(x, "bfloat16")
        assert first.tobytes() != second.tobytes()  # fresh counters per call
        reference = CounterRNG(77)
        assert first.tobytes() == cast(x, "bfloat16", "stochastic", reference).tobytes()
        assert second.tobytes() == cast(x, "bfloat16", "stochastic", reference).tobytes()
        reset_default_rng()
        assert cast(x, "bfloat16").tobytes() == first.tobytes()  # same seed, same run

    def test_explicit_rne_overrides_env(self, monkeypatch):
        monkeypatch.setenv("NEURON_RT_STOCHASTIC_ROUNDING_EN", "1")
        x = np.full(1000, 1 + 2.0 ** -9, dtype=np.float32)
        assert (cast(x, "bfloat16", rounding="rne").astype(np.float32) == 1.0).all()

    def test_env_sr_has_no_effect_on_neuroncore_v1(self, monkeypatch):
        monkeypatch.setenv("NEURON_RT_STOCHASTIC_ROUNDING_EN", "1")
        x = np.full(1000, 1 + 2.0 ** -9, dtype=np.float32)
        assert (cast(x, "bfloat16", core=core("v1")).astype(np.float32) == 1.0).all()


def test_explicit_sr_on_neuroncore_v1_is_unsupported():
    with pytest.raises(UnsupportedError, match="NeuronCore-v1"):
        cast(np.ones(4, np.float32), "bfloat16", "stochastic", core=core("v1"))


def test_bad_rounding_and_rng_arguments():
    with pytest.raises(InvalidArgumentError, match="rounding"):
        cast(np.ones(4, np.float32), "bfloat16", rounding="up")
    with pytest.raises(InvalidArgumentError, match="CounterRNG"):
        cast(np.ones(4, np.float32), "bfloat16", "stochastic", rng=np.random.default_rng(0))


def test_sr_never_applies_to_integer_targets():
    x = np.full(1000, 2.5, dtype=np.float32)
    assert (cast(x, "int8", "stochastic", CounterRNG(1)) == 2).all()
