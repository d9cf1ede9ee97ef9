"""The gate scan's results kept on the box (tools/box_cache.py), through the box tool as the catalog
runs it (``python -m tools.gates``, a process of its own): a second call with the same tree, scanner
and arguments prints what the first printed, marked cached; a changed file, argument or scanner is a
miss; ``--no-cache`` scans; a torn entry is a miss. On the synthetic engine tree (7 files)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import DATA, ROOT
from tools import box_cache as cache
from tools.box_cache import CACHE_ENV

TREE = DATA / "gates-synthetic" / "fakeengine"


@pytest.fixture
def tree(tmp_path) -> Path:
    copy = tmp_path / "fakeengine"
    shutil.copytree(TREE, copy)
    return copy


def box_tool(tree: Path, cache_dir: Path, *args: str) -> tuple[dict, str]:
    proc = subprocess.run([sys.executable, "-m", "tools.gates", "--source", str(tree), "--sm", "120", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, CACHE_ENV: str(cache_dir)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout), proc.stderr


def test_a_second_call_is_the_first_ones_result_marked_cached(tree, tmp_path):
    first, _ = box_tool(tree, tmp_path / "cache")
    second, said = box_tool(tree, tmp_path / "cache")
    assert first.pop("cached") is False and second.pop("cached") is True
    assert second == first
    assert "kept on this box" in said and "scanned" not in said  # it says where the result came from
    assert len(list((tmp_path / "cache" / "gates").glob("*.json"))) == 1


def test_a_changed_file_argument_or_no_cache_scans_again(tree, tmp_path):
    store = tmp_path / "cache"
    before, _ = box_tool(tree, store)
    # another argument: another key
    other_env, _ = box_tool(tree, store, "--env", "FAKE_TURBO_MODE=1")
    assert other_env["cached"] is False and other_env["env"] == {"FAKE_TURBO_MODE": "1"}
    # one file of the tree changed: a gate appears, and the cache does not hide it
    with open(tree / "attention.py", "a") as handle:
        handle.write("\n\ndef planted():\n    if torch.cuda.get_device_capability()[0] >= 12:\n        return 1\n    return 0\n")
    after, _ = box_tool(tree, store)
    assert after["cached"] is False
    assert len(after["evaluation"]) == len(before["evaluation"]) + 1
    # --no-cache always scans, and what it prints is what the cached entry holds
    forced, said = box_tool(tree, store, "--no-cache")
    assert forced.pop("cached") is False and "scanned" in said
    assert forced == {k: v for k, v in after.items() if k != "cached"}


def test_a_torn_entry_is_a_miss_and_is_replaced(tree, tmp_path):
    store = tmp_path / "cache"
    first, _ = box_tool(tree, store)
    (entry,) = (store / "gates").glob("*.json")
    entry.write_text(entry.read_text()[:100])  # cut short, as a crash mid-write would leave it without the rename
    again, _ = box_tool(tree, store)
    assert again["cached"] is False and json.loads(entry.read_text()) == {k: v for k, v in first.items() if k != "cached"}


def test_the_key_covers_the_scanners_own_source(tree, tmp_path, monkeypatch):
    inputs, engine = {"sm": 120}, {"package": "fakeengine", "version": None}
    scanner = tmp_path / "scanner"
    shutil.copytree(cache.GATES_CODE[0], scanner, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(cache, "GATES_CODE", (scanner,))
    key = cache.gates_key(tree, inputs, engine)
    assert cache.gates_key(tree, inputs, engine) == key  # deterministic
    with open(scanner / "walker.py", "a") as handle:
        handle.write("\n# a changed scanner\n")
    assert cache.gates_key(tree, inputs, engine) != key
    assert cache.gates_key(tree, {"sm": 90}, engine) != cache.gates_key(tree, inputs, engine)
    assert cache.gates_key(tree, inputs, {**engine, "version": "1"}) != cache.gates_key(tree, inputs, engine)


def test_other_arguments_evaluate_the_kept_scan_and_print_what_a_fresh_scan_prints(tree, tmp_path):
    """The scan is kept apart from its evaluation: a call with other sm, kernels or environment reads the
    first call's scan (it says so, and does not scan), and prints what a scan of its own prints."""
    store = tmp_path / "cache"
    box_tool(tree, store)
    other, said = box_tool(tree, store, "--env", "FAKE_TURBO_MODE=1", "--kernels", "fake_kernel")
    assert other.pop("cached") is False
    assert "scanned" not in said and "scan of" in said and "kept on this box" in said
    assert len(list((store / "gates-scan").glob("*.pickle"))) == 1
    fresh, said = box_tool(tree, tmp_path / "cold", "--env", "FAKE_TURBO_MODE=1", "--kernels", "fake_kernel")
    assert "scanned" in said and fresh.pop("cached") is False
    assert other == fresh


def test_callers_asking_at_once_share_one_scan(tree, tmp_path):
    """Two box tools started together with a cold cache: one scans, the other waits for it and reads its scan."""
    env = {**__import__("os").environ, CACHE_ENV: str(tmp_path / "cache")}
    procs = [subprocess.Popen([sys.executable, "-m", "tools.gates", "--source", str(tree), "--sm", sm], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for sm in ("90", "120")]
    said = [p.communicate(timeout=300)[1] for p in procs]
    assert all(p.returncode == 0 for p in procs), said
    assert sum("scanned" in s for s in said) == 1 and sum("scan of" in s for s in said) == 1, said
