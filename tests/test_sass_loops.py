"""The loops of a kernel's SASS (tools.kernel_source.resources.sass_loops_of) and the committed loop structure
of the sm_120 family (benchmarks/results/sm120-20261207b/sass_loops_triton{36,39}.json, made by
``python -m scripts.sm120_splitk_compile --loops``), which the diagnosis in that folder's README reads."""

from __future__ import annotations

import importlib.util
import json

import pytest

from conftest import ROOT
from tools.kernel_source.resources import sass_loops_of, sass_mix_of

RESULTS = ROOT / "benchmarks" / "results" / "sm120-20261207b"

# cuobjdump -sass as Triton 3.9's prints it, and as an older one prints sm_120 code (scheduling hints after the
# operands): an inner loop (0x0020-0x0060) inside an outer one (0x0010-0x0080), and the trap's branch to itself
SASS = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/              @!P0 LDG.E R2, desc[UR4][R4.64] ;
        /*0020*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*0030*/                   LDSM.16.M88.4 R8, [R3] ;
        /*0040*/                   HMMA.16816.F32.BF16 R12, R8, R10, R12 ;
        /*0050*/                   HMMA.16816.F32.BF16 R16, R8, R11, R16 ;
        /*0060*/                   BRA.U UP0, 0x20    &req={4,1,0}             ?trans5;
        /*0070*/                   STS.128 [R5], R12 ;
        /*0080*/              @P1 BRA 0x10 ;
        /*0090*/                   EXIT ;
        /*00a0*/                   BRA 0xa0;
"""


def test_loops_are_the_backward_branches_innermost_first():
    loops = sass_loops_of(SASS)
    assert [(loop["start"], loop["end"]) for loop in loops] == [("0x20", "0x60"), ("0x10", "0x80")]
    inner, outer = loops
    assert inner["instructions"] == 5 and inner["mix"] == {"BAR": 1, "BRA": 1, "HMMA": 2, "LDSM": 1}
    assert outer["mix"]["HMMA"] == 2 and outer["mix"]["LDG"] == 1 and outer["mix"]["STS"] == 1
    assert sass_mix_of(SASS)["BRA"] == 3  # the trap's self-branch is an instruction, not a loop


def _script():
    spec = importlib.util.spec_from_file_location("sm120_splitk_compile", ROOT / "scripts" / "sm120_splitk_compile.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["sass_loops_triton39.json", "sass_loops_triton36.json"])
def test_committed_loop_structure_is_of_todays_kernels(name):
    """Every sm_120 config, both builds: S's group loop (the innermost; 8 trips a tile) waits on a shared-memory
    barrier twice a trip around 8 mma.sync a warp, and the tile loop holds the rest of the tile's barriers."""
    run = json.loads((RESULTS / name).read_text())
    assert run["triton"].startswith(name[-7] + "." + name[-6])
    assert run["sources_sha256"] == _script().sources_hash(), "a kernel changed since: run --loops again"
    from tools.kernels.splitk import tiles

    assert [r["config"] for r in run["rows"]] == [tiles.config_name(c) for c in tiles.SM120_CONFIGS]
    for row in run["rows"]:
        for build in ("sm_120", "sm_90_mma_v2"):
            loops = row[build]["loops"]
            assert len(loops) == 2, (row["config"], build)
            group, tile = loops
            # 16 heads: one m16 row block over 4 warps (4 mma a warp a trip); 32 and 64 heads over 8 warps: 8
            assert group["mix"]["HMMA"] == (4 if row["config"] == "sm120_small" else 8), (row["config"], build)
            assert group["mix"]["BAR"] >= 2 and group["mix"]["LDG"] >= 4, (row["config"], build)
            assert tile["mix"]["BAR"] >= 14 and tile["mix"]["HMMA"] >= 36, (row["config"], build)
