"""Rendering: PROFILE_FINDINGS.md and the per-finding Markdown files, from findings alone (Jinja)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from reports.format import (Markdown, cell, code, digit_spec, fmt, fmt_spread, kernel_md, kernel_meaning, md_text, pct, short,
                            signed_pct)
from reports.first_screen import decision_caveat, first_screen, from_sweep, stand_in_caveat
from reports.numbers import chosen_option, cites, evidence_links, finding_link, log_links, num, num_with_interval, number_text  # noqa: F401 (the report's names)
from schema.consistency import KERNEL_MEASUREMENT, Consistency
from schema.finding import Finding, Table

TEMPLATES = Path(__file__).resolve().parents[1] / "templates"


def _env() -> Environment:
    env = Environment(loader=FileSystemLoader(TEMPLATES), undefined=StrictUndefined, keep_trailing_newline=True,
                      trim_blocks=True, lstrip_blocks=True, autoescape=False)
    # code: a name as a code span that survives any backtick or pipe in it; md: text that renders as itself
    env.filters.update(fmt=fmt, pct=pct, signed_pct=signed_pct, cell=cell, short=short, code=code, md=md_text)
    env.globals.update(digit_spec=digit_spec, first_screen=first_screen, from_sweep=from_sweep, decision_caveat=decision_caveat, stand_in_caveat=stand_in_caveat, log_links=log_links, evidence_links=evidence_links, cites=cites, finding_link=finding_link, num=num, num_with_interval=num_with_interval, table=table, decision_table=decision_table,
                       against_finding=against_finding, failure_groups=failure_groups,
                       measurement_against=measurement_against, gates_split=gates_split,
                       kernel_md=kernel_md, kernel_meaning=kernel_meaning)
    return env


def table(t, prefix: str = "") -> str:
    """A Markdown table from a finding's Table; every header, cell and note renders as its own text
    (reports.format.md_text: a kernel named ``k<float, 2>`` or ``a|b`` stays in its cell, whole)."""
    lines = [f"| {' | '.join(md_text(c) for c in t.columns)} |", "|" + " --- |" * len(t.columns)]
    for row in t.rows:
        lines.append("| " + " | ".join(cell(v, c) for v, c in zip(row, t.columns)) + " |")
    if t.note:
        lines.append("")
        lines.append(f"_{md_text(t.note)}_")
    return "\n".join(lines)


def measured_outcome(splitk: Finding | None, prefix: str = "") -> str | None:
    """The split-K run's engine tok/s and its ratio to the profiled setting, linked to where they came from."""
    if splitk is None or splitk.numbers.get("splitk_tok_s") is None:
        return None
    tok_s, ratio = splitk.numbers["splitk_tok_s"], splitk.numbers["measured_x"]
    seqs = sorted(set(tok_s.seqs) | set(ratio.seqs))
    if ratio.spread is not None:  # to the digits the measured interval supports
        return (f"**{fmt_spread(tok_s.value, ratio.spread, tok_s.unit)}, {fmt_spread(ratio.value, ratio.spread)}x** "
                f"({finding_link(splitk, prefix + 'findings/')}; {log_links(seqs, prefix)})")
    return (f"**{fmt(tok_s.value, '.4g', tok_s.unit)}, {fmt(ratio.value, '.3g')}x** "
            f"({finding_link(splitk, prefix + 'findings/')}; {log_links(seqs, prefix)})")


def decision_table(options: Finding, decision: dict[str, Any] | None, splitk: Finding | None) -> Table:
    """The options finding's table as a decision table: which option was chosen, and for the chosen
    one its measured outcome (the split-K run's tok/s and x) beside its bound; "-" elsewhere."""
    source = options.tables[0]
    chosen = chosen_option(decision)
    measured = measured_outcome(splitk) if chosen == "splitk" else None
    at_chosen, at_measured = 1, source.columns.index("estimate (x)") + 2
    columns = list(source.columns)
    columns.insert(at_chosen, "chosen")
    columns.insert(at_measured, "measured")
    rows = []
    for row in source.rows:
        row = list(row)
        this = row[0] == chosen
        row.insert(at_chosen, "yes" if this else "-")
        row.insert(at_measured, Markdown(measured) if this and measured else "-")
        rows.append(row)
    estimates = [f"{o['name']}: {o['estimate_basis']}" for o in options.data.get("options", [])
                 if o.get("estimate_x") is not None and o["name"] != "accept-ceiling"]
    note = "measured: the engine re-run with the chosen option built on the box, against the profiled setting"
    if estimates:
        note += "; estimate (x): " + "; ".join(estimates)
    return Table(title="Decision", columns=columns, rows=rows, note=note)


