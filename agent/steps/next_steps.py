"""The next steps the run's own traces support, ranked by their bound on the decode step (issue 32).

Computed by the report from artifacts the run already holds (no tool call, no new measurement): the trace
of the last setting profiled (round 2's, after a rewrite; else the profile's) and the eager profile of
the same step beside it. Four kinds of step, each with its evidence (the finding and the journal lines):

- fusion candidates (tools.trace.sequences): per operation, its closed frequent kernel sequence whose
  fusion saves the most at most: the device idle between its kernels in the graph replay (measured) plus
  its intermediates written and read once at the measured copy rate (modelled: the trace holds no tensor
  sizes; each operation's intermediate takes its own shape from the model's shapes, agent/steps/fusion_model.py);
  a fused path the engine already has is named where the gates scan tied one to a kernel of it, and the
  fused op SGLang's source has for the operation where the scan of its source finds one (fusion_model.py);
- overlap (tools.trace.overlap), on a profile of several ranks: the critical rank's collective time with no
  computation beside it; what could hide it is modelled from the engine's structure (below);
- the FP8 GEMMs, where the engine ran bf16 weights for the checkpoint's FP8/FP4 (its own note): at most
  half the GEMM kernels' time (modelled: the weight bytes halve, the decode GEMMs taken as memory-bound);
- the levers the sweep did not try, with no bound (not measured).

A bound is time a step (us) over the setting's step window W (measured, the trace's in-step window a
step): the step at most W / (W - bound) faster. One whose effect is below the sweep's smallest detectable
effect is marked so: the run could not see it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent.evidence import typed
from schema.finding import Finding
from tools import trace
from tools.trace.overlap import overlap
from tools.trace.sequences import fusion_candidates

from .fusion_model import intermediate_of, known_fused

FUSION_RANKED = 5  # operations whose fusion is ranked among the next steps; the table holds the rest
GEMM = "gemm/moe"
# The engine's structure behind the overlap bound: tools/engines/reference/collective.py parallel_impl
# (after sglang 0.5.23 deepseek_v4 _project_wo_b and deepseek_v2 DeepseekV2MoE post_experts_all_reduce).
OVERLAP_STRUCTURE = (
    "modelled from the engine's structure (tools/engines/reference/collective.py parallel_impl, after SGLang's "
    "deepseek_v4/deepseek_v2): each all-reduce's input is its block's whole output and its result the residual "
    "the next block reads, so within one batch no computation of the step is independent of it; split in two "
    "micro-batches, one half's all-reduce can run beside the other half's computation: at most the exposed "
    "time, and no more than the computation there is to put beside it")


def _name(finding: Finding) -> str:
    return f"{finding.index:02d}-{finding.step}"


def _seqs(finding: Finding | None, *keys: str) -> list[int]:
    if finding is None:
        return []
    return sorted({s for key in keys if key in finding.numbers for s in finding.numbers[key].seqs})


def _setting(by_step: dict[str, Finding]) -> tuple[Finding, list[str], str | None, str] | None:
    """The last GPU setting profiled: (its finding, trace files, eager twin or None, label)."""
    round2 = by_step.get("round2")
    if round2 is not None:
        data = typed(round2)
        if data.complete and data.trace and data.kind == "gpu":
            return round2, [data.trace], data.eager_trace(), data.setting
    profile = by_step.get("profile")
    if profile is None:
        return None
    data = typed(profile)
    if not data.complete or not data.trace_files():
        return None
    return profile, data.trace_files(), data.eager_trace(), data.setting.label


def _step(kind: str, what: str, bound_us: float | None, window_us: float, basis: str, detail: str,
          evidence: list[tuple[Finding | None, list[int]]]) -> dict[str, Any]:
    share = bound_us / window_us if bound_us is not None and window_us > 0 else None
    x = window_us / (window_us - bound_us) if share is not None and share < 1 else None
    return {"kind": kind, "what": what, "bound_us": bound_us, "share": share, "x": x, "basis": basis, "detail": detail,
            "evidence": [{"finding": _name(f), "seqs": seqs} for f, seqs in evidence if f is not None]}


def _fusion_row(c, intermediate, fast_paths: dict[str, str], known: dict[str, list[dict]]) -> dict:
    found = intermediate(c.operation) if intermediate else None
    modelled = c.boundaries_per_step * found[0] if found else None
    return {**c.to_dict(), "modelled_us": modelled, "bound_us": c.gap_us_per_step + (modelled or 0.0),
            "intermediate": found[1] if found else None,
            "fast_paths": sorted({fast_paths[k] for k in c.kernels if k in fast_paths}),
            "engine_fused": [k["short"] for k in known.get(c.operation, [])],
            "engine_fused_text": [k["text"] for k in known.get(c.operation, [])]}


def fusion_steps(found, window_us: float, intermediate, fast_paths: dict[str, str], known: dict[str, list[dict]],
                 evidence) -> tuple[list[dict], list[dict]]:
    """Per operation, its candidate with the largest bound (candidates of one operation share kernels, so
    they are not added); returns (the steps, the table's rows: every candidate with its bound).
    ``intermediate(operation)``: (us, how) of one of its intermediates, or None (not modelled)."""
    rows, best = [], {}
    for c in found.candidates:
        row = _fusion_row(c, intermediate, fast_paths, known)
        rows.append(row)
        if c.timed_occurrences and (c.operation not in best or row["bound_us"] > best[c.operation]["bound_us"]):
            best[c.operation] = row
    rows.sort(key=lambda r: (-r["bound_us"], r["operation"], r["kernels"]))
    steps = []
    for row in sorted(best.values(), key=lambda r: (-r["bound_us"], r["operation"])):
        detail = (f"{len(row['kernels'])} kernels {row['per_step']:.3g} times a step ({row['launches_per_step']:.3g} launches, "
                  f"{row['time_us_per_step']:.4g} us of kernel time): device idle between them {row['gap_us_per_step']:.3g} us "
                  f"a step (measured, {found.timing})")
        if row["modelled_us"] is not None:
            detail += f" + {row['boundaries_per_step']:.3g} intermediates, each {row['intermediate']}: {row['modelled_us']:.3g} us (modelled)"
        else:
            detail += "; the intermediates' traffic is not modelled (no model shapes)"
        if row["fast_paths"]:
            detail += f"; the gates scan names a fused path for its kernels: {', '.join(row['fast_paths'])}"
        if row["engine_fused_text"]:
            detail += "; the engine already has it fused: " + " | ".join(row["engine_fused_text"])
        step = _step("fusion", f"fuse {row['operation']}'s kernel sequence", row["bound_us"], window_us,
                     "measured + modelled" if row["modelled_us"] is not None else "measured", detail, evidence)
        # a fusion the deployment's engine already runs is the stand-in's overhead, not a step for the deployment
        step["engine_fused"] = bool(row["engine_fused"])
        steps.append(step)
    return steps, rows


def overlap_step(by_step: dict[str, Finding], files: list[str], window_us: float, path_of, evidence) -> tuple[dict | None, dict]:
    """The critical rank's exposed collective time as a bound, and the per-rank table; (None, why) for one rank."""
    profile = by_step.get("profile")
    parallel = typed(profile).parallel if profile is not None else None
    if not parallel or len(files) < 2:
        return None, {"status": "one rank: no collective in the profile"}
    try:
        found = overlap([path_of(f) for f in files])
    except ValueError as exc:
        return None, {"status": f"not read: {exc}"}
    ranks = [r.to_dict() for r in found.ranks]
    critical = parallel.get("critical_rank")
    rank = next((r for r in found.ranks if r.rank == str(critical)), None) or min(found.ranks, key=lambda r: r.exposed_us)
    bound = min(rank.exposed_us, rank.computation_outside_us)
    table = {"status": "read", "ranks": ranks, "critical_rank": critical, "rank": rank.rank,
             "communication_share": parallel.get("communication_share"), "structure": OVERLAP_STRUCTURE}
    detail = (f"rank {rank.rank} ({'critical, from the timed run' if critical is not None else 'the least exposed: no critical rank named'}): "
              f"collectives {rank.communication_us:.4g} us a step, {rank.exposed_us:.4g} us with no computation beside them "
              f"({100 * (rank.overlap_share or 0):.0f}% overlapped), computation {rank.computation_us:.4g} us (measured); "
              f"{OVERLAP_STRUCTURE}")
    return _step("overlap", "overlap the collectives with computation (two micro-batches)", bound,
                 rank.window_us or window_us, "measured + modelled", detail, evidence), table


def fp8_step(levers: Finding | None, summary, window_us: float, evidence) -> dict | None:
    """Half the GEMM kernels' time a step, where the engine's note says it ran bf16 for FP8/FP4 weights."""
    note = typed(levers).bf16_for_fp8() if levers is not None else None
    if note is None or summary is None or not summary.steps:
        return None
    gemm_us = summary.categories.get(GEMM, 0.0) / summary.steps
    detail = (f"the {GEMM} kernels: {gemm_us:.4g} us a step (measured); the engine's note: {note}; FP8 weights halve "
              "their bytes and FP4 quarters them: at most three quarters of their time if memory-bound and every weight "
              "were FP4 (modelled; the checkpoint's mix of FP8 and FP4 is not in the run); the stand-in's bf16 is its "
              "own: whether the deployment's engine runs these GEMMs at the checkpoint's precision on the declared GPU "
              "is not measured here")
    return _step("fp8", "run the weight GEMMs at the checkpoint's precision (FP8/FP4)", 0.75 * gemm_us, window_us,
                 "modelled", detail, evidence)


# the split-K rewrite's own kernels, by the names its Triton and Gluon kernels keep in traces
REWRITE_KERNELS = ("_split_kernel", "_split_dhalf_kernel", "_combine_kernel")


def rewrite_step(by_step: dict[str, Finding], finding: Finding, summary, window_us: float, evidence) -> dict | None:
    """The rewrite's own kernels, where the traced setting is the one with split-K: at most their time a step
    (measured), a kernel the run built and can tune further (its grid and occupancy in round 2's finding)."""
    if finding.step != "round2" or summary is None or not summary.steps:
        return None
    ours = [k for k in summary.kernels if k.name.startswith(REWRITE_KERNELS)]
    if not ours:
        return None
    us = sum(k.total_us for k in ours) / summary.steps
    launches = sum(k.calls for k in ours) / summary.steps
    detail = (f"{', '.join(sorted({k.name for k in ours}))}: {us:.4g} us a step in {launches:.3g} launches (measured, "
              "the rewrite's profile); an instant rewrite is the bound: its grid, split count and padding heads at the "
              "deployment's shapes are in round 2's finding")
    return _step("rewrite", "tune the rewrite's own kernels", us, window_us, "measured", detail, evidence)


def lever_steps(levers: Finding | None, window_us: float) -> list[dict]:
    """The levers the sweep did not try: no bound (not measured)."""
    if levers is None:
        return []
    return [_step("lever", f"try the lever {lever.name}", None, window_us, "not measured",
                  f"not tried: {lever.reason or 'no reason recorded'}", [(levers, _seqs(levers, 'smallest_detectable_effect'))])
            for lever in typed(levers).not_tried()]


def next_steps(findings: list[Finding], path_of: Callable[[str], Path]) -> dict[str, Any] | None:
    """The ranked next steps and the tables behind them, as plain data for the report finding; None when the
    run profiled no setting; only a ``status`` (no steps) when its trace is unreadable or CPU-only."""
    by_step = {f.step: f for f in findings}
    setting = _setting(by_step)
    if setting is None:
        return None
    finding, files, eager, label = setting
    seq_keys = ("in_step_window_ms", "steps", "window_ms")
    try:
        summary = trace.summarize([path_of(f) for f in files])
    except ValueError as exc:
        return {"status": f"the trace of {label} could not be read: {exc}", "steps": []}
    if summary.kind != trace.GPU:
        return {"status": f"not computed: the trace of {label} is CPU-only (host ranges timed by the interpreter, no "
                          "device kernels): no kernel sequence, launch gap or collective to read", "steps": []}
    window_us = summary.merged.in_step_window_us / summary.merged.steps / max(len(summary.ranks), 1) if summary.merged.steps else 0.0
    survey, levers, profile = by_step.get("survey"), by_step.get("levers"), by_step.get("profile")
    trace_evidence = [(finding, _seqs(finding, *seq_keys))]
    steps, part = [], {"setting": label, "finding": _name(finding), "window_us": window_us, "files": files, "eager": eager}
    intermediate = _intermediate(profile, survey)
    gates = typed(by_step["gates"]) if "gates" in by_step else None
    fast_paths = {k.kernel: f"{k.fast_path} ({getattr(k, 'at', '?')})" for k in (gates.fallback_kernels if gates else [])}
    known, known_source = known_fused(typed(survey).software.sglang if survey is not None else None,
                                      gates.failing if gates is not None else None)
    try:
        found = fusion_candidates([path_of(eager), path_of(files[0])] if eager else [path_of(files[0])])
        fusion, rows = fusion_steps(found, window_us, intermediate, fast_paths, known,
                                    trace_evidence + [(survey, _seqs(survey, "copy_gb_s"))])
        open_steps = [f for f in fusion if not f["engine_fused"]]
        steps += open_steps[:FUSION_RANKED]
        part["more_fusion"] = max(len(open_steps) - FUSION_RANKED, 0)
        part["already_fused"] = [f["what"].removeprefix("fuse ").removesuffix("'s kernel sequence")
                                 for f in fusion if f["engine_fused"]]
        part["fusion"] = {"status": "mined", "timing": found.timing, "matched": found.matched, "steps": found.steps,
                          "attributed": found.attributed, "candidates": rows[:12], "count": len(rows),
                          "modelled": intermediate is not None, "known_source": known_source}
    except ValueError as exc:
        part["fusion"] = {"status": f"not mined: {exc}"}
    over, part["overlap"] = overlap_step(by_step, files, window_us, path_of, [(profile, _seqs(profile, *seq_keys))])
    steps += [s for s in (over, fp8_step(levers, summary.merged, window_us, trace_evidence + [(levers, _seqs(levers, "baseline_tok_s"))])) if s]
    steps += [s for s in (rewrite_step(by_step, finding, summary.merged, window_us, trace_evidence),) if s]
    steps += lever_steps(levers, window_us)
    detectable = levers.numbers.get("smallest_detectable_effect") if levers is not None else None
    for step in steps:
        step["below_detectable"] = (None if detectable is None or step["x"] is None
                                    else step["x"] - 1 < float(detectable.value))
    steps.sort(key=lambda s: (s["bound_us"] is None, -(s["bound_us"] or 0.0), s["what"]))
    part.update(steps=steps, smallest_detectable=float(detectable.value) if detectable is not None else None,
                detectable_seqs=detectable.seqs if detectable is not None else [])
    return part



def _intermediate(profile: Finding | None, survey: Finding | None):
    """operation -> (us to write and read once one of its intermediates, how), from the profiled setting's
    shapes and batch and the survey's copy rate; None when any is missing."""
    if profile is None or survey is None or "copy_gb_s" not in survey.numbers:
        return None
    data = typed(profile)
    rate = float(survey.number("copy_gb_s"))
    if not data.shapes or not data.batch or rate <= 0:
        return None
    return lambda operation: intermediate_of(operation, data.shapes, data.batch, rate)
