"""A live SGLang deployment behind the engine interface: each setting a server launch (agent.engine_sglang),
each run a server of its own measured by SGLang's own client (``sglang.sweep``)."""

from __future__ import annotations

from typing import Any

from agent import engine_sglang
from agent.config import Lever, Target
from agent.engines import Engine, register


class SGLangEngine(Engine):
    kind = "sglang"
    sweep_tool = "sglang.sweep"
    measured_by_client = True

    def sweep_batch(self, target: Target, device: str) -> int:
        return engine_sglang.concurrency_of(target, device)

    def baseline(self, target: Target, device: str) -> engine_sglang.ServerSetting:
        return engine_sglang.baseline(target)

    def with_lever(self, target: Target, lever: Lever, device: str) -> engine_sglang.ServerSetting:
        return engine_sglang.with_lever(target, lever)

    def applicability(self, target: Target, lever: Lever, device: str) -> str | None:
        return engine_sglang.applicability(target, lever, device)

    def sweep(self, session, target: Target, device: str, runs: list[tuple[str, Any]], batch: int) -> dict[str, Any]:
        return session.call("sglang.sweep", engine_sglang.sweep_args(target, device, runs))

    def served(self, target: Target, servers: list[str]) -> str | None:
        return engine_sglang.server_of(target, servers)

    def with_stand_in(self, target: Target) -> Target:
        return engine_sglang.with_stand_in(target)


SGLANG = register(SGLangEngine())
