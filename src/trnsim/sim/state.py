"""`CoreState`: the `trnsim.isa.ExecutionState` an instruction's semantics run against.

Reads are strided numpy views of the byte-addressed memories (read-only, so an instruction that
modified an input in place would fail loudly); writes cast with the process rounding
(RNE, or stochastic if NEURON_RT_STOCHASTIC_ROUNDING_EN is set when the run starts) straight into
the destination view; PSUM accumulation adds in fp32 in place. Nothing copies a whole buffer.

Randomness is per run and per core: stochastic rounding and `random_uniform` draw from
`CounterRNG(seed, stream)` with streams 2*core and 2*core+1, so the same program, inputs and seed
give the same bits on every machine and in every run.
"""

from __future__ import annotations

import numpy as np

from trnsim.errors import InvalidArgumentError
from trnsim.isa import AccessPattern, Engine, Memory
from trnsim.numerics import CounterRNG, cast, default_rounding, store_rne, to_compute, widen_f32
from trnsim.sim.memory import HbmSpace, MemoryViews, on_chip_memory, release


class CoreState:
    """Memories, per-engine scratch state and random streams of one simulated NeuronCore."""

    def __init__(self, core, hbm: HbmSpace, hbm_keys: dict[str, str], *, seed: int = 0,
                 core_index: int = 0) -> None:
        self.core = core
        self.sbuf = on_chip_memory(Memory.SBUF, core.partitions, core.sbuf_bytes_per_partition)
        self.psum = on_chip_memory(Memory.PSUM, core.partitions, core.psum_bytes_per_partition)
        self.hbm = hbm
        self._hbm_keys = hbm_keys  # program tensor name -> chip HBM key (shared tensors alias)
        self._engines: dict[Engine, dict] = {}
        self.rounding = default_rounding() if core.version >= 2 else "rne"
        self._sr_rng = CounterRNG(seed, 2 * core_index + 1)
        self._rng = CounterRNG(seed, 2 * core_index)

    # --- the ExecutionState protocol -----------------------------------------------------------
    # Every instruction reads and writes through these, ~10^4 times per model call: SBUF and
    # PSUM views come straight from their memory's cache (`_pair`), and the common cases skip
    # the general conversions (`to_compute`, `cast`) where those would return their input.
    def read(self, ap: AccessPattern) -> np.ndarray:
        return self._pair(ap)[1]

    def read_compute(self, ap: AccessPattern) -> np.ndarray:
        view = self._pair(ap)[1]
        if ap.dtype.element is not None:  # x4 storage: `to_compute` unpacks
            return to_compute(view, ap.dtype)
        return view if view.dtype == np.float32 else widen_f32(view)  # strided: bits first

    def _writable(self, ap: AccessPattern) -> np.ndarray:
        view = self._pair(ap)[0]
        if ap.memory is Memory.HBM and not view.flags.writeable:
            raise InvalidArgumentError(f"{ap.describe()} is a constant (weights and other data "
                                       f"the program was built with); instructions cannot write it")
        return view

    def write(self, ap: AccessPattern, values) -> None:
        view = self._writable(ap)
        dt = ap.dtype
        array = values if isinstance(values, np.ndarray) else np.asarray(values)
        # fp32 -> bf16 under RNE: stored straight into the view (`store_rne`), no temporary
        direct = array.dtype == np.float32 and dt.name == "bfloat16" and self.rounding == "rne"
        if not direct and (array.dtype != view.dtype or dt.name == "tfloat32"):
            array = cast(array, dt, rounding=self.rounding,
                         rng=self._sr_rng if self.rounding == "stochastic" else None)
        try:
            if direct:
                store_rne(view, array)
            else:
                view[...] = array
        except ValueError:
            raise InvalidArgumentError(f"cannot store a result of shape {list(array.shape)} into "
                                       f"{ap.describe()} (shape {list(ap.shape)})") from None

    def fp32_out(self, ap: AccessPattern, shape: tuple[int, ...]) -> np.ndarray | None:
        """`ap`'s writable view as `shape` when `ap` stores float32 (not tfloat32) and the view
        takes that shape without a copy, else None. `write` stores float32 values into such a
        destination unchanged, so computing into it with numpy's ``out=`` gives the same bits
        without the temporary and its copy."""
        if ap.dtype.name != "float32":
            return None
        view = self._writable(ap).view()
        try:
            view.shape = shape  # raises where only a copy would have that shape
        except (AttributeError, ValueError):
            return None
        return view

    def accumulate(self, ap: AccessPattern, values) -> None:
        view = self._writable(ap)
        if ap.dtype.name == "float32":
            try:
                np.add(view, values, out=view, dtype=np.float32)
            except ValueError:
                raise InvalidArgumentError(
                    f"cannot accumulate a result of shape {list(np.shape(values))} into "
                    f"{ap.describe()} (shape {list(ap.shape)})") from None
            return
        # NeuronCore-v4 BF16 accumulation: fp32 add, then the cast of the write.
        self.write(ap, to_compute(view, ap.dtype) + np.asarray(values, dtype=np.float32))

    def engine_state(self, engine: Engine) -> dict:
        scratch = self._engines.get(engine)
        if scratch is None:
            scratch = self._engines[engine] = {}
        return scratch

    def random_uniform(self, shape: tuple[int, ...]) -> np.ndarray:
        count = int(np.prod(shape, dtype=np.int64))
        return self._rng.uniform(count).reshape(shape)

    def release(self) -> None:
        """The run is over: its SBUF and PSUM may serve later runs (`trnsim.sim.memory.release`).
        The state is unusable after."""
        self._engines.clear()  # engine scratch may hold views of SBUF
        sbuf, psum = self.sbuf, self.psum
        self.sbuf = self.psum = None
        release(sbuf)
        release(psum)

    # --- helpers -------------------------------------------------------------------------------
    def _pair(self, ap: AccessPattern) -> tuple[np.ndarray, np.ndarray]:
        """(writable, read-only) views of `ap` (`MemoryViews.views`), cached ones found first."""
        memory = ap.memory
        if memory is Memory.SBUF:
            views = self.sbuf
        elif memory is Memory.PSUM:
            views = self.psum
        else:
            views = self._memory(ap)
        found = views.cached.get(ap)
        return found if found is not None else views.views(ap)

    def _memory(self, ap: AccessPattern) -> MemoryViews:
        memory = ap.memory
        if memory is Memory.SBUF:
            return self.sbuf
        if memory is Memory.PSUM:
            return self.psum
        key = self._hbm_keys.get(ap.tensor)
        if key is None:
            raise InvalidArgumentError(f"unknown HBM tensor {ap.tensor!r} in {ap.describe()}; "
                                       f"declared: {', '.join(sorted(self._hbm_keys)) or 'none'}")
        return self.hbm.tensor(key)
