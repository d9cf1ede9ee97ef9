"""The consistency check on real journals: the shipped H200 run of 2026-11-30 (copied to tests/data
before it was re-recorded) called a measurement above its own ceiling a hit; the check must say so.
A violation planted in a fresh run must be reported too."""

import json
from pathlib import Path

import pytest

from agent.consistency import KERNEL_MEASUREMENT, check, journal_samples
from schema.finding import Finding
from conftest import DATA

OLD = DATA / "examples-20261130"


def _journal(path: Path):
    events = [json.loads(line) for line in path.read_text().splitlines()]
    target = next(e for e in events if e["kind"] == "run_start")["target"]
    findings = [Finding.model_validate(e["finding"]) for e in events if e["kind"] == "finding"]
    return events, target, findings


def _step(findings, step):
    return next(f for f in findings if f.step == step)


def test_the_old_h200_journal_has_both_violations():
    events, target, findings = _journal(OLD / "h200" / "log.jsonl")
    result = check(findings, target, journal_samples(events))
    ceiling, splitk, gates = (_step(findings, s) for s in ("ceiling", "splitk", "gates"))
    stated = ceiling.numbers["instant_speedup"].value
    violated = {(c.measurement, round(c.claim_x, 9)) for c in result.checks if c.verdict == "violated"}
    # the split-K run and the FlashMLA what-if, each above the instant-kernel ceiling the run stated
    assert ("split-K rewrite", round(stated, 9)) in violated
    assert ("what-if flashmla", round(stated, 9)) in violated
    assert ("split-K rewrite", round(ceiling.numbers["timed_instant_speedup"].value, 9)) in violated
    for c in result.checks:
        if c.verdict == "violated":
            # beyond the noise of that comparison: the whole interval lies above the bound
            assert c.measured_interval is not None and c.measured_interval[0] > c.claim_x
            assert c.cause
    split = next(m for m in result.measurements if m.name == "split-K rewrite")
    assert split.x == splitk.numbers["measured_x"].value
    lo, hi = split.interval
    assert lo <= split.x <= hi and (hi - lo) / split.x < 0.05  # a CUDA-graph comparison: under 5% wide
    what_if = next(m for m in result.measurements if m.name == "what-if flashmla")
    assert what_if.tok_s == gates.data["what_if"]["measured"][0][2]
    # the finding called its prediction held; against that comparison's noise it missed
    assert splitk.verdict == "prediction-holds"
    missed = [c for c in result.checks if c.kind == "prediction" and c.verdict == "missed" and c.claim_finding == splitk.stem]
    assert missed and all("prediction-holds" in c.note for c in missed)
    # the causes the run can find: the kernel-only bound and the profiler's gaps inside T
    cause = missed[0].cause
    assert "alone" in cause and "profiler" in cause


def test_the_old_cpu_journal_keeps_interpreted_and_native_apart():
    events, target, findings = _journal(OLD / "cpu" / "log.jsonl")
    result = check(findings, target, journal_samples(events))
    torch_rows = [c for c in result.checks if c.measurement == "lever attention-torch-fallback"]
    assert torch_rows and {c.verdict for c in torch_rows} == {"not comparable"}
    assert all("interpreter" in c.note for c in torch_rows)


def _planted(findings: list[Finding], factor: float) -> list[Finding]:
    """The fresh run's split-K measurement moved so its interval's low end lies ``factor`` times above
    the largest bound the run states."""
    out = []
    for f in findings:
        if f.step == "splitk":
            f = f.model_copy(deep=True)
            bound = max(n.value for k, n in next(g for g in findings if g.step == "ceiling").numbers.items()
                        if k.endswith("instant_x") or k in ("instant_speedup", "timed_instant_speedup"))
            # the whole interval above the bound: its low end at factor x the bound, its noise moved with it
            scale = bound * factor / f.data["measured_interval"][0]
            f.numbers["measured_x"].value *= scale
            f.numbers["splitk_tok_s"].value *= scale
            f.data["measured_interval"] = [v * scale for v in f.data["measured_interval"]]  # its noise moves with it
        out.append(f)
    return out


@pytest.mark.slow
def test_a_violation_planted_in_a_fresh_run_is_reported(dsv4_run):
    events = [json.loads(line) for line in (dsv4_run / "log.jsonl").read_text().splitlines()]
    target = next(e for e in events if e["kind"] == "run_start")["target"]
    findings = [Finding.model_validate(e["finding"]) for e in events if e["kind"] == "finding"]
    honest = check(findings, target)
    # the options' kernel estimate is a byte ratio, which the Triton CPU interpreter's kernel times do not follow:
    # on a CPU run the profiles measure the kernel faster than it, and the report lists that as the model's failure
    assert not [c for c in honest.checks if c.kind == "bound" and c.verdict == "violated"
                and c.measurement != KERNEL_MEASUREMENT]
    planted = check(_planted(findings, 1.5), target)
    assert [c for c in planted.checks if c.measurement == "split-K rewrite" and c.verdict == "violated"]
    # the same number without its interval cannot be told from noise around the bound: undetermined, not a hit
    bare = _planted(findings, 1.5)
    next(f for f in bare if f.step == "splitk").data.pop("measured_interval")
    rows = [c for c in check(bare, target).checks if c.measurement == "split-K rewrite" and c.kind == "bound"]
    assert rows and "violated" not in {c.verdict for c in rows} and "undetermined" in {c.verdict for c in rows}


def test_a_backend_lever_above_the_ceiling_sends_the_investigation_on_from_it():
    """The ceiling step finds a lever that replaced the operation and beat its bound; the router then
    profiles again, and the profile step takes the best measured setting."""
    from agent import routes
    from agent.config import load_target
    from agent.steps.ceiling import compute_ceiling

    events, _, findings = _journal(OLD / "h200" / "log.jsonl")
    target, _ = load_target("dsv4-flash")
    survey, profile = _step(findings, "survey"), _step(findings, "profile")
    base = 100.0
    levers = Finding(index=2, step="levers", headline="", verdict="goal-not-met",
                     numbers={"baseline_tok_s": {"value": base}},
                     data={"levers": [{"name": "attention-torch-fallback", "status": "moves up", "tok_s": 3.0 * base,
                                       "ratio": 3.0, "interval": [2.9, 3.1], "comparable": True,
                                       "output": {"ok": True}}],
                           "baseline_options": dict(profile.data["setting"]["options"]), "goal_met": False,
                           # the fields every levers finding carries (agent.evidence.LeversData): read through it
                           "device": "cuda", "batch": 16, "concurrency": 16})
    state = {"findings": [f.model_dump(mode="json") for f in (survey, levers, profile)]}
    ceiling = compute_ceiling(state, None, target)
    assert ceiling.data["beaten_by"] == ["attention-torch-fallback"] and ceiling.verdict == "model-failed"
    state["findings"].append(ceiling.numbered(state, "ceiling").model_dump(mode="json"))
    assert routes.after_ceiling(state) == "profile_decode"
    # an honest lever (within the bound) leaves the investigation on the deployment's setting
    levers.data["levers"][0].update(ratio=1.5, interval=[1.4, 1.6], tok_s=1.5 * base)
    state["findings"] = [f.model_dump(mode="json") for f in (survey, levers, profile)]
    honest = compute_ceiling(state, None, target)
    assert "beaten_by" not in honest.data
    state["findings"].append(honest.numbered(state, "ceiling").model_dump(mode="json"))
    assert routes.after_ceiling(state) == "scan_gates"
