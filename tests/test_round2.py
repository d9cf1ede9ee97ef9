"""Round 2 (agent/steps/round2.py): what dominates after the split-K rewrite, the rewrite's grid, and the
new ceiling; its place in the graph.

tests/data/round2-cpu holds a real CPU investigation's inputs to the step (run.json: the target, the
survey, profile and split-K findings of the run, the split-K step's profiled trace) and the round-2 tool
calls with the results the real tools gave on this CPU box for those inputs (see its README)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from agent import routes
from agent.config import Target
from agent.box.catalog import run_tool
from agent.box.local import LocalBox
from agent.steps import round2 as r2
from schema.finding import Finding
from tools import trace

from conftest import DATA, agent_here, finding, findings

FIXTURE = DATA / "round2-cpu"


def recorded() -> dict:
    return json.loads((FIXTURE / "run.json").read_text())


def state_of(rec: dict) -> dict:
    return {"run_id": "test", "findings": [rec["findings"][s] for s in ("survey", "profile", "splitk")]}


def target_of(rec: dict) -> Target:
    return Target.model_validate(rec["target"])


class ServedSession:
    """Serves the recorded run's round-2 tool results in order, as a replay does; a different call fails."""

    def __init__(self, calls: list[dict]):
        self.pending = list(calls)
        self.asked: list[tuple[str, dict]] = []

    def call(self, tool, args):
        args = json.loads(json.dumps(args))
        self.asked.append((tool, args))
        assert self.pending, f"unrecorded call {tool}"
        recorded_call = self.pending.pop(0)
        assert (recorded_call["tool"], recorded_call["args"]) == (tool, args)
        return {**recorded_call["result"]}

    def artifact_path(self, ref):
        return FIXTURE / ref["path"]


class ToolSession(ServedSession):
    """Runs each tool for real on this box."""

    def __init__(self):
        super().__init__([])
        self.n = 0

    def call(self, tool, args):
        self.asked.append((tool, json.loads(json.dumps(args))))
        record, raw = run_tool(LocalBox(), tool, args)
        raw.cleanup()
        self.n += 1
        return {**record, "seq": 1000 + self.n, "artifacts": []}


def test_the_new_ceiling_follows_from_the_split_k_trace_and_its_measured_tok_s():
    rec = recorded()
    session = ServedSession(rec["round2_calls"])
    f = r2.round2(state_of(rec), session, target_of(rec))
    assert not session.pending  # every recorded call made, in order
    splitk = Finding.model_validate(rec["findings"]["splitk"])
    merged = trace.summarize([FIXTURE / splitk.artifacts["trace"]]).merged
    top = max(merged.kernels, key=lambda k: k.total_us)
    assert f.data["kernel"] == top.name and f.number("dominant_share") == pytest.approx(top.total_us / merged.kernel_time_us)
    # W is the window inside the profiled steps; t_k the dominant kernel; t_op its operation (at least t_k)
    w, t_k, t_op = merged.in_step_window_us / 1000, top.total_us / 1000, f.number("operation_ms")
    assert f.number("window_ms") == pytest.approx(w) and f.number("kernel_ms") == pytest.approx(t_k)
    assert t_k <= t_op <= w
    assert f.number("kernel_instant_x") == pytest.approx(w / (w - t_k))
    assert f.number("operation_instant_x") == pytest.approx(w / (w - t_op))
    # the split-K setting's measured tok/s is what the ceiling projects from
    tok_s = splitk.number("splitk_tok_s")
    assert f.number("baseline_tok_s") == tok_s
    assert f.number("ceiling_tok_s") == pytest.approx(tok_s * w / (w - t_op))
    goal, batch = rec["target"]["goal"]["output_tok_s"], rec["findings"]["profile"]["data"]["batch"]
    assert f.number("goal_distance_x") == pytest.approx(goal / f.number("ceiling_tok_s"))
    # the goal's one budget (its concurrency's), the measured batch said apart (issue 30)
    assert f.number("step_budget_ms") == pytest.approx(1000 * rec["target"]["goal"]["concurrency"] / goal)
    assert f.number("measured_batch") == batch
    assert f.number("instant_step_ms") == pytest.approx(1000 * batch / tok_s * (w - t_op) / w)
    # reachable only when the goal lies outside the ceiling's uncertainty (its spread and the measured tok/s's)
    u = f.data["uncertainty"]
    assert u >= 0
    ceiling = f.number("ceiling_tok_s")
    expected = ("goal-reachable" if ceiling / (1 + u) >= goal else "goal-unreachable" if ceiling * (1 + u) < goal
                else "goal-undecided")
    assert f.verdict == expected
    assert f.data["setting"] == splitk.data.get("setting", {}).get("label", rec["findings"]["profile"]["data"]["setting"]["label"] + " + split-K")
    # the CPU trace's rows are host ranges under the interpreter, and the finding says so
    assert "host-ranges" in f.labels and "cpu-interpreter" in f.labels
    assert f.data["kernel"] in f.headline
    assert sum(t in f.headline for t in ("short of the goal", "reaching the goal", "at the goal within its uncertainty")) == 1


