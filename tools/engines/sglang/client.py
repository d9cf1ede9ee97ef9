"""SGLang's own benchmark client, ``python -m sglang.benchmark.serving``, against one server; its JSONL read.

The random-ids dataset (nothing downloaded), a local tokenizer, ``--tokenize-prompt`` (the prompt's ids are sent,
so input lengths are exact), the client's own warm-up requests at the measured concurrency, a fresh
``--output-file`` per run (the client appends) with ``--output-details`` (per-request ITLs and lengths). The hub
is kept offline in the client's environment. If the client cannot be imported as installed, the shim folder
(client_shim/) goes first on its PYTHONPATH, and the result says so.

Each run is the client's own ``__main__`` in a process of its own, forked from a server that imported the client
once for the tool call (multiprocessing's forkserver, preloaded): the import (torch, transformers and sglang, some
15 s of a CPU core) is paid once a sweep instead of once a run, and while the first server starts. What the child
runs is what ``python -m sglang.benchmark.serving ARGS`` runs (runpy, as ``-m`` does), with that command's
environment and its output in the run's client log.
"""

from __future__ import annotations

import ast
import json
import multiprocessing
import os
import runpy
import subprocess
import sys
from multiprocessing import forkserver
from pathlib import Path

from .server import RunFailed

SHIM_DIR = Path(__file__).with_name("client_shim")
MODULE = "sglang.benchmark.serving"
PRELOAD = "tools.engines.sglang.client_preload"  # what the client's forkserver imports
TREE = Path(__file__).resolve().parents[3]  # the folder that holds tools/
# Names of the summary in the JSONL that the installed version writes, with the dataclass's name where a
# release wrote that instead (0.5.23 writes total_input_tokens for BenchmarkMetrics.total_input).
FIELDS = {"output_throughput": ("output_throughput",), "median_tpot_ms": ("median_tpot_ms",),
          "p99_tpot_ms": ("p99_tpot_ms",), "median_ttft_ms": ("median_ttft_ms",), "p99_ttft_ms": ("p99_ttft_ms",),
          "median_itl_ms": ("median_itl_ms",), "p99_itl_ms": ("p99_itl_ms",), "completed": ("completed",),
          "total_input_tokens": ("total_input_tokens", "total_input"),
          "total_output_tokens": ("total_output_tokens", "total_output"), "duration": ("duration",)}


def base_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1")
    return env


def _env_with(shims: bool) -> dict[str, str]:
    env = base_env()
    if shims:
        env["PYTHONPATH"] = os.pathsep.join([str(SHIM_DIR), *filter(None, [env.get("PYTHONPATH")])])
    return env


def _imports(shims: bool) -> tuple[bool, str]:
    proc = subprocess.run([sys.executable, "-c", f"import {MODULE}"], env=_env_with(shims), capture_output=True,
                          text=True, timeout=300)
    lines = proc.stderr.strip().splitlines()
    return proc.returncode == 0, (lines[-1] if lines else "")


_SHIMS: list[list[str]] = []


def _shim_stubs() -> list[str]:
    """The shim's STUBS list, read from its file (importing it here would install the stub in this process)."""
    tree = ast.parse((SHIM_DIR / "sitecustomize.py").read_text())
    return next(ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "STUBS" for t in node.targets))


def _import_check_key() -> str:
    """What the import check's answer depends on: this Python, every installed distribution's version, the
    sglang tree and the shim (tools/box_cache.py keeps the answer by it)."""
    import importlib.metadata
    import importlib.util

    from tools import box_cache

    dists = sorted({(d.metadata["Name"] or "", d.version) for d in importlib.metadata.distributions()})
    spec = importlib.util.find_spec("sglang")
    trees = [Path(list(spec.submodule_search_locations)[0]), SHIM_DIR] if spec and spec.submodule_search_locations else [SHIM_DIR]
    return box_cache.key({"module": MODULE, "distributions": dists, "path": sys.path}, trees)


def _import_check() -> dict:
    """Whether the client imports as installed and, if not, with the shim: two imports of a few seconds each,
    so the answer is kept on the box (tools/box_cache.py) by what it depends on."""
    from tools import box_cache

    key = _import_check_key()
    found = box_cache.get("sglang-client", key)
    if found is not None:
        return found
    works, error = _imports(False)
    answer = {"as_installed": works, "error": error}
    if not works:
        answer["with_shim"], answer["shim_error"] = _imports(True)
    box_cache.put("sglang-client", key, answer)
    return answer


