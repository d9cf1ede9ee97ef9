"""scripts/suite_cpu.py: the suite's CPU seconds summed by test, file and shared investigation, from the lines
tests/conftest.py writes under PERF_INVESTIGATOR_TEST_CPU (issue #28: measure where the cores go first)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import ROOT
from scripts import suite_cpu


def test_the_summary_ranks_by_cpu_and_counts_the_shared_runs_in_the_total():
    lines = [{"test": "tests/a.py::t1", "cpu_s": 2.0, "wall_s": 9.0, "worker": "gw0"},
             {"test": "tests/b.py::t2", "cpu_s": 30.0, "wall_s": 31.0, "worker": "gw1"},
             {"test": "tests/a.py::t3", "cpu_s": 5.5, "wall_s": 5.0, "worker": "gw0"},
             {"shared": "dsv4", "cpu_s": 100.0, "wall_s": 80.0, "built_by": "builder"},
             {"shared": "other", "cpu_s": 30.0, "wall_s": 31.0, "built_by": "test"},  # inside tests/b.py::t2's 30
             {"shared": "sglang", "cpu_s": None, "wall_s": None}]
    text = suite_cpu.summary(lines, top=2)
    assert text.splitlines()[0].startswith("CPU in all: 138 s (3 tests, 3 shared investigations): at least 69 s")
    assert "other (built by a test: in its CPU below)" in text
    tests = text.split("costliest tests")[1].split("costliest files")[0]
    assert tests.index("tests/b.py::t2") < tests.index("tests/a.py::t3") and "tests/a.py::t1" not in tests  # top 2
    files = text.split("costliest files")[1]
    assert "30.0  tests/b.py" in files and "7.5  tests/a.py" in files


def test_a_test_session_with_the_variable_set_writes_a_line_per_test(tmp_path):
    log = tmp_path / "cpu.jsonl"
    test = tmp_path / "test_burn.py"
    test.write_text("def test_burn():\n    sum(i * i for i in range(3_000_000))\n\ndef test_idle():\n    pass\n")
    (tmp_path / "conftest.py").write_text(  # the suite's own hook, loaded under another name than this conftest's
        "import importlib.util, sys\n"
        f"sys.path[:0] = [{str(ROOT)!r}, {str(ROOT / 'tests')!r}]\n"
        f"spec = importlib.util.spec_from_file_location('suite_conftest', {str(ROOT / 'tests' / 'conftest.py')!r})\n"
        "suite = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(suite)\n"
        "pytest_runtest_protocol = suite.pytest_runtest_protocol\n")
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test)], cwd=tmp_path,
                         env={**os.environ, "PERF_INVESTIGATOR_TEST_CPU": str(log)}, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-2000:]
    records = {r["test"].rsplit("::", 1)[1]: r for r in map(json.loads, log.read_text().splitlines())}
    assert set(records) == {"test_burn", "test_idle"}
    assert records["test_burn"]["cpu_s"] > records["test_idle"]["cpu_s"]
