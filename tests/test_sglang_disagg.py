"""Disaggregated SGLang deployments: the stand-in's prefill/decode hand-off (tools/engines/sglang_standin/pd.py)
and the real ``sglang-router`` (the installed sglang-router package) in front of a prefill and a decode stand-in
(tools/engines/sglang/disagg.py): requests go through the router, both servers get their part, the profile is
the decode server's, every number names its server."""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from agent import engine_sglang as es
from agent.config import load_target
from tools.engines.sglang import disagg, spec as sweep_spec
from tools.engines.sglang_standin import pd

TARGET = Path(__file__).parent / "data" / "targets" / "dsv4-flash-sglang-pd.yaml"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def prefill_role():
    role = pd.Role(mode="prefill", backend="mooncake", bootstrap_port=_free_port(), host="127.0.0.1", max_wait_s=5)
    role.start()
    yield role
    role.stop()


def _decode_role(bootstrap_port: int, backend: str = "mooncake") -> pd.Role:
    return pd.Role(mode="decode", backend=backend, bootstrap_port=bootstrap_port, host="127.0.0.1")


def _router_body(port, room):
    # what sglang-router 0.3.2 sent to both servers (observed; see pd.py's docstring)
    return {"input_ids": [1, 2, 3, 4], "sampling_params": {"max_new_tokens": 3}, "stream": True, "model": None,
            "bootstrap_host": "127.0.0.1", "bootstrap_port": port, "bootstrap_room": room}


def test_decode_waits_for_the_room_the_prefill_hands_off(prefill_role):
    decode = _decode_role(prefill_role.bootstrap_port)
    ticket = decode.admit(_router_body(prefill_role.bootstrap_port, 2**63 - 5))
    got = {}
    waiter = threading.Thread(target=lambda: got.update(decode.receive(ticket, timeout_s=5)))
    waiter.start()
    time.sleep(0.3)
    assert waiter.is_alive(), "decode must wait for the prefill's hand-off"
    prefill_role.handed_off(prefill_role.admit(_router_body(None, 2**63 - 5)), prompt_tokens=4, first_token_id=17)
    waiter.join(5)
    assert got["first_token_id"] == 17 and got["prompt_tokens"] == 4 and got["room"] == 2**63 - 5
    assert got["waited_s"] >= 0.25
    assert prefill_role.server_info()["pd_rooms_claimed"] == 1
    assert decode.server_info()["pd_rooms_received"] == 1


def test_a_room_never_handed_off_fails_naming_it(prefill_role):
    decode = _decode_role(prefill_role.bootstrap_port)
    ticket = decode.admit(_router_body(prefill_role.bootstrap_port, 41))
    with pytest.raises(pd.TransferFailed, match="room 41 was not handed off within 0.2 s"):
        decode.receive(ticket, timeout_s=0.2)


def test_an_unreachable_bootstrap_port_fails_naming_it():
    port = _free_port()
    decode = _decode_role(port)
    with pytest.raises(pd.TransferFailed, match=f"cannot reach .*127.0.0.1:{port}"):
        decode.receive(decode.admit(_router_body(port, 3)), timeout_s=0.2)


def test_a_request_without_a_room_is_refused_unless_the_backend_is_fake():
    with pytest.raises(pd.BadRequest, match="without bootstrap room id"):
        _decode_role(1).admit({"input_ids": [1]})
    fake = _decode_role(1, backend="fake")
    assert [fake.admit({"input_ids": [1]}).room for _ in range(2)] == [0, 1]
    assert fake.receive(fake.admit({"input_ids": [1]}), timeout_s=0.1)["first_token_id"] is None


def test_a_null_port_means_the_servers_own_bootstrap_port_and_batches_take_their_item():
    decode = _decode_role(8998)
    assert decode.admit(_router_body(None, 5)).port == 8998
    batch = {"bootstrap_host": ["a", "b"], "bootstrap_port": [None, 9001], "bootstrap_room": [7, 8]}
    assert decode.admit(batch, index=1) == pd.Ticket(host="b", port=9001, room=8)


def test_sglangs_fake_bootstrap_host_is_not_transferred_on_a_real_backend(prefill_role):
    # SGLang's warm-up request carries FAKE_BOOTSTRAP_HOST ("2.2.2.2" in 0.5.23's disaggregation/utils.py)
    fake_host = pd.fake_bootstrap_host()
    assert fake_host == "2.2.2.2"
    decode = _decode_role(prefill_role.bootstrap_port)
    body = {"input_ids": [1], "bootstrap_host": fake_host, "bootstrap_room": 0}
    prefill_role.handed_off(prefill_role.admit(body), prompt_tokens=1, first_token_id=3)
    assert prefill_role.server_info()["pd_rooms_handed_off"] == 0
    assert decode.receive(decode.admit(body), timeout_s=0.1)["first_token_id"] is None


