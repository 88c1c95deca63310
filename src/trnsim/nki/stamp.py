"""Loop-body stamping: a loop whose iterations emit the same instructions at addresses affine in
the loop index is traced for a few iterations and the rest are emitted by arithmetic.

Tracing runs a kernel's Python once per loop iteration (`trnsim.nki.trace`); a lowered model's
matmuls are tens of thousands of identical K-tile iterations that differ only in the byte offsets
their operands start at. `stamped` traces iterations until three consecutive ones agree: the same
instruction types and fields, with every difference an access pattern's byte offset or an integer
field changing by the same amount from the first to the second as from the second to the third;
the same nl/nisa call count, tile-name count and tile-use record (relative to the iteration's
first call); no allocation or freeing that outlives the iteration, lazy PSUM zeroing, result
reuse, warning or pending result in between (`_state`; a ring allocator's cursor compared where
its next allocation starts looking, `RingAllocator.search_start`). A body may allocate a tile it
frees before the iteration ends (a PSUM bank per transpose, cycling through the banks left free): an operand's
tensor name may then differ too, when it is a tile the iteration named, at the same place
among its new names (`_fresh`: stamped iteration m names it m iterations' names on). The
iterations up to the last are then stamped from the third one's
instructions plus multiples of those differences, each checked and recorded as emission would
(`Trace.note_accesses`: write versions, PSUM spans, tile uses) with the call and tile-name counters
advanced as the body would. A check reads fields, never names: a stamped instruction is checked
once per place (`_check_key`), not again in a later run that differs only in tile names. The
last iteration is traced again, so the loop's Python leaves its variables as the plain loop does
and a last-iteration difference (a partial K tile) is traced.

A loop the kernel enters again (a matmul's K loop, once per output block) reuses the template of
its previous run at the same code location (`Trace.stamp_templates`): two traced iterations that
agree with each other as that template's three did (the same per-instruction differences, calls,
tile names and tile uses) stamp the rest. The first of the two may be the iteration that started
the run's accumulation (it settled a lazily zeroed PSUM tile and so set other matmul flags,
`_reused_after_first`): its moved fields must step as the template's, and any other field it
differs in must hold the template's value in the second. It trusts one difference of this run
where a first run needs two; `TRNSIM_STAMP=check` proves it as it proves a first run's
template. So a loop of as few as `MIN_REUSED` iterations is recorded: its first run leaves a
template even when it is too short to stamp from its own.

The body's own Python is screened before any stamping (`_screen_code`): no branch (an ``if`` on
the index could go another way in a stamped iteration), no loop-carried local (read before written
in the body), no global, closure or attribute store, no mutating container method (``append`` ...),
and the scalar attributes of objects the frame holds (``self.count``) and its containers' sizes
unchanged from one iteration to the next. What the screen cannot see is not detected: a function
the body calls that branches on the index in a middle iteration only, mutates a module global or
assigns a Python list by index. NKI traces an affine/sequential loop's body once, with a symbolic
index, so such a body is not one NKI would compile per iteration either; `TRNSIM_STAMP=off` traces
every iteration.

The trace computes no values (the simulator executes the instructions), so stamping only has to
emit the same instructions; `TRNSIM_STAMP=check` traces every iteration and compares each with
what stamping would have emitted, raising `StampMismatchError` at the first differing field.
"""

from __future__ import annotations

import dataclasses
import dis
import os
import sys
from collections.abc import Callable, Iterator
from functools import cache
from typing import TYPE_CHECKING

from trnsim.errors import InvalidArgumentError, TrnsimError
from trnsim.isa import AccessPattern, Instruction
from trnsim.isa.access import interned

if TYPE_CHECKING:
    from trnsim.nki.trace import Trace

STAMP_ENV = "TRNSIM_STAMP"
# the shortest loop recorded: two traced iterations that agree with the template of an earlier
# run at its code location, one stamped, one traced last (a first run traces three before it
# stamps; a short one leaves its template for the next: a kernel's loop entered once per block)
MIN_REUSED = 4
MAX_MISSES = 3  # windows of three iterations that did not agree before a loop is traced plainly
_MUTATORS = frozenset({"append", "extend", "insert", "pop", "popitem", "remove", "clear", "update",
                       "setdefault", "add", "discard", "sort", "reverse", "__setitem__"})
