"""A live SGLang deployment behind the engine interface: each setting a server launch (agent.engine_sglang),
each run a server of its own measured by SGLang's own client (``sglang.sweep``)."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

from agent import engine_sglang
from agent.config import Lever, Target
from agent.engines import Engine, register
from agent.engines.profiled import Profiled, RunFailed, swept_setting
from schema.finding import Number


class SGLangEngine(Engine):
    kind = "sglang"
    sweep_tool = "sglang.sweep"
    measured_by_client = True
    live_server = "SGLang"

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

    def profile(self, session, target: Target, device: str, applied: list[Lever], levers) -> Profiled:
        return profiled_server(session, target, device, applied, levers)

    def box_problems(self, target: Target, box, survey: dict[str, Any]) -> list[str]:
        """Every server argument and environment lever, checked by the box's own SGLang."""
        return engine_sglang.check_sglang_args(target, box, survey)

    def scanned_source(self, software: Any, source: str | None) -> dict[str, Any] | None:
        """An SGLang deployment's gates are its installed package's: say which one was read."""
        return {"sglang": software.sglang, "dir": source, "read_from": "the box's installed sglang package (box.survey)"}


def profiled_server(session, target: Target, device: str, applied: list[Lever], levers) -> Profiled:
    """Profile the SGLang server (``sglang.profile``: a decode-heavy load, ``POST /start_profile`` for
    ``profile.steps`` steps, one trace per rank as the server names them) with at most the one lever the
    ceiling sent the investigation on with. The setting's tok/s and step (median TPOT) are the lever
    sweep's, timed without the profiler (the ``levers`` finding), as the reference engine's are; the profiled
    load's own, slowed by the profiler, are beside them; each names the server. Fails when the run fails or
    a rank's trace did not come back."""
    batch = engine_sglang.concurrency_of(target, device)
    setting = engine_sglang.with_lever(target, applied[0]) if applied else engine_sglang.baseline(target)
    result = session.call("sglang.profile", engine_sglang.profile_args(target, device, setting, target.profile.steps))
    if not result["ok"]:
        raise RunFailed(f"the profiling run (sglang.profile) failed: {result['error']}")
    refs = {ref["name"]: ref for ref in result["artifacts"]}
    data = result["data"]
    # the decode stage's trace of each rank (profile_by_stage also writes each rank's EXTEND trace), by the
    # name the run stored it under (the file's own name; the tool names it by its path under its output)
    info = dict(data.get("trace_info") or {})
    named = [PurePosixPath(name).name for name in info.get("files") or [info.get("file") or ""]]
    traces = [name for name in named if name in refs]
    if not traces or len(traces) != len(named):
        raise RunFailed(f"the profiling run (sglang.profile, log line {result['seq']}) brought back "
                        f"{len(traces)} of the {len(named)} rank traces it names")
    info.update(file=traces[0], files=traces)
    result = {**result, "data": {**data, "trace": info}}
    measured = (data.get("runs") or [{}])[0]
    rows = data.get("results") or measured.get("results") or []
    row = next((r for r in rows if r["batch"] == batch), None)
    if row is None:
        raise RunFailed(f"the profiled server's load (sglang.profile, log line {result['seq']}) reported no result "
                        f"at concurrency {batch}")
    result["data"]["results"] = [row]
    served = engine_sglang.server_of(target, [n for n in (row.get("server"), measured.get("server")) if n][:1])
    # the load is measured where the client sends it (a router, in a disaggregated layout); the traces are
    # the server that ran the decode steps
    traced = engine_sglang.server_of(target, [t["server"] for t in data.get("traces") or [] if t.get("server")][:1])
    server = (f"{served}, {len(traces)} rank trace{'s' if len(traces) > 1 else ''} of the decode stage" if traced == served
              else f"the load through {served}; {len(traces)} rank trace{'s' if len(traces) > 1 else ''} of the decode "
                   f"stage from {traced}")
    seq = [result["seq"]]
    timed = swept_setting(levers, setting.label)
    sweep = f"{served}: the lever sweep's runs of {setting.label}, without the profiler"
    numbers = {
        "setting_tok_s": Number(value=timed["tok_s"], unit="tok/s", seqs=timed["seqs"],
                                label=f"{setting.label}: output throughput, median of its runs [{sweep}]"),
        "setting_step_ms": Number(value=timed["step_ms"], unit="ms", seqs=timed["seqs"],
                                  label=f"decode step of {setting.label}: median TPOT, median of its runs [{sweep}]"),
        "timed_step_ms": Number(value=timed["step_ms"], unit="ms", seqs=timed["seqs"],
                                label=f"decode step, timed without the profiler: median TPOT [{sweep}]"),
        "profiled_load_tok_s": Number(value=row["tok_s"], unit="tok/s", seqs=seq,
                                      label=f"output throughput of the profiled load, the profiler on [{server}]"),
        "profiled_load_step_ms": Number(value=row["step_ms"], unit="ms", seqs=seq,
                                        label=f"median TPOT of the profiled load, the profiler on [{server}]"),
    }
    return Profiled(result=result, refs=refs, ref=refs[info["file"]], batch=batch, setting=setting,
                    setting_data={"label": setting.label, "env": setting.env, "options": {},
                                  "levers": [lever.name for lever in applied]}, numbers=numbers,
                    server={"server": served, "traced": traced, "args": setting.args,
                            "traces": data.get("traces"), "sglang": data.get("sglang")})


SGLANG = register(SGLangEngine())