# --- the real router in front of two stand-ins -------------------------------------------------------------------

def _spec(runs=None, profile_steps=None):
    """The spec the agent sends for the PD target with --stand-in (agent/engine_sglang.py), on this box."""
    target = es.with_stand_in(load_target(str(TARGET))[0])
    runs = runs or [("baseline#r1", es.baseline(target))]
    raw = (es.profile_args(target, "cpu", runs[0][1], profile_steps)["spec"] if profile_steps
           else es.sweep_args(target, "cpu", runs)["spec"])
    raw["launcher"] = [sys.executable if part == "{python}" else part for part in raw["launcher"]]
    checked = sweep_spec.profile_spec(raw) if profile_steps else sweep_spec.sweep_spec(raw)
    return target, raw, checked


def _post(url, body, timeout=120):
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.read().decode()


def _info(server):
    return json.loads(urllib.request.urlopen(server.url + "/get_server_info", timeout=30).read())


# sglang-router 0.3.2's Prometheus exporter port when none is given (router_args.py prometheus_port): a router
# started while it is taken dies ("failed to install Prometheus metrics exporter ... Address already in use").
ROUTER_DEFAULT_METRICS_PORT = 29000


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    """One prefill stand-in, one decode stand-in and the real router, launched as a run launches them, while
    the router's default metrics port is taken (as by any other router on the box)."""
    _, raw, spec = _spec()
    dis = disagg.validate(raw)
    paths = disagg.PDPaths(tmp_path_factory.mktemp("pd"), "fixture")
    record = {}
    with socket.socket() as taken:
        try:
            taken.bind(("127.0.0.1", ROUTER_DEFAULT_METRICS_PORT))
            taken.listen()
        except OSError:
            pass  # taken already: the condition holds
        launched = disagg.launch(spec, dis, spec["runs"][0], paths, record)
    launched.record = record
    yield launched
    launched.stop()
    assert all(not s.alive() for s in launched.servers.values())


def test_the_router_is_sglang_routers_own_with_both_stand_ins_as_its_workers(deployment):
    router = deployment.servers["router"]
    args = deployment.record["args"]["router"]
    assert args[:1] == ["--pd-disaggregation"]
    # its metrics exporter got a port of its own: the default was taken while it started, and it runs
    assert int(args[args.index("--prometheus-port") + 1]) != ROUTER_DEFAULT_METRICS_PORT and router.alive()
    assert "sglang_router.launch_router" in router.log_path.read_text().splitlines()[0]
    workers = disagg.get_json(router.url + "/workers")["workers"]
    by_type = {w["worker_type"]: w for w in workers}
    assert by_type["prefill"]["url"] == deployment.servers["prefill"].url
    assert by_type["prefill"]["bootstrap_port"] == deployment.bootstrap_port
    assert by_type["decode"]["url"] == deployment.servers["decode"].url
    for side in ("prefill", "decode"):
        info = _info(deployment.servers[side])
        assert info["server"] == "stand-in" and info["disaggregation_mode"] == side
        assert info["standin"]["disaggregation"]["disaggregation_bootstrap_port"] == deployment.bootstrap_port


def test_a_request_through_the_router_is_prefilled_on_one_stand_in_and_decoded_on_the_other(deployment):
    prefill, decode, router = (deployment.servers[n] for n in ("prefill", "decode", "router"))
    before = {side: _info(deployment.servers[side])["standin"]["disaggregation"] for side in ("prefill", "decode")}
    text = _post(router.url + "/generate", {"input_ids": list(range(1, 17)), "stream": True,
                                            "sampling_params": {"max_new_tokens": 6, "ignore_eos": True}})
    events = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]
    assert text.rstrip().endswith("data: [DONE]")
    last = events[-1]["meta_info"]
    # the client gets the decode server's stream: all six tokens, the first being the one prefill handed off
    assert last["completion_tokens"] == 6 and len(events[-1]["output_ids"]) == 6
    after = {side: _info(deployment.servers[side])["standin"]["disaggregation"] for side in ("prefill", "decode")}
    assert after["prefill"]["pd_rooms_handed_off"] == before["prefill"]["pd_rooms_handed_off"] + 1
    assert after["prefill"]["pd_rooms_claimed"] == before["prefill"]["pd_rooms_claimed"] + 1
    assert after["decode"]["pd_rooms_received"] == before["decode"]["pd_rooms_received"] + 1
    assert prefill.alive() and decode.alive() and router.alive()


