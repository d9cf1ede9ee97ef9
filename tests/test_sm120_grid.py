"""The sm_120 plan timed on an H100 beside the Hopper plan (benchmarks/results/sm120-20261206/, made by
scripts/h200/grid_sm120_full.sh): both grids whole, the sm_120 process's SASS holding mma.sync and no wgmma,
its matrix passing, and the per-cell comparison (scripts/sm120_grid_compare.py) the one committed and quoted."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT

RESULTS = ROOT / "benchmarks" / "results" / "sm120-20261206"
SCRIPT = ROOT / "scripts" / "sm120_grid_compare.py"

sys.path.insert(0, str(ROOT / "scripts"))
import sm120_grid_compare  # noqa: E402


def _grid(part: str) -> dict:
    return json.loads((RESULTS / part / "sparse_mla_decode_grid.json").read_text())


def test_both_grids_are_whole_and_the_sm120_process_ran_mma_sync_only():
    hopper, sm120 = _grid("hopper"), _grid("sm120")
    assert len(hopper["grid"]["cells"]) == len(sm120["grid"]["cells"]) == 240
    assert not hopper["grid"].get("skipped") and not sm120["grid"].get("skipped")
    assert all(isinstance(c.get(p), dict) for c in hopper["grid"]["cells"] for p in ("rewrite", "flashmla", "upstream"))
    assert sm120["plan_arch"] == 120 and sm120["sass"]["ok"] is True
    kernels = sm120["sass"]["kernels"]
    assert kernels["_split_kernel_sm120"]["HMMA"] > 0 and not any(k["HGMMA"] for k in kernels.values())
    assert {c["config"] for c in sm120["grid"]["cells"]} <= {"sm120_small", "sm120_medium", "sm120_large"}
    matrix = json.loads((RESULTS / "sm120" / "sparse_mla_decode.json").read_text())
    assert matrix["matrix_ok"] and matrix["sass"]["ok"] is True


def test_the_committed_comparison_is_what_the_script_makes(tmp_path):
    work = tmp_path / "r"
    for part in ("hopper", "sm120"):
        (work / part).mkdir(parents=True)
        shutil.copy(RESULTS / part / "sparse_mla_decode_grid.json", work / part)
    done = subprocess.run([sys.executable, str(SCRIPT), str(work), "--json"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    made = json.loads((work / "sm120_vs_hopper.json").read_text())
    committed = json.loads((RESULTS / "sm120_vs_hopper.json").read_text())
    made.pop("source"), committed.pop("source")
    assert made == committed
    assert made["met"] + made["missed"] + made["undecided"] == made["cells"] == 240
    assert len(made["not_met"]) == made["missed"] + made["undecided"]


def test_a_cell_meets_the_target_only_when_every_interval_is_within_it():
    def r(low, high):
        return {"low": low, "high": high}

    assert sm120_grid_compare.verdict([r(1.0, 1.2), r(1.1, 1.24)], 1.25) == "met"
    assert sm120_grid_compare.verdict([r(1.0, 1.2), r(1.2, 1.3)], 1.25) == "undecided"
    assert sm120_grid_compare.verdict([r(1.0, 1.2), r(1.26, 1.3)], 1.25) == "missed"
    assert sm120_grid_compare.verdict([r(None, None), r(1.0, 1.1)], 1.25) == "undecided"


def test_a_missing_grid_is_one_error_line(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and done.stderr.startswith("error:")


def test_the_results_page_quotes_the_comparison():
    committed = json.loads((RESULTS / "sm120_vs_hopper.json").read_text())
    page = (ROOT / "docs" / "results.md").read_text()
    assert f"within 1.25x at both temperatures at {committed['met']} of {committed['cells']} cells" in page
    assert f"missed at\nthe other {committed['missed']}" in page or f"missed at the other {committed['missed']}" in page
    worst = committed["worst"]["vs_hopper_warm"]
    assert f"{worst['ratio']:.2f}x [{worst['low']:.2f}, {worst['high']:.2f}]" in page
    assert f"{committed['warm_ratio_median']:.1f}x the Hopper plan's time" in page


@pytest.mark.parametrize("part", ["hopper", "sm120"])
def test_the_medians_are_the_raw_samples_medians(part):
    import statistics

    for cell in _grid(part)["grid"]["cells"]:
        for temp in ("warm", "cold"):
            t = cell["rewrite"]
            assert t[f"{temp}_us"] == pytest.approx(statistics.median(t[f"{temp}_samples_us"]))
