"""What a newcomer trips over in the CLI (issue #31, items 4, 8, 9 and 10): values refused where they
would print an empty or misleading result, no Python error text for a missing directory or a reader
that left the pipe, the report's links kept working where it is written, help that says what each
argument is with examples, the console command, and runs that can be listed, removed and pruned."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agent.cli import main
from tools import exitcodes

from conftest import DATA, ROOT

EXAMPLE_RUN = ROOT / "runs" / "examples" / "dsv4-flash-cpu-20261202"
CPU_TRACE = DATA / "trace-cpu" / "reference-cpu.trace.json.gz"


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    """``python -m agent ARGV`` in this process: (exit code, stdout, stderr)."""
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse: what python -m agent would exit with
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def _one_error_line(err: str) -> str:
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err and "Error:" not in err, err  # no Python exception name for bad input
    return err


# -- item 9: Python errors leak, bad values pass -----------------------------------------------------


def test_report_out_in_a_missing_directory_is_one_bad_input_line(capsys, tmp_path):
    missing = tmp_path / "no" / "such" / "dir"
    code, out, err = _run(["report", str(EXAMPLE_RUN), "--out", str(missing / "x.md")], capsys)
    assert code == exitcodes.BAD_INPUT, err
    assert f"directory {missing} does not exist" in _one_error_line(err)
    assert not missing.exists()


def _relative_links(markdown: str) -> list[str]:
    return [t for t in re.findall(r"\]\(([^)\s]+)\)", markdown) if not re.match(r"[a-z]+:|#|/", t)]


def test_report_written_elsewhere_keeps_its_links(capsys, tmp_path):
    out = tmp_path / "elsewhere" / "findings.md"
    out.parent.mkdir()
    code, _, err = _run(["report", str(EXAMPLE_RUN), "--out", str(out)], capsys)
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
    code, out, err = _run(["trace", str(CPU_TRACE), "--top", top], capsys)
    assert code == exitcodes.BAD_INPUT and out == ""
    assert f"--top: {top} is not positive" in _one_error_line(err)


@pytest.mark.parametrize("given, what", [("README.md", "a .md file"), ("agent", "a directory")])
def test_validate_says_what_an_existing_file_is_not(capsys, given, what, monkeypatch):
    monkeypatch.chdir(ROOT)
    code, out, err = _run(["validate", given], capsys)
    assert code == exitcodes.BAD_INPUT
    assert f"{given}: {what}, not a target YAML" in _one_error_line(err) and "unknown target" not in err
