"""Sparse MLA decode backends over the DSV4 paged FP8 cache, all with the signature of SGLang's
``flash_mla_sparse_decode_triton(q, k_cache, indices, topk_length, attn_sink, head_dim_v,
softmax_scale, extra_k_cache, extra_indices, extra_topk_length) -> (out [B,1,H,512] bf16, lse [B,H,1])``.

- ``torch``: a plain PyTorch gather + softmax (bf16 KV, float32 scores), in the manner of SGLang's
  torch fallback ``_sm120_sparse_decode_fwd`` (written here, not imported).
- ``sglang-triton``: the upstream ``_tiled_sparse_decode_kernel`` via tools.kernels.upstream.
- ``splitk``: tools.kernels.sparse_mla_decode.sparse_mla_decode (imported when asked for).

Under the Triton CPU interpreter each Triton kernel launch is wrapped in a profiler range named
after the kernel, so a CPU trace shows the kernel the way a GPU trace would.
"""

from __future__ import annotations

import importlib
import threading
import types
from typing import Callable

import torch

from tools.kernels import dsv4_cache

DecodeFn = Callable[..., tuple[torch.Tensor, torch.Tensor]]
SPLITK_MODULE = "tools.kernels.sparse_mla_decode"


class BackendUnavailable(RuntimeError):
    """The backend's code is not installed on this box (bad input for this box, not a crash)."""


