"""Two runs' findings side by side: each number of A against the same step's number of B, the change
as B/A, and whether the change is beyond what the runs' own intervals allow (what Nsight Compute's
baseline compare gives for kernels, for whole investigations).

A number's interval is only what its run recorded, in the order the run is most direct about it:
its ``KEY_low``/``KEY_high`` siblings (a lever's paired ratio interval, split-K's measured interval),
else its ``spread`` (a relative half-width), else nothing. Where both runs recorded the baseline's
run medians (the levers step), the change of the baseline's own numbers gets a ratio interval from
both runs' samples (agent.stats.ratio_interval), which is what those runs can tell apart. Nothing is
guessed: a change with no interval on either side says "no interval".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.evidence import data_of
from agent.runlog import LOG_NAME, read_events
from schema.finding import Finding, Number

# Verdicts, one per row
BEYOND = "beyond"  # the intervals do not overlap, or the samples' ratio interval excludes no change
WITHIN = "within"
NO_INTERVAL = "no interval"
SAME = "same"  # identical values: nothing to judge
CHANGED = "changed"  # a text value that differs
A_ONLY = "A only"
B_ONLY = "B only"


class DiffError(RuntimeError):
    """A run cannot be read as a run; the message is one line."""


@dataclass
class Row:
    step: str
    key: str
    label: str
    unit: str
    a: Any
    b: Any
    ratio: float | None
    change_pct: float | None
    verdict: str
    basis: str  # what the verdict rests on, in words
    interval_a: list[float] | None = None
    interval_b: list[float] | None = None
    ratio_interval: list[float] | None = None

    def as_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Diff:
    a: str
    b: str
    rows: list[Row] = field(default_factory=list)
    steps_a_only: list[str] = field(default_factory=list)
    steps_b_only: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for row in self.rows:
            counts[row.verdict] = counts.get(row.verdict, 0) + 1
        return counts


def findings(run: Path) -> dict[str, Finding]:
    """The run's latest finding of each step, in the run's order; a step the run took twice (a second
    profile after a lever beat the ceiling) is ``step#2``, so that each is compared with its like."""
    try:
        events = read_events(run / LOG_NAME)
        latest: dict[int, Finding] = {}
        for event in events:
            if event.get("kind") == "finding":
                finding = Finding.model_validate(event["finding"])
                latest[finding.index] = finding
    except Exception as exc:  # a journal this version cannot read is bad input, in one line
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise DiffError(f"{run}: its findings cannot be read ({type(exc).__name__}: {first})") from None
    named: dict[str, Finding] = {}
    seen: dict[str, int] = {}
    for index in sorted(latest):
        step = latest[index].step
        seen[step] = seen.get(step, 0) + 1
        named[step if seen[step] == 1 else f"{step}#{seen[step]}"] = latest[index]
    return named


def _bounds(numbers: dict[str, Number]) -> dict[str, tuple[str, str]]:
    """Each number that has ``_low``/``_high`` siblings: their keys (``compile_ratio`` ->
    ``compile_ratio_low``/``_high``, ``measured_x`` -> ``measured_low_x``/``measured_high_x``)."""
    found = {}
    for key in numbers:
        if key.endswith("_low"):
            base, high = key[: -len("_low")], key[: -len("_low")] + "_high"
        elif "_low_" in key:
            base, high = key.replace("_low_", "_", 1), key.replace("_low_", "_high_", 1)
        else:
            continue
        if base in numbers and high in numbers:
            found[base] = (key, high)
    return found


