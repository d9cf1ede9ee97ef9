"""``sweep``: each run in order on a server of its own: launch, wait healthy, SGLang's client, stop.

A run that fails (the server exits or is not healthy in time, runs out of memory, logs a traceback, dies
under load, or fewer requests complete than were sent) is that run's record, ``ok: false`` with its kind and
the server log's last lines; the sweep goes on. Every server log and client JSONL stays under --out, and each
run's record is appended to PROGRESS_FILE as it ends.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

from . import client, installed, tokenizer
from .server import RunFailed, Server
from .spec import SpecError, file_label

PROGRESS_FILE = "sweep_runs.jsonl"


def device_info() -> dict:
    """The box's host and GPUs as nvidia-smi lists them ([] where there is none)."""
    gpus = []
    if shutil.which("nvidia-smi"):
        proc = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=60)
        gpus = [dict(zip(("name", "memory", "driver"), (p.strip() for p in line.split(","))))
                for line in proc.stdout.splitlines() if line.strip()]
    return {"host": platform.node(), "gpus": gpus, "python": sys.version.split()[0]}


def progress(out: Path, record: dict) -> None:
    with open(out / PROGRESS_FILE, "a") as handle:
        handle.write(json.dumps(record, sort_keys=True) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def tokenizer_path(spec: dict, out: Path) -> str:
    """The spec's tokenizer, or one built under --out (nothing downloaded)."""
    if spec["tokenizer"]:
        if not Path(spec["tokenizer"]).exists():
            raise SpecError(f"bad spec: tokenizer {spec['tokenizer']} does not exist on this box")
        return spec["tokenizer"]
    return str(tokenizer.build(out / "tokenizer"))


class Paths:
    """Where one run's files go under --out (names relative to it in the record)."""

    def __init__(self, out: Path, name: str):
        self.out = out
        self.server_log, self.client_log = Path("logs") / f"{name}.server.log", Path("logs") / f"{name}.client.log"
        self.client_file = Path("client") / f"{name}.jsonl"

    def __call__(self, relative: Path) -> Path:
        return self.out / relative

    def record(self) -> dict:
        return {"server_log": str(self.server_log), "client_log": str(self.client_log),
                "client_file": str(self.client_file)}


def launch(spec: dict, run: dict, paths: Paths) -> Server:
    env = {**os.environ, **spec["env"], **run["env"]}
    return Server.launch(spec["launcher"], [*spec["server_args"], *run["args"]], env, spec["host"],
                         paths(paths.server_log), spec["stop_grace_s"])


def verdict(server: Server) -> None:
    """RunFailed when the server died under load, or ran out of memory or logged a traceback once healthy."""
    if server.log_says_oom(since_ready=True):
        raise RunFailed("oom", f"the server logged out of memory: {server.last_error()}")
    if not server.alive():
        raise RunFailed("crash", f"the server exited with status {server.proc.returncode} under load"
                                 f"{': ' + server.last_error() if server.last_error() else ''}")
    if server.log_has_traceback(since_ready=True):
        raise RunFailed("crash", f"the server logged a traceback: {server.last_error() or '(no error line)'}")


def client_pass(spec: dict, host: str, port: int, paths, tok: str, check) -> dict:
    """The client's timed pass against ``host:port``, then ``check()`` of the servers behind it (which
    raises RunFailed for one that died): the results row."""
    proc = client.start(host, port, spec["load"], tok, paths(paths.client_file), paths(paths.client_log))
    try:
        row = client.finish(proc, paths(paths.client_file), paths(paths.client_log), spec["load"],
                            spec["client_timeout_s"])
    except RunFailed:
        check()  # a server that died explains the client's failure better than the client does
        raise
    check()
    return row


def measure(spec: dict, server: Server, paths: Paths, tok: str) -> dict:
    """The client's timed pass against a healthy server: ``{"row": the results row}``."""
    return {"row": client_pass(spec, server.host, server.port, paths, tok, lambda: verdict(server))}


def run_one(spec: dict, run: dict, paths: Paths, tok: str, body=measure) -> dict:
    """One run's record; ``body(spec, server, paths, tok)`` returns ``{"row": results row, **more record fields}``."""
    t0 = time.monotonic()
    record = {"label": run["label"], "server": "single", "args": [*spec["server_args"], *run["args"]],
              "env": run["env"], **paths.record()}
    server = None
    try:
        server = launch(spec, run, paths)
        record["port"] = server.port
        record["ready_s"] = server.wait_ready(spec["health_timeout_s"])
        extra = dict(body(spec, server, paths, tok))
        row = extra.pop("row")
        record.update(ok=True, results=[row], **extra)
    except RunFailed as failure:
        record.update(ok=False, kind=failure.kind, error=str(failure), results=[])
        if server is not None:
            record["log_excerpt"] = server.excerpt()
    finally:
        if server is not None:
            record["server_status"] = server.stop()
    record["wall_s"] = time.monotonic() - t0
    return record


def meta(spec: dict) -> dict:
    return {"engine": "sglang", "device": device_info(), "sglang": installed.info(), "launcher": spec["launcher"],
            "load": spec["load"]}


def run(spec: dict, out: Path) -> dict:
    """Every run of the checked sweep ``spec`` in order; the result object (``ok`` true, ``runs``)."""
    started = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    shared = meta(spec)
    tok = tokenizer_path(spec, out)
    progress(out, {"meta": shared})
    runs, taken = [], set()
    for i, entry in enumerate(spec["runs"]):
        record = run_one(spec, entry, Paths(out, file_label(entry["label"], taken)), tok)
        runs.append(record)
        progress(out, {"run": record})
        summary = (f"{record['results'][0]['tok_s']:.4g} tok/s" if record["ok"]
                   else f"failed ({record['kind']}): {record['error']}")
        print(f"run {i + 1}/{len(spec['runs'])} {entry['label']}: {summary} ({record['wall_s']:.1f} s)",
              file=sys.stderr, flush=True)
    return {"ok": True, **shared, "client_shims": client.shims_used(), "tokenizer": tok, "runs": runs,
            "wall_s": time.monotonic() - started}
