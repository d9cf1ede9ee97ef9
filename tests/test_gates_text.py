"""`gates`' text (issue 31, item 7) over the installed sglang: within the terminal's width, a screen or
two by default with every gate under --all, environment-variable names whole, counts at the end that
agree with the JSON's rows; and progress on a terminal's stderr while the tree is scanned. The scan
is the session's one (conftest.py ``sglang_scan``); only the synthetic tree is scanned afresh."""

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from conftest import ROOT, agent_on_terminal, screen_lines, sglang_root

COLUMNS, LINES = 100, 50


def _gates(args: list[str], sglang_scan, monkeypatch, capsys) -> str:
    import tools.gates.cli as gates_cli
    from agent import cli

    monkeypatch.setenv("COLUMNS", str(COLUMNS))
    monkeypatch.setenv("LINES", str(LINES))
    monkeypatch.setattr(gates_cli, "scan", lambda root, cuda=None, progress=None: sglang_scan)
    capsys.readouterr()
    assert cli.main(["gates", "--source", str(sglang_root()), "--sm", "120", *args]) == 0
    return capsys.readouterr().out


@pytest.fixture(scope="module")
def rows(sglang_scan) -> list[dict]:
    from tools.gates.model import _jsonable
    from tools.gates.table import evaluate

    return _jsonable(evaluate(sglang_scan, 120))


def test_the_default_text_fits_the_terminal_names_env_vars_whole_and_ends_with_counts(sglang_scan, rows, monkeypatch, capsys):
    out = _gates([], sglang_scan, monkeypatch, capsys)
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= COLUMNS
    assert len(lines) <= 2 * LINES  # a screen or two
    env = {name for row in rows for name in row["env"]}
    assert "SGLANG_SM120_FLASHMLA_BACKEND" in env and re.search(r"\bSGLANG_SM120_FLASHMLA_BACKEND\b", out)
    # every upper-case word that starts like an environment variable the gates read is one of them, whole
    for word in re.findall(r"\b[A-Z][A-Z0-9_]{7,}\b", out):
        if any(name.startswith(word) for name in env):
            assert word in env, f"{word} is an environment variable's name cut off"
    # the counts at the end: the rows' own, by verdict and kind
    tail = " ".join(lines[-4:])
    verdicts = Counter("?" if r["passes"] is None else "yes" if r["passes"] and r["definite"] else "if" if r["passes"] else "no"
                       for r in rows)
    assert f"{len(rows)} gates" in tail
    for text, verdict in (("passes", "yes"), ("passes if its conditions hold", "if"), ("ruled out", "no"), ("unresolved", "?")):
        assert f"{text} {verdicts[verdict]}" in tail
    for kind, count in Counter(r["kind"] for r in rows).items():
        assert f"{kind} {count}" in tail


def test_all_lists_every_gate_within_the_width(sglang_scan, rows, monkeypatch, capsys):
    out = _gates(["--all"], sglang_scan, monkeypatch, capsys)
    assert max(len(line) for line in out.splitlines()) <= COLUMNS
    listed = set(re.findall(r"\S+\.py:\d+", out))
    assert {f"{r['file']}:{r['line']}" for r in rows} <= listed
    for name in {name for row in rows for name in row["env"]}:
        assert re.search(rf"\b{re.escape(name)}\b", out), name


def test_progress_shows_on_a_terminal_while_scanning_and_is_gone_after():
    import pexpect

    source = ROOT / "tests" / "data" / "gates-synthetic" / "fakeengine"
    child = agent_on_terminal("gates", "--source", source, "--sm", "120", columns=COLUMNS)
    child.expect(pexpect.EOF)
    printed = child.logfile_read.getvalue()
    files = len(list(source.rglob("*.py")))
    assert f"read {files}/{files} files" in printed
    assert not [line for line in screen_lines(printed, columns=COLUMNS) if "files" in line and "/" in line and line.startswith("gates:")]

