"""How a target's engine settings become reference-engine runs.

The sparse-decode backend is chosen the way the deployment chooses it: by the engine's own
environment variable (``SGLANG_SM120_FLASHMLA_BACKEND`` for dsv4-flash), whose values are the
backends the declared hardware's dispatch allows. The reference engine implements some of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent.config import Lever, ReferenceShapes, Target

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


def baseline(target: Target) -> Setting:
    return Setting("baseline", dict(target.engine.env), {})


def with_lever(target: Target, lever: Lever) -> Setting:
    return Setting(lever.name, {**target.engine.env, **lever.env}, dict(lever.options))


def execution_levers(target: Target, lever_results: list[dict]) -> list[Lever]:
    """The levers that moved throughput up and change only how the engine executes (options such as
    CUDA graphs), not which kernels it runs: the profile applies them, so it explains the deployment's
    kernels as the deployment would best run them."""
    movers = {r["name"] for r in lever_results if r["status"] == "moves up"}
    return [lever for lever in target.levers if lever.name in movers and lever.kind == "option"]


def with_levers(target: Target, levers: list[Lever]) -> Setting:
    if not levers:
        return baseline(target)
    options: dict[str, Any] = {}
    for lever in levers:
        options.update(lever.options)
    return Setting("baseline + " + " + ".join(lever.name for lever in levers), dict(target.engine.env), options)


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
    if lever.options.get("cuda_graph") and device != "cuda":
        return "CUDA graphs need a GPU; this box has none"
    unknown = sorted(set(lever.options) - {"cuda_graph"})
    if unknown:
        return f"the reference engine has no option {', '.join(unknown)}"
    _, reason = backend_for(target, with_lever(target, lever))
    if backend_for(target, with_lever(target, lever))[0] is None:
        return reason
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
        "pad_heads_to": shapes.pad_heads_to or target.deployment.pad_heads_to,
        "layers": min(shapes.layers, target.model.layers),
        "experts": shapes.experts,
        "attention": attention,
        "batch_sizes": batch_sizes,
        "context_len": shapes.context_len,
        "steps": shapes.steps,
        "warmup": shapes.warmup,
        "cuda_graph": bool(setting.options.get("cuda_graph", False)),
        "profile": profile,
        "seed": 0,
        "overrides": dict(shapes.overrides) or None,
    }


def bench_args(target: Target, device: str, setting: Setting, batch_sizes: list[int],
               profile: dict[str, int] | None = None, repeat: int | None = None) -> dict[str, Any]:
    """Arguments of one ``engine.bench`` tool call (the logged, replay-compared form)."""
    label = setting.label if repeat is None else f"{setting.label}#{repeat}"
    return {
        "label": label,
        "spec": bench_spec(target, device, setting, batch_sizes, profile),
        "env": setting.env,
        "timeout_s": target.engine.timeout_s,
    }


def profiled_shapes(target: Target, device: str) -> dict[str, int]:
    """The attention shapes the profile actually ran (reduced on a CPU box), per rank."""
    shapes = shapes_for(target, device)
    model = {**target.model.model_dump(), **shapes.overrides}
    tp = shapes.tp or target.deployment.tp
    heads = model["heads"] // tp
    pad = shapes.pad_heads_to or target.deployment.pad_heads_to or heads
    return {"heads_per_rank": heads, "kernel_heads": max(heads, pad), "topk": model["index_topk"],
            "window": model["sliding_window"]}
