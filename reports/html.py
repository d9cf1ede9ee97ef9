"""PROFILE_FINDINGS.html: the Markdown report as one self-contained page.

The page is the Markdown the report step wrote, rendered (markdown-it-py, pinned in pyproject.toml:
the same Markdown gives the same bytes), with its plots embedded as data: URIs so that the file can be
mailed or opened alone; every other link stays relative to the run directory the page sits in (the
findings' files, the journal's lines), as the Markdown's do. No time, no path of this machine: a replay
writes the same bytes.
"""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path

from markdown_it import MarkdownIt

# Wide kernel tables scroll inside their own box rather than widening the page.
STYLE = """
body { font: 15px/1.5 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1f2328; max-width: 1100px; margin: 2em auto; padding: 0 1em; }
h1, h2, h3 { line-height: 1.25; border-bottom: 1px solid #d8dee4; padding-bottom: .3em; }
code { font: 13px/1.4 ui-monospace, "DejaVu Sans Mono", monospace; background: #f2f4f6; padding: .1em .3em; border-radius: 4px; overflow-wrap: anywhere; }
pre code { display: block; padding: .8em; overflow-x: auto; }
table { border-collapse: collapse; display: block; overflow-x: auto; margin: 1em 0; font-size: 13px; }
th, td { border: 1px solid #d0d7de; padding: .3em .6em; text-align: left; vertical-align: top; }
th { background: #f6f8fa; }
tr:nth-child(even) td { background: #fafbfc; }
blockquote { margin: 1em 0; padding: 0 1em; color: #414a53; border-left: 4px solid #d0d7de; }
img { max-width: 100%; height: auto; }
a { color: #0969da; }
""".strip()

_MIME = {".png": "image/png", ".svg": "image/svg+xml", ".jpg": "image/jpeg", ".jpeg": "image/jpeg"}


def _markdown() -> MarkdownIt:
    # No raw HTML: the Markdown escapes what it quotes (reports.format.md_text), so a kernel named
    # k<float> is text on the page too, never a tag.
    return MarkdownIt("commonmark", {"html": False}).enable("table")


def slug(text: str) -> str:
    """A heading's anchor as GitHub makes it, which the Markdown's own links (#where-the-model-failed) use."""
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def render_html(markdown: str, root: Path, title: str = "Profile findings") -> str:
    """The report's Markdown as a page; its images, relative to ``root`` (the directory the page is
    written to: the run's, or the one `report --html` writes to), read and embedded."""
    md = _markdown()
    tokens = md.parse(markdown)
    seen: dict[str, int] = {}
    for i, token in enumerate(tokens):
        if token.type == "heading_open":
            anchor = slug(tokens[i + 1].content)
            count = seen.get(anchor, 0)
            seen[anchor] = count + 1
            token.attrSet("id", anchor if count == 0 else f"{anchor}-{count}")
        for child in token.children or []:
            if child.type == "image":
                child.attrSet("src", _data_uri(root, str(child.attrGet("src"))))
    body = md.renderer.render(tokens, md.options, {})
    h1 = next((tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open" and t.tag == "h1"), title)
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            f"<title>{html.escape(h1)}</title>\n<style>\n{STYLE}\n</style>\n</head>\n<body>\n{body}</body>\n</html>\n")


def _data_uri(root: Path, src: str) -> str:
    """A plot the report names as a data: URI. One that is missing is an error: a page with a broken
    image would pass for a report."""
    path = root / src
    if not path.is_file():
        raise FileNotFoundError(f"the report's image {src} is not a file (from {root})")
    mime = _MIME.get(path.suffix.lower(), "application/octet-stream")
    return f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode('ascii')}"
