import dataclasses

import pytest

from trnsim.errors import InvalidArgumentError, LimitExceededError
from trnsim.isa import AccessPattern, Memory, ProgramBuilder, TensorCopy, hbm, sbuf
from trnsim.isa.access import Patterns, interned
from trnsim.numerics import dtype


def test_shapes_spans_and_contiguity():
    ap = sbuf(256, 64, (4, 32), "bfloat16")
    assert ap.shape == (64, 4, 32) and ap.free_size == 128 and ap.nbytes == 64 * 128 * 2
    assert ap.byte_span() == (256, 256 + 256)
    assert ap.is_contiguous
    strided = AccessPattern(memory=Memory.SBUF, dtype=dtype("float32"), partitions=8,
                            dims=((64, 4), (2, 8)))
    assert not strided.is_contiguous
    assert strided.byte_span() == (0, (64 * 3 + 2 * 7 + 1) * 4)
    assert strided.innermost_stride_bytes == 8


def test_broadcast_and_negative_strides_span():
    bcast = AccessPattern(memory=Memory.SBUF, dtype=dtype("float32"), partitions=4, dims=((0, 16),),
                          offset=40)
    assert bcast.byte_span() == (40, 44)
    reverse = AccessPattern(memory=Memory.SBUF, dtype=dtype("float32"), partitions=4, dims=((-1, 8),),
                            offset=64)
    assert reverse.byte_span() == (64 - 28, 68)


def test_hbm_block_of_a_larger_tensor():
    ap = hbm("w", (16, 8), "float32", offset_elements=3 * 100 + 10, row_elements=100)
    assert ap.partition_step == 100 and ap.dims == ((1, 8),)
    assert ap.byte_span() == ((310) * 4, (310 + 15 * 100 + 8) * 4)


def test_aps_hash_and_compare_by_value():
    assert sbuf(0, 8, (4,), "float32") == sbuf(0, 8, (4,), "float32")
    assert len({sbuf(0, 8, (4,), "float32"), sbuf(0, 8, (4,), "float32")}) == 1


def test_equality_is_the_dataclass_fields_and_moves_keep_the_span():
    ap = AccessPattern(memory=Memory.SBUF, dtype=dtype("bfloat16"), partitions=32,
                       dims=((64, 4), (1, 16)), offset=512, partition_start=32, tensor="t")
    ap.byte_span()  # cached, then carried by `moved`
    for change in ({"memory": Memory.PSUM}, {"dtype": dtype("float16")}, {"partitions": 16},
                   {"dims": ((64, 4), (1, 8))}, {"offset": 514}, {"partition_start": 0},
                   {"partition_step": 1}, {"tensor": "u"}):
        other = dataclasses.replace(ap, **change)
        assert other != ap and ap != other, change
    moved = ap.moved(64)
    fresh = dataclasses.replace(ap, offset=576)
    assert moved == fresh and hash(moved) == hash(fresh) and moved is not fresh
    assert moved.byte_span() == fresh.byte_span() == (576, 576 + (64 * 3 + 16) * 2)
    assert ap != (ap.memory, ap.dtype) and (ap == 1) is False


def test_interned_patterns_are_one_object_per_value():
    patterns: dict = {}
    fields = (Memory.SBUF, dtype("float32"), 8, ((1, 4),), 16, 0, 0, "t")
    ap = interned(patterns, fields)
    assert ap == sbuf(16, 8, (4,), "float32", label="t")
    assert interned(patterns, fields) is ap
    assert ap.moved_in(patterns, 16) is ap.moved_in(patterns, 16) == ap.moved(16)
    assert ap.moved_in(patterns, 16).moved_in(patterns, -16) is ap
    # made without the dataclass's __init__, but the same object state as one made with it
    built = AccessPattern(*fields)
    assert vars(ap) == vars(built) and list(vars(ap)) == list(vars(built))
    assert hash(ap) == hash(built) and ap.free_size == 4 and ap.byte_span() == built.byte_span()
    assert dtype("bfloat16") in {dtype("bfloat16")} and hash(dtype("bfloat16")) != hash(
        dtype("float32"))


