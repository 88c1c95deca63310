"""MXFP8 matmul on NeuronCore-v4: quantize both operands on VectorE, multiply on TensorE.

Inputs are bf16 tiles already in the MX "interleaved" layout: element (4p + q, f) of the logical
[K, F] matrix sits at SBUF (p, 4f + q), so one x4 item holds four K-elements. K = 1024 is two
[128, *] x4 tiles accumulated in PSUM.
"""

import numpy as np

from trnsim.nki import current as nki
from trnsim.nki.current import isa as nisa
from trnsim.nki.current import language as nl
from trnsim.numerics import cast, mx_scale


def interleave(matrix: np.ndarray) -> np.ndarray:
    """[K, F] -> [K/4, 4F]: the four K-elements of an x4 item side by side."""
    k, f = matrix.shape
    return matrix.reshape(k // 4, 4, f).transpose(0, 2, 1).reshape(k // 4, 4 * f)


def quantize_reference(tile: np.ndarray, element: str = "float8_e4m3fn") -> np.ndarray:
    """What quantize_mx keeps of an interleaved [P, 4F] tile (dequantised, float32)."""
    p, f = tile.shape
    groups = tile.astype(np.float32).reshape(p // 8, 8, f // 4, 4)
    scale = mx_scale(np.abs(groups).max(axis=(1, 3)), element).view(np.uint8).astype(np.int32)
    factor = np.ldexp(1.0, scale - 127)[:, None, :, None]
    return (cast(groups / factor, element).astype(np.float32) * factor).reshape(p, f)


def reference(stationary: np.ndarray, moving: np.ndarray) -> np.ndarray:
    """A.T @ B over the dequantised operands ([K, M] and [K, N] logical matrices)."""
    def logical(tiles):
        return np.concatenate([quantize_reference(t).reshape(128, -1, 4).transpose(0, 2, 1)
                               .reshape(512, -1) for t in np.split(tiles, tiles.shape[0] // 128)])
    return logical(stationary).T @ logical(moving)


@nki.jit(platform_target="trn3")
def mxfp8_matmul(stationary, moving):
    """stationary [K/4, 4M] and moving [K/4, 4N] bf16 (interleaved), K/4 a multiple of 128."""
    rows, four_m = stationary.shape
    _, four_n = moving.shape
    m, n = four_m // 4, four_n // 4
    acc = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.psum)
    for k in range(rows // 128):
        s_bf = nl.ndarray((128, four_m), dtype=nl.bfloat16, buffer=nl.sbuf)
        m_bf = nl.ndarray((128, four_n), dtype=nl.bfloat16, buffer=nl.sbuf)
        nisa.dma_copy(dst=s_bf, src=stationary[k * 128:(k + 1) * 128, :])
        nisa.dma_copy(dst=m_bf, src=moving[k * 128:(k + 1) * 128, :])
        s_q = nl.ndarray((128, m), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
        s_scale = nl.ndarray((128, m), dtype=nl.float8_e8m0fnu, buffer=nl.sbuf)
        m_q = nl.ndarray((128, n), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
        m_scale = nl.ndarray((128, n), dtype=nl.float8_e8m0fnu, buffer=nl.sbuf)
        nisa.quantize_mx(dst=s_q, src=s_bf, dst_scale=s_scale)
        nisa.quantize_mx(dst=m_q, src=m_bf, dst_scale=m_scale)
        nisa.nc_matmul_mx(dst=acc, stationary=s_q, moving=m_q, stationary_scale=s_scale,
                          moving_scale=m_scale)
    result = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=result, src=acc)
    out = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=result)
    return out


@nki.jit(platform_target="trn3")
def bf16_matmul(lhsT, rhs):
    """The same product in bf16 (for the speed comparison): K tiles of 128."""
    k_total, m = lhsT.shape
    _, n = rhs.shape
    acc = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.psum)
    for k in range(k_total // 128):
        a = nl.load(lhsT[k * 128:(k + 1) * 128, :])
        b = nl.load(rhs[k * 128:(k + 1) * 128, :])
        nisa.nc_matmul(dst=acc, stationary=a, moving=b)
    result = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=result, src=acc)
    out = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=result)
    return out
