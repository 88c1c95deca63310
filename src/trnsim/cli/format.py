"""Number formatting shared by CLI tables: one place for units, digits and None.

Every table cell holds a bare number in plain notation (never `1.9e+04`); its unit is in the
column header.
"""

from __future__ import annotations

from trnsim.runtime.report_tables import significant


def num(value: float | None, digits: int = 1, scale: float = 1.0) -> str:
    """A number divided by `scale` with thousands separators, or '-' for an unknown figure."""
    if value is None:
        return "-"
    return f"{value / scale:,.{digits}f}"


def sig(value: float | None, digits: int = 4) -> str:
    """`value` to `digits` significant figures in plain notation: 18,930 / 124.2 / 3.004 /
    0.07640; '-' for an unknown figure (the reports' formatter: one rule for every table)."""
    return "-" if value is None else significant(value, digits)


def signed_pct(value: float | None) -> str:
    """An error in percent with its sign: '+12.4' / '-3.0'."""
    return "-" if value is None else f"{value:+.1f}"


def gib(nbytes: float | None) -> str:
    return num(nbytes, 0, 1024**3)


def money(dollars: float | None) -> str:
    return "-" if dollars is None else f"{dollars:,.3f}"


def size(nbytes: int) -> str:
    """A byte count for people: '145.2 MB' (decimal units, as `ls -lh --si` and `du --si`)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} B"
