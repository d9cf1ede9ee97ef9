"""The committed held-out check of the split-K dispatch (benchmarks/results/heldout-20261201/, issue 16): its
shapes are ones no committed sweep or grid cell tuned on, its medians follow from its raw samples, the pick
it timed is the dispatch's pick today (else the result describes another dispatch), and docs/results.md quotes
its verdict as the samples give it."""

from __future__ import annotations

import json
import re
import statistics

import pytest

from conftest import ROOT

from tools.kernels.splitk import tiles

RESULTS = ROOT / "benchmarks" / "results"
HELDOUT = RESULTS / "heldout-20261201" / "heldout_dispatch.json"


@pytest.fixture(scope="module")
def heldout() -> dict:
    return json.loads(HELDOUT.read_text())


def _tuned_shapes() -> set[tuple[int, int]]:
    shapes: set[tuple[int, int]] = set()

    def walk(x):
        if isinstance(x, dict):
            if isinstance(x.get("batch"), int) and isinstance(x.get("topk"), int):
                shapes.add((x["batch"], x["topk"]))
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    for path in [*RESULTS.glob("sparse_mla_decode_run*_sweep*.json"), *RESULTS.glob("grid-*/sparse_mla_decode_grid.json")]:
        walk(json.loads(path.read_text()))
    return shapes


def verdicts(result: dict) -> list[dict]:
    """Per shape: the pick's and the best candidate's median (of pass medians), recomputed from the samples."""
    out = []
    for shape in result["shapes"]:
        medians = {(c["config"], c["splits"]): statistics.median(statistics.median(p) for p in c["passes_us"])
                   for c in shape["candidates"] if c["passes_us"]}
        pick = (shape["pick"]["config"], shape["pick"]["splits"])
        best = min(medians, key=medians.get)
        out.append({"batch": shape["batch"], "topk": shape["topk"], "pick": pick, "best": best,
                    "ratio": medians[pick] / medians[best], "within": medians[pick] <= (1 + result["tolerance"]) * medians[best]})
    return out


def test_every_held_out_shape_was_measured_and_none_was_tuned_on(heldout):
    measured = {(s["batch"], s["topk"]) for s in heldout["shapes"]}
    assert measured == {(s["batch"], s["topk"]) for s in heldout["held_out"]} and not heldout["skipped"]
    tuned = _tuned_shapes()
    assert (64, 2048) in tuned and (24, 1024) in tuned  # the walk finds the sweeps' and the grid's shapes
    assert not measured & tuned
    assert heldout["env"]["device"] == "NVIDIA H200" and heldout["env"]["git_revision"]


def test_medians_follow_from_the_samples_and_every_candidate_ran(heldout):
    for shape in heldout["shapes"]:
        for c in shape["candidates"]:
            assert c["error"] is None and len(c["passes_us"]) == heldout["passes"], (shape["batch"], c)
            assert all(len(p) == heldout["reps"] for p in c["passes_us"])
            assert c["median_us"] == pytest.approx(statistics.median(statistics.median(p) for p in c["passes_us"]))


def test_the_timed_pick_is_todays_dispatch(heldout):
    sms, arch = heldout["env"]["sm_count"], heldout["env"]["arch"]
    for shape in heldout["shapes"]:
        b, k, h = shape["batch"], shape["topk"], shape["heads"]
        today = (tiles.config_name(tiles.choose_config(b, k, h, arch)), tiles.choose_num_splits(b, k, h, sms, arch))
        assert today == (shape["pick"]["config"], shape["pick"]["splits"]), (b, k)


def test_the_results_page_quotes_the_verdict_as_measured(heldout):
    found = verdicts(heldout)
    text = " ".join((ROOT / "docs" / "results.md").read_text().split())
    match = re.search(r"within 5% of the best measured there at (\d+) of (\d+) held-out shapes", text)
    assert match, "the held-out sentence of docs/results.md"
    assert (int(match.group(1)), int(match.group(2))) == (sum(v["within"] for v in found), len(found))
    for v in found:
        if not v["within"]:
            assert f"{v['batch']}x{v['topk']}: {v['ratio']:.3f}x" in text, v
