"""Agreement of an attention backend with the torch backend and the float32 reference, on one input.

The input is a c4 layer's two-cache decode at the spec's per-rank shapes (first batch size): the
window cache and indices as the engine builds them, top-k compressed slots drawn at random, one row
cut short by ``topk_length`` and one index set to -1, a random attention sink.
"""

from __future__ import annotations

import os

import torch

from tools.kernels import dsv4_cache

from . import model
from .attention import load_backend
from .bench import device_info, resolve_device
from .spec import INDEX_ALIGN, BenchSpec, rank_shapes, round_up


def _inputs(spec: BenchSpec, device: torch.device) -> dict:
    shapes = rank_shapes(spec)
    batch = spec.batch_sizes[0]
    gen = torch.Generator(device=device).manual_seed(spec.seed)
    state = model.make_layer_state(shapes, 4, batch, gen, device)
    compressed = shapes.context_len // 4
    k = min(shapes.topk, compressed)
    width = round_up(shapes.topk, INDEX_ALIGN)
    extra = torch.full((batch, 1, width), -1, dtype=torch.int32, device=device)
    for b in range(batch):
        pick = torch.randperm(compressed, generator=gen, device=device)[:k]
        extra[b, 0, :k] = (pick + state.extra_base[b]).int()
    lengths = torch.full((batch,), k, dtype=torch.int32, device=device)
    lengths[-1] = max(1, k // 2)
    extra[0, 0, 0] = -1
    return dict(
        q=model.random_tensor((batch, 1, shapes.kernel_heads, shapes.head_dim), gen, device),
        k_cache=state.swa_cache,
        indices=state.swa_indices,
        topk_length=state.swa_lengths,
        attn_sink=model.random_tensor((shapes.kernel_heads,), gen, device, 1.0, torch.float32),
        softmax_scale=shapes.head_dim ** -0.5,
        extra_k_cache=state.extra_cache,
        extra_indices=extra,
        extra_topk_length=lengths,
    ), shapes.model_dump(include={"kernel_heads", "head_dim", "topk", "swa_topk_width", "page_size", "context_len"})


def _lse_with_sink(name: str, lse: torch.Tensor, sink: torch.Tensor) -> torch.Tensor:
    # The torch fallback (like SGLang's) returns the LSE without the sink; the Triton wrappers include it.
    if name == "torch":
        return torch.logaddexp(lse.float(), sink.float().view(1, -1, 1))
    return lse.float()


def run(spec: BenchSpec) -> dict:
    """Outputs of ``spec.attention`` and ``torch`` against the float32 reference, and against each other."""
    device = resolve_device(spec.device)
    with torch.inference_mode():
        inputs, shapes = _inputs(spec, device)
        ref_out, ref_lse = dsv4_cache.reference_sparse_decode(**inputs)
        scale = float(ref_out.abs().max())
        outputs = {}
        for name in dict.fromkeys([spec.attention, "torch"]):
            fn = load_backend(name)
            out, lse = fn(
                inputs["q"], inputs["k_cache"], inputs["indices"], inputs["topk_length"], inputs["attn_sink"],
                dsv4_cache.HEAD_DIM, inputs["softmax_scale"], inputs["extra_k_cache"], inputs["extra_indices"],
                inputs["extra_topk_length"],
            )
            outputs[name] = (out.float(), _lse_with_sink(name, lse, inputs["attn_sink"]))
        comparisons = [
            {
                "backend": name,
                "against": "float32_reference",
                "max_abs_err": float((out - ref_out).abs().max()),
                "rel_to_max": float((out - ref_out).abs().max()) / scale,
                "lse_max_abs_err": float((lse - ref_lse).abs().max()),
                "out_dtype": "bfloat16",
            }
            for name, (out, lse) in outputs.items()
        ]
        if len(outputs) == 2:
            (a, (out_a, lse_a)), (b, (out_b, lse_b)) = outputs.items()
            comparisons.append({
                "backend": a,
                "against": b,
                "max_abs_err": float((out_a - out_b).abs().max()),
                "rel_to_max": float((out_a - out_b).abs().max()) / scale,
                "lse_max_abs_err": float((lse_a - lse_b).abs().max()),
                "out_dtype": "bfloat16",
            })
    return {
        "ok": True,
        "engine": "reference",
        "check": "attention",
        "attention": spec.attention,
        "device": device_info(device),
        "interpreter": os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"),
        "batch": spec.batch_sizes[0],
        "shapes": shapes,
        "ref_max_abs": scale,
        "comparisons": comparisons,
    }