def test_the_decode_server_continues_from_the_token_the_prefill_server_handed_off(deployment):
    # what the router does (pd.py's docstring): the same body, with the room, to both servers at once
    body = {"input_ids": list(range(3, 11)), "stream": False, "sampling_params": {"max_new_tokens": 4,
            "ignore_eos": True}, "bootstrap_host": "127.0.0.1", "bootstrap_port": deployment.bootstrap_port,
            "bootstrap_room": 2**62 + 7}
    answers = {}

    def send(side):
        answers[side] = json.loads(_post(deployment.servers[side].url + "/generate", body))

    threads = [threading.Thread(target=send, args=(side,)) for side in ("decode", "prefill")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    prefill, decode = answers["prefill"], answers["decode"]
    assert prefill["meta_info"]["finish_reason"] == pd.PREFILL_FINISH and len(prefill["output_ids"]) == 1
    assert len(decode["output_ids"]) == 4 and decode["output_ids"][0] == prefill["output_ids"][0]


def test_a_disaggregated_server_refuses_a_request_without_a_room_as_sglang_does(deployment):
    with pytest.raises(urllib.error.HTTPError) as refused:
        _post(deployment.servers["decode"].url + "/generate",
              {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 2}})
    assert refused.value.code == 400
    assert "without bootstrap room id" in refused.value.read().decode()


def test_each_servers_own_numbers_name_it(deployment):
    numbers = disagg.side_numbers(deployment)
    assert {name: rec["server"] for name, rec in numbers.items()} == {"prefill": "prefill", "decode": "decode",
                                                                      "router": "router"}
    assert numbers["decode"]["stand_in"] and numbers["decode"]["disaggregation_mode"] == "decode"
    assert numbers["decode"]["handoff"]["pd_rooms_received"] >= 0
    assert {w["type"] for w in numbers["router"]["workers"]} == {"prefill", "decode"}


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["prefill"].update(args=["--disaggregation-mode", "decode"]), "prefill.args: --disaggregation-mode"),
    (lambda d: d["router"].update(args=["--port", "1"]), "router.args: --port"),
    (lambda d: d.update(levers_on="router"), "levers_on must be decode, prefill or both"),
])
def test_a_malformed_disaggregation_is_bad_input_before_any_launch(mutate, message):
    _, raw, _ = _spec()
    mutate(raw["disaggregation"])
    with pytest.raises(sweep_spec.SpecError, match=message):
        disagg.validate(raw)


def test_levers_go_to_the_server_levers_on_names():
    _, raw, spec = _spec()
    dis = disagg.validate(raw)
    run = {"label": "x", "args": ["--num-continuous-decode-steps", "4"], "env": {"NCCL_PROTO": "LL"}}
    args = {side: disagg.side_args(spec, dis, run, side, 4242) for side in disagg.SIDES}
    assert "--num-continuous-decode-steps" in args["decode"] and "--num-continuous-decode-steps" not in args["prefill"]
    assert args["prefill"][-6:] == ["--disaggregation-mode", "prefill", "--disaggregation-transfer-backend",
                                    "mooncake", "--disaggregation-bootstrap-port", "4242"]
    assert disagg.side_env({}, spec, {**dis, "levers_on": "both"}, run, "prefill")["NCCL_PROTO"] == "LL"
    assert "NCCL_PROTO" not in disagg.side_env({}, spec, dis, run, "prefill")


# --- whole runs through the tool (slow: each run launches two stand-ins and the router) --------------------------

def _tool(action, raw, out, timeout=900):
    import subprocess

    proc = subprocess.run([sys.executable, "-m", "tools.engines.sglang", action, "--spec", json.dumps(raw),
                           "--out", str(out)], capture_output=True, text=True, timeout=timeout)
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def _lever_runs(target, names):
    levers = {lever.name: lever for lever in target.levers}
    return [("baseline#r1", es.baseline(target))] + [(f"{n}#r1", es.with_lever(target, levers[n])) for n in names]


