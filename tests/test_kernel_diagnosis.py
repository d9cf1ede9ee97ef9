"""The kernel diagnosis (tools/kernel_source/diagnosis.py, ncu.py) and the grid step's use of it.

Static part: two kernels written for the test (tests/data/kernel-diagnosis/gather_attention.py) that
compute the same thing from the same gathered rows, one head-blocked with ``tl.dot``, one per head
with multiply-and-``tl.sum``; SGLang's real ``_tiled_sparse_decode_kernel``; and the project's
split-K rewrite at the configs its wrapper chooses. Nsight Compute part: the real exports of the
upstream kernel on the H200 (tests/data/h200-sparse-decode)."""

from __future__ import annotations

import ast
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from tools.kernel_source import analyze
from tools.kernel_source import ncu as ncu_mod

from conftest import ROOT
from test_kernel_source_occupancy import DATA as NCU_DATA, NCU_FILES, ncu_metrics, number

KERNELS = ROOT / "tests" / "data" / "kernel-diagnosis" / "gather_attention.py"
H200 = ROOT / "runs" / "examples" / "dsv4-flash-h200-20261202b"


def _diagnosis(source, kernel, shapes, **kwargs) -> dict:
    report = analyze(source, kernel, shapes, sms=132, compile=False, **kwargs)
    assert report.diagnosis["ok"], report.diagnosis
    return report.diagnosis


