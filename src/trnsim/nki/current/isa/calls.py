"""How a current-API nisa call is taken apart: the destination-first signature, its operands.

`nisa_call` wraps each function: it records the call's label and the user's source line (as the
legacy `api` decorator does), rejects the legacy API's keywords (`mask=`, an output `dtype=`),
and turns a signature mismatch that looks like a legacy call (no destination) into an
`ApiMismatchError` naming the replacement.
"""

from __future__ import annotations

import functools
import inspect

from trnsim.errors import InvalidArgumentError, UnsupportedError
from trnsim.nki.api_boundary import ApiMismatchError, legacy_only_keyword
from trnsim.nki.operands import is_scalar, tile_arg
from trnsim.nki.tile import Tile
from trnsim.nki.trace import api, current_trace


def nisa_call(label: str):
    """Decorate a destination-first nisa function."""
    def wrap(fn):
        signature = inspect.signature(fn)
        takes_dst = any(name in signature.parameters for name in ("dst", "val_dst"))

        @functools.wraps(fn)
        def checked(*args, **kwargs):
            if "mask" in kwargs:
                raise legacy_only_keyword(label, "mask")
            if "dtype" in kwargs and "dtype" not in signature.parameters:
                raise ApiMismatchError(f"{label}(dtype=...) is the form of the legacy neuronxcc.nki "
                                       f"API; in nki 0.3+ the result has the dtype of dst")
            try:
                signature.bind(*args, **kwargs)
            except TypeError as error:
                if takes_dst and "dst" not in kwargs:
                    raise ApiMismatchError(
                        f"{label}: {error}. In nki 0.3+ instructions write into a destination given "
                        f"first ({label}(dst, ...)); calls that return their result belong to the "
                        f"legacy neuronxcc.nki API") from None
                raise InvalidArgumentError(f"{label}: {error}") from None
            current_trace().flush()
            result = fn(*args, **kwargs)
            return NkiInstruction(label) if result is None else result

        call = api(label)(checked)
        call.nki_label = label
        return call
    return wrap


class NkiInstruction:
    """What a nisa call returns: a handle of the traced instruction. trnsim orders instructions
    by the memory they access; explicit `depends_on` edges are not modelled."""

    def __init__(self, label: str = "") -> None:
        self.label = label

    def depends_on(self, *producers) -> NkiInstruction:
        raise UnsupportedError(f"{self.label}.depends_on: explicit scheduling edges are not "
                               "modelled; trnsim orders instructions by the memory they access")

    def __repr__(self) -> str:
        return f"NkiInstruction({self.label})"


def dst_arg(value, what: str = "dst") -> Tile:
    """A destination tensor: placed, alive; writing a kernel input is recorded."""
    if not isinstance(value, Tile):
        raise InvalidArgumentError(f"{what} must be a tensor (nl.ndarray); got {type(value).__name__}")
    trace = current_trace()
    value.placed()
    trace.check_alive(value)
    trace._check_writable(value)
    return value


def src_arg(value, what: str) -> Tile:
    return tile_arg(value, what)


def operand_arg(value, what: str):
    """A scalar, a [P, 1] tensor, or None."""
    if value is None or is_scalar(value):
        return value
    return tile_arg(value, what)


def engine_arg(value):
    from trnsim.nki.isa.enums import to_isa_engine

    return to_isa_engine(value)
