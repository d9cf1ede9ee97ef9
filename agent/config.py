"""Targets: the deployment under investigation, its goal, the engine settings and the routing thresholds.

A target is a YAML file (``agent/targets/NAME.yaml`` or any path), validated when loaded; every
problem becomes one line naming the file, the key and what was expected. Plain YAML only: at most
MAX_TARGET_BYTES, no tags that construct objects (safe_load), at most MAX_TARGET_NODES values with
aliases expanded, numbers finite and within what a run can do (a goal of 10**12 requests is a typo).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

TARGETS_DIR = Path(__file__).parent / "targets"
MAX_TARGET_BYTES = 1 << 20  # the shipped targets are ~6 KB


class TargetError(ValueError):
    """A target that cannot be used; the message is one line, fit for the user."""


def _numeric(annotation: Any) -> bool:
    """Whether a field holds a number (int, float, or one of them or None)."""
    if annotation in (int, float):
        return True
    args = getattr(annotation, "__args__", ())
    return bool(args) and all(a in (int, float, type(None)) for a in args) and any(a in (int, float) for a in args)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        # pydantic reads `heads: yes` as 1: a boolean where a number belongs is a typo, not a number
        if isinstance(value, bool) and _numeric(cls.model_fields[info.field_name].annotation):
            raise ValueError(f"expected a number, got {str(value).lower()}")
        return value


# Bounds: far above any real deployment, low enough that a typo fails here, not an hour into a run.
PositiveInt = Annotated[int, Field(gt=0, le=1 << 24)]
Dim = Annotated[int, Field(gt=0, le=1 << 20)]  # model widths, ranks, heads, experts
Share = Annotated[float, Field(gt=0, lt=1)]


class Goal(_Strict):
    output_tok_s: Annotated[float, Field(gt=0, le=1e12)] = Field(description="output tokens per second, all requests")
    concurrency: Annotated[int, Field(gt=0, le=1 << 20)] = Field(description="concurrent requests the goal is stated at")

    @property
    def step_budget_ms(self) -> float:
        """Each decode step emits one token per request: the time a step may take to meet the goal."""
        return 1000.0 * self.concurrency / self.output_tok_s


class Model(_Strict):
    name: str
    hidden: Dim
    heads: Dim
    nope_dim: Dim
    rope_dim: Dim
    q_lora_rank: Dim
    o_lora_rank: Dim
    o_groups: Dim = 8
    index_topk: Dim
    index_heads: Dim
    index_head_dim: Dim
    experts: Dim
    experts_per_token: Dim
    moe_intermediate: Dim
    shared_experts: Annotated[int, Field(ge=0, le=1 << 20)] = 1
    layers: Annotated[int, Field(gt=0, le=10_000)]
    sliding_window: PositiveInt
    compress_ratios: list[Annotated[int, Field(ge=0, le=1 << 20)]]
    page_size: Dim

    @model_validator(mode="after")
    def _ratios_per_layer(self) -> "Model":
        if len(self.compress_ratios) != self.layers:
            raise ValueError(f"compress_ratios has {len(self.compress_ratios)} entries, expected one per layer ({self.layers})")
        return self


class Deployment(_Strict):
    gpu: str
    gpus: Dim
    sm: Annotated[int, Field(ge=50, le=200)] = Field(description="compute capability x10, e.g. 120 for sm_120")
    sm_count: Annotated[int, Field(gt=0, le=100_000)]
    tp: Dim
    pad_heads_to: Dim | None = Field(
        default=None, description="heads per rank the attention kernel is launched with (the engine pads)"
    )
    source: str = Field(default="", description="where the padding rule and the shapes come from")

    def heads_per_rank(self, heads: int) -> int:
        if heads % self.tp:
            raise TargetError(f"{heads} heads do not split evenly over tp={self.tp}")
        return heads // self.tp

    def kernel_heads(self, heads: int) -> int:
        per_rank = self.heads_per_rank(heads)
        return max(per_rank, self.pad_heads_to or per_rank)


class ReferenceShapes(_Strict):
    """How the embedded reference engine is run on one kind of device: how much of the model, how
    many steps a run."""

    layers: Annotated[int, Field(gt=0, le=10_000)] = 2
    batch: Annotated[int, Field(gt=0, le=1 << 20)] | None = Field(
        default=None, description="decode batch measured; default: the goal's concurrency")
    experts: Dim | None = None
    context_len: PositiveInt = 4096
    steps: Annotated[int, Field(gt=0, le=100_000)] = 10
    warmup: Annotated[int, Field(ge=0, le=100_000)] = 3
    tp: Dim | None = Field(default=None, description="ranks to split heads over; default: the deployment's")
    distributed: bool = Field(default=False, description="one process per rank joined by torch.distributed (NCCL on "
                              "GPUs, gloo on the CPU); false: one process runs rank 0's shapes, no collective")
    pad_heads_to: Dim | None = None
    overrides: dict[str, Any] = Field(default_factory=dict, description="model fields replaced for this device")


# The box's interpreter in a launcher: the box tool puts the box's own Python there when the call becomes
# a command (agent/box/catalog.py), so the journaled arguments are the same on every box.
BOX_PYTHON = "{python}"
SGLANG_LAUNCHER = (BOX_PYTHON, "-m", "sglang.launch_server")
# The stand-in server (tools/engines/sglang_standin): SGLang's argument parser and routes over the reference engine.
STANDIN_LAUNCHER = (BOX_PYTHON, "-m", "tools.engines.sglang_standin")
# Arguments the adapter sets on every launch (a free port, the target's host): a target giving them would fight it.
ADAPTER_ARGS = ("--host", "--port")


class Server(_Strict):
    """The SGLang server of the deployment, as ``python -m sglang.launch_server`` starts it on the box."""

    launcher: list[str] = Field(default_factory=lambda: list(SGLANG_LAUNCHER), min_length=1,
                                description=f"argv prefix of a launch ({BOX_PYTHON} is the box's Python)")
    stand_in: bool = Field(default=False, description="launch the stand-in server instead (--stand-in; recorded so a "
                                                      "replay reproduces the choice)")
    model_path: str = Field(description="the model's weights or config on the box (the user's local path)")
    load_format: str | None = Field(default=None, description="e.g. dummy: random weights from the model's config, "
                                                              "for shape-only runs")
    args: list[str] = Field(default_factory=list, description="server arguments the deployment runs with")
    host: str = Field(default="127.0.0.1", description="address the server listens on (loopback, or the box's)")
    health_timeout_s: Annotated[int, Field(gt=0, le=86_400)] = Field(
        default=900, description="seconds a launch may take to answer /health and /get_model_info (weights load)")
    run_timeout_s: Annotated[int, Field(gt=0, le=86_400)] = Field(
        default=1800, description="seconds one run (launch, warm-up and measured load, stop) may take at most")

    @field_validator("args")
    @classmethod
    def _no_adapter_args(cls, args: list[str]) -> list[str]:
        taken = sorted({a.split("=")[0] for a in args if a.split("=")[0] in ADAPTER_ARGS})
        if taken:
            raise ValueError(f"{', '.join(taken)}: the adapter sets them on every launch (server.host and a free port)")
        return args


class Load(_Strict):
    """The load SGLang's own client (``python -m sglang.benchmark.serving``, random-ids) puts on the server."""

    input_len: PositiveInt = 256
    output_len: PositiveInt = 64
    concurrency: Dim | None = Field(default=None, description="requests in flight; default: the goal's concurrency")
    num_prompts: PositiveInt | None = Field(default=None, description="measured requests; default: 4 x concurrency")
    warmup_prompts: Annotated[int, Field(ge=0, le=1 << 20)] | None = Field(
        default=None, description="requests of the discarded warm-up pass; default: the concurrency")
    seed: Annotated[int, Field(ge=0, le=1 << 31)] = 0
    tokenizer: str | None = Field(default=None, description="a tokenizer directory on the box; default: the model's")


