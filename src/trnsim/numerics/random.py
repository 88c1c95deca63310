"""Counter-based random bits for stochastic rounding: Philox4x32-10 in plain numpy integer ops.

Why counter-based: the bits for word ``i`` of a stream are a pure function of (seed, stream, i), so
a simulation is reproducible bit for bit no matter how the work is chunked, on any machine and any
numpy version (uint32/uint64 wrap-around arithmetic is exact everywhere). Why Philox4x32-10: it is
the published standard (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11; the
Random123 library, cuRAND, JAX), passes BigCrush, and its known-answer vectors let a test prove this
implementation is the real thing. The hardware's own SR generator is undocumented, so trnsim cannot
reproduce the device's bits, only their distribution.

Layout: key = (seed low 32 bits, seed high 32 bits); counter block ``j`` of a stream is
(j low 32, j high 32, stream low 32, stream high 32) and yields words 4j .. 4j+3 in lane order.
"""

from __future__ import annotations

import os
import threading

import numpy as np

from trnsim.errors import InvalidArgumentError

_M0 = np.uint64(0xD2511F53)
_M1 = np.uint64(0xCD9E8D57)
_W0 = 0x9E3779B9
_W1 = 0xBB67AE85
_ROUNDS = 10
_MASK32 = 0xFFFFFFFF
_BLOCKS_PER_CHUNK = 1 << 15  # measured best on a 2-core EPYC (1 MiB L2 per core) from 2^12..2^16
_CACHE_WORDS = 1 << 16  # 16 Ki blocks: one Philox chunk
_S32 = np.uint64(32)
_LOW32 = np.uint64(_MASK32)


def philox4x32(counters: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
               key: tuple[int, int], rounds: int = _ROUNDS) -> tuple[np.ndarray, ...]:
    """The Philox4x32 bijection on four counter lanes (uint32 values) under a two-word key.

    Returns four uint32 arrays. Exposed for known-answer tests; use `CounterRNG` to draw bits.
    """
    lanes = [np.array(c, dtype=np.uint64, copy=True) for c in counters]
    _philox_in_place(lanes, key, rounds)
    return tuple(lane.astype(np.uint32) for lane in lanes)


def _philox_in_place(lanes: list[np.ndarray], key: tuple[int, int], rounds: int) -> None:
    """Philox4x32 on four uint64 arrays holding 32-bit values, overwriting them with the output.

    uint64 lanes make each 32x32->64 multiply one native numpy multiply (no mixed-type casting
    loops): about 2x faster than uint32 lanes.
    """
    c0, c1, c2, c3 = lanes
    p0 = np.empty_like(c0)
    p1 = np.empty_like(c0)
    k0, k1 = key[0] & _MASK32, key[1] & _MASK32
    for r in range(rounds):
        if r:
            k0 = (k0 + _W0) & _MASK32
            k1 = (k1 + _W1) & _MASK32
        np.multiply(c0, _M0, out=p0)
        np.multiply(c2, _M1, out=p1)
        # (c0, c1, c2, c3) <- (hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0)
        np.right_shift(p1, _S32, out=c0)
        np.bitwise_xor(c0, c1, out=c0)
        np.bitwise_xor(c0, np.uint64(k0), out=c0)
        np.bitwise_and(p1, _LOW32, out=c1)
        np.right_shift(p0, _S32, out=c2)
        np.bitwise_xor(c2, c3, out=c2)
        np.bitwise_xor(c2, np.uint64(k1), out=c2)
        np.bitwise_and(p0, _LOW32, out=c3)


