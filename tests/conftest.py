import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from filelock import FileLock

from tools.gates.cache import CACHE_ENV

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


def _shared_dir(tmp_path_factory) -> Path:
    """A directory every pytest-xdist worker of this session sees (the workers' base temp dirs' parent),
    or the session's own base temp dir without xdist."""
    base = tmp_path_factory.getbasetemp()
    shared = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shared"
    shared.mkdir(exist_ok=True)
    return shared


def shared_run(tmp_path_factory, name: str, *argv, timeout: int = 1200, env: dict | None = None) -> Path:
    """``python -m agent investigate ARGV --runs-dir DIR`` once for the whole test session: the first
    worker that asks runs it, under a file lock in the session's shared directory; the others wait for
    it and take its run (a run a test only reads; tests that change a run work on copies). A run that
    failed fails every test that asks for it, with the same stderr, and is not tried again."""
    shared = _shared_dir(tmp_path_factory)
    record = shared / f"{name}.json"
    with FileLock(str(shared / f"{name}.lock")):
        if not record.exists():
            runs = shared / f"runs-{name}"
            runs.mkdir()
            try:
                out = agent("investigate", *argv, "--runs-dir", runs, timeout=timeout, env=env)
                outcome = {"rc": out.returncode, "stderr": out.stderr[-3000:],
                           "run": str(only_run(runs)) if out.returncode == 0 else None}
            except (subprocess.TimeoutExpired, AssertionError) as exc:
                outcome = {"rc": None, "stderr": f"{type(exc).__name__}: {exc}", "run": None}
            record.write_text(json.dumps(outcome))
        outcome = json.loads(record.read_text())
    assert outcome["rc"] == 0, outcome["stderr"]
    return Path(outcome["run"])


@pytest.fixture(scope="session", autouse=True)
def _box_cache(tmp_path_factory):
    """The box tools' cache (tools/gates/cache.py) of this test session alone, shared by its workers:
    every session starts cold, as on a fresh machine, and no result of an earlier session's code is served."""
    os.environ[CACHE_ENV] = str(_shared_dir(tmp_path_factory) / "box-cache")
    yield


@pytest.fixture(scope="session")
def dsv4_run(tmp_path_factory) -> Path:
    """The README's main job: the dsv4-flash investigation on this (GPU-less) machine, split-K included."""
    return shared_run(tmp_path_factory, "dsv4", "dsv4-flash", "--decide", "auto")


@pytest.fixture(scope="session")
def other_run(tmp_path_factory) -> Path:
    """A target with other shapes (16 heads at TP1, 170 SMs), stopped at the decision."""
    return shared_run(tmp_path_factory, "other", DATA / "targets" / "other-shapes.yaml", "--decide", "stop")


@pytest.fixture(scope="session")
def sglang_run(tmp_path_factory) -> Path:
    """Issue #15's Must show, locally: the SGLang target against the stand-in server (shared by
    tests/test_investigate_sglang.py and the SSH box's comparison in tests/test_box_ssh_investigate.py)."""
    return shared_run(tmp_path_factory, "sglang", "dsv4-flash-sglang", "--stand-in", "--decide", "auto", timeout=3600)


SGLANG_VERSION = "0.5.23"


def sglang_root() -> Path:
    """The installed sglang package (its source, installed with --no-deps), at the version the tests' facts were read in."""
    import importlib.metadata
    import importlib.util

    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        pytest.fail(f"sglang {SGLANG_VERSION} source is not installed; these tests read it: "
                    f"pip install --no-deps sglang=={SGLANG_VERSION}")
    version = importlib.metadata.version("sglang")
    if version != SGLANG_VERSION:
        pytest.fail(f"these facts were checked in sglang {SGLANG_VERSION}; installed is {version}")
    return Path(list(spec.submodule_search_locations)[0])


@pytest.fixture(scope="session")
def sglang_scan():
    """One gate scan of the installed sglang for the process (about half a minute on two cores): the
    scan reads the tree and takes no SM (tools.gates.scan), so the tests of its facts and the refactor
    nets of every SM's output share it; tools.gates evaluates it per SM and environment."""
    from tools.gates import scan

    return scan(sglang_root())
