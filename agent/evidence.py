"""Typed evidence: the data each step's finding carries, as a model per step.

A finding's ``data`` is stored as JSON (the journal, the findings files, replay compares it byte for
byte), and a later step reads it through these models (``evidence(state, "profile").dominant.name``),
never by string keys into a free dict. ``as_node`` validates every finding's data against its step's
model when the step returns, so a step that emits data another step cannot read fails at once, where
it was made. Fields other steps read are typed; payloads only the report renders (tables of gates,
trace summaries) stay plain JSON objects.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agent.state import InvestigationState, finding_for
from schema.finding import Finding, StepName

JSON = dict[str, Any]
# How the reference engine's note on its weights begins (tools/engines/reference/bench.py): bf16 where FP8/FP4.
BF16_FOR_FP8 = "weights are bf16 where the checkpoint holds FP8"


class _Data(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Open(BaseModel):
    """A nested record whose extra keys are the producer's own (rendered, not read by other steps)."""

    model_config = ConfigDict(extra="allow")


# -- survey ---------------------------------------------------------------------------------------


class Box(_Data):
    device: Literal["cuda", "cpu"]
    gpu: str | None = None
    gpus: int = 0
    sm: int | None = None
    sm_count: int | None = None


class Software(_Open):
    sglang: str | None = None
    sglang_dir: str | None = None
    splitk_kernel: bool = False
    flash_mla: str | None = None
    flashinfer: str | None = None
    torch: str | None = None
    triton: str | None = None


class SurveyData(_Data):
    box: Box
    stand_in: str | bool | None = None
    software: Software = Field(default_factory=Software)
    survey: JSON = Field(default_factory=dict)


# -- levers ---------------------------------------------------------------------------------------


class OutputCheck(_Open):
    """A setting's decode output against the baseline's (reference engine runs; an SGLang server's have none)."""

    ok: bool | None = None
    note: str = ""


class LeverResult(_Open):
    name: str
    status: str
    reason: str | None = None
    tok_s: float | None = None
    ratio: float | None = None
    interval: list[float] | None = None
    comparable: bool | None = None  # timings comparable with the baseline's (not interpreted against native)
    output: OutputCheck | None = None
    interval_basis: str | None = None
    seqs: list[int] | None = None
    seq: int | None = None
    step_ms: float | None = None


class BestSetting(_Data):
    """The best measured setting the declared hardware allows (engine_runs.best_setting): its levers ([]: the
    baseline) and its tok/s."""

    levers: list[str]
    tok_s: float


class LeversData(_Open):
    device: str
    batch: int
    concurrency: int
    goal_met: bool
    levers: list[LeverResult]
    baseline_options: JSON = Field(default_factory=dict)
    best: BestSetting | None = None  # absent from a journal recorded before the levers step chose one
    engine_notes: list[str] = Field(default_factory=list)  # the engine's own notes on what its numbers are
    baseline: JSON | None = None  # the baseline's runs (run_ms: each run's median step)
    sweep: JSON | None = None  # the sweep's rules (confidence, rounds)
    extrapolation: JSON | None = None  # layers run against the model's mix
    server: str | None = None  # an SGLang sweep: the server the numbers come from

    def bf16_for_fp8(self) -> str | None:
        """The engine's note that it ran bf16 weights where the checkpoint holds FP8/FP4, or None."""
        return next((note for note in self.engine_notes if note.startswith(BF16_FOR_FP8)), None)

    def not_tried(self) -> list[LeverResult]:
        """The levers the sweep did not run, each with its reason."""
        return [lever for lever in self.levers if lever.status == "not tried"]


# -- profile --------------------------------------------------------------------------------------


class KernelRow(_Data):
    name: str
    category: str
    calls: int
    total_us: float
    mean_us: float
    share: float


class SettingData(_Data):
    label: str
    env: dict[str, str]
    options: JSON
    levers: list[str] = Field(default_factory=list)


class Operation(_Open):
    status: str
    name: str | None = None
    total_us: float | None = None
    source: str | None = None
    frame: JSON | None = None
    kernels: list[JSON] | None = None  # the kernels launched inside the operation (name, calls, total_us)


class ProfileData(_Data):
    summary: JSON | None
    dominant: KernelRow | None
    leader: KernelRow | None = None
    complete: bool
    setting: SettingData
    batch: int | None = None
    kernel_config: JSON | None = None
    shapes: JSON | None = None
    attention_work: JSON | None = None
    kind: str | None = None
    operation: Operation | None = None
    eager_summary: JSON | None = None
    ncu_csv: str | None = None
    error: str | None = None  # why the trace could not be read (an incomplete profile)
    parallel: JSON | None = None  # a profile of several rank processes: each rank, the critical one (rank_balance)
    critical: JSON | None = None  # several ranks: the rank whose trace the dominant kernel and the shares come from, and why
    server: JSON | None = None  # an SGLang server's profile: the server, its arguments, the installed SGLang
    # the bench result's kernel_names for the kernels shown (absent from a journal recorded before the box gave them)
    kernel_names: JSON | None = None

    def trace_files(self) -> list[str]:
        """The profile's trace files (run-relative paths), one per rank when the engine ran several."""
        return [f["path"] for f in (self.summary or {}).get("files", []) if isinstance(f, dict) and "path" in f]

    def eager_trace(self) -> str | None:
        """The eager profile of the same step the engine wrote beside a graph replay (run-relative), or None."""
        return (self.eager_summary or {}).get("file")


# -- grid -----------------------------------------------------------------------------------------


class Estimate(_Open):
    speedup: float | None = None
    basis: str = ""


