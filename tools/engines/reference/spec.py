"""The bench spec: what the reference engine runs, validated, plus the per-rank shapes derived from it.

Validation needs only pydantic (no torch), so a bad spec is rejected before anything heavy loads.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

# The DSV4 paged cache layout (tools/kernels/dsv4_cache.py) fixes the head dim split.
CACHE_NOPE_DIM = 448
CACHE_ROPE_DIM = 64
# SGLang's DSV4 backend asserts every index row's width is a multiple of 64 and pads with -1.
INDEX_ALIGN = 64
SUPPORTED_RATIOS = (0, 4, 128)
BACKENDS = ("torch", "sglang-triton", "splitk", "flashmla")
# Backends whose kernels are Triton: on a CPU they run under the Triton interpreter.
TRITON_BACKENDS = ("sglang-triton", "splitk")


class SpecError(ValueError):
    """A spec that cannot be run; the message is one line."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelShape(_Strict):
    """Whole-model shapes (as in the model's config), before tensor parallelism."""

    hidden: int = Field(gt=0)
    heads: int = Field(gt=0)
    nope_dim: int = Field(gt=0)
    rope_dim: int = Field(gt=0)
    q_lora_rank: int = Field(gt=0)
    o_lora_rank: int = Field(gt=0)
    o_groups: int = Field(default=8, gt=0)
    index_topk: int = Field(gt=0)
    index_heads: int = Field(gt=0)
    index_head_dim: int = Field(gt=0)
    experts: int = Field(gt=0)
    experts_per_token: int = Field(gt=0)
    moe_intermediate: int = Field(gt=0)
    shared_experts: int = Field(ge=0)
    layers: int = Field(gt=0)
    sliding_window: int = Field(gt=0)
    compress_ratios: list[int]
    page_size: int = Field(gt=0)

    @model_validator(mode="after")
    def _consistent(self) -> "ModelShape":
        if (self.nope_dim, self.rope_dim) != (CACHE_NOPE_DIM, CACHE_ROPE_DIM):
            raise ValueError(
                f"nope_dim/rope_dim must be {CACHE_NOPE_DIM}/{CACHE_ROPE_DIM} (the DSV4 FP8 cache layout), "
                f"got {self.nope_dim}/{self.rope_dim}"
            )
        if len(self.compress_ratios) != self.layers:
            raise ValueError(f"compress_ratios has {len(self.compress_ratios)} entries for {self.layers} layers")
        bad = sorted({r for r in self.compress_ratios if r not in SUPPORTED_RATIOS})
        if bad:
            raise ValueError(f"compress_ratios values {bad} unsupported (expected {list(SUPPORTED_RATIOS)})")
        for ratio in {r for r in self.compress_ratios if r}:
            if self.page_size % ratio:
                raise ValueError(f"page_size {self.page_size} is not a multiple of compress ratio {ratio}")
        if self.heads % self.o_groups:
            raise ValueError(f"heads {self.heads} not divisible by o_groups {self.o_groups}")
        if self.experts_per_token > self.experts:
            raise ValueError(f"experts_per_token {self.experts_per_token} > experts {self.experts}")
        if self.hidden % 8:
            raise ValueError(f"hidden {self.hidden} must be a multiple of 8 (grouped GEMM 16-byte strides)")
        return self


class ProfileSpec(_Strict):
    batch: int = Field(gt=0)
    steps: int = Field(gt=0)


