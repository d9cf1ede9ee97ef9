"""A disaggregated SGLang deployment on the box: a prefill server, a decode server and SGLang's router in front.

For each run: both servers are launched as server.py launches one (``--disaggregation-mode prefill|decode``,
``--disaggregation-transfer-backend``, one ``--disaggregation-bootstrap-port`` for both: the prefill serves it,
the decode falls back to it when the router gives no port), then the router of the ``sglang-router`` package
(``python -m sglang_router.launch_router --pd-disaggregation --prefill URL BOOTSTRAP_PORT --decode URL --host
--port``, sglang_router 0.3.2's launch_router.py / router_args.py) once both are healthy; the load goes through
the router with SGLang's own client; the profile is taken on the decode server; everything is stopped in
reverse order. Every number names the server it comes from: the client's numbers ``"router"`` (measured
through it), each server's own counters under ``servers.prefill`` / ``servers.decode``, the router's view of its
workers under ``servers.router``, the traces ``"server": "decode"``.

Spec: the sweep/profile spec of __main__.py plus ``"disaggregation": {"transfer_backend", "prefill": {"args",
"env"}, "decode": {"args", "env"}, "router": {"launcher", "args", "health_timeout_s"}, "levers_on":
"decode"|"prefill"|"both"}`` (agent/config.py Disaggregation). A run's args/env go to the server(s) levers_on names.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from . import client, sweep
from .server import RunFailed, Server, free_port
from .spec import SpecError, file_label

SIDES = ("prefill", "decode")
ROUTER_LAUNCHER = ["{python}", "-m", "sglang_router.launch_router"]
# Set here on each server; a spec giving them would fight the tool (agent/config.py refuses them too).
TOOL_ARGS = {"--disaggregation-mode", "--disaggregation-bootstrap-port", "--disaggregation-transfer-backend",
             "--host", "--port"}
ROUTER_TOOL_ARGS = {"--pd-disaggregation", "--prefill", "--decode", "--worker-urls", "--host", "--port"}


@dataclass
class Deployment:
    """The three processes of one run, and the bootstrap port the prefill serves."""

    servers: dict[str, Server]  # "prefill", "decode", "router"
    bootstrap_port: int
    args: dict[str, list[str]] = field(default_factory=dict)  # each process's arguments after its launcher

    def stop(self) -> None:
        """Router first (it stops sending), then decode, then prefill."""
        for name in ("router", "decode", "prefill"):
            if name in self.servers:
                self.servers[name].stop()


def _flag_names(args: list[str]) -> set[str]:
    return {a.split("=")[0] for a in args if a.startswith("--")}


def validate(spec: dict) -> dict:
    """The spec's ``disaggregation`` with its defaults filled in; SpecError on a malformed one."""
    dis = spec.get("disaggregation")
    if not isinstance(dis, dict):
        raise SpecError("bad spec: disaggregation must be an object")
    dis = {"transfer_backend": "mooncake", "levers_on": "decode", **dis}
    for side in SIDES:
        part = {"args": [], "env": {}, **(dis.get(side) or {})}
        if taken := sorted(_flag_names(part["args"]) & TOOL_ARGS):
            raise SpecError(f"bad spec: disaggregation.{side}.args: {', '.join(taken)} are set by the tool")
        dis[side] = part
    router = {"launcher": ROUTER_LAUNCHER, "args": [], "health_timeout_s": 300, **(dis.get("router") or {})}
    if taken := sorted(_flag_names(router["args"]) & ROUTER_TOOL_ARGS):
        raise SpecError(f"bad spec: disaggregation.router.args: {', '.join(taken)} are set by the tool")
    dis["router"] = router
    if dis["levers_on"] not in ("decode", "prefill", "both"):
        raise SpecError(f"bad spec: disaggregation.levers_on must be decode, prefill or both, not {dis['levers_on']!r}")
    if taken := sorted(_flag_names(spec.get("server_args", [])) & TOOL_ARGS):
        raise SpecError(f"bad spec: server_args: {', '.join(taken)} are set by the disaggregation tool")
    return dis


def gets_lever(dis: dict, side: str) -> bool:
    return dis["levers_on"] in (side, "both")


