"""What every hardware spec shares: citations for its figures and the figures other sources give.

Specs are frozen dataclasses with plain, unit-named fields so the simulator reads them cheaply.
Each preset cites a source per field (`cite(...)`); where AWS pages disagree, the figure used for
simulation is the field value and the others are kept as `Alternative`s for `--verbose` output.
A source that starts with ``ASSUMPTION`` marks a named modelling assumption: trnsim could not find
the figure published and says so.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass

Citations = tuple[tuple[str, str], ...]

ASSUMPTION = "ASSUMPTION"


def cite(**field_sources: str) -> Citations:
    """Pairs of (field name, source key) for a preset, kept hashable for frozen dataclasses."""
    return tuple(sorted(field_sources.items()))


def pairs(**values: float) -> tuple[tuple[str, float], ...]:
    """A small immutable mapping (name -> number) usable as a frozen-dataclass field."""
    return tuple(values.items())


@dataclass(frozen=True)
class Alternative:
    """A figure another source gives for `field`, shown beside the one trnsim simulates with."""

    field: str
    value: float
    unit: str
    source: str
    note: str = ""


@dataclass(frozen=True, kw_only=True)
class Spec:
    """Base for cited specs. Subclasses add fields; presets fill `sources` with `cite(...)`."""

    sources: Citations = ()
    alternatives: tuple[Alternative, ...] = ()

    def __post_init__(self) -> None:
        names = {f.name for f in dataclasses.fields(self)}
        for field_name, _ in self.sources:
            if field_name not in names:
                raise ValueError(f"{type(self).__name__}: citation for unknown field {field_name!r}")
        for alt in self.alternatives:
            if alt.field not in names and not hasattr(self, alt.field):
                raise ValueError(f"{type(self).__name__}: alternative for unknown figure {alt.field!r}")

    def source_of(self, field_name: str) -> str | None:
        """The cited source of a field, or None when the preset cites none."""
        return dict(self.sources).get(field_name)

    def alternatives_for(self, field_name: str) -> tuple[Alternative, ...]:
        return tuple(a for a in self.alternatives if a.field == field_name)

    def is_assumption(self, field_name: str) -> bool:
        source = self.source_of(field_name)
        return bool(source) and source.startswith(ASSUMPTION)


def lookup_pair(table: tuple[tuple[str, float], ...], key: str, default: float | None = None):
    """Read one entry of a `pairs(...)` table."""
    for name, value in table:
        if name == key:
            return value
    return default


def fingerprint(spec) -> str:
    """A digest of every figure of a spec, stable across processes (repr() is not: it shows
    frozensets in hash order), for cache keys that must change when any figure does."""
    return hashlib.sha256(json.dumps(_canonical(spec), sort_keys=True).encode()).hexdigest()[:32]


def _canonical(value):
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {"_type": type(value).__name__,
                **{f.name: _canonical(getattr(value, f.name)) for f in dataclasses.fields(value)}}
    if isinstance(value, (set, frozenset)):
        return sorted((_canonical(v) for v in value), key=repr)
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)
