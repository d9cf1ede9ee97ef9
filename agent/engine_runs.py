"""How a target's engine settings become reference-engine runs.

The sparse-decode backend is chosen the way the deployment chooses it: by the engine's own
environment variable (``SGLANG_SM120_FLASHMLA_BACKEND`` for dsv4-flash), whose values are the
backends the declared hardware's dispatch allows. The reference engine implements some of them.
"""

from __future__ import annotations

import json

from dataclasses import dataclass
from typing import Any

from agent.config import Lever, ReferenceShapes, Target
from agent.evidence import LeverResult, LeversData

# Values of the attention environment variable -> the reference engine's backend, or why it has none.
REFERENCE_BACKENDS = {"triton": "sglang-triton", "torch": "torch", "splitk": "splitk"}
NOT_IN_REFERENCE = {"flashinfer": "the reference engine has no FlashInfer backend (FlashInfer is not on the box)"}


@dataclass(frozen=True)
class Setting:
    """One configuration to benchmark: the deployment's, or it with one lever applied; ``backend``
    names an engine backend directly (a what-if path the declared hardware cannot take)."""

    label: str
    env: dict[str, str]
    options: dict[str, Any]
    backend: str | None = None


# The reference engine's options (tools/engines/reference/spec.py BenchSpec), with their defaults.
ENGINE_OPTIONS = {"cuda_graph": False, "compile": False, "moe": "grouped", "steps_per_graph": 1, "delay_frac": 0.0,
                  # a distributed engine's TP degree (None: the shapes') and expert parallelism (1 or the TP degree)
                  "tp": None, "ep": 1}
# Engine options a box must have a GPU for.
GPU_OPTIONS = {"cuda_graph"}
# Options that need a GPU when set away from their default, and why.
GPU_ONLY = {"cuda_graph": "CUDA graphs need a GPU", "steps_per_graph": "steps per graph replay need CUDA graphs (a GPU)",
            "delay_frac": "the planted delay is a GPU spin (torch.cuda._sleep)"}


def baseline_options(target: Target, device: str | None) -> tuple[dict[str, Any], list[str]]:
    """The deployment's engine options as this device can run them, and a note for each one it
    cannot (a CPU box runs the baseline without CUDA graphs). ``device`` None: as declared."""
    options, notes = dict(target.engine.options), []
    if device is not None and device != "cuda":
        for key in sorted(GPU_OPTIONS & set(options)):
            if options[key]:
                notes.append(f"the deployment runs with {key}; this box has no GPU, so the baseline runs without it")
                options[key] = False
    return options, notes


def baseline(target: Target, device: str | None = None) -> Setting:
    """The deployment's setting as it runs (its environment and engine options, CUDA graphs
    included where the box has a GPU)."""
    return Setting("baseline", dict(target.engine.env), baseline_options(target, device)[0])


def with_lever(target: Target, lever: Lever, device: str | None = None) -> Setting:
    """The baseline with one lever applied (its env and options over the baseline's)."""
    base = baseline(target, device)
    return Setting(lever.name, {**base.env, **lever.env}, {**base.options, **lever.options})


def with_levers(target: Target, levers: list[Lever], device: str | None = None) -> Setting:
    if not levers:
        return baseline(target, device)
    base = baseline(target, device)
    env, options = dict(base.env), dict(base.options)
    for lever in levers:
        env.update(lever.env)
        options.update(lever.options)
    return Setting("baseline + " + " + ".join(lever.name for lever in levers), env, options)


def what_if_backends(target: Target) -> set[str]:
    """Reference backends the declared hardware's gates keep the engine from (what-ifs)."""
    return {name for name, sms in target.engine.what_if_backends.items() if target.deployment.sm not in sms}


def best_setting(target: Target, levers_data: LeversData | dict, what_if: set[str] | None = None) -> list[Lever]:
    """The levers of the best measured setting the declared hardware allows: [] for the baseline,
    or the one lever whose measured setting is fastest among those that moved up with outputs
    matching the baseline's and timings comparable with it (a Triton backend under the CPU
    interpreter is not compared with a native one). Never a what-if backend (``what_if``, default
    :func:`what_if_backends`). Only measured settings are chosen: two movers together were never
    run together, so their combination is not offered. ``levers_data`` is the levers finding's data, typed (or as the levers step drafts it)."""
    excluded = what_if_backends(target) if what_if is None else set(what_if)
    by_name = {lever.name: lever for lever in target.levers}
    best, best_ratio = None, 1.0
    results = (levers_data.levers if isinstance(levers_data, LeversData) else
               [LeverResult.model_validate(r) for r in levers_data["levers"]])
    for result in results:
        lever = by_name.get(result.name)
        if lever is None or result.status != "moves up" or not result.comparable:
            continue
        if not (result.output is not None and result.output.ok):
            continue
        backend, _ = backend_for(target, with_lever(target, lever))
        if backend in excluded:
            continue
        ratio = result.ratio
        if ratio > best_ratio:
            best, best_ratio = lever, ratio
    return [best] if best else []