def side_args(spec: dict, dis: dict, run: dict, side: str, bootstrap_port: int) -> list[str]:
    """One server's arguments after the launcher (server.py adds --host/--port)."""
    lever = run.get("args", []) if gets_lever(dis, side) else []
    return [*spec.get("server_args", []), *dis[side]["args"], *lever,
            "--disaggregation-mode", side, "--disaggregation-transfer-backend", dis["transfer_backend"],
            "--disaggregation-bootstrap-port", str(bootstrap_port)]


def side_env(base: dict[str, str], spec: dict, dis: dict, run: dict, side: str) -> dict[str, str]:
    lever = run.get("env", {}) if gets_lever(dis, side) else {}
    return {**base, **spec.get("env", {}), **dis[side]["env"], **lever}


def router_args(dis: dict, prefill: Server, decode: Server, bootstrap_port: int) -> list[str]:
    """The router's arguments after its launcher (server.py adds --host/--port). Its Prometheus exporter gets
    a free port unless the spec names one: the router dies when its default (29000) is taken."""
    own = dis["router"]["args"]
    metrics = [] if "--prometheus-port" in _flag_names(own) else [
        "--prometheus-host", prefill.host, "--prometheus-port", str(free_port(prefill.host))]
    return ["--pd-disaggregation", "--prefill", prefill.url, str(bootstrap_port), "--decode", decode.url,
            *metrics, *own]


def router_launcher(dis: dict) -> list[str]:
    """``{python}`` is the box's interpreter: this tool's own (the catalog starts it with the box's Python)."""
    return [sys.executable if part == "{python}" else part for part in dis["router"]["launcher"]]


def get_json(url: str, timeout_s: float = 10) -> dict:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        return json.load(response)


def wait_router(router: Server, timeout_s: float) -> float:
    """Seconds until the router's ``/readiness`` says every worker is healthy (its /health answers before it
    has registered them); RunFailed otherwise."""
    start = time.monotonic()
    last = "no answer"
    while time.monotonic() - start < timeout_s:
        if not router.alive():
            raise RunFailed("launch_failed", f"the router exited with status {router.proc.returncode} before it "
                                             f"was ready{': ' + router.last_error() if router.last_error() else ''}")
        try:
            ready = get_json(router.url + "/readiness", timeout_s=5)
            if ready.get("total_workers") == 2 and ready.get("healthy_workers") == 2:
                return time.monotonic() - start
            last = json.dumps(ready)
        except (urllib.error.URLError, OSError, ValueError) as err:
            last = str(err)
        time.sleep(0.5)
    raise RunFailed("timeout", f"the router was not ready with both workers within {timeout_s:g} s ({last})")


class SideFailed(RunFailed):
    """A run failed at one server of the deployment: ``server`` names it, ``excerpt`` is its log's end."""

    def __init__(self, server: str, failure: RunFailed, excerpt: str):
        super().__init__(failure.kind, f"{server} server: {failure}")
        self.server, self.excerpt = server, excerpt


def launch(spec: dict, dis: dict, run: dict, paths: "PDPaths", record: dict) -> Deployment:
    """Both servers, then the router, each healthy; on a failure, what was started is stopped and SideFailed
    names the server that failed. ``record["args"]`` gets each process's arguments as they are launched."""
    host, grace, base_env = spec["host"], spec["stop_grace_s"], dict(os.environ)
    deployment = Deployment(servers={}, bootstrap_port=free_port(host))
    record.update(args=deployment.args, ports={}, bootstrap_port=deployment.bootstrap_port)
    try:
        for side in SIDES:
            deployment.args[side] = side_args(spec, dis, run, side, deployment.bootstrap_port)
            deployment.servers[side] = Server.launch(spec["launcher"], deployment.args[side],
                                                     side_env(base_env, spec, dis, run, side), host,
                                                     paths(paths.logs[side]), grace)
            record["ports"][side] = deployment.servers[side].port
        for side in SIDES:
            _ready_or_fail(side, deployment.servers[side],
                           lambda s=deployment.servers[side]: s.wait_ready(spec["health_timeout_s"]))
        deployment.args["router"] = router_args(dis, deployment.servers["prefill"], deployment.servers["decode"],
                                                deployment.bootstrap_port)
        router = Server.launch(router_launcher(dis), deployment.args["router"], base_env, host,
                               paths(paths.logs["router"]), grace)
        deployment.servers["router"] = router
        record["ports"]["router"] = router.port
        _ready_or_fail("router", router, lambda: wait_router(router, float(dis["router"]["health_timeout_s"])))
    except BaseException:
        deployment.stop()
        raise
    return deployment


