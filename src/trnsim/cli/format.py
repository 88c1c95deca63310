"""Number formatting shared by CLI tables: one place for units and None."""

from __future__ import annotations


def num(value: float | None, digits: int = 1, scale: float = 1.0) -> str:
    """A number divided by `scale` with thousands separators, or '-' for an unknown figure."""
    if value is None:
        return "-"
    return f"{value / scale:,.{digits}f}"


def gib(nbytes: float | None) -> str:
    return num(nbytes, 0, 1024**3)


def money(dollars: float | None) -> str:
    return "-" if dollars is None else f"{dollars:,.3f}"
