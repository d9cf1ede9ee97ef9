"""The tools an investigation may call on the box, by name: how each becomes a command, and its result.

Every tool is a box-side Python module that prints one JSON object. A tool's arguments are plain
JSON data (they are logged and compared on replay); ``command`` turns them into an argument list.
"""

from __future__ import annotations

import json
import signal
from dataclasses import dataclass
from typing import Any, Callable

from agent.box.interface import OUT_DIR, Box, CommandResult
from tools.box_cli import SPEC_ENV

TAIL = 16_000  # characters of stdout/stderr kept in the log


@dataclass(frozen=True)
class ToolSpec:
    name: str
    doc: str
    command: Callable[[str, dict[str, Any]], list[str]]  # (box python, args) -> argv
    timeout_s: Callable[[dict[str, Any]], float]
    env: Callable[[dict[str, Any]], dict[str, str]] = lambda args: {}


def _survey(py: str, args: dict) -> list[str]:
    return [py, "-m", "tools.survey"]


def _engine_bench(py: str, args: dict) -> list[str]:
    return [py, "-m", "tools.engines.reference", "bench", "--spec", json.dumps(args["spec"], sort_keys=True), "--out", OUT_DIR]


def _engine_sweep(py: str, args: dict) -> list[str]:
    return [py, "-m", "tools.engines.reference", "sweep", "--spec", json.dumps(args["spec"], sort_keys=True), "--out", OUT_DIR]


def _kernel_grid(py: str, args: dict) -> list[str]:
    argv = [py, "-m", "tools.kernel_source", "--kernel", args["kernel"], "--sms", str(args["sms"])]
    if args.get("source"):
        argv += ["--source", args["source"]]
    for symbol, value in sorted(args.get("shapes", {}).items()):
        argv += ["--shape", f"{symbol}={value}"]
    if args.get("arch"):
        argv += ["--arch", args["arch"]]
    if args.get("config"):
        argv += ["--config-json", json.dumps(args["config"], sort_keys=True)]
    if args.get("ncu_csv"):  # only when given, so journals recorded before the argument replay unchanged
        argv += ["--ncu-csv", args["ncu_csv"]]
    for param, dtype in sorted(args.get("dtypes", {}).items()):  # likewise
        argv += ["--dtype", f"{param}={dtype}"]
    return argv


def _kernel_ncu(py: str, args: dict) -> list[str]:
    return [py, "-m", "tools.kernel_source.ncu_run", "measure", "--kernel", args["kernel"],
            "--spec", json.dumps(args["spec"], sort_keys=True), "--out", OUT_DIR, "--launch-skip", str(args.get("launch_skip", 0))]


def _splitk_plan(py: str, args: dict) -> list[str]:
    return [py, "-m", "tools.kernels.sparse_mla_plan", "--points", json.dumps(args["points"], sort_keys=True)]


def _gates_scan(py: str, args: dict) -> list[str]:
    argv = [py, "-m", "tools.gates", "--brief", "--sm", str(args["sm"])]
    if args.get("source"):
        argv += ["--source", args["source"]]
    if args.get("env"):  # through the tool's environment: a target's tokens on a command line every user can read
        argv += ["--env-spec", "@env"]
    if args.get("kernels"):
        argv += ["--kernels", *args["kernels"]]
    return argv


def _sglang(action: str):
    """The SGLang adapter (tools/engines/sglang). Its spec holds the servers' environment (tokens included), so it
    goes in the tool's environment (box_cli.SPEC_ENV, ``--spec @env``), not on a command line every user of the
    box can read; the spec's ``{python}`` (the same on every box, in the journal) the tool makes its own Python."""
    def command(py: str, args: dict) -> list[str]:
        argv = [py, "-m", "tools.engines.sglang", action, "--spec", "@env"]
        return argv if action == "check" else argv + ["--out", OUT_DIR]
    return command


def _in_tool_env(key: str) -> Callable[[dict], dict[str, str]]:
    """``args[key]`` as JSON in the tool's environment (box_cli.SPEC_ENV, read by ``@env``), where the command
    line would show it to every user of the box; nothing when the args have none."""
    return lambda args: {SPEC_ENV: json.dumps(args[key], sort_keys=True)} if args.get(key) is not None else {}


def _splitk(action: str):
    def command(py: str, args: dict) -> list[str]:
        argv = [py, "-m", "tools.kernels.splitk", action, "--batch", str(args["batch"]),
                "--topk", str(args["topk"]), "--heads", str(args["heads"])]
        if action == "check":
            argv += ["--device", args["device"], "--seed", str(args.get("seed", 0))]
        if "extra_topk" in args:  # one call in the engine's own form (its compressed cache, its sink)
            argv += ["--engine-call"] + (["--extra-topk", str(args["extra_topk"])] if args["extra_topk"] else [])
            argv += ["--sink"] if args.get("sink") else []
        if args.get("plan_arch"):  # the declared GPU's plan on this box (tools/kernels/splitk/declared.py)
            argv += ["--plan-arch", str(args["plan_arch"])]
        return argv
    return command


def _interpreter_on_cpu(args: dict) -> dict[str, str]:
    return {"TRITON_INTERPRET": "1"} if args.get("device") == "cpu" else {}