# Set by the disaggregation tool (tools/engines/sglang/disagg.py) on each server, or from transfer_backend.
DISAGG_ARGS = ("--disaggregation-mode", "--disaggregation-bootstrap-port", "--disaggregation-transfer-backend")
ROUTER_LAUNCHER = (BOX_PYTHON, "-m", "sglang_router.launch_router")
# The router's workers and address: the tool gives them (the servers it launched, a free port).
ROUTER_TOOL_ARGS = ("--pd-disaggregation", "--prefill", "--decode", "--worker-urls", "--host", "--port")


def _not_given(args: list[str], taken: tuple[str, ...], who: str) -> list[str]:
    given = sorted({a.split("=")[0] for a in args if a.split("=")[0] in taken})
    if given:
        raise ValueError(f"{', '.join(given)}: {who}")
    return args


class PDServer(_Strict):
    """What one side of a disaggregated deployment adds to ``engine.server``'s arguments and environment."""

    args: list[str] = Field(default_factory=list, description="server arguments of this side only")
    env: dict[str, str] = Field(default_factory=dict, description="environment of this side only")

    @field_validator("args")
    @classmethod
    def _no_tool_args(cls, args: list[str]) -> list[str]:
        return _not_given(args, DISAGG_ARGS + ADAPTER_ARGS, "the disaggregation tool sets them (the side's role, "
                          "its bootstrap port, disaggregation.transfer_backend, server.host and a free port)")


