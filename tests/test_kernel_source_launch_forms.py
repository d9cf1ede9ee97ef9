"""Launch forms, loops, the ahead-of-time compile across files, and the command lines, on the small
kernels of tests/data/kernel-source-launch-forms (see its README)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tools.kernel_source import KernelNotFound, analyze, find_kernel_definitions, find_launch_sites
from tools.kernel_source import cli

REPO = Path(__file__).resolve().parent.parent
FORMS = REPO / "tests/data/kernel-source-launch-forms"
PKG = FORMS / "pkg"


def test_definitions_behind_decorators_and_cuda():
    (attend,) = find_kernel_definitions(FORMS, "attend_rows")
    assert (attend.file, attend.line, attend.kind) == (PKG / "kernels.py", 16, "triton")
    assert [d.split("(")[0] for d in attend.decorators] == ["triton.autotune", "triton.heuristics", "triton.jit"]
    assert [p.name for p in attend.params if p.constexpr] == ["D", "BLOCK_N", "EVEN_N"]
    (scale,) = find_kernel_definitions(FORMS, "scale_kernel")
    assert (scale.file.name, scale.line, scale.kind) == ("ops.cu", 4, "cuda")
    assert [p.name for p in scale.params] == ["x", "y", "n", "s"]
    assert find_kernel_definitions(FORMS, "launch_scale") == []  # a host function, not a kernel


def test_launch_sites_in_every_form():
    sites = {(s.launcher, s.kind, s.grid_text) for s in find_launch_sites(FORMS, "attend_rows")}
    assert sites == {("attend", "subscript", "(rows,)"), ("attend_fixed", "fn", "(rows, 1)")}
    sites = {(s.launcher, s.kind, s.grid_text) for s in find_launch_sites(FORMS, "blocked_copy")}
    assert sites == {("copy", "alias", "grid"), ("copy_run", "run", "(M // 32, N // 32, 1)")}
    (cuda,) = find_launch_sites(FORMS, "scale_kernel")
    assert (cuda.launcher, cuda.line, cuda.grid_text, cuda.block_text) == ("launch_scale", 11, "grid", "256")


def test_autotuned_kernel_with_heuristic_and_imported_helper():
    report = analyze(FORMS, "attend_rows", {"rows": 8, "N": 1000, "D": 64}, sms=132, launcher="attend")
    assert report.grid == [8] and report.programs == 8
    assert [c.config for c in report.configs] == [
        {"BLOCK_N": 32, "num_warps": 4, "num_stages": 3},  # triton.Config's default num_stages
        {"BLOCK_N": 64, "num_warps": 8, "num_stages": 2},
    ]
    assert report.kernel_args["EVEN_N"]["value"] is False  # 1000 % 32 and 1000 % 64 are not 0
    (loop,) = report.loops
    assert loop.trip_counts == {"0": 32, "1": 16}
    assert loop.accumulators == ["m", "l", "acc"] and loop.calls == ["online_update"]
    assert "kv_ptr" not in loop.carries and not loop.covered_by_grid
    assert report.kernel_args["Q"]["value"]["tensor"] == "float16"  # from the parameter's comment
    assert report.split_k_candidate is True


def test_launch_through_fn_bypasses_the_autotuner():
    report = analyze(FORMS, "attend_rows", {"rows": 8, "N": 1024, "D": 64}, sms=132, launcher="attend_fixed")
    (config,) = report.configs
    assert config.source == "launch" and config.config == {"num_warps": 4, "num_stages": 3}
    assert report.grid == [8, 1]
    assert report.kernel_args["BLOCK_N"]["value"] == 64  # the launcher's default block
    assert report.kernel_args["EVEN_N"]["value"] is True
    assert report.loops[0].trip_counts == {"launch": 16}
    assert any(".fn" in a for a in report.assumptions) and any("`block`" in a for a in report.assumptions)


def test_grid_function_alias_and_run_with_grid_keyword():
    report = analyze(FORMS, "blocked_copy", {"M": 1000, "N": 1024}, sms=132, launcher="copy")
    assert report.grid_expr.startswith("def grid(meta): return (triton.cdiv(M, meta[\"BLOCK_M\"])")
    assert report.grid_symbols == ["M", "N", "BLOCK_M", "BLOCK_N"]
    assert report.grid == [16, 8, 2] and report.programs == 256
    outer, inner = report.loops
    assert (outer.kind, outer.trip_counts, outer.reduction, outer.covered_by_grid) == ("tl.static_range", {"launch": 2}, False, False)
    # each half of the columns (program_id(2)) in steps of 2 x BLOCK_N: 512 / 256
    assert (inner.kind, inner.trip_counts, inner.grid_axes, inner.covered_by_grid) == ("tl.range", {"launch": 2}, [2], True)
    assert inner.depth == 1 and not report.serial_reduction_uncovered
    run = analyze(FORMS, "blocked_copy", {"M": 1000, "N": 1024}, sms=132, launcher="copy_run")
    assert run.grid == [31, 32, 1] and run.loops[1].trip_counts == {"launch": 8}


def test_expression_shapes_and_unresolved_symbols():
    open_report = analyze(FORMS, "attend_rows", {}, sms=132, launcher="attend")
    assert open_report.grid == [None] and open_report.programs is None
    assert any("grid axis 0" in u and "q.shape[0]" in u for u in open_report.unresolved)
    pinned = analyze(FORMS, "attend_rows", {"q.shape[0]": 3, "kv.shape[1]": 64, "q.shape[1]": 32}, sms=132, launcher="attend")
    assert pinned.grid == [3] and pinned.loops[0].trip_counts == {"0": 2, "1": 1}
    assert pinned.kernel_args["EVEN_N"]["value"] is True  # 64 % 32 == 64 % 64 == 0, the same under both configs


def test_aot_compile_copies_the_kernel_and_its_imported_helper():
    pytest.importorskip("triton")
    report = analyze(FORMS, "attend_rows", {"rows": 8, "N": 1024, "D": 64, "kv.stride(0)": 1024 * 64}, sms=132,
                     launcher="attend", arch="sm_90")
    for config in report.configs:
        usage = config.resources["sm_90"]
        assert usage["ok"], usage["error"]
        assert usage["signature"]["Q"] == "*fp16" and usage["signature"]["Out"] == "*fp32"
        assert usage["signature"]["stride_row"] == "i32" and usage["signature"]["EVEN_N"] == "constexpr"
        assert usage["num_warps"] == config.config["num_warps"] and 0 < usage["registers"] <= 255
        assert config.occupancy["sm_90"]["threads_per_block"] == config.threads_per_program


def test_cuda_kernel_is_located_and_its_launch_reported_as_text():
    report = analyze(FORMS, "scale_kernel", {}, sms=188)
    assert report.kind == "cuda" and report.grid_expr == "grid" and report.grid is None
    assert report.launcher["function"] == "launch_scale"
    assert any("CUDA kernel" in u for u in report.unresolved)


def test_missing_kernel_and_source():
    with pytest.raises(KernelNotFound):
        analyze(FORMS, "no_such_kernel", {}, sms=132)
    with pytest.raises(FileNotFoundError):
        analyze(FORMS / "missing", "attend_rows", {}, sms=132)


def _box(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tools.kernel_source", *args], capture_output=True, text=True, cwd=REPO)


def test_box_command_prints_one_json_object():
    args = ["--source", str(FORMS), "--kernel", "attend_rows", "--shape", "rows=8", "--shape", "N=1000", "--shape", "D=64",
            "--sms", "132", "--launcher", "attend", "--config-json", '{"BLOCK_N": 64, "num_warps": 8, "num_stages": 2}']
    done = _box(*args)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["grid"] == [8] and report["chosen"] == {"config": {"BLOCK_N": 64, "num_warps": 8, "num_stages": 2}, "label": "1"}
    assert report["loops"][0]["trip_counts"] == {"0": 32, "1": 16}
    assert done.stdout == _box(*args).stdout  # deterministic for the same inputs


@pytest.mark.parametrize("args", [
    ["--source", str(FORMS), "--kernel", "no_such_kernel", "--sms", "132"],
    ["--source", str(FORMS), "--kernel", "attend_rows", "--sms", "132", "--shape", "rows"],
    ["--source", str(FORMS), "--kernel", "attend_rows", "--sms", "132", "--config-json", "{not json"],
    ["--source", str(FORMS), "--kernel", "attend_rows", "--sms", "132", "--arch", "sm_75"],
])
def test_box_command_bad_input_exits_2(args):
    done = _box(*args)
    assert done.returncode == 2 and done.stdout == "" and done.stderr.startswith("error:")


def test_human_command(capsys):
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)  # --json among them
    args = parser.parse_args(["--source", str(FORMS), "--kernel", "attend_rows", "--shape", "rows=8", "--shape", "N=1000",
                              "--shape", "D=64", "--sms", "132", "--launcher", "attend"])
    assert cli.run(args) == 0
    text = capsys.readouterr().out
    assert "grid = (rows,)" in text and "line 24: for start in range(0, N, BLOCK_N)  [serial reduction; NOT covered by the grid]" in text
    assert "split-K candidate: True" in text
    args.json = True
    assert cli.run(args) == 0
    assert json.loads(capsys.readouterr().out)["programs"] == 8


def test_compile_time_tensors_keep_their_dtype_across_many_compiles():
    """Triton's native specializer caches a dtype's type string by the dtype object's identity. The
    stand-in tensors' dtypes must stay distinct objects for the process's life, or a later stand-in
    reuses a freed one's address and is specialized as the wrong type (seen in CI as an int32 index
    pointer read as uint8)."""
    pytest.importorskip("triton")
    import gc

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature

    from tools.kernel_source.resources import DtypeOnlyTensor

    @triton.jit
    def takes_a_pointer(p):
        pass

    binder = create_function_from_signature(takes_a_pointer.signature, takes_a_pointer.params,
                                            make_backend(GPUTarget("cuda", 90, 32)))
    wrong = []
    for _ in range(50):
        for dtype, expected in (("int32", "*i32"), ("uint8", "*u8"), ("bfloat16", "*bf16"), ("float32", "*fp32")):
            _, specialization, _ = binder(p=DtypeOnlyTensor(dtype))
            if specialization[0][0] != expected:
                wrong.append((dtype, specialization[0][0]))
            gc.collect(0)  # frees the stand-in, as between two compiles (the young generation: where it lives; a full
            # collection walks the whole test session's heap, 200 times)
    assert not wrong, wrong[:5]
