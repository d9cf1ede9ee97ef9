"""PROFILE_FINDINGS.html (reports/html.py), the report as one page: the shipped examples' pages are the ones
this code writes, and the H200 example's page, opened in a real headless browser (Debian's chromium, which
`make test` installs as root: the Makefile's setup-browser-tests), loads with every plot drawn and every
link (findings, journal lines, anchors) resolving from the run directory it sits in."""

import html
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from reports.html import render_html

EXAMPLES = sorted(p for p in (ROOT / "runs" / "examples").iterdir() if (p / "log.jsonl").exists())
H200 = ROOT / "runs" / "examples" / "dsv4-flash-h200-20261202b"
BROWSERS = ("chromium-headless-shell", "chromium")

# Loads the report in an iframe (file:// pages may read each other under --allow-file-access-from-files) and,
# once it has loaded (its images with it), checks its images, fetches each relative link's file (a journal
# line's number must be a line of the journal) and looks up each anchor: all synchronously, so that the
# verdict is in the DOM before the harness's own load event, after which --dump-dom prints the DOM.
HARNESS = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><style>body { margin: 0 } iframe { border: 0; width: 100vw; height: 100vh }</style></head>
<body><pre id="verdict" hidden>pending</pre>
<script>
const frame = document.createElement("iframe");  // its listener set before its load can begin
frame.addEventListener("load", () => {
  const out = {};
  try {
    const doc = frame.contentDocument;
    out.title = doc.title;
    out.images = [...doc.images].map(i => ({alt: i.alt, width: i.naturalWidth, height: i.naturalHeight}));
    const hrefs = [...new Set([...doc.querySelectorAll("a[href]")].map(a => a.getAttribute("href")))];
    out.links = hrefs.map(href => check(doc, href));
  } catch (e) { out.error = String(e); }
  document.getElementById("verdict").textContent = JSON.stringify(out);
});
frame.src = "REPORT_URL";
document.body.appendChild(frame);
function check(doc, href) {
  if (href.startsWith("#")) return {href, ok: doc.getElementById(decodeURIComponent(href.slice(1))) !== null};
  // a citation's web page is not the run's: the test talks to no network (the link is checked to be https)
  if (/^https?:/.test(href)) return {href, ok: href.startsWith("https://"), external: true};
  const url = new URL(href, doc.baseURI);
  const xhr = new XMLHttpRequest();
  xhr.open("GET", url.href.split("#")[0], false);
  try { xhr.send(); } catch (e) { return {href, ok: false, error: String(e)}; }
  const text = xhr.responseText || "";
  let ok = (xhr.status === 0 || xhr.status === 200) && text.length > 0;
  const line = url.hash.match(/^#L(\\d+)$/);
  if (ok && line) ok = Number(line[1]) >= 1 && Number(line[1]) <= text.split("\\n").filter(l => l).length;
  return {href, ok};
}
</script></body></html>
"""


def _browser() -> str:
    found = next((path for path in map(shutil.which, BROWSERS) if path), None)
    if found is None:
        if os.geteuid() != 0:
            pytest.skip("no chromium and not root to install it (`make setup-browser-tests` as root does)")
        pytest.fail("no chromium although root: `make setup-browser-tests` installs Debian's chromium-headless-shell")
    return found


def _open(page: Path, tmp_path: Path, screenshot: Path | None = None) -> dict:
    """The harness's verdict on ``page`` as headless chromium saw it."""
    harness = tmp_path / f"harness-{page.parent.name}.html"
    harness.write_text(HARNESS.replace("REPORT_URL", page.resolve().as_uri()))
    argv = [_browser(), "--headless", "--disable-gpu", "--allow-file-access-from-files", "--virtual-time-budget=30000",
            "--window-size=1280,2400", "--dump-dom", harness.as_uri()]
    if os.geteuid() == 0:  # chromium refuses to run as root inside its sandbox
        argv.insert(1, "--no-sandbox")
    if screenshot is not None:
        argv.insert(1, f"--screenshot={screenshot}")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    found = re.search(r'<pre id="verdict" hidden="">(.*?)</pre>', done.stdout, re.S)
    assert found, f"no verdict in the dumped DOM: {done.stdout[:500]}"
    assert found.group(1) != "pending", "the report never loaded in the browser"
    return json.loads(html.unescape(found.group(1)))


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_the_shipped_page_is_the_one_this_code_writes(example):
    page = (example / "PROFILE_FINDINGS.html").read_text()
    assert page == render_html((example / "PROFILE_FINDINGS.md").read_text(), example)
    # self-contained: the plots inside, no file:// or absolute path of the machine that wrote it beyond what the
    # report itself quotes (the CPU example's survey names the interpreter it ran, under the checkout it ran in)
    md = (example / "PROFILE_FINDINGS.md").read_text()
    assert page.count('src="data:image/png;base64,') == md.count("![")
    assert page.count(str(ROOT)) == md.count(str(ROOT)) and "file://" not in page


def test_every_number_keeps_its_links_to_finding_and_journal_line():
    md = (H200 / "PROFILE_FINDINGS.md").read_text()
    page = (H200 / "PROFILE_FINDINGS.html").read_text()
    links = set(re.findall(r"\]\(((?:findings/|log\.jsonl#L)[^)]+)\)", md))
    assert len(links) > 20
    assert links == set(re.findall(r'href="((?:findings/|log\.jsonl#L)[^"]+)"', page))


def test_the_h200_example_renders_in_headless_chromium(tmp_path):
    shot = tmp_path / "PROFILE_FINDINGS.png"  # kept as the test's artifact
    verdict = _open(H200 / "PROFILE_FINDINGS.html", tmp_path, screenshot=shot)
    assert "error" not in verdict, verdict["error"]
    assert verdict["title"] == "Profile findings: dsv4-flash"
    assert [i["alt"] for i in verdict["images"]] == ["lever sweep", "kernel shares", "ceiling"]
    assert all(i["width"] > 0 and i["height"] > 0 for i in verdict["images"]), verdict["images"]
    hrefs = {link["href"] for link in verdict["links"]}
    assert any(h.startswith("findings/") for h in hrefs) and any(h.startswith("log.jsonl#L") for h in hrefs)
    assert "#where-the-model-failed" in hrefs
    assert [link for link in verdict["links"] if not link["ok"]] == []
    assert shot.stat().st_size > 10_000


def test_the_browser_check_sees_a_broken_image_and_dangling_links(tmp_path):
    """The same check on a copy of the page away from its run directory, with a plot that is a file again:
    it must fail, or its passing above says nothing."""
    page = (H200 / "PROFILE_FINDINGS.html").read_text()
    page = re.sub(r'src="data:image/png;base64,[^"]+"', 'src="artifacts/missing.png"', page, count=1)
    page = page.replace('href="#where-the-model-failed"', 'href="#nowhere"')
    copy = tmp_path / "elsewhere" / "PROFILE_FINDINGS.html"
    copy.parent.mkdir()
    copy.write_text(page)
    verdict = _open(copy, tmp_path)
    assert [i["width"] for i in verdict["images"]][0] == 0
    broken = {link["href"] for link in verdict["links"] if not link["ok"]}
    assert "#nowhere" in broken and "findings/02-levers.md" in broken and "log.jsonl#L10" in broken


def test_report_html_written_elsewhere_still_opens_its_run(tmp_path):
    """`report RUN --html OUT`: the page away from its run, its links made to open the run's files from there."""
    page = tmp_path / "elsewhere" / "findings.html"
    page.parent.mkdir()
    done = subprocess.run([sys.executable, "-m", "agent", "report", str(H200), "--html", str(page)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == str(page), done.stderr
    verdict = _open(page, tmp_path)
    assert len(verdict["images"]) == 3 and all(i["width"] > 0 for i in verdict["images"])
    assert any(link["href"].endswith("log.jsonl#L10") and link["href"] != "log.jsonl#L10" for link in verdict["links"])
    assert [link for link in verdict["links"] if not link["ok"]] == []
