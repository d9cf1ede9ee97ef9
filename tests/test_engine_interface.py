"""The engine interface (issue #33): the steps call the engine chosen once from the target's engine kind
and never ask which engine they hold, so a third engine fits without touching a step. A small fake engine
(kind "fake", no box, no tool) registers itself and the levers step measures through it unchanged, and the profile
step ranks the kernels of the minimal trace it writes, unchanged too."""

from __future__ import annotations

from typing import Any

import json

import pytest

from agent import engines
from agent.config import load_target
from agent.engine_runs import Setting
from agent.engines import Engine, Profiled, RunFailed, engine_for, register
from agent.steps import StepFailed
from agent.steps.levers import sweep_levers
from agent.steps.profile import profile_decode
from schema.finding import Finding, Number


class FakeEngine(Engine):
    """Every setting runs at a fixed step time: the baseline at 10 ms, a lever at ``speed[name]`` times faster."""

    kind = "fake"
    sweep_tool = "fake.sweep"

    def __init__(self, speed: dict[str, float], fail: bool = False):
        self.speed, self.swept, self.fail = speed, [], fail

    def sweep_batch(self, target, device) -> int:
        return 4

    def baseline(self, target, device) -> Setting:
        return Setting("baseline", dict(target.engine.env), {})

    def with_lever(self, target, lever, device) -> Setting:
        return Setting(lever.name, {**target.engine.env, **lever.env}, dict(lever.options))

    def applicability(self, target, lever, device) -> str | None:
        return None if lever.name in self.speed else "the fake engine has no such lever"

    def layers_run(self, target, device) -> int:
        return target.model.layers

    def sweep(self, session, target, device, runs, batch) -> dict[str, Any]:
        self.swept.append([label for label, _ in runs])
        out = []
        for i, (label, setting) in enumerate(runs):
            ms = 10.0 / self.speed.get(setting.label, 1.0) * (1 + 0.001 * (i % 3))
            out.append({"label": label, "ok": True, "results": [
                {"batch": batch, "step_ms": ms, "step_ms_samples": [ms] * 3, "tok_s_projected": batch * 1000 / ms}]})
        return {"ok": True, "seq": 7, "data": {"runs": out}, "artifacts": []}

    def profile(self, session, target, device, applied, levers) -> Profiled:
        """A trace of two decode steps written where the session keeps artifacts: each step 6 ms of
        ``fake_attention`` and 2 ms of ``fake_gemm`` (one launch each), 1 ms idle between them."""
        if self.fail:
            raise RunFailed("the fake engine's profiling run failed: no box")
        events = []
        for step in range(2):
            t0 = step * 10_000.0
            events += [{"ph": "X", "cat": "gpu_user_annotation", "name": f"ProfilerStep#{step}", "ts": t0, "dur": 9_000.0,
                        "pid": 0, "tid": 1},
                       {"ph": "X", "cat": "kernel", "name": "fake_attention", "ts": t0, "dur": 6_000.0, "pid": 0, "tid": 7, "args": {}},
                       {"ph": "X", "cat": "kernel", "name": "fake_gemm", "ts": t0 + 7_000.0, "dur": 2_000.0, "pid": 0, "tid": 7,
                        "args": {}}]
        ref = {"name": "fake.trace.json", "path": "artifacts/fake.trace.json"}
        session.root.joinpath(ref["path"]).parent.mkdir(parents=True, exist_ok=True)
        session.root.joinpath(ref["path"]).write_text(json.dumps({"traceEvents": events}))
        batch = self.sweep_batch(target, device)
        setting = self.baseline(target, device)
        result = {"ok": True, "seq": 9, "artifacts": [ref],
                  "data": {"trace": {"file": ref["name"], "steps": 2}, "results": [{"batch": batch, "step_ms": 8.0}]}}
        return Profiled(result=result, refs={ref["name"]: ref}, ref=ref, batch=batch, setting=setting,
                        setting_data={"label": setting.label, "env": setting.env, "options": {}, "levers": []},
                        numbers={"setting_tok_s": Number(value=500.0, unit="tok/s", seqs=[9], label="fake"),
                                 "setting_step_ms": Number(value=8.0, unit="ms", seqs=[9], label="fake"),
                                 "timed_step_ms": Number(value=8.0, unit="ms", seqs=[9], label="fake")})


