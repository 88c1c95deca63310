"""The one error hierarchy every trnsim layer raises for a user's mistake.

A TrnsimError is a message for a person, not a stack trace: it names what was asked for, the
limit it broke and, where a front end knows it, the user's source line. The CLI prints it as one
line and exits with status 2. Internal bugs stay ordinary Python exceptions.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class TrnsimError(Exception):
    """Base class: a request trnsim cannot honour, explained in one line."""

    def __init__(self, message: str, *, source: str | None = None) -> None:
        self.message = message
        self.source = source
        super().__init__(message)

    def __str__(self) -> str:
        return f"{self.message} at {self.source}" if self.source else self.message

    def at(self, source: str | None) -> TrnsimError:
        """Attach the user's source location (file:line) if none is attached yet."""
        if source and not self.source:
            self.source = source
        return self


class UnknownNameError(TrnsimError, LookupError):
    """A name (instance, chip, dtype, command field ...) that trnsim does not know."""

    def __init__(self, kind: str, name: str, known: Iterable[str], *, source: str | None = None):
        self.kind = kind
        self.name = name
        self.known = sorted(known)
        close = difflib.get_close_matches(str(name).lower(), [k.lower() for k in self.known], n=3,
                                          cutoff=0.5)
        lookup = {k.lower(): k for k in self.known}
        self.suggestions = [lookup[c] for c in close]
        if self.suggestions:
            hint = "did you mean " + " or ".join(repr(s) for s in self.suggestions) + "?"
        else:
            hint = "known: " + ", ".join(self.known)
        super().__init__(f"unknown {kind} {name!r}; {hint}", source=source)


class LimitExceededError(TrnsimError, ValueError):
    """A value beyond a hardware or API limit: names what, the value, and the limit."""

    def __init__(self, what: str, value: object, limit: object, *, context: str = "",
                 source: str | None = None) -> None:
        self.what = what
        self.value = value
        self.limit = limit
        where = f" ({context})" if context else ""
        super().__init__(f"{what} {value} exceeds limit {limit}{where}", source=source)


class UnsupportedError(TrnsimError, NotImplementedError):
    """Something the simulated hardware or software does not support (e.g. fp8 on NeuronCore-v1)."""


class InvalidArgumentError(TrnsimError, ValueError):
    """An argument of the wrong form or combination, caught before any simulation starts."""


class IndexOutOfBoundsError(TrnsimError, IndexError):
    """An element index computed at run time (a gather/scatter row) outside its tensor.

    Worded as numpy's IndexError, as AWS's NKI simulator reports it (kernels' tests match the
    text); the kernel line is kept on `.source` and added as a note rather than to the message.
    """

    def __str__(self) -> str:
        return self.message

    def at(self, source: str | None) -> TrnsimError:
        if source and not self.source:
            self.source = source
            self.add_note(f"at {source}")
        return self


class IntegerArithmeticError(TrnsimError, ArithmeticError):
    """Integer arithmetic PyTorch refuses (a zero divisor, a negative power of an integer)."""


class IntegerRangeError(LimitExceededError):
    """An integer result the simulated hardware cannot hold exactly (a PyTorch int64 value past
    int32, integers past 2^24 through an fp32 engine): refused, never stored as another number."""

    def __init__(self, what: str, limit: str, *, source: str | None = None) -> None:
        TrnsimError.__init__(self, f"{what} is outside {limit}", source=source)
        self.what, self.value, self.limit = what, None, limit


class UndefinedBehaviourWarning(UserWarning):
    """A kernel does what the NKI documentation calls undefined (reading memory nothing wrote,
    accumulating into PSUM nothing wrote); the simulated values are NaN there."""


class CoresUnavailableError(LimitExceededError):
    """More NeuronCores requested than the instance has (or than are visible)."""
