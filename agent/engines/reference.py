"""The reference engine (tools/engines/reference) behind the engine interface: DSV4-Flash decode layers at
the model's shapes, run by ``engine.sweep``; its settings are environment and engine options
(agent.engine_runs)."""

from __future__ import annotations

from typing import Any

from agent import engine_runs
from agent.config import Lever, Target
from agent.engines import Engine, register
from agent.engines.profiled import Profiled, RunFailed, setting_numbers

SGLANG_HINT = "pip install --no-deps sglang==0.5.23"


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

    def profile(self, session, target: Target, device: str, applied: list[Lever], levers) -> Profiled:
        """``engine.bench`` with a trace of ``profile.steps`` decode steps at the profile's batch (else the
        sweep's); the setting's numbers are the same run's timing without the profiler, projected to the
        model's layers."""
        batch = target.profile.batch or engine_runs.measured_batch(target, device)
        setting = engine_runs.with_levers(target, applied, device)
        args = engine_runs.bench_args(target, device, setting, [batch], profile={"batch": batch, "steps": target.profile.steps})
        result = session.call("engine.bench", args)
        if not result["ok"]:
            raise RunFailed(f"the profiling run failed: {result['error']}")
        trace_info = result["data"].get("trace")
        refs = {ref["name"]: ref for ref in result["artifacts"]}
        if not trace_info or trace_info["file"] not in refs:
            raise RunFailed("the profiling run wrote no trace")
        row = next((r for r in result["data"]["results"] if r["batch"] == batch), None)
        if row is None:
            raise RunFailed(f"the engine reported no result at batch {batch}")
        measured = {"tok_s": row["tok_s_projected"], "layer_ms": row["layer_ms"]}
        return Profiled(result=result, refs=refs, ref=refs[trace_info["file"]], batch=batch, setting=setting,
                        setting_data={"label": setting.label, "env": setting.env, "options": setting.options,
                                      "levers": [lever.name for lever in applied]},
                        numbers=setting_numbers(target, setting.label, measured, [result["seq"]],
                                                self.layers_run(target, device)))

    def box_problems(self, target: Target, box, survey: dict[str, Any]) -> list[str]:
        """torch on the box, and SGLang's source where the setting's attention backend loads its kernel from it."""
        software = survey["software"]
        if not software.get("torch"):
            return ["torch is not installed on the box (the reference engine needs it): pip install torch"]
        backend, _ = engine_runs.backend_for(target, engine_runs.baseline(target))
        if backend == "sglang-triton" and not software.get("sglang_dir"):
            return [f"sglang is not installed on the box (the {target.engine.attention_env}=triton backend "
                    f"loads its kernel from sglang's source): {SGLANG_HINT}"]
        return []


REFERENCE = register(ReferenceEngine())
