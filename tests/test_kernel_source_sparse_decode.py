"""The upstream `_tiled_sparse_decode_kernel` (sglang 0.5.23, kernels/ops/attention/flash_mla_sm120_triton.py)
analyzed from source, checked against the H200's own numbers (tests/data/h200-sparse-decode):
Nsight Compute's grid, block size, waves and occupancy, and Triton's compiled metadata on the GPU."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tools.kernel_source import analyze, occupancy, padded_programs

from test_kernel_source_occupancy import DATA, ncu_metrics, number

pytest.importorskip("triton")
from tools.kernels import upstream  # noqa: E402

KERNEL = "_tiled_sparse_decode_kernel"


@pytest.fixture(scope="module")
def kernel_file() -> Path:
    try:
        return upstream.kernel_path()
    except upstream.SglangMissing as exc:
        pytest.skip(str(exc))


def ncu_runs() -> list[dict]:
    return [json.loads(line) for line in (DATA / "ncu_runs.jsonl").read_text().splitlines() if line.strip()]


def h200_metadata() -> dict:
    return json.loads((DATA / "triton_metadata.json").read_text())


def h200_launch_shapes() -> dict:
    """The launch arguments of scripts/h200/capture_fixtures.py's `metadata` mode, which compiled the
    kernel on the H200: B=1, 64 kernel heads, top-k 512, a 256-token page (584 bytes a token), no
    per-token lengths, contiguous q/out of [B, 64, 512] and indices of [B, 512]."""
    return {
        "B": 1, "H": 64, "topk": 512, "has_topk_len": 0, "page_size": 256, "page_bytes": 256 * 584,
        "q3.stride(0)": 64 * 512, "q3.stride(1)": 512, "out.stride(0)": 64 * 512, "out.stride(1)": 512,
        "flat_indices.stride(0)": 512,
    }


def test_grid_coverage_and_loop_at_batch_1(kernel_file):
    report = analyze(kernel_file, KERNEL, {"B": 1, "H": 64, "topk": 512}, sms=132)
    assert report.kind == "triton" and report.line == 49
    assert report.launcher["function"] == "_run_triton_sparse_decode" and report.launcher["launch_line"] == 247
    assert report.grid_expr == "(B, H)" and report.grid_symbols == ["B", "H"]
    assert report.grid == [1, 64] and report.programs == 64
    assert report.coverage == pytest.approx(64 / 132)
    assert [c.config for c in report.configs] == upstream.autotune_configs()
    (loop,) = report.loops
    assert loop.text == "for tile_start in range(0, topk, BLOCK_T)" and loop.line == 120
    assert [loop.trip_counts[c.label] for c in report.configs] == [512 // c.config["BLOCK_T"] for c in report.configs] == [32, 32, 16]
    assert set(loop.carries) == set(loop.accumulators) == {"m_i", "l_i", "acc_nope", "acc_rope"}
    assert loop.reduction and not loop.covered_by_grid and loop.range_symbols == ["topk"]
    # fewer programs than SMs: below one wave whatever the occupancy, so split-K is a candidate
    assert report.serial_reduction_uncovered and report.uncovered_reduction_loops == [120]
    assert report.below_one_wave is True and report.split_k_candidate is True
    on_pro6000 = analyze(kernel_file, KERNEL, {"B": 1, "H": 64, "topk": 2048}, sms=188)
    assert on_pro6000.coverage == pytest.approx(64 / 188)
    assert [on_pro6000.loops[0].trip_counts[c.label] for c in on_pro6000.configs] == [128, 128, 64]


@pytest.mark.parametrize("name", ["ncu_B1_topk512.csv", "ncu_B64_topk2048.csv"])
def test_grid_and_block_match_nsight_compute(kernel_file, name):
    run = next(r for r in ncu_runs() if f"ncu_B{r['batch']}_topk{r['topk']}.csv" == name)
    m = ncu_metrics(name)
    report = analyze(kernel_file, KERNEL, {"B": run["batch"], "H": 64, "topk": run["topk"]}, sms=int(number(m["# SMs"])),
                     chosen_config=run["chosen"])
    assert report.programs == int(number(m["Grid Size"]))
    chosen = report.config(report.chosen["label"])
    assert chosen.config == run["chosen"]
    assert chosen.threads_per_program == int(number(m["Block Size"]))


def test_padding_programs_at_tp4(kernel_file):
    # DSV4-Flash at TP4: 16 heads a rank, padded to 64 for the kernel
    report = analyze(kernel_file, KERNEL, {"B": 2, "H": 64, "topk": 512}, sms=188, real_heads=16)
    assert report.padding["head_symbol"] == "H" and report.padding["padding_programs"] == 2 * 48
    assert padded_programs(report, 16, 64)["by_config"]["0"]["padding_share"] == pytest.approx(0.75)
    assert padded_programs(report, 16, 64)["by_config"]["0"]["consistent"]
    assert not padded_programs(report, 16, 128)["by_config"]["0"]["consistent"]  # not the H the grid was evaluated at


def _aot(kernel_file, archs, python=None, chosen=None, shapes=None, sms=132):
    return analyze(kernel_file, KERNEL, shapes or h200_launch_shapes(), sms=sms, arch=archs, python=python, chosen_config=chosen)


@pytest.fixture(scope="module")
def aot_report(kernel_file):
    return _aot(kernel_file, ["sm_90", "sm_120"], chosen=ncu_runs()[0]["chosen"])


def test_aot_resources_for_sm90_and_sm120(aot_report):
    """Every config compiles for both architectures; ptxas's log and the cubin agree (checked inside
    the compile), and the arguments Triton specializes on are those of the H200's launch."""
    import triton

    for config in aot_report.configs:
        for arch in ("sm_90", "sm_120"):
            usage = config.resources[arch]
            assert usage["ok"], usage["error"]
            assert usage["triton_version"] == triton.__version__
            assert 0 < usage["registers"] <= 255 and usage["registers"] == usage["cubin"]["REG"]
            assert usage["shared_per_block"] == usage["shared_dynamic"] + usage["shared_static"] > 0
            assert usage["signature"]["Q_ptr"] == "*bf16" and usage["signature"]["cache_fp8_ptr"] == "*fp8e4nv"
            assert usage["signature"]["has_topk_len"] == "constexpr"
            occ = config.occupancy[arch]
            assert occ["blocks_per_sm"] == config.blocks_per_sm[arch] >= 1
            assert config.waves[arch] == pytest.approx(64 / (132 * occ["blocks_per_sm"]))
    # what the report's reader sees for each config (printed with -s)
    for config in aot_report.configs:
        print(config.label, {a: (u["registers"], u["spill_stores"], u["shared_per_block"]) for a, u in config.resources.items()})


