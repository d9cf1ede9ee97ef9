"""Kernel names with Markdown or HTML special characters (C++ templates: ``<``, ``>``, ``|``,
backticks, ``*``) render as exactly themselves in every table: read back through a real CommonMark
renderer with GFM tables (markdown-it-py, which rich already brings), each stays whole in its cell."""

from __future__ import annotations

import html
import json
import shutil
from html.parser import HTMLParser

import git
import pytest
from markdown_it import MarkdownIt

from agent import runner
from reports.format import cell, code, md_text
from reports.render import render_finding, table
from schema.finding import Finding, Table

NASTY = [
    "void flash_fwd<Kernel_traits<128, 64>, true>(Params*, int*)",
    "cutlass::Kernel<at::native::CUDAFunctor_add<float>> | split",
    "kernel`with`ticks",
    "`leading and trailing`",
    "a ``double`` tick",
    "foo(_a_, *b*) [link](http://x) <script>alert(1)</script> &amp; ~~gone~~",
    "path\\|escaped \\* backslashes",
    "two\nlines",
]


class _Tables(HTMLParser):
    """Every table of an HTML page as rows of cell texts (header row first)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tables, self._cell = [], None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self.tables[-1][-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def tables_of(markdown: str) -> list[list[list[str]]]:
    parser = _Tables()
    parser.feed(MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(markdown))
    return parser.tables


def _one_line(name: str) -> str:
    return " ".join(name.splitlines())


def test_every_name_is_one_whole_cell():
    t = Table(title="kernels", columns=["kernel", "calls"], rows=[[name, 3] for name in NASTY])
    [rendered] = tables_of(table(t))
    assert rendered[0] == ["kernel", "calls"]
    assert [row for row in rendered[1:]] == [[_one_line(name), "3"] for name in NASTY]


def test_code_spans_hold_any_name_in_a_table():
    rows = "\n".join(f"| {code(name)} | x |" for name in NASTY)
    [rendered] = tables_of(f"| kernel | y |\n| --- | --- |\n{rows}\n")
    assert [row[0] for row in rendered[1:]] == [_one_line(name) for name in NASTY]
    assert all(len(row) == 2 for row in rendered)


def test_plain_names_and_numbers_keep_their_bytes():
    # what could not form Markdown is not escaped: the shipped reports' names and comparisons stay as written
    for plain in ["_tiled_sparse_decode_kernel", "sm_120 <=90", ">=100", "1.5x", "a_b_c", "TensorIterator&)"]:
        assert md_text(plain) == plain
    assert cell(0.5, "share") == "50.0%" and cell(1234) == "1,234"


def test_finding_files_render_names_safely():
    finding = Finding(index=3, step="profile", headline="h", verdict="v",
                      tables=[Table(title="Kernels", columns=["name", "share"], rows=[[n, 0.1] for n in NASTY],
                                    note="names such as " + NASTY[1])])
    [rendered] = tables_of(render_finding(finding))
    assert [row[0] for row in rendered[1:]] == [_one_line(n) for n in NASTY]
    assert NASTY[1] in html.unescape(MarkdownIt("commonmark").enable("table").render(render_finding(finding)))


@pytest.mark.slow
def test_every_table_of_a_report_keeps_a_nasty_kernel_name(dsv4_run, tmp_path):
    """The dominant kernel renamed, in the journal's findings, to a C++ template name with every
    special character: every table of the re-rendered report keeps its columns, and the name is
    whole wherever it appears in a cell."""
    run = tmp_path / "run"
    shutil.copytree(dsv4_run, run, ignore=shutil.ignore_patterns(".git", "checkpoints.sqlite*", "run.lock"))
    git.Repo.init(run)
    name = "_tiled_sparse_decode_kernel"
    nasty = "sparse<Traits<64, 1>, `x`>(float*, int*)|2"
    log = run / "log.jsonl"
    text = log.read_text()
    assert name in text
    log.write_text(text.replace(name, json.dumps(nasty)[1:-1]))
    tables = tables_of(runner.render(run))
    assert len(tables) >= 5
    for rows in tables:
        assert all(len(row) == len(rows[0]) for row in rows), rows[0]
    cells = [c for rows in tables for row in rows for c in row]
    assert any(c == nasty for c in cells)  # a kernel table's name cell
    assert any(c.startswith(nasty + ":") for c in cells)  # the goal table's dominant-kernel row
    assert not any("sparse&lt;" in c or "sparse\\<" in c for c in cells)  # no escape shows through
