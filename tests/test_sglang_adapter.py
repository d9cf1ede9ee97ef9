"""The SGLang adapter, box side (tools/engines/sglang): check against the installed SGLang's own definitions,
server launch and stop (no server outlives the tool, SIGKILL included), SGLang's own benchmark client and its
JSONL, sweeps and failures against servers started here."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tools.engines.sglang import check, client, installed, spec as spec_mod, sweep, traces
from tools.engines.sglang.server import RunFailed

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "sglang-client"
MINI = [sys.executable, str(DATA / "mini_server.py")]
BASE_ARGS = ["--model-path", "/models/unused"]


def tool(*args, timeout=600, nice=0, **kwargs) -> subprocess.CompletedProcess:
    """The adapter as the catalog runs it; ``nice``: its scheduling priority (a timed sweep's, see shared_runs.NICE)."""
    return subprocess.run(["nice", "-n", str(nice), sys.executable, "-m", "tools.engines.sglang", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, **kwargs)


def action_of(option: str):
    return next(a for a in installed.server_parser()._actions if option in a.option_strings)


def by_item(problems: list[dict]) -> dict[str, dict]:
    return {p["item"]: p for p in problems}


# --- check: arguments against SGLang's own parser -----------------------------------------------------------

def test_check_refuses_unknown_ambiguous_and_deprecated_arguments():
    levers = [{"name": "graph-bs", "args": ["--cuda-graph-max-bs", "8"]},
              {"name": "no-graph", "args": ["--disable-cuda-graph"]},
              {"name": "dp-attn", "args": ["--enable-dp-attention", "--dp-size", "2"]},
              {"name": "typo", "args": ["--num-continous-decode-steps", "4"]},
              {"name": "good", "args": ["--cuda-graph-max-bs-decode", "8", "--num-continuous-decode-steps", "4"]}]
    result = check.run({"server_args": BASE_ARGS, "levers": levers})
    assert result["ok"] is False and result["sglang"]["path"] == str(installed.package_dir())
    found = {p["where"]: p for p in result["problems"]}
    assert set(found) == {"lever graph-bs", "lever no-graph", "lever dp-attn", "lever typo"}
    ambiguous = found["lever graph-bs"]
    assert ambiguous["item"] == "--cuda-graph-max-bs" and ambiguous["replacement"] is None
    assert "--cuda-graph-max-bs-decode" in ambiguous["error"] and "--cuda-graph-max-bs-prefill" in ambiguous["error"]
    for where, option in (("lever no-graph", "--disable-cuda-graph"), ("lever dp-attn", "--enable-dp-attention")):
        new_flag = action_of(option).new_flag  # read from SGLang's action object, as the check reads it
        assert found[where]["item"] == option and found[where]["replacement"] == new_flag
        assert new_flag in found[where]["error"] and "SGLang itself would only warn" in found[where]["error"]
    assert found["lever dp-attn"]["replacement"].startswith("--attn-dp-size")
    assert found["lever typo"]["item"] == "--num-continous-decode-steps"
    assert "unrecognized" in found["lever typo"]["error"]


def test_check_reports_broken_server_args_once_and_still_checks_levers():
    result = check.run({"server_args": ["--tp-size", "2"], "levers": [{"name": "x", "args": ["--no-such-flag"]}]})
    wheres = [(p["where"], p["item"]) for p in result["problems"]]
    assert ("server args", "--model-path") in wheres  # SGLang requires it
    assert ("lever x", "--no-such-flag") in wheres and len(wheres) == 2


# --- check: environment --------------------------------------------------------------------------------------

def test_check_environment_against_sglang_environ_and_the_documented_lists():
    env = {"SGLANG_SM120_FLASHMLA_BACKEND": "cutlass", "SGLANG_NO_SUCH_KNOB": "1", "SGLANG_IS_IN_CI": "maybe",
           "NCCL_ALGO": "Ring,NVLS", "NCCL_PROTO": "LL128", "NCCL_NO_SUCH": "1", "PYTORCH_CUDA_ALLOC_CONF": "x"}
    levers = [{"name": "sm120-triton", "env": {"SGLANG_SM120_FLASHMLA_BACKEND": "triton"}},
              {"name": "sm120-torch", "env": {"SGLANG_SM120_FLASHMLA_BACKEND": "torch"}},
              {"name": "no-nvls", "env": {"NCCL_ALGO": "^NVLS,NVLSTree", "NCCL_PROTO": "Simple"}},
              {"name": "nvls-tree", "env": {"NCCL_ALGO": "allreduce:NVLSTree"}}]
    result = check.run({"server_args": BASE_ARGS, "env": env, "levers": levers})
    found = {p["where"]: p for p in result["problems"]}
    assert set(found) == {"env SGLANG_SM120_FLASHMLA_BACKEND", "env SGLANG_NO_SUCH_KNOB", "env SGLANG_IS_IN_CI",
                          "env NCCL_ALGO", "env NCCL_NO_SUCH", "lever nvls-tree"}
    sm120 = found["env SGLANG_SM120_FLASHMLA_BACKEND"]["error"]
    assert "flashinfer, torch, triton" in sm120 and "silently" in sm120
    assert "sglang.srt.environ" in found["env SGLANG_NO_SUCH_KNOB"]["error"]
    assert "boolean" in found["env SGLANG_IS_IN_CI"]["error"]
    for where in ("env NCCL_ALGO", "lever nvls-tree"):
        assert "NVLink multicast stays off" in found[where]["error"]
    assert "known_env.py" in found["env NCCL_NO_SUCH"]["error"]


def test_sm120_values_are_read_from_the_installed_source(tmp_path, monkeypatch):
    assert check.sm120_backends("flashinfer") == {"flashinfer", "triton", "torch"}
    # the same rule on a copy of the installed file where SGLang compares one more value: the check follows it
    copy = tmp_path / "sglang"
    target = copy / check._SM120_FILE
    target.parent.mkdir(parents=True)
    text = (installed.package_dir() / check._SM120_FILE).read_text()
    marker = '    if _sm120_default_backend == "triton":'
    assert marker in text
    target.write_text(text.replace(marker, '    if _sm120_default_backend == "cutlass":\n        pass\n' + marker))
    monkeypatch.setattr(installed, "package_dir", lambda: copy)
    assert check.sm120_backends("flashinfer") == {"flashinfer", "triton", "torch", "cutlass"}


def test_check_cli_exits_2_on_a_problem_and_a_clean_spec_passes(tmp_path):
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps({"server_args": [*BASE_ARGS, "--disable-cuda-graph"]}))
    bad = tool("check", "--spec", f"@{spec_file}")
    assert bad.returncode == 2, bad.stderr[-2000:]
    result = json.loads(bad.stdout)
    assert result["ok"] is False and [p["item"] for p in result["problems"]] == ["--disable-cuda-graph"]
    clean = check.run({"server_args": [*BASE_ARGS, "--cuda-graph-max-bs-decode", "16", "--tp-size", "4"],
                       "env": {"NCCL_PROTO": "LL", "SGLANG_SM120_FLASHMLA_BACKEND": "flashinfer"},
                       "levers": [{"name": "ep", "args": ["--ep-size", "4"], "env": {"NCCL_ALGO": "Ring"}}]})
    assert clean["ok"] is True and clean["problems"] == []


# --- traces, specs, the client's JSONL ------------------------------------------------------------------------

def test_trace_names_follow_sglang_0_5_23():
    names = ["1764600000.123-TP-0-DECODE.trace.json.gz", "1764600000.123-TP-1-DECODE.trace.json.gz",
             "1764600000.123-TP-0-EXTEND.trace.json.gz", "run-a-1764600000.5-TP-1-DP-1-PP-1-EP-1-decode.trace.json.gz",
             "1764600000.123-TP-0.trace.json.gz", "1764600000.123-TP-0-memory.pickle"]
    parsed = [traces.parse(n, tp_size=2) for n in names]
    assert [p and (p["rank"], p["role"]) for p in parsed] == [(0, "decode"), (1, "decode"), (0, "extend"),
                                                              (3, "decode"), (0, None), None]
    assert parsed[3]["dp"] == 1 and parsed[3]["ep"] == 1 and parsed[3]["profile_id"] == "1764600000.5"
    assert traces.complete([p for p in parsed[:3]], world=2, by_stage=True)
    assert not traces.complete([parsed[0], parsed[2]], world=2, by_stage=True)
    info = traces.trace_info([p for p in parsed[:3]], by_stage=True, batch=4, steps=3, with_stack=True)
    assert info["files"] == names[:2] and info["file"] == names[0]


def test_sweep_spec_is_checked_before_any_launch(tmp_path):
    with pytest.raises(spec_mod.SpecError, match="load.concurrency"):
        spec_mod.sweep_spec({"launcher": MINI, "load": {"input_len": 8, "output_len": 8, "concurrency": 0,
                                                        "num_prompts": 2}, "runs": [{"label": "a"}]})
    with pytest.raises(spec_mod.SpecError, match="exactly one run"):
        spec_mod.profile_spec({"launcher": MINI, "load": {"input_len": 8, "output_len": 8, "concurrency": 1,
                                                          "num_prompts": 2}, "runs": [{"label": "a"}, {"label": "b"}],
                               "profile": {}})
    out = tool("sweep", "--spec", json.dumps({"launcher": MINI, "runs": []}), "--out", tmp_path / "o")
    assert out.returncode == 2 and json.loads(out.stdout)["kind"] == "bad_input"
    assert not (tmp_path / "o").exists()


def test_client_jsonl_row_as_the_installed_client_writes_it():
    record = json.loads((DATA / "complete-c2-n4.jsonl").read_text().splitlines()[-1])
    load = {"concurrency": 2, "num_prompts": 4}
    row = client.row(record, load)
    assert row["tok_s"] == record["output_throughput"] and row["step_ms"] == record["median_tpot_ms"]
    assert row["total_input_tokens"] == record["total_input_tokens"] == 4 * 16
    assert len(row["step_ms_samples"]) == 4
    for sample, itls, n in zip(row["step_ms_samples"], record["itls"], record["output_lens"]):
        assert sample == pytest.approx(sum(itls) * 1000 / (n - 1))
    renamed = {("total_input" if k == "total_input_tokens" else k): v for k, v in record.items()}
    assert client.row(renamed, load)["total_input_tokens"] == record["total_input_tokens"]


def test_client_with_fewer_completed_than_sent_is_a_failed_run(tmp_path):
    jsonl = tmp_path / "c.jsonl"
    shutil.copy(DATA / "incomplete-c2-n6.jsonl", jsonl)
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    with pytest.raises(RunFailed) as failed:
        client.finish(done, jsonl, tmp_path / "c.log", {"concurrency": 2, "num_prompts": 6}, 30)
    assert failed.value.kind == "incomplete" and str(failed.value).startswith("4 of 6 requests completed")
    assert "every third request fails" in str(failed.value)


def test_client_shim_stands_in_for_one_module_with_the_installed_constant():
    """With the shim first on its path the real client imports; the stub's constant is the installed file's."""
    import ast

    source = (installed.package_dir() / "srt" / "disaggregation" / "utils.py").read_text()
    expected = next(ast.literal_eval(n.value) for n in ast.parse(source).body if isinstance(n, ast.Assign)
                    and any(getattr(t, "id", None) == "FAKE_BOOTSTRAP_HOST" for t in n.targets))
    probe = ("import sys, sglang.benchmark.serving as s; "
             "print(s.FAKE_BOOTSTRAP_HOST); print(sys.modules['sglang.srt.disaggregation.utils'].__doc__)")
    proc = subprocess.run([sys.executable, "-c", probe], env=client._env_with(True), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    host, doc = proc.stdout.splitlines()[:2]
    assert host == expected and "client shim" in doc
    assert client._shim_stubs() == ["sglang.srt.disaggregation.utils"]
    assert str(client.SHIM_DIR) not in sys.path and "sglang.srt.disaggregation.utils" not in sys.modules


def test_the_clients_import_check_is_kept_on_the_box_by_what_it_depends_on(tmp_path, monkeypatch):
    """The two imports that decide whether the client needs the shim run once a box, not once a tool call
    (tools/box_cache.py): the answer is kept by the Python, the installed distributions, the sglang tree and
    the shim, and a change to the shim is a new check."""
    import shutil

    from tools.box_cache import CACHE_ENV

    calls = []
    monkeypatch.setattr(client, "_imports", lambda shims: calls.append(shims) or (shims, "" if shims else "No module named 'torchvision'"))
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    answer = {"as_installed": False, "error": "No module named 'torchvision'", "with_shim": True, "shim_error": ""}
    assert client._import_check() == answer and calls == [False, True]
    assert client._import_check() == answer and calls == [False, True]  # kept: no import this time
    shim = tmp_path / "client_shim"
    shutil.copytree(client.SHIM_DIR, shim, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(client, "SHIM_DIR", shim)
    before = client._import_check_key()
    (shim / "sitecustomize.py").write_text((shim / "sitecustomize.py").read_text() + "\n# changed\n")
    assert client._import_check_key() != before
    assert client._import_check() == answer and calls == [False, True, False, True]  # a changed shim: checked again


# --- servers: launch, health, stop, never left behind ----------------------------------------------------------

def _spec(runs: list[dict], **extra) -> dict:
    raw = {"launcher": MINI, "server_args": BASE_ARGS, "health_timeout_s": 20, "stop_grace_s": 3,
           "load": {"input_len": 16, "output_len": 8, "concurrency": 2, "num_prompts": 4}, "runs": runs, **extra}
    return spec_mod.sweep_spec(raw)


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")  # a zombie runs nothing; its reaper is init


def _wait_gone(pids: list[int], timeout_s: float = 15) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if all(_gone(p) for p in pids):
            return True
        time.sleep(0.2)
    return False


def _kill_left(pidfile: Path) -> None:
    """A failing test must not leave its servers running for minutes."""
    for pid in (int(p) for p in (pidfile.read_text().split() if pidfile.exists() else [])):
        if not _gone(pid):
            os.kill(pid, signal.SIGKILL)


def _pids(pidfile: Path, timeout_s: float = 120) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pidfile.exists() and len(pidfile.read_text().split()) == 2:
            return [int(p) for p in pidfile.read_text().split()]
        time.sleep(0.2)
    raise AssertionError(f"the server never wrote {pidfile}")


@pytest.mark.parametrize("fail, kind", [("exit", "launch_failed"), ("oom", "oom"), ("hang", "timeout")])
def test_a_server_that_does_not_come_up_is_a_failed_run_with_its_log(tmp_path, fail, kind):
    spec = _spec([{"label": "x", "env": {"MINI_FAIL": fail, "MINI_CHILD": "1",
                                                    "MINI_PIDFILE": str(tmp_path / "pids")}}], health_timeout_s=3)
    record = sweep.run_one(spec, spec["runs"][0], sweep.Paths(tmp_path, "x"), "unused")
    assert record["ok"] is False and record["kind"] == kind, record
    assert "mini server args" in record["log_excerpt"] and (tmp_path / "logs" / "x.server.log").exists()
    assert _wait_gone(_pids(tmp_path / "pids"), 5)  # the server's child went with the group


def _generate(server, n: int) -> None:
    import urllib.request

    body = json.dumps({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 2}, "stream": True}).encode()
    for _ in range(n):
        with urllib.request.urlopen(urllib.request.Request(server.url + "/generate", data=body), timeout=30) as r:
            r.read()


@pytest.mark.parametrize("fail, kind", [("startup-traceback", None), ("late-traceback", "crash")])
def test_only_a_traceback_logged_once_healthy_fails_the_run(tmp_path, fail, kind):
    from tools.engines.sglang.server import Server

    server = Server.launch(MINI, BASE_ARGS, {**os.environ, "MINI_FAIL": fail}, "127.0.0.1", tmp_path / "s.log", 3)
    try:
        server.wait_ready(20)
        _generate(server, 3)  # the late one prints its traceback at the third request
        if kind is None:
            sweep.verdict(server)
            assert "Traceback" in server.log_text()
        else:
            with pytest.raises(RunFailed) as failed:
                sweep.verdict(server)
            assert failed.value.kind == kind and "RuntimeError: planted" in str(failed.value)
    finally:
        server.stop()
    assert not server.alive()


@pytest.mark.parametrize("how", ["tool", "group"])
def test_killing_the_tool_with_sigkill_leaves_no_server(tmp_path, how):
    """The tool SIGKILLed alone, or its whole process group (as the local and SSH boxes kill a tool): the
    guard's death pipe stops the server's group, the server's own child included."""
    raw = {"launcher": MINI, "server_args": BASE_ARGS, "health_timeout_s": 300,
           "load": {"input_len": 16, "output_len": 8, "concurrency": 2, "num_prompts": 4},
           "runs": [{"label": "hang", "env": {"MINI_FAIL": "hang", "MINI_CHILD": "1",
                                              "MINI_PIDFILE": str(tmp_path / "pids")}}]}
    proc = subprocess.Popen([sys.executable, "-m", "tools.engines.sglang", "sweep", "--spec", json.dumps(raw),
                             "--out", str(tmp_path / "out")], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        pids = _pids(tmp_path / "pids")
        assert not any(_gone(p) for p in pids)
        if how == "tool":
            os.kill(proc.pid, signal.SIGKILL)
        else:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        assert _wait_gone(pids), [p for p in pids if not _gone(p)]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        _kill_left(tmp_path / "pids")


def test_sigterm_to_the_tool_stops_its_servers(tmp_path):
    raw = {"launcher": MINI, "server_args": BASE_ARGS, "health_timeout_s": 300,
           "load": {"input_len": 16, "output_len": 8, "concurrency": 2, "num_prompts": 4},
           "runs": [{"label": "hang", "env": {"MINI_FAIL": "hang", "MINI_CHILD": "1",
                                              "MINI_PIDFILE": str(tmp_path / "pids")}}]}
    proc = subprocess.Popen([sys.executable, "-m", "tools.engines.sglang", "sweep", "--spec", json.dumps(raw),
                             "--out", str(tmp_path / "out")], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        pids = _pids(tmp_path / "pids")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
        assert all(_gone(p) for p in pids)  # stopped before the tool exited, not by the death pipe later
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        _kill_left(tmp_path / "pids")


# --- whole sweeps through SGLang's own client ------------------------------------------------------------------

@pytest.mark.slow
def test_sweep_through_the_real_client_measures_and_survives_failures(tmp_path):
    """Three runs on servers of their own: a slower setting measures slower, a crash mid-load is a failed run
    with its log excerpt, and the sweep completes; every log and client JSONL is kept."""
    runs = [{"label": "fast#r1", "env": {"MINI_TOKEN_MS": "2"}}, {"label": "crash#r1", "env": {"MINI_FAIL": "late-traceback"}},
            {"label": "slow#r1", "env": {"MINI_TOKEN_MS": "12"}}]
    raw = {"launcher": MINI, "server_args": BASE_ARGS, "health_timeout_s": 60, "stop_grace_s": 3,
           "load": {"input_len": 16, "output_len": 8, "concurrency": 2, "num_prompts": 4, "warmup_prompts": 1},
           "runs": runs}
    out = tool("sweep", "--spec", json.dumps(raw), "--out", tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout)
    fast, crash, slow = result["runs"]
    assert fast["ok"] and slow["ok"] and not crash["ok"]
    assert crash["kind"] == "crash" and "RuntimeError: planted" in crash["log_excerpt"]
    assert slow["results"][0]["step_ms"] > 3 * fast["results"][0]["step_ms"]
    assert slow["results"][0]["tok_s"] < fast["results"][0]["tok_s"]
    for run in (fast, slow):
        row = run["results"][0]
        assert row["completed"] == row["prompts"] == 4 and row["batch"] == 2 and len(row["step_ms_samples"]) == 4
        assert row["total_input_tokens"] == 4 * 16 and row["total_output_tokens"] == 4 * 8
    assert result["client_shims"] is not None
    for run in result["runs"]:
        assert (tmp_path / run["server_log"]).exists() and (tmp_path / run["client_file"]).exists()
        # each run forked from the client's forkserver, which had imported the client (a preload that fails
        # is passed over by multiprocessing: the run would import it again, some 15 s of a core, and say so)
        first = (tmp_path / run["client_log"]).read_text().splitlines()[0]
        assert first.endswith("forked from the client's forkserver, its imports preloaded"), first
    lines = [json.loads(line) for line in (tmp_path / sweep.PROGRESS_FILE).read_text().splitlines()]
    assert "meta" in lines[0] and [line["run"]["label"] for line in lines[1:]] == ["fast#r1", "crash#r1", "slow#r1"]


# --- against the stand-in (tools/engines/sglang_standin): real decode work, planted crashes, real traces -------

from tools.engines.sglang_standin import planted  # noqa: E402  (the planted amounts the sweep must measure)

STANDIN = [sys.executable, "-m", "tools.engines.sglang_standin"]


def standin_env() -> dict:
    """The reference engine's spec at dsv4-flash's CPU shapes in the stand-in's environment (torch attention:
    the Triton one runs under the interpreter on a CPU)."""
    import yaml

    from agent.config import TARGETS_DIR, parse_target
    from agent.engine_runs import baseline, bench_spec

    target = parse_target(yaml.safe_load((TARGETS_DIR / "dsv4-flash.yaml").read_text()), "dsv4-flash")
    spec = {**bench_spec(target, "cpu", baseline(target, "cpu"), [1]), "attention": "torch"}
    return {"PERF_INVESTIGATOR_STANDIN_SPEC": json.dumps(spec)}


@pytest.mark.slow
def test_sweep_against_the_standin_moves_by_its_planted_amounts_and_survives_its_planted_crashes(tmp_path):
    """The stand-in's planted flags through the real client: the eager-decode delay adds its milliseconds to
    every output token, four decode steps an iteration share the scheduler overhead four ways (planted.py),
    each held to what was planted; the planted crashes are failed runs with their log excerpts, and the sweep
    goes on. The settings run between two baseline runs, read at the lesser: a neighbour taking the cores only
    ever slows a run down. The planted sleeps are scaled 40x (PERF_INVESTIGATOR_STANDIN_PLANT_SCALE): a busy
    machine stretches the real per-iteration work around them (the server's loop, the ranks' messages, the
    streaming: some 9 ms a token on the idle 2-core box, far more beside the rest of the suite), while a sleep
    takes no core and stretches with no load; at 40x the plant (600 ms a token for the eager delay, 1,200 an
    iteration for the overhead) stands above what the load adds to one run and not another. At 20x it did not
    beside `stress-ng --cpu 2` and the suite (2026-12-07): four back-to-back decode steps, whose rank processes
    exchange messages with no sleep between them to earn the scheduler's credit, were stretched far more than a
    baseline step after its sleep (a four-step TPOT of 406 ms against a baseline gap of 613: 207 saved of 450). A decode
    iteration is read as the median gap between streamed tokens (the client's median ITL). The requests go one at a
    time (concurrency 1): a request's TPOT also carries the prefill iterations of any other that joins its batch
    after it, a whole overhead of 600 ms over its seven gaps, and a loaded machine staggers the arrivals of a wave
    of four (seen in CI beside the suite: a four-step TPOT of 834 ms against a baseline gap of 684; beside a 4-thread
    hog, 440 against 618: two or three prefills of the others inside its two decode iterations). Alone, a request's
    TPOT is its own decode iterations. The four-step setting's tokens are read by their TPOT: it shares one overhead
    over four gaps, which is the effect."""
    scale = 40.0
    runs = [{"label": "baseline#r1"}, {"label": "eager#r1", "args": ["--cuda-graph-backend-decode", "disabled"]},
            {"label": "steps4#r1", "args": ["--num-continuous-decode-steps", "4"]},
            {"label": "dp-attn#r1", "args": ["--attn-dp-size", "2"]},
            {"label": "mem#r1", "args": ["--mem-fraction-static", "0.95"]}, {"label": "baseline#r2"}]
    raw = {"launcher": STANDIN, "server_args": [*BASE_ARGS, "--max-running-requests", "4"],
           "env": {**standin_env(), planted.PLANT_SCALE_ENV: str(scale)}, "health_timeout_s": 300, "stop_grace_s": 10,
           "load": {"input_len": 16, "output_len": 8, "concurrency": 1, "num_prompts": 2, "warmup_prompts": 1},
           "runs": runs}
    out = tool("sweep", "--spec", json.dumps(raw), "--out", tmp_path, timeout=1800, nice=-5)  # as the SGLang run's sweep
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout)
    by = {run["label"]: run for run in result["runs"]}
    healthy = [r["label"] for r in runs if not r["label"].startswith(("dp-attn", "mem"))]
    assert all(by[label]["ok"] for label in healthy), result["runs"]
    row = by["baseline#r1"]["results"][0]
    assert row["completed"] == 2 and row["total_output_tokens"] == 2 * 8 and row["step_ms"] > 0
    server_info = json.loads((tmp_path / by["baseline#r1"]["client_file"]).read_text().splitlines()[-1])["server_info"]
    assert server_info["server"] == "stand-in"  # the client's own record names what it measured
    assert server_info["standin"]["planted"]["scale"] == scale
    assert server_info["standin"]["planted"]["eager_decode_delay_ms"] == scale * planted.EAGER_DECODE_DELAY_MS
    itl = {label: by[label]["results"][0]["itl_ms_median"] for label in healthy}
    tpot = {label: by[label]["results"][0]["tpot_ms_median"] for label in healthy}
    least = {name: min(v for label, v in itl.items() if label.startswith(name + "#")) for name in ("baseline", "eager")}
    least["steps4"] = tpot["steps4#r1"]
    # The eager delay adds its sleep to each decode iteration; the overhead, paid once per four tokens, saves three
    # quarters of it (and of the iteration's own work, shared too). The bounds fail a missing or reversed effect and
    # leave the load its room; a steps4 token still pays more than half of its quarter of the sleep: shared, not gone.
    added = least["eager"] - least["baseline"]
    eager = scale * planted.EAGER_DECODE_DELAY_MS
    assert 0.5 * eager < added < 2 * eager, (itl, added)
    shared = scale * planted.SCHEDULER_OVERHEAD_MS * (1 - 1 / 4)  # paid once per four tokens instead of once per token
    saved = least["baseline"] - least["steps4"]
    assert 0.5 * shared < saved < 2 * shared, (itl, tpot, saved)
    assert least["steps4"] > 0.5 * scale * planted.SCHEDULER_OVERHEAD_MS / 4, tpot
    assert by["dp-attn#r1"]["kind"] == "launch_failed" and "no DP attention" in by["dp-attn#r1"]["log_excerpt"]
    assert by["mem#r1"]["kind"] == "oom" and "out of memory" in by["mem#r1"]["error"]
    assert [json.loads(line).get("run", {}).get("label") for line in
            (tmp_path / sweep.PROGRESS_FILE).read_text().splitlines()][1:] == [r["label"] for r in runs]


@pytest.mark.slow
def test_profile_against_the_standin_at_tp2_collects_one_trace_per_rank(tmp_path):
    import gzip

    raw = {"launcher": STANDIN, "server_args": [*BASE_ARGS, "--tp-size", "2"], "env": standin_env(),
           "health_timeout_s": 300, "stop_grace_s": 10,
           "load": {"input_len": 16, "output_len": 24, "concurrency": 2, "num_prompts": 2, "warmup_prompts": 1},
           "runs": [{"label": "profile"}],
           "profile": {"num_steps": 3, "activities": ["CPU", "GPU"], "with_stack": True, "profile_by_stage": True}}
    out = tool("profile", "--spec", json.dumps(raw), "--out", tmp_path, timeout=1200)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout)
    assert result["runs"][0]["ok"], result["runs"][0]
    info = result["trace_info"]
    assert [r["rank"] for r in info["ranks"]] == [0, 1] and all(r["role"] == "decode" for r in info["ranks"])
    pids = set()
    for name in info["files"]:
        assert traces.parse(Path(name).name, 2)["stage"] == "DECODE"
        events = json.loads(gzip.decompress((tmp_path / name).read_bytes()))["traceEvents"]
        pids |= {e.get("pid") for e in events if e.get("ph") == "X"}
    assert len(pids) >= 2  # two rank processes wrote them, not one trace under two names
    assert result["runs"][0]["results"][0]["completed"] == 2
