"""What a newcomer trips over in the CLI (issue #31, items 4, 8, 9 and 10): values refused where they
would print an empty or misleading result, no Python error text for a missing directory or a reader
that left the pipe, the report's links kept working where it is written, help that says what each
argument is with examples, the console command, and runs that can be listed, removed and pruned."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tools import exitcodes

from conftest import DATA, ROOT, agent_in_process

EXAMPLE_RUN = ROOT / "runs" / "examples" / "dsv4-flash-cpu-20261202"
CPU_TRACE = DATA / "trace-cpu" / "reference-cpu.trace.json.gz"


def _one_error_line(err: str) -> str:
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err and "Error:" not in err, err  # no Python exception name for bad input
    return err


# -- item 9: Python errors leak, bad values pass -----------------------------------------------------


def test_report_out_in_a_missing_directory_is_one_bad_input_line(capsys, tmp_path):
    missing = tmp_path / "no" / "such" / "dir"
    code, out, err = agent_in_process(["report", str(EXAMPLE_RUN), "--out", str(missing / "x.md")], capsys)
    assert code == exitcodes.BAD_INPUT, err
    assert f"directory {missing} does not exist" in _one_error_line(err)
    assert not missing.exists()


def _relative_links(markdown: str) -> list[str]:
    return [t for t in re.findall(r"\]\(([^)\s]+)\)", markdown) if not re.match(r"[a-z]+:|#|/", t)]


def test_report_written_elsewhere_keeps_its_links(capsys, tmp_path):
    out = tmp_path / "elsewhere" / "findings.md"
    out.parent.mkdir()
    code, _, err = agent_in_process(["report", str(EXAMPLE_RUN), "--out", str(out)], capsys)
    assert code == 0, err
    links = _relative_links(out.read_text())
    plots = [link for link in links if link.endswith(".png")]
    assert plots and len(links) > len(plots)  # the plots, and the findings and journal lines the numbers cite
    broken = sorted({link for link in links if not (out.parent / link.partition("#")[0]).is_file()})
    assert not broken, broken[:5]
    assert _relative_links(out.read_text()) != _relative_links((EXAMPLE_RUN / "PROFILE_FINDINGS.md").read_text())


def test_a_reader_that_leaves_the_pipe_gets_no_error_text():
    # stdout's read end closed before the command writes: the write fails however fast the process is
    proc = subprocess.Popen([sys.executable, "-m", "agent", "validate", "dsv4-flash", "--json"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    code = proc.wait(timeout=120)
    assert err == "" and code == 128 + 13  # as a shell reports `cat` when `head` stopped reading


@pytest.mark.parametrize("top", ["-1", "0"])
def test_trace_refuses_a_count_that_shows_nothing(capsys, top):
    code, out, err = agent_in_process(["trace", str(CPU_TRACE), "--top", top], capsys)
    assert code == exitcodes.BAD_INPUT and out == ""
    assert f"--top: {top} is not positive" in _one_error_line(err)


@pytest.mark.parametrize("given, what", [("README.md", "a .md file"), ("agent", "a directory")])
def test_validate_says_what_an_existing_file_is_not(capsys, given, what, monkeypatch):
    monkeypatch.chdir(ROOT)
    code, out, err = agent_in_process(["validate", given], capsys)
    assert code == exitcodes.BAD_INPUT
    assert f"{given}: {what}, not a target YAML" in _one_error_line(err) and "unknown target" not in err


# -- item 4: the grid example --------------------------------------------------------------------------


def _sparse_decode_grid() -> list[str]:
    pytest.importorskip("triton")
    from tools.kernels import upstream

    try:
        source = upstream.kernel_path()
    except upstream.SglangMissing as exc:
        pytest.skip(str(exc))
    return ["grid", "--source", str(source), "--kernel", "_tiled_sparse_decode_kernel", "--shape", "B=1",
            "--shape", "H=64", "--shape", "topk=512", "--sms", "188", "--arch", "sm_120"]


def test_grid_without_a_flag_the_compile_needs_says_which_values_to_pass(capsys):
    # the README's example as it was: has_topk_len (`topk_length is not None` in the launcher) unpinned
    code, out, err = agent_in_process(_sparse_decode_grid(), capsys)
    assert code == exitcodes.BAD_INPUT
    assert "--shape has_topk_len=true or --shape has_topk_len=false" in _one_error_line(err)
    table = out.split("\n\n")[1]
    assert "error" not in table and "needs input" in table  # no compiler error: a value to give


def test_grid_takes_a_flag_as_true_or_false(capsys):
    one = ["--only-chosen", "--config-json", '{"BLOCK_T": 16, "num_warps": 4, "num_stages": 2}']
    code, out, err = agent_in_process([*_sparse_decode_grid(), "--shape", "has_topk_len=False", *one, "--json"], capsys)
    assert code == 0, err
    usage = next(c["resources"]["sm_120"] for c in json.loads(out)["configs"] if c["resources"]["sm_120"].get("ok"))
    assert usage["registers"] > 0
    code, out, err = agent_in_process([*_sparse_decode_grid(), "--shape", "B=true", "--no-compile"], capsys)
    assert code == exitcodes.BAD_INPUT and "a grid size is a count" in _one_error_line(err)


# -- item 10: runs pile up -----------------------------------------------------------------------------


def _runs_dir(tmp_path: Path) -> tuple[Path, Path, Path]:
    """Two copies of the shipped CPU run: one finished, one whose journal ends in its sixth step."""
    runs = tmp_path / "runs"
    done, cut = runs / "done-run", runs / "cut-run"
    shutil.copytree(EXAMPLE_RUN, done)
    shutil.copytree(EXAMPLE_RUN, cut)
    lines = (cut / "log.jsonl").read_text().splitlines(keepends=True)
    ends = [i for i, line in enumerate(lines) if json.loads(line)["kind"] == "step_end"]
    (cut / "log.jsonl").write_text("".join(lines[:ends[5] + 1]))
    return runs, done, cut


def test_runs_says_what_each_run_found_and_took(capsys, tmp_path, monkeypatch):
    runs, done, cut = _runs_dir(tmp_path)
    monkeypatch.setenv("COLUMNS", "160")
    monkeypatch.chdir(tmp_path)  # paths as short as a user's runs/RUN: the width left is the headline's
    code, out, err = agent_in_process(["runs", "--runs-dir", "runs", "--json"], capsys)
    assert code == 0, err
    rows = {Path(r["path"]).name: r for r in json.loads(out)}
    for row in rows.values():  # the keys scripts read before, and the new ones
        assert {"run", "target", "started", "status", "findings", "attempts", "replay_of", "path"} <= set(row)
    events = [json.loads(line) for line in (done / "log.jsonl").read_text().splitlines()]
    decision = next(e["choice"] for e in events if e["kind"] == "decision")
    assert rows["done-run"]["decision"] == decision and rows["cut-run"]["decision"] is None
    assert rows["cut-run"]["status"] == "interrupted"
    assert 0 < rows["cut-run"]["duration_s"] < rows["done-run"]["duration_s"]
    assert rows["done-run"]["headline"] and rows["done-run"]["headline"] != rows["cut-run"]["headline"]
    code, out, err = agent_in_process(["runs", "--runs-dir", "runs"], capsys)
    header, *lines = out.splitlines()
    assert header.split()[:8] == ["status", "found", "started", "(UTC)", "took", "target", "decision", "run"]
    assert len(lines) == 2 and all(len(line) <= 160 for line in lines)
    line = next(line for line in lines if "done-run" in line)
    assert rows["done-run"]["target"] in line and decision in line and rows["done-run"]["headline"][:20] in line
    assert rows["done-run"]["started"] not in line  # to the minute, not the journal's microseconds


def test_runs_rm_and_prune_interrupted(capsys, tmp_path):
    runs, done, cut = _runs_dir(tmp_path)
    code, out, err = agent_in_process(["runs", "rm", str(done), "no-such-run", "--runs-dir", str(runs)], capsys)
    assert code == exitcodes.BAD_INPUT and "no-such-run: not a run" in _one_error_line(err)
    assert done.is_dir()  # one bad name: nothing removed
    code, out, err = agent_in_process(["runs", "--prune-interrupted", "--runs-dir", str(runs), "--json"], capsys)
    assert code == 0, err
    obj = json.loads(out)
    assert [Path(r["path"]) for r in obj["removed"]] == [cut] and obj["removed"][0]["status"] == "interrupted"
    assert not cut.exists() and done.is_dir()
    code, out, err = agent_in_process(["runs", "rm", "done-run", "--runs-dir", str(runs)], capsys)
    assert code == 0 and f"removed {done}" in out and not done.exists()
    code, out, err = agent_in_process(["runs", "--prune-interrupted", "--runs-dir", str(runs)], capsys)
    assert code == 0 and "no interrupted runs" in out


# -- item 8: help and the entry point -----------------------------------------------------------------


def _subcommands() -> list[str]:
    from agent.cli import TOOL_COMMANDS, build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert set(TOOL_COMMANDS) < set(sub.choices)
    return sorted(sub.choices)


def test_every_subcommand_help_says_what_each_argument_is_with_examples(capsys):
    for command in _subcommands():
        code, out, err = agent_in_process([command, "--help"], capsys)
        assert code == 0, (command, err)
        assert f"\nExamples:\n  python -m agent {command} " in out, command
        assert "README" not in out, command  # what --json gives is said here, not elsewhere
        options = out.split("positional arguments:")[-1]
        blank = re.findall(r"^  (\S+)\s*$\n(?!\s{10,}\S)", options.split("options:")[0], flags=re.M)
        assert not blank, (command, blank)  # a positional listed with no text after it


def test_a_mistyped_flag_names_its_subcommands_help(capsys, tmp_path):
    code, out, err = agent_in_process(["investigate", "dsv4-flash", "--decde", "auto", "--runs-dir", str(tmp_path)], capsys)
    assert code == exitcodes.BAD_INPUT and not any(tmp_path.iterdir())
    assert "(see python -m agent investigate --help)" in _one_error_line(err) and "did you mean --decide?" in err


@pytest.mark.parametrize("argv", [
    ["investigate", "dsv4-flash", "--dec", "auto"],  # --decide
    ["investigate", "dsv4-flash", "--stand", "--decide", "stop"],  # --stand-in
    ["runs", "--prune"],  # --prune-interrupted
    ["validate", "dsv4-flash", "--js"],  # --json
    ["trace", str(CPU_TRACE), "--by-o"],  # --by-op: a tool command's own parser
    ["--he"],  # the main parser's --help
], ids=lambda argv: " ".join(a for a in argv if a.startswith("--")))
def test_an_abbreviated_flag_is_refused_with_the_flag_meant(argv, capsys, tmp_path):
    """argparse would take each as the flag it abbreviates: a prefix that one day matches two flags
    then fails, or one that starts a run does something nobody typed."""
    runs_dir = ["--runs-dir", str(tmp_path)] if argv[0] in ("investigate", "runs") else []
    code, out, err = agent_in_process([*argv, *runs_dir], capsys)
    assert code == exitcodes.BAD_INPUT and out == "" and not any(tmp_path.iterdir()), err
    line = _one_error_line(err)
    abbreviation = next(a for a in argv if a.startswith("--"))
    assert f"unrecognized arguments: {abbreviation}" in line or argv == ["--he"], line
    if argv[0] != "--he":
        assert "did you mean --" in line, line


def test_every_parser_refuses_abbreviations_but_a_recorded_line_is_read_as_it_was_accepted():
    from agent.cli import _RecordedLine, build_parser

    def parsers(parser):
        yield parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    yield from parsers(sub)

    found = list(parsers(build_parser()))
    assert len(found) > 1 and not any(p.allow_abbrev for p in found)
    # a journal from before this holds what that version accepted: its resume keeps the options it meant
    recorded = build_parser(_RecordedLine).parse_args(["investigate", "dsv4-flash", "--dec", "auto"])
    assert recorded.decide == "auto"

def test_quiet_and_verbose_pick_the_progress():
    from agent.cli import _progress, build_parser
    from agent.progress import PlainProgress, SilentProgress

    for command in (["investigate", "dsv4-flash"], ["replay", "runs/RUN"]):
        quiet = _progress(build_parser().parse_args([*command, "-q"]))
        with quiet.paused():  # the decision prompt pauses whatever progress it is given
            quiet.note("nothing is printed")
        assert isinstance(quiet, SilentProgress)
        assert type(_progress(build_parser().parse_args([*command, "--verbose"]))) is PlainProgress


def test_the_console_command_is_the_cli():
    import tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, function = scripts["perf-investigator"].partition(":")
    # what the installed script does (pip writes it: import the entry point, exit with what it returns)
    code = f"import sys; sys.argv[0] = 'perf-investigator'; from {module} import {function}; sys.exit({function}())"
    done = subprocess.run([sys.executable, "-c", code, "runs", "--bogus"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == exitcodes.BAD_INPUT
    assert done.stderr == "error: perf-investigator runs: unrecognized arguments: --bogus (see perf-investigator runs --help)\n"
