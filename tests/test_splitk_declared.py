"""The declared GPU's plan of the split-K rewrite on a stand-in box (issue 29): the environment that makes the
wrapper plan, and Triton compile, as the deployment's GPU would, for each box it may run on, and the command
the catalog builds for the kernel tools; the split-K step building, checking and timing that plan (the box's
own a what-if), and runs journaled before format 4 keeping the box's plan they were measured with."""

from __future__ import annotations

import pytest

from agent.box.catalog import CATALOG
from agent.config import load_target
from agent.runlog import target_of
from agent.steps import splitk
from tools.kernels.splitk import declared


def test_each_box_gets_the_environment_of_the_declared_plan():
    assert declared.plan_env(120, None) == {declared.PLAN_ARCH_ENV: "120"}  # a CPU: the interpreter runs the family
    # a Hopper stand-in: the dots lowered to mma.sync, as sm_120 has them
    assert declared.plan_env(120, 90) == {declared.PLAN_ARCH_ENV: "120", declared.WGMMA_OFF_ENV: "1"}
    assert declared.plan_env(120, 100) == {declared.PLAN_ARCH_ENV: "120"}  # another GPU without wgmma
    assert declared.plan_env(120, 120) == {} and declared.plan_env(None, 90) == {}  # the declared GPU itself
    with pytest.raises(ValueError):  # Hopper's kernels cannot be planned on another GPU
        declared.plan_env(90, 120)


def test_the_kernel_tools_are_told_the_plan_on_their_command_line():
    check = CATALOG["kernel.splitk_check"].command("python3", {"batch": 2, "topk": 128, "heads": 64, "device": "cuda",
                                                              "extra_topk": 512, "sink": True, "plan_arch": 120})
    assert check[:3] == ["python3", "-m", "tools.kernels.splitk"] and check[-2:] == ["--plan-arch", "120"]
    bench = CATALOG["kernel.splitk_bench"].command("python3", {"batch": 2, "topk": 128, "heads": 64})
    assert "--plan-arch" not in bench


def _target(**rewrite):
    target, _ = load_target("dsv4-flash")  # declared: sm_120
    return target.model_copy(update={"rewrite": target.rewrite.model_copy(update=rewrite)}) if rewrite else target


def test_the_split_k_step_plans_for_the_declared_gpu_on_each_box():
    target = _target()
    cpu, hopper, own = (splitk.rewrite_plan(target, sm) for sm in (None, 90, 120))
    assert (cpu["arch"], cpu["env"]) == (120, {declared.PLAN_ARCH_ENV: "120"}) and cpu["declared"]
    assert (hopper["arch"], hopper["env"]) == (120, declared.plan_env(120, 90)) and "mma.sync" in hopper["text"]
    assert (own["arch"], own["env"], own["short"]) == (None, {}, "") and own["declared"]
    box = splitk.rewrite_plan(_target(plan="box"), 90)
    assert (box["arch"], box["env"], box["declared"]) == (None, {}, False) and "what-if" in box["short"]
    hopper_declared = target.model_copy(update={"deployment": target.deployment.model_copy(update={"sm": 90})})
    refused = splitk.rewrite_plan(hopper_declared, 120)  # Hopper's kernels cannot run elsewhere: said, not faked
    assert (refused["arch"], refused["declared"]) == (None, False) and "Hopper" in refused["text"]


def test_a_run_journaled_before_format_4_keeps_the_plan_it_was_measured_with():
    start = {"kind": "run_start", "format": 3}
    state = {"target": {"name": "t"}}
    assert target_of(state, [start]) == {"name": "t", "rewrite": {"plan": "box"}}
    assert target_of(state, [{**start, "format": 4}]) == {"name": "t"}  # the model's default: the declared plan
    assert target_of({"target": {"rewrite": {"plan": "declared"}}}, [start])["rewrite"] == {"plan": "declared"}


class _Box:
    """A session whose tool calls return canned records, logging what was asked."""

    def __init__(self):
        self.calls = []

    def call(self, tool, args):
        self.calls.append((tool, dict(args)))
        cfg = "sm120_large" if args.get("plan_arch") == 120 else "large_ws"
        data = ({"config_name": cfg, "variants": {}} if tool == "kernel.splitk_check"
                else {"rewrite_graph_us": 30.0 if "plan_arch" in args else 20.0, "upstream_graph_us": 90.0})
        return {"seq": len(self.calls), "ok": True, "data": data, "error": None}


def test_on_a_hopper_box_the_declared_plan_is_checked_and_timed_and_the_box_plan_is_a_what_if():
    plan = splitk.rewrite_plan(_target(), 90)
    session, call = _Box(), {"batch": 64, "topk": 512, "heads": 64, "config": "sm120_large", "calls_per_step": 2}
    rows, problems = splitk.check_calls(session, [call], "cuda", [], plan)
    assert problems == []
    asked = [(tool, args.get("plan_arch")) for tool, args in session.calls]
    assert asked == [("kernel.splitk_check", 120), ("kernel.splitk_bench", 120), ("kernel.splitk_bench", None)]
    assert rows[0]["bench"]["rewrite_graph_us"] == 30.0 and rows[0]["box_bench"]["rewrite_graph_us"] == 20.0
    figures = {"dominant": "k", "t_before": 1.0, "t_after": 0.5, "kernel_speedup": 2.0, "op_speedup": None,
               "rounds_reference_tok_s": 1.0, "measured_tok_s": 2.0, "measured_x": 2.0,
               "launches": {"before": 1, "after": 2}, "interval": splitk.stats.Interval(ratio=2.0, low=None, high=None, n=1, confidence=0.95, note="one pair"),
               "pairs": 1}
    tables = splitk._tables(figures, rows, 1.0, {"ok": None, "note": "n"}, 0.05, "baseline", plan, run_seq=7)
    calls = tables[1]
    # a row's configs and splits are the engine run's record of the call (line 7): cited first, then check and bench
    assert calls.rows[0][calls.columns.index("log")] == "7, 1, 2" and "the engine's run that recorded the call" in calls.note
    assert "what-if: this box's own plan us" in calls.columns and calls.rows[0][calls.columns.index("split-K us")] == 30.0
    assert calls.rows[0][calls.columns.index("what-if: this box's own plan us")] == 20.0
    assert "sm_120's plan" in calls.note and "never the deployment's number" in calls.note
    # on the declared GPU itself, or the CPU, nothing is timed twice
    rows, _ = splitk.check_calls(session := _Box(), [call], "cuda", [], splitk.rewrite_plan(_target(), 120))
    assert [tool for tool, _ in session.calls] == ["kernel.splitk_check", "kernel.splitk_bench"] and "box_bench" not in rows[0]
