"""The engine interface (issue #33): the steps call the engine chosen once from the target's engine kind
and never ask which engine they hold, so a third engine fits without touching a step. A small fake engine
(kind "fake", no box, no tool) registers itself and the levers step measures through it unchanged."""

from __future__ import annotations

from typing import Any

import pytest

from agent import engines
from agent.config import load_target
from agent.engine_runs import Setting
from agent.engines import Engine, engine_for, register
from agent.steps.levers import sweep_levers
from schema.finding import Finding


class FakeEngine(Engine):
    """Every setting runs at a fixed step time: the baseline at 10 ms, a lever at ``speed[name]`` times faster."""

    kind = "fake"
    sweep_tool = "fake.sweep"

    def __init__(self, speed: dict[str, float]):
        self.speed, self.swept = speed, []

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


def test_the_engine_is_chosen_from_the_target_kind():
    target, _ = load_target("dsv4-flash")
    assert engine_for(target).kind == target.engine.kind == "reference"
    sglang = target.model_copy(update={"engine": target.engine.model_copy(update={"kind": "sglang"})})
    assert engine_for(sglang).kind == "sglang" and engine_for(sglang).measured_by_client
    with pytest.raises(ValueError, match="no engine for kind"):
        engine_for(target.model_copy(update={"engine": target.engine.model_copy(update={"kind": "nothing"})}))


def test_register_makes_an_engine_the_one_for_its_kind(monkeypatch):
    monkeypatch.setattr(engines, "ENGINES", dict(engines.ENGINES))
    fake = register(FakeEngine({}))
    assert engines.ENGINES["fake"] is fake
