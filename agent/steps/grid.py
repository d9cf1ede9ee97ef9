"""Grid: the dominant kernel's launch grid read from its source, at the deployment's shapes."""

from __future__ import annotations

import math
from typing import Any

from agent.config import Target
from agent.engines import Setting, bench_spec, profiled_shapes
from agent.session import Session
from agent.state import Finding, InvestigationState, Number, Table, finding_for, next_index
from agent.steps.survey import target_of
from agent.evidence import typed
from tools.trace.launches import launch_durations, longest_position


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


def ncu_args(target: Target, device: str, profile: dict[str, Any], kernel: str, launch_skip: int = 0) -> dict[str, Any]:
    """``kernel.ncu``'s arguments: launch ``launch_skip`` (0-based) of ``kernel`` in one eager decode
    step (one warm-up step first, no CUDA graph: ncu profiles launches, and one step keeps it cheap)
    of the profiled setting at the profiled batch. Its options that need a graph (several steps a
    replay) or only add time (a planted delay, which the engine also times apart) are left out:
    neither changes a launch."""
    setting = profile["setting"]
    spec = bench_spec(target, device, Setting(setting["label"], dict(setting["env"]), dict(setting["options"])), [profile["batch"]])
    spec.update(steps=1, warmup=1, cuda_graph=False, profile=None)
    for option in ("steps_per_graph", "delay_frac"):
        spec.pop(option, None)
    return {"kernel": kernel, "spec": spec, "env": dict(setting["env"]), "launch_skip": launch_skip}


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
    launch = ncu_launch(session, profile, kernel)
    result = session.call("kernel.ncu", ncu_args(target, box["device"], profile.data, kernel, launch["position"]))
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


def stall_text(ncu: dict[str, Any], top: int = 3) -> str:
    """The largest warp-stall reasons, e.g. "mio_throttle 2.58 (32%), short_scoreboard 1.49 (18%)"."""
    return ", ".join(f"{s['reason']} {s['value']:.3g}" + (f" ({s['share']:.0%})" if s.get("share") is not None else "")
                     for s in (ncu.get("stalls") or [])[:top])


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


def _axis_name(report: dict[str, Any], axis: int) -> str:
    axes = report.get("grid_axes") or []
    expr = axes[axis].get("expr") if axis < len(axes) else None
    return f"axis {axis} ({expr})" if expr else f"axis {axis}"


def _bytes(value: int | None) -> str:
    if value is None:
        return "?"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= size:
            return f"{value / size:.3g} {unit}"
    return f"{value} B"