def backend_for(target: Target, setting: Setting) -> tuple[str | None, str]:
    """The reference engine's attention backend for a setting, or None and the reason it cannot run."""
    if setting.backend:
        return setting.backend, f"backend {setting.backend} (what-if)"
    value = setting.env.get(target.engine.attention_env)
    if value is None:
        return None, f"{target.engine.attention_env} is not set in the engine's environment"
    if value in REFERENCE_BACKENDS:
        return REFERENCE_BACKENDS[value], f"{target.engine.attention_env}={value}"
    return None, NOT_IN_REFERENCE.get(value, f"{target.engine.attention_env}={value} is not a backend the reference engine knows")


def applicability(target: Target, lever: Lever, device: str) -> str | None:
    """Why a lever cannot be tried here (None when it can)."""
    if target.engine.kind not in lever.engines:
        return f"applies to {', '.join(lever.engines)}, not the {target.engine.kind} engine"
    if lever.kind == "flag":
        return "server flags apply to a live SGLang server, not the reference engine"
    if device in lever.skip_on:
        return lever.skip_on[device]
    unknown = sorted(set(lever.options) - set(ENGINE_OPTIONS))
    if unknown:
        return f"the reference engine has no option {', '.join(unknown)}"
    parallel = _parallel_reason(target, lever, device)
    if parallel:
        return parallel
    if device != "cuda":
        for name, why in GPU_ONLY.items():
            if lever.options.get(name, ENGINE_OPTIONS[name]) != ENGINE_OPTIONS[name]:
                return f"{why}; this box has none"
    base, setting = baseline(target, device), with_lever(target, lever, device)
    options = {**ENGINE_OPTIONS, **setting.options}
    if options["moe"] == "loop" and options["cuda_graph"]:
        return ("the per-expert MoE loop reads each expert's token count on the host, which a CUDA graph cannot "
                "capture: the lever must also set cuda_graph false")
    if options["steps_per_graph"] > 1 and not options["cuda_graph"]:
        return "steps per graph replay need the setting to run with CUDA graphs"
    if (setting.env, setting.options) == (base.env, base.options):
        held = ", ".join(f"{k}={v}" for k, v in sorted({**lever.env, **lever.options}.items()))
        why = "; this box has no GPU" if device != "cuda" and set(lever.options) & GPU_OPTIONS else ""
        return f"the baseline already runs with {held} here{why}"
    backend, reason = backend_for(target, setting)
    if backend is None:
        return reason
    return None


def _parallel_reason(target: Target, lever: Lever, device: str) -> str | None:
    """Why a parallelism lever means nothing here: NCCL variables where no NCCL runs, TP/EP without rank processes."""
    shapes = shapes_for(target, device)
    nccl = ", ".join(sorted(k for k in lever.env if k.startswith("NCCL_")))
    if nccl and not shapes.distributed:
        return f"not applicable: {nccl} tunes NCCL's collectives; this engine runs one process, with no collective"
    if nccl and device != "cuda":
        return (f"not applicable to gloo: {nccl} tunes NCCL; on a CPU box the ranks' collectives run over gloo, which "
                f"reads no NCCL variable")
    if lever.env.get("NCCL_ALGO", "").upper().startswith("NVLS"):
        return "the NVLS algorithms are never used: NVLink multicast stays off (NCCL_NVLS_ENABLE=0)"
    if ("tp" in lever.options or lever.options.get("ep", 1) != 1) and not shapes.distributed:
        return "the TP degree and expert parallelism need the engine run distributed (one process per rank)"
    return None


def shapes_for(target: Target, device: str) -> ReferenceShapes:
    return target.engine.gpu if device == "cuda" else target.engine.cpu