_REJECTED_OPS = frozenset({"STORE_GLOBAL", "STORE_DEREF", "STORE_ATTR", "DELETE_ATTR",
                           "DELETE_GLOBAL", "DELETE_DEREF", "DELETE_SUBSCR", "DELETE_FAST",
                           "YIELD_VALUE", "RETURN_VALUE", "RETURN_CONST", "IMPORT_NAME",
                           "SETUP_FINALLY", "BEFORE_WITH", "RAISE_VARARGS", "STORE_NAME"})


class StampMismatchError(TrnsimError):
    """A stamped loop iteration differs from the traced one (``TRNSIM_STAMP=check``): a stamping
    bug or a body the screen let through that is not affine."""


def stamp_mode() -> str:
    """`TRNSIM_STAMP`: ``on`` (default), ``off`` (trace every iteration) or ``check``."""
    mode = os.environ.get(STAMP_ENV, "on")
    if mode not in ("on", "off", "check"):
        raise InvalidArgumentError(f"{STAMP_ENV}={mode!r}: expected on, off or check")
    return mode


def stamped_range(*args: int) -> Iterator[int]:
    """range(*args) for a kernel's Python loop that opens no scope, stamped while traced."""
    from trnsim.nki.trace import current_trace

    trace = current_trace(required=False)
    if trace is None:
        return iter(range(*args))
    return stamped(trace, range(*args), depth=1)


def stamped(trace: Trace, values: range, enter: Callable[[int, int], None] | None = None,
            exit_: Callable[[], None] | None = None, *, depth: int = 2) -> Iterator[int]:
    """Iterate `values` as a loop of the kernel traced by `trace`; `enter(i, v)` / `exit_()`
    bracket each iteration (a loop scope). `depth`: frames between this generator and the
    kernel's loop (the frame whose body is screened)."""
    n = len(values)
    # (a spilling trace reloads tiles where they are used: not replayed)
    stampable = trace.stampable and trace.spiller is None
    mode = stamp_mode() if n >= MIN_REUSED and stampable else "off"
    frame = sys._getframe(depth) if mode != "off" else None
    carried = _screen_code(frame.f_code, frame.f_lasti) if frame is not None else None
    if carried is None:
        mode = "off"
    site = (frame.f_code, frame.f_lasti) if frame is not None else None
    history: list[_Iteration] = []
    misses, i = 0, 0
    while i < n:
        recording = mode != "off" and misses < MAX_MISSES
        template = None
        if recording:
            template = _template(history) or _reused(trace.stamp_templates.get(site), history)
            if template is not None:
                trace.stamp_templates[site] = template
                if i == n - 1:  # (the last iteration is traced: the template is for later runs)
                    template = None
        if template is None and len(history) == 3:
            misses += 1
        if template is not None and mode == "on":
            _stamp(trace, template, i, n - 1, history[-1].index)
            history.clear()
            i = n - 1
            continue
        record = _Iteration(trace, i, frame, carried) if recording else None
        if enter is not None:
            enter(i, values[i])
        try:
            yield values[i]
        except BaseException:
            trace.pending = None
            if record is not None:
                record.abandon()
            raise
        finally:
            if exit_ is not None:
                exit_()
        if record is not None:
            record.finish()
            if template is not None:  # check mode: the traced iteration against its stamp
                _compare(template, record, history[-1].index)
            else:
                history.append(record)
                del history[:-3]
        i += 1


@dataclasses.dataclass
class _Iteration:
    """What one traced iteration emitted and did to the trace."""

    trace: Trace
    index: int
    frame: object
    carried: tuple[str, ...]

    def __post_init__(self) -> None:
        trace = self.trace
        self.outer_log = trace.stamp_log
        self.log: list[tuple] = []
        trace.stamp_log = self.log
        self.calls0 = trace.calls
        self.ids0 = trace.tile_ids
        self.first = len(trace.builder.program.instructions)
        self.state0 = _state(trace)
        self.locals0 = _frame_state(self.frame, self.carried)
        self.valid = True

    def abandon(self) -> None:
        self.trace.stamp_log = self.outer_log

    def finish(self) -> None:
        trace = self.trace
        self.abandon()
        if self.outer_log is not None:
            self.outer_log.extend(self.log)
        self.instructions = trace.builder.program.instructions[self.first:]
        self.calls = trace.calls - self.calls0
        self.ids = trace.tile_ids - self.ids0
        self.events = [(e[0], e[1] - self.calls0, *e[2:]) for e in self.log]
        self.valid = self.valid and self.state0 == _state(trace) and \
            self.locals0 == _frame_state(self.frame, self.carried)


