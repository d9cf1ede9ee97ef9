"""How a target's SGLang deployment becomes server launches on the box: its settings as server arguments
and environment, the arguments of the box tools ``sglang.check``, ``sglang.sweep`` and ``sglang.profile``
(tools/engines/sglang), the ``--stand-in`` choice, and the preflight check of every argument a run
would pass against the box's installed SGLang.

A setting is the deployment's server arguments and environment with at most one lever's over them (its
``args`` after the deployment's, so that a flag both give takes the lever's value, as argparse keeps the
last). The stand-in (tools/engines/sglang_standin) is launched in SGLang's place with the same arguments
and environment, plus ``PERF_INVESTIGATOR_STANDIN_SPEC``: the reference engine's bench spec at the box's
shapes, which its decode steps run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from agent.box.catalog import run_tool
from agent import engines
from agent.config import STANDIN_LAUNCHER, Lever, Load, Target, TargetError
from agent.engine_runs import baseline as reference_baseline
from agent.engine_runs import bench_spec

STANDIN_SPEC_ENV = "PERF_INVESTIGATOR_STANDIN_SPEC"
# Where a run's numbers come from (tools/engines/sglang sweep records "server"); a single server serves all.
SINGLE, DECODE = "single", "decode"


@dataclass(frozen=True)
class ServerSetting:
    """One configuration of the server: the deployment's (``baseline``) or it with one lever applied.
    ``options`` is always empty (engine options are the reference engine's): it is there so that the
    steps reading a reference Setting's ``env``/``options`` read a server setting the same way."""

    label: str
    env: dict[str, str]
    args: list[str]
    options: dict[str, Any] = field(default_factory=dict)


def with_stand_in(target: Target) -> Target:
    """The target with its SGLang server replaced by the stand-in server (``--stand-in``), recorded in the
    run's target so that a replay reproduces the choice. Raises TargetError for a target whose engine
    is not SGLang (the stand-in stands in for an SGLang server only)."""
    if target.engine.kind != "sglang" or target.engine.server is None:
        raise TargetError(f"--stand-in: target {target.name} runs the {target.engine.kind} engine; the stand-in stands "
                          f"in for an SGLang server (engine kind sglang)")
    server = target.engine.server.model_copy(update={"stand_in": True, "launcher": list(STANDIN_LAUNCHER)})
    return target.model_copy(update={"engine": target.engine.model_copy(update={"server": server})})


def is_sglang(target: Target) -> bool:
    return target.engine.kind == "sglang"


def server_of(target: Target, served: list[str] | None = None) -> str:
    """What a finding calls the server its numbers come from: the stand-in or SGLang, and the servers the
    tool's records name (``served``: single, decode, router), else the layout's (single, or decode)."""
    server = target.engine.server
    names = "/".join(sorted(set(served or [])) or [DECODE if target.engine.disaggregation is not None else SINGLE])
    return f"the stand-in server ({names}; tools/engines/sglang_standin)" if server.stand_in else f"the SGLang server ({names})"


def lever_args(lever: Lever) -> list[str]:
    return engines.lever_args(lever)


def server_args(target: Target) -> list[str]:
    """The deployment's server arguments: the model, its load format, then the target's own."""
    server = target.engine.server
    args = ["--model-path", server.model_path]
    if server.load_format:
        args += ["--load-format", server.load_format]
    return args + list(server.args)


def baseline(target: Target) -> ServerSetting:
    return ServerSetting("baseline", dict(target.engine.env), server_args(target))


def with_lever(target: Target, lever: Lever) -> ServerSetting:
    base = baseline(target)
    return ServerSetting(lever.name, {**base.env, **lever.env}, base.args + lever_args(lever))


def applicability(target: Target, lever: Lever, device: str) -> str | None:
    """Why a lever cannot be tried on this server here (None when it can)."""
    if "sglang" not in lever.engines:
        return f"applies to {', '.join(lever.engines)}, not the sglang engine"
    if lever.kind == "option":
        return "engine options are the reference engine's; an SGLang lever sets server arguments or environment"
    if device in lever.skip_on:
        return lever.skip_on[device]
    if lever.env.get("NCCL_ALGO", "").upper().startswith("NVLS"):
        return "the NVLS algorithms are never used: NVLink multicast stays off (NCCL_NVLS_ENABLE=0)"
    nccl = ", ".join(sorted(k for k in lever.env if k.startswith("NCCL_")))
    if nccl and device != "cuda":
        return (f"not applicable to gloo: {nccl} tunes NCCL; on a CPU box the server's ranks (the stand-in's) "
                f"run their collectives over gloo, which reads no NCCL variable")
    base, setting = baseline(target), with_lever(target, lever)
    if setting.env == base.env and not lever_args(lever):
        held = ", ".join(f"{k}={v}" for k, v in sorted(lever.env.items()))
        return f"the baseline already runs with {held}"
    return None


def load_of(target: Target, device: str) -> Load:
    """The load on this box: the CPU's where the target gives one (the stand-in runs there), else the load."""
    return target.engine.load_cpu if device != "cuda" and target.engine.load_cpu is not None else target.engine.load


def load_spec(target: Target, device: str) -> dict[str, Any]:
    """The client's load: lengths, concurrency (default: the goal's), prompts, warm-up, seed."""
    load = load_of(target, device)
    concurrency = concurrency_of(target, device)
    return {"input_len": load.input_len, "output_len": load.output_len, "concurrency": concurrency,
            "num_prompts": load.num_prompts or 4 * concurrency,
            "warmup_prompts": concurrency if load.warmup_prompts is None else load.warmup_prompts, "seed": load.seed}


def concurrency_of(target: Target, device: str) -> int:
    """The requests in flight the server is measured at on this box (the levers' batch)."""
    return load_of(target, device).concurrency or target.goal.concurrency


def standin_env(target: Target, device: str) -> dict[str, str]:
    """The stand-in's bench spec (the reference engine's at the box's shapes, the deployment's baseline
    setting; each run's attention backend the stand-in reads from the run's environment), or nothing
    for a real server."""
    if not target.engine.server.stand_in:
        return {}
    spec = bench_spec(target, device, reference_baseline(target, device), [concurrency_of(target, device)])
    return {STANDIN_SPEC_ENV: json.dumps(spec, sort_keys=True)}


def _spec(target: Target, device: str, runs: list[tuple[str, ServerSetting]]) -> dict[str, Any]:
    """The shared part of a sweep/profile spec (the baseline's arguments and env) and each run's extras."""
    base = baseline(target)
    server = target.engine.server
    out = []
    for label, setting in runs:
        if setting.args[:len(base.args)] != base.args:
            raise ValueError(f"{label}: its arguments do not start with the deployment's")
        extra_env = {k: v for k, v in setting.env.items() if base.env.get(k) != v}
        out.append({"label": label, "args": setting.args[len(base.args):], "env": extra_env})
    return {"launcher": list(server.launcher), "server_args": base.args,
            "env": {**base.env, **standin_env(target, device)}, "host": server.host,
            "health_timeout_s": server.health_timeout_s, "load": load_spec(target, device),
            "tokenizer": load_of(target, device).tokenizer, "runs": out,
            # a prefill server, a decode server and a router (tools/engines/sglang/disagg.py reads it)
            **({"disaggregation": target.engine.disaggregation.model_dump(mode="json")}
               if target.engine.disaggregation is not None else {})}


def sweep_args(target: Target, device: str, runs: list[tuple[str, ServerSetting]]) -> dict[str, Any]:
    """Arguments of one ``sglang.sweep`` call: a server launched, loaded and stopped for each run, in order."""
    return {"label": f"server sweep of {len(runs)} runs", "spec": _spec(target, device, runs),
            "timeout_s": min(len(runs) * target.engine.server.run_timeout_s, 7 * 86_400)}


def profile_args(target: Target, device: str, setting: ServerSetting, steps: int) -> dict[str, Any]:
    """Arguments of one ``sglang.profile`` call: the setting's server under a decode-heavy load, profiled
    for ``steps`` decode steps by ``POST /start_profile`` (CPU and GPU activities, stacks, by stage)."""
    spec = _spec(target, device, [(f"{setting.label}#profile", setting)])
    spec["profile"] = {"num_steps": steps, "activities": ["CPU", "GPU"], "with_stack": True, "profile_by_stage": True}
    return {"label": f"profile of {setting.label}", "spec": spec, "timeout_s": target.engine.server.run_timeout_s}


def check_args(target: Target) -> dict[str, Any]:
    """Arguments of ``sglang.check``: the deployment's arguments and env and every lever's that applies to SGLang;
    for a disaggregated deployment also each side's and the router's."""
    base = baseline(target)
    levers = [{"name": lever.name, "args": lever_args(lever), "env": dict(lever.env)}
              for lever in target.levers if "sglang" in lever.engines and lever.kind != "option"]
    dis = target.engine.disaggregation
    # a disaggregated deployment: each server's and the router's command line is checked as launched
    extra = {"disaggregation": dis.model_dump(mode="json", exclude={"router": {"launcher", "health_timeout_s"}})} if dis else {}
    return {"spec": {"server_args": base.args, "env": base.env, "levers": levers, **extra}}


def check_sglang_args(target: Target, box, survey: dict | None = None) -> list[str]:
    """Every problem with the arguments and environment a run of ``target`` would launch the server with,
    one line each ([] when none), checked on ``box`` before any run exists: SGLang installed there, the
    stand-in's bench spec buildable (the reference engine has the baseline's attention backend), and
    ``sglang.check`` (the installed SGLang's own parser and environment declarations) finding nothing.
    ``survey`` is the box's survey record's data, when the caller has it (its device and software)."""
    problems = []
    software = (survey or {}).get("software") or {}
    if survey is not None and not software.get("sglang_dir"):
        problems.append("sglang is not installed on the box: the arguments are checked against its parser, and the "
                        "gates and grid read its source (pip install --no-deps sglang==0.5.23 beside the server's)")
        return problems
    if target.engine.server.stand_in:
        if survey is not None and not software.get("torch"):
            problems.append("torch is not installed on the box (the stand-in server runs the reference engine): pip install torch")
        device = "cuda" if (survey or {}).get("gpus") else "cpu"
        try:
            standin_env(target, device)
        except ValueError as exc:
            problems.append(f"the stand-in server cannot run the baseline: {exc}")
    record, raw = run_tool(box, "sglang.check", check_args(target))
    raw.cleanup()
    data = record.get("data") if isinstance(record.get("data"), dict) else None
    if data is None or "problems" not in data:
        problems.append(f"the argument check (sglang.check) failed on the box: {record['error']}")
        return problems
    for problem in data["problems"]:
        replacement = problem.get("replacement")
        replacement = f" (SGLang's replacement: {replacement})" if replacement and replacement not in problem["error"] else ""
        problems.append(f"{problem['where']}: {problem['item']}: {problem['error']}{replacement}")
    return problems
