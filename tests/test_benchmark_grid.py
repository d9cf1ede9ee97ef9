"""The committed H200 grid of the split-K kernel (benchmarks/results/grid-20261202b/): every cell of the
grid with its raw samples, medians and speedups that follow from them, the machine, versions and
revision named, the launch form the rule did not pick timed at every two-cache cell, checked before it was
timed; the matrix (clustered variant included) passing; the grids before (grid-20261202's probes of the
dispatches it replaced, grid-20261201's per-cache probe) complete; the docs (docs/results.md,
docs/sparse_mla_decode.md) quoting the tables and counts as measured. And the index patterns the grid draws: deterministic, inside each row's context,
and clustered only where they should be."""

from __future__ import annotations

import importlib.util
import itertools
import json
import re
import statistics
import sys

import pytest
import torch

from conftest import ROOT

from tools.kernels import topk_patterns

RESULTS = ROOT / "benchmarks" / "results" / "grid-20261202b"
BEFORE = ROOT / "benchmarks" / "results" / "grid-20261202"  # two launches: the grid before the fused launch
PREVIOUS = ROOT / "benchmarks" / "results" / "grid-20261201"  # the grid before each cache got its own config
PROBES = ("rewrite_two_launches", "rewrite_fused")  # the launch form the rule did not pick
BEFORE_PROBES = ("rewrite_one_stream", "rewrite_window_cfg")
IMPLS = ("rewrite", "flashmla", "upstream")


