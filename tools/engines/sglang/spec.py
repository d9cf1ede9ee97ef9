"""The sweep and profile specs (JSON objects), checked before anything is launched; defaults filled in."""

from __future__ import annotations

import re
import sys
from typing import Any

LOAD_FIELDS = ("input_len", "output_len", "concurrency", "num_prompts")
PROFILE_ACTIVITIES = ("CPU", "GPU", "MEM", "CUDA_PROFILER", "RPD")


class SpecError(ValueError):
    """The spec is unusable: one line saying which field and why."""


def _strings(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SpecError(f"bad spec: {where} must be a list of strings")
    return list(value)


def _env(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, (str, int, float))
                                              for k, v in value.items()):
        raise SpecError(f"bad spec: {where} must be an object of NAME: value")
    return {k: str(v) for k, v in value.items()}


def _positive_int(load: dict, name: str, minimum: int = 1) -> int:
    value = load.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise SpecError(f"bad spec: load.{name} must be an integer >= {minimum}, got {value!r}")
    return value


def _load(value: Any) -> dict:
    if not isinstance(value, dict):
        raise SpecError("bad spec: load must be an object (input_len, output_len, concurrency, num_prompts, ...)")
    load = {name: _positive_int(value, name) for name in LOAD_FIELDS}
    load["warmup_prompts"] = _positive_int({"w": value.get("warmup_prompts", load["concurrency"])}, "w", 0)
    load["seed"] = value.get("seed", 1)
    if not isinstance(load["seed"], int):
        raise SpecError("bad spec: load.seed must be an integer")
    return load


def _runs(value: Any) -> list[dict]:
    if not isinstance(value, list) or not value:
        raise SpecError("bad spec: runs must be a non-empty list of {label, args, env}")
    runs = []
    for i, entry in enumerate(value):
        if not isinstance(entry, dict) or not isinstance(entry.get("label"), str) or not entry["label"]:
            raise SpecError(f"bad spec: runs[{i}] needs a label (a non-empty string)")
        runs.append({"label": entry["label"], "args": _strings(entry.get("args", []), f"runs[{i}].args"),
                     "env": _env(entry.get("env"), f"runs[{i}].env")})
    return runs


def _number(spec: dict, name: str, default: float) -> float:
    value = spec.get(name, default)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
        raise SpecError(f"bad spec: {name} must be a positive number of seconds, got {value!r}")
    return float(value)


def sweep_spec(spec: Any) -> dict:
    """The checked sweep spec (see __main__'s docstring for its fields)."""
    if not isinstance(spec, dict):
        raise SpecError("bad spec: a JSON object is expected")
    # "{python}" is the box's interpreter: this tool's own (the catalog starts it with the box's Python)
    launcher = [sys.executable if part == "{python}" else part for part in _strings(spec.get("launcher"), "launcher")]
    if not launcher:
        raise SpecError("bad spec: launcher must name the server's command, e.g. [python, -m, sglang.launch_server]")
    tokenizer = spec.get("tokenizer")
    if tokenizer is not None and not isinstance(tokenizer, str):
        raise SpecError("bad spec: tokenizer must be a path or null")
    return {"launcher": launcher, "server_args": _strings(spec.get("server_args", []), "server_args"),
            "env": _env(spec.get("env"), "env"), "host": str(spec.get("host", "127.0.0.1")),
            "health_timeout_s": _number(spec, "health_timeout_s", 600), "stop_grace_s": _number(spec, "stop_grace_s", 20),
            "client_timeout_s": _number(spec, "client_timeout_s", 1800), "load": _load(spec.get("load")),
            "tokenizer": tokenizer, "runs": _runs(spec.get("runs"))}


def profile_spec(spec: Any) -> dict:
    """The checked profile spec: a sweep spec of exactly one run plus ``profile``."""
    checked = sweep_spec(spec)
    if len(checked["runs"]) != 1:
        raise SpecError(f"bad spec: a profile has exactly one run, got {len(checked['runs'])}")
    profile = spec.get("profile")
    if not isinstance(profile, dict):
        raise SpecError("bad spec: profile must be an object (num_steps, activities, with_stack, profile_by_stage)")
    activities = _strings(profile.get("activities", ["CPU", "GPU"]), "profile.activities")
    unknown = [a for a in activities if a not in PROFILE_ACTIVITIES]
    if unknown:
        raise SpecError(f"bad spec: profile.activities {unknown[0]!r} is not one of {', '.join(PROFILE_ACTIVITIES)}")
    checked["profile"] = {"num_steps": _positive_int(profile, "num_steps") if "num_steps" in profile else 5,
                          "activities": activities, "with_stack": bool(profile.get("with_stack", True)),
                          "profile_by_stage": bool(profile.get("profile_by_stage", True)),
                          "timeout_s": _number(profile, "timeout_s", 600)}
    return checked


def file_label(label: str, taken: set[str]) -> str:
    """``label`` as a file name (characters other than [A-Za-z0-9._-] become ``_``), unique among ``taken``."""
    base = re.sub(r"[^A-Za-z0-9._-]", "_", label) or "run"
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}-{n}"
    taken.add(name)
    return name
