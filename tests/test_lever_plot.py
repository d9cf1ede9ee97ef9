"""The report's lever plot (issue 31, item 5) drawn from the shipped runs' levers findings: each
lever's ratio to the baseline with its interval on a log axis (baseline = 1), the smallest detectable
effect as a band, a lever that was not run or is not comparable named in text with no bar, and every
number the one the report's table gives."""

import json
from pathlib import Path

import pytest
from matplotlib.patches import Polygon, Rectangle

import reports.plots
from agent.steps.report import make_plots
from conftest import ROOT

RUNS = [ROOT / "runs" / "examples" / "dsv4-flash-cpu-20261202", ROOT / "runs" / "examples" / "dsv4-flash-h200-20261202b",
        ROOT / "tests" / "data" / "sglang-pd-standin-run"]


class _Store:
    def store_artifact_bytes(self, data: bytes, name: str) -> dict:
        return {"path": name}


def _drawn(levers: dict, monkeypatch):
    """The lever plot's axes as the report step draws them from ``levers`` (the figure is taken just
    before it becomes PNG bytes)."""
    figures = []
    original = reports.plots._png

    def keep(plt, fig):
        figures.append(fig)
        return original(plt, fig)

    monkeypatch.setattr(reports.plots, "_png", keep)
    made = make_plots({"findings": [levers]}, _Store())
    assert list(made) == ["lever_sweep"] and len(figures) == 1
    return figures[0].axes[0]


@pytest.mark.parametrize("run", RUNS, ids=lambda p: p.name)
def test_the_lever_plot_draws_the_tables_ratios_on_a_log_axis(run: Path, monkeypatch):
    levers = json.loads(next((run / "findings").glob("*-levers.json")).read_text())
    ax = _drawn(levers, monkeypatch)
    assert ax.get_xscale() == "log"
    rows = {label.get_text(): y for label, y in zip(ax.get_yticklabels(), ax.get_yticks())}
    table = {row[0]: row[3] for row in levers["tables"][0]["rows"]}
    handles, labels = ax.get_legend_handles_labels()
    band = [h for h, label in zip(handles, labels) if label.startswith("smallest detectable effect")]
    assert len(band) == 1
    bars = [p for p in ax.patches if isinstance(p, Rectangle) and p not in band]
    texts = {round(t.get_position()[1], 6): t.get_text() for t in ax.texts}
    caps = [line.get_xdata() for line in ax.lines if len(line.get_xdata()) == 1]
    for lever in levers["data"]["levers"]:
        y = rows[lever["name"]]
        on_row = [b for b in bars if b.get_y() < y < b.get_y() + b.get_height()]
        if lever["status"] in ("not tried", "failed", "not comparable"):
            assert not on_row, f"{lever['name']} ({lever['status']}) is drawn as a bar"
            assert texts[round(y, 6)].startswith("not run" if lever["status"] != "not comparable" else "not comparable")
            continue
        (bar,) = on_row
        # the bar runs from the baseline (1) to the finding's own ratio, never a value recomputed from tok/s
        assert sorted([bar.get_x(), bar.get_x() + bar.get_width()]) == pytest.approx(sorted([1.0, lever["ratio"]]))
        # the table's cell may add which lever the row was measured with; the plot's text starts with its ratio
        assert texts[round(y, 6)].startswith(table[lever["name"]].split(" (with ")[0])
        low, high = lever["interval"]
        assert any(c[0] == pytest.approx(low) for c in caps) and any(c[0] == pytest.approx(high) for c in caps)
    detectable = levers["numbers"]["smallest_detectable_effect"]["value"]
    # axvspan is a Polygon in older matplotlib, a Rectangle from 3.9
    xs = [x for x, _ in band[0].get_xy()] if isinstance(band[0], Polygon) else [band[0].get_x(), band[0].get_x() + band[0].get_width()]
    assert (min(xs), max(xs)) == pytest.approx((1 / (1 + detectable), 1 + detectable))
    assert "baseline = 1" in rows
