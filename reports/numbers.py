"""A finding's numbers as the report shows them, each linked to its finding and the journal lines it rests on."""

from __future__ import annotations

from typing import Any

from reports.format import fmt, fmt_spread, pct
from schema.finding import Finding, Number


def finding_link(finding: Finding, prefix: str = "findings/") -> str:
    return f"[{finding.stem}]({prefix}{finding.stem}.md)"


def log_links(seqs: list[int], prefix: str = "") -> str:
    """Links to log lines, e.g. '[log 12](log.jsonl#L12), [13](log.jsonl#L13)'."""
    if not seqs:
        return "derived"
    parts = [f"[{s}]({prefix}log.jsonl#L{s})" for s in sorted(set(seqs))]
    return "log " + ", ".join(parts)


def number_text(number: Number, spec: str = ".3g") -> str:
    """A finding's number as the report shows it: its unit, to the digits its spread supports."""
    if number.spread is not None and number.unit != "fraction":
        return fmt_spread(number.value, number.spread, number.unit)
    return pct(number.value) if number.unit == "fraction" else fmt(number.value, spec, number.unit)


def num(finding: Finding | None, key: str, spec: str = ".3g", prefix: str = "") -> str:
    """A finding's number with its unit and where it came from: finding file and log lines."""
    if finding is None or key not in finding.numbers:
        return "-"
    number = finding.numbers[key]
    return f"**{number_text(number, spec)}** ({finding_link(finding, prefix + 'findings/')}; {log_links(number.seqs, prefix)})"


def chosen_option(decision: dict[str, Any] | None) -> str | None:
    """The option a decision took ("stop" is the accept-ceiling option); None when none was recorded."""
    if not decision:
        return None
    return "accept-ceiling" if decision["choice"] == "stop" else decision["choice"]
