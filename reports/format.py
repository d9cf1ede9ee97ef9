"""Number formatting for reports: explicit, so the report's bytes do not depend on library versions."""

from __future__ import annotations

import math
import re
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
            if "e" in text and spec.endswith("g") and abs(value) >= 1:
                # 5.848e+04 reads as code: a large number in 'g' loses its decimals, not its digits
                text = format(round(value), ",d")
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


class Markdown(str):
    """Text that is Markdown on purpose (a bold number with its links): cells keep it as it is."""


_PUNCT_AFTER_BACKSLASH = re.compile(r"\\(?=[!-/:-@\[-`{-~])")
_HTML_START = re.compile(r"<(?=[A-Za-z/!?])")  # a tag, a comment, an autolink; "<=" is text
_ENTITY = re.compile(r"&(?=#?[A-Za-z0-9]+;)")


def _emphasis_possible(text: str, mark: str) -> bool:
    """Whether ``mark`` (``*`` or ``_``) could open and later close emphasis in ``text``: ``_`` does
    not inside a word (snake_case stays as it is), ``*`` needs two."""
    at = [i for i, ch in enumerate(text) if ch == mark]
    if len(at) < 2:
        return False
    if mark == "*":
        return True
    def word(i: int) -> bool:
        return 0 <= i < len(text) and text[i].isalnum()
    opens = [i for i in at if not word(i - 1) and i + 1 < len(text) and not text[i + 1].isspace()]
    return any(j > i and not word(j + 1) and not text[j - 1].isspace() for i in opens for j in at)


def md_text(value: Any) -> str:
    """Text as inline Markdown that renders as exactly that text, on one line of a table: pipes,
    backticks, HTML (``kernel<float>`` is a tag to a renderer), entities, links and emphasis
    escaped; what cannot form Markdown is left alone, so plain names keep their bytes."""
    text = " ".join(str(value).splitlines()) if "\n" in str(value) or "\r" in str(value) else str(value)
    text = _PUNCT_AFTER_BACKSLASH.sub(r"\\\\", text)
    text = _HTML_START.sub("&lt;", _ENTITY.sub("&amp;", text))
    text = text.replace("|", "\\|").replace("`", "\\`").replace("](", "\\](").replace("][", "\\][")
    for mark in ("*", "_"):
        if _emphasis_possible(text, mark):
            text = text.replace(mark, "\\" + mark)
    if "~~" in text:  # GFM strikethrough
        text = text.replace("~", "\\~")
    return text


def code(value: Any) -> str:
    """``value`` as an inline code span that holds it whole in a table cell: a fence longer than any
    run of backticks inside, pipes escaped (GFM splits cells before it reads code spans)."""
    text = " ".join(str(value).splitlines()).replace("|", "\\|")
    runs = [len(r) for r in re.findall(r"`+", text)]
    fence = "`" * (max(runs, default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def cell(value: Any, column: str = "") -> str:
    """A table cell: shares as percentages, other floats to 4 significant digits, text escaped so it
    renders as itself (md_text); Markdown kept as written."""
    if isinstance(value, Markdown):
        return " ".join(value.splitlines())
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    if isinstance(value, float):
        lowered = column.lower()
        if "share" in lowered:
            return pct(value)
        if lowered.startswith("vs ") or "delta" in lowered:
            return signed_pct(value)
        return fmt(value, ".4g")
    return md_text(fmt(value))


def digits_for(spread: float | None, default: int = 3) -> int:
    """Significant digits a number with relative uncertainty ``spread`` supports: one past the first
    uncertain digit (a 3% spread gives 2 digits, 0.1% gives 4), between 2 and 6: one digit would
    round two neighbours apart (245 to 200, 261 to 300) more than their spread separates them."""
    if spread is None or not math.isfinite(spread):
        return default
    if spread <= 0:
        return 6
    return max(2, min(6, math.floor(-math.log10(spread)) + 1))


def fmt_spread(value: Any, spread: float | None, unit: str = "", default: int = 3) -> str:
    """``value`` to the significant digits its spread supports (see digits_for); a spread above 100%
    supports no digit at all, so such a value is quoted as an order of magnitude: one significant
    digit after a "~" (~200, ~0.3)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value == 0:
        return fmt(value, unit=unit)
    if spread is not None and math.isfinite(spread) and spread > 1.0:
        magnitude = math.floor(math.log10(abs(value)))
        rounded = round(value, -magnitude)
        return "~" + fmt(rounded, f",.{max(0, -magnitude)}f", unit)
    digits = digits_for(spread, default)
    magnitude = math.floor(math.log10(abs(value)))
    rounded = round(value, digits - 1 - magnitude)
    decimals = max(0, digits - 1 - magnitude)
    return fmt(rounded, f",.{decimals}f", unit)


def distinct_digits(values, at_least: int = 3, at_most: int = 6) -> int:
    """The fewest significant digits, from ``at_least``, at which numbers that differ print differently: a
    verdict that hangs on the third digit (2.205 against a bound of 2.206) is shown with the digit it hangs on,
    not as "[2.2, 2.21]" beside "2.206"."""
    numbers = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]
    for digits in range(at_least, at_most + 1):
        seen: dict[str, float] = {}
        if all(seen.setdefault(format(v, f".{digits}g"), v) == v for v in numbers):
            return digits
    return at_most


def digit_spec(values, at_least: int = 3) -> str:
    """The format spec for a figure and the values it is read against (its interval's ends, a bound): the fewest
    digits at which those that differ read apart (``distinct_digits``), trailing zeros kept ("2.210")."""
    return f"#.{distinct_digits(values, at_least)}g"


def short(name: Any, width: int = 100) -> str:
    """A kernel name cut for a table or a headline: mangled C++ templates run to thousands of characters."""
    text = str(name)
    return text if len(text) <= width else text[: width - 3] + "..."


# Characters of a kernel's own name kept beside its meaning: enough to find it in the trace and the finding's data.
NAME_BESIDE_MEANING = 40


def kernel_meaning(name: Any, names: dict | None) -> str | None:
    """What the bench result's ``kernel_names`` map (tools/trace/kernel_names.py, computed on the box) says the
    kernel is; None without a map (a journal recorded before it) or where its rules knew no meaning."""
    entry = (names or {}).get(str(name)) or {}
    return entry.get("meaning")


def kernel_label(name: Any, names: dict | None, width: int | None = 100) -> str:
    """A kernel as a table or a headline names it: by its meaning where the box gave one, its own name cut to
    NAME_BESIDE_MEANING kept beside it in brackets; else as before, its name cut to ``width`` (None: whole), so
    that a journal without the map renders byte for byte as it did."""
    meaning = kernel_meaning(name, names)
    if meaning:
        return f"{meaning} [{short(name, NAME_BESIDE_MEANING)}]"
    return short(name, width) if width else str(name)


def kernel_md(name: Any, names: dict | None, width: int = 100) -> str:
    """``kernel_label`` in Markdown: the name as a code span, after its meaning where there is one."""
    meaning = kernel_meaning(name, names)
    if meaning:
        return f"{md_text(meaning)} [{code(short(name, NAME_BESIDE_MEANING))}]"
    return code(short(name, width))


def kernel_names_of(names: dict | None, shown: Any) -> dict[str, Any]:
    """The map's entries for the kernels a finding shows (its mangled names kept, with what the box demangled
    them to), as ``{"kernel_names": {...}}`` to merge into the finding's data; {} without a map, so that a
    finding from a journal recorded before it keeps its data as it was."""
    if names is None:
        return {}
    return {"kernel_names": {n: names[n] for n in dict.fromkeys(shown) if n in names}}
