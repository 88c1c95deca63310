"""A kernel that loads its inputs into SBUF, lets a body write one SBUF result, and returns it.

Used by the per-instruction table: each case is a body (nisa calls on SBUF tensors), inputs and a
numpy reference, run on every target the instruction exists on.
"""

from trnsim.nki import current as nki
from trnsim.nki.current import isa as nisa
from trnsim.nki.current import language as nl


def _load(x):
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    return t


def _finish(result, out_shape, out_dtype):
    out = nl.ndarray(out_shape, dtype=out_dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=result)
    return out


def apply(body, arity: int, out_shape, out_dtype="float32"):
    """A kernel of `arity` HBM inputs running body(out_sbuf, *input_sbuf_tiles)."""

    def run_body(*inputs):
        result = nl.ndarray(out_shape, dtype=out_dtype, buffer=nl.sbuf)
        body(result, *[_load(x) for x in inputs])
        return _finish(result, out_shape, out_dtype)

    def one(a):
        return run_body(a)

    def two(a, b):
        return run_body(a, b)

    def three(a, b, c):
        return run_body(a, b, c)

    return {1: one, 2: two, 3: three}[arity]


def run(body, inputs, out_shape, out_dtype="float32", target="trn2"):
    kernel = nki.jit(apply(body, len(inputs), out_shape, out_dtype), platform_target=target)
    return kernel(*inputs), kernel