class BenchSpec(_Strict):
    """One bench call. ``overrides`` replaces model fields (how a CPU run gets reduced shapes)."""

    device: Literal["auto", "cpu", "cuda"] = "auto"
    model: ModelShape
    tp: int = Field(default=1, gt=0)
    # false: this process runs rank 0's shapes of TP ``tp`` alone, no collective; true: one process per
    # rank, joined by torch.distributed (NCCL on GPUs, gloo on the CPU), all-reduces where the model has them
    distributed: bool = False
    # expert parallelism: 1 (every rank holds every expert, FFN width split over tp) or tp (each rank holds
    # experts / tp experts at full width; tokens dispatched to them and combined back by all-to-all)
    ep: int = Field(default=1, gt=0)
    pad_heads_to: int | None = Field(default=64, gt=0)
    layers: int = Field(default=2, gt=0)
    experts: int | None = Field(default=None, gt=0)
    attention: Literal["torch", "sglang-triton", "splitk", "flashmla"] = "sglang-triton"
    batch_sizes: list[int] = Field(default_factory=lambda: [1, 16], min_length=1)
    context_len: int = Field(default=4096, gt=0)
    steps: int = Field(default=10, gt=0)
    warmup: int = Field(default=3, ge=0)
    cuda_graph: bool = False
    # torch.compile of the non-attention part (model.step_impl)
    compile: bool = False
    # routed experts: one torch._grouped_mm per projection, or a per-expert loop (not capturable)
    moe: Literal["grouped", "loop"] = "grouped"
    # decode steps captured per CUDA graph; a step's time is a replay's / steps_per_graph
    steps_per_graph: int = Field(default=1, gt=0, le=64)
    # a planted spin after every step, this fraction of the setting's own step (GPU only; planted.py)
    delay_frac: float = Field(default=0.0, ge=0.0, lt=0.5)
    profile: ProfileSpec | None = None
    seed: int = 0
    overrides: dict[str, int | list[int]] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> "BenchSpec":
        if any(b <= 0 for b in self.batch_sizes):
            raise ValueError(f"batch_sizes must be positive, got {self.batch_sizes}")
        if self.steps_per_graph > 1 and not self.cuda_graph:
            raise ValueError(f"steps_per_graph {self.steps_per_graph} needs cuda_graph")
        if self.moe == "loop" and self.cuda_graph:
            raise ValueError("moe loop reads each expert's token count on the host: it cannot be captured "
                             "in a CUDA graph (cuda_graph must be false)")
        if self.delay_frac and self.device == "cpu":
            raise ValueError("delay_frac: the planted delay is a GPU spin (torch.cuda._sleep); device is cpu")
        if self.overrides:
            unknown = sorted(set(self.overrides) - set(ModelShape.model_fields))
            if unknown:
                raise ValueError(f"overrides: unknown model field(s) {unknown}")
        try:
            model = self.effective_model()
        except ValidationError as exc:
            raise ValueError(f"overrides: {_first_error(exc)}") from None
        if model.heads % self.tp:
            raise ValueError(f"heads {model.heads} not divisible by tp {self.tp}")
        if model.o_groups % self.tp:
            raise ValueError(f"o_groups {model.o_groups} not divisible by tp {self.tp}")
        if model.moe_intermediate % self.tp or (model.moe_intermediate // self.tp) % 8:
            raise ValueError(
                f"moe_intermediate {model.moe_intermediate} / tp {self.tp} must be a whole multiple of 8"
            )
        if self.ep not in (1, self.tp):
            raise ValueError(f"ep {self.ep} must be 1 or tp ({self.tp})")
        if self.ep > 1 and self.cuda_graph:
            raise ValueError("ep: the all-to-all split sizes are read on the host, which a CUDA graph cannot capture "
                             "(cuda_graph must be false)")
        if self.ep > 1 and not self.distributed:
            raise ValueError(f"ep {self.ep}: expert parallelism needs distributed (one process per rank)")
        if (self.experts or model.experts) % self.ep:
            raise ValueError(f"experts {self.experts or model.experts} not divisible by ep {self.ep}")
        if self.layers > model.layers:
            raise ValueError(f"layers {self.layers} > model layers {model.layers}")
        longest = max(model.compress_ratios[i] for i in select_layers(model.compress_ratios, self.layers))
        if self.context_len < longest:
            raise ValueError(f"context_len {self.context_len} holds no compressed token at compress ratio {longest}")
        if self.experts is not None and not model.experts_per_token <= self.experts <= model.experts:
            raise ValueError(
                f"experts {self.experts} must lie in [experts_per_token {model.experts_per_token}, "
                f"model experts {model.experts}]"
            )
        return self

    def effective_model(self) -> ModelShape:
        """The model shapes with ``overrides`` applied (validated again as a whole)."""
        if not self.overrides:
            return self.model
        return ModelShape(**{**self.model.model_dump(), **self.overrides})


def _first_error(err: ValidationError) -> str:
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first["loc"])
    msg = first["msg"].removeprefix("Value error, ")
    more = f" (+{err.error_count() - 1} more)" if err.error_count() > 1 else ""
    return (f"{loc}: {msg}{more}" if loc else f"{msg}{more}").replace("\n", " ")