class PDRouter(_Strict):
    """SGLang's router (the ``sglang-router`` package) in front of the two servers, ``--pd-disaggregation``."""

    launcher: list[str] = Field(default_factory=lambda: list(ROUTER_LAUNCHER), min_length=1,
                                description=f"argv prefix of the router ({BOX_PYTHON} is the box's Python)")
    args: list[str] = Field(default_factory=list, description="router arguments, e.g. --policy round_robin")
    health_timeout_s: Annotated[int, Field(gt=0, le=86_400)] = Field(
        default=300, description="seconds the router may take to answer /readiness with both workers healthy")

    @field_validator("args")
    @classmethod
    def _no_tool_args(cls, args: list[str]) -> list[str]:
        return _not_given(args, ROUTER_TOOL_ARGS, "the disaggregation tool gives the router its workers and address")


class Disaggregation(_Strict):
    """A prefill server, a decode server and a router (issue 15, the disaggregated layout): both servers are
    ``engine.server`` plus their side's args/env; the load goes through the router; the profile is the decode
    server's."""

    transfer_backend: str = Field(default="mooncake", description="--disaggregation-transfer-backend of both "
                                  "servers (checked against the installed SGLang's choices)")
    prefill: PDServer = Field(default_factory=PDServer)
    decode: PDServer = Field(default_factory=PDServer)
    router: PDRouter = Field(default_factory=PDRouter)
    levers_on: Literal["decode", "prefill", "both"] = Field(
        default="decode", description="the server(s) a lever's args and env are given to")


class Engine(_Strict):
    kind: Literal["reference", "sglang"] = "reference"
    server: Server | None = Field(default=None, description="the SGLang server (engine kind sglang)")
    load: Load = Field(default_factory=Load, description="the load on the SGLang server (engine kind sglang)")
    load_cpu: Load | None = Field(default=None, description="the load on a CPU box (the stand-in server runs the "
                                                            "reference engine there); default: load")
    disaggregation: Disaggregation | None = None
    env: dict[str, str] = Field(default_factory=dict, description="environment the deployment runs with")
    options: dict[str, Any] = Field(
        default_factory=lambda: {"cuda_graph": True},
        description="engine options the deployment runs with (SGLang decodes with CUDA graphs by default); "
                    "a box that cannot run one runs the baseline without it and says so",
    )
    attention_env: str = Field(
        default="SGLANG_SM120_FLASHMLA_BACKEND",
        description="environment variable that picks the sparse-decode backend (read by the reference engine too)",
    )
    shape_symbols: dict[Literal["batch", "heads", "topk"], str] = Field(
        default_factory=lambda: {"batch": "B", "heads": "H", "topk": "topk"},
        description="names the engine's kernel launchers give the decode batch, the heads and the top-k",
    )
    kernel_constants: dict[str, int] = Field(
        default_factory=dict,
        description="kernel arguments the grid step pins when it compiles the kernel for registers "
                    "(e.g. has_topk_len: 1 when the engine passes valid lengths)",
    )
    what_if_backends: dict[str, list[int]] = Field(
        default_factory=dict,
        description="reference-engine backends for fast paths the declared hardware is gated out of, with "
                    "the SM versions whose gates let the engine take them (measured on such a box, as a what-if)",
    )
    gpu: ReferenceShapes = Field(default_factory=ReferenceShapes)
    cpu: ReferenceShapes = Field(default_factory=ReferenceShapes)
    timeout_s: Annotated[int, Field(gt=0, le=7 * 86_400)] = 1200

    @model_validator(mode="after")
    def _sglang_has_a_server(self) -> "Engine":
        if self.kind == "sglang" and self.server is None:
            raise ValueError("engine kind sglang needs engine.server (at least server.model_path)")
        if self.kind == "sglang" and self.what_if_backends:
            raise ValueError("what_if_backends are reference-engine backends: an SGLang engine cannot name them")
        return self


