"""The box-side analyzers print what they printed when the nets were captured (scripts/refactor_nets.py;
tests/data/refactor-nets/*.json): `gates --json` over the installed sglang 0.5.23 at sm_90/100/120 and
`grid --json` for every kernel under tests/data. A replay of a shipped run serves these tools' results
from its journal, so only this notices when a refactor changes what they compute. A deliberate change
re-captures (`python scripts/refactor_nets.py capture CASE`) and says why in its commit."""

from __future__ import annotations

import json
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import refactor_nets  # noqa: E402

CASES = refactor_nets.cases()


def test_every_case_has_a_capture_and_every_capture_a_case():
    assert set(refactor_nets.captures()) == set(CASES)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_tool_output_is_what_was_captured(name):
    want = refactor_nets.load_capture(name)
    got = refactor_nets.run_case(CASES[name])
    assert got["rc"] == want["rc"] == 0, got["stderr_last"]
    assert got["stdout"] == want["stdout"]