@dataclasses.dataclass
class _Template:
    last: _Iteration  # the third agreeing iteration
    deltas: list  # per instruction: {field: delta} (see `_delta`)


def _template(history: list[_Iteration]) -> _Template | None:
    if len(history) < 3 or not all(r.valid for r in history):
        return None
    a, b, c = history
    if not _alike(a, b, c):
        return None
    deltas = []
    for x, y, z in zip(a.instructions, b.instructions, c.instructions, strict=True):
        d1, d2 = _delta_instruction(x, y, b), _delta_instruction(y, z, c)
        if d1 is None or d1 != d2:
            return None
        deltas.append(d1)
    return _Template(c, deltas)


def _alike(a: _Iteration, b: _Iteration, c: _Iteration) -> bool:
    """Iterations a and b found the trace and the loop's Python alike, and a, b and c emitted as
    many instructions with the same calls, tile names and tile-use record."""
    return (len(a.instructions) == len(b.instructions) == len(c.instructions)
            and a.calls == b.calls == c.calls and a.ids == b.ids == c.ids
            and a.events == b.events == c.events and a.state0 == b.state0
            and a.locals0 == b.locals0)


def _reused(earlier: _Template | None, history: list[_Iteration]) -> _Template | None:
    """The template of an earlier run of the same loop (`earlier`) moved to this run: its last
    two traced iterations agree with each other as the earlier run's three did, with the same
    per-instruction differences, calls, tile names and tile-use record (one traced iteration
    fewer per run of a loop the kernel enters many times, e.g. a matmul's K loop per output
    block)."""
    if earlier is None or len(history) < 2:
        return None
    a, b = history[-2:]
    if not b.valid:
        return None
    if a.valid and _alike(a, b, earlier.last):
        for x, y, want in zip(a.instructions, b.instructions, earlier.deltas, strict=True):
            if _delta_instruction(x, y, b) != want:
                return None
        return _Template(b, earlier.deltas)
    return _reused_after_first(earlier, a, b)


def _reused_after_first(earlier: _Template, a: _Iteration, b: _Iteration) -> _Template | None:
    """`_reused` where iteration a started the run's accumulation: it settled the lazy zeros of
    a PSUM tile (`Trace._claim_zeros`, the trace's only change between a and b) and so emitted
    its first matmuls with other flags. The moved fields must still step by the earlier run's
    differences from a to b; a field the differences do not move may differ in a only where b
    holds the earlier template's very value (a flag that is constant from b on in the earlier
    run as in this one). One traced iteration fewer per run of a K loop into a zeroed
    accumulator."""
    last = earlier.last
    if not (_alike(b, b, last) and len(a.instructions) == len(b.instructions)
            and a.calls == b.calls and a.ids == b.ids and a.events == b.events
            and a.locals0 == b.locals0 and _claimed_only(a.state0, b.state0)):
        return None
    for x, y, z, want in zip(a.instructions, b.instructions, last.instructions, earlier.deltas,
                             strict=True):
        if not (type(x) is type(y) is type(z)):
            return None
        for name in _init_fields(type(x)):
            u, v = getattr(x, name), getattr(y, name)
            if name in want:
                if _delta(u, v, b) != want[name]:
                    return None
            elif u != v and (v != getattr(z, name) or type(v) is not type(getattr(z, name))):
                return None
    return _Template(b, earlier.deltas)


def _claimed_only(before: tuple, after: tuple) -> bool:
    """`_state` tuples equal but for one more settled lazily zeroed PSUM tile (`zero_claims`)."""
    return before[:-1] == after[:-1] and before[-1] < after[-1]


