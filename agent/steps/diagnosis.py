"""The grid tool's kernel diagnosis (tools/kernel_source/diagnosis.py) as the grid and round-2 steps show
it: a point's summary (bytes loaded against unique bytes, how the inner products are formed, the
padding, Nsight Compute's bound and stalls), its table, and what the split-K rewrite would remove of it."""

from __future__ import annotations

import math
from typing import Any

from agent.steps.ncu_counters import BANK_READS, binding
from schema.finding import Table


def stall_text(ncu: dict[str, Any], top: int = 3) -> str:
    """The largest warp-stall reasons, e.g. "mio_throttle 2.58 (32%), short_scoreboard 1.49 (18%)"."""
    return ", ".join(f"{s['reason']} {s['value']:.3g}" + (f" ({s['share']:.0%})" if s.get("share") is not None else "")
                     for s in (ncu.get("stalls") or [])[:top])


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
    and the speedup that follows from what binds, with its basis and the call it is for.

    The rewrite gathers each KV tile once for a block of heads (a redundancy of about 1, tested in
    tests/test_kernel_diagnosis.py) and forms both inner products with ``tl.dot``. Where the run's own
    Nsight Compute capture was read (``ncu["counters"]``, agent/steps/ncu_counters.py), what binds comes
    from its counters (``_counter_basis``). Otherwise, on a kernel Nsight Compute finds L1/latency-bound,
    its time is taken to follow the bytes its programs pull through L1/TEX, so loading every byte once
    divides the time by up to loaded/unique; without ncu data the same ratio rests on an unmeasured bound.
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
    speedup, basis, kind, binds = None, "", "upper estimate", None
    counters = ncu.get("counters")
    if factor is not None and counters and not counters.get("error"):
        binds = binding(counters, diagnosis.get("loaded_bytes"))
    if factor is not None and binds is not None and binds["bytes_bind"] is False:
        speedup, basis, kind = factor, _counter_basis(diagnosis, counters, binds), "estimate (no side: not a bound)"
    elif factor is not None:
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
    call = diagnosis.get("call")
    if speedup is not None and call:
        basis = f"for the call at {call_text(call)}: " + basis
    return {"removes": [r["cause"] for r in removes], "causes": removes, "speedup": speedup,
            "speedup_kind": kind if speedup is not None else None, "basis": basis, "bound": bound, "call": call,
            "binding": binds}


def call_text(call: dict[str, Any]) -> str:
    """The call an estimate is for, as its shapes read: "profiled B=16 (B 16, H 64, topk 512)"."""
    shapes = ", ".join(f"{k} {v}" for k, v in (call.get("shapes") or {}).items() if not k.startswith("has_"))
    return f"{call.get('point', '?')} ({shapes})" if shapes else str(call.get("point", "?"))


def _counter_basis(diagnosis: dict[str, Any], counters: dict[str, Any], binds: dict[str, Any]) -> str:
    """The estimate's basis where the counters say the bytes do not bind: what binds (metric by metric), where
    the source model and the counters disagree, and why the byte ratio then is an estimate with no side."""
    factor, loaded, unique = diagnosis["redundancy_factor"], diagnosis.get("loaded_bytes"), diagnosis.get("unique_bytes")
    rate = binds.get("loaded_bytes_per_s")
    data = ", ".join(f"{unit} {pct:.3g}%" for unit, pct in (counters.get("bytes_pct") or {}).items() if pct is not None)
    said = (f"what binds, from the counters of {counters['source']} (the diagnosis' \"what binds\" row names each metric): "
            f"{binds['short']}. The counters and the source model "
            f"disagree: the source model has the programs load {loaded:,} B a launch, {factor:.3g}x the {unique:,} unique"
            + (f", which over the launch's {counters['duration_ms']:.4g} ms ({counters['duration_metric']}) is "
               f"{rate / 1e12:.3g} TB/s" if rate else "")
            + f"; no unit that moves bytes is near its peak (L1 data-bank reads {_pct_of(counters)}, {data}), so the "
            "time does not follow those bytes, the premise of the byte ratio as an upper estimate")
    lines = ", ".join(str(x) for x in diagnosis.get("multiply_reduce_lines") or [])
    said += (f". The rewrite cuts the binding path twice: it loads each KV tile once per head block ({factor:.3g}x fewer "
             "load bytes, and their LSU wavefronts)"
             + (f" and forms the inner products with tl.dot, so the multiply-reduce's tl.sum reductions (lines {lines}: "
                "shared-memory and shuffle traffic, a likely source of the MIO stalls: the capture does not attribute them "
                "by source line) leave it" if diagnosis.get("inner_product") != "tensor-core dot" else "")
             + f"; the estimate takes the kernel's time to fall as its loads do ({factor:.3g}x): no bound on either side, "
             "since the reductions removed can add to it and what binds next (the rewrite has no Nsight Compute capture) can take from it")
    return said


def _pct_of(counters: dict[str, Any]) -> str:
    bank = (counters.get("l1_parts") or {}).get(BANK_READS)
    return "?" if bank is None else f"{bank:.3g}%"


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
        "file": display_path(report.get("file", ""), source_root),
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
        # the call the estimate is for: an estimate is held against that call's measurement, never a pooled one
        "call": {"point": point["label"], "batch": point.get("batch"), "shapes": dict(point.get("shapes") or {})},
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
    binds = (d.get("rewrite_estimate") or {}).get("binding")
    if binds:
        rows.append(["what binds (counters)", binds["text"], "bytes bind" if binds["bytes_bind"] else
                     "not the bytes: " + ", ".join(x for x in (binds["busiest_l1"], binds["top_stall_group"] and
                                                                f"{binds['top_stall_group']} stalls", binds["limiter"] and
                                                                f"occupancy by {binds['limiter']}") if x), binds["source"] or "-"])
    estimate = d.get("rewrite_estimate") or {}
    return Table(title=f"Diagnosis of {kernel} ({d.get('point', '?')})", columns=["cause", "evidence", "figure", "source"], rows=rows,
                 note=("rewrite removes: " + (", ".join(estimate.get("removes") or []) or "nothing diagnosed") +
                       (f"; speedup {estimate['speedup']:.3g}x ({estimate['speedup_kind']}): {estimate['basis']}" if estimate.get("speedup") else
                        (f"; {estimate['basis']}" if estimate.get("basis") else "")) +
                       ". Assumptions: " + "; ".join(d.get("assumptions") or [])))


def display_path(path: str, source_root: str | None) -> str:
    if source_root and path.startswith(source_root.rstrip("/") + "/"):
        return "sglang/" + path[len(source_root.rstrip("/")) + 1:]
    return path
