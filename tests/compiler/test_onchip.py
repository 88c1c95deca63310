"""On-chip intermediates (`trnsim.compiler.lowering.onchip`) and their HBM reuse, on hand-built
programs: what fits in the SBUF the kernels leave free stays there, the rest shares HBM slots."""

import dataclasses

from trnsim import hardware
from trnsim.compiler.lowering.hbm import SLOT_PREFIX, reuse_internal_hbm
from trnsim.compiler.lowering.onchip import footprint, keep_on_chip, live_ranges
from trnsim.isa import DmaCopy, ProgramBuilder

CORE = hardware.core(2)


def _chain(sizes: list[int], *, free_bytes_per_partition: int | None = None):
    """A chain of kernels: each stores an fp32 [128, n] result, then loads the previous one.
    The kernels' SBUF peak leaves `free_bytes_per_partition` (default: what their tiles leave)."""
    b = ProgramBuilder("chain", CORE)
    tile = b.tile((128, max(sizes)), "float32")
    for i, n in enumerate(sizes):
        decl = b.tensor(f"t{i}", (128, n), "float32")
        b.emit(DmaCopy(dst=decl.block(), src=_cols(tile, n)))
        if i:
            prev = b.program.tensors[f"t{i - 1}"]
            b.emit(DmaCopy(dst=_cols(tile, prev.shape[1]), src=prev.block()))
    program = b.build()
    if free_bytes_per_partition is not None:
        program.sbuf_peak_bytes_per_partition = (CORE.sbuf_usable_bytes_per_partition
                                                 - free_bytes_per_partition)
    return program


def _cols(tile, n: int):
    """The first n fp32 columns of a dense [128, m] tile."""
    return dataclasses.replace(tile, dims=((1, n),))


def test_footprint_spreads_over_partitions_rounded_to_the_allocator_alignment():
    assert footprint(128 * 1024 * 4, 128) == 4096
    assert footprint(10, 128) == 4


def test_live_ranges_run_from_first_to_last_use():
    program = _chain([8, 8, 8])
    assert live_ranges(program) == {"t0": (0, 2), "t1": (1, 4), "t2": (3, 3)}


def test_intermediates_that_fit_beside_the_kernels_stay_on_chip():
    program = _chain([1024, 1024, 1024])
    kept = keep_on_chip(program, CORE)
    assert kept == ["t0", "t1", "t2"]
    assert all(t.on_chip for t in program.tensors.values())


def test_what_does_not_fit_stays_in_hbm_and_shares_slots():
    # the kernels leave 40 KiB per partition; a 32 KiB tensor fits, two live at once do not
    program = _chain([8192, 8192, 8192, 8192], free_bytes_per_partition=40 * 1024)
    kernels_peak = program.sbuf_peak_bytes_per_partition
    kept = keep_on_chip(program, CORE)
    assert kept == ["t0", "t2"]  # t1 overlaps t0 at instruction 2; t3 overlaps t2
    assert program.sbuf_peak_bytes_per_partition == kernels_peak + 32 * 1024  # one live at a time
    rename = reuse_internal_hbm(program)
    assert set(rename) == {"t1", "t3"} and rename["t1"] == rename["t3"]  # one HBM slot
    assert rename["t1"].startswith(SLOT_PREFIX)
    assert program.tensors["t0"].on_chip and "t1" not in program.tensors


def test_nothing_stays_on_chip_when_the_kernels_use_all_of_sbuf():
    program = _chain([64, 64], free_bytes_per_partition=0)
    assert keep_on_chip(program, CORE) == []


def test_a_partial_program_keeps_only_the_span_it_touches_and_excluded_tensors_stay_in_hbm():
    """Under LNC=2 a core writes and reads only its share of a tensor: it takes the SBUF of that
    share, laid out from the share's first byte; a tensor the other core reads stays in HBM."""
    b = ProgramBuilder("share", CORE)
    tile = b.tile((128, 1024), "float32")
    for name in ("mine", "crossing"):
        decl = b.tensor(name, (256, 1024), "float32")
        b.emit(DmaCopy(dst=decl.block((128, 0), (128, 1024)), src=tile))
        b.emit(DmaCopy(dst=tile, src=decl.block((128, 0), (128, 1024))))
    program = b.build()
    peak = program.sbuf_peak_bytes_per_partition
    assert keep_on_chip(program, CORE, exclude={"crossing"}, partial=True) == ["mine"]
    assert program.tensors["mine"].on_chip_from == 128 * 1024 * 4
    assert not program.tensors["crossing"].on_chip
    assert program.sbuf_peak_bytes_per_partition == peak + footprint(128 * 1024 * 4, 128)


def test_a_program_with_control_flow_keeps_its_tensors_and_buffers():
    """Live ranges in program order do not hold when a branch goes back: nothing is kept on
    chip or shared, whether the lowering's index says so or the instructions are looked at."""
    from trnsim.compiler.lowering.replay import HbmIndex
    from trnsim.isa import Jump

    for indexed in (False, True):
        program = _chain([8, 8, 8])
        program.instructions.append(Jump(target=0))
        index = HbmIndex.of(program.instructions) if indexed else None
        assert keep_on_chip(program, CORE, index=index) == []
        assert reuse_internal_hbm(program, index=index) == {}
        assert set(program.tensors) == {"t0", "t1", "t2"}
