"""Split-K: build the rewrite of the dominant kernel on the box, check it, time it, re-run the engine."""

from __future__ import annotations

from agent.engines import Setting, bench_args
from agent.session import Session
from agent.state import Finding, InvestigationState, Number, Table, finding_for, next_index
from agent.steps import StepFailed
from agent.steps.ceiling import amdahl
from agent.steps.levers import interpretation_labels, throughput
from agent.steps.survey import target_of
from tools import trace


def replacement_time_us(baseline_kernels: list[dict], splitk_kernels: list[dict], dominant: str) -> float:
    """Time of the kernels that replaced the dominant one: those in the split-K trace the baseline
    trace did not have (plus the dominant one itself, should any call of it remain)."""
    before = {k["name"] for k in baseline_kernels}
    return sum(k["total_us"] for k in splitk_kernels if k["name"] not in before or k["name"] == dominant)


def worst_error(check: dict, key: str) -> float | None:
    """The largest error of one kind against the float32 reference over the check's input variants."""
    values = [v["vs_reference"][key] for v in check.get("variants", {}).values() if key in v.get("vs_reference", {})]
    return max(values) if values else None


def build_splitk(state: InvestigationState, session: Session) -> Finding:
    """Check the split-K kernel against the float32 reference and the original on the box at the
    profiled shapes, time both where the box has a GPU, re-run the engine with it (profiled the same
    way as the baseline), and set the measured results beside the Amdahl prediction made from the
    measured kernel speedup. Fails when the kernel is wrong: a fast wrong kernel is no option."""
    target = target_of(state)
    survey, profile, levers = (finding_for(state, s) for s in ("survey", "profile", "levers"))
    device = survey.data["box"]["device"]
    batch = profile.data["batch"]
    shapes = profile.data.get("shapes") or {}
    heads = shapes.get("kernel_heads")
    topk = shapes.get("topk")
    if not heads or not topk:
        raise StepFailed("the profile did not report the attention shapes it ran (kernel_heads, topk)")
    seqs = []
    check = session.call("kernel.splitk_check", {"batch": batch, "topk": topk, "heads": heads, "device": device})
    seqs.append(check["call_seq"])
    if not check["ok"]:
        raise StepFailed(f"the split-K kernel failed its check: {check['error']}")
    bench = None
    if device == "cuda":
        bench = session.call("kernel.splitk_bench", {"batch": batch, "topk": topk, "heads": heads})
        seqs.append(bench["call_seq"])
    profiled = profile.data["setting"]
    setting = Setting(f"{profiled['label']} + split-K", {**profiled["env"], target.engine.attention_env: "splitk"},
                      dict(profiled["options"]))
    run = session.call("engine.bench", bench_args(target, device, setting, [batch],
                                                  profile={"batch": batch, "steps": target.profile.steps}))
    seqs.append(run["call_seq"])
    if not run["ok"]:
        raise StepFailed(f"the engine failed with the split-K kernel: {run['error']}")
    measured = throughput(run, batch)
    refs = {ref["name"]: ref for ref in run["artifacts"]}
    split_summary = trace.summarize([session.artifact_path(refs[run["data"]["trace"]["file"]])])
    dominant = profile.data["dominant"]
    t_before = dominant["total_us"]
    t_after = replacement_time_us(profile.data["summary"]["merged"]["kernels"],
                                  [k.to_dict() for k in split_summary.merged.kernels], dominant["name"])
    kernel_speedup = t_before / t_after if t_after else None
    total = profile.number("total_ms")
    predicted_x = amdahl(total, t_before / 1000, kernel_speedup) if kernel_speedup else None
    steps = profile.number("steps")
    timed_step, kernel_step = profile.number("timed_step_ms"), t_before / 1000 / steps
    predicted_timed_x = (amdahl(timed_step, kernel_step, kernel_speedup)
                         if kernel_speedup and kernel_step < timed_step else None)
    baseline_tok_s = profile.number("setting_tok_s")
    measured_x = measured["tok_s"] / baseline_tok_s
    threshold = levers.number("noise_threshold")
    agrees = predicted_x is not None and abs(measured_x - predicted_x) / predicted_x <= threshold
    errors = check["data"]
    rows = [
        ["kernel time in the profile", t_before / 1000, t_after / 1000, kernel_speedup],
        [f"engine tok/s ({profiled['label']})", baseline_tok_s, measured["tok_s"], measured_x],
    ]
    if bench and bench["ok"]:
        data = bench["data"]
        rows.append(["kernel alone, graph-replay median (us)", data.get("upstream_graph_us"), data.get("rewrite_graph_us"),
                     data.get("speedup_vs_upstream")])
    timed_text = f" ({predicted_timed_x:.3g}x against the timed step)" if predicted_timed_x else ""
    headline = (f"split-K: kernel {kernel_speedup:.3g}x faster in the profile; Amdahl predicts {predicted_x:.3g}x{timed_text}, "
                f"the engine measured {measured_x:.3g}x ({baseline_tok_s:.3g} -> {measured['tok_s']:.3g} tok/s)"
                if kernel_speedup else "split-K: the replacement kernels were not found in the trace")
    return Finding(
        index=next_index(state), step="splitk", headline=headline,
        verdict=("prediction-holds" if agrees else "prediction-misses") if predicted_x else "unmeasured",
        numbers={
            "kernel_speedup": Number(value=kernel_speedup, unit="x", label="dominant kernel time / split-K kernels' time (profiles)", seqs=[run["call_seq"]] + profile.evidence),
            "predicted_x": Number(value=predicted_x, unit="x", label="Amdahl with the measured kernel speedup", seqs=[run["call_seq"]] + profile.evidence),
            "predicted_timed_x": Number(value=predicted_timed_x, unit="x", label="the same, T = the step timed without the profiler", seqs=[run["call_seq"]] + profile.evidence),
            "measured_x": Number(value=measured_x, unit="x", label="engine tok/s with split-K / baseline", seqs=[run["call_seq"]] + profile.numbers["setting_tok_s"].seqs),
            "splitk_tok_s": Number(value=measured["tok_s"], unit="tok/s", label="engine with split-K", seqs=[run["call_seq"]]),
            "check_out_rel_err": Number(value=worst_error(errors, "out_norm_rel"), label="worst norm-wise relative error of the output vs float32", seqs=[check["call_seq"]]),
            "check_lse_abs_err": Number(value=worst_error(errors, "lse_max_abs"), label="worst LSE error vs float32", seqs=[check["call_seq"]]),
        },
        tables=[Table(title="Split-K against the original", columns=["measure", "original", "split-K", "ratio"], rows=rows,
                      note=f"the prediction holds when measured and predicted agree within the noise threshold ({100 * threshold:.1f}%)")],
        artifacts={"trace": refs[run["data"]["trace"]["file"]]["path"]},
        evidence=seqs, labels=interpretation_labels(state),
        data={"check": errors, "bench": bench["data"] if bench else None, "kernel_speedup": kernel_speedup,
              "predicted_x": predicted_x, "predicted_timed_x": predicted_timed_x, "measured_x": measured_x, "agrees": agrees},
    )