def rewrite_estimate(diagnosis: dict[str, Any]) -> dict[str, Any]:
    """What the split-K rewrite (tools/kernels/sparse_mla_decode.py) removes of the diagnosed causes,
    and the speedup that follows from them, with its basis.

    The rewrite gathers each KV tile once for a block of heads (a redundancy of about 1, tested in
    tests/test_kernel_diagnosis.py) and forms both inner products with ``tl.dot``. On a kernel that
    Nsight Compute finds L1/latency-bound, its time follows the bytes its programs pull through
    L1/TEX, so loading every byte once divides the time by up to loaded/unique; the math moving to
    tensor cores is counted only where ncu finds the kernel compute-bound. Without ncu data the same
    ratio is given as resting on an unmeasured bound.
    """
    ncu = diagnosis.get("ncu") or {}
    bound = ncu.get("bound", "not measured")
    factor = diagnosis.get("redundancy_factor")
    removes = []
    if factor is not None and factor > 1.05:
        removes.append({"cause": "redundant loads", "now": factor, "after": 1.0,
                        "what": f"loads replicated across {', '.join(diagnosis.get('independent_axes_names') or []) or 'grid axes'} "
                                "they do not depend on; the rewrite loads each KV tile once per head block"})
    if diagnosis.get("inner_product") in ("CUDA-core multiply-reduce", "mixed"):
        removes.append({"cause": "CUDA-core multiply-reduce", "now": diagnosis["inner_product"], "after": "tensor-core dot",
                        "what": f"lines {', '.join(str(x) for x in diagnosis.get('multiply_reduce_lines') or [])}: "
                                "elementwise products summed by tl.sum; the rewrite uses tl.dot"})
    speedup, basis = None, ""
    if factor is not None:
        speedup = factor
        if bound in ("L1/TEX-bound", "L1/latency-bound"):
            basis = (f"ncu: {ncu.get('basis')}; the kernel's time follows the bytes its programs load through L1/TEX, "
                     f"and loading each once ({_bytes(diagnosis.get('unique_bytes'))} instead of {_bytes(diagnosis.get('loaded_bytes'))}) "
                     f"divides them by {factor:.3g}: an upper estimate (another limit, e.g. latency of the remaining loads, binds sooner)")
        elif bound == "memory-bound":
            basis = (f"ncu: {ncu.get('basis')}; DRAM traffic already near peak follows the unique bytes, not the replicated "
                     "ones, so the redundancy gives little here: the ratio is not a time estimate")
            speedup = None
        elif bound == "compute-bound":
            basis = f"ncu: {ncu.get('basis')}; the math binds: the tensor-core dots, not the bytes, decide the gain (not estimated)"
            speedup = None
        else:
            basis = (f"bytes loaded / unique bytes = {factor:.3g} (structural, from the source); what bounds the kernel is "
                     f"{bound} ({ncu.get('why') or ncu.get('error') or ncu.get('basis') or 'no Nsight Compute data'}), so this "
                     "rests on the kernel being bound by the bytes it loads")
        if diagnosis.get("inner_product") in ("CUDA-core multiply-reduce", "mixed") and bound != "compute-bound":
            sm = (ncu.get("throughput_pct") or {}).get("sm")
            basis += ("; the move to tensor cores is not counted" +
                      (f": SM throughput {sm:.3g}% of peak, the math does not bind" if sm is not None else ": its gain is not measured"))
    return {"removes": [r["cause"] for r in removes], "causes": removes, "speedup": speedup,
            "speedup_kind": "upper estimate" if speedup is not None else None, "basis": basis, "bound": bound}


def diagnosis_summary(point: dict[str, Any], report: dict[str, Any], source_root: str | None) -> dict[str, Any] | None:
    """The grid tool's diagnosis at one evaluation point, with the padding programs of that point and
    the rewrite estimate: None for a journal recorded before the tool reported a diagnosis."""
    diagnosis = report.get("diagnosis")
    if diagnosis is None:
        return None
    if not diagnosis.get("ok"):
        return {"ok": False, "error": diagnosis.get("error"), "ncu": diagnosis.get("ncu")}
    programs = diagnosis.get("programs")
    padding = (point["kernel_heads"] - point["heads_per_rank"]) * point["batch"]  # as the grid table counts them: a program a head
    ncu = diagnosis.get("ncu") or {}
    throughput = ncu.get("throughput_pct") or {}
    out = {
        "ok": True, "point": point["label"], "config": diagnosis.get("config"), "programs": programs,
        "file": _display_path(report.get("file", ""), source_root),
        "redundancy_factor": diagnosis.get("redundancy_factor"), "loaded_bytes": diagnosis.get("loaded_bytes"),
        "unique_bytes": diagnosis.get("unique_bytes"), "gather_redundancy_factor": diagnosis.get("gather_redundancy_factor"),
        "gathered_bytes": diagnosis.get("gathered_bytes"), "unique_gathered_bytes": diagnosis.get("unique_gathered_bytes"),
        "gather_lines": diagnosis.get("gather_lines") or [],
        "independent_axes_names": [_axis_name(report, a) for a in diagnosis.get("independent_axes_of_gathers") or []],
        "inner_product": diagnosis.get("inner_product"), "dot_lines": diagnosis.get("dot_lines") or [],
        "multiply_reduce_lines": diagnosis.get("multiply_reduce_lines") or [],
        "cuda_core_macs": diagnosis.get("cuda_core_macs"), "tensor_core_macs": diagnosis.get("tensor_core_macs"),
        "padding_programs": padding, "padding_share": padding / programs if programs else None,
        "assumptions": diagnosis.get("assumptions") or [],
        "ncu": ncu,
        "dram_pct": throughput.get("dram"), "l1tex_pct": throughput.get("l1tex"), "l2_pct": throughput.get("l2"),
        "sm_pct": throughput.get("sm"), "achieved_occupancy": ncu.get("achieved_occupancy"),
        "bound": ncu.get("bound", "not measured"),
    }
    if ncu.get("measured"):
        # an export of another launch shape still says what bounds the kernel, but not at this point's grid
        ncu_programs = math.prod(ncu["grid"]) if ncu.get("grid") else None
        out["ncu_same_grid"] = ncu_programs == programs
    out["rewrite_estimate"] = rewrite_estimate(out)
    return out


