"""Fused step programs (epilogues, element-wise chains, reduce prologues) as NKI tile code.

A `Program` from `trnsim.compiler.fused` reads ``acc`` (a kernel's accumulator block), ``in<k>``
(the block of operand k) and ``s<j>`` (earlier steps). `to_callable` turns it into the function
the kernel library calls on on-chip tiles; each step becomes one ScalarE activation or VectorE
op. Intermediates stay fp32 (the engines' precision); only the kernel's final store rounds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trnsim.compiler.errors import IRError
from trnsim.compiler.fused import Program, Step
from trnsim.compiler.lowering import integer_steps
from trnsim.nki import language as nl
from trnsim.nki.tile import Tile

_ACTIVATIONS = {"exp": "exp", "log": "log", "sqrt": "sqrt", "rsqrt": "rsqrt", "reciprocal":
                "reciprocal", "tanh": "tanh", "sigmoid": "sigmoid", "silu": "silu", "erf": "erf",
                "sin": "sin", "cos": "cos", "abs": "abs", "sign": "sign", "relu": "relu",
                "floor": "floor", "ceil": "ceil", "gelu_dx": "gelu_dx", "silu_dx": "silu_dx"}
_BINARY = {"add": "add", "sub": "subtract", "mul": "multiply", "div": "divide", "pow": "pow",
           "maximum": "max", "minimum": "min", "remainder": "mod", "fmod": "mod",
           "bitwise_and": "bitwise_and",
           "bitwise_or": "bitwise_or", "bitwise_xor": "bitwise_xor", "eq": "equal",
           "ne": "not_equal", "lt": "less", "le": "less_equal", "gt": "greater",
           "ge": "greater_equal", "logical_and": "logical_and", "logical_or": "logical_or",
           "logical_xor": "logical_xor"}


def _dtype(step: Step) -> str:
    return "float32" if step.dtype.startswith(("float", "bfloat", "tfloat")) else step.dtype


def _step(step: Step, args: list[Any]) -> Tile | float:
    from trnsim.nki.language import elementwise as ew

    op, dt = step.op, _dtype(step)
    if integer_steps.applies(step, args):
        return integer_steps.lower(step, args)
    if op in _ACTIVATIONS:
        return ew.activation(_ACTIVATIONS[op], args[0], dtype=dt)
    if op == "gelu":
        kind = "gelu_apprx_tanh" if step.attr("approximate", "none") == "tanh" else "gelu"
        return ew.activation(kind, args[0], dtype=dt)
    if op == "neg":
        return ew.binary("multiply", args[0], -1.0, dtype=dt)
    if op == "round":
        return _round_half_even(args[0], dt)
    if op == "clamp":
        value = args[0]
        if step.attr("min") is not None:
            value = ew.binary("max", value, float(step.attr("min")), dtype=dt)
        if step.attr("max") is not None:
            value = ew.binary("min", value, float(step.attr("max")), dtype=dt)
        return value
    if op == "cast":
        return nl.copy(args[0], dtype=step.dtype) if isinstance(args[0], Tile) else args[0]
    if op == "logical_not":
        return ew.binary("equal", args[0], 0.0, dtype="bool_")
    if op == "where":
        return nl.where(args[0], args[1], args[2], dtype=dt)
    if op in _BINARY:
        name = _BINARY[op]
        if op == "div" and not step.attr("true_div", True):
            # floor division of floats (integers: `integer_steps`)
            quotient = ew.binary(name, args[0], args[1], dtype="float32")
            return ew.activation("floor", quotient, dtype=dt)
        if op == "remainder":
            return _remainder(args[0], args[1], dt)
        return ew.binary(name, args[0], args[1], dtype=dt)
    raise IRError(f"element-wise op {op!r} has no NKI lowering")


# fp32 addition rounds to nearest even; adding then removing 2^23 (with x's sign) leaves x
# rounded to an integer, ties to even, for |x| < 2^23 (fp32 values at or past 2^23 are integers)
_FP32_INTEGER_MAGNITUDE = float(2**23)


def _round_half_even(x: Any, dt: str) -> Tile:
    """torch.round: round half to even (0.5 -> 0, 2.5 -> 2, -1.5 -> -2)."""
    from trnsim.nki.language import elementwise as ew

    magic = ew.binary("multiply", ew.activation("sign", x, dtype="float32"),
                      _FP32_INTEGER_MAGNITUDE, dtype="float32")
    shifted = ew.binary("add", x, magic, dtype="float32")
    rounded = ew.binary("subtract", shifted, magic, dtype="float32")
    small = ew.binary("less", ew.activation("abs", x, dtype="float32"), _FP32_INTEGER_MAGNITUDE,
                      dtype="uint8")
    return nl.where(small, rounded, x, dtype=dt)


def _remainder(a: Any, b: Any, dt: str) -> Tile:
    """torch.remainder / Python %: the result takes the divisor's sign. The engines' mod is C
    fmod (the dividend's sign), so a non-zero result of the other sign gets b added once."""
    from trnsim.nki.language import elementwise as ew

    r = ew.binary("mod", a, b, dtype=dt)
    r_negative = ew.binary("less", r, 0.0, dtype="float32")
    b_negative = (ew.binary("less", b, 0.0, dtype="float32") if isinstance(b, Tile)
                  else float(b < 0))
    differ = ew.binary("not_equal", r_negative, b_negative, dtype="float32")
    fix = ew.binary("logical_and", differ, ew.binary("not_equal", r, 0.0, dtype="float32"),
                    dtype="float32")
    return ew.binary("add", r, ew.binary("multiply", fix, b, dtype=dt), dtype=dt)


def to_callable(program: Program, *, has_acc: bool, first_operand: int = 0) -> Callable[..., Tile]:
    """fn(acc, blocks) for epilogues (has_acc) or fn(blocks) for programs and prologues.

    `blocks[i]` is operand ``in<first_operand + i>`` of the node (a matmul's extras start after
    its a, b and bias)."""
    steps = tuple(program)
    readers: dict[int, list[int]] = {}  # step result -> the steps that read it
    for i, step in enumerate(steps):
        for a in step.args:
            if isinstance(a, str) and a.startswith("s"):
                readers.setdefault(int(a[1:]), []).append(i)

    def run(*call_args) -> Tile:
        acc, blocks = (call_args[0], call_args[1]) if has_acc else (None, call_args[0])
        operands = {first_operand + i: block for i, block in enumerate(blocks)}
        results: list[Any] = []
        released: set[int] = set()
        for step in steps:
            args = [_resolve(a, acc, operands, results) for a in step.args]
            results.append(_step(step, args))
            _release_dead(results, readers, released, [acc, *blocks])
        if not results:
            return acc
        return results[-1]

    return run


def _release_dead(results: list[Any], readers: dict[int, list[int]], released: set[int],
                  kept: list) -> None:
    """Free the SBUF tile of each step result whose readers have all been emitted (a long
    program, such as GELU's backward, would otherwise hold one block-sized tile per step and
    fragment SBUF). A reader still pending (its instruction is emitted when its own result is
    placed) keeps its operands; a result sharing storage with an operand or with a result
    still needed stays."""
    from trnsim.nki.trace import current_trace

    done = len(results)

    def emitted(k: int) -> bool:
        r = results[k]
        return not (isinstance(r, Tile) and r._pending is not None)

    dead = [j for j, ks in readers.items() if j not in released and j != done - 1
            and max(ks) < done and all(emitted(k) for k in ks)]
    if not dead:
        return
    needed = [t for t in kept if isinstance(t, Tile)]
    needed += [r for j, r in enumerate(results) if isinstance(r, Tile) and j not in dead
               and j not in released]
    live = {id(t._storage) for t in needed if t._storage is not None}
    for j in dead:
        released.add(j)
        tile = results[j]
        if isinstance(tile, Tile) and tile._storage is not None and tile._pending is None \
                and id(tile._storage) not in live and tile._storage.memory.name == "SBUF":
            current_trace().release(tile)
            live.add(id(tile._storage))


def _resolve(arg: Any, acc: Tile | None, operands: dict[int, Tile], results: list[Any]) -> Any:
    if isinstance(arg, str):
        if arg == "acc":
            return acc
        if arg.startswith("in"):
            return operands[int(arg[2:])]
        return results[int(arg[1:])]
    return float(arg)
