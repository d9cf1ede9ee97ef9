"""Nsight Compute on the box (tools/kernel_source/ncu_run.py, the catalog's kernel.ncu) and the parser
(tools/kernel_source/ncu.py) on what it captured.

tests/data/h200-ncu-warpstate holds what ``kernel.ncu`` wrote on an H200 (nvidia-h200, ncu 2025.3.1)
for the upstream ``_tiled_sparse_decode_kernel`` at batch 16 of the dsv4-flash reference engine: the
raw page, the details page of the same report, and the tool's JSON. Captured, not constructed."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from agent.box.catalog import CATALOG, run_tool
from agent.box.interface import OUT_DIR
from agent.box.local import LocalBox
from tools.kernel_source import ncu, ncu_run

from conftest import DATA, ROOT

CAPTURED = DATA / "h200-ncu-warpstate"
KERNEL = "_tiled_sparse_decode_kernel"


def _raw(path) -> dict[str, tuple[str, str]]:
    """metric -> (unit, value) of the one launch of a raw page, read with the csv module alone."""
    rows = list(csv.reader(line for line in path.read_text().splitlines() if line.startswith('"')))
    return {name: (unit, value) for name, unit, value in zip(rows[0], rows[1], rows[2])}


def test_the_ncu_command_profiles_one_launch_in_the_range_with_the_four_sections(tmp_path):
    argv = ncu_run.ncu_command("ncu", "py", KERNEL, '{"x": 1}', tmp_path / "e", tmp_path / "r", 3)
    text = " ".join(argv)
    assert argv[:3] == ["ncu", "--clock-control", "none"]
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--section"] == ["LaunchStats", "Occupancy", "SpeedOfLight", "WarpStateStats"]
    assert f"--nvtx --nvtx-include {ncu_run.RANGE}/" in text and f"--kernel-name regex:^{KERNEL}$" in text
    assert "--launch-skip 3 --launch-count 1" in text and f"--export {tmp_path / 'r'}" in text
    # the target is the engine's bench, under the same interpreter, with the spec as given
    assert argv[argv.index("py"):] == ["py", "-m", "tools.kernel_source.ncu_run", "target", "--spec", '{"x": 1}', "--out", str(tmp_path / "e")]
    # both pages come from the one report
    assert ncu_run.export_command("ncu", tmp_path / "r.ncu-rep", "raw") == ["ncu", "--import", str(tmp_path / "r.ncu-rep"), "--csv", "--page", "raw"]


def test_the_catalog_passes_the_spec_the_out_dir_and_the_env():
    spec = {"batch_sizes": [16], "steps": 1}
    args = {"kernel": KERNEL, "spec": spec, "env": {"SGLANG_SM120_FLASHMLA_BACKEND": "triton"}, "launch_skip": 0}
    tool = CATALOG["kernel.ncu"]
    argv = tool.command("py", args)
    assert argv[:4] == ["py", "-m", "tools.kernel_source.ncu_run", "measure"]
    assert json.loads(argv[argv.index("--spec") + 1]) == spec and argv[argv.index("--out") + 1] == OUT_DIR
    assert tool.env(args) == args["env"] and tool.timeout_s(args) > ncu_run.NCU_TIMEOUT_S


@pytest.mark.parametrize("name,function", [
    ("_tiled_sparse_decode_kernel", "_tiled_sparse_decode_kernel"),
    ("void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<float, float, "
     "float, at::native::binary_internal::MulFunctor<float> > >(at::TensorIteratorBase&, at::native::BinaryFunctor<float, float, "
     "float, at::native::binary_internal::MulFunctor<float> > const&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl_nocast<at::native::"
     "BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> > >(at::TensorIteratorBase&, at::native::BinaryFunctor<"
     "float, float, float, at::native::binary_internal::MulFunctor<float> > const&)::{lambda(int)#1})", "elementwise_kernel"),
    ("void at::native::sbtopk::gatherTopK<float, unsigned int, 2, false>(at::cuda::detail::TensorInfo<float, unsigned int>)", "gatherTopK"),
])
def test_the_kernel_filter_is_the_function_name(name, function):
    assert ncu_run.function_name(name) == function
    pattern = ncu_run.kernel_regex(name)
    assert pattern.startswith("regex:") and re.fullmatch(pattern[len("regex:"):], function)
    assert not re.fullmatch(pattern[len("regex:"):], function + "_2")


def test_not_measured_on_this_box_is_said_and_is_no_failure():
    """The tool as the catalog runs it, on this GPU-less box: exit 0, measured false, and why."""
    if shutil.which("ncu") and shutil.which("nvidia-smi"):
        pytest.skip("this box has ncu and nvidia-smi")
    record, raw = run_tool(LocalBox(), "kernel.ncu", {"kernel": KERNEL, "spec": {"steps": 1}, "launch_skip": 0})
    raw.cleanup()
    assert record["ok"] and record["rc"] == 0 and record["data"]["measured"] is False
    why = record["data"]["why"]
    assert why.startswith("not measured: ")
    assert ("ncu is not on PATH" in why) == (shutil.which("ncu") is None)
    assert ("no NVIDIA GPU" in why) == (shutil.which("nvidia-smi") is None or "nvidia-smi -L" in why)
    assert not raw.files  # nothing was profiled, nothing comes back


def test_ncu_without_a_gpu_is_not_measured_for_the_gpu(tmp_path):
    """An ncu on PATH does not make a GPU: with no nvidia-smi the reason names the GPU alone."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "ncu").write_text("#!/bin/sh\nexit 0\n")
    (fake / "ncu").chmod(stat.S_IRWXU)
    env = {**os.environ, "PATH": str(fake)}
    out = subprocess.run([sys.executable, "-m", "tools.kernel_source.ncu_run", "measure", "--kernel", KERNEL, "--spec", "{}",
                          "--out", str(tmp_path / "out")], capture_output=True, text=True, cwd=ROOT, env=env, timeout=60)
    data = json.loads(out.stdout)
    assert out.returncode == 0 and data["measured"] is False
    assert data["why"] == "not measured: no NVIDIA GPU (nvidia-smi is not on PATH)"