def test_the_rewrites_grid_is_read_at_the_engines_call_and_the_deployments():
    """The dominant kernel is the rewrite's here: its grid at the engine's widest call as the CPU ran it,
    and the deployment's call planned for the declared sm_120; both tensor-core dots, and on the box
    (one head block) every gathered row loaded once."""
    rec = recorded()
    session = ServedSession(rec["round2_calls"])
    f = r2.round2(state_of(rec), session, target_of(rec))
    tools = [t for t, _ in session.asked]
    assert tools == ["kernel.splitk_plan", "kernel.grid", "kernel.grid"]
    plan_args = session.asked[0][1]["points"]
    calls = [r["call"] for r in rec["findings"]["splitk"]["data"]["calls"]]
    widest = r2.widest_call(calls)
    assert plan_args[0]["device"] == "cpu" and (plan_args[0]["topk"], plan_args[0]["extra_topk"]) == (widest["topk"], widest.get("extra_topk"))
    deployment = rec["target"]["deployment"]
    assert (plan_args[1]["arch"], plan_args[1]["sms"]) == (deployment["sm"], deployment["sm_count"])
    for (_, args), planned in zip(session.asked[1:], rec["round2_calls"][0]["result"]["data"]["points"]):
        launch = r2.launch_for(f.data["grid"]["kernel"], planned)
        assert args["source"] == r2.REWRITE_SOURCE and args["kernel"] == launch["kernel"] and args["shapes"] == launch["shapes"]
    box = f.data["grid"]["points"][0]
    assert box["point"]["where"] == "box" and box["diagnosis"]["inner_product"] == "tensor-core dot"
    assert f.number("rewrite_inner_product") == "tensor-core dot"
    heads, block_h = box["point"]["heads"], box["launch"]["config"]["block_h"]
    if heads <= block_h:
        assert f.number("rewrite_gather_redundancy") == pytest.approx(1.0)
    declared = f.data["grid"]["points"][1]
    assert declared["point"]["where"] == "declared" and declared["diagnosis"]["inner_product"] == "tensor-core dot"
    assert not f.data["grid"]["problems"]


def test_replay_of_the_step_is_deterministic():
    rec = recorded()
    one = r2.round2(state_of(rec), ServedSession(rec["round2_calls"]), target_of(rec)).model_dump(mode="json")
    two = r2.round2(state_of(rec), ServedSession(rec["round2_calls"]), target_of(rec)).model_dump(mode="json")
    assert json.dumps(one, sort_keys=True) == json.dumps(two, sort_keys=True)