@pytest.mark.parametrize("batch,heads", [(4, 16), (2, 32)])
def test_head_blocked_and_per_head_kernels_told_apart(batch, heads):
    shapes = {"B": batch, "H": heads, "D": 64, "topk": 128}
    blocked = _diagnosis(KERNELS, "head_blocked_kernel", shapes)
    per_head = _diagnosis(KERNELS, "per_head_kernel", shapes)
    assert blocked["grid"] == [batch] and per_head["grid"] == [batch, heads]
    # the same rows are needed either way; the per-head grid loads them once per head
    assert blocked["unique_bytes"] == per_head["unique_bytes"] > 0
    assert blocked["redundancy_factor"] == pytest.approx(1.0)
    assert blocked["gather_redundancy_factor"] == pytest.approx(1.0)
    assert per_head["gather_redundancy_factor"] == pytest.approx(heads)
    assert 1 < per_head["redundancy_factor"] <= heads
    assert per_head["independent_axes_of_gathers"] == [1] and blocked["independent_axes_of_gathers"] == []
    # the gathered KV load: its bytes per program follow from the block and the loop in the source
    kv = next(a for c in per_head["configs"] for a in c["accesses"] if a["tensor"] == ["kv_ptr"])
    assert kv["shape"] == [16, 64] and kv["element_bytes"] == 2 and kv["trips"] == 128 // 16
    assert kv["bytes"] == 16 * 64 * 2 * (128 // 16) * batch * heads
    assert blocked["inner_product"] == "tensor-core dot" and per_head["inner_product"] == "CUDA-core multiply-reduce"
    source = KERNELS.read_text().splitlines()
    assert all("tl.dot" in source[line - 1] for line in blocked["dot_lines"]) and len(blocked["dot_lines"]) == 2
    assert all("tl.sum" in source[line - 1] for line in per_head["multiply_reduce_lines"]) and len(per_head["multiply_reduce_lines"]) == 2
    # the same multiply-adds, on different units
    assert blocked["tensor_core_macs"] == per_head["cuda_core_macs"] == 2 * batch * heads * 128 * 64


def test_an_operator_error_is_an_unknown_value_and_a_bug_is_not():
    """Python's operators on values read from the source may raise (1 // 0, 1 + "a"): the value is then not
    known. Anything else raised (here an operand whose ``+`` is broken) is a bug of the run and propagates."""
    from tools.kernel_source.blocks import apply

    assert apply(ast.FloorDiv(), 1, 0) is None and apply(ast.Add(), 1, "a") is None
    assert apply(ast.Add(), 2, 3) == 5

    class Broken:
        def __add__(self, other):
            raise RuntimeError("planted")

    with pytest.raises(RuntimeError, match="planted"):
        apply(ast.Add(), Broken(), 1)


def test_a_bug_in_the_abstract_run_surfaces_in_the_report(monkeypatch):
    """A failure of the abstract run itself is the diagnosis' error, named, not a silent unknown; the grid
    and loops the report measured stay in it."""
    from tools.kernel_source import tl_ops

    def broken(run, call):
        raise RuntimeError("planted")

    monkeypatch.setitem(tl_ops.BY_NAME, "program_id", broken)
    report = analyze(KERNELS, "per_head_kernel", {"B": 2, "H": 16, "D": 64, "topk": 128}, sms=132, compile=False)
    assert report.diagnosis["ok"] is False and report.diagnosis["error"] == "RuntimeError: planted"
    assert report.grid == [2, 16] and report.loops


@pytest.fixture(scope="module")
def upstream_file() -> Path:
    pytest.importorskip("triton")
    from tools.kernels import upstream

    try:
        return upstream.kernel_path()
    except upstream.SglangMissing as exc:
        pytest.skip(str(exc))


@pytest.mark.parametrize("batch,heads", [(1, 64), (16, 64), (2, 16)])
def test_upstream_kernel_regathers_per_head_on_cuda_cores(upstream_file, batch, heads):
    d = _diagnosis(upstream_file, "_tiled_sparse_decode_kernel", {"B": batch, "H": heads, "topk": 512, "has_topk_len": 1})
    assert d["grid"] == [batch, heads]
    assert d["gather_redundancy_factor"] == pytest.approx(heads)
    assert d["independent_axes_of_gathers"] == [1]
    # Q and the output are per (row, head), so the whole kernel's factor is a little under H
    assert 0.8 * heads < d["redundancy_factor"] < heads
    assert d["inner_product"] == "CUDA-core multiply-reduce" and d["dot_lines"] == []
    source = upstream_file.read_text().splitlines()
    assert d["multiply_reduce_lines"] and all("tl.sum" in source[line - 1] for line in d["multiply_reduce_lines"])
    assert all("tl.load" in source[line - 1] or "tl.load" in source[line] for line in d["gather_lines"])


def test_upstream_padding_programs_reach_the_diagnosis(upstream_file):
    report = analyze(upstream_file, "_tiled_sparse_decode_kernel", {"B": 2, "H": 64, "topk": 512}, sms=188, real_heads=16, compile=False)
    assert report.diagnosis["padding"]["padding_programs"] == report.padding["padding_programs"] == 2 * (64 - 16)


def _rewrite_shapes(batch, topk, heads, arch, sms):
    from tools.kernels.splitk.tiles import choose_config, choose_num_splits

    cfg = choose_config(batch, topk, heads, arch)
    splits = choose_num_splits(batch, topk, heads, sms, arch)
    # the launcher's own names (the wrapper's `_launch_splits`, under tools/kernels), pinned as the wrapper sets them;
    # no per-row lengths (has_len=0), so every row runs its full top-k
    shapes = {"batch": batch, "heads": heads, "topk": topk, "splits": splits, "has_len": 0, "_interpreting()": 0,
              **{f"cfg.{k}": int(v) for k, v in vars(cfg).items() if isinstance(v, (int, bool))}}
    return cfg, shapes


REWRITE_DTYPES = {"q_ptr": "bf16", "o_part_ptr": "fp32", "lse_part_ptr": "fp32", "indices_ptr": "int32",
                  "topk_len_ptr": "int32", "p_scratch_base": "bf16", "alpha_scratch_base": "fp32"}


@pytest.mark.parametrize("batch,topk,heads", [(16, 512, 64), (64, 2048, 64), (16, 512, 16), (1, 512, 16)])
def test_rewrite_uses_tensor_cores_and_gathers_once_per_head_block(batch, topk, heads):
    """The rewrite's Triton kernels at the configs its wrapper picks for sm_120 (188 SMs). A KV tile is
    gathered once per head block: once in all when one block holds all heads, twice for the d-halves
    kernel (each half program gathers the whole row to form S). The sm_120 family's kernel reads a tile's
    bytes twice a head block (group by group for S, whole for P V: the second read finds them in L1/L2),
    which the diagnosis counts as two accesses: its factor is the head blocks times that of one block."""
    pytest.importorskip("triton")
    from tools.kernels.sparse_mla_plan import kernel_of

    cfg, shapes = _rewrite_shapes(batch, topk, heads, 120, 188)
    if cfg.sm90:
        pytest.skip("the Gluon kernel is not Triton-language code")
    kernel, _ = kernel_of(cfg)
    d = _diagnosis(ROOT / "tools" / "kernels", kernel, shapes, dtypes=REWRITE_DTYPES)  # the kernels and their launcher
    assert d["inner_product"] == "tensor-core dot" and d["multiply_reduce_lines"] == []
    head_blocks = -(-heads // cfg.block_h)
    if cfg.sm120:
        assert kernel == "_split_kernel_sm120" and d["independent_axes_of_gathers"] == [0]  # the head-block axis only
        one_block = {**shapes, "heads": cfg.block_h}
        single = _diagnosis(ROOT / "tools" / "kernels", kernel, one_block, dtypes=REWRITE_DTYPES)["gather_redundancy_factor"]
        assert 1 < single <= 2 and d["gather_redundancy_factor"] == pytest.approx(head_blocks * single)
        assert 2 * batch * topk * (8 * 64 + 8 + 64 * 2) <= d["unique_gathered_bytes"] < 2.1 * batch * topk * (8 * 64 + 8 + 64 * 2)
        return
    assert d["gather_redundancy_factor"] == pytest.approx(head_blocks * (2 if cfg.d_halves else 1))
    if head_blocks == 1 and not cfg.d_halves:
        assert d["gather_redundancy_factor"] == pytest.approx(1.0)
        # what stays replicated is Q, once per split (the price of split-K): small against the gathers
        assert d["redundancy_factor"] < 2
    # every top-k token of every row is gathered once: a tile's lanes per token are 8 groups of 64 fp8 (the 8th,
    # the rope slot, masked), 8 scale bytes and 64 bf16 rope values
    assert d["unique_gathered_bytes"] == batch * topk * (8 * 64 * 1 + 8 * 1 + 64 * 2)


@pytest.mark.parametrize("name", NCU_FILES)
def test_ncu_exports_give_the_l1_latency_verdict(name):
    m = ncu_metrics(name)
    s = ncu_mod.summarize(NCU_DATA / name, kernel="_tiled_sparse_decode_kernel")
    assert s["measured"] and s["kernel"] == "_tiled_sparse_decode_kernel"
    assert s["throughput_pct"]["dram"] == number(m["DRAM Throughput"])
    assert s["throughput_pct"]["l1tex"] == number(m["L1/TEX Cache Throughput"])
    assert s["throughput_pct"]["l2"] == number(m["L2 Cache Throughput"])
    assert s["throughput_pct"]["sm"] == number(m["Compute (SM) Throughput"])
    assert s["achieved_occupancy"] == number(m["Achieved Occupancy"])
    assert s["grid_size"] == math.prod(s["grid"]) == number(m["Grid Size"])
    # what the verdict rests on, from the CSV: DRAM far below, L1/TEX the busiest unit; at its high mark
    # or above, it is the bound, below it the kernel waits on latency
    l1 = number(m["L1/TEX Cache Throughput"])
    assert number(m["DRAM Throughput"]) < ncu_mod.DRAM_LOW_PCT < l1 < 100
    assert s["bound"] == ("L1/TEX-bound" if l1 >= ncu_mod.HIGH_PCT else "L1/latency-bound")
    # these exports hold no stall breakdown: said, not guessed
    assert s["stalls"] is None and s["stalls_measured"] is False and s["scheduler"] is None
    assert "WarpStateStats" not in s["sections"]


def test_ncu_verdict_thresholds():
    v = ncu_mod.verdict
    assert v({"dram": 85.0, "l1tex": 40.0, "l2": 50.0, "sm": 20.0})["bound"] == "memory-bound"
    assert v({"dram": 5.0, "l1tex": 30.0, "l2": 10.0, "sm": 80.0})["bound"] == "compute-bound"
    assert v({"dram": 5.0, "l1tex": 30.0, "l2": 10.0, "sm": 20.0}, {"tensor": 75.0})["bound"] == "compute-bound"
    # a cache at 60% of its peak or more is the bound (Nsight's memory-bound, on that cache); below, latency
    at_peak = v({"dram": 1.0, "l1tex": 75.0, "l2": 3.0, "sm": 22.0})
    assert at_peak["bound"] == "L1/TEX-bound" and "L1/TEX at 75% of peak (>= 60%)" in at_peak["basis"]
    assert "no unit at" not in at_peak["basis"]
    assert v({"dram": 1.0, "l1tex": 10.0, "l2": 70.0, "sm": 22.0})["bound"] == "L2-bound"
    below = v({"dram": 1.0, "l1tex": 45.0, "l2": 3.0, "sm": 22.0})
    assert below["bound"] == "L1/latency-bound" and "no unit at 60%" in below["basis"]
    assert v({"dram": 1.0, "l1tex": 10.0, "l2": 40.0, "sm": 22.0})["bound"] == "L2/latency-bound"
    assert v({"dram": None, "l1tex": 75.0, "l2": 3.0, "sm": 22.0})["bound"] == "not measured"


def test_no_ncu_data_no_verdict(tmp_path):
    assert ncu_mod.summarize(None)["bound"] == "not measured"
    bad = tmp_path / "empty.csv"
    bad.write_text("==PROF== nothing profiled\n")
    result = ncu_mod.summarize(bad, kernel="k")
    assert result["bound"] == "not measured" and "error" in result
    other = ncu_mod.summarize(NCU_DATA / NCU_FILES[0], kernel="some_other_kernel")
    assert other["bound"] == "not measured" and "no launch of some_other_kernel" in other["error"]


def test_ncu_stall_parser_reads_raw_stall_metrics(tmp_path):
    """The raw page (one column per metric) as `ncu --page raw --csv` writes it, with the WarpStateStats
    per-reason metrics the sequel's runs will carry: reasons are read and ranked."""
    header = ["ID", "Kernel Name", "Grid Size", "Block Size", "smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio",
              "smsp__average_warp_latency_issue_stalled_barrier.ratio", "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
              "l1tex__throughput.avg.pct_of_peak_sustained_active", "lts__throughput.avg.pct_of_peak_sustained_elapsed",
              "sm__throughput.avg.pct_of_peak_sustained_elapsed"]
    units = ["", "", "", "", "", "", "%", "%", "%", "%"]
    row = ["0", "k", "(1, 64, 1)", "(128, 1, 1)", "12.5", "30.25", "1.0", "70.0", "3.0", "20.0"]
    path = tmp_path / "raw.csv"
    path.write_text("\n".join(",".join(f'"{c}"' for c in r) for r in (header, units, row)) + "\n")
    s = ncu_mod.summarize(path, kernel="k")
    assert [x["reason"] for x in s["stalls"]] == ["barrier", "long_scoreboard"] and s["stalls"][0]["value"] == 30.25
    assert s["bound"] == "L1/TEX-bound"


def raw_metrics(path: Path) -> dict[str, str]:
    """The one launch of a raw-page export, metric name -> value, read with the csv module alone."""
    import csv as csv_mod

    rows = [r for r in csv_mod.reader(line for line in path.read_text().splitlines() if line.startswith('"'))]
    return dict(zip(rows[0], rows[2]))


def test_grid_tool_json_carries_the_diagnosis_and_ncu(upstream_file):
    """The box-side tool as the catalog calls it: the diagnosis and the ncu verdict are in its JSON."""
    from agent.box.catalog import CATALOG

    run = json.loads((NCU_DATA / "ncu_runs.jsonl").read_text().splitlines()[0])
    csv = NCU_DATA / f"ncu_B{run['batch']}_topk{run['topk']}.csv"
    args = {"kernel": "_tiled_sparse_decode_kernel", "source": str(upstream_file.parent), "sms": 132,
            "shapes": {"B": run["batch"], "H": 64, "topk": run["topk"]}, "config": run["chosen"], "ncu_csv": str(csv)}
    argv = CATALOG["kernel.grid"].command(sys.executable, args) + ["--no-compile"]
    out = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)["diagnosis"]
    assert d["ok"] and d["gather_redundancy_factor"] == pytest.approx(64)
    assert d["ncu"]["bound"] == ncu_mod.summarize(csv, kernel="_tiled_sparse_decode_kernel")["bound"]
    assert d["ncu"]["bound"] in ("L1/TEX-bound", "L1/latency-bound") and d["ncu"]["source"] == str(csv)
    without = {k: v for k, v in args.items() if k != "ncu_csv"}
    assert "--ncu-csv" not in CATALOG["kernel.grid"].command(sys.executable, without)


NCU_MEASURED = ROOT / "tests" / "data" / "h200-ncu-warpstate"


def test_grid_step_reports_the_diagnosis(upstream_file, tmp_path):
    """read_grid on the shipped H200 run's survey and profile, its kernel.grid calls answered by the real tool
    (on this machine's sglang source, no compile), its kernel.ncu call served with what that tool printed on
    an H200 (tests/data/h200-ncu-warpstate, the same kernel at the same batch), the raw page it kept
    standing at the fixture's path, as a replay serves it."""
    from agent.box.catalog import CATALOG
    from agent.config import load_target
    from agent.steps.grid import read_grid
    from schema.finding import Finding

    findings = {p.stem.split("-", 1)[1]: json.loads(p.read_text()) for p in sorted((H200 / "findings").glob("*.json"))}
    survey = Finding.model_validate(findings["survey"])
    survey.data["software"]["sglang_dir"] = str(upstream_file.parents[3])
    profile = Finding.model_validate(findings["profile"])
    csv = NCU_MEASURED / "ncu_raw.csv"
    measured = {**json.loads((NCU_MEASURED / "ncu_measure.json").read_text()), "box_csv": str(csv)}
    target = load_target(json.loads((H200 / "log.jsonl").read_text().splitlines()[0])["target_name"])[0]
    state = {"findings": [survey.model_dump(), profile.model_dump()]}

    class ToolSession:
        calls: list[dict] = []
        tools: list[str] = []

        def call(self, tool, args):
            self.calls.append(args)
            self.tools.append(tool)
            if tool == "kernel.ncu":
                return {"ok": True, "data": measured, "error": None, "seq": len(self.calls),
                        "artifacts": [{"name": n, "path": f"artifacts/0/{n}"} for n in measured["csv"].values()]}
            argv = CATALOG[tool].command(sys.executable, args) + ["--no-compile"]
            out = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=300)
            return {"ok": out.returncode == 0, "data": json.loads(out.stdout) if out.returncode == 0 else None,
                    "error": out.stderr[-500:] or None, "call_seq": len(self.calls), "seq": len(self.calls)}

        def artifact_path(self, ref):  # the shipped run's trace: which launch Nsight Compute should take
            return H200 / ref["path"]

    session = ToolSession()
    finding = read_grid(state, session, target)
    d = finding.data["diagnosis"]
    assert session.tools[0] == "kernel.ncu" and session.calls[0]["kernel"] == profile.data["dominant"]["name"]
    assert session.calls[0]["launch_skip"] == finding.data["ncu"]["launch"]["position"]  # the longest launch of a step
    spec = session.calls[0]["spec"]
    assert (spec["batch_sizes"], spec["steps"], spec["cuda_graph"], spec["profile"]) == ([profile.data["batch"]], 1, False, None)
    box_calls = [c for c in session.calls if c.get("ncu_csv")]
    assert len(box_calls) == 1 and box_calls[0]["sms"] == survey.data["box"]["sm_count"] and box_calls[0]["ncu_csv"] == str(csv)
    heads = d["programs"] // profile.data["batch"]
    assert d["gather_redundancy_factor"] == pytest.approx(heads)
    assert finding.number("redundancy_factor") == d["redundancy_factor"] == d["loaded_bytes"] / d["unique_bytes"]
    assert finding.number("inner_product") == "CUDA-core multiply-reduce"
    raw = raw_metrics(csv)
    assert finding.number("dram_pct") == float(raw["gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"])
    assert finding.number("l1tex_pct") == float(raw["l1tex__throughput.avg.pct_of_peak_sustained_active"])
    assert finding.number("achieved_occupancy") == float(raw["sm__warps_active.avg.pct_of_peak_sustained_active"])
    assert finding.number("bound") == "L1/TEX-bound"
    stalls = {k: float(v) for k, v in raw.items() if k.startswith("smsp__average_warps_issue_stalled_") and "_stalled_selected_" not in k}
    top = max(stalls, key=stalls.get)
    assert finding.number("top_stall") == top.split("issue_stalled_")[1].split("_per_issue")[0]
    assert "top stall" in finding.headline and finding.artifacts["ncu_raw"] == "artifacts/0/ncu_raw.csv"
    assert d["ncu"]["source"] == "artifacts/0/ncu_raw.csv"  # the run's artifact, not the box's path
    # the export is of batch 16, the profiled point's: the same grid
    assert d["ncu_same_grid"] is (math.prod(d["ncu"]["grid"]) == d["programs"]) is True
    estimate = d["rewrite_estimate"]
    assert estimate["removes"] == ["redundant loads", "CUDA-core multiply-reduce"]
    assert estimate["speedup"] == d["redundancy_factor"] and "L1/TEX" in estimate["basis"]
    table = next(t for t in finding.tables if t.title.startswith("Diagnosis of"))
    causes = [row[0] for row in table.rows]
    assert causes[:3] == ["redundant gathers", "all loads", "inner products"] and "padding programs" in causes
    assert causes[-2:] == ["Nsight Compute", "warp stalls"]
    padding = next(row for row in table.rows if row[0] == "padding programs")
    real = target.model.heads // target.deployment.tp
    assert padding[2].startswith(f"{(heads - real) * profile.data['batch']} of {d['programs']}")
    # the kept keys
    assert {"splitk_candidate", "splitk_estimate", "reports", "splitk_reason"} <= set(finding.data)


