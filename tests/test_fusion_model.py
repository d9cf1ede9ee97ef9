"""What a fusion candidate's bound rests on beyond the trace (agent/steps/fusion_model.py): each operation's
intermediate from the run's recorded model shapes, and the fused op SGLang's source has for it, found by
tools/gates/fused.py in the installed sglang and held to the scan written beside the table."""

import ast
import json

import pytest

from conftest import ROOT
from schema.finding import Finding

H200_RUN = ROOT / "runs" / "examples" / "dsv4-flash-h200-20261202b"


def _findings():
    return [Finding.model_validate_json(p.read_text()) for p in sorted((H200_RUN / "findings").glob("*.json"))]


def _sglang_root():
    from tools.gates.source import SourceMissing, default_source

    try:
        return default_source()
    except SourceMissing:
        pytest.skip("sglang is not installed (pip install --no-deps sglang==0.5.23)")


def test_the_written_scan_is_the_scan_of_the_installed_sglang():
    from tools.engines.reference.mirrors import SGLANG_VERSION, recorded_scan
    from tools.gates.fused import scan_fused

    root = _sglang_root()
    live = json.loads(json.dumps(scan_fused(root)))
    if live["engine"]["version"] != SGLANG_VERSION:
        pytest.skip(f"installed sglang {live['engine']['version']}, the table's is {SGLANG_VERSION}")
    assert live == recorded_scan()


def test_every_mirror_is_defined_where_the_scan_says():
    from tools.engines.reference.mirrors import MIRRORS, recorded_scan

    root = _sglang_root()
    entries = recorded_scan()["entries"]
    assert [(e["operation"], e["symbol"]) for e in entries] == [(m.operation, m.symbol) for m in MIRRORS]
    for entry in entries:
        assert entry["found"], entry
        path, line = entry["at"].rsplit(":", 1)
        text = (root / path).read_text().splitlines()
        assert text[int(line) - 1].lstrip().startswith(f"def {entry['symbol'].split('.')[-1]}("), entry["at"]
        for call in entry["calls"]:  # each call site is a call of the symbol's name or of what its file imports it as
            file, at = call["at"].rsplit(":", 1)
            tree = ast.parse((root / file).read_text())
            assert any(isinstance(n, ast.Call) and n.lineno == int(at) for n in ast.walk(tree)), call["at"]


def test_a_missing_symbol_is_not_found(tmp_path):
    from tools.engines.reference.mirrors import Mirror
    from tools.gates.fused import locate

    (tmp_path / "srt").mkdir()
    (tmp_path / "srt" / "ops.py").write_text("def fused_thing():\n    return 1\n\n\ndef caller(x):\n    if x:\n        fused_thing()\n")
    found = locate(tmp_path, Mirror("op", "srt/ops.py", "fused_thing", "does"))
    assert found["found"] and found["at"] == "srt/ops.py:1" and found["end_line"] == 2
    assert [c["at"] for c in found["calls"]] == ["srt/ops.py:7"] and found["calls"][0]["guards"][0]["test"] == "x"
    assert not locate(tmp_path, Mirror("op", "srt/ops.py", "fused_other", "does"))["found"]  # no likeness match


def test_each_operation_takes_its_own_intermediate_from_the_recorded_shapes():
    from agent.steps.fusion_model import intermediate_of

    profile = json.loads((H200_RUN / "findings" / "03-profile.json").read_text())["data"]
    shapes, batch = profile["shapes"], profile["batch"]
    rate = 4000.0
    widths = {}
    for op in ("rms_norm", "apply_rope", "quantize_tokens", "select_experts", "grouped_experts", "indexer_topk"):
        us, how = intermediate_of(op, shapes, batch, rate)
        widths[op] = how.split(" (")[0]
        assert us == pytest.approx(2 * float(how.split(" = ")[1].split(" MB")[0]) * 1e6 / (rate * 1e9) * 1e6, rel=2e-3)
    h = shapes
    assert widths["rms_norm"] == f"{batch} x {h['heads_per_rank'] * h['head_dim']}"
    assert widths["apply_rope"] == f"{batch} x {h['index_heads'] * 64}"
    assert widths["quantize_tokens"] == f"{batch} x {h['head_dim']}"
    assert widths["select_experts"] == f"{batch} x {h['experts_run']}"
    assert widths["grouped_experts"] == f"{batch} x {h['experts_per_token'] * h['hidden']}"
    # the indexer's scores, [index_heads, compressed tokens] (the audit of 2026-12-07 found them left out)
    smallest = min(r for r in h["layer_compress_ratios"] if r > 1)
    assert widths["indexer_topk"] == f"{batch} x {h['index_heads'] * (h['context_len'] // smallest)}"
    us, how = intermediate_of("_byte_offsets", shapes, batch, rate)  # no shape of its own: said to be an assumption
    assert how.startswith(f"{batch} x {h['kernel_heads'] * h['head_dim']} float32") and "an assumption" in how
    assert intermediate_of("rms_norm", None, batch, rate) is None


def test_the_h200_examples_fusion_rows_name_sglangs_fused_ops_and_the_gates_they_fail():
    from agent.steps.next_steps import next_steps

    found = next_steps(_findings(), lambda path: H200_RUN / path)
    rows = {}
    for row in found["fusion"]["candidates"]:
        rows.setdefault(row["operation"], row)
    assert "sglang 0.5.23" in found["fusion"]["known_source"]
    assert any("fused_q_norm_rope (kernels/ops/attention/dsv4/norm_rope.py:" in k for k in rows["apply_rope"]["engine_fused"])
    assert any("fused_store_cache (kernels/ops/attention/dsv4/attn.py:" in k for k in rows["quantize_tokens"]["engine_fused"])
    assert rows["indexer_topk"]["engine_fused"] == []  # no table entry: nothing named
    intermediates = {row["intermediate"].split(" = ")[0] for row in rows.values() if row["intermediate"]}
    assert len(intermediates) >= 5  # each operation its own shape, not one bound for all
    gates = json.loads((H200_RUN / "findings" / "06-gates.json").read_text())["data"]["failing"]
    all_rows = found["fusion"]["candidates"]
    select = [r for r in all_rows if r["operation"] == "select_experts"]
    if select:  # moe_fused_gate holds a gate sm_120 fails (the recorded gates scan): said so
        assert "kernels/ops/moe/moe_fused_gate.py:416" in gates
        assert any("fails a gate" in k for k in select[0]["engine_fused"])