def _numeric(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def interval(numbers: dict[str, Number], key: str, bounds: dict[str, tuple[str, str]]) -> tuple[list[float] | None, str]:
    """The interval a run recorded for ``numbers[key]`` and where it comes from; (None, "") if none."""
    number = numbers[key]
    if key in bounds:
        low, high = (numbers[k].value for k in bounds[key])
        if _numeric(low) and _numeric(high):
            return [float(low), float(high)], "intervals"
    if number.spread is not None and _numeric(number.value):
        v = float(number.value)
        return sorted([v * (1 - number.spread), v * (1 + number.spread)]), "± spread"
    return None, ""


def _run_medians(finding: Finding | None) -> list[float] | None:
    if finding is None or finding.step != "levers":  # the baseline's runs are the lever sweep's
        return None
    runs = (data_of(finding).baseline or {}).get("run_ms")
    return [float(v) for v in runs] if runs and all(_numeric(v) and v > 0 for v in runs) else None


# The levers step's numbers that are the baseline's run medians reduced: how each moves with step time
# (tok/s is its inverse). Only these get a ratio interval from the samples; any other number would be a guess.
_FROM_RUN_MEDIANS = {"baseline_tok_s": -1, "baseline_step_ms": 1, "baseline_layer_ms": 1, "projected_step_ms": 1}


def _samples_interval(step: str, key: str, fa: Finding, fb: Finding, confidence: float) -> list[float] | None:
    """B/A of a number both runs derived from the baseline's run medians: a Welch interval on both
    runs' log run medians (agent.stats.ratio_interval), oriented as the number moves."""
    from agent import stats

    power = _FROM_RUN_MEDIANS.get(key) if step == "levers" else None
    a_ms, b_ms = _run_medians(fa), _run_medians(fb)
    if power is None or a_ms is None or b_ms is None:
        return None
    # ratio_interval gives (A's ms / B's ms), i.e. B's tok/s over A's
    found = stats.ratio_interval(a_ms, b_ms, confidence)
    if found.low is None or found.high is None:
        return None
    return [found.low, found.high] if power == -1 else [1 / found.high, 1 / found.low]


def _confidence(fa: Finding, fb: Finding) -> float:
    for finding in (fa, fb):
        value = ((data_of(finding).sweep or {}) if finding.step == "levers" else {}).get("confidence")
        if _numeric(value):
            return float(value)
    return 0.95


def _compare(step: str, key: str, fa: Finding, fb: Finding, ba: dict, bb: dict) -> Row:
    na, nb = fa.numbers[key], fb.numbers[key]
    a, b = na.value, nb.value
    row = Row(step, key, nb.label or na.label, nb.unit or na.unit, a, b, None, None, NO_INTERVAL, "")
    if not (_numeric(a) and _numeric(b)):
        row.verdict, row.basis = (SAME, "") if a == b else (CHANGED, "not a number")
        return row
    row.interval_a, how_a = interval(fa.numbers, key, ba)
    row.interval_b, how_b = interval(fb.numbers, key, bb)
    if a != 0:
        row.ratio = b / a
        row.change_pct = (row.ratio - 1) * 100
    if a == b:
        row.verdict = SAME
        return row
    samples = _samples_interval(step, key, fa, fb, _confidence(fa, fb)) if row.ratio is not None else None
    if samples is not None:
        row.ratio_interval = samples
        beyond = samples[0] > 1 or samples[1] < 1
        row.verdict = BEYOND if beyond else WITHIN
        row.basis = f"B/A {_num(samples[0])}-{_num(samples[1])} from both runs' run medians"
    elif row.interval_a and row.interval_b:
        overlap = row.interval_a[0] <= row.interval_b[1] and row.interval_b[0] <= row.interval_a[1]
        row.verdict = WITHIN if overlap else BEYOND
        span_a, span_b = (f"{_num(v[0])}-{_num(v[1])}" for v in (row.interval_a, row.interval_b))
        row.basis = f"{how_a}: A {span_a}, B {span_b}" if how_a == how_b else f"A {span_a} ({how_a}), B {span_b} ({how_b})"
    elif row.interval_a or row.interval_b:
        # one side's interval alone cannot say the change is beyond both runs' noise; it says no more than that
        side, other, known = ("A", b, row.interval_a) if row.interval_a else ("B", a, row.interval_b)
        inside = known[0] <= other <= known[1]
        row.verdict = WITHIN if inside else NO_INTERVAL
        row.basis = f"only {side} states one ({_num(known[0])}-{_num(known[1])}); the other value is " + \
            ("inside it" if inside else "outside it")
    return row


def diff(run_a: Path, run_b: Path) -> Diff:
    """Every number of every step of A against B's (DiffError if either is not a readable run)."""
    fa_all, fb_all = findings(run_a), findings(run_b)
    result = Diff(str(run_a), str(run_b))
    result.steps_a_only = [s for s in fa_all if s not in fb_all]
    result.steps_b_only = [s for s in fb_all if s not in fa_all]
    order = list(fa_all) + [s for s in fb_all if s not in fa_all]  # A's order; B's extra steps after
    for step in order:
        fa, fb = fa_all.get(step), fb_all.get(step)
        if fa is None or fb is None:
            only = fa or fb
            for key, number in only.numbers.items():
                result.rows.append(Row(step, key, number.label, number.unit, number.value if fa else None,
                                       None if fa else number.value, None, None, A_ONLY if fa else B_ONLY,
                                       "step in one run only"))
            continue
        ba, bb = _bounds(fa.numbers), _bounds(fb.numbers)
        folded = {k for pair in list(ba.values()) + list(bb.values()) for k in pair}  # shown as intervals, not rows
        keys = [k for k in fa.numbers if k not in folded] + [k for k in fb.numbers if k not in fa.numbers and k not in folded]
        for key in keys:
            if key not in fb.numbers or key not in fa.numbers:
                number = fa.numbers.get(key) or fb.numbers[key]
                in_a = key in fa.numbers
                result.rows.append(Row(step, key, number.label, number.unit, number.value if in_a else None,
                                       None if in_a else number.value, None, None, A_ONLY if in_a else B_ONLY,
                                       "number in one run only"))
                continue
            result.rows.append(_compare(step, key, fa, fb, ba, bb))
    return result


def _num(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int) or float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value):,}" if abs(value) >= 1e4 else str(int(value))
    return f"{value:.4g}"


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def text(result: Diff, width: int = 160, same: bool = False) -> str:
    """The side-by-side table, with a summary first and the steps in one run only last; numbers
    identical in both runs are counted, and listed only with ``same``."""
    counts = result.counts()
    both = sum(v for k, v in counts.items() if k not in (A_ONLY, B_ONLY))
    parts = [f"{counts.get(BEYOND, 0)} changed beyond their intervals", f"{counts.get(WITHIN, 0)} within them",
             f"{counts.get(NO_INTERVAL, 0)} changed with no interval to judge by"]
    if counts.get(CHANGED):
        parts.append(f"{counts[CHANGED]} texts changed")
    parts.append(f"{counts.get(SAME, 0)} the same" + ("" if same or not counts.get(SAME) else " (not listed; --all lists them)"))
    lines = [f"A: {result.a}", f"B: {result.b}", f"{both} numbers in both runs: {', '.join(parts)}; "
             f"{counts.get(A_ONLY, 0)} numbers in A only, {counts.get(B_ONLY, 0)} in B only", ""]
    cells = [("step", "number", "A", "B", "B/A", "change", "beyond the intervals?")]
    for row in result.rows:
        if row.verdict == SAME and not same:
            continue
        unit = f" {row.unit}" if row.unit and _numeric(row.a if row.a is not None else row.b) else ""
        a = _num(row.a) + (unit if row.a is not None else "")
        b = _num(row.b) + (unit if row.b is not None else "")
        ratio = f"{row.ratio:.4g}" if row.ratio is not None else ""
        change = f"{row.change_pct:+.2f}%" if row.change_pct is not None else ""
        verdict = row.verdict + (f": {row.basis}" if row.basis else "")
        cells.append((row.step, _cut(row.key, 34), _cut(a, 22), _cut(b, 22), ratio, change, verdict))
    widths = [max(len(c[i]) for c in cells) for i in range(6)]
    for c in cells:
        line = "  ".join(c[i].ljust(widths[i]) if i < 2 else c[i].rjust(widths[i]) for i in range(6)) + "  " + c[6]
        lines.append(_cut(line.rstrip(), width) if width else line.rstrip())
    for side, steps in (("A", result.steps_a_only), ("B", result.steps_b_only)):
        if steps:
            lines.append(f"steps in {side} only: {', '.join(steps)}")
    return "\n".join(lines) + "\n"


