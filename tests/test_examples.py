"""The shipped runs (runs/examples): each replays byte for byte on this machine, and the H200 run shows
what the issues ask of a GPU stand-in (declared gates, the box's what-if apart, a kernel-level profile)."""

import json
import subprocess
from pathlib import Path

import pytest

from agent import runner
from agent.rundir import RunDir
from conftest import ROOT

EXAMPLES = sorted(p for p in (ROOT / "runs" / "examples").iterdir() if (p / "log.jsonl").exists())
H200 = ROOT / "runs" / "examples" / "dsv4-flash-h200-20261202b"


def _findings(run: Path) -> dict[str, dict]:
    return {json.loads(p.read_text())["step"]: json.loads(p.read_text()) for p in sorted((run / "findings").glob("*.json"))}


def test_examples_are_shipped():
    assert {p.name for p in EXAMPLES} >= {"dsv4-flash-h200-20261202b", "dsv4-flash-cpu-20261202"}


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_example_replays_byte_for_byte(example, tmp_path):
    outcome = runner.replay(example, tmp_path / "replay")
    assert outcome.exit_code == 0, outcome.message
    assert outcome.details["commits"] == RunDir.open(example, recorded=True).history()
    assert (tmp_path / "replay" / "PROFILE_FINDINGS.md").read_bytes() == (example / "PROFILE_FINDINGS.md").read_bytes()
    # the shipped page is the one this code writes (journal format 3 commits it, so the ids above cover it too)
    assert (tmp_path / "replay" / "PROFILE_FINDINGS.html").read_bytes() == (example / "PROFILE_FINDINGS.html").read_bytes()
    status = subprocess.run(["git", "status", "--porcelain"], cwd=tmp_path / "replay", capture_output=True, text=True)
    assert status.returncode == 0 and status.stdout == "", status.stdout + status.stderr


def test_the_report_headline_and_the_result_block_count_findings_alike(tmp_path):
    """A run's console ends with the report step's headline just above the result block, whose count
    (as `runs`) includes the report's own finding: the headline must not read as a smaller total (issue 31)."""
    from agent import summary

    example = next(p for p in EXAMPLES if "cpu" in p.name)
    outcome = runner.replay(example, tmp_path / "replay")  # this code's headline, not the recorded one
    assert outcome.exit_code == 0, outcome.message
    found = [json.loads(p.read_text()) for p in sorted((tmp_path / "replay" / "findings").glob("*.json"))]
    report = next(f for f in found if f["step"] == "report")
    before = [f for f in found if f["index"] < report["index"]]
    assert f"written from the {len(before)} findings before it;" in report["headline"]
    assert summary.result(tmp_path / "replay")["findings"] == len(before) + 1 == len(found)

def test_h200_example_is_a_labelled_stand_in_with_the_declared_gates():
    f = _findings(H200)
    assert f["survey"]["data"]["box"] == {"device": "cuda", "gpu": "NVIDIA H200", "gpus": 1, "sm": 90, "sm_count": 132}
    assert "stand-in" in f["survey"]["labels"]
    # the engine ran what sm_120 would run: the declared hardware's backend, not the box's FlashMLA
    assert f["profile"]["data"]["dominant"]["name"] == "_tiled_sparse_decode_kernel"
    assert f["profile"]["data"]["kind"] == "gpu"
    # the gates: sm_120 for the deployment; the box's sm_90 picture and its measurement apart, as a what-if
    gates = f["gates"]
    assert "what-if" in gates["labels"]
    assert gates["data"]["what_if"]["sm"] == 90
    assert gates["data"]["what_if"]["measured"][0]["backend"] == "flashmla"
    ties = gates["data"]["fallback_kernels"]
    assert ties and ties[0]["kernel"] == "_tiled_sparse_decode_kernel"
    report = (H200 / "PROFILE_FINDINGS.md").read_text()
    assert "Gates sm_120 fails" in report
    assert "What-if: gates the box (sm_90) passes and sm_120 fails" in report
    assert "never part of the deployment's ceiling" in report
    for row in gates["tables"][1]["rows"]:
        where, _, _, _, _ = row
        file, line = where.rsplit(":", 1)
        assert int(line) > 0 and file


def test_h200_example_grid_matches_nsight_compute():
    """The grid step's numbers against Nsight Compute's exports of the same kernel on the H200
    (tests/data/h200-sparse-decode): at B=1 the grid, programs and the chosen config's block size;
    at the profiled batch, the grid's head extent, which ncu measured at every batch."""
    from tools.kernel_source.ncu import summarize

    data = ROOT / "tests" / "data" / "h200-sparse-decode"
    runs = [json.loads(line) for line in (data / "ncu_runs.jsonl").read_text().splitlines() if line.strip()]
    measured = {run["batch"]: (run, summarize(data / f"ncu_B{run['batch']}_topk{run['topk']}.csv", kernel="_tiled_sparse_decode_kernel"))
                for run in runs}
    grid = _findings(H200)["grid"]
    b1 = next(r for r in grid["data"]["reports"] if r["point"]["label"] == "deployment B=1")
    run, ncu = measured[1]
    assert b1["point"]["shapes"]["topk"] == run["topk"]
    assert b1["report"]["grid"] + [1] * (3 - len(b1["report"]["grid"])) == ncu["grid"]
    assert b1["report"]["programs"] == ncu["grid_size"]
    chosen = next(c for c in b1["report"]["configs"] if c["config"] == run["chosen"])
    assert [chosen["threads_per_program"], 1, 1] == ncu["block"] and chosen["threads_per_program"] == ncu["block_size"]
    profiled = next(r for r in grid["data"]["reports"] if r["point"]["where"] == "box")
    assert profiled["point"]["arch"] == f"sm_{ncu['cc'].replace('.', '')}"
    assert profiled["report"]["sms"] == ncu["sms"]
    for run, ncu in measured.values():
        assert ncu["grid"][0] == run["batch"]  # ncu's grid is (B, heads, 1) at each batch it measured
        assert profiled["report"]["grid"] == [profiled["point"]["batch"], ncu["grid"][1]]
