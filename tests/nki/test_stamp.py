"""Loop-body stamping (`trnsim.nki.stamp`): kernels traced with stamping give the programs (and
trace state) of tracing every iteration, instruction by instruction; loops that are not affine,
or whose Python does what stamping would skip, are traced plainly; check mode catches a stamp
that differs from the traced iteration."""

import numpy as np
import pytest

from tests.kernels.harness import ArraySpec, trace_kernel
from trnsim import hardware
from trnsim.kernels import attention, matmul, tutorials
from trnsim.kernels.flash_attention import flash_attention_backward_packed, flash_attention_packed
from trnsim.nki import isa as nisa
from trnsim.nki import language as nl
from trnsim.nki import stamp


@pytest.fixture
def stamped_iterations(monkeypatch):
    """The number of loop iterations stamped (not traced) so far."""
    count = [0]
    original = stamp._stamp

    def counting(trace, template, start, stop, base):
        count[0] += stop - start
        return original(trace, template, start, stop, base)

    monkeypatch.setattr(stamp, "_stamp", counting)
    return count


def _bf16(*shape):
    return ArraySpec(shape, "bfloat16")


def _f32(*shape):
    return ArraySpec(shape, "float32")


def _k_tiles(a, b):
    """a [K, 128] and b [K, 512] loaded K tile by K tile into [128, K/128, *] SBUF tiles."""
    kt = a.shape[0] // 128
    at = nl.ndarray((128, kt, 128), dtype=a.dtype, buffer=nl.sbuf)
    bt = nl.ndarray((128, kt, 512), dtype=b.dtype, buffer=nl.sbuf)
    for k in nl.static_range(kt):
        at[:, k, :] = nl.load(a[k * 128:(k + 1) * 128, :])
        bt[:, k, :] = nl.load(b[k * 128:(k + 1) * 128, :])
    return kt, at, bt


def _resident_k(out, a, b):
    """K tiles loaded once, then accumulated in an nl.affine_range whose body allocates nothing
    (`acc +=` keeps the accumulator tile)."""
    kt, at, bt = _k_tiles(a, b)
    acc = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
    for k in nl.affine_range(kt):
        acc += nisa.nc_matmul(at[:, k, :], bt[:, k, :])
    nl.store(out, value=nl.copy(acc, dtype=out.dtype))


def _nested(out, a, b):
    """An affine loop in an affine loop: the inner loop stamps inside the outer's iterations, and
    the outer loop stamps iterations holding stamped ones."""
    kt, at, bt = _k_tiles(a, b)
    acc = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
    for n in nl.affine_range(8):
        for k in nl.affine_range(kt):
            acc[:, n * 64:(n + 1) * 64] += nisa.nc_matmul(at[:, k, :], bt[:, k, n * 64:(n + 1) * 64])
    nl.store(out, value=nl.copy(acc, dtype=out.dtype))


def _fresh_banks(out, a, b):
    """A body that allocates a PSUM bank per matmul and frees it at the iteration's end: four
    banks per iteration, rotating through the four a held tile leaves, so each iteration finds
    the ring where the one before found it; its tiles' names are new in each iteration."""
    at, bt = nl.load(a), nl.load(b)
    nl.zeros((128, 4, 512), nl.float32, buffer=nl.psum)  # held to the end
    res = nl.ndarray((128, 2048), nl.bfloat16, buffer=nl.sbuf)
    for i in nl.affine_range(8):
        for j in range(4):
            bank = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
            bank[...] = nisa.nc_matmul(at, bt)
            res[:, (i * 4 + j) * 64:(i * 4 + j + 1) * 64] = nl.copy(bank[:, 0:64],
                                                                    dtype=nl.bfloat16)
    nl.store(out, value=res)


