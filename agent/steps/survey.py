"""Survey: what the box is, against the hardware the target declares."""

from __future__ import annotations

from agent.box.choice import ends_rows
from agent.config import Target
from agent.session import Session
from agent.state import InvestigationState
from agent.steps import Draft, StepFailed
from schema.finding import Number, Table


def box_picture(survey: dict) -> dict:
    """The box as the rest of the investigation needs it: device, SMs, capability."""
    gpus = survey.get("gpus") or []
    if gpus:
        first = gpus[0]
        return {"device": "cuda", "gpu": first["name"], "gpus": len(gpus), "sm": first["capability"],
                "sm_count": first["sm_count"]}
    return {"device": "cpu", "gpu": None, "gpus": 0, "sm": None, "sm_count": None}


def stand_in_reason(target: Target, box: dict) -> str | None:
    """Why the box is not the declared hardware (None when it is)."""
    declared = target.deployment
    if box["device"] == "cpu":
        return f"the box has no GPU; the deployment is {declared.gpus}x {declared.gpu} (sm_{declared.sm})"
    if box["sm"] != declared.sm or box["sm_count"] != declared.sm_count:
        return (f"the box is {box['gpus']}x {box['gpu']} (sm_{box['sm']}, {box['sm_count']} SMs); the deployment is "
                f"{declared.gpus}x {declared.gpu} (sm_{declared.sm}, {declared.sm_count} SMs)")
    return None


def rate_numbers(rates: dict, seq: list[int]) -> dict[str, Number]:
    """The box's measured copy bandwidth and matmul rate as numbers (none when the survey could not
    measure them: the options step then says so instead of computing floors)."""
    if not rates or rates.get("error"):
        return {}
    copy, matmul = rates["copy"], rates["matmul"]
    where = "device to device" if rates["device"] == "cuda" else "host memory"
    return {
        "copy_gb_s": Number(value=copy["gb_s"], unit="GB/s", seqs=seq,
                            label=f"copy bandwidth, {where}: median of {copy['repeats']} copies of "
                                  f"{copy['bytes_copied'] / 2**20:.0f} MiB, bytes read + written"),
        "matmul_tflop_s": Number(value=matmul["tflop_s"], unit="TFLOP/s", seqs=seq,
                                 label=f"{matmul['dtype']} matmul rate on the {rates['device']}: median of "
                                       f"{matmul['repeats']} {matmul['n']}x{matmul['n']} products"
                                       + ("" if len(rates["matmul_all"]) == 1 else ", the fastest of "
                                          + ", ".join(f"{m['dtype']} {m['tflop_s']:.3g}" for m in rates["matmul_all"]))),
    }


def survey_box(state: InvestigationState, session: Session, target: Target) -> Draft:
    """Record the box (GPUs, SMs, capability, driver, software, measured copy bandwidth and matmul
    rate) and whether it stands in for the declared hardware. Fails when the survey tool itself
    fails: nothing after it can be trusted. Rates the box could not measure are reported as such."""
    result = session.call("box.survey", {})
    if not result["ok"]:
        raise StepFailed(f"the box survey failed: {result['error']}")
    survey = result["data"]
    box = box_picture(survey)
    reason = stand_in_reason(target, box)
    software = survey["software"]
    declared = target.deployment
    seq = [result["seq"]]
    if box["device"] == "cuda":
        what = f"{box['gpus']}x {box['gpu']} (sm_{box['sm']}, {box['sm_count']} SMs)"
    else:
        what = f"CPU only ({survey['host']['cpus']} cores, {survey['host']['memory_gib']} GiB), no GPU"
    headline = f"box: {what}" + (f"; stand-in for {declared.gpus}x {declared.gpu} (sm_{declared.sm})" if reason else "")
    rows = [
        ["device", what, f"{declared.gpus}x {declared.gpu}"],
        ["compute capability", f"sm_{box['sm']}" if box["sm"] else "-", f"sm_{declared.sm}"],
        ["SMs per GPU", box["sm_count"] or "-", declared.sm_count],
        ["driver", ", ".join(sorted({g.get("driver_version", "") for g in survey["nvidia_smi"].get("gpus", [])})) or "-", "-"],
        ["python", survey["host"]["python"], "-"],
        ["torch", software.get("torch") or "missing", "-"],
        ["triton", software.get("triton") or "missing", "-"],
        ["sglang", software.get("sglang") or "missing", "-"],
        ["flash_mla", software.get("flash_mla") or "missing", "-"],
    ]
    if state.get("agent"):  # a run recorded before the agent's end was (a shipped example) replays unchanged
        rows += ends_rows(state["agent"], {**(state.get("box") or {}), "host": survey["host"].get("name")})
    rates = rate_numbers(survey.get("rates") or {}, seq)
    if rates:
        rows += [["copy bandwidth (measured)", f"{rates['copy_gb_s'].value:.4g} GB/s", "-"],
                 [f"{survey['rates']['matmul']['dtype']} matmul (measured)",
                  f"{rates['matmul_tflop_s'].value:.4g} TFLOP/s", "-"]]
    else:
        rows.append(["copy bandwidth, matmul rate", f"not measured: {(survey.get('rates') or {}).get('error', 'no rates in the survey')}", "-"])
    return Draft(
        headline=headline,
        verdict="stand-in" if reason else "declared-hardware",
        numbers={
            "box_sm": Number(value=box["sm"], label="box compute capability (x10)", seqs=seq),
            "box_sm_count": Number(value=box["sm_count"], unit="SMs", label="box SMs per GPU", seqs=seq),
            "declared_sm": Number(value=declared.sm, label="declared compute capability (x10)", declared=True),
            "declared_sm_count": Number(value=declared.sm_count, unit="SMs", label="declared SMs per GPU", declared=True),
            **rates,
        },
        tables=[Table(title="Box and declared hardware", columns=["", "box", "declared"], rows=rows)],
        evidence=seq,
        labels=["stand-in"] if reason else [],
        data={"box": box, "stand_in": reason, "software": software, "survey": survey},
    )