class Lever(_Strict):
    name: str
    kind: Literal["env", "flag", "option"]
    engines: list[Literal["reference", "sglang"]] = Field(
        default_factory=lambda: ["reference", "sglang"], description="engines the lever applies to"
    )
    env: dict[str, str] = Field(default_factory=dict)
    args: list[str] = Field(default_factory=list, description="server arguments a flag lever adds (SGLang)")
    flags: list[str] = Field(default_factory=list, description="older name of args (both are added)")
    options: dict[str, Any] = Field(default_factory=dict)
    note: str = ""
    skip_on: dict[Literal["cpu", "cuda"], str] = Field(
        default_factory=dict, description="devices the lever is not tried on, each with the reason the report gives")
    planted: Literal["null", "delay"] | None = Field(
        default=None, description="a calibration lever of known effect: null changes nothing the engine reads; "
                                  "delay plants a spin of options.delay_frac of the step (the sweep checks both)")

    @model_validator(mode="after")
    def _has_setting(self) -> "Lever":
        setting = {"env": self.env, "flag": self.args or self.flags, "option": self.options}[self.kind]
        if not setting:
            raise ValueError(f"lever {self.name!r} of kind {self.kind!r} sets nothing (give {self.kind if self.kind != 'flag' else 'args'})")
        return self


class Noise(_Strict):
    """How measured settings are compared (agent/stats.py): ``rounds`` interleaved rounds after
    ``warmup_runs`` discarded runs; a lever moves when its ``confidence`` interval excludes no
    change and its point effect passes ``min_effect``; its outputs must match the baseline's within
    ``output_rtol``."""

    rounds: Annotated[int, Field(ge=2, le=1000)] = Field(
        default=5, description="rounds on a GPU box (baseline and each lever once a round, interleaved)")
    rounds_cpu: Annotated[int, Field(ge=2, le=1000)] = Field(
        default=9, description="rounds on a CPU box, whose interpreted runs vary more")
    warmup_runs: Annotated[int, Field(ge=0, le=1000)] = Field(default=1, description="baseline runs first, discarded (cold caches, compiles)")
    confidence: Annotated[float, Field(gt=0.5, lt=1)] = Field(default=0.95, description="confidence of the ratio intervals")
    min_effect: Annotated[float, Field(ge=0, lt=1)] = Field(
        default=0.03, description="smallest relative throughput change that counts as a move (symmetric in log), "
                                  "on a GPU box")
    min_effect_cpu: Annotated[float, Field(ge=0, lt=1)] | None = Field(
        default=None, description="the same on a CPU box, whose interpreted runs vary more (default: min_effect)")
    output_rtol: Annotated[float, Field(gt=0, lt=1)] = Field(
        default=0.02, description="largest norm-relative difference of a lever's output sketch from the baseline's")

    rewrite_rounds: Annotated[int, Field(ge=2, le=1000)] = Field(
        default=3, description="rounds alternating the profiled setting and a built rewrite (its effect is "
                               "large, so few rounds give it a useful interval)")

    budget: Literal["quick", "normal"] = Field(
        default="normal", description="quick halves the rounds (rounded up, at least 2) for a shorter run: "
                                      "wider intervals, a larger smallest detectable effect")

    def rounds_for(self, device: str) -> int:
        """Rounds of the lever sweep on ``device`` under the budget."""
        return self.rounds_for_budget(device, self.budget)

    def rounds_for_budget(self, device: str, budget: str) -> int:
        return budget_rounds(self.rounds if device == "cuda" else self.rounds_cpu, budget)

    def min_effect_for(self, device: str) -> float:
        if device == "cuda" or self.min_effect_cpu is None:
            return self.min_effect
        return self.min_effect_cpu


BUDGETS = ("quick", "normal")