def measured_batch(target: Target, device: str) -> int:
    """The decode batch the engine is measured at: the goal's concurrency unless this device's shapes reduce it."""
    return shapes_for(target, device).batch or target.goal.concurrency


def bench_spec(target: Target, device: str, setting: Setting, batch_sizes: list[int],
               profile: dict[str, int] | None = None) -> dict[str, Any]:
    """The reference engine's JSON spec for one benchmark (and optionally a profile)."""
    shapes = shapes_for(target, device)
    attention, reason = backend_for(target, setting)
    if attention is None:
        raise ValueError(reason)
    return {
        "device": device,
        "model": target.model.model_dump(exclude={"name"}),
        "tp": shapes.tp or target.deployment.tp,
        **({"distributed": True} if shapes.distributed else {}),
        "pad_heads_to": shapes.pad_heads_to or target.deployment.pad_heads_to,
        "layers": min(shapes.layers, target.model.layers),
        "experts": shapes.experts,
        "attention": attention,
        "batch_sizes": batch_sizes,
        "context_len": shapes.context_len,
        "steps": shapes.steps,
        "warmup": shapes.warmup,
        "cuda_graph": bool(setting.options.get("cuda_graph", False)),
        # other options only when set away from their defaults, so specs without them stay as they were logged
        **{name: setting.options[name] for name, default in ENGINE_OPTIONS.items()
           if name != "cuda_graph" and setting.options.get(name, default) != default},
        "profile": profile,
        "seed": 0,
        "overrides": dict(shapes.overrides) or None,
    }


def bench_args(target: Target, device: str, setting: Setting, batch_sizes: list[int],
               profile: dict[str, int] | None = None, repeat: int | str | None = None) -> dict[str, Any]:
    """Arguments of one ``engine.bench`` tool call (the logged, replay-compared form); ``repeat``
    tells runs of one setting apart in the label (``baseline#r2a``)."""
    label = setting.label if repeat is None else f"{setting.label}#{repeat}"
    return {
        "label": label,
        "spec": bench_spec(target, device, setting, batch_sizes, profile),
        "env": setting.env,
        "timeout_s": target.engine.timeout_s,
    }


def sweep_args(target: Target, device: str, runs: list[tuple[str, Setting]], batch: int) -> dict[str, Any]:
    """Arguments of one ``engine.sweep`` call: the first setting's bench spec as the base, then each
    (label, setting) as the base with its per-run changes (attention, engine options) and env."""
    specs = [bench_spec(target, device, setting, [batch]) for _, setting in runs]
    base = specs[0]
    out = []
    for (label, setting), spec in zip(runs, specs):
        shared = {k: v for k, v in spec.items() if k not in SWEEP_RUN_FIELDS}
        if shared != {k: v for k, v in base.items() if k not in SWEEP_RUN_FIELDS}:
            raise ValueError(f"{label}: differs from the sweep's base beyond its per-run fields")
        changes = {k: spec.get(k, ENGINE_OPTIONS.get(k)) for k in SWEEP_RUN_FIELDS
                   if spec.get(k, ENGINE_OPTIONS.get(k)) != base.get(k, ENGINE_OPTIONS.get(k))}
        out.append({"label": label, "changes": changes, "env": setting.env})
    return {"label": f"sweep of {len(runs)} runs", "spec": {"base": base, "runs": out},
            "env": runs[0][1].env, "timeout_s": target.engine.timeout_s}


# tools/engines/reference/sweep.py: the records a sweep process leaves as each run ends.
SWEEP_PROGRESS = "sweep_runs.jsonl"


def sweep_watch(tool: str, args: dict[str, Any], report) -> Any:
    """For a sweep call (``engine.sweep``, ``sglang.sweep``: a line in SWEEP_PROGRESS as each run ends),
    a watch of its output folder calling ``report(done, total, "runs")`` when the runs done change;
    None for any other tool. Only the progress view reads it: the journal has the call's result."""
    if tool not in ("engine.sweep", "sglang.sweep"):
        return None
    total = len((args.get("spec") or {}).get("runs") or [])
    shown = [0]

    def watch(out) -> None:
        try:
            lines = (out / SWEEP_PROGRESS).read_text().splitlines()
        except OSError:  # not written yet
            return
        done = sum(1 for line in lines if line.startswith('{"run"'))
        if done != shown[0]:
            shown[0] = done
            report(done, total, "runs")
    # what a box whose output folder is elsewhere (SSH) must bring here for the watch to see it
    watch.reads = (SWEEP_PROGRESS,)
    return watch


