"""A profiling run whose trace is cut or corrupt: the profile step says so in its finding, ranks
nothing, the investigation goes on without a ranking (gates, options), and the report renders."""

import gzip
import json
from pathlib import Path

import pytest

from agent import routes
from agent.config import Target
from agent.steps.options import propose_options
from agent.steps.profile import profile_decode
from schema.finding import Finding
from conftest import ROOT
from reports.render import render_report

CPU = ROOT / "runs" / "examples" / "dsv4-flash-cpu-20261202"
TRACE = ROOT / "tests" / "data" / "h200-traces-stacks" / "reference-B16-cudagraph.trace.json.gz"


def _finding(step: str) -> dict:
    return json.loads(next((CPU / "findings").glob(f"*-{step}.json")).read_text())


class TraceSession:
    """engine.bench answered with a run whose trace artifact is ``trace``."""

    def __init__(self, trace: Path):
        self.trace = trace

    def call(self, tool, args):
        assert tool == "engine.bench"
        batch = args["spec"]["batch_sizes"][0]
        row = {"batch": batch, "step_ms": 10.0, "layer_ms": 10.0, "tok_s": batch * 100.0, "tok_s_projected": batch * 100.0 / 43,
               "step_ms_samples": [10.0]}
        return {"ok": True, "seq": 15, "call_seq": 14, "error": None,
                "artifacts": [{"name": self.trace.name, "path": str(self.trace), "sha256": "0" * 64}],
                "data": {"results": [row], "trace": {"file": self.trace.name, "steps": 3}}}

    def artifact_path(self, ref):
        return Path(ref["path"])


def _cut_gzip(tmp_path: Path) -> Path:
    data = TRACE.read_bytes()
    cut = tmp_path / "reference_trace_b16.json.gz"
    cut.write_bytes(data[: len(data) // 3])  # a copy that stopped a third of the way
    return cut


def _bad_json(tmp_path: Path) -> Path:
    text = gzip.decompress(TRACE.read_bytes()).decode()
    bad = tmp_path / "reference_trace_b16.json.gz"
    bad.write_bytes(gzip.compress(text[: len(text) // 2].encode()))  # whole gzip, JSON cut in the middle
    return bad


@pytest.mark.parametrize("make", [_cut_gzip, _bad_json], ids=["cut-gzip", "cut-json"])
def test_an_unreadable_trace_is_a_finding_that_ranks_nothing(tmp_path, make):
    target = Target.model_validate(json.loads((CPU / "log.jsonl").read_text().splitlines()[0])["target"])
    state = {"run_id": "r", "started": "2026-12-01T00:00:00+00:00",
             "findings": [_finding("survey"), _finding("levers")], "decision": None}
    finding = profile_decode(state, TraceSession(make(tmp_path)), target)
    assert finding.verdict == "incomplete-trace" and "failed" in finding.labels
    assert finding.headline.startswith("trace unreadable: ") and finding.data["dominant"] is None
    assert finding.data["error"] and not finding.tables
    state["findings"].append(finding.numbered(state, "profile").model_dump(mode="json"))
    assert routes.after_profile(state) == "scan_gates"  # no grid or ceiling from a trace that was not read
    state["findings"].append(_finding("gates"))
    options = propose_options(state, None, target)
    assert [o["name"] for o in options.data["options"]] == ["accept-ceiling"]
    findings = [Finding.model_validate(f) for f in state["findings"]] + [options.numbered(state, "options")]
    report = render_report(findings, None, {"run_id": "r", "target": "dsv4-flash", "description": "", "started": "-",
                                            "timing": None}, {}, None)
    assert "trace unreadable" in report and "Nothing is ranked from this trace" in report
