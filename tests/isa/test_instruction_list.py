"""InstructionList: deferred spans are built when read, and it otherwise reads as a list."""

import random
import threading
import time

import pytest

from trnsim.isa.instruction_list import InstructionList


class _Item:
    def __init__(self, value) -> None:
        self.value = value

    def __eq__(self, other) -> bool:
        return isinstance(other, _Item) and other.value == self.value

    def __repr__(self) -> str:
        return f"_Item({self.value!r})"


class _Maker:
    """Builds items of `values`, counting how it was asked."""

    def __init__(self, values) -> None:
        self.values = values
        self.ones = 0
        self.alls = 0

    def one(self, offset: int) -> _Item:
        self.ones += 1
        return _Item(self.values[offset])

    def all(self) -> list[_Item]:
        self.alls += 1
        return [_Item(v) for v in self.values]


def _two_spans():
    first, second = _Maker("cde"), _Maker("fg")
    items = InstructionList([_Item("a"), _Item("b")])
    items.defer(3, first)
    items.append(_Item("h"))
    items.defer(2, second)
    return items, first, second


def test_a_position_is_built_on_its_first_read_and_kept():
    items, first, second = _two_spans()
    assert len(items) == 8 and items.pending == 2
    assert items.built(3) is None
    read = items[3]
    assert read == _Item("d") and items[3] is read and items.built(3) is read
    assert items[-1] == _Item("g") and (first.ones, second.ones) == (1, 1)
    assert (first.alls, second.alls) == (0, 0) and items.pending == 2
    assert set(items.built_offsets(2)) == {1} and set(items.built_offsets(6)) == {1}
    assert items.built_offsets(0) is None  # no deferred span starts there


def test_a_slice_builds_only_the_spans_it_covers_keeping_what_was_read():
    items, first, second = _two_spans()
    read = items[3]
    assert items[1:4] == [_Item("b"), _Item("c"), _Item("d")]
    assert items[3] is read  # the bulk build kept the object read before it
    assert (first.alls, second.alls) == (1, 0) and items.pending == 1
    assert items.built_offsets(2) is None  # built in full
    assert items[5:6] == [_Item("h")] and second.alls == 0  # no deferred position in it


def test_iteration_and_comparison_build_everything():
    items, first, second = _two_spans()
    assert (first.alls, second.alls) == (0, 0)
    expected = [_Item(v) for v in "abcdehfg"]
    assert list(items) == expected and items == expected and items.pending == 0
    assert (first.alls, second.alls, first.ones, second.ones) == (1, 1, 0, 0)
    assert items != expected[:-1] and items[::-1] == expected[::-1]


def test_a_write_counts_and_survives_the_build_of_its_span():
    items, first, _ = _two_spans()
    before = items.changes
    items[4]
    assert items.changes == before  # reading is not writing
    written = _Item("x")
    items[4] = written
    assert items.changes == before + 1
    assert list(items)[4] is written and first.alls == 1


def test_it_reads_and_writes_as_a_list():
    items, _, _ = _two_spans()
    items += [_Item("i")]
    items.extend([_Item("j")])
    items.insert(0, _Item("z"))
    del items[1]
    assert [i.value for i in items] == list("zbcdehfgij")
    with pytest.raises(IndexError):
        items[99]
    assert items.copy() == list(items) and items.__add__([_Item("k")]) == [*items, _Item("k")]
    assert _Item("h") in items and items.index(_Item("h")) == 5


class _SlowMaker(_Maker):
    """A maker that yields the interpreter while it builds (another thread may run)."""

    def one(self, offset: int) -> _Item:
        time.sleep(0)
        return super().one(offset)

    def all(self) -> list[_Item]:
        time.sleep(0)
        return super().all()


def test_threads_reading_one_list_get_one_object_per_position():
    items = InstructionList()
    makers = [_SlowMaker(range(k * 50, k * 50 + 50)) for k in range(20)]
    for maker in makers:
        items.defer(50, maker)
    seen: list[list] = []

    def read(seed: int) -> None:
        order = random.Random(seed).sample(range(len(items)), len(items))
        got = {i: items[i] for i in order[:300]}
        got.update(enumerate(items[100:400], start=100))
        got.update(enumerate(items))
        seen.append([got[i] for i in range(len(items))])

    threads = [threading.Thread(target=read, args=(seed,)) for seed in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(seen) == 6 and [i.value for i in seen[0]] == list(range(1000))
    assert all(a is b for run in seen[1:] for a, b in zip(seen[0], run, strict=True))
    assert all(maker.alls <= 1 for maker in makers) and items.pending == 0
