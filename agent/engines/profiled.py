"""What an engine's profiling run gives the profile step, whichever engine ran it: the run's result with its
trace(s), the setting it ran and that setting's numbers timed without the profiler (``Profiled``), and the
helpers the engines build those numbers with."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent.config import Target
from agent.evidence import data_of
from schema.finding import Number


class RunFailed(RuntimeError):
    """An engine's run could not give what the step asked of it (it failed, or wrote no trace); the step
    that asked fails with this message."""


@dataclass
class Profiled:
    """The profiling run: the engine's result (its ``data.trace`` names the trace files, ``data.results``
    the row at the profiled batch), its trace, the setting it ran and that setting's numbers."""

    result: dict[str, Any]
    refs: dict[str, dict]  # the run's artifacts by name
    ref: dict  # the trace's
    batch: int
    setting: Any  # the engine's setting record (its ``label`` names it)
    setting_data: dict[str, Any]
    numbers: dict[str, Number]  # the setting's tok/s and step, timed without the profiler
    server: dict[str, Any] | None = None  # a live server's profile: which server, its arguments, its version

    @property
    def seq(self) -> list[int]:
        return [self.result["seq"]]

    @property
    def trace_info(self) -> dict[str, Any]:
        return self.result["data"]["trace"]


def setting_numbers(target: Target, label: str, measured: dict[str, float], seq: list[int],
                    layers_run: int) -> dict[str, Number]:
    """The profiled setting's tok/s and step, timed without the profiler, projected to the model's layers
    from the ``layers_run`` a run executes (``measured``: its ``tok_s`` projected and ``layer_ms``)."""
    return {
        "setting_tok_s": Number(value=measured["tok_s"], unit="tok/s",
                                label=f"{label}, projected to {target.model.layers} layers from {layers_run}", seqs=seq),
        "setting_step_ms": Number(value=measured["layer_ms"] * target.model.layers, unit="ms",
                                  label=f"decode step of {label}, projected", seqs=seq),
        "timed_step_ms": Number(value=measured["layer_ms"] * layers_run, unit="ms",
                                label=f"decode step of the {layers_run} layers run, timed without the profiler", seqs=seq),
    }


def swept_setting(levers, label: str) -> dict[str, Any]:
    """A setting's tok/s, step and log lines as the lever sweep measured it (``levers``, its finding)."""
    data = data_of(levers)
    if label == "baseline":
        return {"tok_s": data.baseline["tok_s"], "step_ms": data.baseline["step_ms"], "seqs": data.baseline["seqs"]}
    result = next(r for r in data.levers if r.name == label)
    return {"tok_s": result.tok_s, "step_ms": result.step_ms, "seqs": result.seqs}
