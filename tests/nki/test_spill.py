"""SBUF spill and reload (trnsim.nki.spill): kernels whose live tiles exceed SBUF run, with the
spill traffic timed as DMAs, instead of stopping at the allocation limit."""

import numpy as np
import pytest

from trnsim.errors import LimitExceededError
from trnsim.nki import jit as legacy_jit
from trnsim.nki import language as legacy_nl
from trnsim.nki.current import Kernel as CurrentKernel
from trnsim.nki.current import isa as nisa
from trnsim.nki.current import language as nl

FREE = 8192  # a [128, 8192] fp32 tile takes 32 KiB of each partition
TILES = 8  # 256 KiB live at once: more than any core's usable SBUF (176 / 208 / 240 KiB)


def _current_sum_of_all():
    """Load TILES tiles, keep every one live, then add them up: some must leave SBUF."""
    def kernel(x):
        out = nl.ndarray((128, FREE), dtype=x.dtype, buffer=nl.shared_hbm)
        tiles = []
        for i in range(TILES):
            t = nl.ndarray((128, FREE), dtype=x.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x[i])
            tiles.append(t)
        total = nl.ndarray((128, FREE), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=total, src=tiles[0])
        for t in tiles[1:]:
            nisa.tensor_tensor(dst=total, data1=total, data2=t, op=nl.add)
        nisa.dma_copy(dst=out, src=total)
        return out

    return kernel


def _legacy_sum_of_all():
    @legacy_jit
    def kernel(x):
        out = legacy_nl.ndarray((128, FREE), dtype=x.dtype, buffer=legacy_nl.shared_hbm)
        tiles = [legacy_nl.load(x[i]) for i in range(TILES)]
        total = tiles[0]
        for t in tiles[1:]:
            total = legacy_nl.add(total, t)
        legacy_nl.store(out, value=total)
        return out

    return kernel


def _expected(x):
    total = x[0].copy()
    for i in range(1, TILES):
        total = total + x[i]  # fp32 adds in the kernel's order: bit-exact
    return total


@pytest.mark.parametrize("target", ["trn1", "trn2", "trn3"])
def test_current_api_kernel_spills_and_reloads_with_exact_results(rng, target):
    x = rng.standard_normal((TILES, 128, FREE)).astype(np.float32)
    kernel = CurrentKernel(_current_sum_of_all(), platform_target=target)
    np.testing.assert_array_equal(kernel(x), _expected(x))
    records = kernel.last_run.results[0].profile.records
    spills = [r for r in records if r.label == "spill"]
    reloads = [r for r in records if r.label == "reload"]
    assert spills and reloads  # every spilled tile is read again: each comes back once
    assert len(reloads) == len(spills)
    assert all(r.engine == "dma" and r.bytes == 128 * FREE * 4 for r in spills + reloads)
    assert all(r.source and r.source.startswith("test_spill.py:") for r in spills + reloads)
    # the spill traffic is time on the timeline: the kernel is slower than its loads alone need
    loads = [r for r in records if r.label == "nisa.dma_copy"]
    assert sum(r.bytes for r in spills + reloads) >= 0.1 * sum(r.bytes for r in loads)


def test_legacy_api_kernel_spills_and_reloads_with_exact_results(rng):
    x = rng.standard_normal((TILES, 128, FREE)).astype(np.float32)
    kernel = _legacy_sum_of_all()
    np.testing.assert_array_equal(kernel(x), _expected(x))
    labels = [r.label for r in kernel.last_run.results[0].profile.records]
    assert "spill" in labels and "reload" in labels


def test_kernels_that_fit_do_not_spill(rng):
    """Spilling is the last resort: a kernel whose tiles fit traces as before."""
    global TILES
    saved, TILES = TILES, 4  # 128 KiB live
    try:
        x = rng.standard_normal((TILES, 128, FREE)).astype(np.float32)
        kernel = CurrentKernel(_current_sum_of_all(), platform_target="trn1")
        np.testing.assert_array_equal(kernel(x), _expected(x))
    finally:
        TILES = saved
    labels = {r.label for r in kernel.last_run.results[0].profile.records}
    assert not labels & {"spill", "reload"}


def test_a_tile_larger_than_sbuf_is_still_refused(rng):
    def kernel(x):
        out = nl.ndarray((128, 65536), dtype=x.dtype, buffer=nl.shared_hbm)  # 256 KiB per partition
        t = nl.ndarray((128, 65536), dtype=x.dtype, buffer=nl.sbuf)
        nl.store(out, nl.load(x))
        return t

    with pytest.raises(LimitExceededError, match="sbuf allocation"):
        CurrentKernel(kernel, platform_target="trn1")(np.zeros((128, 65536), np.float32))
