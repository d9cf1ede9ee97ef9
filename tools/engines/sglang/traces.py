"""The trace files an SGLang server writes on /start_profile, named as the installed 0.5.23 names them.

sglang/srt/managers/scheduler_components/profiler_manager.py ``_stop_profile`` (and, under SGLANG_PROFILE_V2,
sglang/srt/utils/profile_utils.py ``_ProfilerTorch.stop``) build the name as
``[PREFIX-]`` + ``-``.join([profile_id, "TP-{tp_rank}", "DP-{dp_rank}" if num_dp_ranks > 1, "PP-{pp_rank}" if
pp_size > 1, "EP-{moe_ep_rank}" if moe_ep_size > 1]) + stage suffix + ``.trace.json.gz``; the stage suffix
is ``-{ForwardMode.name}`` (``-DECODE``, ``-EXTEND``) by stage in v1, ``-{stage}`` (``-decode``, ``-prefill``,
from ``_get_stage_from_forward_mode``) in v2, and empty when not profiling by stage. ``profile_id`` is
``str(time.time())`` unless the request names one (tokenizer_control_mixin.py).
"""

from __future__ import annotations

import re
from pathlib import Path

TRACE_SUFFIX = ".trace.json.gz"
NAME = re.compile(r"^(?:(?P<prefix>.+)-)?(?P<id>[0-9][0-9.]*)-TP-(?P<tp>\d+)(?:-DP-(?P<dp>\d+))?(?:-PP-(?P<pp>\d+))?"
                  r"(?:-EP-(?P<ep>\d+))?(?:-(?P<stage>[A-Za-z_]+))?" + re.escape(TRACE_SUFFIX) + "$")
ROLES = {"DECODE": "decode", "decode": "decode", "EXTEND": "extend", "prefill": "prefill"}


def parse(name: str, tp_size: int) -> dict | None:
    """A trace's record (name, rank, role, tp/dp/pp/ep) from its file name; None for another file."""
    match = NAME.match(name)
    if not match:
        return None
    parts = {key: (int(match.group(key)) if match.group(key) is not None else None) for key in ("tp", "dp", "pp", "ep")}
    stage = match.group("stage")
    return {"name": name, "rank": (parts["pp"] or 0) * tp_size + parts["tp"], "role": ROLES.get(stage, stage),
            "stage": stage, "profile_id": match.group("id"), **parts}


def found(folder: Path, tp_size: int, relative_to: Path) -> list[dict]:
    """The traces in ``folder``, by rank then name; ``name`` relative to ``relative_to`` (--out)."""
    records = []
    for path in sorted(folder.glob("*" + TRACE_SUFFIX)) if folder.is_dir() else []:
        record = parse(path.name, tp_size)
        if record:
            record["name"] = str(path.relative_to(relative_to))
            records.append(record)
    return sorted(records, key=lambda r: (r["rank"], r["name"]))


def complete(records: list[dict], world: int, by_stage: bool) -> bool:
    """Every rank has its trace: its decode trace when profiling by stage, any trace otherwise."""
    ranks = {r["rank"] for r in records if not by_stage or r["role"] == "decode"}
    return ranks >= set(range(world))


def trace_info(records: list[dict], by_stage: bool, batch: int, steps: int, with_stack: bool) -> dict:
    """The traces as the agent's profile step reads the reference engine's ``trace`` (one file per rank)."""
    chosen = [r for r in records if not by_stage or r["role"] == "decode"]
    per_rank = {}
    for r in chosen:
        per_rank.setdefault(r["rank"], r)
    ranks = [per_rank[k] for k in sorted(per_rank)]
    files = [r["name"] for r in ranks]
    return {"file": files[0] if files else None, "files": files, "batch": batch, "steps": steps,
            "with_stack": with_stack, "operation_range": None, "eager_file": None, "eager_files": [None] * len(files),
            "ranks": [{"rank": r["rank"], "file": r["name"], "role": r["role"]} for r in ranks]}
