"""Records round-trip, the category table, dominant(), the readable CLI, rank labels."""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

import pytest

from tools.trace import DEFAULT_RULES, KernelRow, TraceSummary, dominant, summarize
from tools.trace import cli

DATA = Path(__file__).parent / "data"
B16 = DATA / "h200-traces/dsv4-like-B16-topk512.trace.json.gz"
GRAPH = DATA / "h200-traces/dsv4-like-B16-topk512-cudagraph.trace.json.gz"
TP = [DATA / "h200-traces/dsv4-like-B16-TP-0.trace.json.gz", DATA / "h200-traces/dsv4-like-B16-TP-1.trace.json.gz"]
CPU_TRACE = DATA / "trace-cpu/reference-cpu.trace.json.gz"


@pytest.mark.parametrize("paths", [[B16], TP, [CPU_TRACE]], ids=["gpu", "two-ranks", "cpu"])
def test_to_dict_from_dict_round_trips_through_json_exactly(paths):
    summary = summarize(paths, by_rank=True)
    text = json.dumps(summary.to_dict(), sort_keys=True)
    back = TraceSummary.from_dict(json.loads(text))
    assert back == summary
    assert json.dumps(back.to_dict(), sort_keys=True) == text
    assert "NaN" not in text and "Infinity" not in text


def test_default_categories_on_the_real_kernels():
    rows = {row.name: row.category for row in summarize([B16]).merged.kernels}
    assert rows["_tiled_sparse_decode_kernel"] == "attention"
    assert rows["Memcpy DtoH (Device -> Pinned)"] == "memory"
    assert all(category == "gemm/moe" for name, category in rows.items() if name.startswith("nvjet_"))
    nccl = {row.name: row.category for row in summarize([TP[0]]).merged.kernels}
    assert all(category == "communication" for name, category in nccl.items() if name.startswith("ncclDevKernel"))
    assert [category for category, _ in DEFAULT_RULES] == ["memory", "communication", "attention", "gemm/moe", "elementwise/reduce"]


def test_category_table_can_be_replaced_and_is_validated(tmp_path):
    summary = summarize([B16], categories=[("mine", r"^_tiled"), ("copies", r"^Memcpy")])
    by_name = {row.name: row.category for row in summary.merged.kernels}
    assert by_name["_tiled_sparse_decode_kernel"] == "mine"
    assert by_name["Memcpy DtoH (Device -> Pinned)"] == "copies"
    assert set(summary.merged.categories) == {"mine", "copies", "other"}
    assert summary.category_rules == (("mine", r"^_tiled"), ("copies", r"^Memcpy"))
    with pytest.raises(ValueError, match="bad regex"):
        summarize([B16], categories=[("broken", "(")])
    with pytest.raises(ValueError, match="pair"):
        summarize([B16], categories=[("only-a-name",)])


def test_dominant_threshold():
    summary = summarize([B16])
    top = summary.merged.kernels[0]
    assert dominant(summary, top.share) == top
    assert dominant(summary, top.share + 1e-9) is None
    assert isinstance(dominant(summary, 0.0), KernelRow)


def _run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    code = cli.run(parser.parse_args(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_readable_table_json_and_top(capsys, tmp_path):
    code, out, _ = _run_cli([*map(str, TP), "--by-rank", "--top", "3"], capsys)
    assert code == 0
    assert "rank 0" in out and "rank 1" in out and "all ranks" in out
    assert "_tiled_sparse_decode_kernel" in out and "ncclDevKernel_AllReduce" in out
    assert "more kernels" in out
    code, out, _ = _run_cli([str(B16), "--json"], capsys)
    assert code == 0
    assert TraceSummary.from_dict(json.loads(out)) == summarize([B16])
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps([["decode", "sparse_decode"]]))
    code, out, _ = _run_cli([str(B16), "--categories", str(rules)], capsys)
    assert code == 0 and "decode " in out
    code, out, err = _run_cli([str(tmp_path / "absent.trace.json.gz")], capsys)
    assert code == 2 and out == "" and "absent" in err


def test_readable_table_says_when_not_ranked(capsys, tmp_path):
    trace = json.loads(gzip.open(GRAPH, "rt").read())
    launches = {e["args"]["correlation"] for e in trace["traceEvents"] if e.get("name") == "cudaGraphLaunch"}
    trace["traceEvents"] = [e for e in trace["traceEvents"] if not (e.get("cat") == "kernel" and e["args"]["correlation"] in launches)]
    standin = tmp_path / "standin-hidden-graph.trace.json"
    standin.write_text(json.dumps(trace))
    code, out, _ = _run_cli([str(standin)], capsys)
    assert code == 0
    assert "NOT RANKED" in out


@pytest.mark.parametrize(
    "name, key",
    [
        ("1764000000.123-TP-0.trace.json.gz", "0"),
        ("prefix-1764000000-TP-3-EXTEND.trace.json.gz", "3"),
        ("1764000000-TP-1-DP-2-PP-0.trace.json.gz", "TP1-DP2-PP0"),
        ("1764000000-TP-1-EP-4.trace.json.gz", "TP1-EP4"),
        ("merged-1764000000.trace.json.gz", None),
        ("my-tp2-trace.json", None),
    ],
)
def test_rank_from_sglang_file_names(name, key):
    from tools.trace.ranks import rank_from_filename

    assert rank_from_filename(name) == key


def test_rank_from_sglang_merged_pid_labels():
    from tools.trace.ranks import rank_from_pid

    assert rank_from_pid("[TP01] 0") == "1"
    assert rank_from_pid("[TP00-DP01] 3") == "TP0-DP1"
    assert rank_from_pid(7) is None and rank_from_pid("Spans") is None