def test_moves_recorded_in_patterns_give_the_interned_pattern():
    """`Patterns` remembers each move `moved_in` made: a repeated move returns the pattern the
    fields name (the same object a lookup by fields or a plain dict gives), never another's."""
    patterns = Patterns()
    ap = interned(patterns, (Memory.PSUM, dtype("float32"), 128, ((1, 512),), 0, 0, 0, "acc"))
    moved = ap.moved_in(patterns, 2048)
    assert patterns.moves[(id(ap), 2048)] == (ap, moved)
    assert ap.moved_in(patterns, 2048) is moved
    assert interned(patterns, (Memory.PSUM, dtype("float32"), 128, ((1, 512),), 2048, 0, 0,
                               "acc")) is moved
    plain: dict = {}
    assert interned(plain, (ap.memory, ap.dtype, 128, ((1, 512),), 0, 0, 0, "acc")).moved_in(
        plain, 2048) == moved
    # an entry whose pattern is gone cannot answer for an object that took its id
    other = interned(patterns, (Memory.PSUM, dtype("float32"), 64, ((1, 256),), 0, 0, 0, "b"))
    patterns.moves[(id(other), 2048)] = (ap, moved)
    assert other.moved_in(patterns, 2048) == other.moved(2048) != moved
    assert patterns.moves[(id(other), 2048)][0] is other


def test_builder_allocates_checks_and_verifies():
    b = ProgramBuilder("t", "v2")
    x = b.input("x", (256, 64), "float32")
    t = b.tile((128, 64), "float32", name="t")
    u = b.tile((128, 64), "float32", name="u")
    assert u.offset >= t.offset + 256
    b.emit(TensorCopy(dst=u, src=t))
    block = x.block((128, 0), (128, 64))
    assert block.offset == 128 * 64 * 4 and block.partition_step == 64
    program = b.build()
    assert program.inputs[0].name == "x" and "TensorCopy" in program.pretty()
    with pytest.raises(LimitExceededError, match="sbuf allocation"):
        b.tile((128, 50_000), "float32", name="huge")
    with pytest.raises(LimitExceededError, match="index range"):
        x.block((200, 0), (128, 64))
    with pytest.raises(InvalidArgumentError, match="declared twice"):
        b.input("x", (1,), "float32")


def test_reserved_sbuf_is_not_allocatable_on_v2():
    b = ProgramBuilder("t", "v2")
    usable = b.core.sbuf_usable_bytes_per_partition
    b.tile((128, usable // 4), "float32")
    with pytest.raises(LimitExceededError, match="16384 reserved"):
        b.tile((128, 1), "float32")


def test_verify_catches_hbm_access_outside_tensor():
    b = ProgramBuilder("t", "v2")
    b.input("x", (128, 64), "float32")
    t = b.tile((128, 128), "float32")
    from trnsim.isa import DmaCopy
    b.emit(DmaCopy(dst=t, src=hbm("x", (128, 128), "float32")))
    with pytest.raises(LimitExceededError, match="HBM tensor x"):
        b.build()


def test_same_form_agrees_with_form_numbers():
    base = hbm("w", (64, 128), "bfloat16", row_elements=256)
    variants = [base, dataclasses.replace(base, tensor="v"), base.moved(128),
                dataclasses.replace(base, partitions=32),
                dataclasses.replace(base, dims=((1, 64),)),
                dataclasses.replace(base, dtype=dtype("float16")),
                dataclasses.replace(base, partition_step=2),
                sbuf(0, 64, (4, 32), "bfloat16")]
    for a in variants:
        for b in variants:
            assert a.same_form(b) == (a.form() == b.form()), (a, b)
