"""Kernel names by meaning (issue 30): demangled and named on the box into the bench result
(tools/trace/kernel_names.py), shown by meaning in the findings and the report, the mangled name kept.

The names are real ones, from the shipped H200 example's traces (tests/data/kernel-names-h200/names.json, and
the example's own trace files under tests/data/h200-audit-20261202b/artifacts)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT
from tools.engines.reference import bench
from tools.trace import kernel_names as kn

DATA = ROOT / "tests" / "data"
NAMES = json.loads((DATA / "kernel-names-h200" / "names.json").read_text())["names"]
AUDIT = DATA / "h200-audit-20261202b"
# The split-K step's run (journal line 47): the graph replay and its eager twin, as the bench wrote them.
SPLITK_TRACES = {"reference_trace_b16.json.gz": AUDIT / "artifacts/3f19c6519c4f5fe4/reference_trace_b16.json.gz",
                 "reference_trace_b16_eager.json.gz": AUDIT / "artifacts/b99e814c84b7ae31/reference_trace_b16_eager.json.gz"}
CUTLASS = NAMES[0]["name"]
HAS_CXXFILT = shutil.which("c++filt") is not None


def _name(prefix: str) -> str:
    return next(n["name"] for n in NAMES if n["name"].startswith(prefix) or prefix in n["name"])


def test_the_map_lists_mangled_and_long_templated_names_only():
    assert CUTLASS.startswith("_ZN7cutlass") and kn.listed(CUTLASS)
    assert kn.listed(_name("void at::native::reduce_kernel<512, 1"))
    # short names read whole in a table: the rewrite's Triton kernels, cuBLAS's nvjet kernels
    assert not kn.listed("_split_dhalf_kernel") and not kn.listed(_name("nvjet_sm90"))


# name (a prefix, or a part unique among the fixture's names) -> what its rules say, with the operations that
# launched it in the example's eager trace
MEANINGS = [
    ("prepare_grouped_gemm_data", ["grouped_experts"], "grouped GEMM argument setup (MoE, bf16)"),
    ("cublasLt::splitKreduce_kernel", ["indexer_topk", "select_experts", "pre_attention"], "cuBLASLt split-K reduction"),
    ("MeanOps", ["rms_norm"], "PyTorch reduction mean (fp32)"),
    ("void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<float",
     ["rms_norm"], "PyTorch elementwise mul (fp32)"),
    ("CUDAFunctor_add<c10::BFloat16>", ["moe_grouped", "post_attention"], "PyTorch elementwise add (bf16)"),
    ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda", ["rms_norm"],
     "PyTorch elementwise direct copy"),
    ("gatherTopK", ["indexer_topk"], "PyTorch top-k"),
    ("arange_cuda_out", ["grouped_experts"], None),  # no rule for it: no meaning, not a guess
]


@pytest.mark.parametrize("part,operations,expected", MEANINGS, ids=[m[2] or "none" for m in MEANINGS])
def test_meanings_of_the_h200_examples_names(part, operations, expected):
    assert kn.meaning(_name(part), operations) == expected


def test_the_cutlass_grouped_gemm_by_its_demangled_name():
    demangled = NAMES[0]["demangled"]  # what c++filt -r (binutils 2.40) gave for it
    assert kn.meaning(demangled, ["grouped_experts"]) == "CUTLASS grouped GEMM (MoE, bf16)"
    # MoE only where every operation that launched it is an experts one; the rules read demangled names only
    assert kn.meaning(demangled, ["grouped_experts", "attention_output"]) == "CUTLASS grouped GEMM (bf16)"
    assert kn.meaning(demangled, []) == "CUTLASS grouped GEMM (bf16)"
    assert kn.meaning(CUTLASS, ["grouped_experts"]) is None
    # not grouped: the same kernel with a plain problem shape is a CUTLASS GEMM
    plain = demangled.replace("cutlass::gemm::GroupProblemShape<cute::tuple<int, int, int> >", "cute::tuple<int, int, int, int>")
    assert kn.meaning(plain, []) == "CUTLASS GEMM (bf16)"


@pytest.mark.skipif(not HAS_CXXFILT, reason="no c++filt on this machine (make setup-ssh-tests installs binutils)")
def test_cxxfilt_demangles_the_cutlass_kernel():
    demangled, why = kn.demangle([CUTLASS, "_Znot_a_name"])
    assert why is None
    assert demangled[CUTLASS].startswith("void cutlass::device_kernel<at::cuda::detail::enable_3x_kernel_for_sm9x<"
                                         "cutlass::gemm::kernel::GemmUniversal<cutlass::gemm::GroupProblemShape<")
    assert demangled["_Znot_a_name"] is None  # handed back unchanged: not demangled
    assert kn.demangler().startswith("GNU c++filt")


def test_without_cxxfilt_the_map_says_so_instead_of_guessing(monkeypatch):
    monkeypatch.setattr(kn.shutil, "which", lambda name: None)
    names = kn.kernel_names([SPLITK_TRACES["reference_trace_b16.json.gz"]], [SPLITK_TRACES["reference_trace_b16_eager.json.gz"]])
    entry = names[CUTLASS]
    assert entry["demangled"] is None and entry["meaning"] is None
    assert entry["why"] == "c++filt (binutils) is not on this box's PATH" and "demangled_by" not in entry
    # the names the profiler already demangled keep their meanings
    assert names[_name("MeanOps")]["meaning"] == "PyTorch reduction mean (fp32)"


def _bench_out(tmp_path: Path) -> Path:
    for name, source in SPLITK_TRACES.items():
        shutil.copyfile(source, tmp_path / name)
    return tmp_path


def test_the_bench_result_carries_the_map_for_the_traces_it_wrote(tmp_path):
    out = _bench_out(tmp_path)
    trace = {"file": "reference_trace_b16.json.gz", "eager_file": "reference_trace_b16_eager.json.gz", "batch": 16}
    names = bench.trace_kernel_names(trace, out)
    json.dumps(names)  # it goes into the tool's JSON result
    assert names and all(kn.listed(n) for n in names)
    assert "_split_dhalf_kernel" not in names and _name("MeanOps") in names
    entry = names[CUTLASS]
    # the operations come from the eager twin: the graph replay names no launching frame
    assert entry["operations"] == ["grouped_experts"]
    if HAS_CXXFILT:
        assert entry["meaning"] == "CUTLASS grouped GEMM (MoE, bf16)"
        assert entry["demangled"].startswith("void cutlass::device_kernel<") and entry["demangled_by"].startswith("GNU c++filt")
    assert bench.trace_kernel_names(None, out) is None
    (out / "cut.json.gz").write_bytes((out / "reference_trace_b16.json.gz").read_bytes()[:5000])
    assert bench.trace_kernel_names({"file": "cut.json.gz", "eager_file": None}, out) is None  # said on stderr


def _with_the_map(source: Path, dest: Path) -> Path:
    """A copy of the recorded run whose engine.bench results carry kernel_names as this code computes them on
    the run's own trace artifacts (what a box with this code would have returned)."""
    shutil.copytree(source, dest)
    lines = (dest / "log.jsonl").read_text().splitlines()
    for i, line in enumerate(lines):
        event = json.loads(line)
        if event.get("kind") == "tool_result" and event.get("tool") == "engine.bench" and (event["data"] or {}).get("trace"):
            paths = {a["name"]: a["path"] for a in event["artifacts"]}
            trace = event["data"]["trace"]
            event["data"]["kernel_names"] = bench.trace_kernel_names(
                {"file": paths[trace["file"]], "eager_file": paths.get(trace.get("eager_file"))}, dest)
            lines[i] = json.dumps(event)
    (dest / "log.jsonl").write_text("\n".join(lines) + "\n")
    subprocess.run(["git", "init", "-q", str(dest)], check=True)
    return dest


