"""Occupancy and waves against Nsight Compute on the H200 (tests/data/h200-sparse-decode, see its README).

Nsight Compute reports, for one launch of the upstream sparse decode kernel, the registers per
thread, block size and shared memory it measured, and the block limits, theoretical occupancy and
waves it derived. Feeding ncu's own inputs to our formula must give ncu's outputs.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tools.kernel_source import ARCHS, arch_limits, occupancy, waves
from tools.kernel_source.occupancy import normalize_arch

DATA = Path(__file__).resolve().parent / "data/h200-sparse-decode"
NCU_FILES = ["ncu_B1_topk512.csv", "ncu_B64_topk2048.csv"]


def ncu_metrics(name: str) -> dict[str, str]:
    """Metric name -> value (as printed) of the one kernel launch in an ncu --csv --page details file."""
    with open(DATA / name, newline="") as f:
        rows = [row for row in csv.reader(f) if len(row) > 10]
    header, body = rows[0], rows[1:]
    metrics = {}
    for row in body:
        record = dict(zip(header, row))
        if record["Metric Name"]:
            metrics[record["Metric Name"]] = record["Metric Value"]
    return metrics


def number(text: str) -> float:
    return float(text.replace(",", ""))


@pytest.mark.parametrize("name", NCU_FILES)
def test_occupancy_formula_reproduces_nsight_compute(name):
    m = ncu_metrics(name)
    regs = int(number(m["Registers Per Thread"]))
    block = int(number(m["Block Size"]))
    smem = int(number(m["Dynamic Shared Memory Per Block"]) + number(m["Static Shared Memory Per Block"]))
    carveout = int(number(m["Shared Memory Configuration Size"]))
    occ = occupancy("sm_90", block, regs, smem, smem_carveout=carveout)
    assert occ.block_limits["registers"] == int(number(m["Block Limit Registers"]))
    assert occ.block_limits["shared_memory"] == int(number(m["Block Limit Shared Mem"]))
    assert occ.block_limits["warps"] == int(number(m["Block Limit Warps"]))
    assert occ.block_limits["blocks"] == int(number(m["Block Limit SM"]))
    assert occ.active_warps_per_sm == int(number(m["Theoretical Active Warps per SM"]))
    assert occ.occupancy * 100 == pytest.approx(number(m["Theoretical Occupancy"]), abs=0.005)
    # ncu's "Driver Shared Memory Per Block" is the per-block reservation our table holds
    assert arch_limits("sm_90").reserved_smem_per_block == int(number(m["Driver Shared Memory Per Block"]))
    w = waves(int(number(m["Grid Size"])), int(number(m["# SMs"])), occ.blocks_per_sm)
    assert round(w, 2) == pytest.approx(number(m["Waves Per SM"]))


def test_sm90_limits_match_the_h200_device_properties():
    device = json.loads((DATA / "device.json").read_text())["device"]
    limits = arch_limits(f"sm_{device['major']}{device['minor']}")
    assert limits.regs_per_sm == device["regs_per_multiprocessor"]
    assert limits.max_threads_per_sm == device["max_threads_per_multi_processor"]
    assert limits.smem_per_sm == device["shared_memory_per_multiprocessor"]
    assert limits.smem_per_block_optin == device["shared_memory_per_block_optin"]
    assert limits.warp_size == device["warp_size"]


def test_sm120_limits_and_register_bound_occupancy():
    limits = arch_limits("sm_120")
    # CCCL arch_traits<sm_120>: 1536 threads (48 warps), 24 blocks, 100 KiB shared memory per SM
    assert (limits.max_warps_per_sm, limits.max_blocks_per_sm, limits.smem_per_sm) == (48, 24, 100 * 1024)
    # 255 registers: 8192 per warp, 2 warps per sub-partition, 8 warps per SM on every arch
    four_warps = occupancy("sm_120", 128, 255, 16384)
    assert four_warps.blocks_per_sm == 2 and four_warps.limited_by == ["registers"]
    assert four_warps.occupancy == pytest.approx(8 / 48)
    eight_warps = occupancy("sm_120", 256, 161, 8192)
    # 161 regs -> 5376 per warp -> 3 warps per sub-partition -> 12 warps: one 8-warp block
    assert eight_warps.block_limits["registers"] == 1
    # shared memory binds once blocks are small: 48 KiB + 1 KiB reserved -> 2 blocks in 100 KiB
    assert occupancy("sm_120", 64, 32, 48 * 1024).block_limits["shared_memory"] == 2


def test_limits_beyond_the_architecture():
    assert occupancy("sm_90", 128, 256, 0).blocks_per_sm == 0  # no thread gets 256 registers
    assert occupancy("sm_90", 128, 32, 228 * 1024).blocks_per_sm == 0  # over the opt-in maximum
    assert occupancy("sm_90", 2048, 16, 0).blocks_per_sm == 0  # over 1024 threads a block
    assert waves(64, 132, 0) is None


@pytest.mark.parametrize("spelling", ["sm_90", "sm_90a", "90", "9.0", "SM90"])
def test_arch_spellings(spelling):
    assert normalize_arch(spelling) == "sm_90"
    assert "sm_120" in ARCHS and normalize_arch("sm_120a") == "sm_120"
    with pytest.raises(ValueError):
        arch_limits("sm_75")
