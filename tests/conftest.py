import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"


def agent(*args, cwd=ROOT, env=None, timeout=1200) -> subprocess.CompletedProcess:
    """``python -m agent ARGS`` as a real subprocess."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "agent", *map(str, args)], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


def only_run(runs_dir: Path) -> Path:
    runs = [p for p in runs_dir.iterdir() if (p / "log.jsonl").exists()]
    assert len(runs) == 1, runs
    return runs[0]


def findings(run: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((run / "findings").glob("*.json"))]


def finding(run: Path, step: str) -> dict:
    return next(f for f in findings(run) if f["step"] == step)


def events(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]


@pytest.fixture(scope="session")
def dsv4_run(tmp_path_factory) -> Path:
    """The README's main job: the dsv4-flash investigation on this (GPU-less) machine, split-K included."""
    runs = tmp_path_factory.mktemp("runs-dsv4")
    out = agent("investigate", "dsv4-flash", "--runs-dir", runs, "--decide", "auto")
    assert out.returncode == 0, out.stderr[-3000:]
    return only_run(runs)


@pytest.fixture(scope="session")
def other_run(tmp_path_factory) -> Path:
    """A target with other shapes (16 heads at TP1, 170 SMs), stopped at the decision."""
    runs = tmp_path_factory.mktemp("runs-other")
    out = agent("investigate", DATA / "targets" / "other-shapes.yaml", "--runs-dir", runs, "--decide", "stop")
    assert out.returncode == 0, out.stderr[-3000:]
    return only_run(runs)


@pytest.fixture(scope="session")
def sglang_run(tmp_path_factory) -> Path:
    """Issue #15's Must show, locally: the SGLang target against the stand-in server (shared by
    tests/test_investigate_sglang.py and the SSH box's comparison in tests/test_box_ssh_investigate.py)."""
    runs = tmp_path_factory.mktemp("runs-sglang")
    out = agent("investigate", "dsv4-flash-sglang", "--stand-in", "--runs-dir", runs, "--decide", "auto", timeout=3600)
    assert out.returncode == 0, out.stderr[-3000:]
    return only_run(runs)
