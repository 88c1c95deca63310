"""A Mamba-style selective scan and a top-k, exercising tensor_tensor_scan and max8/find_index8.

Selective scan over time t for channels c (partitions) and state n:
h[c, n, t] = exp(delta[c, t] * A[c, n]) * h[c, n, t-1] + delta[c, t] * B[n, t] * x[c, t]
y[c, t] = sum_n C[n, t] * h[c, n, t]
"""

import numpy as np

from trnsim import nki
from trnsim.nki import isa as nisa
from trnsim.nki import language as nl


@nki.jit
def selective_scan(x, delta, A, B, C):
    channels, steps = x.shape
    n_state = A.shape[1]
    out = nl.ndarray((channels, steps), dtype=x.dtype, buffer=nl.shared_hbm)
    xt, dt, a = nl.load(x), nl.load(delta), nl.load(A)
    dx = nl.multiply(dt, xt, dtype=nl.float32)
    y = nl.zeros((channels, steps), dtype=nl.float32, buffer=nl.sbuf)
    for n in nl.sequential_range(n_state):
        decay = nisa.activation(op=nl.exp, data=dt, scale=a[:, n:n + 1], dtype=nl.float32)
        b_row = nl.broadcast_to(nl.load(B[n:n + 1, :]), shape=(channels, steps))
        c_row = nl.broadcast_to(nl.load(C[n:n + 1, :]), shape=(channels, steps))
        drive = nl.multiply(dx, b_row, dtype=nl.float32)
        state = nisa.tensor_tensor_scan(decay, drive, 0.0, np.multiply, np.add, dtype=nl.float32)
        y[...] = nl.add(y, nl.multiply(state, c_row, dtype=nl.float32))
    nl.store(out, value=nl.copy(y, dtype=x.dtype))
    return out


def selective_scan_reference(x, delta, A, B, C):
    x, delta, A, B, C = (t.astype(np.float64) for t in (x, delta, A, B, C))
    channels, steps = x.shape
    h = np.zeros((channels, A.shape[1]))
    y = np.zeros((channels, steps))
    for t in range(steps):
        h = np.exp(delta[:, t:t + 1] * A) * h + (delta[:, t] * x[:, t])[:, None] * B[None, :, t]
        y[:, t] = h @ C[:, t]
    return y


@nki.jit
def topk16(x):
    """The 16 largest values per row and their indices: max8, find_index8, match_replace8, max8."""
    rows, _cols = x.shape
    values = nl.ndarray((rows, 16), dtype=x.dtype, buffer=nl.shared_hbm)
    indices = nl.ndarray((rows, 16), dtype=nl.uint32, buffer=nl.shared_hbm)
    data = nl.load(x)
    top = nl.ndarray((rows, 16), dtype=x.dtype, buffer=nl.sbuf)
    idx = nl.ndarray((rows, 16), dtype=nl.uint32, buffer=nl.sbuf)
    top[:, 0:8] = nisa.max8(src=data)
    idx[:, 0:8] = nisa.nc_find_index8(data=data, vals=top[:, 0:8])
    rest = nisa.nc_match_replace8(data=data, vals=top[:, 0:8], imm=-1e30)
    top[:, 8:16] = nisa.max8(src=rest)
    idx[:, 8:16] = nisa.nc_find_index8(data=data, vals=top[:, 8:16])
    nl.store(values, value=top)
    nl.store(indices, value=idx)
    return values, indices
