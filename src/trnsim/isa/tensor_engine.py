"""TensorE: LoadStationary, MultiplyMoving and the PF-transpose.

`nc_matmul` lowers to LoadStationary (LS) then MultiplyMoving (MM) and computes
``stationary.T @ moving`` into PSUM in fp32: stationary [K<=128, M<=128], moving [K, N<=512],
result [M, N]. LS runs in the engine's load pipeline ("background LS"), so the simulator may
overlap it with the previous MM; `PIPELINE` says which pipeline an instruction uses.

Inputs are multiplied in their own dtype: bf16/fp16/fp8 products are exact in fp32, tfloat32 is
read with its mantissa rounded to 10 bits, fp32 stays fp32. Accumulation is fp32.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from trnsim.errors import InvalidArgumentError, UnsupportedError
from trnsim.isa.access import AccessPattern, Memory
from trnsim.isa.instruction import Cost, Engine, ExecutionState, Instruction, SrcToDst, cycles_to_ns
from trnsim.numerics import round_tf32

DOUBLE_ROW = "double_row"


def _tensor_input(state: ExecutionState, ap: AccessPattern) -> np.ndarray:
    values = state.read_compute(ap)
    if ap.dtype.name == "tfloat32":
        values = round_tf32(values)
    return values


def matmul_rate(core, *dtypes, perf_mode: str | None = None) -> float:
    """MACs per PE per cycle relative to BF16 for these input dtypes (slowest input wins)."""
    rates = []
    for dt in dtypes:
        precision = dt.precision or "fp32"
        if precision == "fp8":
            # The catalog's fp8 rate is the fast path: double-row on v3, MX on v4. Plain fp8 runs
            # at the bf16 rate; double_row (v3 and v4) twice that: K=256 in the time of K=128.
            fast = core.version >= 3 and perf_mode == DOUBLE_ROW
            rate = 2.0 * core.tensor.rate("bf16") if fast else core.tensor.rate("bf16")
        else:
            rate = core.tensor.rate(precision)
        if rate is None:
            raise UnsupportedError(f"TensorE on {core.name} does not multiply {dt.name}")
        rates.append(rate)
    return min(rates)


def _blas_output(out: np.ndarray | None) -> np.ndarray | None:
    """`out` if numpy's matmul would hand it to BLAS as its C matrix (a row-major 2-D float32
    view with unit column stride and a row stride of at least a row; leading dimension is the
    only difference from a fresh array, and the products are the same bits), else None: any
    other output makes numpy fall back to its own loop, which sums in another order."""
    if out is None or out.ndim != 2 or min(out.shape) < 2:
        return None
    row, col = out.strides
    if col != 4 or row % 4 or row // 4 < out.shape[1] or not out.flags.aligned:
        return None
    return out


def fp32_matmul(stationary: np.ndarray, moving: np.ndarray,
                out: np.ndarray | None = None) -> np.ndarray:
    """``stationary.T @ moving`` in fp32, bit for bit as ``np.matmul`` computes it.

    The operands are float32 already (`_tensor_input`): plain matmul takes BLAS's fast path,
    where ``dtype=`` would run numpy's slower casting loop for the same fp32 products. A
    contraction over one partition (a column times a row) is not a BLAS call in numpy but an
    element loop computing ``0 + a * b``; the outer product plus +0 is the same bits (a -0
    product becomes +0) several times faster. `out` (shape [M, N], float32): where the result
    goes, if the same bits can be computed there (`_blas_output`); the result is returned.

    One call per MultiplyMoving, of that instruction's shape: numpy's BLAS picks its kernel by
    the whole product's size, and slices of one larger product (several moving tiles side by
    side, or two stationaries) differ in the last bit from the per-tile products (30 of 36 tiles
    of ResNet-50 and BERT-large shapes, one thread, this project's machine), so batching
    instructions into fewer BLAS calls would change the numbers.
    """
    stationary = stationary.astype(np.float32, copy=False)
    moving = moving.astype(np.float32, copy=False)
    if stationary.shape[0] == 1 and stationary.shape[1] > 1 and moving.shape[1] > 1:
        result = np.multiply.outer(stationary[0], moving[0], out=out)
        result += np.float32(0.0)
        return result
    if stationary.shape[1] > 1 and moving.shape[1] > 1:
        return np.matmul(stationary.T, moving, out=_blas_output(out))
    return np.matmul(stationary.T, moving)


@dataclass(frozen=True, kw_only=True)
class LoadStationary(Instruction):
    """Load the stationary tile [K, M] into the PE array (fast LS: about M/4 cycles)."""

    OPCODE: ClassVar[str] = "LoadStationary"
    ENGINES: ClassVar[tuple[Engine, ...]] = (Engine.TENSOR,)
    PIPELINE: ClassVar[str] = "load"

    src: AccessPattern
    perf_mode: str | None = None

    def reads(self):
        return (self.src,)

    def check(self, core) -> None:
        super().check(core)
        self.limit("stationary partition (contraction) size", self.src.partitions, core.partitions, core)
        self.limit("stationary free size", self.stationary_free, core.tensor.max_stationary_free, core)
        if self.perf_mode == DOUBLE_ROW and core.version < 3:
            self.fail(UnsupportedError(f"{self.name}: matmul_perf_mode double_row needs NeuronCore-v3 "
                                       f"or newer (target is {core.name})"))

    @property
    def stationary_free(self) -> int:
        # double_row: [K, 2, M] (the two rows may be merged into one free dimension of 2M)
        return self.src.free_size // 2 if self.perf_mode == DOUBLE_ROW else self.src.free_size

    def execute(self, state: ExecutionState) -> None:
        values = _tensor_input(state, self.src)
        if self.perf_mode == DOUBLE_ROW:  # [K, 2, M] -> rows (k, r) flattened: K'=2K
            values = values.reshape(self.src.partitions * 2, -1)
        else:
            values = values.reshape(self.src.partitions, -1)
        state.engine_state(Engine.TENSOR)["stationary"] = values

    def cost(self, core) -> Cost:
        rate = matmul_rate(core, self.src.dtype, perf_mode=self.perf_mode)
        cycles = max(1.0, self.stationary_free / core.tensor.fast_load_stationary_divisor) / min(rate, 1.0)
        ns = cycles_to_ns(cycles, core.tensor.clock_hz)
        return Cost(ns, ns)


@dataclass(frozen=True, kw_only=True)
class MultiplyMoving(Instruction):
    """Stream the moving tile [K, N] through the loaded array: dst[M, N] (+)= stationary.T @ moving."""

    OPCODE: ClassVar[str] = "MultiplyMoving"
    ENGINES: ClassVar[tuple[Engine, ...]] = (Engine.TENSOR,)
    PIPELINE: ClassVar[str] = "multiply"

    dst: AccessPattern
    moving: AccessPattern
    stationary: AccessPattern  # the tile the preceding LoadStationary loaded (for checks and cost)
    accumulate: bool = False  # False: overwrite PSUM (start of an accumulation group)
    perf_mode: str | None = None
    moving_onezero: bool = False  # fp32 hint: halves the fp32 cost
    stationary_onezero: bool = False  # the same hint for the stationary (partition broadcast)

    def reads(self):
        return (self.moving,)

    def writes(self):
        return (self.dst,)

    @property
    def m(self) -> int:
        return self.stationary.free_size // (2 if self.perf_mode == DOUBLE_ROW else 1)

    @property
    def n(self) -> int:
        return self.moving.free_size // (2 if self.perf_mode == DOUBLE_ROW else 1)

    @property
    def k(self) -> int:
        return self.moving.partitions * (2 if self.perf_mode == DOUBLE_ROW else 1)

    def check(self, core) -> None:
        super().check(core)
        if self.moving.partitions != self.stationary.partitions:
            self.fail(InvalidArgumentError(
                f"{self.name}: stationary and moving must have the same partition (contraction) "
                f"size; got {self.stationary.partitions} and {self.moving.partitions}"))
        self.limit("moving free size", self.n, core.tensor.max_moving_free, core)
        if self.dst.partitions != self.m or self.dst.free_size != self.n:
            self.fail(InvalidArgumentError(
                f"{self.name}: PSUM destination shape {list(self.dst.shape)} does not match "
                f"stationary.T @ moving = [{self.m}, {self.n}]"))
        if self.dst.dtype.name != "float32" and not (core.version >= 4 and self.dst.dtype.name == "bfloat16"):
            self.fail(UnsupportedError(f"{self.name}: matmul accumulates in float32 PSUM; destination "
                                       f"dtype {self.dst.dtype.name} is not supported on {core.name}"))
        bank = core.psum_bank_bytes_per_partition
        low, high = self.dst.byte_span()
        if core.version < 4 and low // bank != (high - 1) // bank:
            self.fail(InvalidArgumentError(
                f"{self.name}: PSUM destination bytes [{low}, {high}) cross a {bank}-byte bank "
                f"boundary; a matmul writes one PSUM bank (at most {bank // 4} fp32 per partition)"))

    def execute(self, state: ExecutionState) -> None:
        stationary = state.engine_state(Engine.TENSOR).get("stationary")
        if stationary is None:
            self.fail(InvalidArgumentError(f"{self.name}: no stationary tile loaded before MultiplyMoving"))
        moving = _tensor_input(state, self.moving).reshape(self.k, -1)
        if stationary.shape[0] != moving.shape[0]:
            self.fail(InvalidArgumentError(f"{self.name}: loaded stationary has K={stationary.shape[0]}, "
                                           f"moving has K={moving.shape[0]}"))
        if self.accumulate:
            state.accumulate(self.dst, fp32_matmul(stationary, moving).reshape(self.dst.shape))
            return
        out = state.fp32_out(self.dst, (stationary.shape[1], moving.shape[1]))
        result = fp32_matmul(stationary, moving, out)
        if result is not out:
            state.write(self.dst, result.reshape(self.dst.shape))

    def cost(self, core) -> Cost:
        rate = matmul_rate(core, self.stationary.dtype, self.moving.dtype, perf_mode=self.perf_mode)
        # nc_matmul's is_{stationary,moving}_onezero: "2x better performance if [that] tile is in
        # float32; no impact for non-float32" (nki/api/nki/isa nc_matmul)
        hinted = ((self.moving_onezero and self.moving.dtype.name == "float32")
                  or (self.stationary_onezero and self.stationary.dtype.name == "float32"))
        if rate < 1.0 and hinted:
            rate *= 2.0
        t = core.tensor
        cycles = max(min(t.mm_moving_min_cycles, self.m), self.n) / min(rate, 1.0)
        busy = cycles_to_ns(cycles, t.clock_hz)
        return Cost(busy, busy + cycles_to_ns(t.mm_init_latency_cycles, t.clock_hz))

    def flops(self) -> int:
        return 2 * self.m * self.n * self.k


def identity_matmul_transpose(values: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``values.T @ eye(P)`` in fp32, as NeuronCore-v2's TensorE transposes, without the matmul.

    Output (f, p) sums ``values[q, f] * (q == p)`` over q from a +0 accumulator: it is
    ``values[p, f] + 0`` (so -0 becomes +0), unless another element of column f is Inf or NaN
    (``Inf * 0`` is NaN) or values[p, f] is NaN, which make it NaN. `out` (float32 [F, P]):
    where the result goes (elementwise, so the same bits in any layout); it is returned.
    """
    values = values.astype(np.float32, copy=False)
    bad = ~np.isfinite(values)  # before the add: `out` may overlap `values`
    others = bad.sum(axis=0)[:, None] - bad.T if bad.any() else None  # others in column f
    result = np.add(values.T, np.float32(0.0), out=out)
    if others is not None:
        result[others > 0] = np.nan
    return result


@dataclass(frozen=True, kw_only=True)
class TensorTranspose(SrcToDst):
    """PF-transpose of src [P, F] into PSUM dst [F, P] on TensorE.

    NeuronCore-v2 does it as a matmul with an identity moving tile, so an Inf or NaN in a column
    of src turns that whole output row into NaN (0 * Inf); v3+ has a bit-exact transpose mode.
    """

    OPCODE: ClassVar[str] = "Transpose"
    ENGINES: ClassVar[tuple[Engine, ...]] = (Engine.TENSOR,)
    PIPELINE: ClassVar[str] = "multiply"


    def check(self, core) -> None:
        super().check(core)
        p, f = self.src.partitions, self.src.free_size
        self.limit("transpose free size", f, core.tensor.max_stationary_free, core)
        if self.dst.partitions != f or self.dst.free_size != p:
            self.fail(InvalidArgumentError(f"{self.name}: destination shape {list(self.dst.shape)} "
                                           f"is not the transpose [{f}, {p}] of the source"))
        if self.dst.memory is not Memory.PSUM:
            self.fail(InvalidArgumentError(f"{self.name}: TensorE transposes into PSUM"))

    def execute(self, state: ExecutionState) -> None:
        if state.core.version >= 3 and self.dst.dtype.itemsize == self.src.dtype.itemsize:
            src = state.read(self.src).reshape(self.src.partitions, -1)
            state.write(self.dst, src.T.reshape(self.dst.shape))  # transpose mode: bit exact
            return
        values = state.read_compute(self.src).reshape(self.src.partitions, -1)
        out = state.fp32_out(self.dst, values.shape[::-1])
        result = identity_matmul_transpose(values, out)
        if out is None:
            state.write(self.dst, result.reshape(self.dst.shape))

    def cost(self, core) -> Cost:
        p, f = self.src.partitions, self.src.free_size
        factor = 2.0 if self.src.dtype.itemsize == 4 else 1.0  # fp32: onezero hint / transpose mode
        t = core.tensor
        cycles = max(p, min(t.mm_moving_min_cycles, f)) * factor
        cycles += f / t.fast_load_stationary_divisor  # its LoadStationary of src
        busy = cycles_to_ns(cycles, t.clock_hz)
        return Cost(busy, busy + cycles_to_ns(t.mm_init_latency_cycles, t.clock_hz))