def render_finding(finding: Finding) -> str:
    return _env().get_template("finding.md.j2").render(f=finding)


def interval_text(interval: tuple[float, float] | None, spec: str = ".3g") -> str:
    return f"[{format(interval[0], spec)}, {format(interval[1], spec)}]" if interval else "-"


def failure_groups(held: Consistency, verdict: str | None = None) -> list[dict[str, Any]]:
    """The failures (or the checks of one ``verdict``) with one measurement against several claims of
    the same value (one bound under several names: the ceiling, and the options that restate it)
    counted once, the names listed."""
    groups: dict[tuple, dict[str, Any]] = {}
    for c in (held.failures if verdict is None else [c for c in held.checks if c.verdict == verdict]):
        key = (c.measurement, c.kind, round(c.claim_x, 9), c.claim_interval)
        if key not in groups:
            groups[key] = {"check": c, "claims": []}
        groups[key]["claims"].append(f"{c.claim} ({c.claim_finding})")
    return list(groups.values())


def _interval_x(c) -> str:
    if not c.measured_interval:
        return ""
    spec = digit_spec([c.measured_x, *c.measured_interval, c.claim_x], 4)
    return f" [{fmt(c.measured_interval[0], spec)}, {fmt(c.measured_interval[1], spec)}]"


def against_finding(held: Consistency | None, finding: Finding | None, measurement: str | None = None) -> str:
    """What the run's measurements did against the bounds ``finding`` stated (all of them, or only
    ``measurement``): those that beat one (violated) and those within its noise, as text to follow
    the finding's figure; "" when every measurement held."""
    if held is None or finding is None:
        return ""
    mine = [c for c in held.checks if c.kind == "bound" and c.claim_finding == finding.stem
            and (measurement is None or c.measurement == measurement)]
    parts = []
    for verdict, what in (("violated", "beaten in this run by"), ("within noise of the bound", "not separable, within noise, from"),
                          ("within the bound's model error", "above the point but within the bound's model error by")):
        seen: dict[str, Any] = {}
        for c in mine:
            if c.verdict == verdict and c.measurement not in seen:
                seen[c.measurement] = c
        if seen:
            parts.append(what + " " + "; ".join(f"{name}, {fmt(c.measured_x, '.4g')}x{_interval_x(c)} against {fmt(c.claim_x, '.5g')}x"
                                                 for name, c in seen.items()))
    if not parts:
        return ""
    return "; " + "; ".join(parts) + ": see [Where the model failed](#where-the-model-failed)"


def measurement_against(held: Consistency | None, measurement: str) -> str:
    """The bounds one measurement beat or could not be separated from, grouped by value (one bound
    under several names counts once), as text to follow its figure; "" when it held every bound."""
    if held is None:
        return ""
    parts = []
    for verdict, what in (("violated", "above the bound"), ("within noise of the bound", "within noise of the bound"),
                          ("within the bound's model error", "above, within the model error of, the bound")):
        values: dict[float, list[str]] = {}
        for c in held.checks:
            if c.kind == "bound" and c.measurement == measurement and c.verdict == verdict:
                values.setdefault(round(c.claim_x, 9), []).append(c.claim_finding)
        parts += [f"{what} {fmt(x, '.5g')}x (stated " + (f"{len(names)} times, " if len(names) > 1 else "")
                  + f"in {', '.join(dict.fromkeys(names))})" for x, names in values.items()]
    return ("; " + "; ".join(parts) + ": see [Where the model failed](#where-the-model-failed)") if parts else ""


def consistency_table(held: Consistency) -> Table:
    """Every bound and prediction against every measurement it covers, with the verdict."""
    rows = []
    for c in held.checks:
        # every figure of the row to the digits at which those that differ read differently (at least the 4 a
        # claim is stated to): a verdict that hangs on the fourth digit shows it
        spec = digit_spec([c.claim_x, *(c.claim_interval or ()), c.measured_x, *(c.measured_interval or ())], 4)
        rows.append([c.kind, c.claim, c.claim_finding,
                     fmt_spread(c.claim_x, c.claim_spread) if c.claim_spread is not None else fmt(c.claim_x, spec),
                     interval_text(c.claim_interval, spec), c.measurement, c.measurement_finding, fmt(c.measured_x, spec),
                     interval_text(c.measured_interval, spec), c.verdict, c.note or "-"])
    return Table(title="Bounds and predictions against measurements",
                 columns=["kind", "claim", "stated in", "claim (x)", "claim interval", "measurement", "measured in",
                          "measured (x)", "measured interval", "verdict", "noise of the comparison"],
                 rows=rows,
                 note="a bound applies to every measurement whose setting differs from the bound's only in the operation "
                      "it speeds up; it is violated when the measurement's whole interval lies above it, and within noise "
                      "of it when its point and its interval lie on two sides of it; a prediction misses when its interval and the measurement's do not "
                      "overlap; a prediction's interval is the profiled steps' window spread, not a confidence interval; "
                      "a measured interval is its comparison's 95% interval; x: throughput against the bound's "
                      "reference setting" + (" (the split-K kernel (profiles) row: the kernel's time before / after, its interval "
                      "the two profiles' step spread)" if any(c.measurement == KERNEL_MEASUREMENT for c in held.checks) else "")
                      + "; claims to four digits, or to the digits their spread supports")


