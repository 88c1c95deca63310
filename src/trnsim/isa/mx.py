"""Microscaling (MX) on NeuronCore-v4: Matmul-MX on TensorE and Quantize-MX on VectorE.

Layout (``nki/deep-dives/mxfp-matmul.rst``, ``nki.isa.nc_matmul_mx`` / ``quantize_mx``):

- Data: x4-packed items [P, F]; each item holds four consecutive elements of the contraction
  axis, so a [P, F] tile contracts over K = 4P. A scaling group is 8 partitions x 1 item
  (32 elements) and shares one float8_e8m0fnu scale.
- Scales: one per (group of 8 partitions, item column). For data of P <= 32 partitions the scale
  tile is [P/8, F]; for P > 32 scales stay in the quadrant of their group: group g lives on
  partition 32 * (g // 4) + g % 4 of the scale tile (4 used partitions per quadrant). A scale
  access may start at partition offset 0, 4, 8 or 12 of its quadrant (packing several scale
  sets in one tile).

Timing: MX contracts K = 512 in the time BF16 contracts K = 128 (hardware.md facts 3 and
NC-v4), so MultiplyMovingMx costs the BF16 cycles of its [P, N] item tile; Quantize-MX runs at
4 elements per partition per cycle on VectorE.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from trnsim.errors import InvalidArgumentError, UnsupportedError
from trnsim.isa.access import AccessPattern, Memory
from trnsim.isa.instruction import Cost, Engine, ExecutionState, Instruction, cycles_to_ns, streaming_cost
from trnsim.isa.tensor_engine import fp32_matmul
from trnsim.numerics import cast, mx_scale, pack_x4, unpack_x4

GROUP_PARTITIONS = 8  # a scaling group spans 8 partitions ...
GROUP_ELEMENTS = 4  # ... x 4 free elements (one x4 item)
QUADRANT = 32
QUANTIZE_ELEMENTS_PER_CYCLE = 4  # Quantize-MX per partition (hardware.md, NC-v4 additions)
MX_DATA = ("float8_e4m3fn_x4", "float8_e5m2_x4", "float4_e2m1fn_x4")
MX_SCALE = ("float8_e8m0fnu", "uint8")


def scale_rows(data_partitions: int) -> np.ndarray:
    """Scale-tile partition (relative to the scale access's start) of each scaling group."""
    groups = np.arange(data_partitions // GROUP_PARTITIONS)
    if data_partitions <= QUADRANT:
        return groups
    return QUADRANT * (groups // 4) + groups % 4


def scale_partitions_needed(data_partitions: int) -> int:
    return int(scale_rows(data_partitions).max()) + 1 if data_partitions >= GROUP_PARTITIONS else 0


def _check_mx_core(instruction: Instruction, core) -> None:
    if core.version < 4:
        instruction.fail(UnsupportedError(
            f"{instruction.name} needs NeuronCore-v4 (gen4, trn3); the target is {core.name} "
            f"(gen{core.version})"))


def _check_data(instruction: Instruction, ap: AccessPattern, what: str) -> None:
    if ap.dtype.name not in MX_DATA:
        instruction.fail(InvalidArgumentError(f"{instruction.name}: {what} must be one of "
                                              f"{', '.join(MX_DATA)}; got {ap.dtype.name}"))
    if ap.partitions % QUADRANT:
        instruction.fail(InvalidArgumentError(f"{instruction.name}: {what} partition count "
                                              f"{ap.partitions} is not a multiple of 32"))


def _check_scale(instruction: Instruction, scale: AccessPattern, data: AccessPattern,
                 what: str) -> None:
    if scale.dtype.name not in MX_SCALE:
        instruction.fail(InvalidArgumentError(f"{instruction.name}: {what} must be float8_e8m0fnu "
                                              f"or uint8; got {scale.dtype.name}"))
    need = scale_partitions_needed(data.partitions)
    if scale.partitions < need or scale.free_size < data.free_size:
        instruction.fail(InvalidArgumentError(
            f"{instruction.name}: {what} {list(scale.shape)} is too small for data "
            f"{list(data.shape)}: it needs {need} partitions (groups of 8 data partitions, kept in "
            f"their quadrant) x {data.free_size} columns"))
    if scale.memory is not Memory.SBUF:
        instruction.fail(InvalidArgumentError(f"{instruction.name}: {what} must be in SBUF"))


def dequantize(state: ExecutionState, data: AccessPattern, scale: AccessPattern) -> np.ndarray:
    """[4P, F] float32: element (4p + q, f) is item (p, f)'s element q times its group's scale."""
    items = np.asarray(state.read(data)).reshape(data.partitions, -1)
    values = unpack_x4(items, data.dtype).astype(np.float32)  # [P, 4F]
    values = values.reshape(data.partitions, -1, GROUP_ELEMENTS)  # [P, F, 4]
    raw = np.asarray(state.read(scale)).reshape(scale.partitions, -1)
    exponents = raw.view(np.uint8).astype(np.int32) if raw.dtype.itemsize == 1 else raw.astype(np.int32)
    rows = exponents[scale_rows(data.partitions), :items.shape[1]]  # [P/8, F]
    factors = np.ldexp(np.float32(1.0), rows - 127).astype(np.float32)
    values = values * np.repeat(factors, GROUP_PARTITIONS, axis=0)[:, :, None]
    return np.ascontiguousarray(values.transpose(0, 2, 1)).reshape(4 * data.partitions, -1)


@dataclass(frozen=True, kw_only=True)
class LoadStationaryMx(Instruction):
    """Load an MX stationary tile (data [P, M] x4 + scales) into the PE array, dequantised."""

    OPCODE: ClassVar[str] = "LoadStationaryMx"
    ENGINES: ClassVar[tuple[Engine, ...]] = (Engine.TENSOR,)
    PIPELINE: ClassVar[str] = "load"

    src: AccessPattern
    scale: AccessPattern

    def reads(self):
        return (self.src, self.scale)

    def check(self, core) -> None:
        _check_mx_core(self, core)
        super().check(core)
        _check_data(self, self.src, "stationary")
        _check_scale(self, self.scale, self.src, "stationary_scale")
        self.limit("stationary free size", self.src.free_size, core.tensor.max_stationary_free, core)
        if self.src.free_size % 2:
            self.fail(InvalidArgumentError(f"{self.name}: stationary free size "
                                           f"{self.src.free_size} must be even"))

    def execute(self, state: ExecutionState) -> None:
        state.engine_state(Engine.TENSOR)["stationary"] = dequantize(state, self.src, self.scale)

    def cost(self, core) -> Cost:
        cycles = max(1.0, self.src.free_size / core.tensor.fast_load_stationary_divisor)
        ns = cycles_to_ns(cycles, core.tensor.clock_hz)
        return Cost(ns, ns)


@dataclass(frozen=True, kw_only=True)
class MultiplyMovingMx(Instruction):
    """dst[M, N] (+)= stationary.T @ moving over K = 4P MX elements, dequantised, fp32 inside."""

    OPCODE: ClassVar[str] = "MultiplyMovingMx"
    ENGINES: ClassVar[tuple[Engine, ...]] = (Engine.TENSOR,)
    PIPELINE: ClassVar[str] = "multiply"

    dst: AccessPattern
    moving: AccessPattern
    scale: AccessPattern
    stationary: AccessPattern  # the MX stationary tile loaded before it (checks and cost)
    accumulate: bool = False

    def reads(self):
        return (self.moving, self.scale)

    def writes(self):
        return (self.dst,)

    def check(self, core) -> None:
        _check_mx_core(self, core)
        super().check(core)
        _check_data(self, self.moving, "moving")
        _check_scale(self, self.scale, self.moving, "moving_scale")
        if self.moving.partitions != self.stationary.partitions:
            self.fail(InvalidArgumentError(
                f"{self.name}: stationary and moving partition counts differ "
                f"({self.stationary.partitions} vs {self.moving.partitions})"))
        limit = core.tensor.max_moving_free * (2 if self.dst.dtype.name == "bfloat16" else 1)
        self.limit("moving free size", self.moving.free_size, limit, core)
        m, n = self.stationary.free_size, self.moving.free_size
        if self.dst.partitions != m or self.dst.free_size != n:
            self.fail(InvalidArgumentError(f"{self.name}: PSUM destination {list(self.dst.shape)} "
                                           f"is not stationary.T @ moving = [{m}, {n}]"))
        if self.dst.dtype.name not in ("float32", "bfloat16"):
            self.fail(InvalidArgumentError(f"{self.name}: destination must be float32 or bfloat16"))

    def execute(self, state: ExecutionState) -> None:
        stationary = state.engine_state(Engine.TENSOR).get("stationary")
        moving = dequantize(state, self.moving, self.scale)
        if stationary is None or stationary.shape[0] != moving.shape[0]:
            self.fail(InvalidArgumentError(f"{self.name}: no matching MX stationary tile loaded"))
        result = fp32_matmul(stationary, moving).reshape(self.dst.shape)
        if self.accumulate:
            state.accumulate(self.dst, result)
        else:
            state.write(self.dst, result)

    def cost(self, core) -> Cost:
        t = core.tensor
        cycles = max(min(t.mm_moving_min_cycles, self.stationary.free_size), self.moving.free_size)
        busy = cycles_to_ns(cycles, t.clock_hz)
        return Cost(busy, busy + cycles_to_ns(t.mm_init_latency_cycles, t.clock_hz))

    def flops(self) -> int:
        return 2 * self.stationary.free_size * self.moving.free_size * 4 * self.moving.partitions


@dataclass(frozen=True, kw_only=True)
class QuantizeMx(Instruction):
    """dst [P, F/4] x4 + scales = MX quantisation of src [P, F] (fp16/bf16), groups of 8 x 4."""

    OPCODE: ClassVar[str] = "QuantizeMx"
    ENGINES: ClassVar[tuple[Engine, ...]] = (Engine.VECTOR,)

    dst: AccessPattern
    src: AccessPattern
    scale: AccessPattern

    def reads(self):
        return (self.src,)

    def writes(self):
        return (self.dst, self.scale)

    def check(self, core) -> None:
        _check_mx_core(self, core)
        super().check(core)
        if self.src.dtype.name not in ("bfloat16", "float16"):
            self.fail(InvalidArgumentError(f"{self.name}: src must be bfloat16 or float16; got "
                                           f"{self.src.dtype.name}"))
        if self.dst.dtype.name not in MX_DATA[:2]:
            self.fail(InvalidArgumentError(f"{self.name}: dst must be float8_e4m3fn_x4 or "
                                           f"float8_e5m2_x4; got {self.dst.dtype.name}"))
        if self.src.partitions % QUADRANT or self.src.free_size % GROUP_ELEMENTS:
            self.fail(InvalidArgumentError(
                f"{self.name}: src {list(self.src.shape)} needs a multiple of 32 partitions and of "
                f"4 free elements"))
        if self.dst.partitions != self.src.partitions or \
                self.dst.free_size * GROUP_ELEMENTS != self.src.free_size:
            self.fail(InvalidArgumentError(f"{self.name}: dst {list(self.dst.shape)} must be "
                                           f"[{self.src.partitions}, {self.src.free_size // 4}]"))
        for ap in (self.src, self.dst, self.scale):
            if ap.memory is not Memory.SBUF:
                self.fail(InvalidArgumentError(f"{self.name}: {ap.describe()} must be in SBUF"))
        _check_scale(self, self.scale, self.dst, "dst_scale")

    def execute(self, state: ExecutionState) -> None:
        p = self.src.partitions
        x = state.read_compute(self.src).reshape(p // GROUP_PARTITIONS, GROUP_PARTITIONS, -1,
                                                 GROUP_ELEMENTS)
        element = self.dst.dtype.element
        amax = np.max(np.abs(x), axis=(1, 3))  # [P/8, F/4]
        scales = mx_scale(amax, element)  # float8_e8m0fnu
        factors = np.ldexp(np.float32(1.0), scales.view(np.uint8).astype(np.int32) - 127)
        scaled = x / factors[:, None, :, None].astype(np.float32)
        values = cast(scaled.reshape(p, -1), element)
        state.write(self.dst, pack_x4(values, self.dst.dtype).reshape(self.dst.shape))
        table = np.asarray(state.read(self.scale)).reshape(self.scale.partitions, -1).copy()
        code = scales.view(np.uint8)
        table[scale_rows(p), :code.shape[1]] = code.view(table.dtype) if table.dtype.itemsize == 1 \
            else code
        state.write(self.scale, table.reshape(self.scale.shape))

    def cost(self, core) -> Cost:
        return streaming_cost(core, self.engine, self.src.free_size,
                              factor=1.0 / QUANTIZE_ELEMENTS_PER_CYCLE, accesses=3)
