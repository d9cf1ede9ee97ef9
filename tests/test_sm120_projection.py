"""The sm_120 plan's grid projected onto the declared box (scripts/sm120_projection.py,
benchmarks/results/sm120-20261206/projection_sm120.json): the committed projection is what the script makes from
the committed grids, every cell is labelled projected, every rate carries a citation, the arithmetic holds when
redone here from the grid alone, and the peers' figures (or the searches that found none) are recorded."""

from __future__ import annotations

import json
import math
import shutil
import statistics
import subprocess
import sys

import pytest

from conftest import ROOT

RESULTS = ROOT / "benchmarks" / "results" / "sm120-20261206"
SCRIPT = ROOT / "scripts" / "sm120_projection.py"
COMMITTED = RESULTS / "projection_sm120.json"

sys.path.insert(0, str(ROOT / "scripts"))
import sm120_projection  # noqa: E402

# Student t 0.975 quantiles from a table, not agent.stats, for the sample counts the grid has (n - 1).
T975 = {2: 4.302653, 9: 2.262157, 29: 2.045230}


def _committed() -> dict:
    return json.loads(COMMITTED.read_text())


def _copy_grids(dest):
    for part in ("hopper", "sm120"):
        (dest / part).mkdir(parents=True)
        shutil.copy(RESULTS / part / "sparse_mla_decode_grid.json", dest / part)