def _one_line(err: ValidationError) -> str:
    return f"bad spec: {_first_error(err)}"


def _parsed(model, text: str):
    raw = _load_json(text)
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise SpecError(_one_line(exc)) from None


def parse_spec(text: str) -> BenchSpec:
    """Parse a spec from a JSON string, or ``@path`` to a JSON file; raises SpecError (one line)."""
    return _parsed(BenchSpec, text)


def _load_json(text: str) -> dict:
    if text.startswith("@"):
        path = Path(text[1:])
        try:
            text = path.read_text()
        except OSError as exc:
            raise SpecError(f"bad spec: cannot read {path}: {exc.strerror}") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecError(f"bad spec: not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    if not isinstance(raw, dict):
        raise SpecError(f"bad spec: expected a JSON object, got {type(raw).__name__}")
    return raw


def round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def kernel_num_heads(heads: int, tp: int, pad_heads_to: int | None) -> int:
    """Query heads the attention kernel is launched with on one rank.

    Mirrors SGLang's ``DeepseekV4 _kernel_num_heads`` for backends without an exact-head
    specialization, with its 64 taken from ``pad_heads_to``: no padding at tp 1; otherwise the
    per-rank heads are padded to ``pad_heads_to`` when they fit, else the kernel gets all heads.
    ``pad_heads_to`` null means no padding (a backend that takes the native per-rank width).
    """
    local = heads // tp
    if tp == 1 or pad_heads_to is None:
        return local
    return pad_heads_to if local <= pad_heads_to else heads


def select_layers(compress_ratios: list[int], count: int) -> list[int]:
    """Model layer ids to run: ``count`` layers whose compress-ratio mix follows the model's.

    Slots go to each ratio by largest remainder of its share of the model's layers (ties to the
    more common ratio, then the smaller); each ratio contributes its first layers in model order.
    """
    total = len(compress_ratios)
    counts = {r: compress_ratios.count(r) for r in sorted(set(compress_ratios))}
    quotas = {r: count * n / total for r, n in counts.items()}
    slots = {r: math.floor(q) for r, q in quotas.items()}
    by_remainder = sorted(counts, key=lambda r: (-(quotas[r] - slots[r]), -counts[r], r))
    for ratio in by_remainder[: count - sum(slots.values())]:
        slots[ratio] += 1
    chosen: list[int] = []
    for ratio, n in slots.items():
        chosen += [i for i, r in enumerate(compress_ratios) if r == ratio][:n]
    return sorted(chosen)


class RankShapes(BaseModel):
    """Per-rank shapes actually run (reported in the bench JSON)."""

    model_config = ConfigDict(frozen=True)

    tp: int
    hidden: int
    heads_per_rank: int
    kernel_heads: int
    head_dim: int
    q_lora_rank: int
    o_lora_rank: int
    o_groups_per_rank: int
    topk: int
    index_heads: int
    index_head_dim: int
    sliding_window: int
    swa_topk_width: int
    page_size: int
    context_len: int
    layers_model: int
    layers_run: int
    layer_ids: list[int]
    layer_compress_ratios: list[int]
    experts_model: int
    experts_run: int
    experts_per_token: int
    moe_intermediate_per_rank: int
    shared_intermediate_per_rank: int


def rank_shapes(spec: BenchSpec) -> RankShapes:
    model = spec.effective_model()
    layer_ids = select_layers(model.compress_ratios, spec.layers)
    return RankShapes(
        tp=spec.tp,
        hidden=model.hidden,
        heads_per_rank=model.heads // spec.tp,
        kernel_heads=kernel_num_heads(model.heads, spec.tp, spec.pad_heads_to),
        head_dim=model.nope_dim + model.rope_dim,
        q_lora_rank=model.q_lora_rank,
        o_lora_rank=model.o_lora_rank,
        o_groups_per_rank=model.o_groups // spec.tp,
        topk=model.index_topk,
        index_heads=model.index_heads,
        index_head_dim=model.index_head_dim,
        sliding_window=model.sliding_window,
        swa_topk_width=round_up(model.sliding_window, INDEX_ALIGN),
        page_size=model.page_size,
        context_len=spec.context_len,
        layers_model=model.layers,
        layers_run=len(layer_ids),
        layer_ids=layer_ids,
        layer_compress_ratios=[model.compress_ratios[i] for i in layer_ids],
        experts_model=model.experts,
        experts_run=spec.experts or model.experts,
        experts_per_token=model.experts_per_token,
        moe_intermediate_per_rank=model.moe_intermediate // spec.tp,
        shared_intermediate_per_rank=model.moe_intermediate * model.shared_experts // spec.tp,
    )


# Fields one run of a sweep may change; the rest (model, shapes, seed, device, batch sizes, steps)
# are the sweep's, so that every run uses the weights the sweep built once.
RUN_FIELDS = ("attention", "cuda_graph", "compile", "moe", "steps_per_graph", "delay_frac")
# Fields a run of a distributed sweep may change as well: the processes hold the whole model's weights
# and shard them for each (tp, ep) asked; a run at a tp below the sweep's runs on the first tp ranks.
DISTRIBUTED_RUN_FIELDS = ("tp", "ep")


class SweepRun(_Strict):
    label: str = Field(min_length=1)
    changes: dict[str, bool | int | float | str] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)