HARNESS = {  # name: (kernel, inputs, output shape, attributes, stamps something)
    "resident-k": (_resident_k, [_bf16(1280, 128), _bf16(1280, 512)], (128, 512), {}, True),
    "nested": (_nested, [_bf16(1280, 128), _bf16(1280, 512)], (128, 512), {}, True),
    "matmul-long-k": (matmul, [_bf16(256, 2304), _bf16(2304, 700)], (256, 700), {}, True),
    "matmul-k-streamed-rhs": (matmul, [_bf16(256, 8192), _bf16(8192, 384)], (256, 384), {}, True),
    "matmul-k-streamed-lhs": (matmul, [_bf16(384, 11008), _bf16(11008, 256)], (384, 256), {},
                              True),
    "matmul-stationary-b": (matmul, [_bf16(96, 1536), _bf16(1536, 1024)], (96, 1024),
                            {"stationary": "b"}, True),
    "matmul-bias": (matmul, [_bf16(640, 1024), _bf16(1100, 1024)], (640, 1100),
                    {"transpose_b": True, "bias": _bf16(1100)}, True),
    "attention": (attention, [_bf16(1, 2, 256, 64)] * 3, (1, 2, 256, 64), {"scale": 0.125},
                  False),
    # eight key tiles: P @ V's K loop (per head, entered again per head and query block)
    "attention-1k-keys": (attention, [_bf16(1, 2, 1024, 64)] * 3, (1, 2, 1024, 64),
                          {"scale": 0.125}, True),
    # 16 key tiles, the last partial: P @ V's transposes in runs of 4 full tiles (the run of
    # tiles 12-15 holds the partial one: it is the loop's last iteration, traced)
    "attention-partial-tile": (attention, [_bf16(1, 2, 2000, 64)] * 3, (1, 2, 2000, 64),
                               {"scale": 0.125}, True),
    "fresh-psum-banks": (_fresh_banks, [_bf16(128, 128), _bf16(128, 512)], (128, 2048), {},
                         True),
    "flash-forward": (flash_attention_packed, [_f32(1, 2, 384, 64)] * 3, (1, 2, 384, 66),
                      {"scale": 0.125, "causal": True}, False),
    "flash-backward": (flash_attention_backward_packed,
                       [*[_f32(1, 2, 256, 64)] * 5, _f32(1, 2, 256, 2)], (3, 1, 256, 2, 64),
                       {"scale": 0.125, "causal": False}, False),
}


def _harness_trace(name, mode, monkeypatch):
    fn, inputs, out_shape, attrs, _ = HARNESS[name]
    monkeypatch.setenv(stamp.STAMP_ENV, mode)
    trace, _, _ = trace_kernel(fn, inputs, out_shape, "bfloat16", **attrs)
    return trace


def _assert_same_programs(got, want):
    assert len(got.instructions) == len(want.instructions) > 0
    for i, (a, b) in enumerate(zip(got.instructions, want.instructions, strict=True)):
        assert type(a) is type(b) and a == b and a.label == b.label and a.source == b.source, i
    assert got.tensors.keys() == want.tensors.keys()
    assert (got.sbuf_peak_bytes_per_partition, got.psum_peak_bytes_per_partition) == \
        (want.sbuf_peak_bytes_per_partition, want.psum_peak_bytes_per_partition)


def _state(trace):
    return (trace.calls, trace.uses, trace.last_use, trace.write_versions, trace._psum_spans,
            trace._written_onchip, trace.tile_ids, trace.sbuf.cursor, trace.psum.cursor,
            len(trace.invariants))


@pytest.mark.parametrize("name", HARNESS)
def test_kernels_trace_alike_stamped_and_traced(name, monkeypatch, stamped_iterations):
    plain = _harness_trace(name, "off", monkeypatch)
    assert stamped_iterations[0] == 0
    stamped = _harness_trace(name, "on", monkeypatch)
    _assert_same_programs(stamped.builder.program, plain.builder.program)
    assert _state(stamped) == _state(plain)
    assert (stamped_iterations[0] > 0) == HARNESS[name][4]
    _harness_trace(name, "check", monkeypatch)  # every stamp equals its traced iteration


@pytest.mark.parametrize("kernel, kwargs", [
    (tutorials.matmul_naive, {}),
    (tutorials.matmul_hoisted, {}),
    (tutorials.matmul_block_free_dim, {}),
    (tutorials.matmul_optimized, dict(tiles_in_block_m=2, tiles_in_block_n=2, tiles_in_block_k=2)),
])
def test_tutorial_matmuls_trace_alike_stamped_and_traced(kernel, kwargs, monkeypatch):
    lhs_t = np.zeros((1024, 256), np.float32)
    rhs = np.zeros((1024, 1024), np.float32)
    programs = {}
    for mode in ("off", "on", "check"):
        monkeypatch.setenv(stamp.STAMP_ENV, mode)
        traced = kernel._trace(kernel._bind((lhs_t, rhs), kwargs), hardware.core("trn1"))
        programs[mode] = traced.programs
    for mode in ("on", "check"):
        for got, want in zip(programs[mode], programs["off"], strict=True):
            _assert_same_programs(got, want)


