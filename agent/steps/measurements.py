"""Reading the engine's measurements, shared by the steps that measure (levers, profile, gates, split-K,
round 2): an engine.bench result's throughput at a batch, an engine.sweep's runs matched to the plan,
a setting's outputs checked against the baseline's, a ratio as text, and the labels that say how a
finding's numbers must be read (stand-in hardware, the Triton CPU interpreter)."""

from __future__ import annotations

from statistics import median
from typing import Any

from agent import stats
from agent.evidence import typed
from agent.state import InvestigationState, finding_for
from agent.steps import StepFailed


def throughput(result: dict[str, Any], batch: int) -> dict[str, float]:
    """tok/s and step time at one batch size from an engine.bench result, measured and projected."""
    rows = [r for r in result["data"]["results"] if r["batch"] == batch]
    if not rows:
        raise StepFailed(f"the engine reported no result at batch {batch}")
    row = rows[0]
    return {"tok_s": row["tok_s_projected"], "tok_s_measured": row["tok_s"], "step_ms": row["step_ms"],
            "layer_ms": row["layer_ms"]}


def interpretation_labels(state: InvestigationState, target=None) -> list[str]:
    """How a measured finding's numbers must be read, from the survey: "stand-in" when the box is not
    the declared hardware, "cpu-interpreter" when Triton ran under its CPU interpreter; and, given the
    ``target``, "stand-in-server" when its SGLang server is the stand-in (tools/engines/sglang_standin)."""
    survey = finding_for(state, "survey")
    labels = ["stand-in"] if typed(survey).stand_in else []
    if typed(survey).box.device == "cpu":
        labels.append("cpu-interpreter")
    server = getattr(getattr(target, "engine", None), "server", None)
    if server is not None and server.stand_in:
        labels.append("stand-in-server")
    return labels


def ratio_text(ratio: float | None, low: float | None, high: float | None) -> str:
    """``+95.7% [+94.8, +96.6]`` for a throughput ratio and its interval; ``12.3x [11.9, 12.8]``
    from 2x up, where percentages stop being readable."""
    if ratio is None:
        return "-"
    if ratio >= 2:
        bounds = f" [{low:.3g}, {high:.3g}]" if low is not None else " (no interval)"
        return f"{ratio:.3g}x{bounds}"
    bounds = f" [{100 * (low - 1):+.1f}, {100 * (high - 1):+.1f}]" if low is not None else " (no interval)"
    return f"{100 * (ratio - 1):+.1f}%{bounds}"


def rounds_tok_s(scales: list[float], steps_ms: list[float]) -> float:
    """A setting's tok/s in alternating rounds: its run of median step time, projected as the engine projects
    every run (tok/s x step ms is one scale at this batch and depth), so a step time and its tok/s are one run's."""
    return median(scales) / median(steps_ms)


def sweep_runs(plan: list[dict[str, Any]], labels: list[str], result: dict[str, Any], batch: int) -> list[dict[str, Any]]:
    """The plan's runs with what the engine.sweep ``result`` measured for each (matched by position
    and checked by label): ok, step_ms, samples, tok_s, scale, interpreted, sketch, planted_delay,
    or error. ``seq`` is the line of the sweep call that measured the run (agent.engine_runs.run_sweep)."""
    measured = result["data"]["runs"]
    if [m["label"] for m in measured] != labels:
        raise StepFailed(f"engine.sweep returned {len(measured)} runs that do not match the {len(labels)} asked for")
    runs = []
    for entry, label, rec in zip(plan, labels, measured):
        run = {**entry, "label": label, "seq": rec.get("seq", result["seq"]), "ok": rec["ok"], "wall_s": rec.get("wall_s")}
        rows = [r for r in rec.get("results") or [] if r["batch"] == batch]
        if rec["ok"] and rows:
            row = rows[0]
            tok_s = row["tok_s_projected"]
            # tok/s x step ms is the same for every run of the engine at this batch and depth
            run.update(step_ms=row["step_ms"], samples=row["step_ms_samples"], tok_s=tok_s, scale=tok_s * row["step_ms"],
                       interpreted=bool(rec.get("interpreter")), sketch=row.get("output_sketch"),
                       planted_delay=row.get("planted_delay"), distinct_experts=row.get("moe_distinct_experts"))
        else:
            run.update(ok=False, error=rec.get("error") or f"the engine reported no result at batch {batch}")
            if rec.get("log_excerpt"):  # a server's run (sglang.sweep): what it logged as it failed
                run.update(kind=rec.get("kind"), log_excerpt=rec["log_excerpt"],
                           error=f"{rec.get('kind') or 'failed'}: {run['error']}")
        if rec.get("server"):
            run["server"] = rec["server"]
        runs.append(run)
    return runs


def output_check(reference: dict | None, sketches: list[dict | None], rtol: float) -> dict[str, Any]:
    """A setting's outputs against the baseline's, row by row (a row is one request's output).

    A request whose router meets a near tie can pick another expert when the rounding of an earlier
    operation differs (another attention kernel, another GEMM, compiled code): from that layer on its
    row is computed differently, far beyond rounding, while the other requests' rows stay within it.
    A wrong computation moves every row. So the check is on the median row: ``error`` is the worst
    run's median row error, ``ok`` when it is within ``rtol``; ``rows_beyond`` counts the rows of the
    worst run beyond ``rtol`` and ``worst_row`` its largest row error, both reported. ``ok`` None
    (with a note) when there is nothing to compare, never a silent pass."""
    if reference is None:
        return {"ok": None, "error": None, "rtol": rtol, "note": "no baseline output sketch to compare with"}
    if not sketches or any(s is None for s in sketches):
        return {"ok": None, "error": None, "rtol": rtol, "note": "the engine reported no output sketch"}
    try:
        per_run = [stats.row_errors(reference, s) for s in sketches]
    except ValueError as exc:
        return {"ok": None, "error": None, "rtol": rtol, "note": str(exc)}
    worst = max(per_run, key=median)
    error = median(worst)
    beyond = sum(1 for e in worst if e > rtol)
    note = (f"{beyond} of {len(worst)} rows differ beyond {100 * rtol:.0f}% (up to {100 * max(worst):.3g}%), the median row "
            f"agrees: a few requests changed, as an expert choice flipped on a near tie would do (not measured), "
            f"not every row, as a wrong computation would" if beyond and error <= rtol else "")
    return {"ok": error <= rtol, "error": error, "rtol": rtol, "rows_beyond": beyond, "rows": len(worst),
            "worst_row": max(worst), "note": note}