def shims_needed() -> list[str]:
    """The stubs the client needs on this box: [] when the real import works, else the shim's STUBS (once a
    process); RuntimeError when it fails with them too."""
    if _SHIMS:
        return _SHIMS[0]
    check = _import_check()
    if check["as_installed"]:
        _SHIMS.append([])
        return []
    if not check["with_shim"]:
        raise RuntimeError(f"{MODULE} does not import, as installed ({check['error']}) nor with the client shim "
                           f"({check['shim_error']})")
    sys.stderr.write(f"{MODULE} does not import as installed ({check['error']}): the client runs with the shim\n")
    stubs = _shim_stubs()
    _SHIMS.append(stubs)
    return stubs


def shims_used() -> list[str] | None:
    """The stubs the client ran with in this process; None when no client was started."""
    return _SHIMS[0] if _SHIMS else None


def command(host: str, port: int, load: dict, tokenizer: str, output_file: Path) -> list[str]:
    return [sys.executable, "-m", MODULE, "--backend", "sglang", "--host", host, "--port", str(port),
            "--dataset-name", "random-ids", "--random-input-len", str(load["input_len"]),
            "--random-output-len", str(load["output_len"]), "--random-range-ratio", "1.0",
            "--max-concurrency", str(load["concurrency"]), "--num-prompts", str(load["num_prompts"]),
            "--warmup-requests", str(load.get("warmup_prompts", load["concurrency"])),
            "--seed", str(load.get("seed", 1)), "--tokenizer", tokenizer, "--tokenize-prompt",
            "--output-file", str(output_file), "--output-details", "--disable-tqdm"]


_CONTEXT: list = []


def warm_up() -> None:
    """Start the client's forkserver, which imports the client in the background (the first run's start waits
    for it): call it before the first server launch, so that the import overlaps the server's start."""
    if _CONTEXT:
        return
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([PRELOAD])
    # The forkserver takes this process's environment when it starts, and the client's (the hub offline, the
    # shim first on its path, read by site at startup) must be in place before its import: set for the start
    # only. This tree goes last on its path, for the preload module alone.
    env = _env_with(bool(shims_needed()))
    env["PYTHONPATH"] = os.pathsep.join([*filter(None, [env.get("PYTHONPATH")]), str(TREE)])
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        forkserver.ensure_running()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    _CONTEXT.append(context)