# --- loops that must be traced plainly -----------------------------------------------------------
def _moving(out, a, b, *, step):
    """`step(k)`: the K tile iteration k multiplies (affine or not)."""
    _, at, bt = _k_tiles(a, b)
    acc = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
    for k in nl.affine_range(10):
        t = step(k)
        acc += nisa.nc_matmul(at[:, t, :], bt[:, t, :])
    nl.store(out, value=nl.copy(acc, dtype=out.dtype))


def _carried(out, a, b):
    """A Python local carried from iteration to iteration (affine in the index, but stamping would
    leave it at the third iteration's value)."""
    at, bt = nl.load(a[0:128, :]), nl.load(b[0:128, :])
    acc = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
    col = 0
    for _ in nl.affine_range(8):
        acc[:, 0:64] += nisa.nc_matmul(at, bt[:, col:col + 64])
        col += 64
    nl.store(out[:, 0:64], value=nl.copy(acc[:, 0:64], dtype=out.dtype))
    nl.store(out[:, 64:128], value=nl.copy(bt[:, col - 64:col], dtype=out.dtype))


def _branching(out, a, b):
    """A branch on the index in a middle iteration."""
    at, bt = nl.load(a[0:128, :]), nl.load(b[0:128, :])
    acc = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
    for k in nl.affine_range(10):
        acc[:, k * 32:(k + 1) * 32] = nisa.nc_matmul(at, bt[:, k * 32:(k + 1) * 32])
        if k == 6:
            acc[:, 0:32] += nisa.nc_matmul(at, bt[:, 0:32])
    nl.store(out[:, 0:320], value=nl.copy(acc[:, 0:320], dtype=out.dtype))


def _side_effect(out, a, b, *, seen):
    """The body's call records something in a list the loop's frame holds."""
    at, bt = nl.load(a[0:128, :]), nl.load(b[0:128, :])
    acc = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
    for k in nl.affine_range(10):
        _record(seen, k)
        acc[:, k * 32:(k + 1) * 32] = nisa.nc_matmul(at, bt[:, k * 32:(k + 1) * 32])
    nl.store(out[:, 0:320], value=nl.copy(acc[:, 0:320], dtype=out.dtype))


def _record(seen: list, k: int) -> None:
    seen.append(k)


FALLBACKS = {
    "quadratic-addresses": (_moving, {"step": lambda k: k * k % 10}),
    "carried-local": (_carried, {}),
    "branch-on-index": (_branching, {}),
}


@pytest.mark.parametrize("name", [*FALLBACKS, "side-effect"])
def test_loops_not_provably_affine_are_traced(name, monkeypatch, stamped_iterations):
    inputs = [_bf16(1280, 128), _bf16(1280, 512)]
    programs, seen = {}, {}
    for mode in ("off", "on", "check"):
        monkeypatch.setenv(stamp.STAMP_ENV, mode)
        if name == "side-effect":
            seen[mode] = []
            fn, attrs = _side_effect, {"seen": seen[mode]}
        else:
            fn, attrs = FALLBACKS[name]
        trace, _, _ = trace_kernel(lambda out, a, b, fn=fn, attrs=attrs: fn(out, a, b, **attrs),
                                   inputs, (128, 512), "bfloat16")
        programs[mode] = trace.builder.program
    assert stamped_iterations[0] == 0
    _assert_same_programs(programs["on"], programs["off"])
    if name == "side-effect":
        assert seen["on"] == seen["off"] == list(range(10))


def test_an_affine_step_is_stamped(monkeypatch, stamped_iterations):
    """The same kernel as the quadratic one, with an affine step: stamped, and equal."""
    inputs = [_bf16(1280, 128), _bf16(1280, 512)]
    programs = {}
    for mode in ("off", "on"):
        monkeypatch.setenv(stamp.STAMP_ENV, mode)
        trace, _, _ = trace_kernel(lambda out, a, b: _moving(out, a, b, step=lambda k: 9 - k),
                                   inputs, (128, 512), "bfloat16")
        programs[mode] = trace.builder.program
    # the first iteration starts the accumulation, the next three agree, the last is traced
    assert stamped_iterations[0] == 10 - 5
    _assert_same_programs(programs["on"], programs["off"])


