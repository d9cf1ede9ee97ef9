"""Rendering: PROFILE_FINDINGS.md and the per-finding Markdown files, from findings alone (Jinja)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from agent.state import Finding
from reports.format import cell, fmt, pct, signed_pct

TEMPLATES = Path(__file__).resolve().parents[1] / "templates"


def _env() -> Environment:
    env = Environment(loader=FileSystemLoader(TEMPLATES), undefined=StrictUndefined, keep_trailing_newline=True,
                      trim_blocks=True, lstrip_blocks=True, autoescape=False)
    env.filters.update(fmt=fmt, pct=pct, signed_pct=signed_pct, cell=cell)
    env.globals.update(log_links=log_links, finding_link=finding_link, num=num, table=table)
    return env


def finding_link(finding: Finding, prefix: str = "findings/") -> str:
    return f"[{finding.stem}]({prefix}{finding.stem}.md)"


def log_links(seqs: list[int], prefix: str = "") -> str:
    """Links to log lines, e.g. '[log 12](log.jsonl#L12), [13](log.jsonl#L13)'."""
    if not seqs:
        return "derived"
    parts = [f"[{s}]({prefix}log.jsonl#L{s})" for s in sorted(set(seqs))]
    return "log " + ", ".join(parts)


def num(finding: Finding | None, key: str, spec: str = ".3g", prefix: str = "") -> str:
    """A finding's number with its unit and where it came from: finding file and log lines."""
    if finding is None or key not in finding.numbers:
        return "-"
    number = finding.numbers[key]
    value = pct(number.value) if number.unit == "fraction" else fmt(number.value, spec, number.unit)
    return f"**{value}** ({finding_link(finding, prefix + 'findings/')}; {log_links(number.seqs, prefix)})"


def table(t, prefix: str = "") -> str:
    """A Markdown table from a finding's Table."""
    lines = [f"| {' | '.join(t.columns)} |", "|" + " --- |" * len(t.columns)]
    for row in t.rows:
        lines.append("| " + " | ".join(cell(v, c) for v, c in zip(row, t.columns)) + " |")
    if t.note:
        lines.append("")
        lines.append(f"_{t.note}_")
    return "\n".join(lines)


def render_finding(finding: Finding) -> str:
    return _env().get_template("finding.md.j2").render(f=finding)


def render_report(findings: list[Finding], decision: dict[str, Any] | None, run: dict[str, Any],
                  plots: dict[str, str]) -> str:
    by_step = {f.step: f for f in findings}
    labels = sorted({label for f in findings for label in f.labels})
    return _env().get_template("PROFILE_FINDINGS.md.j2").render(
        run=run, findings=findings, s=by_step, decision=decision, labels=labels, plots=plots,
    )