class Diagnosis(_Open):
    ok: bool = True
    redundancy_factor: float | None = None
    inner_product: str | None = None
    bound: str | None = None
    rewrite_estimate: Estimate | None = None


class GridData(_Data):
    kernel: str
    where: str | None = None
    reports: list[JSON] = Field(default_factory=list)
    splitk_candidate: bool
    splitk_reason: str
    splitk_estimate: Estimate | None = None
    failures: list[str] = Field(default_factory=list)
    diagnosis: Diagnosis | None = None
    ncu: JSON | None = None
    collective: bool = False  # the dominant kernel is a communication collective: no source to read


# -- ceiling --------------------------------------------------------------------------------------


class CeilingData(_Data):
    kernel: str
    reachable: bool
    dominant: bool
    setting: str
    operation: JSON | None = None
    operation_status: str = ""
    bound: Literal["kernel", "operation"] = "kernel"
    published: JSON | None = None
    round: int = 1
    beaten_by: list[str] = Field(default_factory=list)
    rank: JSON | None = None  # several ranks: the rank whose trace W, t_k and t_op come from, and why
    # a live server whose instant step fits the goal's step budget while its projected throughput misses the goal
    throughput_below_steps: bool = False


# -- gates, options, split-K, report -----------------------------------------------------------


class FallbackKernel(_Open):
    kernel: str
    fast_path: str


class GatesData(_Open):
    fallback_kernels: list[FallbackKernel] = Field(default_factory=list)
    architectures_passing: list[int] = Field(default_factory=list)
    what_if: JSON | None = None
    failing: list[str] | None = None  # file:line of every gate the declared GPU fails (agent.steps.gates)


class Option(_Open):
    name: str
    offered: bool
    upper_x: float
    can_try_here: bool
    estimate_x: float | None = None
    estimate_basis: str | None = ""
    estimate_kernel_x: float | None = None
    estimate_kind: str | None = None
    estimate_call: JSON | None = None
    bound_from: str | None = ""


class OptionsData(_Data):
    options: list[Option]
    auto: str


class RewritePlan(_Open):
    """Whose tile plan the rewrite was built and timed with (agent.steps.splitk.rewrite_plan)."""

    declared: bool
    short: str = ""
    text: str = ""
    arch: int | None = None  # the compute capability the plan was made for (None: the box's own)


class SplitkData(_Open):
    measured_x: float | None = None
    measured_interval: list[float] | None = None
    measured_interval_basis: str | None = ""
    dominant_after: KernelRow | None = None
    setting: SettingData | None = None  # the setting the rewrite ran in (the profiled one, split-K's backend)
    plan: RewritePlan | None = None
    output: OutputCheck | None = None
    calls: list[JSON] | None = None  # each engine call: its shapes, its check and its timing alone
    runs_ms: JSON | None = None
    kernel_names: JSON | None = None
    operation_after: JSON | None = None
    prediction_intervals: JSON | None = None
    kernel_speedup_interval: list[float] | None = None
    vanished_kernels: list[JSON] | None = None
    profiler_stretch: JSON | None = None
    launches_per_step: JSON | None = None


class Round2Data(_Open):
    setting: str
    complete: bool = True
    dominant: bool | None = None
    trace: str | None = None  # the setting's trace (run-relative)
    kind: str | None = None
    operation_detail: JSON | None = None
    kernel: str | None = None
    category: str | None = None
    operation: JSON | None = None
    reach: str | None = None
    reachable: bool | None = None
    beyond: JSON | None = None
    kernel_names: JSON | None = None

    def eager_trace(self) -> str | None:
        """The eager profile the dominant kernel's operation was attributed from, when not the trace itself."""
        detail = self.operation_detail or {}
        return detail.get("trace") if detail.get("trace") != self.trace else None


class ReportData(_Data):
    plots: dict[str, str]
    consistency: JSON | None = None
    timing: JSON | None = None  # the journal's time to the report (runs since 2026-12-01)
    declared_rates: JSON | None = None  # the declared GPU's cited rates the report quotes (issue 30)
    next_steps: JSON | None = None  # the next steps the traces support, ranked by their bound (issue 32)


MODELS: dict[str, type[BaseModel]] = {
    "survey": SurveyData, "levers": LeversData, "profile": ProfileData, "grid": GridData,
    "ceiling": CeilingData, "gates": GatesData, "options": OptionsData, "splitk": SplitkData,
    "round2": Round2Data, "report": ReportData,
}


def typed(finding: Finding) -> BaseModel:
    """A finding's data as its step's model (raises if the data does not fit it)."""
    model = MODELS.get(finding.step)
    if model is None:
        raise KeyError(f"no evidence model for step {finding.step!r}")
    return model.model_validate(finding.data)


def evidence(state: InvestigationState, step: StepName) -> Any:
    """The latest finding of ``step``'s data, typed; None if the step has not run."""
    found = finding_for(state, step)
    return typed(found) if found is not None else None


def data_of(finding: Finding | None) -> Any:
    """A finding's data as its step's model (None for no finding): how a later step, the consistency check
    and the summary read another finding, never by string keys into its stored JSON."""
    return typed(finding) if finding is not None else None


def decision_question(options: Finding) -> tuple[list[JSON], str]:
    """The options finding's options as recorded, and its automatic choice: the decision shows and journals
    them as the step stored them (validated against OptionsData first)."""
    auto = typed(options).auto
    return options.data["options"], auto


def validate(finding: Finding) -> None:
    """Fail where a step emits data its model (and so the steps reading it) does not expect."""
    if finding.step in MODELS:
        typed(finding)