def _stamp(trace: Trace, template: _Template, start: int, stop: int, base: int) -> None:
    """Emit iterations start..stop-1 from the template (iteration `base`): each instruction
    checked (`_checked_key`) and recorded (`Trace.note_emitted`) as emission does, the call and
    tile-name counters advanced as the body's calls would."""
    last = template.last
    core = trace.core
    inners = [getattr(ins, "inner", ins) for ins in last.instructions]
    serials = [trace._serials((*inner.reads(), *inner.writes())) for inner in inners]
    wrapped = [inner is not ins for inner, ins in zip(inners, last.instructions, strict=True)]
    plans = [_plan(ins, delta) for ins, delta in zip(last.instructions, template.deltas, strict=True)]
    keys = [_check_key(ins, delta, trace.stamp_keys) for ins, delta in
            zip(last.instructions, template.deltas, strict=True)]
    instructions = trace.builder.program.instructions
    checked, patterns, note = trace.stamp_checked, trace.patterns, trace.note_emitted
    events = [(event[0] == "i", event[1], event[2] if event[0] == "u" else None)
              for event in last.events]
    # a call beginning only counts while no tile waits to be freed after its last use and
    # nothing spills (`Trace.begin_call`; a stamped iteration allocates nothing)
    counting = trace.spiller is None and not trace._free_at
    for i in range(start, stop):
        m = i - base
        calls0 = trace.calls
        k = 0
        for emitted, call, used in events:
            if counting:
                if trace.calls < calls0 + call:
                    trace.calls = calls0 + call
            else:
                while trace.calls < calls0 + call:
                    trace.begin_call()
            if not emitted:
                trace.note_used(used)
                continue
            instruction = _applied(plans[k], m, patterns)
            key = keys[k]
            if key is None:
                instruction.check(core)
            elif (key, m) not in checked:
                instruction.check(core)
                checked.add((key, m))
            note(serials[k], (instruction.inner if wrapped[k] else instruction).writes())
            instructions.append(instruction)
            k += 1
        if counting:
            trace.calls = max(trace.calls, calls0 + last.calls)
        while trace.calls < calls0 + last.calls:
            trace.begin_call()
        trace.tile_ids += last.ids


def _check_key(instruction, delta: dict, keys: dict) -> int | None:
    """A number for what `instruction.check` sees of the template instruction and its per-
    iteration `delta` (None: a field that is not hashable, checked every time). A check is a
    function of the fields alone and never reads a source line, label or tensor name (those
    only word its error), so iteration m of two templates with equal numbers passes or fails
    alike: (number, m) in `Trace.stamp_checked` skips the check (a matmul's K loop re-entered
    for the next output block differs only in its accumulator's name)."""
    fields = tuple(_nameless(getattr(instruction, name)) for name in _init_fields(type(instruction))
                   if name not in ("source", "label"))
    key = (type(instruction), fields, tuple(delta.items()))
    try:
        return keys.setdefault(key, len(keys))
    except TypeError:
        return None


def _nameless(value):
    """A field value without tensor names (an access pattern as its placement)."""
    if type(value) is AccessPattern:
        return (value.memory, value.dtype, value.partitions, value.dims, value.offset,
                value.partition_start, value.partition_step)
    if type(value) is tuple:
        return tuple(_nameless(v) for v in value)
    return value


def _stamped_instructions(template: _Template, m: int, patterns: dict) -> list:
    """Iteration base + m of the template, its moved operands the trace's one pattern of their
    fields (`AccessPattern.moved_in`: a K loop's stationary operands repeat across its runs)."""
    return [_applied(_plan(ins, delta), m, patterns)
            for ins, delta in zip(template.last.instructions, template.deltas, strict=True)]


def _compare(template: _Template, record: _Iteration, base: int) -> None:
    """Check mode: the traced iteration `record` equals its stamp, field by field."""
    m = record.index - base
    where = f"stamped iteration {record.index} (from iteration {base})"
    last = template.last
    if not record.valid:
        raise StampMismatchError(f"{where}: the traced iteration changed the trace's state or the "
                                 f"loop's Python state as the template iterations did not")
    for name, got, want in (("instructions", len(record.instructions), len(last.instructions)),
                            ("nl/nisa calls", record.calls, last.calls),
                            ("tile names", record.ids, last.ids)):
        if got != want:
            raise StampMismatchError(f"{where}: {name} traced {got}, stamped {want}")
    if record.events != last.events:
        raise StampMismatchError(f"{where}: tile-use record differs")
    stamped_ = _stamped_instructions(template, m, record.trace.patterns)
    for j, (traced, stamp) in enumerate(zip(record.instructions, stamped_, strict=True)):
        if type(traced) is not type(stamp):
            raise StampMismatchError(f"{where}, instruction {j}: traced {traced.name}, stamped "
                                     f"{stamp.name}")
        for name in _init_fields(type(traced)):
            a, b = getattr(traced, name), getattr(stamp, name)
            if a != b or type(a) is not type(b):
                raise StampMismatchError(f"{where}, instruction {j} ({traced.name}) field "
                                         f"{name!r}: traced {a!r}, stamped {b!r}")


# --- instruction arithmetic ----------------------------------------------------------------------
@cache
def _init_fields(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls) if f.init)