def test_check_mode_stops_at_the_first_differing_field(monkeypatch):
    """With the screen switched off, a branch in a middle iteration is stamped wrongly: check mode
    names the iteration, instruction and field."""
    monkeypatch.setattr(stamp, "_screen_code", lambda code, lasti: ())
    inputs = [_bf16(128, 128), _bf16(128, 512)]
    monkeypatch.setenv(stamp.STAMP_ENV, "on")
    wrong, _, _ = trace_kernel(_branching, inputs, (128, 512), "bfloat16")
    monkeypatch.setenv(stamp.STAMP_ENV, "off")
    right, _, _ = trace_kernel(_branching, inputs, (128, 512), "bfloat16")
    assert len(wrong.builder.program.instructions) < len(right.builder.program.instructions)
    monkeypatch.setenv(stamp.STAMP_ENV, "check")
    with pytest.raises(stamp.StampMismatchError, match=r"stamped iteration 6 .*: instructions "
                                                       r"traced 4, stamped 2"):
        trace_kernel(_branching, inputs, (128, 512), "bfloat16")


def test_a_bad_mode_is_named(monkeypatch):
    monkeypatch.setenv(stamp.STAMP_ENV, "sometimes")
    with pytest.raises(stamp.TrnsimError, match="TRNSIM_STAMP='sometimes'"):
        trace_kernel(_resident_k, [_bf16(1280, 128), _bf16(1280, 512)], (128, 512), "bfloat16")


# --- a loop entered again: the earlier run's template ----------------------------------------------
def _k_run(acc, at, bt, step):
    """A K loop a kernel enters once per output block (as the matmul kernel's K loops are)."""
    for k in nl.affine_range(10):
        t = step(k)
        acc += nisa.nc_matmul(at[:, t, :], bt[:, t, :])


def _reentered(out, a, b, *, steps):
    _, at, bt = _k_tiles(a, b)
    for step in steps:
        acc = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
        _k_run(acc, at, bt, step)
        nl.store(out, value=nl.copy(acc, dtype=out.dtype))


def _trace_reentered(steps, mode, monkeypatch):
    monkeypatch.setenv(stamp.STAMP_ENV, mode)
    trace, _, _ = trace_kernel(lambda out, a, b: _reentered(out, a, b, steps=steps),
                               [_bf16(1280, 128), _bf16(1280, 512)], (128, 512), "bfloat16")
    return trace


def test_a_loop_entered_again_reuses_its_template(monkeypatch, stamped_iterations):
    """The first run finds its template from three agreeing iterations (after the one starting
    the accumulation); a later run whose first two iterations move as that template does is
    stamped from its third iteration on, though its first one started the accumulation (its
    matmul's flag differs: `_reused_after_first`). Same program and trace state as tracing
    every one."""
    steps = [lambda k: k, lambda k: k, lambda k: 9 - k]
    plain = _trace_reentered(steps, "off", monkeypatch)
    stamped = _trace_reentered(steps, "on", monkeypatch)
    _assert_same_programs(stamped.builder.program, plain.builder.program)
    assert _state(stamped) == _state(plain)
    # run 1: iterations 0-3 and 9 traced; run 2: 0-1 and 9; run 3's K tiles go down (9 - k
    # moves the other way): it finds its own template, as run 1
    assert stamped_iterations[0] == 5 + 7 + 5
    _trace_reentered(steps, "check", monkeypatch)


def test_a_first_iteration_is_taken_only_where_it_alone_differs(monkeypatch, stamped_iterations):
    """A later run's first iteration (the one starting the accumulation) stands in for a traced
    iteration only when its moved fields step as the template's and its other fields differ
    only where the next iteration holds the template's value: a first K tile read from another
    place is not taken (the run traces one iteration more), and the program is as traced."""
    steps = [lambda k: k, lambda k: k if k else 5]
    plain = _trace_reentered(steps, "off", monkeypatch)
    stamped = _trace_reentered(steps, "on", monkeypatch)
    _assert_same_programs(stamped.builder.program, plain.builder.program)
    assert stamped_iterations[0] == 5 + 6  # run 2: iterations 0-2 and 9 traced


def test_check_mode_catches_a_wrong_reused_template(monkeypatch):
    """A later run that moves as the earlier one over its first iterations, then not (the step
    function branches where the screen does not look): check mode names the iteration."""
    steps = [lambda k: k, lambda k: k if k <= 2 else k - 1]
    with pytest.raises(stamp.StampMismatchError, match=r"stamped iteration 3 .*field"):
        _trace_reentered(steps, "check", monkeypatch)


