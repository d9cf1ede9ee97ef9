"""Number formatting for reports: explicit, so the report's bytes do not depend on library versions."""

from __future__ import annotations

import math
from typing import Any


def fmt(value: Any, spec: str = ".3g", unit: str = "") -> str:
    """Format a number with a Python format spec; None is '-', text passes through, inf is 'inf'."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        if isinstance(value, float) and math.isinf(value):
            text = "inf"
        elif isinstance(value, float) and math.isnan(value):
            text = "nan"
        else:
            text = format(value, spec)
        return f"{text} {unit}".rstrip() if unit else text
    return str(value)


def pct(value: Any, digits: int = 1) -> str:
    """A fraction as a percentage: 0.6298 -> '63.0%'."""
    if value is None:
        return "-"
    return f"{100 * value:.{digits}f}%"


def signed_pct(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    return f"{100 * value:+.{digits}f}%"


def cell(value: Any, column: str = "") -> str:
    """A table cell: shares as percentages, other floats to 4 significant digits, text escaped for pipes."""
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    if isinstance(value, float):
        lowered = column.lower()
        if "share" in lowered:
            return pct(value)
        if lowered.startswith("vs ") or "delta" in lowered:
            return signed_pct(value)
        return fmt(value, ".4g")
    return fmt(value).replace("|", "\\|").replace("\n", " ")