def test_the_raw_page_gives_throughputs_occupancy_and_stall_reasons():
    raw = _raw(CAPTURED / "ncu_raw.csv")
    s = ncu.summarize(CAPTURED / "ncu_raw.csv", kernel=KERNEL)
    assert s["measured"] and s["grid"] == [16, 64, 1]  # batch 16, 64 (padded) heads: the profiled point
    assert s["throughput_pct"]["dram"] == float(raw["gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"][1])
    assert s["throughput_pct"]["l1tex"] == float(raw["l1tex__throughput.avg.pct_of_peak_sustained_active"][1])
    assert s["achieved_occupancy"] == float(raw["sm__warps_active.avg.pct_of_peak_sustained_active"][1])
    assert s["bound"] == "L1/TEX-bound"
    # every per-issue stall ratio of WarpStateStats, ranked, less the issue cycle itself ("selected")
    ratios = {m: float(v) for m, (u, v) in raw.items() if re.fullmatch(r"smsp__average_warps_issue_stalled_\w+_per_issue_active\.ratio", m)}
    assert len(ratios) >= 15 and "smsp__average_warps_issue_stalled_selected_per_issue_active.ratio" in ratios
    ranked = sorted((v, m) for m, v in ratios.items() if "_stalled_selected_" not in m)[::-1]
    assert [x["metric"] for x in s["stalls"]] == [m for v, m in ranked][:5]
    cycles = float(raw["smsp__average_warp_latency_per_inst_issued.ratio"][1]) if "smsp__average_warp_latency_per_inst_issued.ratio" in raw else None
    assert s["warp_state"]["warp_cycles_per_issued_instruction"] == cycles
    assert s["stalls"][0]["share"] == pytest.approx(s["stalls"][0]["value"] / cycles)
    # the duration in the unit the page gives (us here)
    unit, value = raw["gpu__time_duration.sum"]
    assert unit == "us" and s["duration_us"] == pytest.approx(float(value))


