"""Dynamic loops in the current API: nl.fori_loop / nl.while_loop / nl.dynamic_range run on the
device with their trip counts in registers."""

from trnsim.nki import current as nki
from trnsim.nki.current import isa as nisa
from trnsim.nki.current import language as nl


def _row(tensor, index):
    """Row `index` (a register) of a [R, C] tensor as a [1, C] view."""
    cols = tensor.shape[1]
    return tensor.ap([[cols, 1], [1, cols]], scalar_offset=index, indirect_dim=0)


@nki.jit(platform_target="trn2")
def double_first_rows(x, count):
    """out[:n] = 2 * x[:n], out[n:] = 0, with n read from the device tensor `count` [1, 1]."""
    rows, cols = x.shape
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    zeros = nl.zeros((rows, cols), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=out, src=zeros)
    n = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=n, src=count)
    bound = nisa.register_alloc()
    nisa.register_load(bound, n)
    row = nl.ndarray((1, cols), dtype=x.dtype, buffer=nl.sbuf)

    def body(i):
        nisa.dma_copy(dst=row, src=_row(x, i))
        nisa.tensor_scalar(dst=row, data=row, op0=nl.multiply, operand0=2.0)
        nisa.dma_copy(dst=_row(out, i), src=row)

    nl.fori_loop(0, bound, body)
    return out


@nki.jit(platform_target="trn2")
def exp_rows(x, step=1):
    """out[i] = exp(x[i]) for i in range(0, rows, step), a loop bounded by a constant (so a
    timing-only run knows its trip count); other rows stay zero."""
    rows, cols = x.shape
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    zeros = nl.zeros((rows, cols), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=out, src=zeros)
    row = nl.ndarray((1, cols), dtype=x.dtype, buffer=nl.sbuf)

    def body(i):
        nisa.dma_copy(dst=row, src=_row(x, i))
        nisa.activation(dst=row, op=nl.exp, data=row)
        nisa.dma_copy(dst=_row(out, i), src=row)

    nl.fori_loop(0, rows, body, step=step)
    return out


@nki.jit(platform_target="trn2")
def countdown(count):
    """acc += 3 while a device counter, loaded into the condition register, is non-zero."""
    acc = nl.zeros((1, 1), dtype=nl.float32, buffer=nl.sbuf)
    counter = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=counter, src=count)
    one = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=one, value=1)
    condition = nisa.register_alloc()
    nisa.register_load(condition, counter)

    def body(r):
        nisa.tensor_scalar(dst=acc, data=acc, op0=nl.add, operand0=3.0)
        nisa.tensor_tensor(dst=counter, data1=counter, data2=one, op=nl.subtract)
        nisa.register_load(r, counter)
        return r

    nl.while_loop(condition, body)
    out = nl.ndarray((1, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=acc)
    return out


@nki.jit(platform_target="trn2")
def triangle(n):
    """sum over i < n of sum over j < i of 1 (nested dynamic loops, the inner bound a register);
    the result is written with register_store."""
    total = nisa.register_alloc(0)
    bound = nisa.register_alloc(n)
    for i in nl.dynamic_range(bound):
        def inner(j):
            nisa.register_move(total, total + 1)
        nl.fori_loop(0, i, inner)
    out_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.register_store(out_sb, total)
    out = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=out_sb)
    return out