# --- checks of stamped instructions ---------------------------------------------------------------
def test_a_stamped_instruction_failing_its_check_raises(monkeypatch, stamped_iterations):
    """Each stamped instruction is checked at its own place: a check that fails only where a
    middle (stamped) iteration's operand sits raises there."""
    from trnsim.errors import InvalidArgumentError
    from trnsim.isa import MultiplyMoving

    steps = [lambda k: k]
    plain = _trace_reentered(steps, "off", monkeypatch).builder.program
    moving = [ins.moving.offset for ins in plain.instructions if type(ins) is MultiplyMoving]
    original = MultiplyMoving.check

    def failing(self, core):
        original(self, core)
        if self.moving.offset == moving[6]:  # iteration 6: stamped (0-3 and 9 are traced)
            self.fail(InvalidArgumentError("iteration 6's place"))

    monkeypatch.setattr(MultiplyMoving, "check", failing)
    with pytest.raises(InvalidArgumentError, match="iteration 6's place"):
        _trace_reentered(steps, "on", monkeypatch)
    assert stamped_iterations[0] > 0


def _scoped_runs(out, a, b, *, runs):
    """K loop runs, each accumulating into a PSUM tile freed after it (the next run's lands in
    the next bank of the ring: run 9 is back in run 1's bank, run 10 in run 2's)."""
    from trnsim.kernels.layout import kernel_scope

    _, at, bt = _k_tiles(a, b)
    for _ in range(runs):
        with kernel_scope("run"):
            acc = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
            _k_run(acc, at, bt, lambda k: k)
            nl.store(out, value=nl.copy(acc, dtype=out.dtype))


def test_a_reentered_loop_checks_each_place_once(monkeypatch):
    """Runs of a K loop that differ only in their accumulator's tile name check a stamped
    instruction once per place (`stamp._check_key`), not once per run; the program is the same."""
    from trnsim.isa import MultiplyMoving

    original, calls = MultiplyMoving.check, []

    def counting(self, core):
        calls.append(self.dst.offset)
        original(self, core)

    monkeypatch.setattr(MultiplyMoving, "check", counting)
    programs = {}
    for mode in ("off", "on"):
        calls.clear()
        monkeypatch.setenv(stamp.STAMP_ENV, mode)
        trace, _, _ = trace_kernel(lambda out, a, b: _scoped_runs(out, a, b, runs=10),
                                   [_bf16(1280, 128), _bf16(1280, 512)], (128, 512), "bfloat16")
        programs[mode] = (trace.builder.program, len(calls))
    _assert_same_programs(programs["on"][0], programs["off"][0])
    assert programs["off"][1] == 100
    # runs 1-9 check all 10 matmuls (traced or stamped at a new place); run 10 is run 2 at
    # another name: its 3 traced ones (K tiles 0, 1 and 9) are checked, its 7 stamped ones were
    assert programs["on"][1] == 93


def test_check_keys_ignore_names_not_places():
    """Two instructions that differ in tensor names, source line or label share a check key;
    one at another place, or moving by another step, does not."""
    from dataclasses import replace

    from trnsim.isa import AccessPattern, Memory, MultiplyMoving
    from trnsim.numerics import dtype

    def ap(offset, tensor, memory=Memory.SBUF, kind="bfloat16"):
        return AccessPattern(memory, dtype(kind), 128, ((1, 512),), offset, tensor=tensor)

    a = MultiplyMoving(dst=ap(0, "acc1", Memory.PSUM, "float32"), moving=ap(1024, "b1"),
                       stationary=ap(0, "a1"), accumulate=True, source="k.py:1", label="x")
    keys = {}
    key = stamp._check_key(a, {"moving": ("ap", 1024)}, keys)
    renamed = replace(a, dst=ap(0, "acc2", Memory.PSUM, "float32"), moving=ap(1024, "b2"),
                      source="k.py:2", label="y")
    assert stamp._check_key(renamed, {"moving": ("ap", 1024)}, keys) == key
    assert stamp._check_key(replace(a, moving=ap(2048, "b1")), {"moving": ("ap", 1024)},
                            keys) != key
    assert stamp._check_key(a, {"moving": ("ap", 2048)}, keys) != key