def _delta_instruction(x, y, later: _Iteration | None = None) -> dict | None:
    """{field: delta} taking instruction x to y, the same instruction of the next iteration
    `later`, or None when y is not x moved."""
    if type(x) is not type(y):
        return None
    deltas = {}
    for name in _init_fields(type(x)):
        a, b = getattr(x, name), getattr(y, name)
        if a is b:
            continue
        d = _delta(a, b, later)
        if d is None:
            return None
        if d != 0:
            deltas[name] = d
    return deltas


def _delta(a, b, later: _Iteration | None = None):
    """0 for equal values; an int for integers; ("ap", bytes) for an access pattern whose
    offset alone moved; ("apt", bytes, names) for one on a tile the later iteration named
    (`_fresh`); ("seq", deltas) for a tuple of those; None otherwise."""
    if type(a) is not type(b):
        return None
    if a == b:
        return 0
    if type(a) is int:
        return b - a
    if type(a) is AccessPattern:
        if a.tensor != b.tensor:
            names = _fresh(a.tensor, b.tensor, later)
            if names is None or not _placed_alike(a, b):
                return None
            return ("apt", b.offset - a.offset, names)
        if a.offset != b.offset and _placed_alike(a, b):
            return ("ap", b.offset - a.offset)
        return None
    if type(a) is tuple and len(a) == len(b):
        parts = tuple(_delta(u, v, later) for u, v in zip(a, b, strict=True))
        return None if any(p is None for p in parts) else ("seq", parts)
    return None


def _placed_alike(a: AccessPattern, b: AccessPattern) -> bool:
    """a equals b but for its offset and tensor name (what ``dataclasses.replace(a, offset=
    b.offset, tensor=b.tensor) == b`` decides, without building the pattern)."""
    return (a.dims == b.dims and a.partitions == b.partitions and a.memory == b.memory
            and a.dtype == b.dtype and a.partition_start == b.partition_start
            and a.partition_step == b.partition_step)


def _fresh(a: str, b: str, later: _Iteration | None) -> int | None:
    """The difference of the numbers of tile names a and b (`Trace._new_tile_id`: ``t<n>``, or
    a pending result's ``<label>_<n>``), when b is a tile the iteration `later` named (its
    number among the tile names that iteration made) and a the tile at the same place among
    the names of the iteration before: a fresh tile per iteration, as a PSUM bank allocated
    and freed in the body is. Then the difference is the names an iteration makes, and
    stamped iteration m names its tile m such differences on. None otherwise (a name the loop
    does not make: stamping cannot tell what it would be), or without `later`."""
    stem_a, number_a = _numbered(a)
    stem_b, number_b = _numbered(b)
    if later is None or stem_a is None or stem_a != stem_b or not \
            later.ids0 <= number_b < later.ids0 + later.ids or number_b - number_a != later.ids:
        return None
    return later.ids


def _numbered(name: str) -> tuple[str | None, int]:
    """(stem, number) of a tile name the trace numbered, else (None, 0)."""
    stem = name.rstrip("0123456789")
    if stem == name or not (stem == "t" or stem.endswith("_")):
        return None, 0
    return stem, int(name[len(stem):])


def _apply(value, delta, m: int, patterns: dict):
    if delta == 0:
        return value
    if type(delta) is int:
        return value + m * delta
    if delta[0] == "ap":
        return value.moved_in(patterns, m * delta[1])
    if delta[0] == "apt":
        return _renamed_in(value, patterns, m * delta[1], m * delta[2])
    return tuple(_apply(v, d, m, patterns) for v, d in zip(value, delta[1], strict=True))


def _renamed_in(ap: AccessPattern, patterns: dict, by: int, names: int) -> AccessPattern:
    """`ap` moved `by` bytes, on the tile numbered `names` after its own (`_fresh`)."""
    stem, number = _numbered(ap.tensor)
    return interned(patterns, (ap.memory, ap.dtype, ap.partitions, ap.dims, ap.offset + by,
                               ap.partition_start, ap.partition_step, f"{stem}{number + names}"))


def _plan(ins, deltas: dict) -> tuple:
    """How to build `ins` moved by multiples of `deltas` (`_applied`): its class, whether its
    ``__post_init__`` must run, its fields and the moved ones."""
    cls = type(ins)
    if cls.__post_init__ is not Instruction.__post_init__:
        return cls, False, {name: getattr(ins, name) for name in _init_fields(cls)}, \
            tuple(deltas.items())
    return cls, True, ins.__dict__, tuple(deltas.items())  # (engine already normalised)