def _ready_or_fail(name: str, server: Server, wait) -> None:
    try:
        wait()
    except RunFailed as failure:
        raise SideFailed(name, failure, server.excerpt()) from failure


# What a server's /get_server_info internal_states say about its own steps: SGLang's decode throughput of its
# last log window (scheduler get_internal_state); the stand-in's step count and recent step times.
OWN_STATE_KEYS = ("last_gen_throughput", "forward_ct", "last_step_ms")


def _own_numbers(info: dict) -> dict:
    states = info.get("internal_states") or []
    own = {key: [s[key] for s in states if key in s] for key in OWN_STATE_KEYS}
    standin = info.get("standin") or {}
    return {"disaggregation_mode": info.get("disaggregation_mode"), "stand_in": info.get("server") == "stand-in",
            "internal_states": {k: v for k, v in own.items() if v},
            "handoff": standin.get("disaggregation") or info.get("disaggregation")}


def side_numbers(deployment: Deployment) -> dict:
    """What each server says about itself after the load: the servers' /get_server_info (SGLang's
    ``internal_states[*].last_gen_throughput``; the stand-in's hand-off counters), the router's /workers."""
    numbers = {}
    for side in SIDES:
        server = deployment.servers[side]
        record = {"server": side, "url": server.url, "log": server.log_path.name}
        try:
            info = get_json(server.url + "/get_server_info")
        except (urllib.error.URLError, OSError, ValueError) as err:
            record["error"] = f"/get_server_info: {err}"
        else:
            record.update(_own_numbers(info))
        numbers[side] = record
    router = deployment.servers["router"]
    record = {"server": "router", "url": router.url, "log": router.log_path.name}
    try:
        workers = get_json(router.url + "/workers").get("workers", [])
        record["workers"] = [{"url": w.get("url"), "type": w.get("worker_type"), "healthy": w.get("is_healthy"),
                              "bootstrap_port": w.get("bootstrap_port")} for w in workers]
    except (urllib.error.URLError, OSError, ValueError) as err:
        record["error"] = f"/workers: {err}"
    numbers["router"] = record
    return numbers


class PDPaths(sweep.Paths):
    """One run's files: a log per server (``logs/NAME.prefill.log`` ...) and the client's files."""

    def __init__(self, out: Path, name: str):
        super().__init__(out, name)
        self.logs = {part: Path("logs") / f"{name}.{part}.log" for part in (*SIDES, "router")}

    def record(self) -> dict:
        client_files = {k: v for k, v in super().record().items() if k != "server_log"}
        return {**client_files, "server_logs": {part: str(path) for part, path in self.logs.items()}}


def verdicts(deployment: Deployment) -> None:
    """sweep.verdict on each server, the failure naming the server (decode first: it holds the requests)."""
    for name in ("decode", "prefill", "router"):
        server = deployment.servers[name]
        try:
            sweep.verdict(server)
        except RunFailed as failure:
            raise SideFailed(name, failure, server.excerpt()) from failure


def measure(spec: dict, deployment: Deployment, paths: PDPaths, tok: str) -> dict:
    """The client's timed pass through the router: ``{"row": its results row, naming the router}``."""
    router = deployment.servers["router"]
    row = sweep.client_pass(spec, router.host, router.port, paths, tok, lambda: verdicts(deployment))
    return {"row": {**row, "server": "router"}}