def render_report(findings: list[Finding], decision: dict[str, Any] | None, run: dict[str, Any],
                  plots: dict[str, str], held: Consistency | None = None) -> str:
    by_step = {f.step: f for f in findings}
    labels = sorted({label for f in findings for label in f.labels})
    return _env().get_template("PROFILE_FINDINGS.md.j2").render(
        run=run, findings=findings, s=by_step, decision=decision, labels=labels, plots=plots,
        held=held, consistency_table=consistency_table(held) if held else None,
    )


# The gates report's tables whose rows are engine locations: those off the investigated decode path go to
# the appendix (issue 30: the flux2/kda/diffusion gates said in one line, listed in full apart).
APPENDIX = "PROFILE_FINDINGS_GATES.md"


def _path_files(gates: Finding) -> set[str]:
    """The files on the profiled kernels' call paths, as the gate scan tied them (agent.steps.gates.tie_files)."""
    files = set()
    for tie in gates.data.get("ties") or []:
        for path in tie.get("paths", []):
            files.update(step["at"].split(":")[0] for step in path.get("chain", []))
        files.update(alt["at"].split(":")[0] for alt in tie.get("alternatives", []))
    return files


def _on_path(row: list, files: set[str]) -> bool:
    return str(row[0]).rsplit(":", 1)[0] in files


def gates_split(gates: Finding) -> dict[str, Any]:
    """The gates finding's tables with only the rows on the investigated decode path, the rows left out per
    table, and a one-line summary of them: {"tables", "off", "summary"}."""
    files, tables, off = _path_files(gates), [], []
    for t in gates.tables:
        if not t.columns or t.columns[0] != "where":
            tables.append(t)
            continue
        kept = [r for r in t.rows if _on_path(r, files)]
        left = [r for r in t.rows if not _on_path(r, files)]
        off.append((t, left))
        if kept:
            note = f"{t.note + '; ' if t.note else ''}{len(left)} row(s) off the investigated decode path: in {APPENDIX}"
            tables.append(Table(title=t.title, columns=t.columns, rows=kept, note=note if left else t.note))
    count = sum(len(left) for _, left in off)
    dirs = {}
    for _, left in off:
        for r in left:
            key = "/".join(str(r[0]).split("/")[:2])
            dirs[key] = dirs.get(key, 0) + 1
    where = ", ".join(f"{d} ({n})" for d, n in sorted(dirs.items(), key=lambda kv: (-kv[1], kv[0]))[:4])
    summary = (f"{count} gate row(s) shown by the scan lie off the investigated decode path (files no profiled kernel's call "
               f"path reaches; most in {where}): listed in full in [{APPENDIX}]({APPENDIX})." if count else "")
    return {"tables": tables, "off": off, "summary": summary}


def render_gates_appendix(findings: list[Finding]) -> str | None:
    """The appendix: every gate row off the investigated decode path, by table, and the scan's whole location
    lists (the finding's JSON) off that path; None without a gates finding or any such row."""
    gates = next((f for f in findings if f.step == "gates"), None)
    if gates is None:
        return None
    split, files = gates_split(gates), _path_files(gates)
    if not split["summary"]:
        return None
    lines = ["# Gates off the investigated decode path", "",
             f"The rows of {finding_link(gates)}'s tables (and of its full location lists) in files that no profiled "
             f"kernel's call path reaches ({', '.join(f'`{f}`' for f in sorted(files)) or 'none'} are on it). "
             f"PROFILE_FINDINGS.md shows the rows on the path and this one line for the rest.", ""]
    for t, left in split["off"]:
        if left:
            lines += [f"## {t.title}", "", table(Table(title=t.title, columns=t.columns, rows=left)), ""]
    for key, title in (("failing", "Every gate the declared SM fails"), ("exits_passed", "Every early-exit guard passed")):
        rest = [at for at in gates.data.get(key) or [] if at.rsplit(":", 1)[0] not in files]
        if rest:
            lines += [f"## {title}, off the path ({len(rest)})", "", ", ".join(f"`{at}`" for at in rest), ""]
    return "\n".join(lines)
