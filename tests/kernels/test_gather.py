"""k.gather: rows by indirect DMA, elements by GpSimd gather; indices only known at run time."""

import numpy as np
import pytest

from tests.kernels.harness import ArraySpec, run
from trnsim.errors import TrnsimError
from trnsim.kernels import gather


def test_embedding_rows(rng):
    table = rng.standard_normal((1000, 64)).astype(np.float32)
    ids = rng.integers(0, 1000, (2, 150)).astype(np.int32)
    result = run(gather, [table, ids], (2, 150, 64), "float32", kind="embedding")
    assert np.array_equal(result.output, table[ids])
    assert any(r.opcode == "DmaIndirect" for r in result.profile.records)


@pytest.mark.parametrize("index_shape", [(1, 1), (1,), ()])
def test_embedding_of_one_token(rng, index_shape):
    """Token generation looks up one row: a [1, width] operand must stay one row, not become
    `width` one-element rows."""
    table = rng.standard_normal((300, 4096)).astype(np.float32)
    ids = np.full(index_shape, 123, dtype=np.int32)
    result = run(gather, [table, ids], (*index_shape, 4096), "float32", kind="embedding")
    assert np.array_equal(result.output, table[ids])


def test_embedding_timing_does_not_need_index_values():
    """A BERT-sized table: the indices' values are unknown in a timing-only run."""
    result = run(gather, [ArraySpec((30522, 1024), "float32"), ArraySpec((1, 128), "int32")],
                 (1, 128, 1024), "float32", kind="embedding", target="inf2")
    assert 1_000 < result.total_ns < 20_000


def test_embedding_draws_only_the_rows_it_moves_from_device_memory():
    """The indirect DMA's dependencies span the whole table, but only the gathered rows cross
    DRAM: on Inferentia (50 GB/s of DRAM for the chip) a 125 MB table read per 128 rows would
    take 2.3 ms per DMA."""
    rows, width = 1280, 1024
    result = run(gather, [ArraySpec((30522, width), "float32"), ArraySpec((1, rows), "int32")],
                 (1, rows, width), "float32", kind="embedding", target="inf1")
    summary = result.profile.summary
    assert summary.hbm_read_bytes == rows * width * 4 + rows * 4  # the rows and their indices
    assert result.total_ns < 1e6


def test_index_select_gather_and_index(rng):
    x = rng.standard_normal((5, 30, 8)).astype(np.float32)
    i1 = rng.integers(0, 30, (7,)).astype(np.int32)
    assert np.array_equal(run(gather, [x, i1], (5, 7, 8), "float32", kind="index_select",
                              axis=1).output, np.take(x, i1, axis=1))
    last = rng.integers(0, 8, (5, 30, 3)).astype(np.int32)
    assert np.array_equal(run(gather, [x, last], (5, 30, 3), "float32", kind="gather",
                              axis=2).output, np.take_along_axis(x, last, 2))
    middle = rng.integers(0, 30, (5, 4, 8)).astype(np.int32)
    assert np.array_equal(run(gather, [x, middle], (5, 4, 8), "float32", kind="gather",
                              axis=1).output, np.take_along_axis(x, middle, 1))
    a0 = rng.integers(0, 5, (3, 4)).astype(np.int32)
    a1 = rng.integers(0, 30, (3, 4)).astype(np.int32)
    assert np.array_equal(run(gather, [x, a0, a1], (3, 4, 8), "float32", kind="index",
                              dims=(0, 1)).output, x[a0, a1])
    assert np.array_equal(run(gather, [x, a1], (5, 3, 4, 8), "float32", kind="index",
                              dims=(1,)).output, x[:, a1])


def test_out_of_range_index_is_an_error(rng):
    table = rng.standard_normal((10, 4)).astype(np.float32)
    with pytest.raises(TrnsimError, match="outside"):
        run(gather, [table, np.array([3, 10], np.int32)], (2, 4), "float32", kind="embedding")


def test_rows_wider_than_one_access_pattern_dimension(rng):
    """A mixture-of-experts layer gathers each token's expert weights ([E, 2I, H] by expert id):
    a row of 70000 elements takes two indirect DMAs (a pattern dimension holds 65535)."""
    table = rng.standard_normal((4, 70000)).astype(np.float32)
    ids = np.array([3, 0, 3, 1], dtype=np.int32)
    result = run(gather, [table, ids], (4, 70000), "float32", kind="embedding")
    assert np.array_equal(result.output, table[ids])


def test_scatter_rows_by_indirect_dma_writes(rng):
    """x with rows index[i] set to values[i]; a repeated index keeps the last write."""
    from trnsim.kernels import scatter

    x = rng.standard_normal((300, 33)).astype(np.float32)
    values = rng.standard_normal((200, 33)).astype(np.float32)
    index = rng.permutation(300)[:200].astype(np.int32)
    index[120], index[150] = index[20], index[30]  # within one DMA and across two
    want = x.copy()
    for i, row in zip(index, values, strict=True):
        want[i] = row
    result = run(scatter, [x, values, index], (300, 33), "float32")
    assert np.array_equal(result.output, want)
    assert any(r.opcode == "DmaIndirect" for r in result.profile.records)


def test_scatter_accumulates_repeats_and_fills_without_reading_x(rng):
    """accumulate: every repeat of an index adds (read-add-write DMAs); fill: out starts as
    that value, written from a memset tile (x is not read)."""
    from trnsim.kernels import scatter

    x = np.zeros((300, 33), np.float32)
    values = rng.standard_normal((200, 33)).astype(np.float32)
    index = rng.integers(0, 300, 200).astype(np.int32)
    index[:10] = 5  # repeats within one DMA
    index[150] = 5  # and across two
    want = x.copy()
    np.add.at(want, index, values)
    result = run(scatter, [x, values, index], (300, 33), "float32", accumulate=True, fill=0.0)
    np.testing.assert_allclose(result.output, want, rtol=1e-6, atol=1e-6)
    dmas = [i for i in result.program.instructions if i.OPCODE == "DmaIndirect"]
    assert len(dmas) == 2 and all(i.accumulate for i in dmas)
    reads_x = [i for i in result.program.instructions
               if any(ap.tensor == "in0" for ap in i.reads())]
    assert not reads_x