@pytest.mark.skipif(not HAS_CXXFILT, reason="no c++filt on this machine (make setup-ssh-tests installs binutils)")
def test_a_journal_with_the_map_shows_meanings_and_keeps_the_mangled_name(tmp_path):
    from agent.regenerate import regenerate

    outcome = regenerate(_with_the_map(AUDIT, tmp_path / "recorded"), tmp_path / "run")
    assert outcome.exit_code == 0, outcome.message
    run = tmp_path / "run"
    report = (run / "PROFILE_FINDINGS.md").read_text()
    cut = "_ZN7cutlass13device_kernelIN2at4cuda6..."
    next_line = next(line for line in report.splitlines() if line.startswith("- **Next bottleneck:**"))
    assert f"kernel CUTLASS grouped GEMM (MoE, bf16) [`{cut}`]" in next_line
    assert f"| after the rewrite | CUTLASS grouped GEMM (MoE, bf16) [`{cut}`] dominates;" in report
    found = {json.loads(p.read_text())["step"]: json.loads(p.read_text()) for p in (run / "findings").glob("*.json")}
    r2 = found["round2"]
    assert r2["data"]["kernel"] == CUTLASS  # the whole mangled name kept
    assert r2["data"]["kernel_names"][CUTLASS]["meaning"] == "CUTLASS grouped GEMM (MoE, bf16)"
    assert r2["headline"].startswith(f"with split-K, CUTLASS grouped GEMM (MoE, bf16) [{cut}] dominates")
    top = next(t for t in r2["tables"] if t["title"] == "Top kernels with split-K")
    assert top["rows"][0][0] == f"CUTLASS grouped GEMM (MoE, bf16) [{cut}]"
    profile = next(t for t in found["profile"]["tables"] if t["title"] == "Top kernels")
    assert f"CUTLASS grouped GEMM (MoE, bf16) [{cut}]" in [row[0] for row in profile["rows"]]
    assert CUTLASS in found["profile"]["data"]["kernel_names"]


def test_a_journal_without_the_map_shows_the_names_as_before(h200_audit_run):
    """The audit copy's journal predates the map: its names show cut as they always were, and no finding gains
    a kernel_names key (the shipped examples' replay, tests/test_examples.py, holds them byte for byte)."""
    report = (h200_audit_run / "PROFILE_FINDINGS.md").read_text()
    assert ("| after the rewrite | `_ZN7cutlass13device_kernelIN2at4cuda6detail25enable_3x_kernel_for_sm9xINS_4gemm6kernel"
            "13GemmUnive...` dominates;") in report
    assert "CUTLASS grouped GEMM" not in report
    for path in (h200_audit_run / "findings").glob("*.json"):
        assert "kernel_names" not in json.loads(path.read_text())["data"], path.name
