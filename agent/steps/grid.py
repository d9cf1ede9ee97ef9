"""Grid: the dominant kernel's launch grid read from its source, at the deployment's shapes."""

from __future__ import annotations

from typing import Any

from agent.config import Target
from agent.engines import profiled_shapes
from agent.session import Session
from agent.state import Finding, InvestigationState, Number, Table, finding_for, next_index
from agent.steps.survey import target_of


def evaluation_points(target: Target, box: dict, profile: dict) -> list[dict[str, Any]]:
    """Where to evaluate the grid: the deployment's per-rank shapes at batch 1 and at the goal's
    concurrency (declared SMs and architecture), and the shapes the profile ran where they differ
    (the box's SMs and architecture when it has a GPU)."""
    symbols = target.engine.shape_symbols
    constants = dict(target.engine.kernel_constants)
    deployment = target.deployment
    heads = deployment.kernel_heads(target.model.heads)
    points = []
    for batch in sorted({1, target.goal.concurrency}):
        points.append({
            "label": f"deployment B={batch}", "where": "declared",
            "shapes": {**constants, symbols["batch"]: batch, symbols["heads"]: heads, symbols["topk"]: target.model.index_topk},
            "sms": deployment.sm_count, "arch": f"sm_{deployment.sm}", "batch": batch,
            "heads_per_rank": deployment.heads_per_rank(target.model.heads), "kernel_heads": heads,
        })
    ran = profiled_shapes(target, box["device"])
    batch = profile["batch"]
    profiled = {**constants, symbols["batch"]: batch, symbols["heads"]: ran["kernel_heads"], symbols["topk"]: ran["topk"]}
    if profiled != points[-1]["shapes"] or box["device"] == "cuda":
        points.append({
            "label": f"profiled B={batch}", "where": "box",
            "shapes": profiled, "sms": box["sm_count"] or deployment.sm_count,
            "arch": f"sm_{box['sm']}" if box["sm"] else f"sm_{deployment.sm}", "batch": batch,
            "heads_per_rank": ran["heads_per_rank"], "kernel_heads": ran["kernel_heads"],
            "config": profile.get("kernel_config"),
        })
    return points


def primary_config(report: dict[str, Any]) -> dict[str, Any] | None:
    """The config the box reported choosing, else the first candidate."""
    configs = report.get("configs") or []
    chosen = report.get("chosen")
    for config in configs:
        if chosen and all(config["config"].get(k) == v for k, v in chosen.items()):
            return config
    return configs[0] if configs else None


def reduction_loop(report: dict[str, Any]) -> dict[str, Any] | None:
    uncovered = set(report.get("uncovered_reduction_loops") or [])
    loops = [loop for loop in report.get("loops", []) if loop["line"] in uncovered]
    return loops[0] if loops else None


def splitk_estimate(report: dict[str, Any], arch: str) -> dict[str, Any] | None:
    """How much more parallel the kernel gets if its serial reduction loop is split across programs.

    With P programs, S SMs and b resident blocks per SM, one wave holds S*b programs; splitting a
    loop of n tiles into k pieces multiplies the programs by k, useful up to min(n, S*b/P). This is a
    structural upper estimate of a latency-bound kernel's speedup, not a measurement.
    """
    config = primary_config(report)
    loop = reduction_loop(report)
    if config is None or loop is None or not config.get("programs"):
        return None
    trips = loop["trip_counts"].get(config["label"])
    blocks = (config.get("blocks_per_sm") or {}).get(arch) or 1
    slots = report["sms"] * blocks
    if not trips:
        return None
    gain = max(1.0, min(float(trips), slots / config["programs"]))
    fill = f"{config['programs']} programs fill {config['programs'] / slots:.2f} of one wave ({report['sms']} SMs x {blocks} blocks)"
    if gain == 1.0:
        # said outright, since a reader sees "1" beside a measured gain: the grid cannot explain one
        return {"speedup": gain, "basis": (f"{fill}: splitting the {trips}-tile loop adds no parallelism (1x, structural "
                                           "estimate); a gain must come from elsewhere, e.g. fewer bytes gathered per head")}
    return {"speedup": gain, "basis": (f"{fill}; splitting the {trips}-tile loop raises parallelism at most {gain:.3g}x "
                                       "(structural estimate)")}


def _display_path(path: str, source_root: str | None) -> str:
    if source_root and path.startswith(source_root.rstrip("/") + "/"):
        return "sglang/" + path[len(source_root.rstrip("/")) + 1:]
    return path