def _die_with_parent() -> None:
    """Linux: SIGKILL this process when its parent (the forkserver, which exits with the tool) goes."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _client_main(argv: list[str], log_path: str) -> None:
    """The forked child: ``python -m sglang.benchmark.serving ARGV`` with stdout and stderr in ``log_path``."""
    _die_with_parent()
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    # whether the forkserver's import took (multiprocessing passes over a preload that fails): the log says
    print(f"# {MODULE}: forked from the client's forkserver, its imports "
          f"{'preloaded' if 'sglang.benchmark' in sys.modules else 'NOT preloaded (imported in this run)'}",
          flush=True)
    sys.argv = [MODULE, *argv]
    runpy.run_module(MODULE, run_name="__main__", alter_sys=True)


class ClientProcess:
    """A running client, with the calls of subprocess.Popen this module's callers make (poll, wait, kill,
    returncode: negative for a signal)."""

    def __init__(self, process: multiprocessing.Process):
        self.process = process
        self.pid = process.pid

    @property
    def returncode(self) -> int | None:
        return self.process.exitcode

    def poll(self) -> int | None:
        return self.process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self.process.join(timeout)
        if self.process.exitcode is None:
            raise subprocess.TimeoutExpired(MODULE, timeout)
        return self.process.exitcode

    def kill(self) -> None:
        if self.process.exitcode is None:
            self.process.kill()


def start(host: str, port: int, load: dict, tokenizer: str, output_file: Path, log_path: Path) -> ClientProcess:
    """The client running (its output to ``log_path``); ``output_file`` must not exist yet."""
    if output_file.exists():
        raise RuntimeError(f"{output_file} exists: the client appends, every run needs a fresh file")
    output_file.parent.mkdir(parents=True, exist_ok=True)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    warm_up()
    argv = command(host, port, load, tokenizer, output_file)[3:]  # after python -m MODULE
    process = _CONTEXT[0].Process(target=_client_main, args=(argv, str(log_path)))
    process.start()
    return ClientProcess(process)


def _last_line(path: Path, log_path: Path) -> dict:
    lines = path.read_text().strip().splitlines() if path.exists() else []
    if not lines:
        tail = log_path.read_text(errors="replace").strip().splitlines()[-1:] if log_path.exists() else []
        raise RunFailed("client_failed", f"the client wrote no result to {path.name}"
                                         f"{': ' + tail[0][:300] if tail else ''}")
    return json.loads(lines[-1])


def _field(record: dict, name: str):
    for key in FIELDS[name]:
        if key in record:
            return record[key]
    raise RunFailed("client_failed", f"the client's JSONL has none of {', '.join(FIELDS[name])}")


def per_request_tpot_ms(record: dict) -> list[float]:
    """Each successful request's time per output token after the first, from the client's own ITLs
    (``itls`` lists a request's gaps between streamed tokens: their sum over output_len - 1)."""
    samples = []
    for itls, n, error in zip(record.get("itls") or [], record.get("output_lens") or [], record.get("errors") or []):
        if not error and n and n > 1 and itls:
            samples.append(sum(itls) * 1000.0 / (n - 1))
    return samples


def row(record: dict, load: dict) -> dict:
    """The run's results row (what agent/steps/measurements.sweep_runs reads) from the client's JSONL line."""
    tok_s = _field(record, "output_throughput")
    return {"batch": load["concurrency"], "step_ms": _field(record, "median_tpot_ms"),
            "step_ms_samples": per_request_tpot_ms(record), "tok_s": tok_s, "tok_s_projected": tok_s,
            "ttft_ms_median": _field(record, "median_ttft_ms"), "ttft_ms_p99": _field(record, "p99_ttft_ms"),
            "tpot_ms_median": _field(record, "median_tpot_ms"), "tpot_ms_p99": _field(record, "p99_tpot_ms"),
            "itl_ms_median": _field(record, "median_itl_ms"), "itl_ms_p99": _field(record, "p99_itl_ms"),
            "completed": _field(record, "completed"), "prompts": load["num_prompts"],
            "total_input_tokens": _field(record, "total_input_tokens"),
            "total_output_tokens": _field(record, "total_output_tokens"), "duration_s": _field(record, "duration")}


def finish(proc: ClientProcess, output_file: Path, log_path: Path, load: dict, timeout_s: float) -> dict:
    """Wait for the client; its row, or RunFailed (client_failed: no result or a non-zero exit; incomplete:
    fewer requests completed than the prompts sent)."""
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise RunFailed("timeout", f"the client did not finish within {timeout_s:g} s") from None
    if proc.returncode != 0:
        tail = log_path.read_text(errors="replace").strip().splitlines()[-1:]
        raise RunFailed("client_failed", f"the client exited with status {proc.returncode}"
                                         f"{': ' + tail[0][:300] if tail else ''}")
    record = _last_line(output_file, log_path)
    result = row(record, load)
    if result["completed"] < load["num_prompts"]:
        errors = [e for e in record.get("errors") or [] if e]
        first = (errors[0].strip().splitlines() or [""])[-1][:300] if errors else ""
        raise RunFailed("incomplete", f"{result['completed']} of {load['num_prompts']} requests completed"
                                      f"{': ' + first if first else ''}")
    unstreamed(record)
    return result


def unstreamed(record: dict) -> None:
    """RunFailed (no_stream) when the client timed no streamed token: SGLang's client starts a request's TTFT and
    ITLs only at a chunk with text (``async_request_sglang_generate``), and a server started with
    ``--skip-tokenizer-init`` streams ids without text, so every TTFT reads 0, no ITL is recorded, and the
    client's TPOT is each request's whole latency over its tokens, its prefill and queueing included: not a decode
    step. Seen on the real sglang 0.5.17 (benchmarks/results/real-sglang-20261207/7-sweep)."""
    done = [n for n, error in zip(record.get("output_lens") or [], record.get("errors") or []) if not error and n > 1]
    ttfts = [t for t, error in zip(record.get("ttfts") or [], record.get("errors") or []) if not error]
    if done and not any(record.get("itls") or []) and not any(ttfts):
        raise RunFailed("no_stream", f"the client timed no streamed token in {len(done)} completed requests (every "
                                     f"TTFT 0, no ITL): the server streamed no text (--skip-tokenizer-init?), so the "
                                     f"client's TPOT is each request's whole latency, prefill included, not a decode step")