def diagnosis_table(kernel: str, d: dict[str, Any]) -> Table:
    """Cause, evidence, figure and source line of each diagnosed cause."""
    where = d["file"]
    rows = []
    if d.get("ok"):
        lines = ", ".join(str(x) for x in d["gather_lines"]) or "-"
        axes = ", ".join(d["independent_axes_names"]) or "none"
        rows.append(["redundant gathers", f"the gathered rows' addresses do not depend on grid {axes}: every program along it loads the same rows",
                     f"{d['gather_redundancy_factor']:.3g}x ({_bytes(d['gathered_bytes'])} loaded for {_bytes(d['unique_gathered_bytes'])} unique)"
                     if d["gather_redundancy_factor"] is not None else "?", f"{where}:{lines}"])
        rows.append(["all loads", "bytes all programs load against the unique bytes the call needs",
                     f"{d['redundancy_factor']:.3g}x ({_bytes(d['loaded_bytes'])} for {_bytes(d['unique_bytes'])})"
                     if d["redundancy_factor"] is not None else "?", where])
        math_lines = d["multiply_reduce_lines"] if d["inner_product"] != "tensor-core dot" else d["dot_lines"]
        macs = d["cuda_core_macs"] if d["inner_product"] != "tensor-core dot" else d["tensor_core_macs"]
        rows.append(["inner products", d["inner_product"], f"{macs:.3g} multiply-adds" if macs else "-",
                     f"{where}:{', '.join(str(x) for x in math_lines) or '-'}"])
        if d["padding_programs"]:
            rows.append(["padding programs", "programs whose heads are TP padding (their output is discarded)",
                         f"{d['padding_programs']} of {d['programs']} ({d['padding_share']:.0%})", where])
    else:
        rows.append(["diagnosis", f"failed: {d.get('error')}", "-", where if "file" in d else "-"])
    ncu = d.get("ncu") or {}
    if ncu.get("measured"):
        grid = "x".join(str(x) for x in ncu.get("grid") or []) or "?"
        shape = "" if d.get("ncu_same_grid") else f" (measured on grid {grid}, not this point's {d.get('programs')} programs)"
        launch = f"; measured on {ncu['launch']['why']}" if (ncu.get("launch") or {}).get("why") else ""
        rows.append(["Nsight Compute", ncu.get("basis", "") + shape + launch, f"{ncu['bound']}; achieved occupancy "
                     + (f"{ncu['achieved_occupancy']:.3g}%" if ncu.get("achieved_occupancy") is not None else "not exported"),
                     ncu.get("source", "")])
        if ncu.get("stalls"):
            cycles = (ncu.get("warp_state") or {}).get("warp_cycles_per_issued_instruction")
            rows.append(["warp stalls", "the largest stall reasons (Warp State Statistics): cycles a warp spends in each per issued "
                         "instruction" + (f", of {cycles:.3g} between two issues" if cycles else ""), stall_text(ncu), ncu.get("source", "")])
    else:
        rows.append(["Nsight Compute", ncu.get("why") or ncu.get("error") or "no data", "not measured", "-"])
    estimate = d.get("rewrite_estimate") or {}
    return Table(title=f"Diagnosis of {kernel} ({d.get('point', '?')})", columns=["cause", "evidence", "figure", "source"], rows=rows,
                 note=("rewrite removes: " + (", ".join(estimate.get("removes") or []) or "nothing diagnosed") +
                       (f"; speedup {estimate['speedup']:.3g}x ({estimate['speedup_kind']}): {estimate['basis']}" if estimate.get("speedup") else
                        (f"; {estimate['basis']}" if estimate.get("basis") else "")) +
                       ". Assumptions: " + "; ".join(d.get("assumptions") or [])))


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
    kernel = typed(profile).dominant.name
    source_root = survey.data["software"].get("sglang_dir")
    reports, seqs, failures = [], [], []
    seq_of: dict[int, int] = {}
    ncu = measure_ncu(session, target, box, profile, kernel)
    if ncu["seq"] is not None:
        seqs.append(ncu["seq"])
    if ncu.get("error"):
        failures.append(ncu["error"])
    for point in evaluation_points(target, box, profile.data):
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
    focus_point, focus_report = next(((p, r) for p, r in reports if p["where"] == "box"), None) or next(
        ((p, r) for p, r in reports if r is deployment_concurrency), reports[0])
    diagnosis = diagnosis_summary(focus_point, focus_report, source_root)
    if diagnosis is not None:
        diagnosis = with_ncu_record(diagnosis, ncu)
    goal_point = f"deployment B={target.goal.concurrency}"
    if candidates and goal_point not in candidates and any(p["label"] == goal_point for p, _ in reports):
        removes = ((diagnosis or {}).get("rewrite_estimate") or {}).get("removes") or []
        reason += (f"; at the goal's concurrency ({goal_point}) the grid fills a wave or more, so there the rewrite's gain "
                   f"rests on what the diagnosis finds it removes: " + (", ".join(removes) or "nothing diagnosed"))
    headline = (f"{kernel} ({where}) launches grid {first.get('grid_expr')}: {first.get('programs')} programs at "
                f"{first_point['label']} on {declared_sm_count} SMs ({(first.get('programs') or 0) / declared_sm_count:.2f} per SM)"
                + (f"; each loops over {loop['stop_expr']} serially" if loop else ""))
    numbers, tables, extra = {}, [], {}
    if diagnosis is not None:
        tables.append(diagnosis_table(kernel, diagnosis))
        extra["diagnosis"] = diagnosis
        seq = [seq_of[id(focus_report)]]
        if diagnosis.get("ok"):
            headline += (f"; its programs load {diagnosis['redundancy_factor']:.3g}x the unique bytes ({diagnosis['inner_product']})"
                         if diagnosis["redundancy_factor"] is not None else f"; inner products: {diagnosis['inner_product']}")
            numbers.update({
                "redundancy_factor": Number(value=diagnosis["redundancy_factor"], unit="x", label=f"bytes loaded / unique bytes, {focus_point['label']}", seqs=seq),
                "loaded_bytes": Number(value=diagnosis["loaded_bytes"], unit="B", label=f"bytes all programs load, {focus_point['label']}", seqs=seq),
                "unique_bytes": Number(value=diagnosis["unique_bytes"], unit="B", label=f"unique bytes the call needs, {focus_point['label']}", seqs=seq),
                "inner_product": Number(value=diagnosis["inner_product"], label="how the inner products are formed", seqs=seq),
            })
        if (diagnosis.get("ncu") or {}).get("measured"):
            seq = sorted(set(seq) | ({ncu["seq"]} if ncu["seq"] is not None else set()))
            stalls = diagnosis["ncu"].get("stalls") or []
            headline += f"; Nsight Compute: {diagnosis['ncu']['bound']}" + (f" (top stall {stall_text(diagnosis['ncu'], 1)})" if stalls else "")
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
    return Finding(
        index=next_index(state), step="grid", headline=headline,
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
                  note=f"launcher {launcher.get('function', '?')} at {_display_path(launcher.get('file', ''), source_root)}:{launcher.get('launch_line', launcher.get('line', '?'))}; "
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


def with_ncu_record(diagnosis: dict[str, Any], ncu: dict[str, Any]) -> dict[str, Any]:
    """The diagnosis with the kernel.ncu record folded in: the run's CSV artifact as the source of a
    measured verdict (the box path the grid tool read is no place a reader can open), or, with no
    measurement, the reason there is none in place of the grid tool's "no export was given"."""
    found = dict(diagnosis.get("ncu") or {})
    if found.get("measured"):
        found["source"] = (ncu.get("artifacts") or {}).get("raw") or found.get("source")
        if ncu.get("launch"):
            found["launch"] = ncu["launch"]
    else:
        # the verdict already reads "not measured": the reason stands alone beside it
        why = ncu.get("error") or (ncu.get("why") or "").removeprefix("not measured: ") or found.get("why")
        found = {"measured": False, "bound": "not measured", "why": why}
    out = {**diagnosis, "ncu": found}
    if out.get("ok"):
        out["bound"] = found.get("bound", "not measured")
        out["rewrite_estimate"] = rewrite_estimate(out)
    return out
