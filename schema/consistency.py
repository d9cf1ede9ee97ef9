"""The consistency check's records: the settings, bounds, measurements and predictions a run's findings
state, and each check of a claim against a measurement with its verdict (agent.consistency builds them;
the report renders them)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Setting(_Model):
    """What a measurement or bound ran: the engine's environment, its options, a what-if backend."""

    label: str
    env: dict[str, str] = Field(default_factory=dict)
    options: dict[str, Any] = Field(default_factory=dict)
    backend: str | None = None  # a what-if backend named directly, outside the environment

    def differences(self, other: "Setting") -> set[str]:
        keys = {k for k in set(self.env) | set(other.env) if self.env.get(k) != other.env.get(k)}
        keys |= {f"option:{k}" for k in set(self.options) | set(other.options)
                 if _unset(self.options.get(k)) != _unset(other.options.get(k))}
        if self.backend != other.backend:
            keys.add("backend")
        return keys


def _unset(value: Any) -> Any:
    """An option left out and one set to False/None mean the same: the engine's default (off)."""
    return None if value is None or value is False else value


class Bound(_Model):
    """At most ``x`` times the reference setting's throughput, when only ``operation`` changes."""

    name: str
    finding: str  # the stem of the finding that stated it
    scope: Literal["kernel", "operation", "option"]
    operation: str
    reference: Setting
    reference_tok_s: float
    x: float
    basis: str
    applies_to: Literal["any", "declared", "what-if"] | str = "any"  # a backend name, or a class of measurement
    seqs: list[int] = Field(default_factory=list)
    spread: float | None = None  # relative uncertainty the stating step gave it
    # the bound as far as its model leaves it known (where the profiler's stretch of the step lies), and what
    # else of the model is not counted in it (the layers run against the model's mix, the attribution rule)
    model_range: tuple[float, float | None] | None = None  # a top of None: unbounded
    model_note: str = ""

    @property
    def tok_s(self) -> float:
        return self.reference_tok_s * self.x


class Measurement(_Model):
    """A measured throughput of a setting against a reference setting, with that comparison's interval."""

    name: str
    finding: str
    setting: Setting
    reference: Setting
    backend: str | None
    what_if: bool = False
    interpreted: bool = False
    reference_interpreted: bool = False
    tok_s: float
    x: float
    interval: tuple[float, float] | None = None
    noise: str = ""
    seqs: list[int] = Field(default_factory=list)


class Prediction(_Model):
    name: str
    finding: str
    predicted_x: float
    interval: tuple[float, float] | None = None
    basis: str
    measurement: str  # the Measurement.name it is held against
    verdict_claimed: str = ""
    # "operation": made from the operation's measured speedup, so the kernels inside the operation are in it
    # and cannot explain its miss; "": from the kernel alone, or an estimate
    scope: str = ""


class Check(_Model):
    """One bound or prediction held against one measurement."""

    kind: Literal["bound", "prediction"]
    claim: str
    claim_finding: str
    claim_x: float
    claim_interval: tuple[float, float] | None = None
    claim_spread: float | None = None
    measurement: str
    measurement_finding: str
    measured_x: float
    measured_interval: tuple[float, float] | None = None
    # "exceeded": a measurement beat an estimate the run stated (above an upper estimate, or above one with no side)
    verdict: Literal["holds", "within noise of the bound", "within the bound's model error", "violated", "missed",
                     "exceeded", "not comparable", "beyond the kernel bound", "undetermined"]
    note: str = ""
    cause: str = ""


class Consistency(_Model):
    bounds: list[Bound] = Field(default_factory=list)
    measurements: list[Measurement] = Field(default_factory=list)
    predictions: list[Prediction] = Field(default_factory=list)
    checks: list[Check] = Field(default_factory=list)

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.verdict in ("violated", "missed", "exceeded")]


# The measurement name of the split-K kernel's speedup read from the two profiles (pooled over the engine's calls).
KERNEL_MEASUREMENT = "split-K kernel (profiles)"