def test_an_instruction_moves_by_each_kind_of_difference():
    """`_applied` builds iteration m of a template instruction: an integer field, an access
    pattern's offset and a tuple of those each move m times their difference, equal to the
    instruction built from the moved fields."""
    from dataclasses import replace

    from trnsim.isa import AccessPattern, Memory, MultiplyMoving, RegisterMove
    from trnsim.numerics import dtype

    move = RegisterMove(dst=3, src=7)
    assert stamp._applied(stamp._plan(move, {"dst": 2, "src": -1}), 4, {}) == \
        RegisterMove(dst=11, src=3)
    ap = AccessPattern(Memory.SBUF, dtype("bfloat16"), 128, ((1, 512),), 1024, tensor="b")
    acc = AccessPattern(Memory.PSUM, dtype("float32"), 128, ((1, 512),), 0, tensor="acc")
    mm = MultiplyMoving(dst=acc, moving=ap, stationary=ap, accumulate=True)
    moved = stamp._applied(stamp._plan(mm, stamp._delta_instruction(mm, replace(
        mm, moving=replace(ap, offset=2048)))), 3, {})
    assert moved == replace(mm, moving=replace(ap, offset=1024 + 3 * 1024))
    assert stamp._apply((1, ap), stamp._delta((1, ap), (3, replace(ap, offset=0))), 2, {}) == \
        (5, replace(ap, offset=-1024))


def test_patterns_placed_alike_are_equal_but_for_offset_and_name():
    """`_placed_alike` decides what building the moved, renamed pattern and comparing it does,
    for a difference in each compared field."""
    from dataclasses import fields, replace

    from trnsim.isa import AccessPattern, Memory
    from trnsim.numerics import dtype

    ap = AccessPattern(Memory.SBUF, dtype("bfloat16"), 128, ((1, 512),), 1024, tensor="t4")
    others = [replace(ap, offset=0, tensor="t9"), replace(ap, offset=4096),
              replace(ap, memory=Memory.PSUM), replace(ap, dtype=dtype("float16")),
              replace(ap, partitions=64), replace(ap, dims=((2, 256),)),
              replace(ap, partition_start=32), replace(ap, partition_step=1)]
    for other in others:
        assert stamp._placed_alike(ap, other) == \
            (replace(ap, offset=other.offset, tensor=other.tensor) == other)
    assert [stamp._placed_alike(ap, other) for other in others] == [True, True] + [False] * 6
    # every compared field but offset and tensor is one `others` changes: a field added to
    # AccessPattern must be added to `_placed_alike` (and here)
    compared = {f.name for f in fields(AccessPattern) if f.compare} - {"offset", "tensor"}
    assert compared == {"memory", "dtype", "partitions", "dims", "partition_start",
                        "partition_step"}

# --- tiles a body allocates and frees: names and the ring ------------------------------------------
def test_a_moved_name_must_be_a_tile_the_iteration_named():
    """A tensor name moves with a stamped iteration only when it is a tile the later iteration
    made (its number among that iteration's new names, as far from the earlier one's as an
    iteration makes names); any other renaming is not a difference stamping can extend."""
    from types import SimpleNamespace

    from trnsim.isa import AccessPattern, Memory
    from trnsim.numerics import dtype

    def ap(offset, tensor):
        return AccessPattern(Memory.PSUM, dtype("float32"), 128, ((1, 512),), offset, tensor=tensor)

    later = SimpleNamespace(ids0=20, ids=5)  # the later iteration named t20..t24
    assert stamp._delta(ap(0, "t17"), ap(2048, "t22"), later) == ("apt", 2048, 5)
    assert stamp._delta(ap(0, "mm_16"), ap(0, "mm_21"), later) == ("apt", 0, 5)
    assert stamp._delta(ap(0, "t12"), ap(0, "t17"), later) is None  # made before the iteration
    assert stamp._delta(ap(0, "t18"), ap(0, "t22"), later) is None  # another place among them
    assert stamp._delta(ap(0, "t17"), ap(0, "mm_22"), later) is None
    assert stamp._delta(ap(0, "acc17"), ap(0, "acc22"), later) is None  # not a trace's number
    moved = stamp._apply(ap(0, "t22"), ("apt", 2048, 5), 3, {})
    assert moved == ap(3 * 2048, "t37")