@pytest.fixture
def fake_target():
    target, _ = load_target("dsv4-flash")
    levers = target.levers[:2]
    engine = target.engine.model_copy(update={"kind": "fake"})  # a kind the target schema does not know yet
    return target.model_copy(update={"engine": engine, "levers": levers})


def _survey() -> dict:
    return Finding(index=1, step="survey", headline="box", verdict="ok",
                   data={"box": {"device": "cuda", "gpu": "fake", "gpus": 1, "sm": 90, "sm_count": 132},
                         "stand_in": None}).model_dump(mode="json")


def test_a_third_engine_fits_without_touching_a_step(fake_target, monkeypatch):
    fast = fake_target.levers[0].name
    fake = FakeEngine({fast: 1.25})
    monkeypatch.setitem(engines.ENGINES, "fake", fake)
    assert engine_for(fake_target) is fake
    draft = sweep_levers({"findings": [_survey()]}, session=None, target=fake_target)
    assert fake.swept and fake.swept[0][0].startswith("baseline")
    results = {r["name"]: r for r in draft.data["levers"]}
    assert results[fast]["status"] == "moves up" and results[fast]["ratio"] == pytest.approx(1.25, rel=0.01)
    other = fake_target.levers[1].name
    assert results[other]["status"] == "not tried" and "fake engine" in results[other]["reason"]
    assert draft.data["batch"] == 4 and "server" not in draft.data


class _ArtifactSession:
    """All the profile step asks of a session once the engine has run: where an artifact lies."""

    def __init__(self, root):
        self.root = root

    def artifact_path(self, ref):
        return self.root / ref["path"]


def test_the_profile_step_ranks_a_third_engines_trace(fake_target, monkeypatch, tmp_path):
    """The profile step takes the fake engine's profile as it is (no server, no engine.bench): the kernels
    ranked from its trace, the dominant one named, the setting's numbers the engine's."""
    monkeypatch.setitem(engines.ENGINES, "fake", FakeEngine({}))
    draft = profile_decode({"findings": [_survey()]}, _ArtifactSession(tmp_path), fake_target)
    assert draft.verdict == "dominant-kernel" and draft.data["complete"]
    assert draft.data["dominant"]["name"] == "fake_attention" and draft.data["dominant"]["share"] == pytest.approx(0.75)
    assert draft.data["batch"] == 4 and draft.data["setting"]["label"] == "baseline" and "server" not in draft.data
    assert draft.numbers["setting_tok_s"].value == 500.0 and draft.numbers["dominant_ms"].value == pytest.approx(12.0)
    assert draft.artifacts["trace"] == "artifacts/fake.trace.json" and draft.evidence == [9]


def test_a_third_engines_failed_profile_fails_the_step(fake_target, monkeypatch, tmp_path):
    monkeypatch.setitem(engines.ENGINES, "fake", FakeEngine({}, fail=True))
    with pytest.raises(StepFailed, match="fake engine's profiling run failed"):
        profile_decode({"findings": [_survey()]}, _ArtifactSession(tmp_path), fake_target)


def test_the_engine_is_chosen_from_the_target_kind():
    target, _ = load_target("dsv4-flash")
    assert engine_for(target).kind == target.engine.kind == "reference"
    sglang = target.model_copy(update={"engine": target.engine.model_copy(update={"kind": "sglang"})})
    assert engine_for(sglang).kind == "sglang" and engine_for(sglang).measured_by_client
    # what the steps ask instead of the kind: a live server (no Nsight Compute, no split-K in it), whose
    # package's source the gate scan reads
    assert engine_for(sglang).live_server == "SGLang" and engine_for(target).live_server is None
    assert engine_for(target).scanned_source(None, "/src") is None
    assert engine_for(sglang).scanned_source(type("Sw", (), {"sglang": "0.5.23"})(), "/src")["dir"] == "/src"
    with pytest.raises(ValueError, match="no engine for kind"):
        engine_for(target.model_copy(update={"engine": target.engine.model_copy(update={"kind": "nothing"})}))


def test_register_makes_an_engine_the_one_for_its_kind(monkeypatch):
    monkeypatch.setattr(engines, "ENGINES", dict(engines.ENGINES))
    fake = register(FakeEngine({}))
    assert engines.ENGINES["fake"] is fake
