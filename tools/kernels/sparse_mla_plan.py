"""The split-K rewrite's launch plan at given shapes: which kernel each cache launches, with which tile
config and split count, and the launcher's symbols pinned for the grid reader (``kernel.grid``).

``python -m tools.kernels.sparse_mla_plan --points JSON`` prints one JSON object. Each point is
``{"label", "batch", "heads", "topk", "extra_topk"?, "lengths"?, "sink"?}`` and either ``"device": "cpu"|"cuda"``
(planned as the wrapper plans on this box: this device's compute capability and SM count) or
``"arch": 120, "sms": 188`` (planned for another GPU: the declared hardware). The plan is the
wrapper's own (``tiles.plan_call``: two launches, each cache on its own width's config and split count,
or one fused launch over both caches' joined row); which kernel a config launches follows
``_launch_splits``'s branches.
"""

from __future__ import annotations

import argparse
import json
import sys

# The pointer dtypes _launch_splits passes (q bf16, the float32 partials, int32 indices and lengths,
# bf16 P scratch, float32 alpha scratch): the grid reader's byte counts need them, the source does not say.
SPLIT_DTYPES = {"q_ptr": "bf16", "o_part_ptr": "fp32", "lse_part_ptr": "fp32", "indices_ptr": "int32",
                "topk_len_ptr": "int32", "p_scratch_base": "bf16", "alpha_scratch_base": "fp32"}
COMBINE_DTYPES = {"o_part_ptr": "fp32", "lse_part_ptr": "fp32", "sink_ptr": "fp32", "out_ptr": "bf16", "lse_ptr": "fp32"}


def kernel_of(cfg) -> tuple[str, bool]:
    """(kernel name, whether it is Triton-language code) of a tile config, as ``_launch_splits`` picks it."""
    if cfg.sm90:
        return ("_split_kernel_ws" if cfg.ws_regs else "_split_kernel_sm90"), False
    if cfg.sm120:
        return "_split_kernel_sm120", True
    return ("_split_dhalf_kernel" if cfg.d_halves else "_split_kernel"), True


def plan_point(point: dict) -> dict:
    import torch
    import triton

    from tools.kernels.splitk import tiles

    if "device" in point:
        device = torch.device(point["device"])
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"{point.get('label')}: device cuda asked, none on this box")
        # "arch" beside "device": the declared GPU's plan on this device's SMs (a stand-in box, as the wrapper
        # plans under tools/kernels/splitk/declared.PLAN_ARCH_ENV)
        arch, sms = point.get("arch", tiles.device_arch(device)), tiles._sm_count(device)
    else:
        arch, sms = point.get("arch"), int(point["sms"])
    # the interpreter runs on this box only: a launch planned for another GPU is compiled code
    interpreting = int(tiles._interpreting()) if "device" in point else 0
    batch, heads, lengths = int(point["batch"]), int(point["heads"]), bool(point.get("lengths", True))
    extra_topk = int(point["extra_topk"]) if point.get("extra_topk") else None
    call = tiles.plan_call(batch, int(point["topk"]), heads, arch, sms, extra_topk)  # the wrapper's own plan
    if call.fused:  # one launch over the joined row (window tokens padded to whole tiles, then the compressed)
        caches = [("window+compressed", tiles.joined_width(int(point["topk"]), extra_topk), call.cfg, call.splits)]
    else:
        caches = [("window", int(point["topk"]), call.cfg, call.splits)]
        caches += [("compressed", extra_topk, call.extra_cfg, call.extra_splits)] if extra_topk else []
    launches, offset = [], 0
    for cache, topk, cfg, splits in caches:
        kernel, triton_language = kernel_of(cfg)
        shapes = {"batch": batch, "heads": heads, "topk": topk, "splits": splits, "split_offset": offset,
                  "has_len": int(lengths), "_interpreting()": interpreting,
                  **{f"cfg.{k}": int(v) for k, v in vars(cfg).items() if isinstance(v, (int, bool))}}
        launches.append({"cache": cache, "topk": topk, "kernel": kernel, "triton_language": triton_language,
                         "config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(cfg).items()},
                         "config_name": tiles.config_name(cfg), "splits": splits, "shapes": shapes, "dtypes": SPLIT_DTYPES,
                         "fused": call.fused})
        offset += splits
    total = offset
    splits_pad = triton.next_power_of_2(total)
    block_d = max(64, min(512, 4096 // splits_pad))  # as sparse_mla_decode_into sizes the combine
    combine = {"kernel": "_combine_kernel", "triton_language": True, "dtypes": COMBINE_DTYPES,
               "shapes": {"batch": batch, "heads": heads, "total": total, "splits_pad": splits_pad, "block_d": block_d,
                          "HEAD_DIM": tiles.HEAD_DIM, "HAS_SINK": int(bool(point.get("sink", True)))}}
    return {"label": point.get("label"), "arch": arch, "sms": sms, "interpreting": bool(interpreting),
            "launches": launches, "combine": combine}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.kernels.sparse_mla_plan", description=__doc__.splitlines()[0])
    parser.add_argument("--points", required=True, help="JSON list of points (see the module doc)")
    args = parser.parse_args(argv)
    try:
        points = json.loads(args.points)
        if not isinstance(points, list) or not points:
            raise ValueError("--points must be a non-empty JSON list")
        result = {"ok": True, "points": [plan_point(p) for p in points]}
    except (ValueError, KeyError, TypeError) as exc:
        print(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}"}))
        return 2
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
