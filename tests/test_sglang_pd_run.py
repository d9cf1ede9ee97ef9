"""Issue #15's disaggregated Must show, on a recorded run: ``investigate tests/data/targets/dsv4-flash-sglang-pd.yaml
--stand-in --decide auto --budget quick`` (a prefill and a decode stand-in behind the real sglang-router 0.3.2,
2026-12-01 21:33 UTC on the idle 2-core machine, 355 s by its journal). Every number resting on a live server's
measurement names the server it comes from: the router for the client's numbers, the decode server for the
traces; and the planted flags come out as planted."""

from __future__ import annotations

import json
from pathlib import Path

from agent import runner
from conftest import DATA

RUN = DATA / "sglang-pd-standin-run"
SERVERS = ("router", "decode", "prefill")


def _events() -> list[dict]:
    return [json.loads(line) for line in (RUN / "log.jsonl").read_text().splitlines()]


def _findings() -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((RUN / "findings").glob("*.json"))]


def test_every_number_from_a_live_server_names_its_server():
    tool_of = {e["seq"]: e["tool"] for e in _events() if e["kind"] == "tool_result"}
    served = 0
    for finding in _findings():
        for key, number in finding["numbers"].items():
            if any(tool_of.get(seq, "").startswith("sglang.") for seq in number["seqs"]):
                served += 1
                assert any(name in number["label"] for name in SERVERS), (finding["step"], key, number["label"])
    assert served > 20


def test_the_load_went_through_the_router_and_the_profile_is_the_decode_servers():
    profile = next(f for f in _findings() if f["step"] == "profile")
    assert "decode" in profile["headline"].rsplit("[", 1)[1]
    assert {t["server"] for t in profile["data"]["server"]["traces"]} == {"decode"}
    assert "router" in profile["numbers"]["profiled_load_tok_s"]["label"]
    levers = next(f for f in _findings() if f["step"] == "levers")
    assert "router" in levers["data"]["server"]
    failed = [r for r in levers["data"]["levers"] if r["status"] == "failed"]
    assert failed and all("decode server" in r["reason"] and r["log_excerpt"] for r in failed)  # the server that died is named


def test_the_recorded_disaggregated_run_replays_byte_for_byte(tmp_path):
    outcome = runner.replay(RUN, tmp_path / "replay")
    assert outcome.exit_code == 0, outcome.message
    assert (tmp_path / "replay" / "PROFILE_FINDINGS.md").read_bytes() == (RUN / "PROFILE_FINDINGS.md").read_bytes()


def test_the_planted_flags_come_out_as_planted_through_the_router():
    """Four decode steps an iteration share the stand-in's scheduler overhead (faster); eager decode adds a delay
    per step (slower): the recorded sweep must not say otherwise."""
    levers = next(f for f in _findings() if f["step"] == "levers")
    results = {r["name"]: r for r in levers["data"]["levers"]}
    shared, eager = results["continuous-decode-4"], results["cuda-graph-off"]
    assert shared["ratio"] > 1 and shared["status"] != "moves down", shared
    assert eager["ratio"] < 1 and eager["status"] != "moves up", eager