def test_a_gluon_launch_is_said_to_be_gluon_and_not_read(tmp_path):
    """On Hopper the wrapper launches the warp-specialized Gluon kernel for large work: the real plan
    tool says so, and no grid call is made for that point."""
    pytest.importorskip("triton")
    rec = recorded()
    target = target_of(rec)
    session = ToolSession()
    calls = [{"batch": 16, "heads": 64, "topk": 512, "extra_topk": None, "sink": True, "config": "large_ws"}]
    box = {"device": "cpu", "sm": None, "sm_count": None}
    # the box point as if planned for an H200 (what device "cuda" gives there), the declared point as declared
    points = r2.plan_points(target, box, 16, calls)
    points[0] = {k: v for k, v in points[0].items() if k != "device"} | {"arch": 90, "sms": 132}
    plan = session.call("kernel.splitk_plan", {"points": [{k: v for k, v in p.items() if k != "where"} for p in points]})
    assert plan["ok"], plan["error"]
    first = plan["data"]["points"][0]["launches"][0]
    from tools.kernels.splitk import gluon_lang as smd

    if smd.gluon is None:
        pytest.skip("this Triton has no Gluon: the plan is not the Hopper one")
    assert (first["kernel"], first["triton_language"], first["config_name"]) == ("_split_kernel_ws", False, "large_ws")

    class PlannedAtH200(ToolSession):
        def call(self, tool, args):
            if tool == "kernel.splitk_plan":
                args = {"points": [{k: v for k, v in p.items() if k != "device"} | ({"arch": 90, "sms": 132} if "device" in p else {})
                                   for p in args["points"]]}
            return super().call(tool, args)

    s = PlannedAtH200()
    rows, problems = r2.read_rewrite_grid(s, target, box, 16, "_split_kernel_ws", calls, [])
    assert [t for t, _ in s.asked] == ["kernel.splitk_plan", "kernel.grid"]  # the declared point only
    assert "Gluon" in rows[0]["note"] and rows[0]["report"] is None and not problems
    # the declared sm_120 point reads the sm_120 family's kernel, a Triton-language one, from its own file
    assert rows[1]["kernel"] == "_split_kernel_sm120" and rows[1]["diagnosis"]["inner_product"] == "tensor-core dot"


def test_a_dominant_kernel_that_is_not_the_rewrites_points_the_grid_at_the_rewrites_largest():
    kernels = [{"name": "cutlass_gemm", "total_us": 10}, {"name": "_split_dhalf_kernel", "total_us": 5},
               {"name": "_combine_kernel", "total_us": 1}]
    subject, why = r2.grid_subject("cutlass_gemm", kernels, before={"cutlass_gemm"})
    assert subject == "_split_dhalf_kernel" and "not one of the rewrite's" in why
    assert r2.grid_subject("_combine_kernel", kernels, before=set())[0] == "_combine_kernel"
    assert r2.grid_subject("cutlass_gemm", kernels[:1], before={"cutlass_gemm"})[0] is None


def test_the_graph_runs_round2_after_split_k_and_a_stop_skips_both():
    from agent.graph import build_graph

    edges = {(e.source, e.target) for e in build_graph().get_graph().edges}
    assert ("build_splitk", "round2") in edges and ("round2", "write_report") in edges
    assert ("build_splitk", "write_report") not in edges
    assert not any(t == "round2" for s, t in edges if s != "build_splitk")
    assert routes.after_decision({"decision": {"choice": "stop"}}) == "write_report"
    assert routes.after_decision({"decision": {"choice": "splitk"}}) == "build_splitk"


@pytest.mark.slow
def test_round2_in_a_whole_investigation_and_its_replay(dsv4_run, tmp_path):
    """The CPU investigation: round 2 after split-K, its section closing the report, the replay byte-identical."""
    steps = [f["step"] for f in findings(dsv4_run)]
    assert steps[steps.index("splitk") + 1] == "round2" and steps[-1] == "report"
    f = finding(dsv4_run, "round2")
    report = (dsv4_run / "PROFILE_FINDINGS.md").read_text()
    section = report[report.index("## 9. After the rewrite"):]
    assert f["data"]["kernel"] in section and "how far the goal still is" in section
    out = agent_here("replay", dsv4_run)
    assert out.returncode == 0, out.stderr[-2000:]