def read_grid(state: InvestigationState, session: Session) -> Finding:
    """Find the dominant kernel's source on the box, its launch site and grid expression, and evaluate
    them at the deployment's per-rank shapes (batch 1 and the goal's concurrency, declared SMs and
    architecture) and at the profiled shapes: programs against SMs, waves, the serial loops each
    program runs with their trip counts per config, registers, and how many programs compute padding.
    Split-K is a candidate when a serial reduction loop is not covered by the grid and the programs
    are less than one wave at some evaluated decode batch."""
    target = target_of(state)
    survey = finding_for(state, "survey")
    profile = finding_for(state, "profile")
    box = survey.data["box"]
    kernel = profile.data["dominant"]["name"]
    source_root = survey.data["software"].get("sglang_dir")
    reports, seqs, failures = [], [], []
    for point in evaluation_points(target, box, profile.data):
        args = {"kernel": kernel, "source": source_root, "shapes": point["shapes"], "sms": point["sms"],
                "arch": point["arch"]}
        if point.get("config"):
            args["config"] = point["config"]
        result = session.call("kernel.grid", args)
        seqs.append(result["call_seq"])
        if result["ok"]:
            reports.append((point, result["data"]))
        else:
            failures.append(f"{point['label']}: {result['error']}")
    if not reports:
        return Finding(index=next_index(state), step="grid", verdict="no-source",
                       headline=f"{kernel}'s grid could not be read: {'; '.join(failures)}",
                       evidence=seqs, labels=["failed"],
                       data={"kernel": kernel, "splitk_candidate": False, "failures": failures,
                             "splitk_reason": "the kernel's source and grid could not be read"})

    declared_sm_count = target.deployment.sm_count
    rows, loop_rows, candidates = [], [], []
    for point, report in reports:
        config = primary_config(report)
        arch = point["arch"]
        occupancy = (config or {}).get("occupancy", {}).get(arch) or {}
        resources = (config or {}).get("resources", {}).get(arch) or {}
        padding = (point["kernel_heads"] - point["heads_per_rank"]) * point["batch"]
        programs = report.get("programs")
        rows.append([
            point["label"], report.get("grid_expr"), "x".join(str(d) for d in report.get("grid") or []) or "-", programs,
            programs / declared_sm_count if programs else None,
            programs / box["sm_count"] if programs and box["sm_count"] else None,
            (config or {}).get("waves", {}).get(arch), resources.get("registers"), resources.get("spill_stores"),
            occupancy.get("occupancy"), padding, "yes" if report.get("split_k_candidate") else "no",
        ])
        if report.get("split_k_candidate"):
            candidates.append(point["label"])
        for loop in report.get("loops", []):
            if loop.get("reduction") or loop.get("trip_counts"):
                trips = ", ".join(f"{label}: {count}" for label, count in loop["trip_counts"].items())
                loop_rows.append([point["label"], loop["text"], loop["line"], trips or "-",
                                  ", ".join(loop.get("accumulators") or loop.get("carries") or []) or "-",
                                  "yes" if loop.get("reduction") else "no", "yes" if loop.get("covered_by_grid") else "no"])

    first_point, first = reports[0]
    where = f"{_display_path(first['file'], source_root)}:{first['line']}"
    launcher = first.get("launcher") or {}
    deployment_concurrency = next((r for p, r in reports if p["label"] == f"deployment B={target.goal.concurrency}"), first)
    loop = reduction_loop(first)
    if candidates:
        reason = (f"offered: the loop `{loop['text'] if loop else '?'}` is a serial reduction the grid does not cover, "
                  f"and the grid is under one wave at {', '.join(candidates)}")
    elif first.get("serial_reduction_uncovered"):
        reason = "not offered: a serial reduction loop is not covered by the grid, but every evaluated grid fills a wave or more"
    else:
        reason = "not offered: no serial reduction loop outside the grid"
    box_point = next((r for p, r in reports if p["where"] == "box"), None)
    estimate = splitk_estimate(box_point or deployment_concurrency, (next((p for p, r in reports if p["where"] == "box"), first_point))["arch"])
    headline = (f"{kernel} ({where}) launches grid {first.get('grid_expr')}: {first.get('programs')} programs at "
                f"{first_point['label']} on {declared_sm_count} SMs ({(first.get('programs') or 0) / declared_sm_count:.2f} per SM)"
                + (f"; each loops over {loop['stop_expr']} serially" if loop else ""))
    return Finding(
        index=next_index(state), step="grid", headline=headline,
        verdict="splitk-candidate" if candidates else "no-splitk",
        numbers={
            "programs_b1": Number(value=first.get("programs"), unit="programs", label=f"{first_point['label']}", seqs=seqs[:1]),
            "coverage_declared": Number(value=(first.get("programs") or 0) / declared_sm_count, unit="programs/SM",
                                        label=f"programs per SM on the declared {declared_sm_count} SMs", seqs=seqs[:1]),
        },
        tables=[
            Table(title=f"Grid of {kernel}", columns=["shapes", "grid", "dims", "programs", "per declared SM",
                                                     "per box SM", "waves", "registers", "spill bytes", "occupancy share",
                                                     "padding programs", "split-K"], rows=rows,
                  note=f"launcher {launcher.get('function', '?')} at {_display_path(launcher.get('file', ''), source_root)}:{launcher.get('launch_line', launcher.get('line', '?'))}; "
                       "waves, registers and occupancy for each row's architecture (its first or chosen config)"),
            Table(title="Loops each program runs", columns=["shapes", "loop", "line", "trip count per config",
                                                           "accumulators", "reduction", "covered by grid"], rows=loop_rows),
        ],
        evidence=seqs,
        labels=(["failed"] if failures else []),
        data={"kernel": kernel, "where": where, "reports": [{"point": p, "report": r} for p, r in reports],
              "splitk_candidate": bool(candidates), "splitk_reason": reason, "splitk_estimate": estimate,
              "failures": failures},
    )
