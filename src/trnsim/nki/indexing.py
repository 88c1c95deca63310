"""Index tiles and predicates: nl.arange, nl.mgrid, nl.ds, and `mask=` expressions.

An index tile is an affine expression ``const + sum(coef * axis)`` over `IndexAxis` objects. Each
axis is one `arange` with a size and a position in a broadcast shape (``nl.arange(128)[:, None]``
sits at position 0 of a 2-D shape). Python loop variables are plain ints at trace time, so every
index NKI allows is affine with integer coefficients. Comparisons of index tiles build `Predicate`s
that `mask=` uses to shrink the instruction to the selected range, at no cost, as the compiler does.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from trnsim.errors import InvalidArgumentError

_ids = itertools.count()


@dataclass(frozen=True)
class IndexAxis:
    """One arange: values 0..size-1 along `position` of a broadcast shape of rank `ndim`."""

    size: int
    position: int
    ndim: int
    uid: int = field(default_factory=lambda: next(_ids))


class IndexExpr:
    """const + sum(coef * axis), with numpy-like arithmetic and comparisons."""

    __array_priority__ = 1000  # so `np.int64 + expr` defers to us

    def __init__(self, terms: dict[IndexAxis, int] | None = None, const: int = 0,
                 grid: tuple[int, ...] = ()) -> None:
        # zero coefficients are kept: `i_f + 0 * i_p` still spans the partitions (its shape)
        self.terms = dict(terms or {})
        self.const = int(const)
        # the shape of the nl.mgrid the expression came from: mgrid is dense (numpy's mgrid), so
        # `3 * g.y + g.z` has the whole grid's shape even though it names two of its axes
        self.grid = tuple(grid)

    # --- shape ---------------------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return max([len(self.grid), *(a.ndim for a in self.terms)])

    @property
    def shape(self) -> tuple[int, ...]:
        shape = list(self.grid) if len(self.grid) == self.ndim else [1] * self.ndim
        for axis in self.terms:
            shape[axis.position] = axis.size
        return tuple(shape)

    # --- numpy-style reshaping of a 1-D arange: a[:, None], a[None, :] -------------------------
    def __getitem__(self, key) -> IndexExpr:
        if len(self.terms) != 1 or self.ndim != 1:
            raise InvalidArgumentError("only a 1-D nl.arange can be reshaped with [:, None]-style "
                                       "indexing")
        key = key if isinstance(key, tuple) else (key,)
        (axis, coef), = self.terms.items()
        slots = [k for k in key if k is not None]
        if len(slots) != 1 or not isinstance(slots[0], slice) or slots[0] != slice(None):
            raise InvalidArgumentError(f"unsupported index {key!r} on an nl.arange; use [:, None] or "
                                       f"[None, :]")
        position = next(i for i, k in enumerate(key) if k is not None)
        moved = IndexAxis(axis.size, position, len(key), axis.uid)
        return IndexExpr({moved: coef}, self.const)

    # --- arithmetic ----------------------------------------------------------------------------
    def _combine(self, other, sign: int) -> IndexExpr:
        if isinstance(other, IndexExpr):
            terms = dict(self.terms)
            for axis, coef in other.terms.items():
                terms[axis] = terms.get(axis, 0) + sign * coef
            grid = self.grid if len(self.grid) >= len(other.grid) else other.grid
            return IndexExpr(terms, self.const + sign * other.const, grid)
        return IndexExpr(self.terms, self.const + sign * _as_int(other), self.grid)

    def __add__(self, other):
        return self._combine(other, 1)

    __radd__ = __add__

    def __sub__(self, other):
        return self._combine(other, -1)

    def __rsub__(self, other):
        return (-self)._combine(other, 1)

    def __neg__(self):
        return IndexExpr({a: -c for a, c in self.terms.items()}, -self.const, self.grid)

    def __mul__(self, other):
        if isinstance(other, IndexExpr):
            raise InvalidArgumentError("index expressions must be affine: cannot multiply two index "
                                       "tiles")
        k = _as_int(other)
        return IndexExpr({a: c * k for a, c in self.terms.items()}, self.const * k, self.grid)

    __rmul__ = __mul__

    def __floordiv__(self, other):
        raise InvalidArgumentError("index expressions must be affine: // of an index tile is not "
                                   "supported")

    # --- predicates ----------------------------------------------------------------------------
    def __lt__(self, other):
        return Predicate.compare(self, other, "lt")

    def __le__(self, other):
        return Predicate.compare(self, other, "le")

    def __gt__(self, other):
        return Predicate.compare(self, other, "gt")

    def __ge__(self, other):
        return Predicate.compare(self, other, "ge")

    def __eq__(self, other):  # type: ignore[override]
        return Predicate.compare(self, other, "eq")

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        parts = [f"{c}*i{a.uid}[{a.size}]" for a, c in self.terms.items()]
        return " + ".join([*parts, str(self.const)])


def _as_int(value) -> int:
    try:
        as_int = int(value)
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"index arithmetic needs integers; got {value!r}") from None
    if as_int != value:
        raise InvalidArgumentError(f"index arithmetic needs integers; got {value!r}")
    return as_int


def arange(*args) -> IndexExpr:
    """nl.arange(stop) or nl.arange(start, stop): a 1-D index tile."""
    if len(args) == 1:
        start, stop = 0, args[0]
    elif len(args) == 2:
        start, stop = args
    else:
        raise InvalidArgumentError("nl.arange takes (stop) or (start, stop)")
    size = _as_int(stop) - _as_int(start)
    if size <= 0:
        raise InvalidArgumentError(f"nl.arange({start}, {stop}) is empty")
    return IndexExpr({IndexAxis(size, 0, 1): 1}, _as_int(start))


class _Grid:
    """The result of nl.mgrid[...]: unpackable, with .p/.x/.y/.z for the first four axes."""

    def __init__(self, exprs: list[IndexExpr]) -> None:
        self._exprs = exprs

    def __iter__(self):
        return iter(self._exprs)

    def __len__(self) -> int:
        return len(self._exprs)

    def __getitem__(self, i: int) -> IndexExpr:
        return self._exprs[i]

    p = property(lambda self: self._exprs[0])
    x = property(lambda self: self._exprs[1])
    y = property(lambda self: self._exprs[2])
    z = property(lambda self: self._exprs[3])


class _MGrid:
    """nl.mgrid[0:128, 0:512] -> index tiles broadcasting to [128, 512]."""

    def __getitem__(self, key) -> _Grid:
        key = key if isinstance(key, tuple) else (key,)
        exprs, grid = [], []
        for position, part in enumerate(key):
            if not isinstance(part, slice) or part.step not in (None, 1):
                raise InvalidArgumentError("nl.mgrid takes unit-step slices, e.g. nl.mgrid[0:128, 0:512]")
            start = 0 if part.start is None else _as_int(part.start)
            size = _as_int(part.stop) - start
            exprs.append(IndexExpr({IndexAxis(size, position, len(key)): 1}, start))
            grid.append(size)
        for expr in exprs:
            expr.grid = tuple(grid)
        return _Grid(exprs)


mgrid = _MGrid()
Grid = _Grid  # what nl.mgrid[...] returns (a tile may be indexed with it directly)


@dataclass(frozen=True)
class DynSlice:
    """nl.ds(start, size): a slice of `size` elements from `start`."""

    start: int
    size: int

    def as_slice(self) -> slice:
        return slice(self.start, self.start + self.size)


def ds(start, size) -> DynSlice:
    if isinstance(start, IndexExpr) or isinstance(size, IndexExpr):
        raise InvalidArgumentError("nl.ds takes integer start and size")
    return DynSlice(_as_int(start), _as_int(size))


@dataclass(frozen=True)
class Bound:
    """A half-open range [low, high) on one index axis."""

    axis: IndexAxis
    low: int
    high: int


class MaskedOut(Exception):
    """Raised while lowering an instruction whose mask selects nothing: the compiler drops it."""


class Predicate:
    """A conjunction of affine comparisons ``expr (op) 0`` from (i_p < 64) & (i_f + 128*t < n).

    As a `mask=`, each comparison must bound one index axis, giving per-axis ranges (`bounds`);
    `nisa.affine_select` takes a single comparison of any affine expression (`affine()`).
    """

    def __init__(self, comparisons: list[tuple[IndexExpr, str]]) -> None:
        self.comparisons = comparisons
        self._bounds: dict[int, Bound] | None = None
        self._false = False

    @staticmethod
    def never() -> Predicate:
        """mask=False (a compile-time condition that does not hold): nothing is selected."""
        predicate = Predicate([])
        predicate._bounds, predicate._false = {}, True
        return predicate

    @staticmethod
    def compare(expr: IndexExpr, other, op: str) -> Predicate:
        rhs = other if isinstance(other, IndexExpr) else IndexExpr({}, _as_int(other))
        return Predicate([(expr - rhs, op)])

    def affine(self) -> tuple[IndexExpr, str]:
        if len(self.comparisons) != 1:
            raise InvalidArgumentError("this predicate must be a single affine comparison; & of "
                                       "several is only valid as a mask")
        return self.comparisons[0]

    @property
    def bounds(self) -> dict[int, Bound]:
        if self._bounds is None:
            bounds: dict[int, Bound] = {}
            for expr, op in self.comparisons:
                bound = _bound(expr, op)
                if bound is None:
                    self._false = True
                    continue
                old = bounds.get(bound.axis.uid)
                if old is not None:
                    bound = Bound(bound.axis, max(old.low, bound.low), min(old.high, bound.high))
                bounds[bound.axis.uid] = bound
            self._bounds = bounds
        return self._bounds

    def __and__(self, other: Predicate) -> Predicate:
        if isinstance(other, (bool, np.bool_)):
            return self if other else Predicate.never()
        if not isinstance(other, Predicate):
            raise InvalidArgumentError("combine mask predicates with & only")
        return Predicate(self.comparisons + other.comparisons)

    __rand__ = __and__

    def __or__(self, other):
        raise InvalidArgumentError("mask predicates can only be combined with &; `|` cannot shrink an "
                                   "instruction to a rectangle")

    def __bool__(self) -> bool:
        raise InvalidArgumentError("an index predicate is not a Python bool; pass it as mask=")

    @property
    def empty(self) -> bool:
        bounds = self.bounds
        return self._false or any(b.high <= b.low for b in bounds.values())


def _bound(expr: IndexExpr, op: str) -> Bound | None:
    """The range of the one index axis satisfying ``expr (op) 0``; None if none can."""
    if len(expr.terms) != 1:
        raise InvalidArgumentError("mask predicates must bound one index axis each, e.g. "
                                   "(i_p < 64) & (i_f + 128 * t < n)")
    (axis, coef), = expr.terms.items()
    rhs = -expr.const  # coef * i (op) rhs, for integer i in [0, size)
    low, high = 0, axis.size
    if op == "eq":
        if rhs % coef:
            return None
        low, high = rhs // coef, rhs // coef + 1
    else:
        if coef < 0:
            coef, rhs = -coef, -rhs
            op = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}[op]
        if op == "lt":
            high = -(-rhs // coef)
        elif op == "le":
            high = rhs // coef + 1
        elif op == "gt":
            low = rhs // coef + 1
        else:
            low = -(-rhs // coef)
    return Bound(axis, max(low, 0), min(high, axis.size))
