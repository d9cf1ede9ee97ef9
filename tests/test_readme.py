"""The README stays short and true: its results table is the generator's output over the committed files, its
excerpts are what the tool prints for the shipped H200 example, and every link it gives resolves."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from conftest import ROOT

from agent import summary

sys.path.insert(0, str(ROOT / "scripts"))
import readme_results  # noqa: E402

README = (ROOT / "README.md").read_text()
EXAMPLE = Path("runs/examples/dsv4-flash-h100-20261207")


def test_the_results_table_is_the_generators_output():
    # a number edited by hand, or a results file re-recorded without regenerating, fails here
    assert readme_results.in_readme(README) == readme_results.table(), "run: python -m scripts.readme_results --write"


def test_the_readme_reads_in_a_minute():
    assert len(README.splitlines()) <= 150
    rows = readme_results.table().splitlines()[2:]
    assert len(rows) <= 12


def test_the_end_of_run_block_is_what_the_tool_prints(monkeypatch):
    monkeypatch.chdir(ROOT)  # the block names the report by the path it was given
    assert summary.block(summary.result(EXAMPLE), EXAMPLE.name) in README


def test_the_report_excerpt_is_the_reports_own_lines():
    run = f"runs/examples/{EXAMPLE.name}/"
    report = set((ROOT / EXAMPLE / "PROFILE_FINDINGS.md").read_text().splitlines())
    quoted = [line[2:] for line in README.splitlines() if line.startswith("> ") and line != "> "]
    assert len(quoted) >= 6
    for line in quoted:  # links were made to open from the repository root; undone, the line is the report's
        line = line.replace(f"]({run}PROFILE_FINDINGS.md#", "](#").replace(f"]({run}", "](")
        assert line in report, line


def test_every_relative_link_resolves():
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        prose = re.sub(r"```.*?```|`[^`]*`", "", page.read_text(), flags=re.S)  # code like `NAME[grid](...)` is no link
        for target in re.findall(r"\]\(([^)\s]+)\)", prose):
            if "://" in target or target.startswith("#"):
                continue
            assert (page.parent / target.split("#")[0]).exists(), (page.name, target)


def test_the_readme_gives_the_ci_test_command():
    # .ci/run runs `make test`; the README's quick start must name that same command
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^make test\s+#", README, re.M)
