"""Which rank a trace, or an event of a merged trace, belongs to.

SGLang names per-rank traces ``<id>-TP-<n>[-DP-<n>][-PP-<n>][-EP-<n>]....trace.json.gz`` and, when it
merges them, prefixes each event's pid with the same labels (``"[TP01-DP00] 0"``). A rank key is
the tensor-parallel rank alone (``"1"``) when that is the only label, else the labels joined
(``"TP1-DP0"``). Without labels, ``distributedInfo.rank`` written by torch.distributed is used.
"""

from __future__ import annotations

import re
from pathlib import Path

_AXES = ("tp", "dp", "pp", "ep")
_FILE_LABEL = {axis: re.compile(rf"(?:^|[-_.]){axis.upper()}-(\d+)(?=$|[-_.])") for axis in _AXES}
_PID_PREFIX = re.compile(r"^\[([A-Z0-9-]+)\]\s")
_PID_LABEL = {axis: re.compile(rf"(?:^|-){axis.upper()}(\d+)(?=$|-)") for axis in _AXES}


def rank_key(labels: dict[str, int]) -> str:
    """Canonical rank key for parallel-axis labels such as {"tp": 1} -> "1", {"tp": 1, "dp": 0} -> "TP1-DP0"."""
    if set(labels) == {"tp"}:
        return str(labels["tp"])
    return "-".join(f"{axis.upper()}{labels[axis]}" for axis in _AXES if axis in labels)


def rank_from_filename(path: str | Path) -> str | None:
    """Rank key from SGLang's file naming (``...-TP-1...``), or None when the name has no labels."""
    name = Path(path).name
    labels = {}
    for axis, pattern in _FILE_LABEL.items():
        match = pattern.search(name)
        if match:
            labels[axis] = int(match.group(1))
    return rank_key(labels) if labels else None


def rank_from_metadata(metadata: dict) -> str | None:
    """Rank key from the trace's ``distributedInfo.rank`` (torch.distributed's global rank)."""
    info = metadata.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), int):
        return str(info["rank"])
    return None


def rank_from_pid(pid: object) -> str | None:
    """Rank key from a merged trace's pid label (``"[TP01] 0"`` -> ``"1"``); None for a plain pid."""
    if not isinstance(pid, str):
        return None
    match = _PID_PREFIX.match(pid)
    if not match:
        return None
    labels = {}
    for axis, pattern in _PID_LABEL.items():
        found = pattern.search(match.group(1))
        if found:
            labels[axis] = int(found.group(1))
    return rank_key(labels) if labels else None


def rank_sort_key(key: str) -> tuple:
    """Order ranks numerically where they are numbers."""
    return (0, int(key), "") if key.isdigit() else (1, 0, key)
