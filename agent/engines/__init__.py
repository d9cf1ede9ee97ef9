"""The engines a target can run on, behind one interface: the steps call the engine chosen once from the
target's engine kind (``engine_for``) and never ask which engine they hold.

An engine turns the target's settings into runs on the box: the deployment's setting and each lever's
(``baseline``, ``with_lever``), whether a lever can run here (``applicability``), the batch or concurrency
a sweep measures at, and the sweep itself as one recorded tool call. What an engine measures differs in
kind, and it says so through its capabilities, not its name: ``measured_by_client`` (a live server's
numbers are what its load's client measured, the whole model, nothing projected), ``live_server`` (the
server the runs reach, which the reference engine's own launches, Nsight Compute's or split-K's, never are),
``scanned_source`` (the installed package whose source the gate scan reads). It profiles the setting to
explain (``profile``) and says what a box lacks to run it at all (``box_problems``).

``reference`` (agent.engines.reference) is the embedded reference engine, ``sglang`` (agent.engines.sglang)
a live SGLang server; a later engine registers itself (``register``) and the steps take it as they are.
"""

from __future__ import annotations

from typing import Any

from agent.config import Lever, Target, TargetError
from agent.engines.profiled import Profiled, RunFailed  # noqa: F401  (what ``profile`` gives, and its failure)


class Engine:
    """What the steps ask of an engine. ``kind`` is the target's ``engine.kind`` it serves; ``sweep_tool``
    names the tool the sweep calls (for the step's message when it fails)."""

    kind: str = ""
    sweep_tool: str = ""
    measured_by_client: bool = False  # numbers measured by a load's client on a live server: nothing projected
    # the live server the engine's runs are (its name, "SGLang"), None when each run is a process of the
    # reference engine the agent launches itself (so Nsight Compute and the split-K build reach its kernels)
    live_server: str | None = None

    def sweep_batch(self, target: Target, device: str) -> int:
        """The batch (or concurrency) the lever sweep measures at."""
        raise NotImplementedError

    def baseline(self, target: Target, device: str) -> Any:
        """The deployment's setting as it runs on ``device``."""
        raise NotImplementedError

    def with_lever(self, target: Target, lever: Lever, device: str) -> Any:
        """The deployment's setting with one lever applied."""
        raise NotImplementedError

    def applicability(self, target: Target, lever: Lever, device: str) -> str | None:
        """Why ``lever`` cannot run here, or None when it can."""
        raise NotImplementedError

    def baseline_notes(self, target: Target, device: str) -> list[str]:
        """What of the deployment's setting this device runs otherwise (a note each)."""
        return []

    def layers_run(self, target: Target, device: str) -> int:
        """The model layers a run executes (the numbers project from them to the model's)."""
        return target.model.layers

    def sweep(self, session, target: Target, device: str, runs: list[tuple[str, Any]], batch: int) -> dict[str, Any]:
        """Run the sweep's settings in order (one recorded tool call) and return its result."""
        raise NotImplementedError

    def served(self, target: Target, servers: list[str]) -> str | None:
        """What the findings call the server the numbers come from (None: no server)."""
        return None

    def profile(self, session, target: Target, device: str, applied: list[Lever], levers) -> "Profiled":
        """Profile the setting to explain: the deployment's with ``applied`` (the levers the ceiling sent the
        investigation on with; ``levers`` is the levers finding) at the profiled batch, one trace per rank.
        Raises RunFailed when the run fails or a trace did not come back."""
        raise NotImplementedError

    def box_problems(self, target: Target, box, survey: dict[str, Any]) -> list[str]:
        """What the box (``survey``: its box.survey data) lacks to run this target at all, a line each."""
        return []

    def scanned_source(self, software: Any, source: str | None) -> dict[str, Any] | None:
        """What the findings say of the source tree the gate scan reads (``source``, ``software`` the survey's):
        None when it is the kernel source the engine loads, not a deployment's installed package."""
        return None

    def with_stand_in(self, target: Target) -> Target:
        """The target with its server replaced by the stand-in (``--stand-in``)."""
        raise TargetError(f"--stand-in: target {target.name} runs the {target.engine.kind} engine; the stand-in stands "
                          f"in for an SGLang server (engine kind sglang)")


ENGINES: dict[str, Engine] = {}


def lever_args(lever: Lever) -> list[str]:
    """The server arguments a lever carries, whichever engine runs it (a setting's change is written
    with them; an engine without a server never applies them)."""
    return [*lever.flags, *lever.args]


def with_stand_in(target: Target) -> Target:
    """The target with its engine's server replaced by the stand-in server (``--stand-in``), by the engine
    whose kind the target names; an engine without a server has none to stand in for (TargetError)."""
    return engine_for(target).with_stand_in(target)


def register(engine: Engine) -> Engine:
    """Make ``engine`` the one for targets of its kind (a later engine slots in so)."""
    ENGINES[engine.kind] = engine
    return engine


def engine_for(target: Target) -> Engine:
    """The engine the target's engine kind names, chosen once for the run's steps."""
    from agent.engines import reference, sglang  # noqa: F401  (each registers itself)

    try:
        return ENGINES[target.engine.kind]
    except KeyError:
        raise ValueError(f"no engine for kind {target.engine.kind!r} (known: {', '.join(sorted(ENGINES))})") from None