def run_one(spec: dict, dis: dict, run: dict, paths: PDPaths, tok: str, body=measure) -> dict:
    """One run's record: the three processes launched, ``body`` (the load, or the profile), everything stopped.

    ``server`` is "router": the client measures through it; ``servers`` holds each server's own numbers."""
    t0 = time.monotonic()
    record = {"label": run["label"], "server": "router", "levers_on": dis["levers_on"], "env": run["env"],
              **paths.record()}
    deployment = None
    try:
        deployment = launch(spec, dis, run, paths, record)
        extra = dict(body(spec, deployment, paths, tok))
        row = extra.pop("row")
        record.update(ok=True, results=[row], servers=side_numbers(deployment), **extra)
    except RunFailed as failure:
        record.update(ok=False, kind=failure.kind, error=str(failure), results=[])
        if isinstance(failure, SideFailed):
            record.update(failed_server=failure.server, log_excerpt=failure.excerpt)
        elif deployment is not None:  # the client failed with every server up: the decode server holds the requests
            record.update(failed_server=None, log_excerpt=deployment.servers["decode"].excerpt(),
                          log_excerpt_server="decode")
    finally:
        if deployment is not None:
            deployment.stop()
            record["server_status"] = {n: s.proc.returncode for n, s in deployment.servers.items()}
    record["wall_s"] = time.monotonic() - t0
    return record


def run_sweep(spec: dict, raw: dict, out: Path) -> dict:
    """Every run of the checked sweep ``spec`` (``raw``: the spec as given, for its disaggregation) in order."""
    started = time.monotonic()
    dis = validate(raw)
    out.mkdir(parents=True, exist_ok=True)
    shared = {**sweep.meta(spec), "disaggregation": dis}
    tok = sweep.tokenizer_path(spec, out)
    sweep.progress(out, {"meta": shared})
    runs, taken = [], set()
    for i, entry in enumerate(spec["runs"]):
        record = run_one(spec, dis, entry, PDPaths(out, file_label(entry["label"], taken)), tok)
        runs.append(record)
        sweep.progress(out, {"run": record})
        summary = (f"{record['results'][0]['tok_s']:.4g} tok/s through the router" if record["ok"]
                   else f"failed ({record['kind']}): {record['error']}")
        print(f"run {i + 1}/{len(spec['runs'])} {entry['label']}: {summary} ({record['wall_s']:.1f} s)",
              file=sys.stderr, flush=True)
    return {"ok": True, **shared, "tokenizer": tok, "runs": runs, "wall_s": time.monotonic() - started}


def profiled(sizes: tuple[int, int]):
    """The run body of a profile: the load through the router, ``/start_profile`` and the traces on the decode
    server (profile.profiled with the load sent elsewhere); each trace record names the decode server."""
    from . import profile

    def body(spec: dict, deployment: Deployment, paths: PDPaths, tok: str) -> dict:
        router = deployment.servers["router"]
        extra = profile.profiled(sizes, load_via=lambda _decode: router)(spec, deployment.servers["decode"],
                                                                          paths, tok)
        verdicts(deployment)
        extra["traces"] = [{**record, "server": "decode"} for record in extra["traces"]]
        return {**extra, "row": {**extra["row"], "server": "router"}, "profiled_server": "decode"}

    return body


def run_profile(spec: dict, raw: dict, out: Path) -> dict:
    """The checked profile ``spec`` on a disaggregated deployment: a one-run sweep's result plus the decode
    server's ``traces`` and ``trace_info``."""
    from . import installed, profile

    started = time.monotonic()
    dis = validate(raw)
    entry = spec["runs"][0]
    try:
        sizes = profile.world_size(side_args(spec, dis, entry, "decode", 0))
    except installed.ParseError as exc:
        raise SpecError(f"bad spec: the decode server's arguments do not parse: {exc}") from None
    out.mkdir(parents=True, exist_ok=True)
    shared = {**sweep.meta(spec), "disaggregation": dis}
    tok = sweep.tokenizer_path(spec, out)
    sweep.progress(out, {"meta": shared})
    record = run_one(spec, dis, entry, PDPaths(out, file_label(entry["label"], set())), tok, body=profiled(sizes))
    sweep.progress(out, {"run": record})
    return {"ok": True, **shared, "client_shims": client.shims_used(), "tokenizer": tok, "runs": [record],
            "traces": record.get("traces", []), "trace_info": record.get("trace_info"),
            "wall_s": time.monotonic() - started}
