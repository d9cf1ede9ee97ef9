"""A lever that kills the one-process sweep (a segfault, the OOM killer): the runs before it are kept,
the run it died in is a failed run with the signal and the stderr tail, that setting is not run again,
and the rest go on in a new process (agent.engine_runs.run_sweep over the real engine and box)."""

from agent.box.local import LocalBox
from agent.config import load_target
from agent.engine_runs import Setting, measured_batch, run_sweep, with_lever
from agent.rundir import RunDir
from agent.runlog import RunLog
from agent.session.live import LiveSession
from agent.steps.measurements import sweep_runs
from tools.engines.reference.sweep import CRASH_ENV


def test_a_run_that_kills_the_sweep_process_fails_alone_and_the_sweep_goes_on(tmp_path):
    target = load_target("dsv4-flash")[0]
    torch = with_lever(target, next(lever for lever in target.levers if lever.name == "attention-torch-fallback"), "cpu")
    crash = Setting("crash", {**torch.env, CRASH_ENV: "1"}, dict(torch.options))
    runs = [("baseline#r1", torch), ("crash#r1", crash), ("baseline#r2", torch), ("crash#r2", crash), ("baseline#r3", torch)]
    run = RunDir.create(tmp_path, "r")
    session = LiveSession(run, RunLog.create(run.log_path), LocalBox())
    batch = measured_batch(target, "cpu")
    result = run_sweep(session, target, "cpu", runs, batch)

    assert result["ok"] and len(result["seqs"]) == 2  # one process died; a second finished the sweep
    (death,) = result["deaths"]
    assert death["label"] == "crash#r1" and "SIGKILL" in death["error"]
    records = result["data"]["runs"]
    assert [r["label"] for r in records] == [label for label, _ in runs]  # in the order asked
    assert [r["ok"] for r in records] == [True, False, True, False, True]
    assert records[1]["kind"] == "crash" and f"log line {result['seqs'][0]}" in records[1]["error"]
    assert records[3]["kind"] == "not_run" and "crash#r1" in records[3]["error"]
    # each run names the call that measured it: the first before the death, the rest after
    assert [r["seq"] for r in records if r["ok"]] == [result["seqs"][0], result["seqs"][1], result["seqs"][1]]
    measured = sweep_runs([{} for _ in runs], [label for label, _ in runs], result, batch)
    assert [m["seq"] for m in measured] == [r["seq"] for r in records]
    assert all(m["step_ms"] > 0 for m in measured if m["ok"])
    assert result["data"]["extrapolation"] and result["data"]["notes"]  # the shared facts survive the death
