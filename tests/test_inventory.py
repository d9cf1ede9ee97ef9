"""Nothing the suite checked is lost unaccounted (issue 28): every test id of a recorded inventory
(tests/data/test-inventory/) is collected today, or named in the inventory with the test that holds its
checks now (collected today) or why it went; docs/test-map.md is what scripts/suite_inventory.py makes."""

from __future__ import annotations

import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import suite_inventory  # noqa: E402

INVENTORIES = sorted(suite_inventory.INVENTORIES.glob("*.json"))


@pytest.fixture(scope="module")
def now(request) -> list[str]:
    """The ids the suite collects: this session's own collection when it collected the whole suite (make test),
    else a collection of its own (a file or a -k/-m selection)."""
    config = request.config
    whole = not config.option.keyword and not config.option.markexpr and not config.option.deselect \
        and all((ROOT / a).resolve() in (ROOT, ROOT / "tests") for a in config.args)
    return sorted(item.nodeid for item in request.session.items) if whole else suite_inventory.collected()


@pytest.mark.parametrize("path", INVENTORIES, ids=lambda p: p.stem)
def test_every_recorded_test_is_kept_or_accounted_for(path, now):
    inventory = suite_inventory.load(path)
    seen = suite_inventory.accounting(inventory, now)
    assert not seen["unaccounted"], f"{len(seen['unaccounted'])} ids of {path.name} neither collected nor accounted for: " \
        f"{seen['unaccounted'][:10]}"
    for old, to, why in seen["moved"]:
        assert to in now, f"{old} moved to {to}, which is not collected"
        assert why
    assert set(inventory["slow"]) <= set(inventory["ids"])


def test_the_map_is_what_the_script_makes(now):
    assert suite_inventory.MAP.read_text() == suite_inventory.render_map(now, suite_inventory.count_asserts())


def test_the_assert_count_counts_asserts(tmp_path, monkeypatch):
    monkeypatch.setattr(suite_inventory, "_test_sources", lambda rev: {"t.py": "assert 1\ndef f():\n    assert a, b\n    x = 1\n"})
    assert suite_inventory.count_asserts() == 2
