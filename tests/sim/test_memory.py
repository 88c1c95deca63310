"""Byte-addressed memories: fill pattern, strided and aliased views, HBM capacity."""

import numpy as np
import pytest

from tests.sim.helpers import hbm_ap, sbuf_ap
from trnsim.errors import InvalidArgumentError, LimitExceededError
from trnsim.isa import Memory, TensorDecl
from trnsim.numerics import dtype
from trnsim.sim.memory import HbmSpace, OnChipMemory


@pytest.mark.parametrize("name", ["float32", "bfloat16", "float16", "float8_e4m3", "float8_e5m2"])
def test_fresh_memory_reads_nan_for_floats(name):
    memory = OnChipMemory(Memory.SBUF, 128, 1024)
    values = memory.views(sbuf_ap(0, 128, (16,), name))[1]
    assert np.isnan(values.astype(np.float32)).all()


def test_views_alias_and_reads_are_read_only():
    memory = OnChipMemory(Memory.SBUF, 4, 64)
    wide = sbuf_ap(0, 4, (8,), "float32", start=0)
    writable, readonly = memory.views(wide)
    writable[...] = np.arange(32, dtype=np.float32).reshape(4, 8)
    halves = memory.views(sbuf_ap(16, 2, (4,), "float32", start=2))[1]  # bytes 16.. of partitions 2-3
    np.testing.assert_array_equal(halves, [[20, 21, 22, 23], [28, 29, 30, 31]])
    with pytest.raises(ValueError):
        readonly[0, 0] = 1.0
    assert memory.views(wide)[0] is writable  # cached


def test_hbm_views_with_zero_and_negative_strides():
    space = HbmSpace(1 << 20, "chip")
    space.reserve("t", TensorDecl("t", (4, 8), dtype("int32")))
    space.array("t")[...] = np.arange(32, dtype=np.int32).reshape(4, 8)
    views = space.tensor("t")
    broadcast = views.views(hbm_ap("t", "int32", 3, 0, ((1, 8),), offset_elements=8))[1]
    np.testing.assert_array_equal(broadcast, np.tile(np.arange(8, 16), (3, 1)))
    reversed_rows = views.views(hbm_ap("t", "int32", 4, -8, ((-1, 8),), offset_elements=31))[1]
    np.testing.assert_array_equal(reversed_rows, np.arange(32).reshape(4, 8)[::-1, ::-1])


def test_hbm_capacity_names_the_tensor_and_allocates_lazily():
    space = HbmSpace(1000, "tiny")
    space.reserve("a", TensorDecl("a", (100,), dtype("float32")))
    assert space.allocated_bytes == 0
    with pytest.raises(LimitExceededError, match=r"'b' \(800 bytes\).* 1200 exceeds limit 1000"):
        space.reserve("b", TensorDecl("b", (200,), dtype("float32")))
    space.array("a")
    assert space.allocated_bytes == 400
    with pytest.raises(InvalidArgumentError, match="declared as float32"):
        space.reserve("a", TensorDecl("a", (10,), dtype("float32")))


def test_out_of_range_view_is_a_trnsim_error():
    memory = OnChipMemory(Memory.PSUM, 128, 64)
    with pytest.raises(LimitExceededError, match="psum"):
        memory.views(sbuf_ap(32, 128, (16,), "float32", memory=Memory.PSUM))


def test_hbm_adopts_a_constant_without_copying():
    hbm = HbmSpace(1 << 20, "test chip")
    table = np.arange(64, dtype=np.float32).reshape(8, 8)
    hbm.reserve("w", TensorDecl("w", (8, 8), dtype("float32"), "constant"))
    assert hbm.adopt("w", table)
    assert np.shares_memory(hbm.array("w"), table) and not hbm.array("w").flags.writeable
    hbm.reserve("other", TensorDecl("other", (8, 8), dtype("bfloat16"), "constant"))
    assert not hbm.adopt("other", table)  # another dtype: the caller copies (and casts) instead
