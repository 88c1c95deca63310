"""One algorithm written twice, in the legacy (neuronxcc.nki) and the current (nki) API.

A tiled matmul with PSUM accumulation over K followed by a row softmax of the product: loads,
matmuls, evictions, reductions, activations, stores, in the same order in both, so the two front
ends must emit the same instructions to the same addresses (same outputs, same timeline).
"""

from trnsim import nki as legacy_nki
from trnsim.nki import current as nki
from trnsim.nki import isa as legacy_isa
from trnsim.nki import language as legacy_nl
from trnsim.nki.current import isa as nisa
from trnsim.nki.current import language as nl

TK, TN = 128, 512


@legacy_nki.jit
def matmul_softmax_legacy(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    out = legacy_nl.ndarray((M, N), dtype=legacy_nl.float32, buffer=legacy_nl.shared_hbm)
    acc = legacy_nl.zeros((M, N), legacy_nl.float32, buffer=legacy_nl.psum)
    for k in legacy_nl.affine_range(K // TK):
        a = legacy_nl.load(lhsT[k * TK:(k + 1) * TK, :])
        b = legacy_nl.load(rhs[k * TK:(k + 1) * TK, :])
        acc += legacy_isa.nc_matmul(a, b)
    scores = legacy_isa.tensor_copy(acc)
    neg_max = legacy_isa.tensor_reduce(legacy_nl.max, scores, axis=(1,), negate=True, keepdims=True)
    sums = legacy_nl.ndarray((M, 1), dtype=legacy_nl.float32, buffer=legacy_nl.sbuf)
    exps = legacy_isa.activation(op=legacy_nl.exp, data=scores, bias=neg_max, reduce_op=legacy_nl.add,
                                 reduce_res=sums, reduce_cmd=legacy_isa.reduce_cmd.reset_reduce)
    inv = legacy_isa.reciprocal(sums)
    legacy_nl.store(out, value=legacy_isa.tensor_scalar(exps, legacy_nl.multiply, inv))
    return out


@nki.jit
def matmul_softmax_current(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
    for k in nl.affine_range(K // TK):
        a = nl.ndarray((TK, M), dtype=lhsT.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=lhsT[k * TK:(k + 1) * TK, :])
        b = nl.ndarray((TK, N), dtype=rhs.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=b, src=rhs[k * TK:(k + 1) * TK, :])
        nisa.nc_matmul(dst=acc, stationary=a, moving=b)
    scores = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=scores, src=acc)
    neg_max = nl.ndarray((M, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=neg_max, op=nl.max, data=scores, axis=(1,), negate=True)
    sums = nl.ndarray((M, 1), dtype=nl.float32, buffer=nl.sbuf)
    exps = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=exps, op=nl.exp, data=scores, bias=neg_max, reduce_op=nl.add,
                    reduce_res=sums, reduce_cmd=nisa.reduce_cmd.reset_reduce)
    inv = nl.ndarray((M, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.reciprocal(dst=inv, data=sums)
    result = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=result, data=exps, op0=nl.multiply, operand0=inv)
    nisa.dma_copy(dst=out, src=result)
    return out
