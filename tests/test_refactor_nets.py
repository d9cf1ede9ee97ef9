"""The box-side analyzers print what they printed when the nets were captured (scripts/refactor_nets.py;
tests/data/refactor-nets/*.json): `gates --json` over the installed sglang 0.5.23 at sm_90/100/120 and
`grid --json` for every kernel under tests/data. A replay of a shipped run serves these tools' results
from its journal, so only this notices when a refactor changes what they compute. A deliberate change
re-captures (`python -m scripts.refactor_nets capture CASE`) and says why in its commit."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from conftest import ROOT, sglang_root

sys.path.insert(0, str(ROOT / "scripts"))
import refactor_nets  # noqa: E402

CASES = refactor_nets.cases()


def test_every_case_has_a_capture_and_every_capture_a_case():
    assert set(refactor_nets.captures()) == set(CASES)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_tool_output_is_what_was_captured(name, request, monkeypatch, capsys):
    want = refactor_nets.load_capture(name)
    if name.startswith("gates-sglang-"):
        got = _gates_over_the_sessions_scan(CASES[name], request.getfixturevalue("sglang_scan"), monkeypatch, capsys)
    else:
        got = refactor_nets.run_case(CASES[name])
    # a case whose compile needs a value not given (a pointer's dtype) exits BAD_INPUT after its report
    assert got["rc"] == want["rc"] in (0, 2), got["stderr_last"]
    assert got["stdout"] == want["stdout"] and got["stderr_last"] == want["stderr_last"]


def _gates_over_the_sessions_scan(args: list[str], sglang_scan, monkeypatch, capsys) -> dict:
    """``python -m agent ARGS`` for a gate case over the installed sglang, run in this process (the same
    argument parsing, evaluation and JSON as the command) with the scan of the tree being the session's
    one (conftest.py ``sglang_scan``): the scan takes no SM, so the six SM and kernel cases need one scan,
    not six. The command as a process of its own is the synthetic case's."""
    import tools.gates.cli as gates_cli
    from agent import cli

    root = sglang_root().resolve()

    def the_sessions_scan(scanned, cuda=None, progress=None):  # progress: told only on a terminal
        assert (Path(scanned).resolve(), cuda) == (root, None), (scanned, cuda)
        return sglang_scan

    monkeypatch.setattr(gates_cli, "scan", the_sessions_scan)
    capsys.readouterr()
    code = cli.main(args)
    out, err = capsys.readouterr()
    return refactor_nets.result_of(code, out, err)
