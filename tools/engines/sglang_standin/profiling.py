"""/start_profile and /stop_profile as sglang 0.5.23's scheduler runs them, over the stand-in's iterations.

Trace names follow 0.5.23's rule (srt/managers/scheduler_components/profiler_manager.py:333-359, the default
profiler; srt/utils/profile_utils.py:356-371 and :158, the SGLANG_PROFILE_V2 one):
``[PREFIX-]PROFILE_ID-TP-<tp_rank>[-DP-<dp_rank>][-PP-<pp_rank>][-EP-<moe_ep_rank>][STAGE].trace.json.gz``,
with DP/PP/EP only when that parallelism is above 1, PROFILE_ID ``str(time.time())`` unless the request
gives one (srt/managers/tokenizer_control_mixin.py:416), STAGE ``-EXTEND`` / ``-DECODE`` (the ForwardMode
name, profiler_manager.py:338) when profiling by stage, and under SGLANG_PROFILE_V2 ``-prefill`` /
``-decode`` (profile_utils.py:158, :186-190). The stand-in runs no DP or PP (those flags are refused at
start), so its names carry TP and, with --ep-size > 1, EP (moe_ep_rank = tp_rank when ep = tp).

Start and stop points (profiler_manager.py:413-457): not by stage, the profiler starts before the next
iteration and, with num_steps, stops after that many forward steps; by stage, an EXTEND trace starts at
the next prefill and ends at the first decode (or after num_steps prefills), then a DECODE trace covers
num_steps decode steps. Starts and stops fall between iterations: with --num-continuous-decode-steps N a
trace holds up to N - 1 steps past num_steps, as SGLang's does. with_stack and record_shapes default to
true unless the request or SGLANG_PROFILE_WITH_STACK / SGLANG_PROFILE_RECORD_SHAPES say false
(tokenizer_control_mixin.py:405-415).

Where the stand-in's traces still differ from a real server's (the real sglang 0.5.17's decode trace,
tests/data/real-sglang-0517-h100): the stand-in's profiler has a schedule, so its steps are ``ProfilerStep#N``
ranges that run from one step() to the next and hold the scheduler's host work; SGLang's has none, and marks
each forward step with a ``step[DECODE bs=N]`` span (profile_utils.py build_step_span_name) that holds the
forward only. tools.trace reads both. Marking the stand-in's steps as SGLang does puts its planted scheduler
overhead outside the steps, and the SGLang investigation's ceiling then fails (the dominant range's time
exceeds the steps' total): the agent's handling of host work outside the steps comes first (issue #34's note).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path


class ProfileError(RuntimeError):
    """A profile request SGLang refuses; the message is its."""


def _env_true(name: str) -> bool:
    return os.environ.get(name, "true").strip().lower() in ("1", "true", "yes", "on")


def v2() -> bool:
    return os.environ.get("SGLANG_PROFILE_V2", "false").strip().lower() in ("1", "true", "yes", "on")


def stage_suffix(stage: str | None) -> str:
    """'' (not by stage), -EXTEND / -DECODE, or -prefill / -decode under SGLANG_PROFILE_V2."""
    if stage is None:
        return ""
    if v2():
        return "-" + {"extend": "prefill", "decode": "decode"}[stage]
    return "-" + {"extend": "EXTEND", "decode": "DECODE"}[stage]


def trace_name(profile_id: str, prefix: str | None, tp_rank: int, ep_size: int, stage: str | None) -> str:
    parts = [profile_id, f"TP-{tp_rank}"]
    if ep_size > 1:
        parts.append(f"EP-{tp_rank}")
    return (f"{prefix}-" if prefix else "") + "-".join(parts) + stage_suffix(stage) + ".trace.json.gz"


@dataclass
class Profile:
    """One /start_profile request's state, driven by the scheduler between iterations."""

    output_dir: Path
    activities: list[str]
    with_stack: bool
    record_shapes: bool
    profile_id: str
    prefix: str | None
    num_steps: int | None
    by_stage: bool
    stage: str | None = None  # the stage of the trace being (or last) recorded, by stage only
    active: bool = False
    steps: int = 0
    done: set = field(default_factory=set)  # stages recorded ("all" when not by stage)
    files: list[str] = field(default_factory=list)

    @classmethod
    def from_request(cls, body: dict) -> "Profile":
        num_steps = body.get("num_steps")
        by_stage = bool(body.get("profile_by_stage"))
        if v2() and not by_stage:
            raise ProfileError("only support profile_by_stage=true now")  # profile_utils.py:111 (an assert there)
        if body.get("start_step") is not None:
            raise ProfileError("the stand-in does not take start_step")
        if by_stage and num_steps in (None, ""):
            raise ProfileError("profile_by_stage needs num_steps")  # 0.5.23 compares the counts with None
        return cls(output_dir=Path(body.get("output_dir") or os.environ.get("SGLANG_TORCH_PROFILER_DIR", "/tmp")).expanduser(),
                   activities=list(body.get("activities") or ["CPU", "GPU"]),
                   with_stack=body.get("with_stack") is not False and _env_true("SGLANG_PROFILE_WITH_STACK"),
                   record_shapes=body.get("record_shapes") is not False and _env_true("SGLANG_PROFILE_RECORD_SHAPES"),
                   profile_id=str(body.get("profile_id") or time.time()), prefix=body.get("profile_prefix") or None,
                   num_steps=int(num_steps) if num_steps not in (None, "") else None, by_stage=by_stage)

    def start_message(self) -> dict:
        return {"op": "profile_start", "activities": self.activities, "with_stack": self.with_stack,
                "record_shapes": self.record_shapes}

    def stop_message(self, world: int, ep_size: int) -> dict:
        names = [trace_name(self.profile_id, self.prefix, r, ep_size, self.stage if self.by_stage else None)
                 for r in range(world)]
        return {"op": "profile_stop", "files": [str(self.output_dir / n) for n in names]}

    def before(self, kind: str) -> tuple[bool, bool]:
        """(stop the running trace, start one) before an iteration of ``kind`` (prefill | decode)."""
        if not self.by_stage:
            return False, not self.active and not self.done
        stage = "extend" if kind == "prefill" else "decode"
        if stage in self.done or (stage == "extend" and self.stage == "decode"):
            return False, False  # a prefill during or after the decode trace starts none (SGLang's counts)
        if self.active and self.stage != stage:
            return True, True  # the first decode ends the extend trace and starts the decode one
        return False, not self.active

    def started(self, kind: str) -> None:
        self.active, self.steps = True, 0
        if self.by_stage:
            self.stage = "extend" if kind == "prefill" else "decode"

    def stopped(self, files: list[str]) -> None:
        self.active = False
        self.files += files
        self.done.add(self.stage if self.by_stage else "all")

    def after(self, steps: int) -> bool:
        """Count an iteration's forward steps; True when the running trace is due to stop."""
        if not self.active:
            return False
        self.steps += steps
        return self.num_steps is not None and self.steps >= self.num_steps

    def finished(self) -> bool:
        """Nothing more to record: the scheduler drops the request."""
        return ("decode" if self.by_stage else "all") in self.done
