"""The Python API (perf_investigator) holds the numbers the CLI prints: the DataFrames of TraceAnalysis
against ``python -m agent trace ... --json --by-rank`` / ``--by-op`` on real traces (CPU-only, CPU TP2,
the H200 TP2 pair and a CUDA-graph replay), and Run.levers() against a shipped run's levers finding
(its numbers and the "Lever sweep" table the report renders). Floats are compared exactly: both
sides come from one computation, and JSON keeps a float's every digit."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from agent import cli
from conftest import DATA, ROOT
from perf_investigator import Run, TraceAnalysis
from tools.trace import TraceFormatError

H200 = DATA / "h200-traces"
TRACE_SETS = {
    "cpu": [DATA / "trace-cpu" / "reference-cpu.trace.json.gz"],
    "cpu-tp2": sorted((DATA / "trace-cpu-tp2").glob("*.trace.json.gz")),
    "h200-tp2": [H200 / "dsv4-like-B16-TP-0.trace.json.gz", H200 / "dsv4-like-B16-TP-1.trace.json.gz"],
    "h200-graph": [H200 / "dsv4-like-B16-topk512-cudagraph.trace.json.gz"],
}
EXAMPLES = sorted((ROOT / "runs" / "examples").iterdir())


def _cli_json(capsys, *args) -> dict:
    capsys.readouterr()
    assert cli.main(["trace", *map(str, args), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _records(table: pd.DataFrame) -> list[dict]:
    """Rows as plain dicts, NaN / <NA> as None (the JSON's null)."""
    return [{k: (None if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)) else v)
             for k, v in row.items()} for row in table.to_dict("records")]


@pytest.fixture(scope="module", params=sorted(TRACE_SETS))
def traces(request):
    return request.param, TraceAnalysis(TRACE_SETS[request.param])


def test_kernel_tables_are_the_clis(traces, capsys):
    name, analysis = traces
    printed = _cli_json(capsys, *TRACE_SETS[name], "--by-rank")
    assert analysis.ranks == list(printed["ranks"]) and analysis.kind == printed["kind"]
    assert list(analysis.notes) == printed["notes"]
    assert _records(analysis.kernels_merged()) == printed["merged"]["kernels"]
    per_rank = [{"rank": key, **row} for key, rank in printed["ranks"].items() for row in rank["kernels"]]
    assert _records(analysis.kernels()) == per_rank
    for key in printed["ranks"]:
        assert _records(analysis.kernels(rank=key)) == [row for row in per_rank if row["rank"] == key]
    times = _records(analysis.rank_times())
    assert [t["rank"] for t in times] == [*printed["ranks"], "all"]
    for row, summary in zip(times, [*printed["ranks"].values(), printed["merged"]]):
        assert row == {"rank": row["rank"], **{k: summary[k] for k in row if k != "rank"}}


def test_time_by_operation_is_the_clis(traces, capsys):
    name, analysis = traces
    printed = _cli_json(capsys, *TRACE_SETS[name], "--by-op")
    assert analysis.attribution.to_dict() == printed
    expected = [{"operation": r["name"], "source": r["source"],
                 **{k: (r["frame"] or {}).get(k) for k in ("function", "file", "line")},
                 "calls": r["calls"], "total_us": r["total_us"], "share": r["share"], "kernel_names": len(r["kernels"])}
                for r in printed["rows"]]
    assert _records(analysis.time_by_operation()) == expected
    kernels = [{"operation": r["name"], "source": r["source"], "kernel": k["name"], "calls": k["calls"],
                "total_us": k["total_us"]} for r in printed["rows"] for k in r["kernels"]]
    assert _records(analysis.operation_kernels()) == kernels


def test_the_merged_table_does_not_depend_on_by_rank(capsys):
    printed = _cli_json(capsys, *TRACE_SETS["cpu-tp2"])
    assert printed["ranks"] == {}
    assert _records(TraceAnalysis(TRACE_SETS["cpu-tp2"]).kernels_merged()) == printed["merged"]["kernels"]


def test_a_graph_replay_says_it_cannot_attribute():
    analysis = TraceAnalysis(TRACE_SETS["h200-graph"])
    assert analysis.attribution.status == "needs-eager-profile"
    assert analysis.time_by_operation()["source"].iloc[0] == "graph"


def test_bad_input_is_the_clis(tmp_path):
    with pytest.raises(TraceFormatError):
        TraceAnalysis([tmp_path / "missing.json"]).kernels()
    with pytest.raises(KeyError, match="rank '7'"):
        TraceAnalysis(TRACE_SETS["cpu-tp2"]).kernels(rank="7")
    with pytest.raises(FileNotFoundError):
        Run(tmp_path)


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_levers_are_the_runs_lever_finding(example):
    run = Run(example)
    levers = run.levers()
    finding = json.loads((example / "findings" / "02-levers.json").read_text())
    numbers = {key: number["value"] for key, number in finding["numbers"].items()}
    rows = _records(levers)
    assert [r["lever"] for r in rows] == ["baseline", *(lever["name"] for lever in finding["data"]["levers"])]
    assert rows[0]["tok_s"] == numbers["baseline_tok_s"] and rows[0]["step_ms"] == numbers["baseline_step_ms"]
    for row in rows[1:]:
        for column, suffix in (("ratio", "_ratio"), ("ratio_low", "_ratio_low"), ("ratio_high", "_ratio_high")):
            assert row[column] == numbers.get(row["lever"] + suffix), (row["lever"], column)
    sweep = next(t for t in finding["tables"] if t["title"] == "Lever sweep")
    shown = {cells[0]: cells for cells in sweep["rows"] if "warm-up" not in cells[0]}
    assert list(shown) == [r["lever"] for r in rows]
    for row in rows:
        cells = dict(zip(sweep["columns"], shown[row["lever"]]))
        assert row["tok_s"] == cells["median tok/s"], row["lever"]
        # "no change detected" reads "no change that counts: ..." when the interval excludes 1 under the floor
        assert cells["verdict"].startswith(row["status"].replace(" detected", "")), row["lever"]
        if row["runs"] is not None:
            assert cells["runs"].endswith(str(row["runs"])), row["lever"]


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_findings_and_numbers_are_the_files(example):
    run = Run(example)
    files = [json.loads(p.read_text()) for p in sorted((example / "findings").glob("*.json"))]
    assert _records(run.findings()) == [{"index": f["index"], "step": f["step"], "verdict": f["verdict"],
                                         "headline": f["headline"], "labels": ", ".join(f["labels"])} for f in files]
    numbers = run.numbers()
    assert len(numbers) == sum(len(f["numbers"]) for f in files)
    assert run.finding("levers").headline == files[1]["headline"]