@pytest.mark.slow
def test_a_sweep_through_the_router_measures_each_run_and_a_decode_crash_is_a_failed_run_naming_it(tmp_path):
    target = es.with_stand_in(load_target(str(TARGET))[0])
    _, raw, _ = _spec(_lever_runs(target, ["continuous-decode-4", "mem-fraction-0.95"]))
    # this sweep judges no timing (the local SGLang run does, at the target's own load): one wave of short requests
    raw["load"] = {**raw["load"], "output_len": 8, "concurrency": 2, "num_prompts": 2, "warmup_prompts": 1}
    code, result, stderr = _tool("sweep", raw, tmp_path)
    assert code == 0, stderr[-2000:]
    base, continuous, oom = result["runs"]
    for run in (base, continuous):
        assert run["ok"], run.get("error")
        assert run["server"] == "router" and [row["server"] for row in run["results"]] == ["router"]
        row = run["results"][0]
        assert row["completed"] == row["prompts"] == raw["load"]["num_prompts"] and row["tok_s"] > 0
        assert {name: rec["server"] for name, rec in run["servers"].items()} == {
            "prefill": "prefill", "decode": "decode", "router": "router"}
        assert run["servers"]["prefill"]["handoff"]["pd_rooms_handed_off"] >= row["completed"]
        assert run["servers"]["decode"]["handoff"]["pd_rooms_received"] >= row["completed"]
        for part, log in run["server_logs"].items():
            assert (tmp_path / log).is_file(), part
    assert "--num-continuous-decode-steps" in continuous["args"]["decode"]
    assert "--num-continuous-decode-steps" not in continuous["args"]["prefill"]
    # the planted out-of-memory lever kills the decode server at start: that run fails, naming it, the sweep goes on
    assert not oom["ok"] and oom["kind"] == "oom" and oom["failed_server"] == "decode", oom
    assert "out of memory" in oom["log_excerpt"] and oom["results"] == []
    lines = [json.loads(line) for line in (tmp_path / "sweep_runs.jsonl").read_text().splitlines()]
    assert [line["run"]["label"] for line in lines if "run" in line] == [base["label"], continuous["label"], oom["label"]]
    assert not _left_running([base, continuous, oom])


@pytest.mark.slow
def test_the_profile_is_the_decode_servers_while_the_load_goes_through_the_router(tmp_path):
    _, raw, _ = _spec(profile_steps=2)
    # the sweep's one wave of short requests (its eight decode steps hold the two profiled): this profile judges no
    # timing, and the target's three waves of 32 tokens were some 15 s of a core more
    raw["load"] = {**raw["load"], "output_len": 8, "concurrency": 2, "num_prompts": 2, "warmup_prompts": 1}
    code, result, stderr = _tool("profile", raw, tmp_path)
    assert code == 0, stderr[-2000:]
    run = result["runs"][0]
    assert run["ok"], run.get("error")
    assert run["profiled_server"] == "decode" and run["results"][0]["server"] == "router"
    assert result["traces"] and all(t["server"] == "decode" for t in result["traces"])
    for trace in result["traces"]:
        assert (tmp_path / trace["name"]).stat().st_size > 0
    # only the decode server was asked (the stand-in logs SGLang's "Profiling starts" line)
    assert "Profiling starts" in (tmp_path / run["server_logs"]["decode"]).read_text()
    assert "Profiling starts" not in (tmp_path / run["server_logs"]["prefill"]).read_text()
    assert result["trace_info"]["files"]
    assert not _left_running([run])


def _left_running(runs: list[dict]) -> list[str]:
    """Processes still running with the ``--port`` of a server or router these runs launched (none may be)."""
    import subprocess

    ports = {str(port) for run in runs for port in (run.get("ports") or {}).values()}
    assert ports, "the runs launched nothing"
    listing = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout.splitlines()
    return [line for line in listing if any(f"--port {port}" in line for port in ports)]


@pytest.mark.slow
def test_killing_the_tool_mid_run_leaves_neither_server_nor_the_router(tmp_path):
    import os
    import re
    import signal
    import subprocess

    _, raw, _ = _spec()
    raw["stop_grace_s"] = 5
    tool = subprocess.Popen([sys.executable, "-m", "tools.engines.sglang", "sweep", "--spec", json.dumps(raw),
                             "--out", str(tmp_path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    router_log = tmp_path / "logs" / "baseline_r1.router.log"
    deadline = time.monotonic() + 600
    while not router_log.exists() and time.monotonic() < deadline and tool.poll() is None:
        time.sleep(0.5)
    assert router_log.exists(), "the router was never launched"
    logs = sorted((tmp_path / "logs").glob("baseline_r1.*.log"))
    ports = {m.group(1) for log in logs for m in [re.search(r"--port (\d+)", log.read_text().splitlines()[0])] if m}
    assert len(ports) == 3, logs
    os.kill(tool.pid, signal.SIGKILL)
    tool.wait()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        listing = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout.splitlines()
        left = [line for line in listing if any(f"--port {port}" in line for port in ports)]
        if not left:
            break
        time.sleep(1)
    assert not left