def test_the_details_page_agrees_with_the_raw_page_and_with_ncus_own_stall_rule():
    """Two exports of one report: the same verdict and throughputs (details rounds to 2 decimals), and
    the share of the top stall the raw page gives is the one ncu's own rule states on the details page."""
    raw = ncu.summarize(CAPTURED / "ncu_raw.csv", kernel=KERNEL)
    details = ncu.summarize(CAPTURED / "ncu_details.csv", kernel=KERNEL)
    assert details["bound"] == raw["bound"]
    for key, value in raw["throughput_pct"].items():
        assert details["throughput_pct"][key] == pytest.approx(value, abs=0.006)
    assert details["stalls"] is None  # the details page carries no per-reason figures: the raw page is the one to read
    assert details["duration_us"] == pytest.approx(raw["duration_us"], abs=0.006)
    text = (CAPTURED / "ncu_details.csv").read_text()
    stated = re.search(r"This stall type represents about ([\d.]+)% of the total average of ([\d.]+) cycles", text)
    assert stated, "the details page states the top stall's share"
    top = raw["stalls"][0]
    assert 100 * top["share"] == pytest.approx(float(stated.group(1)), abs=0.06)
    assert raw["warp_state"]["warp_cycles_per_issued_instruction"] == pytest.approx(float(stated.group(2)), abs=0.06)


def test_the_captured_tool_output_is_what_the_grid_step_reads():
    """The tool's own JSON from the H200: what it ran and what it kept, in the shape measure_ncu reads."""
    out = json.loads((CAPTURED / "ncu_measure.json").read_text())
    assert out["ok"] and out["measured"] and out["csv"] == {"raw": ncu_run.RAW_CSV, "details": ncu_run.DETAILS_CSV}
    assert out["box_csv"].endswith(ncu_run.RAW_CSV) and out["kernel_regex"] == ncu_run.kernel_regex(KERNEL)
    argv = out["argv"]
    assert argv[argv.index("--clock-control") + 1] == "none" and argv[argv.index("--launch-count") + 1] == "1"
    spec = json.loads(argv[argv.index("--spec") + 1])
    assert (spec["steps"], spec["warmup"], spec["cuda_graph"], spec["batch_sizes"]) == (1, 1, False, [16])
    assert out["engine"]["ok"] and out["engine"]["batches"] == [16]


def test_a_mangled_name_is_matched_mangled():
    """CUTLASS kernels reach the trace mangled (the H200 profile's grouped GEMM): ncu matches them so."""
    name = "_ZN7cutlass13device_kernelIN2at4cuda6detail25enable_3x_kernel_for_sm9xEEEvNT_6ParamsE"
    argv = ncu_run.ncu_command("ncu", "py", name, "{}", ROOT, ROOT, 0)
    assert argv[argv.index("--kernel-name-base") + 1] == "mangled"
    assert re.fullmatch(ncu_run.kernel_regex(name)[len("regex:"):], name)
    assert ncu_run.kernel_name_base(KERNEL) == "function"


class _Session:
    def __init__(self, result=None):
        self.result, self.calls = result, []

    def call(self, tool, args):
        self.calls.append((tool, args))
        assert self.result is not None, "no call expected"
        return self.result

    def artifact_path(self, ref):
        return Path(ref["path"])


# The H200 graph-replay trace of the dsv4-flash step (3 steps): the kernel's 8 launches a step alternate
# 288 / 1225 / 288 / 157 us (window and compressed caches of two layers).
STACK_TRACE = ROOT / "tests" / "data" / "h200-traces-stacks" / "reference-B16-cudagraph.trace.json.gz"


def _target_and_profile():
    from agent.config import load_target
    from schema.finding import Finding, Number

    target = load_target("dsv4-flash")[0]
    setting = {"label": "baseline + cuda-graph", "env": dict(target.engine.env), "options": {"cuda_graph": True, "steps_per_graph": 4}}
    profile = Finding(index=3, step="profile", headline="", verdict="", numbers={"steps": Number(value=3, unit="steps")},
                      artifacts={"trace": str(STACK_TRACE)},
                      data={"setting": setting, "batch": 16, "summary": None, "dominant": None, "complete": True})
    return target, profile


