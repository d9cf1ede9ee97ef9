"""A report's relative links (plots, findings, journal lines) made to open from wherever it is written."""

from __future__ import annotations

import os
import re
from pathlib import Path

_LINK = re.compile(r"(\]\()([^)\s]+)(\))")


def relink(markdown: str, run_dir: Path, out_dir: Path) -> str:
    """The report's relative links (plots, findings, journal lines) made relative to ``out_dir``:
    written outside its run, the report must still open them."""
    def fix(match: re.Match) -> str:
        target = match.group(2)
        if target.startswith(("#", "/")) or re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:", target):
            return match.group(0)  # an anchor, an absolute path, a URL: the same from anywhere
        path, hash_, anchor = target.partition("#")
        moved = os.path.relpath(os.path.abspath(run_dir / path), os.path.abspath(out_dir))
        return f"{match.group(1)}{Path(moved).as_posix()}{hash_}{anchor}{match.group(3)}"

    if os.path.abspath(run_dir) == os.path.abspath(out_dir):
        return markdown
    return _LINK.sub(fix, markdown)