def _grid_module():
    spec = importlib.util.spec_from_file_location("sparse_mla_grid", ROOT / "benchmarks" / "sparse_mla_grid.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("sparse_mla_grid", module)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def grid_run() -> dict:
    return json.loads((RESULTS / "sparse_mla_decode_grid.json").read_text())


def _check_timing(timing: dict) -> None:
    assert timing["warm_samples_us"] and timing["cold_samples_us"]
    assert all(s > 0 for s in timing["warm_samples_us"] + timing["cold_samples_us"])
    assert timing["warm_us"] == pytest.approx(statistics.median(timing["warm_samples_us"]))
    assert timing["cold_us"] == pytest.approx(statistics.median(timing["cold_samples_us"]))


def test_grid_names_its_machine_versions_and_revision(grid_run):
    env = grid_run["env"]
    assert "H200" in env["device_name"] and env["sm_count"] == 132
    assert "driver_version" in env["nvidia_smi"] and "clocks" in env["nvidia_smi"] and "MHz" in env["nvidia_smi_after"]
    assert env["torch"] and env["triton"] and env["sglang_version"] and env["flash_mla_version"]
    assert re.fullmatch(r"[0-9a-f]{40}( with uncommitted changes)?", env["git_revision"])
    assert len(env["kernel_source_sha256"]) == 64
    assert grid_run["flashmla_error"] is None
    assert grid_run["ceilings"]["copy_GBps"] > 0 and grid_run["ceilings"]["bf16_matmul_TFLOPs"] > 0


def test_grid_holds_every_cell_with_its_samples_and_derived_numbers(grid_run):
    grid, ceil = grid_run["grid"], grid_run["ceilings"]
    expected = set(itertools.product(grid["batches"], grid["topks"], grid["patterns"], grid["forms"]))
    assert expected == set(itertools.product((1, 2, 3, 4, 8, 16, 24, 32, 48, 64, 96, 128), (512, 768, 1024, 1536, 2048),
                                             ("uniform", "clustered"), ("one_cache", "two_cache")))  # fmt: skip
    cells = {(c["batch"], c["topk"], c["pattern"], c["form"]): c for c in grid["cells"]}
    assert set(cells) == expected and len(grid["cells"]) == len(expected) and grid["skipped"] == []
    for cell in cells.values():
        two = cell["form"] == "two_cache"
        # the rule, recomputed: one launch where the joined row's work is LARGE_WS's (Hopper: above 4096)
        fused = two and cell["batch"] * (128 + cell["topk"]) > 4096
        probes = (PROBES[0],) if fused else (PROBES[1],) if two else ()
        assert cell.get("fused", False) is fused and [p for p in PROBES if p in cell] == list(probes)
        for name in IMPLS + probes:
            _check_timing(cell[name])
            assert cell[name]["TFLOPs"] == pytest.approx(cell["flops"] / cell[name]["warm_us"] / 1e6)
        if two:
            assert set(cell["probe_checks"]) == set(probes) and all(c["ok"] for c in cell["probe_checks"].values())
            # two launches side by side exactly where the window's config is a small-work one and not fused
            assert cell["streams"] == (2 if not fused and cell["config"] in ("small", "medium") else 1)
            if fused:
                assert (cell["config"], cell["extra_config"], cell["extra_splits"]) == ("large_ws", "large_ws", 0)
        floor = max(cell["bytes"] / (ceil["copy_GBps"] * 1e3), cell["flops"] / (ceil["bf16_matmul_TFLOPs"] * 1e6))
        assert cell["floor_us"] == pytest.approx(floor)
        for name in ("flashmla", "upstream"):
            for temp in ("warm", "cold"):
                assert cell[f"speedup_vs_{name}_{temp}"] == pytest.approx(cell[name][f"{temp}_us"] / cell["rewrite"][f"{temp}_us"])
        assert cell["flashmla_faster"] is (min(cell["speedup_vs_flashmla_warm"], cell["speedup_vs_flashmla_cold"]) < 1.0)


def test_the_grid_before_timed_the_dispatches_it_replaced_checked_first():
    """grid-20261202 (two launches, cb4db5a): its probes of the dispatches before it, at every two-cache cell."""
    for cell in json.loads((BEFORE / "sparse_mla_decode_grid.json").read_text())["grid"]["cells"]:
        if cell["form"] != "two_cache":
            continue
        probes = BEFORE_PROBES if cell["extra_config"] != cell["config"] else BEFORE_PROBES[:1]
        assert [p for p in BEFORE_PROBES if p in cell] == list(probes)
        assert set(cell["probe_checks"]) == set(probes) and all(c["ok"] for c in cell["probe_checks"].values())
        for name in IMPLS + probes:
            _check_timing(cell[name])
        assert cell["streams"] == (2 if cell["config"] in ("small", "medium") else 1)


@pytest.mark.parametrize("folder", [RESULTS, BEFORE])
def test_matrix_covers_every_shape_with_the_clustered_variant_and_passes(folder):
    run = json.loads((folder / "sparse_mla_decode_matrix.json").read_text())
    shapes = {(m["shape"]["batch"], m["shape"]["topk"], m["shape"]["heads"]) for m in run["matrix"]}
    assert shapes == set(itertools.product((1, 3, 16, 64), (128, 512, 2048), (16, 64)))
    for entry in run["matrix"]:
        assert set(entry["variants"]) == {"one_cache", "two_caches_sink", "no_lengths", "clustered_two_caches"}
        assert entry["ok"] is all(v["ok"] for v in entry["variants"].values())
    assert run["matrix_ok"] is True


def test_previous_grids_per_cache_probe_covers_every_two_cache_cell_checked_first():
    probe = json.loads((PREVIOUS / "grid_per_cache.json").read_text())
    grid = json.loads((PREVIOUS / "sparse_mla_decode_grid.json").read_text())["grid"]
    assert {(c["batch"], c["topk"], c["pattern"]) for c in probe["cells"]} == set(
        itertools.product(grid["batches"], grid["topks"], grid["patterns"]))
    seeds = {(c["batch"], c["topk"], c["pattern"]): c["seed"] for c in grid["cells"] if c["form"] == "two_cache"}
    for cell in probe["cells"]:
        assert cell["check"]["ok"] and cell["check"]["all_written"]
        assert cell["seed"] == seeds[(cell["batch"], cell["topk"], cell["pattern"])]  # the grid's own inputs
        for name in ("rewrite", "per_cache", "flashmla"):
            _check_timing(cell[name])


def test_docs_quote_the_grid_tables_as_measured(grid_run):
    tables = _grid_module().markdown_tables(grid_run["grid"])
    assert tables in (ROOT / "docs" / "sparse_mla_decode.md").read_text()


def test_patterns_are_deterministic_distinct_and_inside_the_context():
    for make in (topk_patterns.uniform_rows, topk_patterns.clustered_rows):
        rows = make(6, 512, 4096, seed=3)
        assert torch.equal(rows, make(6, 512, 4096, seed=3)) and not torch.equal(rows, make(6, 512, 4096, seed=4))
        assert rows.dtype == torch.int32 and rows.shape == (6, 512)
        assert int(rows.min()) >= 0 and int(rows.max()) < 4096
        for row in rows:
            assert row.unique().numel() == 512 and torch.equal(row, row.sort().values)
    with pytest.raises(ValueError):
        topk_patterns.clustered_rows(1, 600, 512, seed=0)


def test_clustered_rows_hold_the_window_runs_and_recency_that_uniform_rows_lack():
    context, topk = 8192, 1024
    clustered = topk_patterns.clustered_rows(8, topk, context, seed=5)
    uniform = topk_patterns.uniform_rows(8, topk, context, seed=5)
    window = torch.arange(context - topk // 8, context, dtype=torch.int32)
    for c_row, u_row in zip(clustered, uniform):
        assert bool(torch.isin(window, c_row).all())
        assert float(topk_patterns.run_lengths(c_row).float().mean()) > 8
        assert float(topk_patterns.run_lengths(u_row).float().mean()) < 1.5
        # recency: most of a clustered row lies in the newest half of the context, a uniform one's does not
        assert float((c_row >= context // 2).float().mean()) > 0.6
        assert 0.4 < float((u_row >= context // 2).float().mean()) < 0.6


def test_clustered_case_keeps_each_row_in_its_own_context():
    case = _grid_module().clustered_case(3, 128, 16, "cpu", seed=9)
    for key, width in (("indices", 128), ("extra_indices", 128 // 2 + 5)):
        idx = case[key].view(3, width)
        context = max(2 * width, 256)
        for r in range(3):
            valid = idx[r][idx[r] >= 0]
            assert valid.numel() > 0.8 * width
            assert bool(((valid >= r * context) & (valid < (r + 1) * context)).all())
    assert case["attn_sink"] is not None and case["extra_topk_length"] is not None


@pytest.mark.parametrize("name", ["sm120_compile_triton39.json", "sm120_compile_triton36.json"])
def test_sm120_compile_verdict_follows_from_its_resource_counts(name):
    run = json.loads((PREVIOUS / name).read_text())
    assert run["arch"] == "sm_120"
    labels = {r["label"].split()[0] for r in run["results"]}
    assert labels == {"small", "medium", "large", "combine"}
    clean = all(r["ok"] and not r["spill_stores"] and not r["spill_loads"] and not r["stack_frame"]
                and r["shared_per_block"] <= run["smem_optin_bytes"] for r in run["results"])  # fmt: skip
    assert run["all_compile_without_spills_within_smem"] is clean
    # the Hopper kernels' failure is recorded with the compiler's own reason, not assumed
    assert all(not g["ok"] and "wgmma" in g["error"] for g in run["gluon_hopper_kernels"])


def test_results_page_quotes_the_grids_counts_as_measured(grid_run):
    """The grid paragraph of docs/results.md (moved there from the README), recomputed from the cells: how many
    cells FlashMLA wins per call form, the medians, the cells at 1.2x, and the dispatch change timed against the dispatches it replaced."""
    readme = " ".join((ROOT / "docs" / "results.md").read_text().split())
    cells = grid_run["grid"]["cells"]

    def form(name):
        return [c for c in cells if c["form"] == name]

    two, one = form("two_cache"), form("one_cache")
    at_12 = sum(min(c["speedup_vs_flashmla_warm"], c["speedup_vs_flashmla_cold"]) >= 1.2 for c in cells)
    median_two = statistics.median(c["speedup_vs_flashmla_warm"] for c in two)
    median_one = statistics.median(c["speedup_vs_flashmla_warm"] for c in one)
    fused = [c["rewrite_two_launches"]["warm_us"] / c["rewrite"]["warm_us"] for c in two if c["fused"]]
    kept = [c["rewrite_fused"]["warm_us"] / c["rewrite"]["warm_us"] for c in two if not c["fused"]]
    for phrase in (f"FlashMLA is faster at {sum(c['flashmla_faster'] for c in two)} of 120 cells (the rewrite's median {median_two:.2f}x",
                   f"ahead at {sum(not c['flashmla_faster'] for c in two)}:",
                   f"FlashMLA is faster at {sum(c['flashmla_faster'] for c in one)} of 120 cells (median {median_one:.2f}x",
                   f"at least 1.2x faster at {at_12} of 240 cells",
                   f"at the {len(fused)} fused cells the fused call is {min(fused):.2f}-{max(fused):.2f}x the two launches' speed "
                   f"(median {statistics.median(fused):.2f}x; faster by more than 3% at {sum(r > 1.03 for r in fused)}, never slower by "
                   f"more than 3%" if min(fused) > 0.97 else "never: the fused call is slower by more than 3% somewhere",
                   f"at the {len(kept)} cells kept on two launches the forced fused call takes {min(kept):.2f}-{max(kept):.2f}x the "
                   f"shipped call's time (warm: longer at {sum(r > 1 for r in kept)};"):
        assert phrase in readme, phrase