CATALOG: dict[str, ToolSpec] = {
    spec.name: spec
    for spec in [
        ToolSpec("box.survey", "GPUs, SMs, capability, memory, driver, software versions", _survey, lambda a: 120),
        ToolSpec("engine.bench", "reference engine: decode step times per batch size, optional trace",
                 _engine_bench, lambda a: float(a.get("timeout_s", 1200)), lambda a: dict(a.get("env", {}))),
        ToolSpec("engine.sweep", "reference engine: many runs in order in one process (weights built once), "
                 "per-run step samples", _engine_sweep, lambda a: float(a.get("timeout_s", 1200)),
                 lambda a: dict(a.get("env", {}))),
        ToolSpec("kernel.grid", "a kernel's source, launch grid, loops and resources", _kernel_grid,
                 lambda a: 600),
        ToolSpec("kernel.ncu", "Nsight Compute (launch, occupancy, speed of light, warp states) of one launch of a kernel "
                 "in one eager engine step", _kernel_ncu, lambda a: 600, lambda a: dict(a.get("env", {}))),
        ToolSpec("kernel.splitk_plan", "the split-K rewrite's tile config, splits and launch of each cache at given shapes",
                 _splitk_plan, lambda a: 300, lambda a: {"TRITON_INTERPRET": "1"} if any(p.get("device") == "cpu" for p in a["points"]) else {}),
        ToolSpec("gates.scan", "capability gates of the engine's source for an SM version", _gates_scan,
                 lambda a: 600, _in_tool_env("env")),
        ToolSpec("sglang.check", "SGLang server arguments and environment against the installed SGLang's own parser",
                 _sglang("check"), lambda a: 300, _in_tool_env("spec")),
        ToolSpec("sglang.sweep", "SGLang server: launched, loaded by SGLang's client and stopped for each run, in order",
                 _sglang("sweep"), lambda a: float(a.get("timeout_s", 1800)), _in_tool_env("spec")),
        ToolSpec("sglang.profile", "SGLang server: one trace per rank by /start_profile under a decode-heavy load",
                 _sglang("profile"), lambda a: float(a.get("timeout_s", 1800)), _in_tool_env("spec")),
        ToolSpec("kernel.splitk_check", "split-K kernel against the float32 reference and upstream",
                 _splitk("check"), lambda a: 1800, _interpreter_on_cpu),
        ToolSpec("kernel.splitk_bench", "split-K kernel and upstream timed by CUDA-graph replay",
                 _splitk("bench"), lambda a: 900),
    ]
}


def run_tool(box: Box, name: str, args: dict[str, Any], watch=None) -> tuple[dict[str, Any], CommandResult]:
    """Run one tool on the box. Returns the result record for the log, and the raw command result.

    The record: ok, data (the tool's JSON, or null), rc, duration_s, timed_out, error, argv,
    stdout/stderr tails. ``ok`` is true only when the command exited 0 and printed JSON with no
    ``"ok": false``.
    """
    spec = CATALOG[name]
    argv = spec.command(box.python, args)
    # ``watch``: looks at the output folder while the tool runs, on a box that offers it (LocalBox.run)
    result = box.run(argv, timeout_s=spec.timeout_s(args), env=spec.env(args), **({"watch": watch} if watch else {}))
    data, parse_error = _parse_json(result.stdout)
    error = result.error
    if error is None and result.timed_out:
        error = f"timed out after {spec.timeout_s(args):.3g} s (its process group was killed)" + _tail_note(result.stderr)
    elif error is None and result.rc is not None and result.rc < 0:
        error = f"killed by {_signal_name(-result.rc)}" + _tail_note(result.stderr)
    elif error is None and result.rc != 0:
        reason = (data or {}).get("error") if isinstance(data, dict) else None
        error = f"exit {result.rc}: {reason or _last_line(result.stderr) or 'no output'}"
    elif error is None and parse_error:
        error = parse_error
    elif error is None and isinstance(data, dict) and data.get("ok") is False:
        error = data.get("error") or "the tool reported failure"
    record = {
        "ok": error is None,
        "data": data,
        "error": error,
        "rc": result.rc,
        "timed_out": result.timed_out,
        "duration_s": round(result.duration_s, 3),
        "argv": result.argv,
        "stdout_tail": result.stdout[-TAIL:] if data is None else "",
        "stderr_tail": result.stderr[-TAIL:],
    }
    return record, result


def _parse_json(stdout: str) -> tuple[Any, str | None]:
    text = stdout.strip()
    if not text:
        return None, "the tool printed nothing on stdout"
    try:
        return json.loads(text), None
    except json.JSONDecodeError:
        pass
    last = text.splitlines()[-1]
    try:
        return json.loads(last), None
    except json.JSONDecodeError as exc:
        return None, f"the tool's stdout is not JSON ({exc.msg})"


def _signal_name(number: int) -> str:
    try:
        name = signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
    # the kernel's OOM killer sends SIGKILL; a box that ran out of memory reads like this
    return name + (" (out of memory? the OOM killer sends it)" if number == signal.SIGKILL else "")


def _tail_note(stderr: str) -> str:
    last = _last_line(stderr)
    return f"; stderr ends: {last}" if last else ""


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:500] if lines else ""
