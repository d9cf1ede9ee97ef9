"""The first look at a real SGLang server on the GPU machine, after the carry (carry.py): does 0.5.17 start on the
scaled DeepSeek-V4 with dummy weights, answer token ids, write its /start_profile traces, and serve SGLang's
client? One command, each stage's outcome recorded whatever the next one does (issue #34).

``PYTHONPATH=.carry/site python3 -m scripts.real_sglang.smoke --out $OUT [--health-timeout S] [--no-client]``

Stages, in order, into ``OUT/smoke.json`` (plus ``OUT/server.log``, the client's JSONL and ``OUT/traces.tgz``):
1. ``missing``: imports.py's walk of the sglang found here, the third-party names this Python cannot find;
   ``check``: the adapter's check of the target (``python -m tools.engines.sglang check``: the installed
   release's own parser and environment; its ``sglang`` names the release it read);
2. ``launch``: the H100 target's server (agent/targets/dsv4-scaled-sglang-h100.yaml: its model, load format,
   arguments and environment) through the adapter's own launcher (tools/engines/sglang/server.py), seconds to
   healthy, or how it failed (the log's last error);
3. ``generate``: one request of 16 token ids for 8 new tokens (``/generate`` with ``input_ids``), its output ids;
4. ``profile``: ``POST /start_profile`` (3 steps, CPU and GPU, by stage, as profile.py posts it) under 4
   concurrent requests, then the trace files' names as traces.py parses them (``-DECODE``);
5. ``client``: SGLang's benchmark client at the target's load, as client.py runs it (skipped with --no-client or
   when the client group of the carry is not installed).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tarfile
import threading
import time
import urllib.request
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
TARGET = ROOT / "agent" / "targets" / "dsv4-scaled-sglang-h100.yaml"


def _post(url: str, body: dict, timeout: float = 120) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        text = response.read().decode()
    try:
        return json.loads(text)
    except ValueError:
        return {"text": text[:500]}


def _missing(env: dict) -> dict:
    proc = subprocess.run([sys.executable, "-m", "scripts.real_sglang.imports", "--missing"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    try:
        return {name: importers[:2] for name, importers in json.loads(proc.stdout)["missing"].items()}
    except (ValueError, KeyError):
        return {"error": (proc.stderr or proc.stdout)[-500:]}


def _check(env: dict, out: Path) -> dict:
    from agent.config import load_target
    from agent.engine_sglang import check_args

    spec = out / "check_spec.json"
    spec.write_text(json.dumps(check_args(load_target(str(TARGET))[0])["spec"]))
    proc = subprocess.run([sys.executable, "-m", "tools.engines.sglang", "check", "--spec", f"@{spec}"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"rc": proc.returncode, "error": proc.stderr[-800:]}


def _generate(url: str, tokens: int) -> dict:
    return _post(url + "/generate", {"input_ids": list(range(100, 116)),
                                     "sampling_params": {"max_new_tokens": tokens, "temperature": 0}})


def _profile(url: str, out: Path) -> dict:
    from tools.engines.sglang import traces

    folder = out / "traces"
    answer = _post(url + "/start_profile", {"output_dir": str(folder), "num_steps": 3, "activities": ["CPU", "GPU"],
                                            "with_stack": True, "profile_by_stage": True})
    load = [threading.Thread(target=_generate, args=(url, 32)) for _ in range(4)]
    for thread in load:
        thread.start()
    for thread in load:
        thread.join()
    deadline = time.monotonic() + 120
    found = []
    while time.monotonic() < deadline and not any(r["role"] == "decode" for r in found):
        time.sleep(2)
        found = traces.found(folder, 1, out)
    if found:
        with tarfile.open(out / "traces.tgz", "w:gz") as tar:
            tar.add(folder, arcname="traces")
    return {"answer": answer, "traces": found}


def _client(server, target: dict, out: Path, env: dict) -> dict:
    from tools.engines.sglang import client, tokenizer

    load = {**target["engine"]["load"], "seed": 1}
    jsonl = out / "client.jsonl"
    command = client.command(server.host, server.port, load, str(tokenizer.build(out / "tokenizer")), jsonl)
    proc = subprocess.run(command, cwd=ROOT, env={**env, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
                          capture_output=True, text=True, timeout=400)
    (out / "client.log").write_text(proc.stdout + proc.stderr)
    rows = [json.loads(line) for line in jsonl.read_text().splitlines()] if jsonl.is_file() else []
    keep = ("completed", "output_throughput", "median_tpot_ms", "median_ttft_ms", "duration")
    return {"rc": proc.returncode, "summary": {k: rows[-1].get(k) for k in keep} if rows else None,
            "tail": (proc.stderr or proc.stdout)[-800:] if proc.returncode else ""}


def keep(out: Path, result: dict) -> None:
    """smoke.json as far as the smoke got: a command killed at the device's time limit (the first launch on a
    fresh machine compiles DeepGEMM's kernels for minutes) still returns what its stages found."""
    (out / "smoke.json").write_text(json.dumps(result, indent=1, default=str) + "\n")


def run(out: Path, health_timeout: float, with_client: bool) -> dict:
    from tools.engines.sglang.server import RunFailed, Server, install_handlers

    install_handlers()
    target = yaml.safe_load(TARGET.read_text())
    server_spec = target["engine"]["server"]
    env = {**os.environ, **{k: str(v) for k, v in (target["engine"].get("env") or {}).items()}}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / ".carry" / "site"), str(ROOT), env.get("PYTHONPATH", "")])
    result: dict = {"missing": _missing(env)}
    try:
        result["check"] = _check(env, out)
    except Exception as exc:  # the agent's own modules need pydantic and PyYAML: the carry brings the first
        result["check"] = {"error": f"{type(exc).__name__}: {exc}"}
    keep(out, result)
    args = ["--model-path", server_spec["model_path"], "--load-format", server_spec["load_format"],
            *server_spec["args"]]
    server = Server.launch([sys.executable, "-m", "sglang.launch_server"], args, env, "127.0.0.1",
                           out / "server.log", grace_s=20)
    try:
        try:
            result["launch"] = {"ok": True, "healthy_after_s": round(server.wait_ready(health_timeout), 1)}
        except RunFailed as exc:
            result["launch"] = {"ok": False, "kind": exc.kind, "error": str(exc), "last_error": server.last_error()}
            return result
        finally:
            keep(out, result)
        for stage, call in (("generate", lambda: _generate(server.url, 8)), ("profile", lambda: _profile(server.url, out)),
                            ("client", lambda: _client(server, target, out, env) if with_client else {"skipped": True})):
            started = time.monotonic()
            try:
                result[stage] = call()
            except Exception as exc:  # a stage's failure is its result; the next stage still runs
                result[stage] = {"error": f"{type(exc).__name__}: {exc}"}
            result[stage + "_s"] = round(time.monotonic() - started, 1)
            keep(out, result)
        return result
    finally:
        result["server_exit"] = server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m scripts.real_sglang.smoke", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--health-timeout", type=float, default=420)
    parser.add_argument("--no-client", action="store_true")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    with_client = not args.no_client and importlib.util.find_spec("datasets") is not None
    result = run(args.out.resolve(), args.health_timeout, with_client)
    keep(args.out, result)
    print(json.dumps(result, default=str)[:6000])
    return 0 if result.get("launch", {}).get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
