"""Kernels that use several NeuronCores: LNC=2 pairs (sendrecv, core_barrier) and collectives."""

from trnsim.nki import current as nki
from trnsim.nki.current import collectives as ncc
from trnsim.nki.current import isa as nisa
from trnsim.nki.current import language as nl


@nki.jit(platform_target="trn2")
def split_sum_sendrecv(x):
    """Row sums of x [2 * 128, C]: each core of the pair sums its half of the rows (sum over
    columns), then the cores swap partial results with sendrecv and add them; core 0 stores
    half0 + half1 (a [128, 1] per-row sum of x[:128] + x[128:])."""
    rows, cols = x.shape
    half = rows // 2
    pid = nl.program_id(0)
    peer = 1 - pid
    out = nl.ndarray((half, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    tile = nl.ndarray((half, cols), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=x[pid * half:(pid + 1) * half, :])
    mine = nl.ndarray((half, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=mine, op=nl.add, data=tile, axis=1)
    theirs = nl.ndarray((half, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.sendrecv(src=mine, dst=theirs, send_to_rank=peer, recv_from_rank=peer, pipe_id=0)
    total = nl.ndarray((half, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=total, data1=mine, data2=theirs, op=nl.add)
    if pid == 0:
        nisa.dma_copy(dst=out, src=total)
    return out


@nki.jit(platform_target="trn2")
def exchange_halves(x):
    """Each core exponentiates its half of x into a shared HBM tensor, waits on a core barrier,
    then copies the *other* core's half to the output: right only if the barrier orders them."""
    rows, cols = x.shape
    half = rows // 2
    pid = nl.program_id(0)
    other = 1 - pid
    shared = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm, name="shared")
    out = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((half, cols), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[pid * half:(pid + 1) * half, :])
    nisa.activation(dst=t, op=nl.exp, data=t)
    nisa.dma_copy(dst=shared[pid * half:(pid + 1) * half, :], src=t)
    nisa.core_barrier(data=shared, cores=(0, 1))
    u = nl.ndarray((half, cols), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=u, src=shared[other * half:(other + 1) * half, :])
    nisa.dma_copy(dst=out[other * half:(other + 1) * half, :], src=u)
    return out


@nki.jit(platform_target="trn2")
def all_reduce(x, group):
    """out = the sum of x over the ranks of `group` (HBM to HBM)."""
    src = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm, name="src")
    dst = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm, name="dst")
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=src, src=x)
    ncc.all_reduce(srcs=[src], dsts=[dst], replica_group=group, op=nl.add)
    nisa.dma_copy(dst=out, src=dst)
    return out


@nki.jit(platform_target="trn2")
def gather_scatter(x, group, ranks):
    """all_gather along dim 1 of SBUF tiles, reduce_scatter along dim 0, all_to_all in HBM."""
    rows, cols = x.shape
    t = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    wide = nl.ndarray((rows, cols * ranks), dtype=x.dtype, buffer=nl.sbuf)
    ncc.all_gather(srcs=[t], dsts=[wide], replica_group=group, collective_dim=1)
    gathered = nl.ndarray((rows, cols * ranks), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=gathered, src=wide)
    src = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm, name="src")
    nisa.dma_copy(dst=src, src=x)
    scattered = nl.ndarray((rows // ranks, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    ncc.reduce_scatter(srcs=[src], dsts=[scattered], replica_group=group, collective_dim=0, op=nl.add)
    swapped = nl.ndarray((rows, cols), dtype=x.dtype, buffer=nl.shared_hbm)
    ncc.all_to_all(srcs=[src], dsts=[swapped], replica_group=group, collective_dim=0)
    return gathered, scattered, swapped


@nki.jit(platform_target="trn2")
def rotate(x, ranks):
    """collective_permute: rank r sends its x to rank r + 1 (mod ranks)."""
    src = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm, name="src")
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=src, src=x)
    ncc.collective_permute(srcs=[src], dsts=[out],
                           source_target_pairs=[(r, (r + 1) % ranks) for r in range(ranks)])
    return out


@nki.jit(platform_target="trn2")
def my_slice(table):
    """Rank r copies table[r] (rank_id as a register scalar offset)."""
    _, h, w = table.shape
    out = nl.ndarray((h, w), dtype=table.dtype, buffer=nl.shared_hbm)
    rank = ncc.rank_id()
    nisa.dma_copy(dst=out, src=table.ap([[w, h], [1, w]], scalar_offset=rank, indirect_dim=0))
    return out
