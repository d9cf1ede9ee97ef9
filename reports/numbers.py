"""A finding's numbers as the report shows them, each linked to its finding and the journal lines it rests on."""

from __future__ import annotations

from typing import Any

from reports.format import digit_spec, fmt, fmt_spread, pct
from schema.finding import Finding, Number


def finding_link(finding: Finding, prefix: str = "findings/") -> str:
    return f"[{finding.stem}]({prefix}{finding.stem}.md)"


def log_links(seqs: list[int], prefix: str = "") -> str:
    """Links to log lines, e.g. '[log 12](log.jsonl#L12), [13](log.jsonl#L13)'."""
    if not seqs:
        return "derived"
    parts = [f"[{s}]({prefix}log.jsonl#L{s})" for s in sorted(set(seqs))]
    return "log " + ", ".join(parts)


def evidence_links(finding: Finding, prefix: str = "") -> str:
    """A finding's evidence: its tool calls' log lines, or, for a step that made none (options, report), what it
    rests on instead."""
    return log_links(finding.evidence, prefix) if finding.evidence else "no tool call: the findings before it"


def cites(number: Number, prefix: str = "") -> str:
    """Where a number came from: its log lines; "declared" for the user's inputs (the target's), which no line
    holds; "cited" with its link for a published figure; "derived" for arithmetic on measurements that cites none."""
    if number.cited and not number.seqs:
        return f"[cited]({number.cited})"
    return "declared" if number.declared and not number.seqs else log_links(number.seqs, prefix)


def number_text(number: Number, spec: str = ".3g", by_spread: bool = True) -> str:
    """A finding's number as the report shows it: its unit, to the digits its spread supports (``by_spread``;
    else to ``spec``, as beside an interval whose ends set the digits)."""
    if by_spread and number.spread is not None and number.unit != "fraction":
        return fmt_spread(number.value, number.spread, number.unit)
    return pct(number.value) if number.unit == "fraction" else fmt(number.value, spec, number.unit)


def num(finding: Finding | None, key: str, spec: str = ".3g", prefix: str = "", by_spread: bool = True) -> str:
    """A finding's number with its unit and where it came from: finding file and log lines."""
    if finding is None or key not in finding.numbers:
        return "-"
    number = finding.numbers[key]
    return f"**{number_text(number, spec, by_spread)}** ({finding_link(finding, prefix + 'findings/')}; {cites(number, prefix)})"


def interval_spec(point: float, low: float, high: float) -> str:
    """The one format a ratio and its interval's ends are shown to wherever they stand together (the report's
    first screen, the run's closing summary): the fewest digits, from four, at which they read apart."""
    return digit_spec([point, low, high], 4)


def num_with_interval(finding: Finding | None, key: str, interval: list | tuple | None, spec: str = ".3g",
                      prefix: str = "") -> str:
    """A finding's measured ratio beside its interval, the point to the digits of the interval's ends
    ("2.096 x [2.069, 2.124]", never "2.1 x [2.069, 2.124]"); without an interval, ``num`` to ``spec``."""
    if finding is None or key not in finding.numbers or not interval or None in tuple(interval):
        return num(finding, key, spec, prefix)
    low, high = interval
    both = interval_spec(finding.number(key), low, high)
    return f"{num(finding, key, both, prefix, by_spread=False)} [{fmt(low, both)}, {fmt(high, both)}]"


def chosen_option(decision: dict[str, Any] | None) -> str | None:
    """The option a decision took ("stop" is the accept-ceiling option); None when none was recorded."""
    if not decision:
        return None
    return "accept-ceiling" if decision["choice"] == "stop" else decision["choice"]