class SweepSpec(_Strict):
    """Runs of one process in order, each the ``base`` spec with its ``changes`` (RUN_FIELDS only)
    and its ``env`` set in the process environment while it runs."""

    base: BenchSpec
    runs: list[SweepRun] = Field(min_length=1)

    @model_validator(mode="after")
    def _runs_valid(self) -> "SweepSpec":
        if self.base.profile is not None:
            raise ValueError("base.profile: a sweep takes no profile (engine.bench does)")
        for i, run in enumerate(self.runs):
            fields = RUN_FIELDS + (DISTRIBUTED_RUN_FIELDS if self.base.distributed else ())
            unknown = sorted(set(run.changes) - set(fields))
            if unknown:
                raise ValueError(f"runs[{i}] ({run.label}): changes {unknown} are not per-run fields {list(fields)}")
            try:
                self.spec_of(i)
            except ValidationError as exc:
                raise ValueError(f"runs[{i}] ({run.label}): {_first_error(exc)}") from None
        return self

    def world(self) -> int:
        """Processes the sweep runs in: the largest tp of its runs (1 unless distributed)."""
        return max(self.spec_of(i).tp for i in range(len(self.runs))) if self.base.distributed else 1

    def spec_of(self, index: int) -> BenchSpec:
        """Run ``index``'s full bench spec (validated)."""
        return BenchSpec.model_validate({**self.base.model_dump(), **self.runs[index].changes})


def parse_sweep_spec(text: str) -> SweepSpec:
    """Like parse_spec, for a sweep; raises SpecError (one line)."""
    return _parsed(SweepSpec, text)