def budget_rounds(rounds: int, budget: str) -> int:
    """Rounds under a budget: normal keeps them; quick halves them, rounded up, never below 2 (an
    interval needs two rounds)."""
    if budget not in BUDGETS:
        raise ValueError(f"unknown budget {budget!r} (expected one of {', '.join(BUDGETS)})")
    return rounds if budget == "normal" else max(2, -(-rounds // 2))


def with_budget(target: "Target", budget: str | None) -> "Target":
    """The target with its sweep budget set (None: as the target says), so the run's recorded
    target carries it and a replay reproduces it."""
    if budget is None:
        return target
    budget_rounds(2, budget)
    noise = target.thresholds.noise.model_copy(update={"budget": budget})
    return target.model_copy(update={"thresholds": target.thresholds.model_copy(update={"noise": noise})})


class Thresholds(_Strict):
    dominant_share: Share = Field(default=0.30, description="a kernel is dominant at this share of kernel time")
    noise: Noise = Field(default_factory=Noise)


class Profile(_Strict):
    steps: Annotated[int, Field(gt=0, le=10_000)] = 5
    batch: Annotated[int, Field(gt=0, le=1 << 20)] | None = Field(default=None, description="default: the batch the levers were measured at")


class Rewrite(_Strict):
    plan: Literal["declared", "box"] = Field(
        default="declared",
        description="whose plan the split-K step builds and times: the declared GPU's (on a stand-in box, its kernels "
                    "with the dots lowered as that GPU lowers them) or the box's own (a what-if for the deployment)")


class Target(_Strict):
    # the name starts run ids, which are directory names: no separators, no "..", nothing a shell reads
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")]
    description: str = ""
    goal: Goal
    model: Model
    deployment: Deployment
    engine: Engine = Field(default_factory=Engine)
    levers: list[Lever] = Field(default_factory=list)
    thresholds: Thresholds = Field(default_factory=Thresholds)
    profile: Profile = Field(default_factory=Profile)
    rewrite: Rewrite = Field(default_factory=Rewrite)
    published: dict[str, Any] = Field(default_factory=dict, description="numbers of the published case, for comparison")

    @model_validator(mode="after")
    def _unique_levers(self) -> "Target":
        names = [lever.name for lever in self.levers]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"lever names must be unique, repeated: {', '.join(duplicates)}")
        self.deployment.heads_per_rank(self.model.heads)
        return self


def _describe(error: dict) -> str:
    where = ".".join(str(part) for part in error["loc"]) or "(top level)"
    kind, message = error["type"], error["msg"]
    if kind == "extra_forbidden":
        return f"{where}: unknown key"
    if kind == "missing":
        return f"{where}: required key missing"
    got = error.get("input")
    got_text = f", got {got!r}" if got is not None and not isinstance(got, (dict, list)) else ""
    return f"{where}: {message[0].lower() + message[1:]}{got_text}"


def resolve_target_path(name_or_path: str) -> Path:
    """A target name (``dsv4-flash``) or a path to a YAML file."""
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml") or candidate.parent != Path("."):
        if not candidate.is_file():
            raise TargetError(f"{name_or_path}: no such target file")
        return candidate
    path = TARGETS_DIR / f"{name_or_path}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in TARGETS_DIR.glob("*.yaml")))
        if candidate.exists():  # README.md, a run's directory: "unknown target" would say it is not there
            what = "a directory" if candidate.is_dir() else f"a {candidate.suffix or 'suffix-less'} file"
            raise TargetError(f"{name_or_path}: {what}, not a target YAML (a target is a .yaml or .yml file, "
                              f"or a name in agent/targets: {known})")
        raise TargetError(f"unknown target {name_or_path!r} (known: {known}; or give a path to a .yaml file)")
    return path


def parse_target(data: Any, source: str) -> Target:
    if not isinstance(data, dict):
        raise TargetError(f"{source}: expected a mapping of keys at the top level, got {type(data).__name__}")
    try:
        return Target.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(_describe(e) for e in exc.errors())
        raise TargetError(f"{source}: {problems}") from None
    except TargetError as exc:
        raise TargetError(f"{source}: {exc}") from None


MAX_TARGET_NODES = 100_000  # values once aliases are expanded; the shipped targets have ~500


def _too_big(data: Any, limit: int = MAX_TARGET_NODES) -> bool:
    """Whether ``data`` has more than ``limit`` values counting each alias's copy: ``*name`` repeats a
    node by reference, and a few nested ones expand, once the target is journaled, to billions."""
    count, stack = 0, [data]
    while stack:
        item = stack.pop()
        count += 1
        if count > limit:
            return True
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set)):
            stack.extend(item)
    return False


def _read(path: Path) -> str:
    try:
        size = path.stat().st_size
        if size > MAX_TARGET_BYTES:
            raise TargetError(f"{path}: {size:,} bytes; a target is at most {MAX_TARGET_BYTES:,} bytes")
        with open(path, "rb") as handle:
            data = handle.read(MAX_TARGET_BYTES + 1)  # the file may grow between stat and read
    except OSError as exc:
        raise TargetError(f"{path}: cannot read: {exc.strerror}") from None
    if len(data) > MAX_TARGET_BYTES:
        raise TargetError(f"{path}: more than {MAX_TARGET_BYTES:,} bytes; a target is at most that")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TargetError(f"{path}: not UTF-8 text (byte {exc.start})") from None


def load_target(name_or_path: str) -> tuple[Target, Path]:
    """Load and validate a target; raises TargetError with a one-line message."""
    path = resolve_target_path(name_or_path)
    text = _read(path)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise TargetError(f"{path}:{where} malformed YAML: {' '.join(str(problem).split())}") from None
    except RecursionError:
        raise TargetError(f"{path}: malformed YAML: nested too deeply") from None
    if _too_big(data):
        raise TargetError(f"{path}: more than {MAX_TARGET_NODES:,} values once its aliases are expanded")
    return parse_target(data, str(path)), path
