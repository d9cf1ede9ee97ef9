"""A finding: what one step of an investigation established, with its numbers and tables.

The agent's steps write findings, the reports render them, the consistency check reads them; a finding
is plain data (pydantic), so a run's journal and a replay rebuild it exactly."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_serializer

StepName = Literal["survey", "levers", "profile", "grid", "ceiling", "gates", "options", "splitk", "round2", "report"]


class Number(BaseModel):
    """A number a later step or the report uses, with the log lines it came from."""

    model_config = ConfigDict(extra="forbid")

    value: float | int | str | None
    unit: str = ""
    label: str = ""
    seqs: list[int] = Field(default_factory=list)
    # Relative uncertainty (e.g. an interval's half-width over the value), where the step knows it:
    # the report quotes the number to the digits this supports, not more.
    spread: float | None = None
    # One of the user's inputs, as the target declares them (its goal, its hardware, its thresholds), or their
    # arithmetic alone: no journal line holds it, and the report labels it "declared", not "derived" (which
    # is arithmetic on measurements). Written only where true, so every other number's record is unchanged.
    declared: bool = False
    # A published figure no journal line holds and the user did not declare (a GPU's spec sheet): where it is
    # cited from, a URL. Written only where set, as ``declared``.
    cited: str | None = None

    @model_serializer(mode="wrap")
    def _flags_only_where_set(self, handler):
        data = handler(self)
        if not self.declared:
            data.pop("declared", None)
        if self.cited is None:
            data.pop("cited", None)
        return data


class Table(BaseModel):
    """A table a finding shows: the report renders every header, cell and note as its own text."""

    model_config = ConfigDict(extra="forbid")

    title: str
    columns: list[str]
    rows: list[list[Any]]
    note: str = ""


class Finding(BaseModel):
    """What one step established: a headline, a verdict, and the evidence behind them.

    ``evidence`` holds the log sequence numbers of the tool calls the finding rests on; ``data``
    is the structured payload later steps read; ``labels`` mark how numbers must be read
    ("stand-in", "cpu-interpreter", "what-if", "failed").
    """

    model_config = ConfigDict(extra="forbid")

    index: int
    step: StepName
    headline: str
    verdict: str
    numbers: dict[str, Number] = Field(default_factory=dict)
    tables: list[Table] = Field(default_factory=list)
    artifacts: dict[str, str] = Field(default_factory=dict)  # label -> path inside the run
    evidence: list[int] = Field(default_factory=list)
    labels: list[str] = Field(default_factory=list)
    data: dict[str, Any] = Field(default_factory=dict)

    @property
    def stem(self) -> str:
        return f"{self.index:02d}-{self.step}"

    def number(self, key: str) -> Any:
        return self.numbers[key].value


def value_of(finding: Finding | None, key: str) -> Any:
    """The value of ``finding``'s number ``key``; None when there is no finding or no such number."""
    return finding.numbers[key].value if finding is not None and key in finding.numbers else None
