"""The result block a finished investigation ends with: what the run found, as ``sglang.bench_serving``
ends with its own (issue 31). Every number is one the run's findings hold, shown as the report shows
it (reports.render.number_text; the report's "Goal against measurement" reads the same ones), never
recomputed; a field the run did not get to is None in ``result`` and "not reached" in the block.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent.evidence import data_of
from agent.rundir import REPORT
from agent.runlog import LOG_NAME, read_events
from reports.format import fmt
from reports.numbers import interval_spec
from reports.render import chosen_option, failure_groups, number_text
from schema.consistency import Consistency
from schema.finding import Finding, value_of

NOT_REACHED = "not reached"
TITLE = " Investigation Result "
WIDTH = 60  # the rule's width, as bench_serving's; a row's value may run past it
LABEL = 26


def _latest(events: list[dict]) -> dict[str, Finding]:
    """Each step's finding as the journal last recorded it (a step redone after a crash: its last)."""
    by_index: dict[int, Finding] = {}
    for event in events:
        if event["kind"] == "finding":
            by_index[event["index"]] = Finding.model_validate(event["finding"])
    return {f.step: f for _, f in sorted(by_index.items())}


def _text(finding: Finding | None, key: str, spec: str = ".3g") -> str | None:
    number = finding.numbers.get(key) if finding is not None else None
    return number_text(number, spec) if number is not None and number.value is not None else None


def result(run_root: Path) -> dict[str, Any]:
    """What the finished run found, read from its journal's findings and decision: the values (JSON's
    ``result``) and, under ``text``, each as the block shows it. ``findings`` counts what ``runs`` counts
    (each finding once, the report's included)."""
    events = read_events(run_root / LOG_NAME)
    steps = _latest(events)
    levers, ceiling, splitk, round2, report = (steps.get(s) for s in ("levers", "ceiling", "splitk", "round2", "report"))
    decisions = [e for e in events if e["kind"] == "decision"]
    decision = decisions[-1] if decisions else None
    interval = data_of(splitk).measured_interval if splitk is not None and value_of(splitk, "measured_x") else None
    later = round2 if round2 is not None and data_of(round2).complete else None
    held = data_of(report).consistency if report is not None and "consistency" in data_of(report).model_fields_set else None
    failures = len(failure_groups(Consistency.model_validate(held))) if held is not None else None
    values = {
        "findings": len({e["index"] for e in events if e["kind"] == "finding"}),
        "goal_tok_s": value_of(levers, "goal_tok_s"),
        "baseline_tok_s": value_of(levers, "baseline_tok_s"),
        "ceiling_tok_s": value_of(ceiling, "ceiling_tok_s"),
        "chosen_option": chosen_option(decision),
        "measured_x": value_of(splitk, "measured_x"),
        "measured_interval": list(interval) if interval else None,
        "measured_tok_s": value_of(splitk, "splitk_tok_s"),
        "goal_gap_x": value_of(later, "goal_gap_x"),
        "goal_distance_x": value_of(later, "goal_distance_x"),
        "goal": _reach(levers, ceiling, later),
        "model_failures": failures,
        "report": str(run_root / REPORT) if report is not None and (run_root / REPORT).is_file() else None,
    }
    values["text"] = _rows(values, levers, ceiling, splitk, later, decision)
    return values


def _reach(levers: Finding | None, ceiling: Finding | None, later: Finding | None) -> str | None:
    """Where the goal stands by the run's last word on it: met by a setting the levers measured,
    or reachable or not by the last ceiling (after the rewrite where one was measured)."""
    if levers is not None and data_of(levers).goal_met:
        return "met"
    if later is not None:
        return data_of(later).reach or ("reachable" if data_of(later).reachable else "not reachable")
    if ceiling is not None:
        return "reachable" if data_of(ceiling).reachable else "not reachable"
    return None


def _rows(values: dict[str, Any], levers, ceiling, splitk, later, decision) -> dict[str, str | None]:
    projected = " (projected)" if levers is not None and not data_of(levers).server else ""
    goal = _text(levers, "goal_tok_s", ".0f")
    ceiling_text = _text(ceiling, "ceiling_tok_s", ".4g")
    if values["measured_x"] is not None:
        low, high = values["measured_interval"] or (None, None)
        # beside its interval, the point to the ends' digits (as the report's first screen shows it): "2.096 x
        # [2.069, 2.124]", not the spread's "2.1 x"; without one, as the report shows the number alone
        spec = interval_spec(splitk.number('measured_x'), low, high) if low is not None else None
        measured = ((f"{fmt(splitk.number('measured_x'), spec, 'x')} [{fmt(low, spec)}, {fmt(high, spec)}]" if spec else
                     _text(splitk, 'measured_x', '.4g'))
                    + f" over the profiled setting: {_text(splitk, 'splitk_tok_s', '.4g')}{projected}")
    else:
        measured = None
    if values["goal"] == "met":
        gap = f"none: the goal {goal} is met ({_text(levers, 'best_tok_s', '.4g')}{projected})"
    elif later is not None:
        gap = (f"{_text(later, 'goal_gap_x')} (goal / measured), {_text(later, 'goal_distance_x')} (goal / the new "
               f"ceiling {_text(later, 'ceiling_tok_s', '.4g')}): {values['goal']}")
    elif ceiling is not None:
        needed = _text(ceiling, "speedup_needed")
        gap = (f"goal {goal} against the ceiling {ceiling_text}: {values['goal']}"
               + (f" (it needs a {needed} faster {'operation' if data_of(ceiling).operation else 'kernel'})"
                  if needed else ""))
    else:
        gap = None
    return {
        "Findings": str(values["findings"]),
        "Goal": f"{goal} at concurrency {data_of(levers).concurrency}" if goal else None,
        "Baseline": (f"{_text(levers, 'baseline_tok_s', '.4g')}{projected} at "
                     f"{'concurrency' if data_of(levers).server else 'batch'} {data_of(levers).batch}"
                     if values["baseline_tok_s"] is not None else None),
        "Ceiling": f"{ceiling_text} (projected; {_bound(ceiling)})" if ceiling_text else None,
        "Chosen option": (f"{values['chosen_option']} ({decision['source']} {decision['asked']})"
                          if values["chosen_option"] else None),
        "Measured speedup": measured,
        "Gap to the goal": gap,
        "Where the model failed": (None if values["model_failures"] is None else
                                   f"{values['model_failures'] or 'nowhere'} (the report's 'Where the model failed')"),
        "Report": values["report"],
    }


def _bound(ceiling: Finding) -> str:
    """What the ceiling assumes instant, in the report's words."""
    return ("the dominant kernel's operation instant" if data_of(ceiling).bound == "operation" else
            "the dominant kernel instant")


def block(values: dict[str, Any], run_name: str) -> str:
    """The block's text: a rule with the title, one row per field ("not reached" where the run did not
    get there), a closing rule."""
    lines = [TITLE.center(WIDTH, "="), f"{'Run:':<{LABEL}}{run_name}"]
    lines += [f"{label + ':':<{LABEL}}{text if text is not None else NOT_REACHED}"
              for label, text in values["text"].items()]
    lines.append("=" * WIDTH)
    return "\n".join(lines)