def test_a_ring_cursor_is_compared_where_it_starts_looking():
    """`RingAllocator.search_start` maps a PSUM ring's cursor to where its next allocation
    starts looking; every allocation from a cursor and from what it gives lands at the same
    offset."""
    from trnsim.errors import LimitExceededError
    from trnsim.isa import Memory
    from trnsim.nki.trace import RingAllocator

    bank, capacity = 2048, 16384
    rng = np.random.default_rng(7)
    moved = 0
    for _ in range(300):
        ring = RingAllocator(Memory.PSUM, capacity, bank_bytes=bank)
        for k in range(int(rng.integers(0, 5))):
            try:
                ring.allocate(int(rng.choice([512, 2048, 4096, 8192])), f"t{k}", 4)
            except LimitExceededError:
                break
        for offset in list(ring.live):
            if rng.random() < 0.3:
                ring.free(offset)
        ring.cursor = int(rng.choice([0, 512, 2048, 4096, 8192, 10240, capacity]))
        normal = ring.search_start()
        moved += normal != ring.cursor
        for nbytes in (4, 512, 2048, 4096, 6144):
            offsets = []
            for cursor in (ring.cursor, normal):
                twin = RingAllocator(Memory.PSUM, capacity, bank_bytes=bank)
                twin.live, twin.cursor = dict(ring.live), cursor
                try:
                    offsets.append(twin.allocate(nbytes, "probe", 4))
                except LimitExceededError:
                    offsets.append(None)
            assert offsets[0] == offsets[1], (ring.live, ring.cursor, normal, nbytes)
    assert moved > 30  # (the cases the test is for: cursors moved)
    ring = RingAllocator(Memory.PSUM, capacity, bank_bytes=bank)
    ring.allocate(8192, "scores", 4)
    ring.cursor = capacity  # after four banks allocated and freed past the scores
    assert ring.search_start() == 8192
    ring.cursor = 512  # inside the scores, off a bank boundary: a candidate there straddles
    assert ring.search_start() == 512


def _short_runs(out, a, b, *, runs, n):
    """A loop of `n` matmuls into their own columns that the kernel enters `runs` times."""
    at = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.sbuf)
    bt = nl.ndarray((128, 512), dtype=b.dtype, buffer=nl.sbuf)
    at[...], bt[...] = nl.load(a[0:128, :]), nl.load(b[0:128, :])
    for _ in range(runs):
        acc = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
        for k in nl.affine_range(n):
            acc[:, k * 32:(k + 1) * 32] = nisa.nc_matmul(at, bt[:, k * 32:(k + 1) * 32])
        nl.store(out[:, 0:32 * n], value=nl.copy(acc[:, 0:32 * n], dtype=out.dtype))


@pytest.mark.parametrize("n, first, later", [(4, 0, 1), (5, 1, 2)])
def test_a_short_loop_stamps_from_its_earlier_run(n, first, later, monkeypatch,
                                                 stamped_iterations):
    """A loop of 4 or 5 iterations: its first run traces three, stamps what is left before the
    last (none of 4) and leaves its template; each later run traces two, stamps the rest but the
    last. Same program as tracing every iteration; check mode proves each stamp."""
    programs = {}
    for mode in ("off", "on", "check"):
        monkeypatch.setenv(stamp.STAMP_ENV, mode)
        trace, _, _ = trace_kernel(lambda out, a, b: _short_runs(out, a, b, runs=3, n=n),
                                   [_bf16(1280, 128), _bf16(1280, 512)], (128, 512), "bfloat16")
        programs[mode] = trace.builder.program
    assert stamped_iterations[0] == first + 2 * later
    _assert_same_programs(programs["on"], programs["off"])
    _assert_same_programs(programs["check"], programs["off"])


def test_a_first_iteration_may_differ_in_its_zero_claims_alone():
    """`_claimed_only`: the trace's state before and after the first iteration of a reused run
    differs in the settled lazily zeroed PSUM tiles (`Trace.zero_claims`, last in `_state`)
    and in nothing else."""
    assert stamp._claimed_only((1, 2, 3), (1, 2, 4))
    assert not stamp._claimed_only((1, 2, 3), (1, 2, 3))
    assert not stamp._claimed_only((1, 2, 3), (1, 5, 4))

    trace = trace_kernel(_resident_k, [_bf16(256, 128), _bf16(256, 512)], (128, 512),
                         "bfloat16")[0]
    trace.zero_claims = 12345
    assert stamp._state(trace)[-1] == 12345