@pytest.mark.parametrize("name", ["ncu_B1_topk512.csv", "ncu_B64_topk2048.csv"])
def test_aot_occupancy_and_waves_match_nsight_compute(kernel_file, aot_report, name):
    """The chosen config's AOT registers for sm_90 lead to ncu's blocks per SM, occupancy and waves.

    Holds for the Triton 3.6 (the H200's) and 3.9 compiles: both put the chosen 4-warp config at
    255 registers, 2 blocks per SM. A Triton whose compile lands elsewhere fails here, which is the
    point: the occupancy the grid step reports would no longer be the H200's."""
    run = next(r for r in ncu_runs() if f"ncu_B{r['batch']}_topk{r['topk']}.csv" == name)
    m = ncu_metrics(name)
    chosen = aot_report.config(aot_report.chosen["label"])
    usage = chosen.resources["sm_90"]
    occ = occupancy("sm_90", chosen.threads_per_program, usage["registers"], usage["shared_per_block"],
                    smem_carveout=int(number(m["Shared Memory Configuration Size"])))
    assert occ.blocks_per_sm == int(number(m["Block Limit Registers"]))
    assert occ.occupancy * 100 == pytest.approx(number(m["Theoretical Occupancy"]), abs=0.005)
    shapes = dict(h200_launch_shapes(), B=run["batch"], topk=run["topk"])
    shapes["flat_indices.stride(0)"] = run["topk"]
    report = analyze(kernel_file, KERNEL, shapes, sms=int(number(m["# SMs"])), chosen_config=run["chosen"], arch="sm_90",
                     compile_all_configs=False)
    config = report.config(report.chosen["label"])
    assert round(config.waves["sm_90"], 2) == pytest.approx(number(m["Waves Per SM"]))
    assert report.below_one_wave is (number(m["Waves Per SM"]) < 1)


def _python_with_triton(version: str) -> str | None:
    """An interpreter with Triton ``version``, named by KERNEL_SOURCE_TRITON_PYTHON (a venv with only
    Triton suffices: the compile imports nothing else)."""
    python = os.environ.get("KERNEL_SOURCE_TRITON_PYTHON")
    if not python:
        return None
    found = subprocess.run([python, "-c", "import triton; print(triton.__version__)"], capture_output=True, text=True)
    return python if found.returncode == 0 and found.stdout.strip() == version else None


def test_aot_matches_triton_metadata_on_the_h200(kernel_file):
    """Registers, spills and shared memory of each config equal Triton's metadata from the H200 when
    compiled with the H200's Triton version (its interpreter given by KERNEL_SOURCE_TRITON_PYTHON,
    or this one if its Triton is that version)."""
    import triton

    device = json.loads((DATA / "device.json").read_text())["device"]
    python = None if triton.__version__ == device["triton"] else _python_with_triton(device["triton"])
    if triton.__version__ != device["triton"] and python is None:
        pytest.skip(f"needs Triton {device['triton']} (set KERNEL_SOURCE_TRITON_PYTHON); this one is {triton.__version__}")
    report = _aot(kernel_file, "sm_90", python=python)
    measured = {json.dumps(c["config"], sort_keys=True): c for c in h200_metadata()["configs"]}
    assert len(measured) == len(report.configs)
    for config in report.configs:
        gpu = measured[json.dumps(config.config, sort_keys=True)]
        usage = config.resources["sm_90"]
        assert usage["ok"], usage["error"]
        assert usage["triton_version"] == device["triton"]
        assert usage["registers"] == gpu["n_regs"]
        assert usage["triton_n_spills"] == gpu["n_spills"]
        assert (usage["spill_stores"] > 0) == (gpu["n_spills"] > 0)
        assert usage["shared_dynamic"] == gpu["shared"]