def _gather_kv_bf16(k_cache: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """Dequantize the tokens at ``indices`` (>= 0, any shape) to bf16 ``[..., 512]``.

    FP8 e4m3 times a power-of-two scale is exact in bf16, so nothing is lost against float32.
    """
    num_pages, page_size = k_cache.shape[0], k_cache.shape[1]
    stride = k_cache.stride(0)
    raw = k_cache.as_strided((num_pages * stride,), (1,)).view(torch.uint8)
    flat = indices.reshape(-1).long()
    page, slot = flat // page_size, flat % page_size
    data = page * stride + slot * dsv4_cache.DATA_STRIDE
    scales_at = page * stride + page_size * dsv4_cache.DATA_STRIDE + slot * dsv4_cache.SCALE_STRIDE
    dev = raw.device
    row = raw[data[:, None] + torch.arange(dsv4_cache.DATA_STRIDE, device=dev)]  # [N, 576]
    nope = row[:, : dsv4_cache.NOPE_DIM].view(torch.float8_e4m3fn).float()
    rope = row[:, dsv4_cache.NOPE_DIM :].contiguous().view(torch.bfloat16)
    exponents = raw[scales_at[:, None] + torch.arange(dsv4_cache.NUM_TILES, device=dev)].float() - 127.0
    nope = nope.view(-1, dsv4_cache.NUM_TILES, dsv4_cache.TILE) * torch.exp2(exponents).unsqueeze(-1)
    kv = torch.cat([nope.view(-1, dsv4_cache.NOPE_DIM).to(torch.bfloat16), rope], dim=-1)
    return kv.view(*indices.shape, dsv4_cache.HEAD_DIM)


def _invalid_mask(indices: torch.Tensor, topk_length: torch.Tensor | None) -> torch.Tensor:
    batch, topk = indices.shape[0], indices.shape[-1]
    invalid = indices.reshape(batch, topk) < 0
    if topk_length is not None:
        invalid |= torch.arange(topk, device=indices.device)[None, :] >= topk_length.view(batch, 1)
    return invalid


def torch_sparse_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    indices: torch.Tensor,
    topk_length: torch.Tensor | None,
    attn_sink: torch.Tensor | None,
    head_dim_v: int,
    softmax_scale: float | None,
    extra_k_cache: torch.Tensor | None = None,
    extra_indices: torch.Tensor | None = None,
    extra_topk_length: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sparse MLA decode in plain PyTorch: one softmax over the main and extra tokens together.

    Tokens with index < 0 or past ``topk_length`` are masked; the sink joins the denominator only;
    a row with no valid token gives output 0. Returns (out ``[B,1,H,head_dim_v]`` bf16, lse
    ``[B,H,1]`` float32 without the sink), as SGLang's torch fallback does.
    """
    batch, _, heads, dim = q.shape
    if softmax_scale is None:
        softmax_scale = dim ** -0.5
    kv = _gather_kv_bf16(k_cache, indices.reshape(batch, -1).clamp(min=0))
    invalid = _invalid_mask(indices, topk_length)
    if extra_k_cache is not None and extra_indices is not None:
        extra_kv = _gather_kv_bf16(extra_k_cache, extra_indices.reshape(batch, -1).clamp(min=0))
        kv = torch.cat([kv, extra_kv], dim=1)
        invalid = torch.cat([invalid, _invalid_mask(extra_indices, extra_topk_length)], dim=1)
    # Masked slots still hold whatever bytes the cache has (fp8 NaN patterns included): zero them, as
    # SGLang's fallback does, or 0 * NaN poisons the weighted sum.
    kv_f = kv.float().masked_fill(invalid[:, :, None], 0.0)
    scores = torch.einsum("bhd,btd->bht", q.reshape(batch, heads, dim).float(), kv_f) * softmax_scale
    scores = scores.masked_fill(invalid[:, None, :], float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)  # [B, H]
    denominator = lse if attn_sink is None else torch.logaddexp(lse, attn_sink.float().view(1, heads))
    empty = torch.isneginf(lse)
    weights = torch.exp(scores - torch.where(empty, 0.0, denominator).unsqueeze(-1))
    out = torch.einsum("bht,btd->bhd", weights, kv_f[..., :head_dim_v])
    out = out.masked_fill(empty.unsqueeze(-1), 0.0)
    return out.to(torch.bfloat16).view(batch, 1, heads, head_dim_v), lse.view(batch, heads, 1)


def _kernel_name(kernel: object) -> str:
    inner = kernel
    while not isinstance(inner, types.FunctionType) and hasattr(inner, "fn"):
        inner = inner.fn
    return getattr(inner, "__name__", type(kernel).__name__)


def _is_triton_kernel(obj: object) -> bool:
    return type(obj).__module__.startswith("triton.") and hasattr(obj, "fn") and hasattr(type(obj), "__getitem__")


def _off_the_profiled_thread(launch, args, kwargs):
    """Run ``launch`` on a fresh thread and wait for it. The profiler (profile_all_threads off, its
    default) records only the threads it started on: the interpreter's own Python calls and aten ops
    stay out of the trace, so a trace with Python stacks stays small, and the kernel is one host
    range, as a GPU kernel is one event."""
    outcome: dict = {}
    inference, grad = torch.is_inference_mode_enabled(), torch.is_grad_enabled()

    def work():
        try:
            with torch.inference_mode(inference), torch.set_grad_enabled(grad):
                outcome["value"] = launch(*args, **kwargs)
        except BaseException as exc:  # re-raised on the caller's thread
            outcome["error"] = exc

    worker = threading.Thread(target=work, name="triton-interpreter")
    worker.start()
    worker.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


class _RangedKernel:
    """A Triton kernel whose launches run inside ``record_function(<kernel name>)``."""

    def __init__(self, kernel: object):
        self._kernel = kernel
        self.name = _kernel_name(kernel)

    def __getitem__(self, grid):
        launch = self._kernel[grid]

        def ranged(*args, **kwargs):
            if not torch.autograd.profiler._is_profiler_enabled:
                return launch(*args, **kwargs)
            with torch.profiler.record_function(self.name):
                return _off_the_profiled_thread(launch, args, kwargs)

        return ranged

    def __getattr__(self, item):
        return getattr(self._kernel, item)


def with_kernel_ranges(module: types.ModuleType, entry: str) -> DecodeFn:
    """``module.entry`` rebound to a copy of the module's globals in which every Triton kernel is
    wrapped in a profiler range named after it. The module itself is left untouched: its own
    functions are re-created over the copied globals (only those defined in its file)."""
    namespace = dict(vars(module))
    for name, obj in vars(module).items():
        if _is_triton_kernel(obj):
            namespace[name] = _RangedKernel(obj)
    source = getattr(module, "__file__", None)
    for name, obj in vars(module).items():
        if isinstance(obj, types.FunctionType) and obj.__code__.co_filename == source:
            clone = types.FunctionType(obj.__code__, namespace, obj.__name__, obj.__defaults__, obj.__closure__)
            clone.__kwdefaults__ = obj.__kwdefaults__
            namespace[name] = clone
    return namespace[entry]


def _triton_interpreter() -> bool:
    from tools.kernels.upstream import interpreter_active

    return interpreter_active()


def flashmla_sparse_decode(flash_mla) -> DecodeFn:
    """FlashMLA's sparse decode (the ``sgl-flash-mla`` wheel) behind the upstream wrapper's signature.

    It takes the same paged FP8 cache, invalid -1 indices, valid lengths, the extra cache and the
    sink natively. Its scheduling metadata is kept per call site (shapes and the length tensors'
    addresses): reusing it is valid only for the same lengths, which a decode step at a fixed
    position keeps, and the call that fills it must come before any CUDA-graph capture (the engine's
    warm-up step is that call).
    """
    metadata: dict[tuple, object] = {}

    def decode(q, k_cache, indices, topk_length, attn_sink, head_dim_v, softmax_scale,
               extra_k_cache=None, extra_indices=None, extra_topk_length=None):
        key = (tuple(q.shape), tuple(indices.shape), None if extra_indices is None else tuple(extra_indices.shape),
               None if topk_length is None else topk_length.data_ptr(),
               None if extra_topk_length is None else extra_topk_length.data_ptr())
        if key not in metadata:
            metadata[key] = flash_mla.get_mla_metadata()[0]
        sched = metadata[key]
        out, lse = flash_mla.flash_mla_with_kvcache(
            q, k_cache, None, None, head_dim_v, sched, None, softmax_scale, False, True, indices=indices,
            attn_sink=attn_sink, extra_k_cache=extra_k_cache, extra_indices_in_kvcache=extra_indices,
            topk_length=topk_length, extra_topk_length=extra_topk_length, use_legacy=True,
        )
        return out, lse

    return decode


class CallLog:
    """The attention calls a decode step makes, as the backend sees them: the shapes of each call and,
    for the split-K backend, the tile configuration and split counts its wrapper chooses. The
    rewrite is checked and timed at exactly these calls, not at shapes guessed from the model."""

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def reset(self) -> None:
        self.calls = []

    def distinct(self) -> list[dict]:
        """Distinct calls, in first-seen order, each with how many times the step made it."""
        seen: dict[str, dict] = {}
        for call in self.calls:
            key = repr(sorted(call.items()))
            seen.setdefault(key, {**call, "calls_per_step": 0})["calls_per_step"] += 1
        return list(seen.values())


CALLS = CallLog()


def _describe_call(module, q, indices, topk_length, attn_sink, extra_indices) -> dict:
    batch, _, heads, _ = q.shape
    call = {"batch": int(batch), "heads": int(heads), "topk": int(indices.shape[-1]),
            "extra_topk": int(extra_indices.shape[-1]) if extra_indices is not None else None,
            "sink": attn_sink is not None, "lengths": topk_length is not None}
    if module is not None:
        plan = module.device_plan(call["batch"], call["topk"], call["heads"], q.device, call["extra_topk"])
        from tools.kernels.splitk.tiles import config_name as name  # every named config, the sm_120 family's included
        call["config"] = name(plan.cfg)
        call["splits"] = plan.splits
        if extra_indices is not None:
            call["extra_config"] = name(plan.extra_cfg)
            call["extra_splits"] = plan.extra_splits
            call["fused"] = plan.fused  # one launch over both caches (its splits are "splits")
    return call


def recording(fn: DecodeFn, module=None) -> DecodeFn:
    """``fn`` with each call's shapes (and, given the split-K module, its chosen config) appended to
    CALLS. Python-side only, so a CUDA graph captures the same kernels."""

    def decode(q, k_cache, indices, topk_length, attn_sink, head_dim_v, softmax_scale,
               extra_k_cache=None, extra_indices=None, extra_topk_length=None):
        CALLS.calls.append(_describe_call(module, q, indices, topk_length, attn_sink, extra_indices))
        return fn(q, k_cache, indices, topk_length, attn_sink, head_dim_v, softmax_scale,
                  extra_k_cache, extra_indices, extra_topk_length)

    return decode


def load_backend(name: str) -> DecodeFn:
    """The decode function of backend ``name``.

    Raises BackendUnavailable when its code is absent (sglang not installed, split-K module not
    written yet); other import errors propagate as failures.
    """
    if name == "torch":
        return recording(torch_sparse_decode)
    if name == "sglang-triton":
        from tools.kernels import upstream

        try:
            module = upstream.load()
        except upstream.SglangMissing as exc:
            message = str(exc)
            if "pip install" not in message:
                message += f" (the sglang-triton backend needs: pip install --no-deps sglang=={upstream.SGLANG_VERSION})"
            raise BackendUnavailable(message) from None
        entry = "flash_mla_sparse_decode_triton"
    elif name == "splitk":
        try:
            module = importlib.import_module(SPLITK_MODULE)
        except ModuleNotFoundError as exc:
            if exc.name != SPLITK_MODULE:
                raise
            raise BackendUnavailable(f"the splitk backend needs {SPLITK_MODULE}, which is not present") from None
        entry = "sparse_mla_decode"
        if not hasattr(module, entry):
            raise BackendUnavailable(f"{SPLITK_MODULE} has no {entry}() yet")
    elif name == "flashmla":
        try:
            flash_mla = importlib.import_module("flash_mla")
        except ImportError as exc:
            raise BackendUnavailable(f"the flashmla backend needs the sgl-flash-mla wheel: {exc}") from None
        if not getattr(flash_mla, "has_legacy", lambda: False)():
            raise BackendUnavailable("flash_mla is installed without its legacy (sm_90) kernels")
        return recording(flashmla_sparse_decode(flash_mla))
    else:
        raise ValueError(f"unknown attention backend {name!r}")
    fn = with_kernel_ranges(module, entry) if _triton_interpreter() else getattr(module, entry)
    return recording(fn, module if name == "splitk" else None)


def upstream_kernel_configs() -> tuple[dict | None, list[dict]]:
    """The upstream autotuner's last choice and its choice per autotune key, if it has run."""
    from tools.kernels import upstream

    tuner = getattr(upstream.load(), upstream.KERNEL_NAME)
    by_key = []
    for key, config in sorted(getattr(tuner, "cache", {}).items(), key=lambda kv: str(kv[0])):
        by_key.append(
            {"key": [k if isinstance(k, (int, float)) else str(k) for k in key]}
            | dict(config.kwargs, num_warps=config.num_warps, num_stages=config.num_stages)
        )
    return upstream.chosen_config(), by_key
