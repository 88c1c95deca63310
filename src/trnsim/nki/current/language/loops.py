"""Loops and program structure in nki 0.3+.

- `affine_range`, `sequential_range`, `static_range`: Python-unrolled loops (the 0.6 docs call
  them aliases of range()); each iteration is a scope whose tensors are freed when it ends.
- `fori_loop`, `while_loop`, `dynamic_range`: *dynamic* loops. The body is traced once and the
  loop is emitted as sequencer instructions (`trnsim.isa.control`): the induction variable lives in
  a register, a `Branch` tests it against the bound (an immediate or a register) and a `Jump`
  closes the loop, so the simulator executes the body as many times as the registers say.
  Tensors allocated in the body are the same buffers in every iteration (no multi-buffering).
- `program_id`, `num_programs`, `program_ndim`: the LNC launch (``kernel[lnc]``).
"""

from __future__ import annotations

from contextlib import contextmanager

from trnsim.errors import InvalidArgumentError
from trnsim.isa import Branch, Jump, RegisterAlu, RegisterMove
from trnsim.nki.current.isa.registers import VirtualRegister, operand_ref
from trnsim.nki.language import control as legacy
from trnsim.nki.trace import current_trace, user_location


def _range_args(start, stop, step) -> tuple[int, ...]:
    return (int(start),) if stop is None else (int(start), int(stop), int(step))


def affine_range(start, stop=None, step=1):
    return legacy._scoped_range("affine_range", _range_args(start, stop, step))


def sequential_range(start, stop=None, step=1):
    return legacy._scoped_range("sequential_range", _range_args(start, stop, step))


def static_range(start, stop=None, step=1):
    return range(*_range_args(start, stop, step))


program_id = legacy.program_id
program_ndim = legacy.program_ndim


def num_programs(axes=None) -> int:
    return legacy.num_programs(axes)


@contextmanager
def no_reorder():
    """Keep program order in the block. trnsim's engines already run each stream in program
    order, so this only forbids dynamic loops inside, as NKI does."""
    trace = current_trace()
    trace.no_reorder_depth += 1
    try:
        yield
    finally:
        trace.no_reorder_depth -= 1


class _Loop:
    """Emission of one dynamic loop: a test at the top, the body, a jump back."""

    def __init__(self, kind: str) -> None:
        self.trace = current_trace()
        if self.trace.no_reorder_depth:
            raise InvalidArgumentError(f"nl.{kind} is not allowed inside nl.no_reorder()")
        self.kind = kind
        self.source = user_location()
        self.trace.flush()

    def emit(self, cls, **fields):
        trace = self.trace
        trace.label, trace.source = f"nl.{self.kind}", self.source
        try:
            return trace.emit_now(cls, **fields)
        finally:
            trace.label = trace.source = None

    def test(self, **fields) -> int:
        """Emit the loop's exit test (target patched by `close`); returns its index."""
        self.test_index = len(self.trace.builder.program.instructions)
        self.emit(Branch, target=-1, **fields)
        return self.test_index

    @contextmanager
    def body(self):
        trace = self.trace
        trace.enter(-1, 0, f"nl.{self.kind} body", self.source)
        try:
            yield
        except BaseException:
            trace.pending = None
            raise
        finally:
            trace.exit()

    def close(self) -> None:
        trace = self.trace
        trace.flush()
        self.emit(Jump, target=self.test_index)
        instructions = trace.builder.program.instructions
        test = instructions[self.test_index]
        instructions[self.test_index] = type(test)(**{**_fields(test), "target": len(instructions)})


def _fields(instruction) -> dict:
    from dataclasses import fields

    return {f.name: getattr(instruction, f.name) for f in fields(instruction)}


def fori_loop(lower, upper, body_fun, step: int = 1) -> None:
    """body_fun(i) for i in range(lower, upper, step), on the device: `lower` and `upper` may be
    registers; `i` is a register holding the iteration value (a copy: writing it has no effect)."""
    step = int(step)
    if step <= 0:
        raise InvalidArgumentError(f"nl.fori_loop: step must be a positive compile-time int; got {step}")
    loop = _Loop("fori_loop")
    counter = loop.trace.new_register()
    loop.emit(RegisterMove, dst=counter, src=operand_ref(lower, "lower"))
    loop.test(a=f"r{counter}", cmp="greater_equal", b=operand_ref(upper, "upper"))
    with loop.body():
        value = VirtualRegister(loop.trace.new_register())
        loop.emit(RegisterMove, dst=value.number, src=f"r{counter}")
        body_fun(value)
        loop.trace.flush()
        loop.emit(RegisterAlu, dst=counter, op="add", a=f"r{counter}", b=step)
    loop.close()


def while_loop(init, body_fun) -> None:
    """r = init; while r != 0: r = body_fun(r) — on the device, testing the register each time."""
    if not isinstance(init, VirtualRegister):
        raise InvalidArgumentError("nl.while_loop: init must be a VirtualRegister "
                                   "(nisa.register_alloc)")
    loop = _Loop("while_loop")
    condition = init.number
    loop.test(a=f"r{condition}", cmp="equal", b=0)
    with loop.body():
        value = VirtualRegister(loop.trace.new_register())
        loop.emit(RegisterMove, dst=value.number, src=f"r{condition}")
        result = body_fun(value)
        if not isinstance(result, VirtualRegister):
            raise InvalidArgumentError("nl.while_loop: the body must return the next condition "
                                       "register")
        loop.trace.flush()
        loop.emit(RegisterMove, dst=condition, src=result.ref)
    loop.close()


def dynamic_range(start, stop=None, step: int = 1):
    """`for i in nl.dynamic_range(n):` — a dynamic loop written as a Python for (deprecated in
    0.6 in favour of nl.fori_loop): the body is traced once, with `i` a register."""
    lower, upper = (0, start) if stop is None else (start, stop)
    if int(step) <= 0:
        raise InvalidArgumentError("nl.dynamic_range: step must be a positive compile-time int")
    loop = _Loop("dynamic_range")
    counter = loop.trace.new_register()
    loop.emit(RegisterMove, dst=counter, src=operand_ref(lower, "start"))
    loop.test(a=f"r{counter}", cmp="greater_equal", b=operand_ref(upper, "stop"))
    with loop.body():
        yield VirtualRegister(counter)
        loop.trace.flush()
        loop.emit(RegisterAlu, dst=counter, op="add", a=f"r{counter}", b=int(step))
    loop.close()