# A sweep whose process keeps dying is not retried past this many deaths.
SWEEP_DEATHS = 3


def run_sweep(session, target: Target, device: str, runs: list[tuple[str, Setting]], batch: int) -> dict[str, Any]:
    """``engine.sweep`` over ``runs`` (labels ``SETTING#REPEAT``), going on when the sweep process
    dies: the runs it finished (its progress file, an artifact of the failed call) are kept, the run it
    died in is a failed run with the call's error (the signal, the stderr tail), that setting's later
    runs are not run (it would kill the next process too), and the rest run in a new process; at most
    SWEEP_DEATHS deaths. Returns the call's record shape (``ok``, ``seq`` the last call's line,
    ``data`` with ``runs`` in the order asked, each with the ``seq`` of the call that measured it),
    plus ``seqs`` (every call's line) and ``deaths``. A call that fails with no run finished and no
    progress (a bad spec, no weights) is returned as it is."""
    done: dict[str, dict] = {}
    seqs, meta, deaths, last = [], None, [], None
    while len(done) < len(runs):
        remaining = [(label, setting) for label, setting in runs if label not in done]
        last = session.call("engine.sweep", sweep_args(target, device, remaining, batch))
        seqs.append(last["seq"])
        if last["ok"]:
            meta = meta or {k: v for k, v in last["data"].items() if k != "runs"}
            done.update({r["label"]: {**r, "seq": last["seq"]} for r in last["data"]["runs"]})
            break
        progress = _sweep_progress(session, last)
        if progress is None:
            return last  # nothing to go on from: the call's failure is the sweep's
        meta = meta or progress[0]
        done.update({r["label"]: {**r, "seq": last["seq"]} for r in progress[1]})
        if len(progress[1]) >= len(remaining):
            break
        died_in = remaining[len(progress[1])][0]
        deaths.append({"label": died_in, "seq": last["seq"], "error": last["error"]})
        done[died_in] = {"label": died_in, "ok": False, "kind": "crash", "seq": last["seq"],
                         "error": f"the sweep process died in this run (engine.sweep, log line {last['seq']}): {last['error']}"}
        setting = died_in.split("#")[0]
        for label, _ in remaining:
            if label not in done and (label.split("#")[0] == setting or len(deaths) >= SWEEP_DEATHS):
                why = (f"the same setting killed the sweep process in run {died_in}" if label.split("#")[0] == setting
                       else f"the sweep process died {len(deaths)} times")
                done[label] = {"label": label, "ok": False, "kind": "not_run", "seq": last["seq"], "error": f"not run: {why}"}
    return {**last, "ok": True, "error": None, "data": {**meta, "runs": [done[label] for label, _ in runs]},
            "seqs": seqs, "deaths": deaths}


def _sweep_progress(session, result: dict) -> tuple[dict, list[dict]] | None:
    """(shared facts, finished runs' records) from a failed sweep call's progress file, or None when
    it left none (it died before its weights were built, or failed in a way that wrote nothing)."""
    ref = next((a for a in result.get("artifacts") or [] if a["name"] == SWEEP_PROGRESS), None)
    if ref is None:
        return None
    meta, done = None, []
    for line in session.artifact_path(ref).read_text().splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            break  # the line the process was writing when it died
        if "meta" in entry:
            meta = entry["meta"]
        elif "run" in entry:
            done.append(entry["run"])
    return (meta, done) if meta is not None else None


# tools/engines/reference/spec.py RUN_FIELDS (and DISTRIBUTED_RUN_FIELDS, tp and ep, which only levers of a
# distributed engine change): what one run of a sweep may change.
SWEEP_RUN_FIELDS = ("attention", "cuda_graph", "compile", "moe", "steps_per_graph", "delay_frac", "tp", "ep")


def profiled_shapes(target: Target, device: str) -> dict[str, int]:
    """The attention shapes the profile actually ran (reduced on a CPU box), per rank."""
    shapes = shapes_for(target, device)
    model = {**target.model.model_dump(), **shapes.overrides}
    tp = shapes.tp or target.deployment.tp
    heads = model["heads"] // tp
    pad = shapes.pad_heads_to or target.deployment.pad_heads_to or heads
    return {"heads_per_rank": heads, "kernel_heads": max(heads, pad), "topk": model["index_topk"],
            "window": model["sliding_window"]}
