"""The sm_120 plan's grid against the Hopper plan's, cell by cell, from the grid harness's raw samples.

    python -m scripts.sm120_grid_compare benchmarks/results/sm120-20261206 [--target 1.25] [--json]

DIR holds ``hopper/sparse_mla_decode_grid.json`` (the grid as the box plans it: the Hopper kernels, FlashMLA and
the upstream kernel) and ``sm120/sparse_mla_decode_grid.json`` (the same cells planned for sm_120 with Triton's
wgmma lowering off, in a process of its own: scripts/h200/grid_sm120_full.sh). For every cell and both
temperatures (warm: one set replayed; cold: every set in one graph) it states the time ratio sm_120 / Hopper
with a 95% Welch interval on the log replay samples (agent.stats.ratio_interval), and the same against
FlashMLA and upstream. A cell meets the target only when the interval's upper end is within it at both
temperatures; a cell whose interval straddles it is "undecided", never counted as met. Writes
``DIR/sm120_vs_hopper.json``; prints a summary (or the JSON with --json).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from agent.stats import ratio_interval  # noqa: E402

CONFIDENCE = 0.95
TEMPS = ("warm", "cold")
PEERS = ("flashmla", "upstream")


def _key(cell: dict) -> tuple:
    return cell["batch"], cell["topk"], cell["form"], cell["pattern"]


def _ratio(slow: dict, base: dict, temp: str) -> dict:
    """slow's time over base's (> 1: slow takes longer), from the raw samples; interval is 95% Welch on logs."""
    # ratio_interval(a, b) is exp(mean log a - mean log b): a's time over b's
    iv = ratio_interval(slow[f"{temp}_samples_us"], base[f"{temp}_samples_us"], CONFIDENCE)
    return {"ratio": iv.ratio, "low": iv.low, "high": iv.high, "n": iv.n, "note": iv.note,
            "median_us": slow[f"{temp}_us"], "base_median_us": base[f"{temp}_us"]}  # fmt: skip


def _faster(ratio: dict | None) -> bool:
    """The sm_120 plan faster than the peer: the whole interval below 1 (False when there is no interval)."""
    return ratio is not None and ratio["high"] is not None and ratio["high"] < 1.0


def verdict(ratios: list[dict], target: float) -> str:
    """'met' when every interval's upper end is within the target, 'missed' when any lower end is above it,
    else 'undecided' (an interval that straddles it, or none)."""
    if any(r["low"] is not None and r["low"] > target for r in ratios):
        return "missed"
    if all(r["high"] is not None and r["high"] <= target for r in ratios):
        return "met"
    return "undecided"


def compare(directory: Path, target: float) -> dict:
    hopper = json.loads((directory / "hopper" / "sparse_mla_decode_grid.json").read_text())
    sm120 = json.loads((directory / "sm120" / "sparse_mla_decode_grid.json").read_text())
    base = {_key(c): c for c in hopper["grid"]["cells"]}
    rows, absent = [], []
    for cell in sm120["grid"]["cells"]:
        h = base.get(_key(cell))
        if h is None or "rewrite" not in h or "rewrite" not in cell:
            absent.append(list(_key(cell)))
            continue
        row = {"batch": cell["batch"], "topk": cell["topk"], "form": cell["form"], "pattern": cell["pattern"],
               "sm120_config": cell["config"], "hopper_config": h["config"], "sm120_splits": cell["splits"],
               "hopper_splits": h["splits"]}  # fmt: skip
        for temp in TEMPS:
            row[f"vs_hopper_{temp}"] = _ratio(cell["rewrite"], h["rewrite"], temp)
            for peer in PEERS:
                if isinstance(h.get(peer), dict) and f"{temp}_samples_us" in h[peer]:
                    row[f"vs_{peer}_{temp}"] = _ratio(cell["rewrite"], h[peer], temp)
        row["verdict"] = verdict([row[f"vs_hopper_{t}"] for t in TEMPS], target)
        rows.append(row)
    not_met = [r for r in rows if r["verdict"] != "met"]
    worst = max(rows, key=lambda r: r["vs_hopper_warm"]["ratio"]) if rows else None
    warm = [r["vs_hopper_warm"]["ratio"] for r in rows]
    return {
        "source": str(directory),
        "target": target,
        "confidence": CONFIDENCE,
        "interval": "Welch t on the log replay samples of each side (agent.stats.ratio_interval)",
        "hopper_device": hopper["env"].get("device_name"), "sm120_device": sm120["env"].get("device_name"),
        "sm120_sass": sm120.get("sass", {}).get("ok"),
        "cells": len(rows), "absent": absent,
        "met": sum(r["verdict"] == "met" for r in rows),
        "missed": sum(r["verdict"] == "missed" for r in rows),
        "undecided": sum(r["verdict"] == "undecided" for r in rows),
        "warm_ratio_median": statistics.median(warm) if warm else None,
        "warm_ratio_range": [min(warm), max(warm)] if warm else None,
        "worst": worst and {k: worst[k] for k in ("batch", "topk", "form", "pattern", "sm120_config", "vs_hopper_warm")},
        **{f"faster_than_{peer}_warm": sum(_faster(r.get(f"vs_{peer}_warm")) for r in rows) for peer in PEERS},
        "not_met": [f"{r['batch']}x{r['topk']} {r['form']} {r['pattern']}" for r in not_met],
        "rows": rows,
    }


def summary(result: dict) -> str:
    w = result["worst"]
    lines = [
        f"{result['cells']} cells ({len(result['absent'])} absent); sm_120 plan / Hopper plan, warm median ratio "
        f"{result['warm_ratio_median']:.2f}x (range {result['warm_ratio_range'][0]:.2f}-{result['warm_ratio_range'][1]:.2f}x)",
        f"within {result['target']}x at both temperatures ({result['confidence']:.0%} interval): met {result['met']}, "
        f"missed {result['missed']}, undecided {result['undecided']}",
        f"worst: {w['batch']}x{w['topk']} {w['form']} {w['pattern']} ({w['sm120_config']}) "
        f"{w['vs_hopper_warm']['median_us']:.1f} vs {w['vs_hopper_warm']['base_median_us']:.1f} us, "
        f"{w['vs_hopper_warm']['ratio']:.2f}x [{w['vs_hopper_warm']['low']:.2f}, {w['vs_hopper_warm']['high']:.2f}]",
        f"faster than FlashMLA (warm, interval below 1): {result['faster_than_flashmla_warm']} cells; "
        f"than upstream: {result['faster_than_upstream_warm']}",
        f"SASS of the sm_120 process: ok={result['sm120_sass']}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--target", type=float, default=1.25, help="the time ratio sm_120 / Hopper to stay within")
    ap.add_argument("--json", action="store_true", help="print the comparison as JSON")
    args = ap.parse_args(argv)
    try:
        result = compare(args.dir, args.target)
    except (OSError, KeyError, ValueError) as exc:
        print(f"error: {args.dir}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    (args.dir / "sm120_vs_hopper.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1) if args.json else summary(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
