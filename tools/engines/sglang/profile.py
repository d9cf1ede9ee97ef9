"""``profile``: one run whose server is profiled by its own ``/start_profile`` during a decode-heavy load.

Launch, start the client, and once its measured pass has begun (the client prints "Starting main benchmark
run" after its warm-up) ``POST /start_profile`` with output_dir OUT/traces, num_steps, activities, with_stack
and profile_by_stage; wait for every rank's trace (its decode trace when by stage), let the load finish (its
timed result is the run's results row), stop. The traces are the server's files, under the names it gave them.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

from . import client, installed, traces
from .server import RunFailed, Server
from .spec import SpecError, file_label
from .sweep import Paths, meta, progress, run_one, tokenizer_path, verdict

MAIN_PASS = "Starting main benchmark run"
TRACES_DIR = "traces"


def world_size(argv: list[str]) -> tuple[int, int]:
    """``(tp_size, tp_size * pp_size)`` of a server command line, as SGLang's own parser reads it."""
    namespace = installed.server_parser().parse_args(argv)
    return namespace.tp_size, namespace.tp_size * namespace.pp_size


def _wait_for_main_pass(proc, log_path: Path, timeout_s: float) -> None:
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if log_path.exists() and MAIN_PASS in log_path.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise RunFailed("client_failed", f"the client exited with status {proc.returncode} before its measured "
                                             f"pass began")
        time.sleep(0.2)
    raise RunFailed("timeout", f"the client's measured pass did not begin within {timeout_s:g} s")


def start_profile(server: Server, body: dict) -> str:
    request = urllib.request.Request(server.url + "/start_profile", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.read().decode(errors="replace").strip()
    except urllib.error.HTTPError as exc:
        raise RunFailed("profile_failed", f"/start_profile answered {exc.code}: "
                                          f"{exc.read().decode(errors='replace').strip()[:300]}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise RunFailed("profile_failed", f"/start_profile failed: {exc}") from None


def _wait_for_traces(server: Server, proc, folder: Path, out: Path, sizes: tuple[int, int], prof: dict) -> list[dict]:
    """Every rank's trace, or RunFailed; a trace counts once its file has stopped growing."""
    tp_size, world = sizes
    start, last = time.monotonic(), None
    while time.monotonic() - start < prof["timeout_s"]:
        records = traces.found(folder, tp_size, out)
        sizes_now = [(r["name"], (out / r["name"]).stat().st_size) for r in records]
        if traces.complete(records, world, prof["profile_by_stage"]) and sizes_now == last:
            return records
        last = sizes_now
        if not server.alive():
            raise RunFailed("crash", f"the server exited with status {server.proc.returncode} while profiling")
        if proc.poll() is not None and time.monotonic() - start > 30 and records == traces.found(folder, tp_size, out):
            break  # the load is over and nothing more is being written
        time.sleep(1.0)
    have = sorted({r["rank"] for r in traces.found(folder, tp_size, out)})
    raise RunFailed("profile_failed", f"traces of ranks {have} in {folder.name}/, expected every rank of "
                                      f"{world}{' (decode)' if prof['profile_by_stage'] else ''}")


def profiled(sizes: tuple[int, int], load_via=None):
    """The run body of a profile (sweep.run_one's ``body``) of a server of ``sizes`` (world_size's);
    ``load_via(server)``: the server the client loads instead (a disaggregated deployment's router, disagg.py)."""

    def body(spec: dict, server: Server, paths: Paths, tok: str) -> dict:
        prof, out = spec["profile"], paths.out
        folder = out / TRACES_DIR
        folder.mkdir(parents=True, exist_ok=True)
        via = load_via(server) if load_via else server
        proc = client.start(via.host, via.port, spec["load"], tok, paths(paths.client_file),
                            paths(paths.client_log))
        try:
            _wait_for_main_pass(proc, paths(paths.client_log), spec["client_timeout_s"])
            request = {"output_dir": str(folder.resolve()), "num_steps": prof["num_steps"],
                       "activities": prof["activities"], "with_stack": prof["with_stack"],
                       "profile_by_stage": prof["profile_by_stage"]}
            answer = start_profile(server, request)
            records = _wait_for_traces(server, proc, folder, out, sizes, prof)
        except RunFailed:
            proc.kill()
            proc.wait()
            verdict(server)
            raise
        row = client.finish(proc, paths(paths.client_file), paths(paths.client_log), spec["load"],
                            spec["client_timeout_s"])
        verdict(server)
        info = traces.trace_info(records, prof["profile_by_stage"], spec["load"]["concurrency"], prof["num_steps"],
                                 prof["with_stack"])
        return {"row": row, "traces": records, "trace_info": info, "profile_request": request,
                "profile_answer": answer}

    return body


def run(spec: dict, out: Path) -> dict:
    """The checked profile ``spec``: the result of a one-run sweep plus ``traces`` and ``trace_info``."""
    started = time.monotonic()
    entry = spec["runs"][0]
    try:
        sizes = world_size([*spec["server_args"], *entry["args"]])
    except installed.ParseError as exc:
        raise SpecError(f"bad spec: the server arguments do not parse: {exc}") from None
    out.mkdir(parents=True, exist_ok=True)
    shared = meta(spec)
    tok = tokenizer_path(spec, out)
    progress(out, {"meta": shared})
    record = run_one(spec, entry, Paths(out, file_label(entry["label"], set())), tok, body=profiled(sizes))
    progress(out, {"run": record})
    return {"ok": True, **shared, "client_shims": client.shims_used(), "tokenizer": tok, "runs": [record], "traces": record.get("traces", []),
            "trace_info": record.get("trace_info"), "wall_s": time.monotonic() - started}