def _applied(plan: tuple, m: int, patterns: dict):
    cls, plain, base, moved = plan
    if not plain:
        fields = dict(base)
        for name, delta in moved:
            fields[name] = _apply(fields[name], delta, m, patterns)
        return cls(**fields)
    new = object.__new__(cls)
    fields = new.__dict__
    fields.update(base)
    moves = getattr(patterns, "moves", None)
    for name, delta in moved:
        if type(delta) is tuple and delta[0] == "ap":  # (the common case, without a call)
            ap, by = base[name], m * delta[1]
            # (`AccessPattern.moved_in`'s look-up of a move made before, inline)
            made = moves.get((id(ap), by)) if moves is not None else None
            fields[name] = made[1] if made is not None and made[0] is ap else \
                ap.moved_in(patterns, by)
        else:
            fields[name] = _apply(base[name], delta, m, patterns)
    return new


# --- trace state ---------------------------------------------------------------------------------
def _state(trace: Trace) -> tuple:
    """What a stampable iteration leaves as it found it (beyond what its instructions record)."""
    invariants = trace.invariants
    return (trace.sbuf.search_start(), trace.sbuf.peak, len(trace.sbuf.live),
            trace.psum.search_start(),
            trace.psum.peak, len(trace.psum.live), len(trace.last_use), len(trace.constants),
            len(invariants), next(reversed(invariants), None) if invariants else None,
            len(trace.hbm_tiles), trace.output_cursor, len(trace.compiler_psum),
            len(trace._warned), len(trace.written_inputs), len(trace._loop_placements),
            trace.spiller is None, trace.pending is None, len(trace.scopes),
            len(trace.builder.program.tensors), trace.exact_int, trace.label, trace.source,
            trace.invariants_prune_at, trace.zero_claims)  # (zero_claims last: `_claimed_only`)


def _frame_state(frame, carried: tuple[str, ...]) -> tuple:
    """The scalar attributes of the objects the loop's frame holds, its containers' sizes and the
    objects its loop-carried locals hold (a body's calls mutating them, or ``x += 1`` on a local,
    make iterations differ in what the trace cannot see; ``acc += matmul`` keeps the tile)."""
    from trnsim.nki.tile import Tile

    state = []
    f_locals = frame.f_locals
    for name, value in f_locals.items():
        if name in carried:
            state.append((name, id(value), type(value), getattr(value, "name", None)))
        elif type(value) in _PLAIN:
            continue  # (no attributes, no size: the common locals decided without the tests)
        elif isinstance(value, (list, dict, set)):
            state.append((name, len(value)))
        elif not isinstance(value, (Tile, type)) and hasattr(value, "__dict__") and \
                not callable(value):
            state.append((name, tuple([(k, v) for k, v in vars(value).items()
                                       if type(v) in _SCALAR_ATTRIBUTES])))
    return tuple(state)


_PLAIN = frozenset({int, float, bool, str, tuple, range, slice, type(None)})
_SCALAR_ATTRIBUTES = frozenset({int, float, bool, str})


@cache
def _screen_code(code, lasti: int) -> tuple[str, ...] | None:
    """The locals carried from one iteration to the next (read before written) of the loop whose
    FOR_ITER is at `lasti` in `code`, or None when its body has Python effects stamping would
    skip (see the module doc)."""
    instructions = list(dis.get_instructions(code))
    loop = next((k for k, ins in enumerate(instructions)
                 if ins.offset == lasti and ins.opname == "FOR_ITER"), None)
    if loop is None:
        return None
    end = instructions[loop].argval
    body = [ins for ins in instructions[loop + 1:] if ins.offset < end]
    if not body or body[0].opname != "STORE_FAST":
        return None  # (a loop target that is not one plain local)
    stored: set[str] = {body[0].argval}
    carried: set[str] = set()
    for ins in body[1:]:
        if ins.opname in _REJECTED_OPS or "JUMP_IF" in ins.opname or \
                ins.opname.startswith("POP_JUMP"):
            return None  # (a branch in the body may go the other way in a stamped iteration)
        if ins.opname in ("LOAD_ATTR", "LOAD_METHOD") and ins.argval in _MUTATORS:
            return None
        if ins.opname in ("LOAD_FAST", "LOAD_FAST_CHECK"):
            if ins.argval not in stored and _stored_in(body, ins.argval):
                carried.add(ins.argval)
        elif ins.opname == "STORE_FAST":
            stored.add(ins.argval)
    return tuple(sorted(carried))


def _stored_in(body, name: str) -> bool:
    return any(ins.opname == "STORE_FAST" and ins.argval == name for ins in body)