class CounterRNG:
    """A seekable, seeded stream of random uint32 words (Philox4x32-10).

    ``CounterRNG(seed, stream)`` starts at word 0; every draw advances the position, so successive
    draws never reuse bits. Two generators with the same (seed, stream, position) produce the same
    words on every machine. `seek` and `position` make a run restartable.
    """

    def __init__(self, seed: int = 0, stream: int = 0) -> None:
        for name, value in (("seed", seed), ("stream", stream)):
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) \
                    or not 0 <= int(value) < 1 << 64:
                raise InvalidArgumentError(f"CounterRNG {name} must be an integer in [0, 2**64), "
                                           f"got {value!r}")
        self.seed = int(seed)
        self.stream = int(stream)
        self._key = (self.seed & _MASK32, self.seed >> 32)
        self._position = 0  # next word index
        self._lock = threading.Lock()
        # Small draws (one simulated tile write) are served from a block of pre-computed words:
        # a Philox pass costs ~100 numpy calls whatever its length, so batching amortises it.
        # Words are a pure function of their index, so the cache changes no result.
        self._cache_start = 0
        self._cache = np.empty(0, dtype=np.uint32)

    def __repr__(self) -> str:
        return f"CounterRNG(seed={self.seed}, stream={self.stream}, position={self._position})"

    @property
    def position(self) -> int:
        """Index of the next word this generator will return."""
        return self._position

    def seek(self, position: int) -> None:
        """Move to word `position` (the same position always yields the same words)."""
        if position < 0:
            raise InvalidArgumentError(f"CounterRNG position must be >= 0, got {position}")
        self._position = int(position)

    def _reserve(self, n: int) -> int:
        with self._lock:  # two threads drawing from one generator never share bits
            start = self._position
            self._position += n
        return start

    def bits32(self, n: int) -> np.ndarray:
        """The next `n` random uint32 words."""
        n = int(n)
        if n < 0:
            raise InvalidArgumentError(f"cannot draw {n} random words")
        return self.words_at(self._reserve(n), n)

    def uniform(self, n: int) -> np.ndarray:
        """The next `n` float32 values, uniform on [0, 1) with 24 random bits each."""
        words = self.bits32(n)
        return (words >> np.uint32(8)).astype(np.float32) * np.float32(2.0 ** -24)

    def words_at(self, start: int, n: int) -> np.ndarray:
        """Words ``start .. start+n-1`` of this stream, without moving the position."""
        if n > _CACHE_WORDS // 2:
            return self._compute(start, n)
        with self._lock:
            offset = start - self._cache_start
            if offset < 0 or offset + n > self._cache.size:
                self._cache_start = start - start % 4
                self._cache = self._compute(self._cache_start, _CACHE_WORDS)
                offset = start - self._cache_start
            return self._cache[offset:offset + n].copy()

    def _compute(self, start: int, n: int) -> np.ndarray:
        """Words start .. start+n-1, computed a chunk of counter blocks at a time."""
        first_block, skip = divmod(start, 4)
        blocks = (skip + n + 3) // 4
        words = np.empty((blocks, 4), dtype=np.uint32)
        stream_lo, stream_hi = self.stream & _MASK32, self.stream >> 32
        done = 0
        while done < blocks:
            block = first_block + done
            # a chunk never lets the low counter word wrap
            count = min(_BLOCKS_PER_CHUNK, blocks - done, (1 << 32) - (block & _MASK32))
            low = block & _MASK32
            lanes = [np.arange(low, low + count, dtype=np.uint64),
                     np.full(count, block >> 32, np.uint64), np.full(count, stream_lo, np.uint64),
                     np.full(count, stream_hi, np.uint64)]
            _philox_in_place(lanes, self._key, _ROUNDS)
            for lane, values in enumerate(lanes):
                words[done:done + count, lane] = values
            done += count
        return words.reshape(-1)[skip:skip + n]


# --- the process-wide generator, as the Neuron runtime has one ---------------------------------
SEED_ENV = "NEURON_RT_STOCHASTIC_ROUNDING_SEED"
_default: CounterRNG | None = None
_default_seed_text: str | None = None
_default_lock = threading.Lock()


def _seed_from_env(text: str | None) -> int:
    if text is None or text.strip() == "":
        return 0  # the runtime's documented default (frameworks/jax neuron-envvars)
    try:
        value = int(text.strip(), 0)
    except ValueError:
        raise InvalidArgumentError(f"{SEED_ENV}={text!r} is not an integer") from None
    return value & ((1 << 64) - 1)


def env_seed() -> int:
    """NEURON_RT_STOCHASTIC_ROUNDING_SEED as the runtime reads it (default 0): the seed of a
    simulated run's stochastic rounding unless the caller gives one."""
    return _seed_from_env(os.environ.get(SEED_ENV))


def default_rng() -> CounterRNG:
    """The process-wide SR generator, seeded from NEURON_RT_STOCHASTIC_ROUNDING_SEED (default 0).

    Re-created (position 0) if the environment variable changes, so a test or a user script that
    sets a new seed gets the sequence that seed defines.
    """
    global _default, _default_seed_text
    text = os.environ.get(SEED_ENV)
    with _default_lock:
        if _default is None or text != _default_seed_text:
            _default = CounterRNG(_seed_from_env(text))
            _default_seed_text = text
        return _default


def reset_default_rng() -> None:
    """Forget the process-wide generator; the next stochastic cast starts it again at word 0."""
    global _default, _default_seed_text
    with _default_lock:
        _default = None
        _default_seed_text = None