def test_ncu_profiles_the_launch_that_costs_most_not_the_first():
    from agent.steps.grid import measure_ncu
    from tools.trace.launches import launch_durations, longest_position

    durations = launch_durations(STACK_TRACE, KERNEL)
    found = longest_position(durations, 3)
    medians = found.all_median_us
    assert found.per_step == 8 and medians[found.position] == max(medians[:found.position + 1])
    assert medians[found.position] > 4 * medians[0]  # the first launch is a short window call
    assert found.position not in (0,) and len(found.alike) == 2 and 0.5 < found.share < 0.7
    assert longest_position(durations[:-1], 3) is None  # launches that do not split evenly over the steps
    target, profile = _target_and_profile()
    session = _Session({"ok": False, "seq": 7, "error": "exit 1", "data": {"ok": False}})
    record = measure_ncu(session, target, {"device": "cuda"}, profile, KERNEL)
    assert session.calls[0][1]["launch_skip"] == found.position
    assert record["launch"]["position"] == found.position and "the longest in the profile" in record["launch"]["why"]


def test_the_grid_step_asks_for_ncu_only_where_the_box_has_a_gpu():
    from agent.steps.grid import measure_ncu, with_ncu_record

    target, profile = _target_and_profile()
    session = _Session()
    record = measure_ncu(session, target, {"device": "cpu"}, profile, KERNEL)
    assert not session.calls and record["measured"] is False and record["seq"] is None and "no GPU" in record["why"]
    diagnosis = with_ncu_record({"ok": True, "redundancy_factor": 4.0, "inner_product": "CUDA-core multiply-reduce",
                                 "ncu": {"measured": False, "bound": "not measured", "why": "no Nsight Compute export was given"}}, record)
    assert diagnosis["ncu"]["why"] == record["why"].removeprefix("not measured: ") and diagnosis["bound"] == "not measured"
    assert record["why"].removeprefix("not measured: ") in diagnosis["rewrite_estimate"]["basis"]


def test_a_failed_ncu_run_is_a_failure_the_diagnosis_names():
    from agent.steps.grid import measure_ncu, with_ncu_record

    target, profile = _target_and_profile()
    session = _Session({"ok": False, "seq": 7, "error": "exit 1: the profiled engine run failed: OOM", "data": {"ok": False}})
    record = measure_ncu(session, target, {"device": "cuda"}, profile, KERNEL)
    tool, args = session.calls[0]
    assert tool == "kernel.ncu" and args["kernel"] == KERNEL and args["env"] == profile.data["setting"]["env"]
    spec = args["spec"]
    # one eager step at the profiled batch; the graph-only option is dropped (the engine refuses it without a graph)
    assert (spec["batch_sizes"], spec["steps"], spec["warmup"], spec["cuda_graph"], spec["profile"]) == ([16], 1, 1, False, None)
    assert "steps_per_graph" not in spec
    assert record["measured"] is False and record["error"].startswith("Nsight Compute failed: exit 1")
    diagnosis = with_ncu_record({"ok": True, "redundancy_factor": 4.0, "inner_product": "tensor-core dot", "ncu": {"measured": False}}, record)
    assert diagnosis["ncu"]["why"] == record["error"]


def test_a_measured_ncu_run_gives_the_box_path_and_the_run_artifacts():
    from agent.steps.grid import measure_ncu, with_ncu_record

    target, profile = _target_and_profile()
    captured = json.loads((CAPTURED / "ncu_measure.json").read_text())
    refs = [{"name": name, "path": f"artifacts/ab/{name}"} for name in captured["csv"].values()]
    record = measure_ncu(_Session({"ok": True, "seq": 3, "error": None, "data": captured, "artifacts": refs}),
                         target, {"device": "cuda"}, profile, KERNEL)
    assert record["measured"] and record["box_csv"] == captured["box_csv"]
    assert record["artifacts"] == {"raw": "artifacts/ab/ncu_raw.csv", "details": "artifacts/ab/ncu_details.csv"}
    summary = ncu.summarize(CAPTURED / "ncu_raw.csv", kernel=KERNEL)
    diagnosis = with_ncu_record({"ok": True, "redundancy_factor": 57.0, "inner_product": "CUDA-core multiply-reduce", "ncu": summary}, record)
    assert diagnosis["ncu"]["source"] == "artifacts/ab/ncu_raw.csv" and diagnosis["bound"] == summary["bound"] == "L1/TEX-bound"
    assert "L1/TEX" in diagnosis["rewrite_estimate"]["basis"]