def test_the_counters_reading_keeps_the_byte_ratio_only_where_bytes_bind():
    """agent/steps/ncu_counters.binding: an L1 busy with wavefronts while its data banks idle does not bind on
    bytes (the byte ratio is then no upper estimate); one whose data banks run at ncu's 60% does."""
    from agent.steps.diagnosis import rewrite_estimate
    from agent.steps.ncu_counters import BANK_READS, binding

    lsu = "l1tex__data_pipe_lsu_wavefronts.avg.pct_of_peak_sustained_elapsed"

    def counters(bank: float) -> dict:
        return {"source": "artifacts/x/ncu_raw.csv", "duration_ms": 2.0, "duration_metric": "gpu__time_duration.sum",
                "l1_pct": 80.0, "l1_metric": "l1tex__throughput.avg.pct_of_peak_sustained_active",
                "l1_parts": {lsu: 80.0, BANK_READS: bank}, "bytes_pct": {"DRAM": 1.0, "L2": 3.0},
                "cycles_per_issue": 10.0, "cycles_metric": "smsp__average_warp_latency_per_inst_issued.ratio",
                "stall_groups": [{"group": "MIO", "waits_on": "shared memory", "cycles": 5.0, "share": 0.5,
                                  "reasons": [{"reason": "mio_throttle", "cycles": 5.0}]}],
                "occupancy": {"limiter": "registers", "blocks": 2.0, "metric": "launch__occupancy_limit_registers",
                              "registers_per_thread": 255.0, "theoretical_pct": 12.5}}

    idle, busy = binding(counters(4.0), 2_000_000_000), binding(counters(75.0))
    assert idle["bytes_bind"] is False and busy["bytes_bind"] is True
    assert idle["loaded_bytes_per_s"] == 1e12  # the source model's bytes over the capture's duration
    assert "50%" in idle["text"] and "launch__occupancy_limit_registers" in idle["text"]
    diagnosis = {"redundancy_factor": 10.0, "loaded_bytes": 1000, "unique_bytes": 100, "inner_product": "CUDA-core multiply-reduce",
                 "multiply_reduce_lines": [7], "ncu": {"bound": "L1/TEX-bound", "basis": "L1/TEX at 80%", "counters": counters(4.0)},
                 "call": {"point": "profiled B=4", "batch": 4, "shapes": {"topk": 32}}}
    estimate = rewrite_estimate(diagnosis)
    assert estimate["speedup_kind"] != "upper estimate" and "disagree" in estimate["basis"] and "profiled B=4" in estimate["basis"]
    diagnosis["ncu"]["counters"] = counters(75.0)
    assert rewrite_estimate(diagnosis)["speedup_kind"] == "upper estimate"  # bytes bind: the byte ratio stands