def add_arguments(p) -> None:
    from agent.cli import DEFAULT_RUNS, _json_flag

    p.add_argument("run_a", metavar="RUN_A", help="the run compared against (the baseline): its directory, or its id "
                   "under --runs-dir")
    p.add_argument("run_b", metavar="RUN_B", help="the run compared: B/A is its change")
    p.add_argument("--runs-dir", default=str(DEFAULT_RUNS), help="where run ids are looked up (default: %(default)s)")
    p.add_argument("--all", action="store_true", help="list the numbers that are the same in both runs too (--json "
                   "always has them)")
    p.add_argument("--wide", action="store_true", help="lines not cut to the terminal's width")
    _json_flag(p, "a, b, numbers (one object a number: step, key, label, unit, a, b, ratio, change_pct, verdict, "
               "basis, interval_a, interval_b, ratio_interval), counts (numbers per verdict), steps_a_only, steps_b_only")
    p.set_defaults(func=command)


def command(args) -> int:
    """``diff RUN_A RUN_B``: the table, or with --json the object; a RUN that is not a run is bad input."""
    import shutil
    import sys

    from agent import runlist
    from agent.cli import _fail, _print_json, json_result
    from tools import exitcodes

    def run(ref: str) -> Path:
        try:
            return runlist.find_run(ref, Path(args.runs_dir))
        except runlist.RunsError:
            raise DiffError(f"{ref}: not a run (no {LOG_NAME} and history)") from None

    try:
        result = diff(run(args.run_a), run(args.run_b))
    except DiffError as exc:
        return _fail(str(exc), exitcodes.BAD_INPUT, args)
    if args.json:
        _print_json(json_result("diff", "done", f"{result.counts().get(BEYOND, 0)} numbers changed beyond their "
                                "intervals", **as_json(result)))
    else:
        sys.stdout.write(text(result, 0 if args.wide else shutil.get_terminal_size((160, 24)).columns, args.all))
    return exitcodes.DONE


def as_json(result: Diff) -> dict[str, Any]:
    return {"a": result.a, "b": result.b, "numbers": [row.as_json() for row in result.rows],
            "counts": result.counts(), "steps_a_only": result.steps_a_only, "steps_b_only": result.steps_b_only}
