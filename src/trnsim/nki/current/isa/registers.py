"""Virtual registers: nisa.register_alloc / register_move / register_load / register_store.

A `VirtualRegister` names one of the core's sequencer registers (`trnsim.isa.control`). Its
value exists only when the kernel runs, so Python cannot branch on it or convert it to an int
while tracing (as with AWS's tracer front end): use it as a loop bound (`nl.fori_loop`,
`nl.while_loop`), a scalar offset (``t.ap(..., scalar_offset=reg)``), or store it to memory.
trnsim also lets kernels combine registers with + - * // % and comparisons, each one register
ALU instruction (a trnsim extension the sequencers' ALU supports).
"""

from __future__ import annotations

from trnsim.errors import InvalidArgumentError
from trnsim.isa import RegisterAlu, RegisterLoad, RegisterMove, RegisterStore, register_ref
from trnsim.nki.current.isa.calls import nisa_call
from trnsim.nki.current.tensor import NKIObject
from trnsim.nki.operands import tile_arg
from trnsim.nki.tile import Tile
from trnsim.nki.trace import current_trace


class VirtualRegister(NKIObject):
    """A register of the core's sequencers (allocated with nisa.register_alloc)."""

    def __init__(self, number: int) -> None:
        self.number = int(number)

    @property
    def ref(self) -> str:
        return register_ref(self.number)

    def __repr__(self) -> str:
        return f"VirtualRegister(r{self.number})"

    def __bool__(self) -> bool:
        raise InvalidArgumentError(
            "a register's value is only known when the kernel runs: Python `if`/`while` cannot test "
            "it while tracing; use nl.while_loop(reg, body) or nl.fori_loop(lo, reg, body)")

    def __int__(self) -> int:
        raise InvalidArgumentError("a register's value is only known when the kernel runs; use it as "
                                   "a loop bound or a scalar_offset, not as a Python int")

    __index__ = __int__

    def _alu(self, op: str, other, reverse: bool = False) -> VirtualRegister:
        trace = current_trace()
        operand = other.ref if isinstance(other, VirtualRegister) else int(other)
        a, b = (operand, self.ref) if reverse else (self.ref, operand)
        result = VirtualRegister(trace.new_register())
        trace.emit(RegisterAlu, dst=result.number, op=op, a=a, b=b)
        return result

    def __add__(self, other):
        return self._alu("add", other)

    def __radd__(self, other):
        return self._alu("add", other, True)

    def __sub__(self, other):
        return self._alu("subtract", other)

    def __rsub__(self, other):
        return self._alu("subtract", other, True)

    def __mul__(self, other):
        return self._alu("multiply", other)

    def __rmul__(self, other):
        return self._alu("multiply", other, True)

    def __floordiv__(self, other):
        return self._alu("divide", other)

    def __mod__(self, other):
        return self._alu("mod", other)

    def __lt__(self, other):
        return self._alu("less", other)

    def __le__(self, other):
        return self._alu("less_equal", other)

    def __gt__(self, other):
        return self._alu("greater", other)

    def __ge__(self, other):
        return self._alu("greater_equal", other)

    def __eq__(self, other):  # type: ignore[override]
        return self._alu("equal", other)

    def __ne__(self, other):  # type: ignore[override]
        return self._alu("not_equal", other)

    __hash__ = object.__hash__


def operand_ref(value, what: str) -> int | str:
    """A loop bound or register source: an int immediate or a register reference."""
    if isinstance(value, VirtualRegister):
        return value.ref
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            return int(value)
        except (TypeError, ValueError):
            raise InvalidArgumentError(f"{what} must be an int or a VirtualRegister; got "
                                       f"{type(value).__name__}") from None
    return value


def as_register(value, what: str) -> int:
    """A register number for a scalar offset: a VirtualRegister, or a one-element tensor that is
    loaded into a fresh register (as the DGE reads it)."""
    if isinstance(value, VirtualRegister):
        return value.number
    if isinstance(value, Tile):
        register = VirtualRegister(current_trace().new_register())
        register_load(register, value)
        return register.number
    raise InvalidArgumentError(f"{what} must be a VirtualRegister or a [1, 1] tensor; got "
                               f"{type(value).__name__}")


def register_alloc(x: int | None = None) -> VirtualRegister:
    """A new register, optionally initialised with an immediate."""
    trace = current_trace()
    register = VirtualRegister(trace.new_register())
    if x is not None:
        register_move(register, x)
    return register


@nisa_call("nisa.register_move")
def register_move(dst, src) -> None:
    _check_register(dst, "dst")
    current_trace().emit(RegisterMove, dst=dst.number, src=operand_ref(src, "src"))


@nisa_call("nisa.register_load")
def register_load(dst, src) -> None:
    _check_register(dst, "dst")
    tile = tile_arg(src, "register_load src")
    current_trace().emit(RegisterLoad, dst=dst.number, src=tile.access())


@nisa_call("nisa.register_store")
def register_store(dst, src) -> None:
    _check_register(src, "src")
    tile = tile_arg(dst, "register_store dst")
    trace = current_trace()
    trace._check_writable(tile)
    trace.emit(RegisterStore, dst=tile.access(), src=src.number)


def _check_register(value, what: str) -> None:
    if not isinstance(value, VirtualRegister):
        raise InvalidArgumentError(f"{what} must be a VirtualRegister from nisa.register_alloc; got "
                                   f"{type(value).__name__}")
