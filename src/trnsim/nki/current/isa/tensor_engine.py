"""Destination-first TensorE instructions: nc_matmul (+ accumulate, double_row, transpose mode),
nc_matmul_mx and quantize_mx (NeuronCore-v4)."""

from __future__ import annotations

from trnsim.errors import InvalidArgumentError
from trnsim.isa import LoadStationaryMx, Memory, MultiplyMovingMx, QuantizeMx
from trnsim.nki.api_boundary import require_version
from trnsim.nki.current.isa.calls import dst_arg, nisa_call, src_arg
from trnsim.nki.isa import lowering
from trnsim.nki.trace import current_trace


def _perf_mode(perf_mode) -> str | None:
    value = getattr(perf_mode, "value", perf_mode)
    return None if value in (None, "none", 0) else "double_row"


def _check_tiling(stationary, tile_position, tile_size, call: str) -> None:
    """PE tiling (row/column tiles of 32/64/128) is accepted and checked; trnsim runs a tiled
    matmul like a full-array one (no concurrent tiles are modelled)."""
    if not tile_position and not tile_size:
        return
    if not tile_position or not tile_size:
        raise InvalidArgumentError(f"{call}: tile_position and tile_size must be set together")
    rows, cols = (int(v) for v in tile_size)
    start_row, start_col = (int(v) for v in tile_position)
    for size, start, what in ((rows, start_row, "row"), (cols, start_col, "column")):
        if size not in (32, 64, 128) or start % size or start + size > 128:
            raise InvalidArgumentError(f"{call}: {what} tile of {size} at {start} (sizes 32/64/128, "
                                       f"start a multiple of the size within 128)")
    if stationary.shape[0] > rows or stationary.size // stationary.shape[0] > cols:
        raise InvalidArgumentError(f"{call}: stationary {list(stationary.shape)} does not fit the "
                                   f"{rows}x{cols} PE tile")


def _accumulate(dst, accumulate) -> bool:
    if accumulate is None:  # auto: continue an open accumulation group, else start one
        return current_trace().psum_accumulating(dst.access())
    return bool(accumulate)


@nisa_call("nisa.nc_matmul")
def nc_matmul(dst, stationary, moving, is_stationary_onezero=False, is_moving_onezero=False,
              is_transpose=False, accumulate=None, tile_position=(), tile_size=(), perf_mode=None,
              name=None):
    target, st = dst_arg(dst), src_arg(stationary, "stationary")
    mv = src_arg(moving, "moving")
    _check_tiling(st, tile_position, tile_size, "nisa.nc_matmul")
    if is_transpose:
        lowering.transpose(target, st, "tensor")
        return
    if target._storage.memory is not Memory.PSUM:
        raise InvalidArgumentError("nisa.nc_matmul writes PSUM: dst must be an nl.psum tensor")
    mode = _perf_mode(perf_mode)
    if mode is not None:
        require_version(current_trace().core, 3, "nisa.nc_matmul(perf_mode=double_row)")
    lowering.matmul(target, st, mv, accumulate=_accumulate(target, accumulate), perf_mode=mode,
                    moving_onezero=is_moving_onezero, stationary_onezero=is_stationary_onezero)


@nisa_call("nisa.nc_matmul_mx")
def nc_matmul_mx(dst, stationary, moving, stationary_scale, moving_scale, tile_position=None,
                 tile_size=None, accumulate=None, name=None):
    trace = current_trace()
    require_version(trace.core, 4, "nisa.nc_matmul_mx")
    target, st = dst_arg(dst), src_arg(stationary, "stationary")
    mv = src_arg(moving, "moving")
    s_scale, m_scale = src_arg(stationary_scale, "stationary_scale"), src_arg(moving_scale,
                                                                               "moving_scale")
    _check_tiling(st, tile_position, tile_size, "nisa.nc_matmul_mx")
    st_ap = st.access()
    trace.emit_now(LoadStationaryMx, src=st_ap, scale=s_scale.access())
    trace.emit_now(MultiplyMovingMx, dst=target.access(), moving=mv.access(), scale=m_scale.access(),
                   stationary=st_ap, accumulate=_accumulate(target, accumulate))


@nisa_call("nisa.quantize_mx")
def quantize_mx(dst, src, dst_scale, name=None):
    trace = current_trace()
    require_version(trace.core, 4, "nisa.quantize_mx")
    trace.emit_now(QuantizeMx, dst=dst_arg(dst).access(), src=src_arg(src, "src").access(),
                   scale=dst_arg(dst_scale, "dst_scale").access())
