"""Grid: the dominant kernel's launch grid read from its source, at the deployment's shapes."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from agent.config import Target
from agent.engine_runs import Setting, bench_spec, profiled_shapes
from agent.engines import engine_for
from agent.evidence import ProfileData, typed
from agent.session import Session
from agent.state import InvestigationState, finding_for
from agent.steps import Draft
from agent.steps.ncu_counters import read_counters
from agent.steps.diagnosis import diagnosis_summary, diagnosis_table, display_path, rewrite_estimate, stall_text
from agent.steps.rank_balance import COMMUNICATION
from schema.finding import Finding, Number, Table
from tools.trace.events import TraceFormatError
from tools.trace.launches import launch_configs, launch_durations, longest_position


def evaluation_points(target: Target, box: dict, profile: ProfileData) -> list[dict[str, Any]]:
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
    batch = profile.batch
    profiled = {**constants, symbols["batch"]: batch, symbols["heads"]: ran["kernel_heads"], symbols["topk"]: ran["topk"]}
    if profiled != points[-1]["shapes"] or box["device"] == "cuda":
        points.append({
            "label": f"profiled B={batch}", "where": "box",
            "shapes": profiled, "sms": box["sm_count"] or deployment.sm_count,
            "arch": f"sm_{box['sm']}" if box["sm"] else f"sm_{deployment.sm}", "batch": batch,
            "heads_per_rank": ran["heads_per_rank"], "kernel_heads": ran["kernel_heads"],
            "config": profile.kernel_config,
        })
    return points


def ncu_args(target: Target, device: str, profile: ProfileData, kernel: str, launch_skip: int = 0) -> dict[str, Any]:
    """``kernel.ncu``'s arguments: launch ``launch_skip`` (0-based) of ``kernel`` in one eager decode
    step (one warm-up step first, no CUDA graph: ncu profiles launches, and one step keeps it cheap)
    of the profiled setting at the profiled batch. Its options that need a graph (several steps a
    replay) or only add time (a planted delay, which the engine also times apart) are left out:
    neither changes a launch."""
    setting = profile.setting
    spec = bench_spec(target, device, Setting(setting.label, dict(setting.env), dict(setting.options)), [profile.batch])
    spec.update(steps=1, warmup=1, cuda_graph=False, profile=None)
    for option in ("steps_per_graph", "delay_frac"):
        spec.pop(option, None)
    return {"kernel": kernel, "spec": spec, "env": dict(setting.env), "launch_skip": launch_skip}


def ncu_launch(session: Session, profile: Finding, kernel: str) -> dict[str, Any]:
    """Which launch of ``kernel`` in a step Nsight Compute should profile: the position whose launches
    take longest in the profile's trace (tools.trace.launches), with what the trace says of it; the
    first launch, saying why, when the trace does not tell (launches that do not split evenly over
    the profiled steps)."""
    steps = int(profile.number("steps"))
    durations = launch_durations(session.artifact_path({"path": profile.artifacts["trace"]}), kernel)
    found = longest_position(durations, steps)
    if found is None:
        return {"position": 0, "per_step": None, "why": f"the first launch: the trace's {len(durations)} launches do "
                                                        f"not split evenly over its {steps} steps"}
    forms = ", ".join(f"{us:.4g}" for us in found.all_median_us)
    alike = " and ".join(str(i + 1) for i in found.alike)
    return {"position": found.position, "per_step": found.per_step, "median_us": found.median_us,
            "alike": list(found.alike), "share": found.share,
            "why": f"launch {found.position + 1} of the {found.per_step} a step, the longest in the profile (median us "
                   f"by position: {forms}; launches {alike} alike, {100 * found.share:.0f}% of the kernel's time)"}


def measure_ncu(session: Session, target: Target, box: dict, profile: Finding, kernel: str) -> dict[str, Any]:
    """Nsight Compute of the dominant kernel where the box has a GPU (``kernel.ncu``): the record the
    grid step keeps (``measured``; ``box_csv``, the raw page where the box keeps it, for the box
    point's ``kernel.grid``; ``artifacts``, the CSVs in the run; or ``why``/``error``)."""
    if box["device"] != "cuda":
        return {"measured": False, "seq": None, "why": "not measured: the box has no GPU (survey), so no Nsight Compute"}
    server = engine_for(target).live_server
    if server:
        return {"measured": False, "seq": None, "why": "not measured: kernel.ncu profiles a launch of the reference "
                                                       f"engine, not of a live {server} server's process"}
    launch = ncu_launch(session, profile, kernel)
    result = session.call("kernel.ncu", ncu_args(target, box["device"], typed(profile), kernel, launch["position"]))
    data = result.get("data") or {}
    record = {"seq": result["seq"], "ok": result["ok"], "measured": bool(result["ok"] and data.get("measured")),
              "kernel_regex": data.get("kernel_regex"), "launch_skip": data.get("launch_skip"),
              "ncu_version": data.get("ncu_version"), "engine": data.get("engine"), "launch": launch}
    if not result["ok"]:
        record["error"] = f"Nsight Compute failed: {result['error']}"
    elif not record["measured"]:
        record["why"] = data.get("why") or "not measured: the tool measured nothing"
    else:
        refs = {ref["name"]: ref["path"] for ref in result.get("artifacts") or []}
        record.update(box_csv=data["box_csv"], artifacts={key: refs.get(name) for key, name in data["csv"].items()})
    return record


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


def _headline(kernel: str, where: str, reports: list, lead: dict, sm_count: int, loop: dict | None) -> str:
    """Led by the goal's concurrency (``lead``), the batch the deployment runs at; the first point (B=1) beside it."""
    first_point, first = reports[0]
    lead_point = next((p for p, r in reports if r is lead), first_point)

    def per_sm(report) -> str:
        return f"{(report.get('programs') or 0) / sm_count:.2f} per SM"

    return (f"{kernel} ({where}) launches grid {first.get('grid_expr')}: {lead.get('programs')} programs at "
            f"{lead_point['label']} on {sm_count} SMs ({per_sm(lead)}"
            + (f"; {first.get('programs')} at {first_point['label']}, {per_sm(first)})" if lead is not first else ")")
            + (f"; each loops over {loop['stop_expr']} serially" if loop else ""))


def launches_from_trace(session: Session, profile: Finding, kernel: str) -> list[dict[str, Any]]:
    """A kernel without source (a binary: FlashMLA inside sgl_kernel on sm_90) still has its launches in the
    profile's trace: grid, block, registers and shared memory as CUPTI recorded them, one entry a configuration
    (tools.trace.launches.launch_configs); [] where the trace has no kernel of that name (a host range)."""
    path = (profile.artifacts or {}).get("trace")
    if not path:
        return []
    try:
        configs = launch_configs(session.artifact_path({"path": path}), kernel)
    except TraceFormatError:  # no trace to read (a profile that kept none): the failures say what is missing
        return []
    return [{**asdict(c), "grid": list(c.grid), "block": list(c.block)} for c in configs]


def launch_text(launch: dict[str, Any]) -> str:
    """One configuration of launches_from_trace in words."""
    return (f"grid {' x '.join(map(str, launch['grid']))} of {' x '.join(map(str, launch['block']))} threads, "
            f"{launch['registers_per_thread']} registers a thread, {launch['shared_memory_bytes']:,} B of shared "
            f"memory ({launch['launches']} launches, median {launch['median_us']:.4g} us)")


def _no_source(session: Session, profile: Finding, kernel: str, failures: list[str], seqs: list[int]) -> Draft:
    data: dict[str, Any] = {"kernel": kernel, "splitk_candidate": False, "failures": failures,
                            "splitk_reason": "the kernel's source and grid could not be read"}
    headline = f"{kernel}'s grid could not be read: {'; '.join(failures)}"
    launches = launches_from_trace(session, profile, kernel)
    if launches:  # only then: a run whose trace holds no such kernel reads as it always did
        data["launches_from_trace"] = launches
        headline += ("; the profile's trace recorded its launches (no source: a binary, its loops unknown): "
                     + "; ".join(launch_text(launch) for launch in launches))
    return Draft(verdict="no-source", headline=headline, evidence=seqs, labels=["failed"], data=data)


def read_grid(state: InvestigationState, session: Session, target: Target) -> Draft:
    """Find the dominant kernel's source on the box, its launch site and grid expression, and evaluate
    them at the deployment's per-rank shapes (batch 1 and the goal's concurrency, declared SMs and
    architecture) and at the profiled shapes: programs against SMs, waves, the serial loops each
    program runs with their trip counts per config, registers, and how many programs compute padding.
    Split-K is a candidate when a serial reduction loop is not covered by the grid and the programs
    are less than one wave at some evaluated decode batch."""
    survey = finding_for(state, "survey")
    profile = finding_for(state, "profile")
    box = typed(survey).box.model_dump()
    dominant = typed(profile).dominant
    kernel = dominant.name
    if dominant.category == COMMUNICATION:
        return collective_finding(kernel, profile)
    source_root = typed(survey).software.sglang_dir
    ncu = measure_ncu(session, target, box, profile, kernel)
    reports, seqs, failures, seq_of = _read_reports(session, target, box, profile, kernel, source_root, ncu)
    if not reports:
        return _no_source(session, profile, kernel, failures, seqs)

    declared_sm_count = target.deployment.sm_count
    rows, loop_rows, candidates = _grid_rows(box, declared_sm_count, reports)
    first_point, first = reports[0]
    where = f"{display_path(first['file'], source_root)}:{first['line']}"
    launcher = first.get("launcher") or {}
    deployment_concurrency = next((r for p, r in reports if p["label"] == f"deployment B={target.goal.concurrency}"), first)
    loop = reduction_loop(first)
    box_point = next((r for p, r in reports if p["where"] == "box"), None)
    estimate = splitk_estimate(box_point or deployment_concurrency, (next((p for p, r in reports if p["where"] == "box"), first_point))["arch"])
    focus_point, focus_report = next(((p, r) for p, r in reports if p["where"] == "box"), None) or next(
        ((p, r) for p, r in reports if r is deployment_concurrency), reports[0])
    diagnosis = diagnosis_summary(focus_point, focus_report, source_root)
    if diagnosis is not None:
        diagnosis = with_ncu_record(diagnosis, ncu, capture_counters(session, ncu, kernel))
    reason = _splitk_reason(target, reports, candidates, first, loop, diagnosis)
    headline = _headline(kernel, where, reports, deployment_concurrency, declared_sm_count, loop)
    numbers, tables, extra = {}, [], {}
    if diagnosis is not None:
        tables.append(diagnosis_table(kernel, diagnosis))
        extra["diagnosis"] = diagnosis
        said, numbers = _diagnosis_numbers(diagnosis, focus_point["label"], [seq_of[id(focus_report)]], ncu)
        headline += said
    return Draft(
        headline=headline,
        verdict="splitk-candidate" if candidates else "no-splitk",
        numbers={**numbers,
            "programs_b1": Number(value=first.get("programs"), unit="programs", label=f"{first_point['label']}", seqs=seqs[:1]),
            "coverage_declared": Number(value=(first.get("programs") or 0) / declared_sm_count, unit="programs/SM",
                                        label=f"programs per SM on the declared {declared_sm_count} SMs", seqs=seqs[:1]),
        },
        tables=[
            Table(title=f"Grid of {kernel}", columns=["shapes", "grid", "dims", "programs", "per declared SM",
                                                     "per box SM", "waves", "registers", "spill bytes", "occupancy share",
                                                     "padding programs", "split-K"], rows=rows,
                  note=f"launcher {launcher.get('function', '?')} at {display_path(launcher.get('file', ''), source_root)}:{launcher.get('launch_line', launcher.get('line', '?'))}; "
                       "waves, registers and occupancy for each row's architecture (its first or chosen config)"),
            Table(title="Loops each program runs", columns=["shapes", "loop", "line", "trip count per config",
                                                           "accumulators", "reduction", "covered by grid"], rows=loop_rows),
            *tables,
        ],
        evidence=seqs,
        labels=(["failed"] if failures else []),
        artifacts={f"ncu_{key}": path for key, path in (ncu.get("artifacts") or {}).items() if path},
        data={"kernel": kernel, "where": where, "reports": [{"point": p, "report": r} for p, r in reports],
              "splitk_candidate": bool(candidates), "splitk_reason": reason, "splitk_estimate": estimate,
              "failures": failures, "ncu": ncu, **extra},
    )


def collective_finding(kernel: str, profile: Finding) -> Draft:
    """The grid finding of a dominant communication collective (NCCL kernel, gloo collective): it has no
    kernel source, launch grid or serial loop to read, so no read is tried; the finding names what bounds
    a collective instead, the communication levers."""
    why = (f"{kernel} is a communication collective (trace category \"{COMMUNICATION}\"): it has no kernel source, "
           "launch grid or serial loop to read, so none was looked for")
    levers = ("the bytes each step all-reduces or exchanges and how often (the TP degree; expert parallelism, EP, "
              "trades the all-reduce for all-to-all dispatch and combine), the collective's backend and, on NCCL, its "
              "protocol and algorithm (NCCL_PROTO, NCCL_ALGO), overlap of communication with compute, and the rank "
              "balance (time a rank waits in the collective for the critical rank)")
    return Draft(verdict="collective", headline=f"{why}; look instead at {levers}", evidence=list(profile.evidence),
                 data={"kernel": kernel, "splitk_candidate": False, "collective": True,
                       "splitk_reason": "not offered: the dominant kernel is a communication collective, not a kernel "
                                        "with a serial reduction loop"})


def _read_reports(session: Session, target: Target, box: dict, profile: Finding, kernel: str, source_root: str | None,
                  ncu: dict[str, Any]) -> tuple[list[tuple[dict, dict]], list[int], list[str], dict[int, int]]:
    """``kernel.grid`` at each evaluation point (the box point with the Nsight Compute export ``ncu``
    left on the box). Returns the (point, report) pairs read, the log lines (ncu's first), the
    failures (ncu's first), and each report's log line by the report's id."""
    reports, seqs, failures = [], [], []
    seq_of: dict[int, int] = {}
    if ncu["seq"] is not None:
        seqs.append(ncu["seq"])
    if ncu.get("error"):
        failures.append(ncu["error"])
    for point in evaluation_points(target, box, typed(profile)):
        args = {"kernel": kernel, "source": source_root, "shapes": point["shapes"], "sms": point["sms"],
                "arch": point["arch"]}
        if point.get("config"):
            args["config"] = point["config"]
        if point["where"] == "box" and ncu.get("box_csv"):
            args["ncu_csv"] = ncu["box_csv"]  # the export kernel.ncu left on the box
        result = session.call("kernel.grid", args)
        seqs.append(result["seq"])
        if result["ok"]:
            reports.append((point, result["data"]))
            seq_of[id(result["data"])] = result["seq"]
        else:
            failures.append(f"{point['label']}: {result['error']}")
    return reports, seqs, failures, seq_of


def _grid_rows(box: dict, declared_sm_count: int, reports: list[tuple[dict, dict]]) -> tuple[list, list, list[str]]:
    """The grid table's rows and the loops table's, one point each, and the points where split-K is a candidate."""
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
    return rows, loop_rows, candidates


def _splitk_reason(target: Target, reports: list[tuple[dict, dict]], candidates: list[str], first: dict,
                   loop: dict | None, diagnosis: dict | None) -> str:
    """Why split-K is offered or not, with what its gain rests on at the goal's concurrency."""
    if candidates:
        reason = (f"offered: the loop `{loop['text'] if loop else '?'}` is a serial reduction the grid does not cover, "
                  f"and the grid is under one wave at {', '.join(candidates)}")
    elif first.get("serial_reduction_uncovered"):
        reason = "not offered: a serial reduction loop is not covered by the grid, but every evaluated grid fills a wave or more"
    else:
        reason = "not offered: no serial reduction loop outside the grid"
    goal_point = f"deployment B={target.goal.concurrency}"
    if candidates and goal_point not in candidates and any(p["label"] == goal_point for p, _ in reports):
        removes = ((diagnosis or {}).get("rewrite_estimate") or {}).get("removes") or []
        reason += (f"; at the goal's concurrency ({goal_point}) the grid fills a wave or more, so there the rewrite's gain "
                   f"rests on what the diagnosis finds it removes: " + (", ".join(removes) or "nothing diagnosed"))
    return reason


def _diagnosis_numbers(diagnosis: dict[str, Any], point: str, seq: list[int],
                       ncu: dict[str, Any]) -> tuple[str, dict[str, Number]]:
    """What the headline adds of the diagnosis (and of Nsight Compute where it measured), and its numbers."""
    said, numbers = "", {}
    if diagnosis.get("ok"):
        said += (f"; its programs load {diagnosis['redundancy_factor']:.3g}x the unique bytes ({diagnosis['inner_product']})"
                 if diagnosis["redundancy_factor"] is not None else f"; inner products: {diagnosis['inner_product']}")
        numbers.update({
            "redundancy_factor": Number(value=diagnosis["redundancy_factor"], unit="x", label=f"bytes loaded / unique bytes, {point}", seqs=seq),
            "loaded_bytes": Number(value=diagnosis["loaded_bytes"], unit="B", label=f"bytes all programs load, {point}", seqs=seq),
            "unique_bytes": Number(value=diagnosis["unique_bytes"], unit="B", label=f"unique bytes the call needs, {point}", seqs=seq),
            "inner_product": Number(value=diagnosis["inner_product"], label="how the inner products are formed", seqs=seq),
        })
    if (diagnosis.get("ncu") or {}).get("measured"):
        seq = sorted(set(seq) | ({ncu["seq"]} if ncu["seq"] is not None else set()))
        stalls = diagnosis["ncu"].get("stalls") or []
        binds = (diagnosis.get("rewrite_estimate") or {}).get("binding")
        if binds and binds["bytes_bind"] is False:
            # the counters' reading, not the speed-of-light verdict alone: L1/TEX busy is not bytes binding
            said += (f"; Nsight Compute: {diagnosis['ncu']['bound']} by {binds['busiest_l1']}, not bytes; warps wait most on "
                     f"{binds['top_stall_group']} ({binds['top_stall_share']:.0%} of the cycles between issues); occupancy "
                     f"limited by {binds['limiter']}; the source model's byte ratio does not bind")
            numbers["binding"] = Number(value=binds["text"], label=f"what binds, from the counters of {binds['source']}", seqs=seq)
        else:
            said += f"; Nsight Compute: {diagnosis['ncu']['bound']}" + (f" (top stall {stall_text(diagnosis['ncu'], 1)})" if stalls else "")
        numbers.update({
            "dram_pct": Number(value=diagnosis["dram_pct"], unit="% of peak", label="DRAM throughput (Nsight Compute)", seqs=seq),
            "l1tex_pct": Number(value=diagnosis["l1tex_pct"], unit="% of peak", label="L1/TEX throughput (Nsight Compute)", seqs=seq),
            "achieved_occupancy": Number(value=diagnosis["achieved_occupancy"], unit="%", label="achieved occupancy (Nsight Compute)", seqs=seq),
            "bound": Number(value=diagnosis["bound"], label="what bounds the kernel (Nsight Compute)", seqs=seq),
        })
        if stalls:
            numbers["top_stall"] = Number(value=stalls[0]["reason"], label="the largest warp-stall reason (Nsight Compute)", seqs=seq)
            if stalls[0].get("share") is not None:
                numbers["top_stall_share"] = Number(value=stalls[0]["share"], unit="fraction",
                                                    label=f"{stalls[0]['reason']}: share of the warp cycles between issues", seqs=seq)
    return said, numbers


def capture_counters(session: Session, ncu: dict[str, Any], kernel: str) -> dict[str, Any] | None:
    """The run's own ncu raw-page capture read agent-side (agent/steps/ncu_counters.py): the box's summary of it
    is journaled, so only this reading lets a regenerate of a recorded run say what its counters show."""
    raw = (ncu.get("artifacts") or {}).get("raw")
    if not ncu.get("measured") or not raw:
        return None
    return read_counters(session.artifact_path({"path": raw}), raw, kernel)


def with_ncu_record(diagnosis: dict[str, Any], ncu: dict[str, Any], counters: dict[str, Any] | None = None) -> dict[str, Any]:
    """The diagnosis with the kernel.ncu record folded in: the run's CSV artifact as the source of a
    measured verdict (the box path the grid tool read is no place a reader can open), with the counters
    read from it, or, with no measurement, the reason there is none in place of the grid tool's "no
    export was given"."""
    found = dict(diagnosis.get("ncu") or {})
    if found.get("measured"):
        found["source"] = (ncu.get("artifacts") or {}).get("raw") or found.get("source")
        if ncu.get("launch"):
            found["launch"] = ncu["launch"]
        if counters is not None:
            found["counters"] = counters
    else:
        # the verdict already reads "not measured": the reason stands alone beside it
        why = ncu.get("error") or (ncu.get("why") or "").removeprefix("not measured: ") or found.get("why")
        found = {"measured": False, "bound": "not measured", "why": why}
    out = {**diagnosis, "ncu": found}
    if out.get("ok"):
        out["bound"] = found.get("bound", "not measured")
        out["rewrite_estimate"] = rewrite_estimate(out)
    return out
