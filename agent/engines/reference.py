"""The reference engine (tools/engines/reference) behind the engine interface: DSV4-Flash decode layers at
the model's shapes, run by ``engine.sweep``; its settings are environment and engine options
(agent.engine_runs)."""

from __future__ import annotations

from typing import Any

from agent import engine_runs
from agent.config import Lever, Target
from agent.engines import Engine, register


class ReferenceEngine(Engine):
    kind = "reference"
    sweep_tool = "engine.sweep"

    def sweep_batch(self, target: Target, device: str) -> int:
        return engine_runs.measured_batch(target, device)

    def baseline(self, target: Target, device: str) -> engine_runs.Setting:
        return engine_runs.baseline(target, device)

    def with_lever(self, target: Target, lever: Lever, device: str) -> engine_runs.Setting:
        return engine_runs.with_lever(target, lever, device)

    def applicability(self, target: Target, lever: Lever, device: str) -> str | None:
        return engine_runs.applicability(target, lever, device)

    def baseline_notes(self, target: Target, device: str) -> list[str]:
        return engine_runs.baseline_options(target, device)[1]

    def layers_run(self, target: Target, device: str) -> int:
        return min(engine_runs.shapes_for(target, device).layers, target.model.layers)

    def sweep(self, session, target: Target, device: str, runs: list[tuple[str, Any]], batch: int) -> dict[str, Any]:
        return engine_runs.run_sweep(session, target, device, runs, batch)


REFERENCE = register(ReferenceEngine())