def test_the_committed_projection_is_what_the_script_makes(tmp_path):
    work = tmp_path / "r"
    _copy_grids(work)
    done = subprocess.run([sys.executable, str(SCRIPT), str(work)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "PROJECTED" in done.stdout and "not measured" in done.stdout
    made = json.loads((work / "projection_sm120.json").read_text())
    committed = _committed()
    made.pop("source"), committed.pop("source")
    assert made == committed


def test_every_cell_and_every_figure_is_labelled_projected():
    proj = _committed()
    assert proj["label"] == proj["summary"]["label"] == "projected"
    assert len(proj["cells"]) == proj["summary"]["cells"] == 240
    assert all(c["label"] == "projected" for c in proj["cells"])
    assert all(n["label"] == "projected" for p in proj["peers"] for n in p["nearest_projected_warm_us"])
    assert any("not measured" in c.lower() for c in proj["caveats"])


def test_every_rate_has_a_citation():
    proj = _committed()
    rates = [*proj["rates"].values(), proj["device"]["sm_count"],
             proj["measuring_published"]["memory_GBps"], proj["measuring_published"]["bf16_mma_fp32acc_TFLOPs"]]
    assert len(rates) == 6
    for rate in rates:
        assert rate["value"] > 0
        assert rate["citations"], rate
        for cite in rate["citations"]:
            assert cite["url"] and cite["says"] and cite["kind"]
            assert cite["url"].startswith("https://") or (ROOT / cite["url"]).is_file(), cite["url"]
    # the box's SM count is the one the project declares
    assert proj["device"]["sm_count"]["value"] == 188
    assert "sm_count: 188" in (ROOT / "agent" / "targets" / "dsv4-flash.yaml").read_text()


def test_the_arithmetic_redone_from_the_grid_alone():
    """Independent of the script: the floor from the grid's own ceilings, the box's from the cited rates, the
    projected time the measured median times their ratio, and each efficiency interval around its samples."""
    proj = _committed()
    grid = json.loads((RESULTS / "sm120" / "sparse_mla_decode_grid.json").read_text())
    ceil = grid["ceilings"]
    bw, tf = proj["rates"]["memory_GBps"]["value"], proj["rates"]["bf16_mma_fp32acc_TFLOPs"]["value"]
    cells = {(c["batch"], c["topk"], c["form"], c["pattern"]): c for c in grid["grid"]["cells"]}
    for row in proj["cells"]:
        cell = cells[(row["batch"], row["topk"], row["form"], row["pattern"])]
        meas = max(cell["bytes"] / (ceil["copy_GBps"] * 1e3), cell["flops"] / (ceil["bf16_matmul_TFLOPs"] * 1e6))
        box = max(cell["bytes"] / (bw * 1e3), cell["flops"] / (tf * 1e6))
        assert meas == pytest.approx(cell["floor_us"], rel=1e-9)
        assert row["floor_sm120_us"] == pytest.approx(box, rel=1e-9)
        for temp in ("warm", "cold"):
            t = row[temp]
            median = cell["rewrite"][f"{temp}_us"]
            assert t["efficiency"] == pytest.approx(meas / median, rel=1e-9)
            assert t["projected_us"] == pytest.approx(box / (meas / median), rel=1e-9)
            lo, hi = t["projected_interval_us"]
            logs = [math.log(v * box / meas) for v in cell["rewrite"][f"{temp}_samples_us"]]
            half = T975[len(logs) - 1] * statistics.stdev(logs) / math.sqrt(len(logs))
            assert math.log(lo) == pytest.approx(statistics.fmean(logs) - half, abs=1e-6)
            assert math.log(hi) == pytest.approx(statistics.fmean(logs) + half, abs=1e-6)
            e_lo, e_hi = t["efficiency_interval"]
            assert e_lo == pytest.approx(box / hi, rel=1e-9) and e_hi == pytest.approx(box / lo, rel=1e-9)
    s = proj["summary"]
    assert s["projected_warm_us_range"][0] <= s["projected_warm_us_median"] <= s["projected_warm_us_range"][1]
    assert s["worst"]["projected_warm_us"] == max(r["warm"]["projected_us"] for r in proj["cells"])


def test_the_projection_moves_with_the_measurement(tmp_path):
    """Able to fail: doubling one cell's measured times doubles its projection and leaves the others."""
    work = tmp_path / "r"
    _copy_grids(work)
    path = work / "sm120" / "sparse_mla_decode_grid.json"
    grid = json.loads(path.read_text())
    first = grid["grid"]["cells"][0]["rewrite"]
    for temp in ("warm", "cold"):
        first[f"{temp}_us"] *= 2
        first[f"{temp}_samples_us"] = [2 * v for v in first[f"{temp}_samples_us"]]
    path.write_text(json.dumps(grid))
    made = sm120_projection.project(work)["cells"]
    base = _committed()["cells"]
    assert made[0]["warm"]["projected_us"] == pytest.approx(2 * base[0]["warm"]["projected_us"])
    assert made[0]["warm"]["efficiency"] == pytest.approx(base[0]["warm"]["efficiency"] / 2)
    assert [r["warm"]["projected_us"] for r in made[1:]] == [r["warm"]["projected_us"] for r in base[1:]]


def test_peers_are_sourced_or_the_searches_say_none_was_found():
    proj = _committed()
    assert proj["peer_searches"], "the searches made are recorded"
    assert proj["peers"] or proj["peers_not_found"]
    for peer in proj["peers"]:
        assert peer["source"].startswith("https://github.com/")
        assert peer["figure_us"] > 0 and peer["shape"] and peer["device"] and peer["differs"]
        assert "sm_120" in peer["device"]
    for miss in proj["peers_not_found"]:
        assert miss["source"].startswith("https://") and miss["found"]


def test_floor_and_interval_helpers():
    assert sm120_projection.floor_us(1792e3, 0, 1792, 500) == (1.0, "bytes")
    assert sm120_projection.floor_us(1, 1e9, 1792, 500) == (2.0, "flops")
    assert sm120_projection.log_interval([5.0]) == (None, None)
    lo, hi = sm120_projection.log_interval([9.0, 10.0, 11.0])
    geo = (9.0 * 10.0 * 11.0) ** (1 / 3)
    assert lo < geo < hi and math.log(geo / lo) == pytest.approx(math.log(hi / geo))
    assert lo < 9.0 and hi > 11.0  # three samples: t(2) = 4.30 spreads the interval past them
    assert sm120_projection.log_interval([10.0, 10.0]) == pytest.approx((10.0, 10.0))


def test_the_results_page_quotes_the_committed_projection():
    s = _committed()["summary"]
    page = " ".join((ROOT / "docs" / "results.md").read_text().split())
    assert "Projected onto the RTX PRO 6000 (not measured)" in page
    assert f"the projected time is {s['projected_warm_us_median']:.1f} us at the median cell" in page
    lo, hi = s["projected_warm_us_range"]
    assert f"{lo:.1f}-{hi:.1f} us; cold {s['projected_cold_us_median']:.1f} us" in page
    assert f"efficiency carried over is {s['efficiency_warm_median']:.3f} of the floor" in page
    w = s["worst"]
    assert f"{w['projected_warm_us']:.0f} us [{w['interval_us'][0]:.0f}, {w['interval_us'][1]:.0f}]" in page
    assert f"a floor of {w['floor_sm120_us']:.1f} us" in page
    assert f"{s['vs_upstream_warm_median']:.4f}x its time" in page
    assert s["bound_sm120"] == {"bytes": 240, "flops": 0} and "All 240 cells are bytes-bound on both GPUs" in page
    for peer in _committed()["peers"]:
        assert f"{peer['figure_us']} us" in page and peer["source"].split("github.com/")[1].replace("/pull/", "#") in page
